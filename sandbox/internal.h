/*
 * internal.h — shared between sandbox/ files only (and their unit tests).
 */
#ifndef LR_SANDBOX_INTERNAL_H
#define LR_SANDBOX_INTERNAL_H

#include "sandbox.h"

#include <seccomp.h>

/*
 * helper.c: as root, a detached read-only clone of /etc, idmapped so that
 * every owner is one the target is not. A mount fd, or -errno. The probe
 * tries it; the helper attaches it for spec etc_idmap.
 */
int lr__sbx_etc_idmapped(void);

/* protect.c: how recent a change must be not to be trusted, ns (tests set 0). */
extern int64_t lr__protect_recent_ns;

/*
 * seccomp.c: libseccomp, opened on first use from any thread. The
 * functions in lr__scmp are valid after lr__seccomp_open returned 0; on
 * LR_EUNAVAILABLE *why (static) says which library or symbol is missing.
 */
struct lr__seccomp {
	__typeof__(seccomp_init) *init;
	__typeof__(seccomp_rule_add) *rule_add;
	__typeof__(seccomp_load) *load;
	__typeof__(seccomp_release) *release;
	__typeof__(seccomp_syscall_resolve_name) *resolve;
};
extern struct lr__seccomp lr__scmp;
int lr__seccomp_open(const char **why);

#endif
