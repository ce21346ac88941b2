/*
 * executor.h — sandboxed executors (host/executor.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_EXECUTOR_H
#define LR_HOST_EXECUTOR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"
#include "proc.h"

/*
 * Executors run commands confined by a profile (sandbox/sandbox.h). A set
 * belongs to one profile: it validates the profile, probes the machine,
 * keeps the guarantee report (construction fails when the profile needs a
 * guarantee the machine lacks), owns a scratch root and the grants store,
 * and hands out at most max executors, one per key, each with its own HOME
 * and TMPDIR under the scratch root.
 *
 * One run: the request plus the profile (plus the grants it redeems) become
 * an lr_sbx_spec (lr_sbx_build_spec in sandbox/build.c), sealed in a
 * memfd and given as fd 3 to "/proc/self/exe __sandbox-helper" spawned
 * through lr_proc_spawn (empty environment; the target's is in the spec).
 * The helper leads its own process group and is the parent of the
 * sandbox's pid 1, so killing the group (timeout, cancel, close) ends the
 * whole tree. From a set's second lr_executor_run on, the helper is forked
 * by the set's pre-forked helper ("__sandbox-helper --zygote", exec'd once
 * per set: sandbox/zygote.c) instead, with the same fds and lifeline;
 * lr_executor_launch_init callers that spawn l.proc themselves exec as
 * before. A set told lr_executor_set_fork_helper forks its helpers from
 * the host itself while the host has no thread (`luarig sandbox run`).
 */
struct lr_profile;
struct lr_sbx_caps;
struct lr_sbx_spec;
struct lr_sbx_report;
struct lr_protect_plan;
struct lr_protect_tree;
struct lr_grants;
struct lr_executor_set;
struct lr_executor;
struct lr_exec;

/* The request of one run and the dirs and grants of its executor: sandbox/sandbox.h. */
struct lr_exec_request;
struct lr_exec_ctx;

/*
 * A set. profile is copied. scratch_root must not exist (its parent must):
 * it is created 0700 and removed with everything in it by
 * lr_executor_set_free; NULL makes one under $TMPDIR (or /tmp). max: the
 * number of executors get may create (0: 16). Errors: -EINVAL (profile
 * invalid), LR_EREFUSED (a required guarantee is missing), -errno.
 */
int lr_executor_set_new(struct lr_loop *loop, const struct lr_profile *p,
			const char *scratch_root, size_t max, struct lr_executor_set **out,
			struct lr_err *err);
/*
 * Ends every run still going and waits until each is gone (and every
 * process closed before on the loop: lr_proc_reap_all), removes the
 * scratch root (following no symlink), frees. Accepts NULL.
 */
void lr_executor_set_free(struct lr_executor_set *s);
/*
 * on: the helper of each run the set launches itself (lr_executor_launch_init,
 * not through the pre-forked one) is a forked copy of the host that calls
 * lr_sbx_helper_main, instead of an exec of /proc/self/exe, whenever the
 * host has never started a thread (host/proc.h, fork_main: the same fds,
 * signal state and empty environment; an exec otherwise). It saves the
 * exec and the dynamic link of the whole binary (~1.5 ms), and suits a
 * host that is small and single-threaded when it runs, such as `luarig
 * sandbox run` (no Lua state): the copy holds the host's memory until its
 * own fork of the target execs.
 */
void lr_executor_set_fork_helper(struct lr_executor_set *s, int on);
const char *lr_executor_set_root(const struct lr_executor_set *s);
const struct lr_sbx_report *lr_executor_set_report(const struct lr_executor_set *s);
const struct lr_profile *lr_executor_set_profile(const struct lr_executor_set *s);
/* The set's grant store: the host mints there after a gate approval. */
struct lr_grants *lr_executor_set_grants(struct lr_executor_set *s);
/*
 * The executor for key ([A-Za-z0-9_.-]{1,64}), created on first use with
 * HOME and TMPDIR dirs of its own. Borrowed: lives as long as the set.
 * Errors: -EINVAL (bad key), LR_ETOOBIG (the set is full), -errno.
 */
int lr_executor_get(struct lr_executor_set *s, const char *key, struct lr_executor **out,
		    struct lr_err *err);
uint64_t lr_executor_id(const struct lr_executor *e);
const char *lr_executor_home(const struct lr_executor *e);
const char *lr_executor_tmpdir(const struct lr_executor *e);
const char *lr_executor_key(const struct lr_executor *e);
/* The profile's fingerprint (grants bind to it). */
const char *lr_executor_fingerprint(const struct lr_executor *e);
/* Ends this executor's runs still going (they complete as aborted); the executor stays usable. */
void lr_executor_abort(struct lr_executor *e);

/*
 * Everything needed to spawn the helper for one request: grants redeemed,
 * spec built and sealed. proc has file, argv, envp (empty), extra_fds (the
 * memfd as fd 3) and cwd set; the caller sets stdio, caps, timeout and
 * on_event, then calls lr_proc_spawn. Do not copy (proc points into it).
 * Release after the spawn (the child holds its own copy of the memfd).
 */
struct lr_exec_launch {
	int spec_fd;
	/*
	 * The helper's fds 3, 4, 5: the sealed spec, the read end of the run's
	 * lifeline, and the control socket (with a proxy). proc.lifeline_fd is
	 * the lifeline's write end: the proc keeps a copy, so that ending the
	 * proc (or the host) ends every process of the run.
	 */
	int fds[3];
	int life_w;
	struct lr_proc_opts proc;
	int unconfined;
	/*
	 * With network through the proxy: the host end of the helper's control
	 * socket (fd 4 in the helper; the listeners arrive on it), and the
	 * allow-list (owned, "host:port" patterns; allow_any: every public
	 * target). -1 / empty otherwise. lr_executor_run serves the proxy; a
	 * caller that spawns l.proc itself takes it with lr_exec_proxy_take.
	 */
	int ctl_fd;
	char **allow;
	size_t nallow;
	int allow_any;
	struct lr_exec_after *after; /* see lr_exec_after_finish */
};
int lr_executor_launch_init(struct lr_executor *e, const struct lr_exec_request *r,
			    struct lr_exec_launch *l, struct lr_err *err);
void lr_executor_launch_release(struct lr_exec_launch *l);

/*
 * What a launch leaves to do once its command is over (l->after, NULL when
 * nothing): the check after the run (a .git or bare repository that
 * appeared inside a repository of a writable root, a protected name that
 * appeared at the top of a repository: moved aside) and the placeholders
 * removed. lr_exec_after_finish does both once and frees a; moved (may be
 * NULL) gets one line per entry moved aside. 0, or -errno / LR_ETOOBIG with
 * err. lr_executor_run does it itself; a caller that spawns l.proc on its
 * own takes l.after (setting it NULL) and finishes it when the process is
 * gone; launch_release finishes one that is left.
 */
struct lr_exec_after;
int lr_exec_after_finish(struct lr_exec_after *a, struct lr_buf *moved, struct lr_err *err);

/*
 * The egress proxy of a launch whose process the caller spawns itself (a
 * long-lived child such as an MCP server): takes l->ctl_fd and the allow-list
 * (setting them -1 / empty), watches for the helper's listeners on the loop and
 * serves them as lr_executor_run would, with the same rules. *out is NULL when
 * the launch has no proxy (0 returned). The caller frees the proxy with
 * lr_exec_proxy_free once the process is gone (which closes its connections);
 * lr_exec_proxy_log is its verdicts, one line each, as a run's net_log (borrowed
 * until the free). 0, or -errno with err.
 */
struct lr_exec_proxy;
int lr_exec_proxy_take(struct lr_executor *e, struct lr_exec_launch *l, struct lr_exec_proxy **out,
		       struct lr_err *err);
const struct lr_buf *lr_exec_proxy_log(const struct lr_exec_proxy *p);
void lr_exec_proxy_free(struct lr_exec_proxy *p);

/*
 * A run: starts the helper and collects its output, each stream capped at
 * output_limit as head + tail with a line "[… N bytes omitted …]" between
 * (reading goes on to the end). done(x, arg) runs on the loop once the run
 * is over (never inside this call; never after lr_exec_free). On failure
 * returns LR_EREFUSED, LR_ENOTFOUND, -errno with err, and done never runs.
 */
struct lr_exec_result {
	int code;            /* exit status, or -1 */
	int signo;           /* the signal that ended the helper, or 0 */
	int timed_out;
	int truncated;       /* either stream lost bytes to the cap */
	int setup_failed;    /* the helper exited 126 before exec; err holds its message */
	int aborted;         /* the set was freed while the run went on, or the pre-forked
				helper that started it died (its status unknown); err says so */
	struct lr_buf out, err_out; /* stdout, stderr (empty with inherit_stdio) */
	struct lr_buf net_log;      /* the egress proxy's verdicts, one line each:
				       "allow|deny|fail connect|http|dns TARGET: reason" */
	struct lr_buf moved;        /* what the check after the run moved aside, one line each:
				       "'PATH' moved to 'NEW': why" (and its failure, if any) */
	struct lr_err err;   /* what went wrong, when anything did */
};
int lr_executor_run(struct lr_executor *e, const struct lr_exec_request *r,
		    void (*done)(struct lr_exec *x, void *arg), void *arg, struct lr_exec **out,
		    struct lr_err *err);
const struct lr_exec_result *lr_exec_result(const struct lr_exec *x);
pid_t lr_exec_pid(const struct lr_exec *x);
/* Kills the tree if it still runs, reaps, frees. Accepts NULL. */
void lr_exec_free(struct lr_exec *x);

#endif
