/*
 * internal.h — shared between sandbox/ files only (and their unit tests).
 */
#ifndef LR_SANDBOX_INTERNAL_H
#define LR_SANDBOX_INTERNAL_H

#include "sandbox.h"

/*
 * helper.c: as root, a detached read-only clone of /etc, idmapped so that
 * every owner is one the target is not. A mount fd, or -errno. The probe
 * tries it; the helper attaches it for spec etc_idmap.
 */
int lr__sbx_etc_idmapped(void);

/* protect.c: how recent a change must be not to be trusted, ns (tests set 0). */
extern int64_t lr__protect_recent_ns;

#endif
