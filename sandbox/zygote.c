/*
 * zygote.c — the pre-forked helper, "luarig __sandbox-helper --zygote"
 * (docs/sandbox.md, "A warm executor").
 *
 * A long-lived executor set runs many commands with one profile. Each run
 * used to re-execute the luarig binary as its confinement helper: an exec,
 * the dynamic linking of every library luarig needs, and libseccomp. The
 * zygote is that helper image exec'd once per set, single-threaded, with an
 * empty environment and no Lua state; per run the host sends it the run's
 * fds and it forks a copy that runs lr_sbx_helper_main exactly as an exec'd
 * helper would. Everything that confines a run is still made per run, in
 * that copy: the namespaces (a fresh pid namespace, mount view, network,
 * ipc and uts namespace each run), the placeholders' binds, Landlock, the
 * capability drop, the filter load. The zygote itself holds nothing of any
 * run: it closes what it received once the copy has it.
 *
 * fds: 3 the request socket (SOCK_SEQPACKET), 4 the zygote's own
 * lifeline, 5 the event socket (SOCK_SEQPACKET: "exited" only, so that a
 * host waiting for its answer on 3 never reads another run's end first).
 * A request is one message of struct lr_sbx_zygote_req with, as
 * SCM_RIGHTS, the run's stdin, stdout, stderr, spec, lifeline and (with a
 * proxy) control socket, which become the copy's fds 0 to 5. The answer is
 * a struct lr_sbx_zygote_msg "started" with the copy's pid and, as
 * SCM_RIGHTS, a pidfd of it (taken before the copy can be reaped, so it
 * names exactly that process), or "failed" with an errno; then, when the
 * copy exits, "exited" with its wait status and the request's tag on 5. The copy leads its own process
 * group. The zygote exits when the socket or its lifeline ends (the host
 * closed the set, or died); the copies have lifelines of their own, so
 * each run still ends with the host.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZYGOTE_FD_SOCK 3
#define ZYGOTE_FD_LIFE 4
#define ZYGOTE_FD_EVENTS 5
/* Copies alive at once (each a run of the set); a request past it fails with EAGAIN. */
#define MAX_COPIES 1024

static struct {
	pid_t pid;
	uint64_t tag;
	/* a prepared copy's: its reaper's socket, which says how the run ended
	   before the copy's own exit (the teardown of its namespaces) is done; -1 */
	int end;
	int reported; /* EXITED is out (from end): the copy's reaping says nothing more */
} copies[MAX_COPIES];
static int ncopies;
/*
 * As root: the user namespace an idmapped /etc is made through
 * (lr__sbx_idmap_userns), made once here instead of by every copy (a
 * clone3 of the helper image and two map writes a run). It maps only uid
 * and gid 0 to 65534 and holds no process, so it carries nothing of one run
 * to the next: each copy still clones /etc afresh and idmaps its own tree.
 * -1: none (not root, or it could not be made: copies make their own).
 */
static int zygote_idmap = -1;
/*
 * Ends not yet sent: the event socket is non-blocking, so a host busy
 * elsewhere (or waiting for an answer on fd 3) never stalls the zygote.
 * At most one per copy.
 */
static struct lr_sbx_zygote_msg pending[MAX_COPIES];
static int npending;
/* The fds a run hands over: 0, 1, 2 and the helper's 3, 4, 5. */
#define RUN_FDS 6
/*
 * Prepared copies (internal.h), one per view at most: made from the spec
 * of a request that allowed one as soon as that request was answered,
 * given the next request with the same view whose mount sources are still
 * the files they were (want); one whose sources changed is dropped. A set
 * whose keys take turns (each key's HOME is its own, so its own view) has
 * one for each of its last STANDBY_MAX views; the oldest goes first.
 */
#define STANDBY_MAX 4
struct standby {
	pid_t pid; /* 0: a free slot */
	int pidfd, hsock, rsock;
	uint64_t made; /* the order of making, for dropping the oldest */
	struct lr_sbx_spec spec;
	struct lr__sbx_ident *want;
};
static struct standby standbys[STANDBY_MAX];
static uint64_t standbys_made;
static pid_t zygote_pid;

static void on_chld(int sig)
{
	(void)sig; /* only to interrupt ppoll */
}

static int send_msg(int sock, const struct lr_sbx_zygote_msg *m, int fd)
{
	return lr_sbx_send_fds(sock, m, sizeof *m, &fd, fd >= 0, 0);
}

/* The run's spec from its sealed memfd, decoded: 0, or -1 (the copy's helper will say why). */
static int read_run_spec(int fd, struct lr_sbx_spec *out)
{
	size_t n;
	int e;
	const char *why;
	char *buf = lr__sbx_read_sealed(fd, &n, &e, &why);
	if (!buf)
		return -1;
	struct lr_err err = { "" };
	int rc = lr_sbx_spec_decode(buf, n, out, &err) ? -1 : 0;
	free(buf);
	return rc;
}

/*
 * Each mount's identity now (internal.h; not following a last link, as the
 * reaper opens the source): 0, or -1 when a path cannot be looked at.
 */
static int idents(const struct lr_sbx_spec *s, struct lr__sbx_ident *out)
{
	for (size_t i = 0; i < s->nmounts; i++) {
		struct stat st, dt;
		if (fstatat(AT_FDCWD, s->mounts[i].src, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -1;
		out[i] = (struct lr__sbx_ident){ (uint64_t)st.st_dev, (uint64_t)st.st_ino, 0, 0 };
		if (S_ISCHR(st.st_mode)) {
			if (fstatat(AT_FDCWD, s->mounts[i].dst, &dt, AT_SYMLINK_NOFOLLOW) < 0)
				return -1;
			out[i].ddev = (uint64_t)dt.st_dev;
			out[i].dino = (uint64_t)dt.st_ino;
		}
	}
	return 0;
}

static int sources_unchanged(const struct standby *sb)
{
	size_t n = sb->spec.nmounts;
	struct lr__sbx_ident *now = calloc(n ? n : 1, sizeof *now);
	int same = now && idents(&sb->spec, now) == 0 &&
		   memcmp(now, sb->want, n * sizeof *now) == 0;
	free(now);
	return same;
}

/* A run's fds to a prepared copy's helper or reaper: 0, or -errno (never waits). */
static int send_fds(int sock, const int *fds, int n)
{
	struct lr__sbx_standby_msg m = { LR__SBX_STANDBY_MAGIC, (uint32_t)n };
	return lr_sbx_send_fds(sock, &m, sizeof m, fds, n, MSG_DONTWAIT);
}

/*
 * Frees a slot. kill: the copy was not given a run, end it too (its reaper
 * dies with it: the parent death signal); taken: its pidfd and reaper
 * socket have gone to the run, only the rest is closed.
 */
static void standby_forget(struct standby *sb, int kill_it, int taken)
{
	if (!sb->pid)
		return;
	if (kill_it)
		kill(-sb->pid, SIGKILL);
	if (!taken) {
		close(sb->pidfd);
		close(sb->rsock);
	}
	close(sb->hsock);
	lr_sbx_spec_release(&sb->spec);
	free(sb->want);
	sb->want = NULL;
	sb->pid = 0;
}

/*
 * In the prepared copy: fds 0-2 /dev/null, 3 and 4 its ends of the two
 * sockets, 5 the idmapping's namespace (if any), nothing else.
 */
__attribute__((noreturn))
static void standby_copy(struct standby *sb, int hs, int rs)
{
	int top = RUN_FDS + 64;
	int h = fcntl(hs, F_DUPFD_CLOEXEC, top), r = fcntl(rs, F_DUPFD_CLOEXEC, top);
	int ns = zygote_idmap >= 0 ? fcntl(zygote_idmap, F_DUPFD_CLOEXEC, top) : -1;
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (h < 0 || r < 0 || nul < 0 || (zygote_idmap >= 0 && ns < 0))
		_exit(LR_SBX_EXIT_SETUP);
	for (int i = 0; i < 3; i++)
		if (dup2(nul, i) < 0)
			_exit(LR_SBX_EXIT_SETUP);
	if (dup3(h, 3, O_CLOEXEC) < 0 || dup3(r, 4, O_CLOEXEC) < 0 ||
	    (ns >= 0 && dup3(ns, 5, O_CLOEXEC) < 0))
		_exit(LR_SBX_EXIT_SETUP);
	lr__sbx_idmap_ns = ns >= 0 ? 5 : -1;
	if (syscall(SYS_close_range, ns >= 0 ? 6 : 5, ~0U, 0) < 0)
		_exit(LR_SBX_EXIT_SETUP);
	if (setpgid(0, 0) < 0)
		_exit(LR_SBX_EXIT_SETUP);
	lr__sbx_as_spawned();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != zygote_pid)
		_exit(LR_SBX_EXIT_SETUP);
	lr__sbx_standby_main(&sb->spec, sb->want, 3, 4, zygote_pid);
}

/*
 * A prepared copy of spec (taken: released here when none is made), unless
 * one of its view is there already; in a free slot, else the oldest's.
 */
static void standby_make(struct lr_sbx_spec *spec)
{
	struct standby *sb = NULL;
	for (int i = 0; i < STANDBY_MAX; i++) {
		struct standby *c = &standbys[i];
		if (c->pid && lr__sbx_same_view(&c->spec, spec)) {
			lr_sbx_spec_release(spec);
			return;
		}
		if (!sb || (sb->pid && (!c->pid || c->made < sb->made)))
			sb = c;
	}
	standby_forget(sb, 1, 0);
	int h[2] = { -1, -1 }, r[2] = { -1, -1 };
	struct lr__sbx_ident *want = calloc(spec->nmounts ? spec->nmounts : 1, sizeof *want);
	if (!want || idents(spec, want) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, h) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, r) < 0)
		goto fail;
	sb->spec = *spec;
	sb->want = want;
	pid_t pid = fork();
	if (pid == 0)
		standby_copy(sb, h[1], r[1]);
	close(h[1]);
	close(r[1]);
	h[1] = r[1] = -1;
	int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	if (pidfd < 0) {
		if (pid > 0)
			kill(-pid, SIGKILL);
		goto fail;
	}
	sb->pid = pid;
	sb->pidfd = pidfd;
	sb->hsock = h[0];
	sb->rsock = r[0];
	sb->made = ++standbys_made;
	return;
fail:
	for (int i = 0; i < 2; i++) {
		if (h[i] >= 0)
			close(h[i]);
		if (r[i] >= 0)
			close(r[i]);
	}
	free(want);
	sb->want = NULL;
	lr_sbx_spec_release(spec);
}

/*
 * The run (fds as received) handed to the prepared copy of its view, if
 * there is one: its pid, with *pidfd and *end (the reaper's socket); or 0.
 * A copy of its view whose sources changed, or that cannot take the fds
 * (it died), is dropped.
 */
static pid_t standby_take(const int *fds, int n, const struct lr_sbx_spec *spec, int *pidfd,
			  int *end)
{
	if (!spec || n != 5)
		return 0;
	for (int i = 0; i < STANDBY_MAX; i++) {
		struct standby *sb = &standbys[i];
		if (!sb->pid || !lr__sbx_same_view(&sb->spec, spec))
			continue;
		const int hf[2] = { fds[2], fds[4] }, rf[4] = { fds[0], fds[1], fds[2], fds[3] };
		if (!sources_unchanged(sb) || send_fds(sb->hsock, hf, 2) != 0 ||
		    send_fds(sb->rsock, rf, 4) != 0) {
			standby_forget(sb, 1, 0);
			return 0;
		}
		pid_t pid = sb->pid;
		*pidfd = sb->pidfd;
		*end = sb->rsock;
		standby_forget(sb, 0, 1);
		return pid;
	}
	return 0;
}

/*
 * In the copy: the received fds placed as 0..n-1 (through numbers above
 * every one of them, so that no dup2 overwrites a source still to come),
 * everything else closed, the process group, mask and dispositions of a
 * freshly spawned helper; then the helper itself.
 */
__attribute__((noreturn))
static void run_copy(int *fds, int n)
{
	int top = RUN_FDS + 64;
	int ns = zygote_idmap >= 0 ? fcntl(zygote_idmap, F_DUPFD_CLOEXEC, top + RUN_FDS) : -1;
	if (zygote_idmap >= 0 && ns < 0)
		_exit(LR_SBX_EXIT_SETUP);
	for (int i = 0; i < n; i++) {
		int d = fcntl(fds[i], F_DUPFD, top);
		if (d < 0)
			_exit(LR_SBX_EXIT_SETUP);
		fds[i] = d;
	}
	for (int i = 0; i < n; i++)
		if (dup2(fds[i], i) < 0)
			_exit(LR_SBX_EXIT_SETUP);
	int first = n;
	if (ns >= 0) {
		if (dup3(ns, n, O_CLOEXEC) < 0)
			_exit(LR_SBX_EXIT_SETUP);
		lr__sbx_idmap_ns = n;
		first = n + 1;
	}
	if (syscall(SYS_close_range, first, ~0U, 0) < 0)
		for (int fd = first; fd < top + 2 * RUN_FDS + 1; fd++)
			close(fd);
	if (setpgid(0, 0) < 0)
		_exit(LR_SBX_EXIT_SETUP);
	lr__sbx_as_spawned();
	char *argv[] = { "luarig", "__sandbox-helper", NULL };
	_exit(lr_sbx_helper_main(2, argv));
}

/* One request: 0, or -errno when the socket itself failed (the zygote then ends). */
static int serve_request(int sock)
{
	struct lr_sbx_zygote_req req;
	struct iovec iov = { &req, sizeof req };
	union {
		char buf[CMSG_SPACE(RUN_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof u.buf };
	ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (r < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -errno;
	if (r == 0)
		return -EPIPE;
	int fds[RUN_FDS];
	int n = lr__sbx_take_fds(&mh, fds, RUN_FDS);
	struct lr_sbx_zygote_msg m = { .type = LR_SBX_ZYGOTE_FAILED, .err = EINVAL };
	int bad = r != (ssize_t)sizeof req || req.magic != LR_SBX_ZYGOTE_MAGIC ||
		  (mh.msg_flags & MSG_CTRUNC) || req.nfds != (uint32_t)n || n < 5;
	pid_t pid = -1;
	int pidfd = -1;
	if (!bad && ncopies == MAX_COPIES) {
		bad = 1;
		m.err = EAGAIN;
	}
	int end = -1;
	struct lr_sbx_spec spec;
	int have = !bad && n == 5 && read_run_spec(fds[3], &spec) == 0;
	if (have && !lr__sbx_standby_ok(&spec)) {
		lr_sbx_spec_release(&spec);
		have = 0;
	}
	if (!bad && (pid = standby_take(fds, n, have ? &spec : NULL, &pidfd, &end)) > 0) {
		/* the prepared copy runs it */
	} else if (!bad) {
		pid = fork();
		if (pid == 0)
			run_copy(fds, n);
		if (pid < 0)
			m.err = errno;
		else if ((pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
			m.err = errno; /* the copy runs; the host cannot watch it: end it */
	}
	for (int i = 0; i < n; i++)
		close(fds[i]); /* the copy has its own: nothing of the run stays here */
	if (pid > 0 && pidfd < 0) {
		kill(-pid, SIGKILL);
		pid = -1;
	}
	if (pid > 0) {
		copies[ncopies].pid = pid;
		copies[ncopies].end = end;
		copies[ncopies].reported = 0;
		copies[ncopies++].tag = req.tag;
		end = -1;
		m.type = LR_SBX_ZYGOTE_STARTED;
		m.err = 0;
		m.pid = pid;
	}
	m.tag = r == (ssize_t)sizeof req ? req.tag : 0;
	int rc = send_msg(sock, &m, pidfd);
	if (pidfd >= 0)
		close(pidfd);
	if (end >= 0)
		close(end);
	if (have && rc == 0)
		standby_make(&spec); /* the next run of this view, prepared while this one runs */
	else if (have)
		lr_sbx_spec_release(&spec);
	return rc;
}

/*
 * A prepared copy's reaper says its run ended (its namespace is empty):
 * EXITED goes out now, with the status the copy's exit will have.
 */
static void run_ended(int i)
{
	if (npending >= MAX_COPIES)
		return; /* read once the queue drains */
	struct lr__sbx_standby_end e;
	ssize_t r = recv(copies[i].end, &e, sizeof e, MSG_DONTWAIT);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	close(copies[i].end);
	copies[i].end = -1;
	if (r != (ssize_t)sizeof e || e.magic != LR__SBX_STANDBY_MAGIC || e.code < 0 || e.code > 255)
		return; /* none: the copy's reaping tells */
	pending[npending++] = (struct lr_sbx_zygote_msg){
		.type = LR_SBX_ZYGOTE_EXITED, .pid = copies[i].pid, .status = e.code << 8,
		.tag = copies[i].tag };
	copies[i].reported = 1;
}

void lr_sbx_zygote_main(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP; /* no SA_RESTART: ppoll returns EINTR */
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t chld, waitmask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &waitmask);
	sigdelset(&waitmask, SIGCHLD);
	int type;
	socklen_t tl = sizeof type;
	for (int fd = ZYGOTE_FD_SOCK; fd <= ZYGOTE_FD_EVENTS; fd += ZYGOTE_FD_EVENTS - ZYGOTE_FD_SOCK) {
		tl = sizeof type;
		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET) {
			dprintf(2, "luarig sandbox: zygote: fd %d is not a SOCK_SEQPACKET socket\n", fd);
			_exit(LR_SBX_EXIT_SETUP);
		}
	}
	if (fcntl(ZYGOTE_FD_EVENTS, F_SETFL, O_NONBLOCK) < 0 ||
	    fcntl(ZYGOTE_FD_LIFE, F_SETFD, FD_CLOEXEC) < 0) {
		dprintf(2, "luarig sandbox: zygote: no lifeline on fd %d\n", ZYGOTE_FD_LIFE);
		_exit(LR_SBX_EXIT_SETUP);
	}
	zygote_pid = getpid();
	if (geteuid() == 0) {
		int ns = lr__sbx_idmap_userns();
		zygote_idmap = ns >= 0 ? ns : -1;
	}
	for (;;) {
		/* reaped only here, after each "started" went out: a pidfd is always taken first */
		int st;
		pid_t p;
		/* an end is queued per copy that ended: with the queue full (a host that reads
		   no events), the rest wait unreaped until it drains */
		while (npending < MAX_COPIES && (p = waitpid(-1, &st, WNOHANG)) > 0) {
			for (int i = 0; i < STANDBY_MAX; i++)
				if (p == standbys[i].pid) /* its set-up failed: the next run is forked */
					standby_forget(&standbys[i], 0, 0);
			for (int i = 0; i < ncopies; i++)
				if (copies[i].pid == p) {
					if (!copies[i].reported)
						pending[npending++] = (struct lr_sbx_zygote_msg){
							.type = LR_SBX_ZYGOTE_EXITED, .pid = p, .status = st,
							.tag = copies[i].tag };
					if (copies[i].end >= 0)
						close(copies[i].end);
					copies[i] = copies[--ncopies];
					break;
				}
		}
		while (npending) {
			int rc = send_msg(ZYGOTE_FD_EVENTS, &pending[0], -1);
			if (rc == -EAGAIN || rc == -EWOULDBLOCK)
				break;
			if (rc < 0)
				_exit(0);
			memmove(pending, pending + 1, (size_t)--npending * sizeof *pending);
		}
		static struct pollfd pf[3 + MAX_COPIES];
		static int which[MAX_COPIES];
		pf[0] = (struct pollfd){ ZYGOTE_FD_SOCK, POLLIN, 0 };
		pf[1] = (struct pollfd){ ZYGOTE_FD_LIFE, POLLIN, 0 };
		/* the event socket only while an end waits to go out (never polled otherwise) */
		pf[2] = (struct pollfd){ npending ? ZYGOTE_FD_EVENTS : -1, POLLOUT, 0 };
		int nf = 3;
		for (int i = 0; i < ncopies && npending < MAX_COPIES; i++)
			if (copies[i].end >= 0) {
				which[nf - 3] = i;
				pf[nf++] = (struct pollfd){ copies[i].end, POLLIN, 0 };
			}
		int n = ppoll(pf, (nfds_t)nf, NULL, &waitmask);
		if (n < 0)
			continue; /* EINTR: a child exited */
		for (int k = 3; k < nf; k++)
			if (pf[k].revents)
				run_ended(which[k - 3]);
		if (pf[1].revents || (npending && (pf[2].revents & (POLLERR | POLLHUP))))
			_exit(0); /* the host ended the set, or is gone */
		if (pf[0].revents & POLLIN) {
			if (serve_request(ZYGOTE_FD_SOCK) < 0)
				_exit(0);
		} else if (pf[0].revents) {
			_exit(0);
		}
	}
}
