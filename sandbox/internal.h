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
/*
 * helper.c: the user namespace that idmapping uses (it maps only 0 to
 * 65534 and holds no process): an fd, or -errno. The zygote makes it once
 * and gives each copy a dup in lr__sbx_idmap_ns (-1: none), which
 * lr__sbx_etc_idmapped then uses (and closes) instead of making one.
 */
int lr__sbx_idmap_userns(void);
extern int lr__sbx_idmap_ns;

/*
 * probe.c: the user's own runtime directory (root: /run/luarig; others:
 * $XDG_RUNTIME_DIR/luarig or /tmp/luarig-UID), made if missing, opened
 * without following links and returned only when it is a directory of the
 * euid's with no group or other bits: an fd the caller closes, or -1.
 */
int lr__sbx_runtime_dir(void);

/*
 * probe.c: the user's own runtime directory (root: /run/luarig; others:
 * $XDG_RUNTIME_DIR/luarig or /tmp/luarig-UID), made if missing, opened
 * without following links and returned only when it is a directory of the
 * euid's with no group or other bits: an fd the caller closes, or -1.
 */
int lr__sbx_runtime_dir(void);

/* protect.c: how recent a change must be not to be trusted, ns (tests set 0). */
extern int64_t lr__protect_recent_ns;
/*
 * protect.c: for tests, a directory to make the spare placeholders'
 * directory in (as luarig-spare-EUID; NULL: "spare" in the runtime
 * directory); and forgetting the one opened (the next run opens and checks
 * it again).
 */
extern const char *lr__protect_spare_parent;
/* protect.c, for tests: called with an entry's name after its check, before the rename that lends it. */
extern void (*lr__protect_spare_hook)(const char *name);
void lr__protect_spare_reset(void);

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
	__typeof__(seccomp_export_bpf) *export_bpf;
};
extern struct lr__seccomp lr__scmp;
int lr__seccomp_open(const char **why);
/*
 * The confinement filter (docs/threat-model.md): kernel surfaces, namespace
 * and mount calls, and socket families beyond UNIX, TCP and UDP refused;
 * inet_ok keeps IPv4/IPv6 TCP and UDP (tier A, or host networking). 0 and
 * *out (the caller releases it), or -errno / LR_EUNAVAILABLE with *why.
 */
int lr__seccomp_build(int inet_ok, scmp_filter_ctx *out, const char **why);
/*
 * The same filter compiled to a BPF program (struct sock_filter[]), made
 * once per process and inet_ok and kept: *prog is borrowed for the life of
 * the process. Any thread. 0, or -errno / LR_EUNAVAILABLE with *why.
 */
int lr__seccomp_bpf(int inet_ok, const unsigned char **prog, size_t *len, const char **why);

#endif
