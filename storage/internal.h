/*
 * internal.h — shared between storage/ files only.
 */
#ifndef LR_STORAGE_INTERNAL_H
#define LR_STORAGE_INTERNAL_H

#include "storage.h"

/* Backends embed this at the start of their handle. */
#define LR_STORE_HEAD struct lr_store base

#endif
