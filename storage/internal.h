/*
 * internal.h — shared between storage/ files only.
 */
#ifndef LR_STORAGE_INTERNAL_H
#define LR_STORAGE_INTERNAL_H

#include "storage.h"

/* Backends embed this at the start of their handle. */
#define LR_STORE_HEAD struct lr_store base

/* nats.c: url with any user information replaced by "***" (for messages). */
void lr__nats_redact(const char *url, char *out, size_t cap);

#endif
