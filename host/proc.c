/*
 * proc.c — process supervision: posix_spawn, a pidfd per child watched on
 * the loop, non-blocking pipes, process-group kill, deferred reaping.
 *
 * Why posix_spawn: the host runs worker threads, and a forked copy of a
 * multi-threaded process may only call async-signal-safe functions. glibc's
 * posix_spawn clones with CLONE_VM | CLONE_VFORK, runs only its own file
 * actions in the child, and reports a failed exec (or chdir, or dup2) as
 * its return value, so "no such program" is an ordinary error here. The
 * one exception, lr_proc_opts.fork_main, forks only a host that has never
 * started a thread, and makes the copy what the exec would have made it.
 *
 * Why the zombie is kept: the exit status is read with WNOWAIT and the
 * child is reaped only in lr_proc_close. Until then the zombie leader pins
 * its pid, which is also the process-group id, so kill(-pgid) can never
 * reach a stranger's group, even after the leader exited and left
 * background children behind.
 *
 * Why a lifeline rather than a parent death signal for the sandbox helper:
 * PR_SET_PDEATHSIG fires when the parent *thread* exits, and it is set in
 * the child after the fork, racing the parent's death. A pipe whose write
 * end only the host holds (close-on-exec, so no other child inherits it)
 * ends exactly when the host process ends, however it ends, or when the
 * host closes it; a child that starts after that sees EOF at once.
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_PAUSE_CAP (64u << 10)
#define READ_CHUNK (64u << 10)
#define READS_PER_ROUND 4

extern char **environ;

struct proc_out {
	int fd;            /* -1 when not piped or closed */
	struct lr_watch w;
	struct lr_buf buf;
	int eof;           /* 1 EOF, -errno read error, 0 open */
	int truncated;
	int paused;
};

struct lr_proc {
	struct lr_loop *loop;
	pid_t pid;
	int pidfd;
	struct lr_watch pidw;
	int exited, code, signo;
	int timed_out;
	struct lr_timer timer;
	int has_timer;
	int remote;   /* started by lr_proc_opts.launch: not our child, never reaped here */
	int told;     /* lr_proc_exit_told: its end was told before its exit */
	int lost;     /* remote, and its parent cannot tell its end: the pidfd does */
	int life;     /* our copy of the child's lifeline (lr_proc_opts.lifeline_fd), or -1 */
	int has_life; /* spawned with one: never signalled to end, only the lifeline closed */

	int in_fd;
	struct lr_watch inw;
	struct lr_buf inq;
	int in_status;
	int in_close_pending;

	struct proc_out out[3]; /* [1] stdout, [2] stderr; [0] unused */
	int out_drop;

	void (*on_event)(struct lr_proc *p, int events, void *arg);
	void *arg;

	/* Closed but not yet reaped: on the orphan list until the pidfd fires. */
	struct lr_proc *onext, *oprev;
};

/* Every proc lives on the loop thread, so one list serves all loops. */
static struct lr_proc *orphans;

static void maybe_stop_timer(struct lr_proc *p)
{
	if (p->has_timer && lr_proc_done(p))
		lr_timer_stop(&p->timer);
}

static void emit(struct lr_proc *p, int events)
{
	maybe_stop_timer(p);
	if (p->on_event)
		p->on_event(p, events, p->arg);
}

/*
 * A write that cannot raise SIGPIPE in the host: SIGPIPE is blocked on this
 * thread for the call and a SIGPIPE it caused is consumed. The process-wide
 * disposition stays as it is (a script piped into `head` still ends the
 * usual way).
 */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t n)
{
	sigset_t set, old, pending;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	int was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
	ssize_t r = write(fd, buf, n);
	int e = errno;
	if (r < 0 && e == EPIPE && !was_pending) {
		static const struct timespec zero = { 0, 0 };
		while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR) {
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return r;
}

static void input_shut(struct lr_proc *p, int status)
{
	if (p->in_fd >= 0) {
		lr_watch_release(&p->inw);
		close(p->in_fd);
		p->in_fd = -1;
	}
	lr_buf_release(&p->inq);
	if (!p->in_status)
		p->in_status = status;
}

/* Writes queued stdin until the pipe is full; 1 when something changed for the owner. */
static int input_flush(struct lr_proc *p)
{
	while (p->inq.len) {
		ssize_t n = write_nosigpipe(p->in_fd, p->inq.data, p->inq.len);
		if (n > 0) {
			lr_buf_consume(&p->inq, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			lr_watch_start(&p->inw, LR_WRITE);
			return 0;
		}
		input_shut(p, n < 0 ? -errno : -EIO);
		return 1;
	}
	if (p->in_fd >= 0)
		lr_watch_stop(&p->inw);
	if (p->in_close_pending)
		input_shut(p, LR_ECLOSED);
	return 1;
}

static void on_input(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_proc *p = arg;
	if (input_flush(p))
		emit(p, LR_PROC_EV_INPUT);
}

static void output_shut(struct proc_out *o, int eof)
{
	if (o->fd >= 0) {
		lr_watch_release(&o->w);
		close(o->fd);
		o->fd = -1;
	}
	o->eof = eof;
}

/*
 * Reads a few chunks per round (fairness between children). In drop mode
 * everything is read and what passes the cap is discarded; in pause mode
 * reading stops when the buffer is full, so the child feels backpressure.
 */
static void on_output(struct lr_proc *p, struct proc_out *o)
{
	char tmp[READ_CHUNK];
	for (int i = 0; i < READS_PER_ROUND && o->fd >= 0; i++) {
		size_t room = o->buf.cap - o->buf.len;
		size_t want = sizeof tmp;
		if (!p->out_drop) {
			if (room == 0) {
				lr_watch_stop(&o->w);
				o->paused = 1;
				break;
			}
			if (want > room)
				want = room;
		}
		ssize_t n = read(o->fd, tmp, want);
		if (n > 0) {
			size_t keep = (size_t)n < room ? (size_t)n : room;
			if (keep < (size_t)n)
				o->truncated = 1;
			if (keep && lr_buf_add(&o->buf, tmp, keep) < 0)
				o->truncated = 1; /* out of memory: the bytes are lost, say so */
			continue;
		}
		if (n == 0) {
			output_shut(o, 1);
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			output_shut(o, -errno);
		break;
	}
	emit(p, LR_PROC_EV_OUTPUT);
}

static void on_stdout(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_proc *p = arg;
	on_output(p, &p->out[1]);
}

static void on_stderr(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_proc *p = arg;
	on_output(p, &p->out[2]);
}

/*
 * Ends the child the way it asked for: its lifeline closed (the child then
 * ends everything it started), or SIGKILL to its group. Returns 1 for a
 * child with a lifeline (closed now or before).
 */
static int end_child(struct lr_proc *p)
{
	if (p->has_life) {
		if (p->life >= 0)
			close(p->life);
		p->life = -1;
		return 1;
	}
	if (p->remote)
		syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0);
	else if (p->pid > 0)
		kill(-p->pid, SIGKILL);
	return 0;
}

static void orphan_free(struct lr_proc *p)
{
	if (p->oprev)
		p->oprev->onext = p->onext;
	else if (orphans == p)
		orphans = p->onext;
	if (p->onext)
		p->onext->oprev = p->oprev;
	lr_watch_release(&p->pidw);
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
}

/* Reaps the child; 1 when it was reaped (or is gone), 0 while it still runs. */
static int reap(struct lr_proc *p, int block)
{
	if (p->remote) {
		/* not ours to reap: gone once its pidfd is readable */
		struct pollfd pf = { .fd = p->pidfd, .events = POLLIN };
		int n;
		while ((n = poll(&pf, 1, block ? -1 : 0)) < 0 && errno == EINTR) {
		}
		return n != 0;
	}
	for (;;) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED | (block ? 0 : WNOHANG)) < 0) {
			if (errno == EINTR)
				continue;
			return 1; /* ECHILD: someone else reaped it; nothing to wait for */
		}
		return si.si_pid != 0;
	}
}

static void on_pidfd(struct lr_watch *w, int events, void *arg)
{
	(void)w;
	(void)events;
	struct lr_proc *p = arg;
	if (p->exited) {
		/* An orphan: closed by its owner, now dead. */
		if (reap(p, 0))
			orphan_free(p);
		return;
	}
	if (p->remote) {
		/* lost by its parent: gone now, its status unknown */
		if (!reap(p, 0))
			return;
		p->exited = 1;
		p->code = -1;
		p->signo = 0;
		lr_watch_stop(&p->pidw);
		emit(p, LR_PROC_EV_EXIT);
		return;
	}
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
		if (errno == EINTR)
			return;
		/* Cannot happen for our own unreaped child; treat it as gone. */
		p->exited = 1;
		p->code = -1;
		p->signo = 0;
	} else if (si.si_pid == 0) {
		return;
	} else {
		p->exited = 1;
		if (si.si_code == CLD_EXITED) {
			p->code = si.si_status;
			p->signo = 0;
		} else {
			p->code = -1;
			p->signo = si.si_status;
		}
	}
	/* The pidfd stays readable until the reap: stop watching it. */
	lr_watch_stop(&p->pidw);
	emit(p, LR_PROC_EV_EXIT);
}

static void on_timeout(struct lr_timer *t, void *arg)
{
	(void)t;
	struct lr_proc *p = arg;
	if (lr_proc_done(p))
		return;
	p->timed_out = 1;
	end_child(p);
	emit(p, LR_PROC_EV_EXIT);
}

/*
 * Copies fd to a number at or above min, so that the dup2 file actions into
 * 0, 1, 2, 3... can never overwrite a source that is still to be used.
 */
static int dup_high(int fd, int min, int *tmp, int *ntmp)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, min);
	if (d < 0)
		return -errno;
	tmp[(*ntmp)++] = d;
	return d;
}

/*
 * The child's fds 0, 1, 2, 3... for o->launch and o->fork_main: the pipe
 * ends, /dev/null, the host's own stdio or the caller's fds, as
 * posix_spawn's file actions would make them. opened[i]: a /dev/null this
 * opened, for the caller to close. 0, or -errno with err.
 */
static int child_fds(const struct lr_proc_opts *o, int pipes[3][2], int *fds, int opened[3],
		     struct lr_err *err)
{
	int rc = 0;
	for (int i = 0; i < 3 && !rc; i++) {
		switch (o->stdio[i]) {
		case LR_PROC_NULL:
			opened[i] = open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
			if (opened[i] < 0)
				rc = -errno;
			fds[i] = opened[i];
			break;
		case LR_PROC_PIPE:
			fds[i] = pipes[i][i == 0 ? 0 : 1];
			break;
		case LR_PROC_INHERIT:
			fds[i] = i;
			break;
		default:
			fds[i] = o->stdio_fd[i];
		}
	}
	for (int i = 0; i < o->n_extra; i++)
		fds[3 + i] = o->extra_fds[i];
	if (rc)
		lr_err_set(err, "cannot open /dev/null: %s", strerror(-rc));
	return rc;
}

static int launch_remote(const struct lr_proc_opts *o, int pipes[3][2], pid_t *pid, int *pidfd,
			 struct lr_err *err)
{
	int fds[3 + 64], opened[3] = { -1, -1, -1 };
	if (o->cwd) {
		lr_err_set(err, "a launched process takes no cwd");
		return -EINVAL;
	}
	int rc = child_fds(o, pipes, fds, opened, err);
	if (!rc)
		rc = o->launch(o->launch_arg, fds, 3 + o->n_extra, pid, pidfd, err);
	for (int i = 0; i < 3; i++)
		if (opened[i] >= 0)
			close(opened[i]);
	return rc;
}

/* ---- a forked copy instead of an exec (lr_proc_opts.fork_main) ---- */

/*
 * The host's argument and environment blocks (what /proc/PID/cmdline and
 * environ show), and the command line the copy writes over the first.
 */
struct blocks {
	uintptr_t arg_start, arg_end, env_start, env_end;
	char *cmd; /* o->argv joined by NULs, cut to fit the block (its last byte stays NUL) */
	size_t cmdlen;
};

/*
 * Fields 48 to 51 of /proc/self/stat, and b->cmd. 0, or -1 when they cannot
 * be read, or when an envp string lies in the block the copy zeroes (the
 * child is then exec'd instead).
 */
static int read_blocks(const struct lr_proc_opts *o, struct blocks *b)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *s = strrchr(buf, ')'); /* the end of field 2, the name, which may hold anything */
	if (!s)
		return -1;
	s++;
	unsigned long long v[4] = { 0, 0, 0, 0 };
	for (int field = 3; field <= 51; field++) {
		s += strspn(s, " ");
		if (!*s)
			return -1;
		if (field >= 48)
			v[field - 48] = strtoull(s, NULL, 10);
		s += strcspn(s, " ");
	}
	/* an empty environment is one (env -i), an empty command line is not */
	for (int i = 0; i < 4; i += 2)
		if (v[i + 1] < v[i] + (i == 0) || v[i + 1] - v[i] > (64u << 20))
			return -1;
	*b = (struct blocks){ (uintptr_t)v[0], (uintptr_t)v[1], (uintptr_t)v[2], (uintptr_t)v[3],
			      NULL, 0 };
	for (char *const *e = o->envp; e && *e; e++)
		if ((uintptr_t)*e >= b->env_start && (uintptr_t)*e < b->env_end)
			return -1;
	size_t cap = b->arg_end - b->arg_start - 1, len = 0;
	for (char *const *a = o->argv; *a; a++)
		len += strlen(*a) + 1;
	if (!(b->cmd = malloc(len)))
		return -1;
	for (char *const *a = o->argv; *a; a++) {
		size_t k = strlen(*a) + 1;
		memcpy(b->cmd + b->cmdlen, *a, k);
		b->cmdlen += k;
	}
	if (b->cmdlen > cap)
		b->cmdlen = cap;
	return 0;
}

__attribute__((noreturn, format(printf, 1, 2)))
static void fork_die(const char *fmt, ...)
{
	int e = errno;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	dprintf(2, "luarig: the forked child: %s: %s\n", msg, strerror(e));
	_exit(126);
}

/*
 * In the copy, with every signal blocked (since the fork): what an exec'd
 * child would have, then fork_main. The fds go through numbers above all
 * of them first, so that no dup2 overwrites a source still to come. The
 * blocks are written last: o->cwd may point into them (b->cmd and envp,
 * checked by read_blocks, do not).
 */
__attribute__((noreturn))
static void fork_child(const struct lr_proc_opts *o, int *fds, int n, int cwdfd,
		       const struct blocks *b)
{
	if (cwdfd >= 0 && fchdir(cwdfd) < 0)
		fork_die("chdir '%s'", o->cwd);
	for (int i = 0; i < n; i++) {
		if (fds[i] < 0)
			continue;
		if ((fds[i] = fcntl(fds[i], F_DUPFD, n)) < 0)
			fork_die("fd %d", i);
	}
	for (int i = 0; i < n; i++) {
		if (fds[i] < 0 ? close(i) < 0 && errno != EBADF : dup2(fds[i], i) < 0)
			fork_die("fd %d", i);
	}
	if (close_range((unsigned)n, ~0U, 0) < 0) {
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
			fork_die("close_range");
		for (rlim_t fd = (rlim_t)n; fd < rl.rlim_cur; fd++)
			close((int)fd);
	}
	if (setpgid(0, 0) < 0)
		fork_die("setpgid");
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL); /* KILL, STOP and glibc's own two refuse: they are default */
	/* the command line the exec would show, cut to fit the host's */
	memset((void *)b->arg_start, 0, b->arg_end - b->arg_start);
	memcpy((void *)b->arg_start, b->cmd, b->cmdlen);
	if (o->envp) {
		environ = (char **)o->envp;
		memset((void *)b->env_start, 0, b->env_end - b->env_start);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	_exit(o->fork_main(o->fork_arg));
}

/*
 * The fork itself, every signal blocked across it (as posix_spawn does), so
 * that no handler of the host's runs in the copy. 0, or -errno with err.
 */
static int fork_run(const struct lr_proc_opts *o, int pipes[3][2], int cwdfd,
		    const struct blocks *b, pid_t *pid, struct lr_err *err)
{
	int fds[3 + 64], opened[3] = { -1, -1, -1 };
	int rc = child_fds(o, pipes, fds, opened, err);
	for (int i = 0; i < 3; i++) {
		/* an inherited fd the exec would have closed, or none: closed in the copy */
		int fl = o->stdio[i] == LR_PROC_INHERIT ? fcntl(i, F_GETFD) : 0;
		if (fl < 0 || (fl & FD_CLOEXEC))
			fds[i] = -1;
	}
	if (!rc) {
		fflush(NULL); /* nothing buffered is written twice (the copy never flushes) */
		sigset_t all, old;
		memset(&all, 0xff, sizeof all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pid_t c = fork();
		if (c == 0)
			fork_child(o, fds, 3 + o->n_extra, cwdfd, b);
		rc = c < 0 ? -errno : 0;
		/* the copy's group exists before this returns, as after posix_spawn: a
		   kill of the group right away reaches it (the copy sets it too) */
		if (c > 0)
			setpgid(c, c);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc)
			lr_err_set(err, "cannot fork: %s", strerror(-rc));
		else
			*pid = c;
	}
	for (int i = 0; i < 3; i++)
		if (opened[i] >= 0)
			close(opened[i]);
	return rc;
}

int lr_proc_spawn(struct lr_loop *loop, const struct lr_proc_opts *o,
		  struct lr_proc **out, struct lr_err *err)
{
	*out = NULL;
	lr_err_clear(err);
	if (!o->argv || !o->argv[0] || o->n_extra < 0 || o->n_extra > 64) {
		lr_err_set(err, "invalid arguments");
		return -EINVAL;
	}
	const char *file = o->file ? o->file : o->argv[0];
	int rc = 0, cwdfd = -1;
	int pipes[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	int tmp[3 + 64], ntmp = 0;
	int min = 3 + o->n_extra;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int fa_ok = 0, attr_ok = 0;
	pid_t pid = -1;

	struct lr_proc *p = calloc(1, sizeof *p);
	if (!p) {
		lr_err_set(err, "out of memory");
		return -ENOMEM;
	}
	p->loop = loop;
	p->pidfd = p->in_fd = p->out[1].fd = p->out[2].fd = p->out[0].fd = p->life = -1;
	p->out_drop = o->out_drop;
	lr_buf_init(&p->inq, SIZE_MAX);
	for (int i = 1; i <= 2; i++) {
		size_t cap = o->out_cap[i];
		if (!cap && !o->out_drop)
			cap = DEFAULT_PAUSE_CAP;
		lr_buf_init(&p->out[i].buf, cap);
	}

	/* The working directory is checked here, so its failure is told apart from exec's. */
	if (o->cwd) {
		cwdfd = open(o->cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cwdfd < 0 || faccessat(cwdfd, ".", X_OK, 0) < 0) {
			rc = -errno;
			lr_err_set(err, "cannot change to directory '%s': %s",
				   o->cwd, strerror(-rc));
			goto out;
		}
	}

	if (o->lifeline_fd > 2) {
		p->has_life = 1;
		if ((p->life = fcntl(o->lifeline_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
			rc = -errno;
			goto fail_sys;
		}
	}
	if ((rc = posix_spawn_file_actions_init(&fa)) != 0) {
		rc = -rc;
		goto fail_sys;
	}
	fa_ok = 1;
	for (int i = 0; i < 3; i++) {
		int src = -1;
		switch (o->stdio[i]) {
		case LR_PROC_NULL:
			rc = -posix_spawn_file_actions_addopen(&fa, i, "/dev/null",
							       i == 0 ? O_RDONLY : O_WRONLY, 0);
			break;
		case LR_PROC_PIPE:
			if (pipe2(pipes[i], O_CLOEXEC) < 0) {
				rc = -errno;
				break;
			}
			src = pipes[i][i == 0 ? 0 : 1];
			break;
		case LR_PROC_INHERIT:
			break;
		case LR_PROC_FD:
			src = o->stdio_fd[i];
			break;
		default:
			rc = -EINVAL;
		}
		if (rc)
			goto fail_sys;
		if (src >= 0) {
			int d = dup_high(src, min, tmp, &ntmp);
			if (d < 0) {
				rc = d;
				goto fail_sys;
			}
			if ((rc = -posix_spawn_file_actions_adddup2(&fa, d, i)) != 0)
				goto fail_sys;
		}
	}
	for (int i = 0; i < o->n_extra; i++) {
		int d = dup_high(o->extra_fds[i], min, tmp, &ntmp);
		if (d < 0) {
			rc = d;
			goto fail_sys;
		}
		if ((rc = -posix_spawn_file_actions_adddup2(&fa, d, 3 + i)) != 0)
			goto fail_sys;
	}
	if (cwdfd >= 0 && (rc = -posix_spawn_file_actions_addfchdir_np(&fa, cwdfd)) != 0)
		goto fail_sys;
	if (o->close_inherited && (rc = -posix_spawn_file_actions_addclosefrom_np(&fa, min)) != 0)
		goto fail_sys;

	if ((rc = -posix_spawnattr_init(&attr)) != 0)
		goto fail_sys;
	attr_ok = 1;
	/* Own process group; empty mask; default dispositions (the host handles INT/TERM, ignores nothing). */
	sigset_t none, all;
	sigemptyset(&none);
	/*
	 * Every bit, not sigfillset: glibc's set leaves out its two internal
	 * signals (32, 33), and its spawn child would then hand them to the
	 * program as SIG_IGN. The child is single-threaded and execs at once,
	 * so their default disposition is safe there.
	 */
	memset(&all, 0xff, sizeof all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
					       POSIX_SPAWN_SETSIGDEF);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);

	char *const *envp = o->envp ? o->envp : environ;
	if (o->launch) {
		rc = launch_remote(o, pipes, &pid, &p->pidfd, err);
		if (rc)
			goto out;
		p->remote = 1;
		goto started;
	}
	struct blocks b = { 0 };
	if (o->fork_main && __libc_single_threaded && read_blocks(o, &b) == 0) {
		rc = fork_run(o, pipes, cwdfd, &b, &pid, err);
		free(b.cmd);
		if (rc)
			goto out;
	} else if (strchr(file, '/')) {
		rc = posix_spawn(&pid, file, &fa, &attr, o->argv, envp);
	} else {
		rc = posix_spawnp(&pid, file, &fa, &attr, o->argv, envp);
	}
	if (rc != 0) {
		rc = -rc;
		lr_err_set(err, "cannot run '%s': %s", file, strerror(-rc));
		goto out;
	}
	p->pid = pid;

	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
started:
	p->pid = pid;
	if (p->pidfd < 0) {
		rc = -errno;
		end_child(p);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
		}
		goto fail_sys;
	}
	if ((rc = lr_watch_init(loop, &p->pidw, p->pidfd, on_pidfd, p)) != 0)
		goto fail_kill;
	if (o->stdio[0] == LR_PROC_PIPE) {
		p->in_fd = pipes[0][1];
		pipes[0][1] = -1;
		fcntl(p->in_fd, F_SETFL, O_NONBLOCK);
		if ((rc = lr_watch_init(loop, &p->inw, p->in_fd, on_input, p)) != 0)
			goto fail_kill;
	} else {
		p->in_status = LR_ECLOSED;
	}
	for (int i = 1; i <= 2; i++) {
		if (o->stdio[i] != LR_PROC_PIPE) {
			p->out[i].eof = 1;
			continue;
		}
		p->out[i].fd = pipes[i][0];
		pipes[i][0] = -1;
		fcntl(p->out[i].fd, F_SETFL, O_NONBLOCK);
		rc = lr_watch_init(loop, &p->out[i].w, p->out[i].fd,
				   i == 1 ? on_stdout : on_stderr, p);
		if (rc || (rc = lr_watch_start(&p->out[i].w, LR_READ)) != 0)
			goto fail_kill;
	}
	if (!p->remote && (rc = lr_watch_start(&p->pidw, LR_READ)) != 0)
		goto fail_kill;
	if (o->timeout > 0) {
		if ((rc = lr_timer_init(loop, &p->timer, on_timeout, p)) != 0)
			goto fail_kill;
		p->has_timer = 1;
		lr_timer_start(&p->timer, o->timeout);
	}
	p->on_event = o->on_event;
	p->arg = o->arg;
	*out = p;
	p = NULL;
	rc = 0;
	goto out;

fail_kill:
	lr_err_set(err, "cannot watch process %d: %s", (int)pid, lr_strerror(rc));
	lr_proc_close(p);
	lr_proc_reap_all(loop);
	p = NULL;
	goto out;
fail_sys:
	lr_err_set(err, "cannot start '%s': %s", file, lr_strerror(rc));
out:
	if (p) {
		if (p->life >= 0)
			close(p->life);
		lr_buf_release(&p->inq);
		lr_buf_release(&p->out[1].buf);
		lr_buf_release(&p->out[2].buf);
		free(p);
	}
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++)
			if (pipes[i][j] >= 0)
				close(pipes[i][j]);
	for (int i = 0; i < ntmp; i++)
		close(tmp[i]);
	if (cwdfd >= 0)
		close(cwdfd);
	if (fa_ok)
		posix_spawn_file_actions_destroy(&fa);
	if (attr_ok)
		posix_spawnattr_destroy(&attr);
	return rc;
}

pid_t lr_proc_pid(const struct lr_proc *p)
{
	return p->pid;
}

int lr_proc_status(const struct lr_proc *p, int *code, int *signo)
{
	if (!p->exited)
		return 0;
	if (code)
		*code = p->code;
	if (signo)
		*signo = p->signo;
	return 1;
}

int lr_proc_timed_out(const struct lr_proc *p)
{
	return p->timed_out;
}

int lr_proc_done(const struct lr_proc *p)
{
	if (!p->exited)
		return 0;
	return p->timed_out || (p->out[1].eof != 0 && p->out[2].eof != 0);
}

int lr_proc_kill(struct lr_proc *p, int signo)
{
	if (signo == SIGKILL && end_child(p))
		return 0;
	/* a launched child may be reaped already (by its parent): only its pidfd is safe */
	if (p->remote ? syscall(SYS_pidfd_send_signal, p->pidfd, signo, NULL, 0) < 0
		      : kill(-p->pid, signo) < 0)
		return -errno;
	return 0;
}

static void set_status(struct lr_proc *p, int st)
{
	p->exited = 1;
	if (WIFEXITED(st)) {
		p->code = WEXITSTATUS(st);
		p->signo = 0;
	} else {
		p->code = -1;
		p->signo = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
	}
}

void lr_proc_exit_told(struct lr_proc *p, int st)
{
	if (p->remote || p->exited)
		return;
	set_status(p, st);
	p->told = 1;
	/* the pidfd is read again only to reap, once closed (on_pidfd's orphan branch) */
	lr_watch_stop(&p->pidw);
	emit(p, LR_PROC_EV_EXIT);
}

void lr_proc_remote_exit(struct lr_proc *p, int st)
{
	if (!p->remote || p->exited || p->lost)
		return;
	if (st == LR_PROC_LOST) {
		p->lost = 1;
		lr_watch_start(&p->pidw, LR_READ);
		return;
	}
	set_status(p, st);
	emit(p, LR_PROC_EV_EXIT);
}

int lr_proc_write(struct lr_proc *p, const void *data, size_t n)
{
	if (p->in_status)
		return p->in_status;
	if (p->in_close_pending)
		return LR_ECLOSED;
	const char *s = data;
	/* Straight into the pipe while it takes bytes; queue only the rest. */
	while (!p->inq.len && n) {
		ssize_t w = write_nosigpipe(p->in_fd, s, n);
		if (w > 0) {
			s += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		input_shut(p, w < 0 ? -errno : -EIO);
		return p->in_status;
	}
	if (!n)
		return 0;
	int rc = lr_buf_add(&p->inq, s, n);
	if (rc)
		return rc;
	return lr_watch_start(&p->inw, LR_WRITE);
}

size_t lr_proc_input_pending(const struct lr_proc *p)
{
	return p->inq.len;
}

int lr_proc_input_status(const struct lr_proc *p)
{
	return p->in_status;
}

void lr_proc_close_stdin(struct lr_proc *p)
{
	if (p->in_fd < 0)
		return;
	if (p->inq.len)
		p->in_close_pending = 1;
	else
		input_shut(p, LR_ECLOSED);
}

const struct lr_buf *lr_proc_output(const struct lr_proc *p, int stream)
{
	return &p->out[stream == LR_PROC_STDERR ? 2 : 1].buf;
}

int lr_proc_output_eof(const struct lr_proc *p, int stream)
{
	return p->out[stream == LR_PROC_STDERR ? 2 : 1].eof;
}

int lr_proc_truncated(const struct lr_proc *p, int stream)
{
	return p->out[stream == LR_PROC_STDERR ? 2 : 1].truncated;
}

void lr_proc_consume(struct lr_proc *p, int stream, size_t n)
{
	struct proc_out *o = &p->out[stream == LR_PROC_STDERR ? 2 : 1];
	if (n > o->buf.len)
		n = o->buf.len;
	lr_buf_consume(&o->buf, n);
	if (o->paused && o->fd >= 0 && o->buf.len < o->buf.cap) {
		o->paused = 0;
		lr_watch_start(&o->w, LR_READ);
	}
}

void lr_proc_close(struct lr_proc *p)
{
	if (!p)
		return;
	p->on_event = NULL;
	/* The leader is not reaped yet, so -pid is still our group. */
	end_child(p);
	if (p->has_timer)
		lr_timer_release(&p->timer);
	p->has_timer = 0;
	input_shut(p, LR_ECLOSED);
	for (int i = 1; i <= 2; i++) {
		output_shut(&p->out[i], 1);
		lr_buf_release(&p->out[i].buf);
	}
	p->exited = 1; /* from now on on_pidfd reaps */
	if (p->pidfd < 0 || reap(p, 0)) {
		lr_watch_release(&p->pidw);
		if (p->pidfd >= 0)
			close(p->pidfd);
		free(p);
		return;
	}
	/* SIGKILL is not instant: reap from the loop once the pidfd fires. */
	p->oprev = NULL;
	p->onext = orphans;
	if (orphans)
		orphans->oprev = p;
	orphans = p;
	lr_watch_start(&p->pidw, LR_READ);
}

void lr_proc_leave_told(struct lr_loop *loop)
{
	for (struct lr_proc *p = orphans, *next; p; p = next) {
		next = p->onext;
		if (p->loop != loop || !p->told)
			continue;
		if (!reap(p, 0)) {
			/* still ending: the process that inherits it at our exit reaps it */
		}
		orphan_free(p);
	}
}

void lr_proc_reap_all(struct lr_loop *loop)
{
	for (struct lr_proc *p = orphans, *next; p; p = next) {
		next = p->onext;
		if (p->loop != loop)
			continue;
		reap(p, 1);
		orphan_free(p);
	}
}
