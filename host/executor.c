/*
 * executor.c — sandboxed executors: sets of executors per profile, each
 * with its own HOME and TMPDIR under a scratch root, and running the
 * confinement helper on the loop.
 *
 * The spec of one run is built by sandbox/build.c (lr_sbx_build_spec).
 * This side redeems the run's grants, seals the encoded spec in a memfd
 * and spawns "/proc/self/exe __sandbox-helper" through host/proc.c with
 * the memfd as fd 3; the helper does every privileged step in its own
 * single-threaded process (docs/sandbox.md).
 */
#include "executor.h"
#include "egress.h"

#include "../sandbox/sandbox.h"

#include <dirent.h>
#include <poll.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

#define DEFAULT_OUTPUT_LIMIT (1u << 20)
/* the proxy and the DNS stub on the sandbox's own loopback */
#define SANDBOX_PROXY_PORT 3128
#define SANDBOX_DNS_PORT 53
#define DEFAULT_MAX 16
#define PIPE_CHUNK (64u << 10)
/* Removing the scratch root: deeper trees are left behind (and reported by the return value). */
#define RM_DEPTH 256

/* ---- removing a scratch tree ---- */

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6, the same number on every architecture */
#endif

/*
 * chmod of the file open as the O_PATH handle h: fchmodat2 with
 * AT_EMPTY_PATH, or before Linux 6.6 the handle's /proc/self/fd link (a
 * magic link: it names the open file itself, it is not resolved again).
 */
static int chmod_handle(int h, mode_t mode)
{
	if (syscall(SYS_fchmodat2, h, "", mode, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL)
		return -errno;
	char link[32];
	snprintf(link, sizeof link, "/proc/self/fd/%d", h);
	return chmod(link, mode) == 0 ? 0 : -errno;
}

/*
 * name in dfd opened for reading as a directory, without following a
 * symlink at any step, even if name is swapped meanwhile (a process of the
 * run that is still dying may do that): an O_PATH handle of exactly what
 * the name is now, a directory made 0700 through that handle when it is not
 * (a command may leave a 000 directory behind), then that directory
 * reopened from the handle. -ENOTDIR when name is not a directory.
 */
static int open_dir_here(int dfd, const char *name)
{
	int h = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (h < 0)
		return -errno;
	struct stat st;
	int rc = fstat(h, &st) < 0 ? -errno : S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
	if (!rc && (st.st_mode & 0700) != 0700)
		rc = chmod_handle(h, 0700);
	int d = rc ? -1 : openat(h, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!rc && d < 0)
		rc = -errno;
	close(h);
	return rc ? rc : d;
}

/*
 * Removes everything below the directory open as dfd. Every step is
 * relative to an open directory and follows no symlink: a symlink is
 * removed as itself, and a name swapped for one while the walk runs leads
 * nowhere outside the tree. Returns 0 or the first error.
 */
static int rm_below(int dfd, int depth)
{
	if (depth > RM_DEPTH) {
		close(dfd);
		return -ELOOP;
	}
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		const char *n = de->d_name;
		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		int sub = open_dir_here(dirfd(d), n);
		if (sub >= 0) {
			int r = rm_below(sub, depth + 1);
			if (r && !rc)
				rc = r;
			if (unlinkat(dirfd(d), n, AT_REMOVEDIR) == 0)
				continue;
			if (errno != ENOTDIR) { /* not swapped for a non-directory meanwhile */
				if (!rc)
					rc = -errno;
				continue;
			}
		} else if (sub != -ENOTDIR) {
			if (sub != -ENOENT && !rc)
				rc = sub;
			continue;
		}
		if (unlinkat(dirfd(d), n, 0) != 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	closedir(d);
	return rc;
}

static int rm_tree(const char *path)
{
	int fd = open_dir_here(AT_FDCWD, path);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	int rc = rm_below(fd, 0);
	if (rmdir(path) != 0 && !rc)
		rc = -errno;
	return rc;
}

/* ---- sets and executors ---- */

struct lr_executor {
	struct lr_executor_set *set;
	uint64_t id;
	char key[65];
	char *home, *tmpdir;
	struct lr_executor *next;
};

struct lr_executor_set {
	struct lr_loop *loop;
	struct lr_profile profile;
	char fingerprint[65];
	const struct lr_sbx_caps *caps;
	struct lr_sbx_report report;
	struct lr_grants *grants;
	char *root;
	size_t max, count;
	struct lr_executor *executors;
	struct lr_exec *runs; /* live runs, killed when the set is freed */
	struct lr_protect_tree *protect_cache; /* the last walk of the writable roots */
	/* the pre-forked helper (sandbox/zygote.c), started at the second run */
	struct zygote *zygote;
	int zygote_failed; /* could not start, or died: every run execs its own helper */
	uint64_t nstarted;  /* runs started by lr_executor_run */
	int fork_helper;    /* lr_executor_set_fork_helper */
};

struct capture {
	struct lr_buf head;
	char *ring;
	size_t ring_cap, ring_len, ring_start;
	uint64_t total;
};

struct lr_exec {
	struct lr_executor_set *set;
	struct lr_executor *owner;
	struct lr_proc *proc;
	struct lr_exec_result res;
	struct capture cap[3];
	int inherit, finished;
	struct lr_defer defer;
	void (*done)(struct lr_exec *x, void *arg);
	void *arg;
	struct lr_exec *next, *prev;
	/* network through the egress proxy (docs/sandbox.md) */
	int ctl_fd;                 /* the listeners arrive here, or -1 */
	struct lr_watch ctl_watch;
	int ctl_watching;
	struct lr_egress *egress;
	char **allow;
	size_t nallow;
	int allow_any;
	struct lr_exec_after *after; /* the check after the run, once it is over */
	uint64_t tag;                /* the zygote's name for this run (0: not through it) */
	/* a helper this set spawned itself: its reaper tells the end here (--end-fd), or -1 */
	int end_fd;
	struct lr_watch end_watch;
	int end_watching;
};

static uint64_t next_exec_id;
static char *const empty_env[] = { NULL };

/* ---- the pre-forked helper ---- */

/*
 * One per set, started at the set's second run (a set that runs one command,
 * as `luarig sandbox run` does, never pays for it): "/proc/self/exe
 * __sandbox-helper --zygote" with the host ends of two SOCK_SEQPACKET
 * sockets, requests (answered at once, read blocking here) and events (a
 * run's end, read on the loop), and a lifeline of its own. Each run it
 * starts is a fork of it running the helper as an exec'd one would, with the
 * run's own fds and lifeline; see sandbox/zygote.c for what is shared (the
 * exec'd image and nothing of any run).
 */
struct zygote {
	struct lr_executor_set *set;
	struct lr_proc *proc;
	int req, ev;
	struct lr_watch evw;
	int watching;
	uint64_t next_tag;
};

static char *const zygote_argv[] = { "luarig", "__sandbox-helper", "--zygote", NULL };
/* How long a run's start waits for the zygote's answer (a fork): then it is given up. */
#define ZYGOTE_ANSWER_MS 10000

static void zygote_free(struct zygote *z)
{
	if (!z)
		return;
	if (z->watching) {
		lr_watch_stop(&z->evw);
		lr_watch_release(&z->evw);
	}
	if (z->req >= 0)
		close(z->req);
	if (z->ev >= 0)
		close(z->ev);
	lr_proc_close(z->proc); /* its lifeline closed: it exits; reaped with the set's others */
	free(z);
}

/* The zygote is gone or unusable: runs it started end by their pidfds; new ones exec. */
static void zygote_lost(struct lr_executor_set *s)
{
	struct zygote *z = s->zygote;
	s->zygote = NULL;
	s->zygote_failed = 1;
	for (struct lr_exec *x = s->runs; x; x = x->next)
		if (x->tag && x->proc)
			lr_proc_remote_exit(x->proc, LR_PROC_LOST);
	zygote_free(z);
}

static void zygote_event(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_executor_set *s = arg;
	for (;;) {
		struct lr_sbx_zygote_msg m;
		ssize_t n = recv(s->zygote->ev, &m, sizeof m, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n != (ssize_t)sizeof m || m.type != LR_SBX_ZYGOTE_EXITED) {
			zygote_lost(s);
			return;
		}
		for (struct lr_exec *x = s->runs; x; x = x->next)
			if (x->tag && x->tag == m.tag && x->proc) {
				lr_proc_remote_exit(x->proc, m.status);
				break;
			}
		if (!s->zygote)
			return; /* an owner's callback closed the set's zygote */
	}
}

static int zygote_start(struct lr_executor_set *s)
{
	struct zygote *z = calloc(1, sizeof *z);
	if (!z)
		return -ENOMEM;
	z->set = s;
	z->req = z->ev = -1;
	int rq[2] = { -1, -1 }, ev[2] = { -1, -1 }, life[2] = { -1, -1 }, rc = 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rq) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) < 0 ||
	    pipe2(life, O_CLOEXEC) < 0)
		rc = -errno;
	int lw = -1;
	if (!rc && (lw = fcntl(life[1], F_DUPFD_CLOEXEC, 3)) < 0)
		rc = -errno;
	if (!rc) {
		int fds[3] = { rq[1], life[0], ev[1] };
		struct lr_proc_opts o = {
			.file = "/proc/self/exe",
			.argv = zygote_argv,
			.envp = empty_env,
			.stdio = { LR_PROC_NULL, LR_PROC_NULL, LR_PROC_INHERIT },
			.extra_fds = fds,
			.n_extra = 3,
			.lifeline_fd = lw,
		};
		struct lr_err perr = { "" };
		rc = lr_proc_spawn(s->loop, &o, &z->proc, &perr);
	}
	if (!rc) {
		z->req = rq[0];
		z->ev = ev[0];
		rq[0] = ev[0] = -1;
		rc = lr_watch_init(s->loop, &z->evw, z->ev, zygote_event, s);
		if (!rc) {
			z->watching = 1;
			rc = lr_watch_start(&z->evw, LR_READ);
		}
	}
	int all[] = { rq[0], rq[1], ev[0], ev[1], life[0], life[1], lw };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i] >= 0)
			close(all[i]);
	if (rc) {
		zygote_free(z);
		return rc;
	}
	s->zygote = z;
	return 0;
}

/* lr_proc_opts.launch: one request, its answer read here (the zygote forks and answers at once). */
struct zygote_launch {
	struct zygote *z;
	uint64_t tag;
};

static int zygote_launch(void *arg, const int *fds, int nfds, pid_t *pid, int *pidfd,
			 struct lr_err *err)
{
	struct zygote_launch *zl = arg;
	struct zygote *z = zl->z;
	struct lr_sbx_zygote_req req = { LR_SBX_ZYGOTE_MAGIC, (uint32_t)nfds, zl->tag };
	if (nfds < 5 || nfds > 6) {
		lr_err_set(err, "zygote: %d fds for a run", nfds);
		return -EINVAL;
	}
	int rc = lr_sbx_send_fds(z->req, &req, sizeof req, fds, nfds, 0);
	if (rc) {
		lr_err_set(err, "zygote: cannot send the run: %s", rc == -EIO ? "short" : strerror(-rc));
		return rc;
	}
	ssize_t n;
	/* it answers at once; one that does not within ZYGOTE_ANSWER_MS is given up */
	struct pollfd pf = { .fd = z->req, .events = POLLIN };
	while ((n = poll(&pf, 1, ZYGOTE_ANSWER_MS)) < 0 && errno == EINTR) {
	}
	if (n <= 0) {
		lr_err_set(err, "zygote: no answer for the run within %d ms", ZYGOTE_ANSWER_MS);
		return -ETIMEDOUT;
	}
	struct lr_sbx_zygote_msg m;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ru;
	struct iovec riov = { &m, sizeof m };
	struct msghdr rh = { .msg_iov = &riov, .msg_iovlen = 1, .msg_control = ru.buf,
			     .msg_controllen = sizeof ru.buf };
	while ((n = recvmsg(z->req, &rh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
	}
	int got = -1;
	for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&rh) : NULL; c; c = CMSG_NXTHDR(&rh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(c), sizeof got);
	if (n != (ssize_t)sizeof m || m.tag != zl->tag ||
	    (m.type == LR_SBX_ZYGOTE_STARTED && (got < 0 || m.pid <= 0)) ||
	    (m.type != LR_SBX_ZYGOTE_STARTED && m.type != LR_SBX_ZYGOTE_FAILED)) {
		if (got >= 0)
			close(got);
		lr_err_set(err, "zygote: no answer for the run");
		return -EPROTO;
	}
	if (m.type == LR_SBX_ZYGOTE_FAILED) {
		lr_err_set(err, "zygote: cannot start the run: %s", strerror(m.err));
		return m.err > 0 ? -m.err : -EIO;
	}
	*pid = m.pid;
	*pidfd = got;
	return 0;
}


static void exec_unlink(struct lr_exec *x);
static int capture_finish(struct capture *c, struct lr_buf *out);
static void exec_after(struct lr_exec *x);

int lr_executor_set_new(struct lr_loop *loop, const struct lr_profile *p,
			const char *scratch_root, size_t max, struct lr_executor_set **out,
			struct lr_err *err)
{
	*out = NULL;
	lr_err_clear(err);
	struct lr_err perr = { "" };
	int rc = lr_profile_validate(p, &perr);
	if (rc) {
		lr_err_set(err, "%s", perr.msg);
		return rc;
	}
	struct lr_executor_set *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->max = max ? max : DEFAULT_MAX;
	if ((rc = lr_profile_copy(p, &s->profile)) != 0) {
		free(s);
		lr_err_set(err, "executor: cannot copy the profile: %s", lr_strerror(rc));
		return rc;
	}
	lr_profile_fingerprint(&s->profile, s->fingerprint);
	s->caps = lr_sbx_probe();
	rc = lr_sbx_report(&s->profile, s->caps, &s->report, &perr);
	if (rc) {
		lr_err_set(err, "%s", perr.msg);
		goto fail;
	}
	if ((rc = lr_grants_new(&s->grants)) != 0) {
		lr_err_set(err, "executor: cannot make the grant store: %s", lr_strerror(rc));
		goto fail;
	}
	if (scratch_root) {
		if (mkdir(scratch_root, 0700) != 0) {
			rc = -errno;
			if (rc == -EEXIST)
				lr_err_set(err, "executor: scratch root '%s' already exists (the set makes it "
					   "and removes it)", scratch_root);
			else
				lr_err_set(err, "executor: cannot create scratch root '%s': %s", scratch_root,
					   strerror(errno));
			goto fail;
		}
		char real[PATH_MAX];
		if (!realpath(scratch_root, real) || !(s->root = strdup(real))) {
			rc = -errno ? -errno : -ENOMEM;
			rmdir(scratch_root);
			lr_err_set(err, "executor: cannot resolve scratch root '%s'", scratch_root);
			goto fail;
		}
	} else {
		const char *t = getenv("TMPDIR");
		char *tmpl = lr_asprintf("%s/luarig-exec-XXXXXX", t && t[0] == '/' ? t : "/tmp");
		char real[PATH_MAX];
		if (!tmpl || !mkdtemp(tmpl) || !realpath(tmpl, real) || !(s->root = strdup(real))) {
			rc = -errno ? -errno : -ENOMEM;
			lr_err_set(err, "executor: cannot create a scratch root: %s", strerror(errno));
			free(tmpl);
			goto fail;
		}
		free(tmpl);
	}
	*out = s;
	return 0;
fail:
	lr_grants_free(s->grants);
	lr_profile_release(&s->profile);
	free(s);
	return rc;
}

/*
 * Ends the runs still going (of one executor, or all): the helper's group is
 * killed, and their owners hear it through done as usual, marked aborted.
 */
static void abort_runs(struct lr_executor_set *s, struct lr_executor *only, const char *why)
{
	struct lr_exec *x = s->runs;
	while (x) {
		struct lr_exec *next = x->next;
		if (only && x->owner != only) {
			x = next;
			continue;
		}
		exec_unlink(x);
		if (!x->finished) {
			x->finished = 1;
			x->res.signo = SIGKILL;
			lr_err_set(&x->res.err, "%s", why);
			x->res.aborted = 1;
			if (!x->inherit) {
				capture_finish(&x->cap[1], &x->res.out);
				capture_finish(&x->cap[2], &x->res.err_out);
			}
			lr_defer_schedule(&x->defer);
		}
		lr_proc_close(x->proc); /* kills the helper's group */
		x->proc = NULL;
		exec_after(x);
		x = next;
	}
}

void lr_executor_abort(struct lr_executor *e)
{
	abort_runs(e->set, e, "executor: the executor was closed");
}

void lr_executor_set_free(struct lr_executor_set *s)
{
	if (!s)
		return;
	abort_runs(s, NULL, "executor: the set was closed");
	zygote_free(s->zygote);
	s->zygote = NULL;
	/* every process of its runs (and of handles closed before) gone first:
	   then nothing can still write, or swap a name, in the tree removed next */
	lr_proc_reap_all(s->loop);
	while (s->executors) {
		struct lr_executor *e = s->executors;
		s->executors = e->next;
		free(e->home);
		free(e->tmpdir);
		free(e);
	}
	if (s->root)
		rm_tree(s->root);
	free(s->root);
	lr_protect_tree_free(s->protect_cache);
	lr_grants_free(s->grants);
	lr_profile_release(&s->profile);
	free(s);
}

const char *lr_executor_set_root(const struct lr_executor_set *s) { return s->root; }
const struct lr_sbx_report *lr_executor_set_report(const struct lr_executor_set *s) { return &s->report; }
const struct lr_profile *lr_executor_set_profile(const struct lr_executor_set *s) { return &s->profile; }
struct lr_grants *lr_executor_set_grants(struct lr_executor_set *s) { return s->grants; }
uint64_t lr_executor_id(const struct lr_executor *e) { return e->id; }
const char *lr_executor_home(const struct lr_executor *e) { return e->home; }
const char *lr_executor_tmpdir(const struct lr_executor *e) { return e->tmpdir; }
const char *lr_executor_key(const struct lr_executor *e) { return e->key; }
const char *lr_executor_fingerprint(const struct lr_executor *e) { return e->set->fingerprint; }

static int valid_key(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > 64 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

int lr_executor_get(struct lr_executor_set *s, const char *key, struct lr_executor **out,
		    struct lr_err *err)
{
	*out = NULL;
	if (!valid_key(key)) {
		lr_err_set(err, "executor: key '%.64s' must be 1 to 64 of A-Z a-z 0-9 _ . - (not . or ..)", key);
		return -EINVAL;
	}
	for (struct lr_executor *e = s->executors; e; e = e->next) {
		if (strcmp(e->key, key) == 0) {
			*out = e;
			return 0;
		}
	}
	if (s->count >= s->max) {
		lr_err_set(err, "executor: the set already holds its maximum of %zu executors", s->max);
		return LR_ETOOBIG;
	}
	struct lr_executor *e = calloc(1, sizeof *e);
	char *dir = lr_asprintf("%s/%s", s->root, key);
	if (!e || !dir) {
		free(e);
		free(dir);
		return -ENOMEM;
	}
	snprintf(e->key, sizeof e->key, "%s", key);
	e->set = s;
	e->id = ++next_exec_id;
	e->home = lr_asprintf("%s/home", dir);
	e->tmpdir = lr_asprintf("%s/tmp", dir);
	int rc = 0;
	if (!e->home || !e->tmpdir)
		rc = -ENOMEM;
	else if (mkdir(dir, 0700) != 0 || mkdir(e->home, 0700) != 0 || mkdir(e->tmpdir, 0700) != 0)
		rc = -errno;
	if (rc) {
		lr_err_set(err, "executor: cannot create the dirs of '%s': %s", key, lr_strerror(rc));
		rm_tree(dir);
		free(dir);
		free(e->home);
		free(e->tmpdir);
		free(e);
		return rc;
	}
	free(dir);
	e->next = s->executors;
	s->executors = e;
	s->count++;
	*out = e;
	return 0;
}

/* ---- launching ---- */

static char *const helper_argv[] = { "luarig", "__sandbox-helper", NULL };
/* the same, with the run's end told on the fd after the others (sandbox.h, --end-fd) */
static char *const helper_argv_end[2][4] = {
	{ "luarig", "__sandbox-helper", "--end-fd=5", NULL },
	{ "luarig", "__sandbox-helper", "--end-fd=6", NULL },
};

/* lr_proc_opts.fork_main: the helper in a copy of the host (lr_executor_set_fork_helper). */
static int helper_fork_main(void *arg)
{
	char *const *argv = arg ? arg : helper_argv;
	int argc = 0;
	while (argv[argc])
		argc++;
	return lr_sbx_helper_main(argc, (char **)argv);
}

void lr_executor_set_fork_helper(struct lr_executor_set *s, int on)
{
	s->fork_helper = on;
}

static int grant_class(int cls, enum lr_grant_class *out)
{
	switch (cls) {
	case LR_GRANT_FS_READ:
	case LR_GRANT_FS_WRITE:
	case LR_GRANT_NETWORK:
	case LR_GRANT_COMMAND:
		*out = (enum lr_grant_class)cls;
		return 0;
	}
	return -EINVAL;
}

struct redeemed {
	struct lr_strv rd, wr, net;
	int command;
};

/*
 * Redeems every grant of the request against this executor, command line
 * and cwd (as the caller gave it, or the workspace root). Each token is
 * consumed by its first attempt, successful or not.
 */
static int redeem_all(struct lr_executor *e, const struct lr_exec_request *r, struct redeemed *out,
		      struct lr_err *err)
{
	struct lr_executor_set *s = e->set;
	struct lr_buf cmd;
	lr_buf_init(&cmd, 1u << 20);
	int rc = lr_sbx_command_line(r, &cmd);
	if (rc) {
		lr_buf_release(&cmd);
		return rc;
	}
	const char *cwd = r->cwd ? r->cwd : s->profile.workspace_root;
	for (size_t i = 0; i < r->ngrants && !rc; i++) {
		const struct lr_exec_grant *g = &r->grants[i];
		struct lr_grant_req q = {
			.exec_id = e->id,
			.command = cmd.data ? cmd.data : "",
			.cwd = cwd ? cwd : "",
			.fingerprint = s->fingerprint,
			.target = g->target ? g->target : "",
		};
		if (!g->token || grant_class(g->cls, &q.cls) != 0) {
			lr_err_set(err, "executor: grant %zu is malformed", i + 1);
			rc = -EINVAL;
			break;
		}
		struct lr_err gerr = { "" };
		if ((rc = lr_grant_redeem(s->grants, g->token, &q, &gerr)) != 0) {
			lr_err_set(err, "%s", gerr.msg);
			break;
		}
		char real[PATH_MAX];
		switch (q.cls) {
		case LR_GRANT_FS_READ:
		case LR_GRANT_FS_WRITE:
			if (!realpath(q.target, real)) {
				rc = -errno;
				lr_err_set(err, "executor: granted path '%s': %s", q.target, strerror(errno));
				break;
			}
			rc = lr_strv_add(q.cls == LR_GRANT_FS_READ ? &out->rd : &out->wr, strdup(real));
			break;
		case LR_GRANT_NETWORK:
			rc = lr_strv_add(&out->net, strdup(q.target));
			break;
		case LR_GRANT_COMMAND:
			out->command = 1;
			break;
		}
	}
	lr_buf_release(&cmd);
	return rc;
}

/* ---- after the run ---- */

struct lr_exec_after {
	struct lr_protect_plan plan;
	struct lr_protect_hold *hold;
	struct lr_strv names, granted; /* copies: the run may outlive its set */
	struct lr_protect_opts o;
	struct lr_protect_tree **cache; /* where the walk after the run goes for the next, or NULL */
};

static void after_free(struct lr_exec_after *a)
{
	lr_protect_plan_release(&a->plan);
	lr_strv_release(&a->names);
	lr_strv_release(&a->granted);
	free(a);
}

int lr_exec_after_finish(struct lr_exec_after *a, struct lr_buf *moved, struct lr_err *err)
{
	lr_err_clear(err);
	if (!a)
		return 0;
	struct lr_buf sink;
	lr_buf_init(&sink, 64u << 10);
	struct lr_err perr = { "" };
	int rc = lr_protect_after(&a->plan, &a->o, moved ? moved : &sink, &perr);
	if (rc)
		lr_err_set(err, "%s", perr.msg);
	lr_buf_release(&sink);
	if (a->cache && (!rc || rc == LR_ETOOBIG)) {
		struct lr_protect_tree *t = lr_protect_plan_take_tree(&a->plan);
		if (t) {
			lr_protect_tree_free(*a->cache);
			*a->cache = t;
		}
	}
	lr_protect_unplace(a->hold);
	a->hold = NULL;
	after_free(a);
	return rc;
}

/* The plan's placeholders made and held; a is the launch's to finish. */
static int after_new(const struct lr_profile *p, const struct lr_exec_ctx *ctx,
		     struct lr_protect_plan *plan, struct lr_exec_after **out, struct lr_err *err)
{
	*out = NULL;
	struct lr_exec_after *a = calloc(1, sizeof *a);
	if (!a) {
		lr_protect_plan_release(plan);
		return -ENOMEM;
	}
	a->plan = *plan;
	memset(plan, 0, sizeof *plan);
	int rc = 0;
	for (size_t i = 0; i < p->nprotect_names && !rc; i++)
		rc = lr_strv_add(&a->names, strdup(p->protect_names[i]));
	for (size_t i = 0; i < ctx->ngranted_write && !rc; i++)
		rc = lr_strv_add(&a->granted, strdup(ctx->granted_write[i]));
	a->o = (struct lr_protect_opts){
		.names = (const char *const *)a->names.v, .nnames = a->names.n,
		.git_readonly = p->git_readonly, .max_entries = p->protect_max_entries,
		.granted = (const char *const *)a->granted.v, .ngranted = a->granted.n,
	};
	struct lr_err perr = { "" };
	if (!rc && (rc = lr_protect_place(&a->plan, &a->hold, &perr)) != 0)
		lr_err_set(err, "%s", perr.msg);
	if (rc) {
		after_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

static int allow_add(struct lr_exec_launch *l, const char *target)
{
	char **v = realloc(l->allow, (l->nallow + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	l->allow = v;
	if (!(v[l->nallow] = strdup(target)))
		return -ENOMEM;
	l->nallow++;
	return 0;
}

int lr_executor_launch_init(struct lr_executor *e, const struct lr_exec_request *r,
			    struct lr_exec_launch *l, struct lr_err *err)
{
	memset(l, 0, sizeof *l);
	l->spec_fd = -1;
	l->ctl_fd = -1;
	l->fds[1] = l->fds[2] = l->life_w = -1;
	lr_err_clear(err);
	struct lr_executor_set *s = e->set;
	struct redeemed g = { 0 };
	int rc = redeem_all(e, r, &g, err);
	if (rc) {
		if (!err->msg[0])
			lr_err_set(err, "executor: grants: %s", lr_strerror(rc));
		goto out;
	}
	struct lr_exec_ctx ctx = {
		.exec_id = e->id,
		.home = e->home,
		.tmpdir = e->tmpdir,
		.host_env = environ,
		.granted_read = (const char *const *)g.rd.v,
		.ngranted_read = g.rd.n,
		.granted_write = (const char *const *)g.wr.v,
		.ngranted_write = g.wr.n,
		.granted_net = (const char *const *)g.net.v,
		.ngranted_net = g.net.n,
		.command_granted = g.command,
		/* fixed: every sandbox has a network namespace of its own */
		.proxy_port = SANDBOX_PROXY_PORT,
		.dns_port = SANDBOX_DNS_PORT,
		.protect_cache = s->protect_cache,
	};
	struct lr_protect_plan plan;
	memset(&plan, 0, sizeof plan);
	ctx.plan = &plan;
	struct lr_sbx_spec spec;
	if ((rc = lr_sbx_build_spec(&s->profile, s->caps, r, &ctx, &spec, err)) != 0)
		goto out;
	/* the placeholders exist before the helper binds them, held until the run is over */
	if ((rc = after_new(&s->profile, &ctx, &plan, &l->after, err)) != 0) {
		lr_sbx_spec_release(&spec);
		if (!err->msg[0])
			lr_err_set(err, "executor: %s", lr_strerror(rc));
		goto out;
	}
	char *buf = NULL;
	size_t len = 0;
	rc = lr_sbx_spec_encode(&spec, &buf, &len);
	l->unconfined = spec.unconfined;
	int want_proxy = spec.net == LR_SBX_NET_PROXY;
	lr_sbx_spec_release(&spec);
	if (!rc && want_proxy) {
		/* the targets the proxy lets through: those asked for (checked
		   against the profile and grants by build_spec), or any public one */
		if (r->network && r->network[0]) {
			for (char *const *t = r->network; *t && !rc; t++)
				rc = lr_egress_rule_check(*t, err) ? LR_EREFUSED
										   : allow_add(l, *t);
		} else {
			l->allow_any = 1;
		}
		int sp[2];
		if (!rc && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
			rc = -errno;
		if (!rc) {
			l->ctl_fd = sp[0];
			l->fds[2] = sp[1];
		}
		if (rc) {
			free(buf);
			if (rc != LR_EREFUSED) /* a refused rule already said why */
				lr_err_set(err, "executor: cannot prepare the egress proxy: %s",
					   lr_strerror(rc));
			goto out;
		}
	}
	if (rc) {
		lr_err_set(err, "executor: cannot encode the spec: %s", lr_strerror(rc));
		goto out;
	}
	int fd = lr_sbx_seal(buf, len);
	free(buf);
	if (fd < 0) {
		rc = fd;
		lr_err_set(err, "executor: cannot seal the spec: %s", lr_strerror(rc));
		goto out;
	}
	l->spec_fd = fd;
	l->fds[0] = fd;
	/* the lifeline: both ends close-on-exec (no other child inherits the
	   write end), the write end above 2 (lr_proc_opts.lifeline_fd) */
	int life[2];
	if (pipe2(life, O_CLOEXEC) < 0) {
		rc = -errno;
		lr_err_set(err, "executor: cannot make the run's lifeline: %s", lr_strerror(rc));
		goto out;
	}
	l->fds[1] = life[0];
	l->life_w = life[1];
	if (life[1] < 3) {
		l->life_w = fcntl(life[1], F_DUPFD_CLOEXEC, 3);
		rc = l->life_w < 0 ? -errno : 0;
		close(life[1]);
		if (rc) {
			lr_err_set(err, "executor: cannot make the run's lifeline: %s", lr_strerror(rc));
			goto out;
		}
	}
	l->proc.lifeline_fd = l->life_w;
	l->proc.file = "/proc/self/exe";
	l->proc.argv = helper_argv;
	l->proc.envp = empty_env;
	if (s->fork_helper)
		l->proc.fork_main = helper_fork_main;
	l->proc.close_inherited = 1; /* the helper holds only its own fds, exec'd or forked */
	l->proc.extra_fds = l->fds;
	l->proc.n_extra = l->ctl_fd >= 0 ? 3 : 2;
out:
	if (rc && l->after) {
		struct lr_err aerr = { "" };
		lr_exec_after_finish(l->after, NULL, &aerr);
		l->after = NULL;
	}
	lr_strv_release(&g.rd);
	lr_strv_release(&g.wr);
	lr_strv_release(&g.net);
	if (rc)
		lr_executor_launch_release(l);
	return rc;
}

void lr_executor_launch_release(struct lr_exec_launch *l)
{
	if (l->after) { /* never spawned, or a caller that did not take it */
		struct lr_err err = { "" };
		lr_exec_after_finish(l->after, NULL, &err);
		l->after = NULL;
	}
	if (l->spec_fd >= 0)
		close(l->spec_fd);
	l->spec_fd = -1;
	for (int i = 1; i < 3; i++) {
		if (l->fds[i] >= 0)
			close(l->fds[i]); /* the helper's ends: the child has its copies */
		l->fds[i] = -1;
	}
	if (l->life_w >= 0)
		close(l->life_w); /* the proc keeps its own copy */
	l->life_w = l->proc.lifeline_fd = -1;
	if (l->ctl_fd >= 0)
		close(l->ctl_fd);
	l->ctl_fd = -1;
	for (size_t i = 0; i < l->nallow; i++)
		free(l->allow[i]);
	free(l->allow);
	l->allow = NULL;
	l->nallow = 0;
}

/* ---- running: output capped as head + tail ---- */

static int capture_init(struct capture *c, size_t limit)
{
	size_t head = limit / 2;
	lr_buf_init(&c->head, head + 1);
	c->ring_cap = limit - head;
	c->ring = c->ring_cap ? malloc(c->ring_cap) : NULL;
	return c->ring_cap && !c->ring ? -ENOMEM : 0;
}

static void capture_release(struct capture *c)
{
	lr_buf_release(&c->head);
	free(c->ring);
	c->ring = NULL;
}

static void capture_feed(struct capture *c, const char *p, size_t n)
{
	c->total += n;
	size_t room = c->head.cap - 1 - c->head.len;
	size_t k = n < room ? n : room;
	if (k) {
		lr_buf_add(&c->head, p, k);
		p += k;
		n -= k;
	}
	if (!c->ring_cap)
		return;
	if (n >= c->ring_cap) { /* only the last ring_cap bytes can survive */
		p += n - c->ring_cap;
		n = c->ring_cap;
	}
	for (size_t i = 0; i < n; i++) {
		size_t at = (c->ring_start + c->ring_len) % c->ring_cap;
		c->ring[at] = p[i];
		if (c->ring_len < c->ring_cap)
			c->ring_len++;
		else
			c->ring_start = (c->ring_start + 1) % c->ring_cap;
	}
}

/* Head, the marker if bytes were dropped, tail. Returns 1 when truncated. */
static int capture_finish(struct capture *c, struct lr_buf *out)
{
	lr_buf_init(out, c->head.len + c->ring_len + 96);
	lr_buf_add(out, c->head.data ? c->head.data : "", c->head.len);
	uint64_t kept = c->head.len + c->ring_len;
	int truncated = c->total > kept;
	if (truncated) {
		if (c->head.len && c->head.data[c->head.len - 1] != '\n')
			lr_buf_add(out, "\n", 1);
		lr_buf_printf(out, "[\xe2\x80\xa6 %llu bytes omitted \xe2\x80\xa6]\n",
			      (unsigned long long)(c->total - kept));
	}
	size_t first = c->ring_cap ? c->ring_cap - c->ring_start : 0;
	if (first > c->ring_len)
		first = c->ring_len;
	if (c->ring_len) {
		lr_buf_add(out, c->ring + c->ring_start, first);
		lr_buf_add(out, c->ring, c->ring_len - first);
	}
	return truncated;
}

static void end_stop(struct lr_exec *x)
{
	if (x->end_watching) {
		lr_watch_stop(&x->end_watch);
		lr_watch_release(&x->end_watch);
		x->end_watching = 0;
	}
	if (x->end_fd >= 0)
		close(x->end_fd);
	x->end_fd = -1;
}

/*
 * The reaper's word that nothing of the run is left (struct lr_sbx_end):
 * the run is over now, while the helper's exit still tears its namespaces
 * down. EOF or anything else: the helper's exit tells, as without it.
 */
static void end_ready(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_exec *x = arg;
	struct lr_sbx_end e;
	ssize_t n;
	while ((n = read(x->end_fd, &e, sizeof e)) < 0 && errno == EINTR) {
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	end_stop(x);
	if (n == (ssize_t)sizeof e && e.magic == LR_SBX_END_MAGIC && e.code >= 0 && e.code <= 255 &&
	    x->proc)
		lr_proc_exit_told(x->proc, e.code << 8);
}

static void exec_unlink(struct lr_exec *x)
{
	if (!x->set)
		return;
	if (x->prev)
		x->prev->next = x->next;
	else
		x->set->runs = x->next;
	if (x->next)
		x->next->prev = x->prev;
	x->next = x->prev = NULL;
	x->set = NULL;
}

/* ---- the egress proxy of one run ---- */

static void ctl_stop(struct lr_exec *x)
{
	if (x->ctl_watching) {
		lr_watch_stop(&x->ctl_watch);
		lr_watch_release(&x->ctl_watch);
		x->ctl_watching = 0;
	}
	if (x->ctl_fd >= 0)
		close(x->ctl_fd);
	x->ctl_fd = -1;
}

/* network allow: every public target (the proxy still refuses private ones) */
static int egress_any(void *arg, const char *host, uint16_t port, int *allow_private)
{
	(void)arg, (void)host, (void)port;
	*allow_private = 0;
	return 1;
}

/*
 * A target named by its address ("127.0.0.1:8080", "[::1]:80") allows that
 * address even when it is loopback or private; a name never does (the
 * proxy resolves names itself, so a rebinding name still cannot reach in).
 */
static int names_an_address(const char *pattern)
{
	const char *colon = strrchr(pattern, ':');
	size_t hn = colon ? (size_t)(colon - pattern) : strlen(pattern);
	if (hn > 2 && pattern[0] == '[' && pattern[hn - 1] == ']')
		pattern++, hn -= 2;
	char lit[64];
	struct in6_addr ip;
	if (hn >= sizeof lit)
		return 0;
	memcpy(lit, pattern, hn);
	lit[hn] = '\0';
	return inet_pton(AF_INET, lit, &ip) == 1 || inet_pton(AF_INET6, lit, &ip) == 1;
}

/* arg: the lr_buf the verdicts go to (a run's net_log, a spawned proxy's log) */
static void egress_log(void *arg, const struct lr_egress_event *ev)
{
	struct lr_buf *log = arg;
	static const char *const verdicts[] = { "allow", "deny", "fail" };
	lr_buf_printf(log, "%s %s %s%s%s\n",
		      verdicts[ev->verdict <= LR_EGRESS_FAIL ? ev->verdict : LR_EGRESS_FAIL],
		      ev->kind ? ev->kind : "?", ev->target ? ev->target : "?",
		      ev->reason && ev->reason[0] ? ": " : "", ev->reason ? ev->reason : "");
}

/*
 * The listeners the helper sent on ctl_fd, served as the egress proxy of the
 * allow-list (or of every public target). -EAGAIN: nothing arrived yet; any
 * other outcome is final (the helper failed before sending reports that itself;
 * a proxy that cannot start says so in log).
 */
static int proxy_serve(struct lr_loop *loop, uint64_t exec_id, int ctl_fd, char **allow,
		       size_t nallow, int allow_any, struct lr_buf *log, struct lr_egress **out)
{
	int tcp = -1, udp = -1;
	int rc = lr_sbx_recv_listeners(ctl_fd, &tcp, &udp);
	if (rc)
		return rc;
	struct lr_egress_rule *rules = calloc(nallow ? nallow : 1, sizeof *rules);
	if (!rules) {
		close(tcp);
		close(udp);
		lr_buf_printf(log, "fail proxy: out of memory\n");
		return -ENOMEM;
	}
	for (size_t i = 0; i < nallow; i++)
		rules[i] = (struct lr_egress_rule){ allow[i], names_an_address(allow[i]) };
	struct lr_egress_config cfg = {
		.exec_id = exec_id,
		.rules = rules,
		.nrules = nallow,
		.policy = allow_any ? egress_any : NULL,
		.log = egress_log,
		.arg = log,
	};
	struct lr_err err = { "" };
	rc = lr_egress_open(loop, &cfg, tcp, udp, out, &err);
	if (rc)
		lr_buf_printf(log, "fail proxy: %s\n", err.msg);
	free(rules); /* copied by lr_egress_open */
	return rc;
}

/* The helper sent the proxy's listeners (or died first): serve them. */
static void ctl_ready(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_exec *x = arg;
	struct lr_egress *eg = NULL;
	int rc = proxy_serve(x->set->loop, x->owner ? lr_executor_id(x->owner) : 0, x->ctl_fd,
			     x->allow, x->nallow, x->allow_any, &x->res.net_log, &eg);
	if (rc == -EAGAIN)
		return;
	ctl_stop(x);
	x->egress = eg;
}

/* ---- the egress proxy of a spawned process (lr_exec_proxy_take) ---- */

struct lr_exec_proxy {
	struct lr_loop *loop;
	uint64_t exec_id;
	int ctl_fd;
	struct lr_watch watch;
	int watching;
	char **allow;
	size_t nallow;
	int allow_any;
	struct lr_egress *egress;
	struct lr_buf log;
};

static void xproxy_stop(struct lr_exec_proxy *p)
{
	if (p->watching) {
		lr_watch_stop(&p->watch);
		lr_watch_release(&p->watch);
		p->watching = 0;
	}
	if (p->ctl_fd >= 0)
		close(p->ctl_fd);
	p->ctl_fd = -1;
}

static void xproxy_ready(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_exec_proxy *p = arg;
	struct lr_egress *eg = NULL;
	int rc = proxy_serve(p->loop, p->exec_id, p->ctl_fd, p->allow, p->nallow, p->allow_any,
			     &p->log, &eg);
	if (rc == -EAGAIN)
		return;
	xproxy_stop(p);
	p->egress = eg;
}

int lr_exec_proxy_take(struct lr_executor *e, struct lr_exec_launch *l, struct lr_exec_proxy **out,
		       struct lr_err *err)
{
	*out = NULL;
	if (l->ctl_fd < 0)
		return 0;
	struct lr_exec_proxy *p = calloc(1, sizeof *p);
	if (!p) {
		lr_err_set(err, "executor: out of memory");
		return -ENOMEM;
	}
	p->loop = e->set->loop;
	p->exec_id = lr_executor_id(e);
	lr_buf_init(&p->log, 64u << 10);
	p->ctl_fd = l->ctl_fd;
	p->allow = l->allow;
	p->nallow = l->nallow;
	p->allow_any = l->allow_any;
	l->ctl_fd = -1;
	l->allow = NULL;
	l->nallow = 0;
	fcntl(p->ctl_fd, F_SETFL, fcntl(p->ctl_fd, F_GETFL) | O_NONBLOCK);
	int rc = lr_watch_init(p->loop, &p->watch, p->ctl_fd, xproxy_ready, p);
	if (!rc) {
		p->watching = 1;
		rc = lr_watch_start(&p->watch, LR_READ);
	}
	if (rc) {
		lr_err_set(err, "executor: cannot watch the proxy's control socket: %s", lr_strerror(rc));
		lr_exec_proxy_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

const struct lr_buf *lr_exec_proxy_log(const struct lr_exec_proxy *p) { return &p->log; }

void lr_exec_proxy_free(struct lr_exec_proxy *p)
{
	if (!p)
		return;
	xproxy_stop(p);
	lr_egress_close(p->egress);
	for (size_t i = 0; i < p->nallow; i++)
		free(p->allow[i]);
	free(p->allow);
	lr_buf_release(&p->log);
	free(p);
}

/* The run is over (or abandoned): the check after it, once; what it moved goes to the result. */
static void exec_after(struct lr_exec *x)
{
	if (!x->after)
		return;
	struct lr_err err = { "" };
	x->after->cache = x->set ? &x->set->protect_cache : NULL;
	int rc = lr_exec_after_finish(x->after, &x->res.moved, &err);
	x->after = NULL;
	if (rc)
		lr_buf_printf(&x->res.moved, "%s\n", err.msg);
}

static void exec_deferred(struct lr_defer *d, void *arg)
{
	(void)d;
	struct lr_exec *x = arg;
	if (x->done)
		x->done(x, x->arg);
}

static void exec_event(struct lr_proc *p, int events, void *arg)
{
	(void)events;
	struct lr_exec *x = arg;
	if (x->finished)
		return;
	if (!x->inherit) {
		for (int s = LR_PROC_STDOUT; s <= LR_PROC_STDERR; s++) {
			const struct lr_buf *b = lr_proc_output(p, s);
			if (b->len) {
				size_t n = b->len;
				capture_feed(&x->cap[s], b->data, n);
				lr_proc_consume(p, s, n);
			}
		}
	}
	if (!lr_proc_done(p))
		return;
	x->finished = 1;
	ctl_stop(x);
	end_stop(x);
	lr_egress_close(x->egress);
	x->egress = NULL;
	exec_after(x);
	struct lr_exec_result *r = &x->res;
	lr_proc_status(p, &r->code, &r->signo);
	r->timed_out = lr_proc_timed_out(p);
	if (x->tag && r->code < 0 && !r->signo && !r->timed_out) {
		/* lost with its zygote: the tree is gone, how it ended is not known */
		r->aborted = 1;
		lr_err_set(&r->err, "executor: the pre-forked helper died while the run went on; "
			   "its exit status is unknown");
	}
	if (!x->inherit) {
		int t1 = capture_finish(&x->cap[1], &r->out);
		int t2 = capture_finish(&x->cap[2], &r->err_out);
		r->truncated = t1 || t2;
		static const char prefix[] = "luarig sandbox: ";
		if (r->code == LR_SBX_EXIT_SETUP && r->err_out.len >= sizeof prefix - 1 &&
		    memcmp(r->err_out.data, prefix, sizeof prefix - 1) == 0) {
			r->setup_failed = 1;
			size_t n = strcspn(r->err_out.data, "\n");
			lr_err_set(&r->err, "%.*s", (int)n, r->err_out.data);
		}
	}
	lr_defer_schedule(&x->defer);
}

int lr_executor_run(struct lr_executor *e, const struct lr_exec_request *r,
		    void (*done)(struct lr_exec *x, void *arg), void *arg, struct lr_exec **out,
		    struct lr_err *err)
{
	*out = NULL;
	struct lr_executor_set *s = e->set;
	struct lr_exec *x = calloc(1, sizeof *x);
	if (!x) {
		lr_err_set(err, "executor: out of memory");
		return -ENOMEM;
	}
	x->done = done;
	x->arg = arg;
	x->ctl_fd = -1;
	x->end_fd = -1;
	x->inherit = r->inherit_stdio;
	x->res.code = -1;
	lr_buf_init(&x->res.moved, 64u << 10);
	size_t limit = r->output_limit ? r->output_limit : DEFAULT_OUTPUT_LIMIT;
	int rc = lr_defer_init(s->loop, &x->defer, exec_deferred, x);
	if (rc) {
		free(x);
		lr_err_set(err, "executor: %s", lr_strerror(rc));
		return rc;
	}
	for (int i = 1; i <= 2 && !rc; i++)
		rc = capture_init(&x->cap[i], x->inherit ? 0 : limit);
	struct lr_exec_launch l;
	if (!rc)
		rc = lr_executor_launch_init(e, r, &l, err);
	else
		lr_err_set(err, "executor: out of memory");
	if (rc) {
		lr_exec_free(x);
		return rc;
	}
	if (x->inherit) {
		l.proc.stdio[0] = l.proc.stdio[1] = l.proc.stdio[2] = LR_PROC_INHERIT;
	} else {
		l.proc.stdio[0] = r->stdin_data ? LR_PROC_PIPE : LR_PROC_NULL;
		l.proc.stdio[1] = l.proc.stdio[2] = LR_PROC_PIPE;
		l.proc.out_cap[1] = l.proc.out_cap[2] = PIPE_CHUNK;
		l.proc.out_drop = 0;
	}
	l.proc.timeout = r->timeout > 0 ? r->timeout : 0;
	l.proc.on_event = exec_event;
	l.proc.arg = x;
	struct lr_err perr = { "" };
	x->set = s;
	x->owner = e;
	x->after = l.after;
	l.after = NULL;
	/* from the second run on, through the pre-forked helper (when it starts) */
	if (s->nstarted++ && !s->zygote && !s->zygote_failed && zygote_start(s) != 0)
		s->zygote_failed = 1;
	struct zygote_launch zl = { s->zygote, 0 };
	int end[2] = { -1, -1 }, fds[4];
	if (s->zygote) {
		zl.tag = x->tag = ++s->zygote->next_tag;
		l.proc.launch = zygote_launch;
		l.proc.launch_arg = &zl;
	} else if (!l.unconfined && pipe2(end, O_CLOEXEC) == 0) {
		/* the reaper tells the end on the fd after the others (a failed pipe: the exit tells) */
		memcpy(fds, l.fds, sizeof l.fds);
		fds[l.proc.n_extra] = end[1];
		l.proc.argv = helper_argv_end[l.proc.n_extra == 3];
		l.proc.fork_arg = (void *)l.proc.argv;
		l.proc.extra_fds = fds;
		l.proc.n_extra++;
	}
	rc = lr_proc_spawn(s->loop, &l.proc, &x->proc, &perr);
	if (end[1] >= 0)
		close(end[1]); /* the helper has its own */
	if (!rc && end[0] >= 0) {
		x->end_fd = end[0];
		end[0] = -1;
		fcntl(x->end_fd, F_SETFL, fcntl(x->end_fd, F_GETFL) | O_NONBLOCK);
		if (lr_watch_init(s->loop, &x->end_watch, x->end_fd, end_ready, x) == 0) {
			x->end_watching = 1;
			if (lr_watch_start(&x->end_watch, LR_READ) != 0)
				end_stop(x); /* the exit tells */
		} else {
			end_stop(x);
		}
	}
	if (end[0] >= 0)
		close(end[0]);
	if (rc && s->zygote) {
		/* a zygote that cannot start runs is given up: this run and the next exec */
		zygote_lost(s);
		x->tag = 0;
		l.proc.launch = NULL;
		perr.msg[0] = '\0';
		rc = lr_proc_spawn(s->loop, &l.proc, &x->proc, &perr);
	}
	if (!rc && l.ctl_fd >= 0) {
		/* the proxy starts once the helper hands over its listeners */
		x->ctl_fd = l.ctl_fd;
		l.ctl_fd = -1;
		x->allow = l.allow;
		x->nallow = l.nallow;
		x->allow_any = l.allow_any;
		l.allow = NULL;
		l.nallow = 0;
		fcntl(x->ctl_fd, F_SETFL, fcntl(x->ctl_fd, F_GETFL) | O_NONBLOCK);
		rc = lr_watch_init(s->loop, &x->ctl_watch, x->ctl_fd, ctl_ready, x);
		if (!rc) {
			x->ctl_watching = 1;
			rc = lr_watch_start(&x->ctl_watch, LR_READ);
		}
		if (rc)
			snprintf(perr.msg, sizeof perr.msg, "cannot watch the proxy's control socket: %s",
				 lr_strerror(rc));
	}
	lr_executor_launch_release(&l);
	if (rc) {
		lr_err_set(err, "executor: cannot start the sandbox helper: %s", perr.msg);
		x->set = NULL;
		x->owner = NULL;
		lr_exec_free(x);
		return rc;
	}
	if (!x->inherit && r->stdin_data) {
		int w = lr_proc_write(x->proc, r->stdin_data, r->stdin_len);
		(void)w; /* a command that ignores its stdin is fine (-EPIPE) */
		lr_proc_close_stdin(x->proc);
	}
	x->set = s;
	x->owner = e;
	x->next = s->runs;
	if (s->runs)
		s->runs->prev = x;
	s->runs = x;
	*out = x;
	return 0;
}

const struct lr_exec_result *lr_exec_result(const struct lr_exec *x) { return &x->res; }
pid_t lr_exec_pid(const struct lr_exec *x) { return x->proc ? lr_proc_pid(x->proc) : 0; }

void lr_exec_free(struct lr_exec *x)
{
	if (!x)
		return;
	exec_unlink(x);
	ctl_stop(x);
	end_stop(x);
	lr_egress_close(x->egress);
	x->egress = NULL;
	for (size_t i = 0; i < x->nallow; i++)
		free(x->allow[i]);
	free(x->allow);
	lr_buf_release(&x->res.net_log);
	lr_proc_close(x->proc);
	exec_after(x); /* the tree was killed with the helper's group */
	lr_buf_release(&x->res.moved);
	lr_defer_release(&x->defer);
	for (int i = 1; i <= 2; i++)
		capture_release(&x->cap[i]);
	lr_buf_release(&x->res.out);
	lr_buf_release(&x->res.err_out);
	free(x);
}
