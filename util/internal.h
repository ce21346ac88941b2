/*
 * internal.h — shared between util/ files only (and their unit tests).
 */
#ifndef LR_UTIL_INTERNAL_H
#define LR_UTIL_INTERNAL_H

#include "util.h"

/* The built-in SHA-256 lr_sha256 uses for inputs up to 4 KiB (no libcrypto). */
void lr__sha256_small(const void *p, size_t n, unsigned char out[LR_SHA256_LEN]);

#endif
