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
 * A prepared copy (zygote.c, helper.c; docs/design/sandbox.md, "A warm
 * executor"): a helper forked by the zygote ahead of a run, which enters
 * the namespaces and builds the view of one spec, then waits. At the next
 * request whose spec has the same view (lr__sbx_same_view), the zygote
 * hands it the run: one struct lr__sbx_standby_msg to the helper with the
 * run's stderr and lifeline, one to the reaper with its stdin, stdout,
 * stderr and spec (SCM_RIGHTS, in those orders). The reaper decodes that
 * spec, checks the view again, binds the run's protected paths and starts
 * the target as any reaper does; when the target and everything else in
 * the namespace are gone it sends one struct lr__sbx_standby_end. Each
 * copy serves one run.
 */
#define LR__SBX_STANDBY_MAGIC 0x6c727331u /* "lrs1" */
struct lr__sbx_standby_msg {
	uint32_t magic;
	uint32_t nfds;
};
/*
 * The reaper's last word on its socket, once the run's namespace is empty:
 * code, the exit status the copy will have (the target's, 128+N for a
 * signal), so that the zygote says EXITED before the copy's exit has torn
 * its namespaces down.
 */
struct lr__sbx_standby_end {
	uint32_t magic;
	int32_t code;
};
/*
 * A mount's identity: its source's st_dev and st_ino and, for a mask (a
 * source that is a character device, /dev/null), the masked path's
 * (dst on the host; 0 and 0 otherwise), since a file renamed over a
 * masked one would not be covered by a mask placed before.
 */
struct lr__sbx_ident {
	uint64_t dev, ino;
	uint64_t ddev, dino;
};
/*
 * helper.c: the spec from fd, which must be a sealed memfd (sealed against
 * every change) of at most LR_SBX_SPEC_MAX bytes, read whole without moving
 * its offset: a malloc'd buffer and *len, or NULL with *err (an errno, or 0)
 * and *why. The helper and the copies it runs in read it so; the zygote reads
 * a request's spec so, to tell whether a prepared copy can take it.
 */
char *lr__sbx_read_sealed(int fd, size_t *len, int *err, const char **why);
/* The fds of a received message's SCM_RIGHTS, at most max kept (the rest closed): how many. */
struct msghdr;
int lr__sbx_take_fds(struct msghdr *mh, int *fds, int max);
/* A zygote's fork as a freshly spawned process: every signal's default disposition, none blocked. */
void lr__sbx_as_spawned(void);
/*
 * Whether a spec's run may be prepared ahead: tier A, confined, no network
 * (no proxy), no cgroup, the seccomp filter compiled by the host.
 */
int lr__sbx_standby_ok(const struct lr_sbx_spec *s);
/*
 * Whether two specs make the same view: everything the helper and the
 * reaper use before the target (the namespaces' ids, the mounts in order,
 * /etc, the sizes of /tmp, /run and /dev/shm). The run's own fields
 * (argv, environment, cwd, rlimits, Landlock rules, the protected paths,
 * the filter) may differ: a prepared copy takes them from its run's spec.
 */
int lr__sbx_same_view(const struct lr_sbx_spec *a, const struct lr_sbx_spec *b);
/*
 * In the zygote's fork: fds 0-2 /dev/null, hsock and rsock the copy's ends
 * (close-on-exec), nothing else open but lr__sbx_idmap_ns; its own process
 * group, default signals, the parent death signal set. want: per mount of
 * s, the identity of its source as the zygote saw it. Never returns.
 */
__attribute__((noreturn)) void lr__sbx_standby_main(struct lr_sbx_spec *s,
						    const struct lr__sbx_ident *want, int hsock,
						    int rsock, pid_t zygote);

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
 * The same filter as a BPF program (struct sock_filter[]): the one built
 * into luarig (lr__seccomp_baked), or, in a build without it, compiled once
 * per process and inet_ok and kept. *prog is borrowed for the life of the
 * process. Any thread. 0, or -errno / LR_EUNAVAILABLE with *why.
 */
int lr__seccomp_bpf(int inet_ok, const unsigned char **prog, size_t *len, const char **why);
/*
 * The same programs compiled when luarig was built (tools/seccompgen.c
 * writes them into build/gen/seccomp_bpf.c), for the architecture it was
 * built for: lr__seccomp_bpf hands them out without opening libseccomp.
 * len 0: none was made (no libseccomp at build time); then it compiles.
 */
struct lr__seccomp_baked {
	const unsigned char *prog[2]; /* [inet_ok] */
	size_t len[2];
};
extern const struct lr__seccomp_baked lr__seccomp_baked;
/* A fresh compile with libseccomp, nothing kept or baked used (the caller frees *prog). */
int lr__seccomp_compile(int inet_ok, unsigned char **prog, size_t *len, const char **why);

#endif
