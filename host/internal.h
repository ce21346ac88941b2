/*
 * internal.h — shared between host/ files only.
 */
#ifndef LR_HOST_INTERNAL_H
#define LR_HOST_INTERNAL_H

#include "host.h"

#endif
