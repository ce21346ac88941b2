/*
 * proc_test.c — process supervision at the C level, with a real loop.
 */
#include "../../host/host.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct lr_loop *loop;
static int events_seen;

static void on_event(struct lr_proc *p, int events, void *arg)
{
	(void)p;
	(void)arg;
	events_seen |= events;
}

static void on_guard(struct lr_timer *t, void *arg)
{
	(void)t;
	*(int *)arg = 1;
}

/* Runs the loop until cond(p) holds or secs pass; returns cond(p). */
static int run_until(struct lr_proc *p, int (*cond)(const struct lr_proc *), double secs)
{
	int expired = 0;
	struct lr_timer guard;
	lr_timer_init(loop, &guard, on_guard, &expired);
	lr_timer_start(&guard, secs);
	while (!cond(p) && !expired)
		lr_loop_once(loop, 0);
	lr_timer_release(&guard);
	return cond(p);
}

static int exited(const struct lr_proc *p)
{
	return lr_proc_status(p, NULL, NULL);
}

static struct lr_proc_opts opts(char *const *argv)
{
	struct lr_proc_opts o;
	memset(&o, 0, sizeof o);
	o.argv = argv;
	o.on_event = on_event;
	return o;
}

static int alive(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static int dead_within(pid_t pid, double secs)
{
	uint64_t end = lr_now_ns() + (uint64_t)(secs * 1e9);
	while (alive(pid)) {
		if (lr_now_ns() > end)
			return 0;
		usleep(10000);
	}
	return 1;
}

TEST(exit_code)
{
	char *argv[] = { "sh", "-c", "exit 3", NULL };
	struct lr_proc_opts o = opts(argv);
	struct lr_proc *p;
	struct lr_err err = { "" };
	events_seen = 0;
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(lr_proc_pid(p) > 0);
	CHECK(run_until(p, exited, 5));
	int code = -2, signo = -2;
	CHECK_EQ_INT(lr_proc_status(p, &code, &signo), 1);
	CHECK_EQ_INT(code, 3);
	CHECK_EQ_INT(signo, 0);
	CHECK(events_seen & LR_PROC_EV_EXIT);
	CHECK(lr_proc_done(p)); /* nothing piped */
	lr_proc_close(p);
	lr_proc_reap_all(loop);
}

TEST(killed_by_signal)
{
	char *argv[] = { "sh", "-c", "kill -TERM $$", NULL };
	struct lr_proc_opts o = opts(argv);
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, exited, 5));
	int code = -2, signo = -2;
	lr_proc_status(p, &code, &signo);
	CHECK_EQ_INT(code, -1);
	CHECK_EQ_INT(signo, SIGTERM);
	lr_proc_close(p);
}

TEST(pipes_separate_streams)
{
	char *argv[] = { "sh", "-c", "echo out; echo err >&2; echo more", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = o.stdio[2] = LR_PROC_PIPE;
	o.out_cap[1] = o.out_cap[2] = 1024;
	o.out_drop = 1;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, lr_proc_done, 5));
	CHECK_EQ_STR(lr_proc_output(p, LR_PROC_STDOUT)->data, "out\nmore\n");
	CHECK_EQ_STR(lr_proc_output(p, LR_PROC_STDERR)->data, "err\n");
	CHECK_EQ_INT(lr_proc_output_eof(p, LR_PROC_STDOUT), 1);
	CHECK_EQ_INT(lr_proc_truncated(p, LR_PROC_STDOUT), 0);
	lr_proc_close(p);
}

TEST(stdin_round_trip)
{
	size_t n = 3u << 20;
	char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)('a' + i % 26);
	char *argv[] = { "cat", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[0] = o.stdio[1] = LR_PROC_PIPE;
	o.out_cap[1] = 4u << 20;
	o.out_drop = 1;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK_EQ_INT(lr_proc_write(p, data, n), 0);
	CHECK(lr_proc_input_pending(p) > 0); /* a pipe holds far less than 3 MiB */
	lr_proc_close_stdin(p);
	CHECK_EQ_INT(lr_proc_write(p, "x", 1), LR_ECLOSED);
	CHECK(run_until(p, lr_proc_done, 10));
	const struct lr_buf *b = lr_proc_output(p, LR_PROC_STDOUT);
	CHECK_EQ_INT(b->len, n);
	CHECK(b->len == n && memcmp(b->data, data, n) == 0);
	CHECK_EQ_INT(lr_proc_input_status(p), LR_ECLOSED);
	lr_proc_close(p);
	free(data);
}

TEST(missing_program_and_bad_cwd)
{
	char *argv[] = { "no-such-program-xyz", NULL };
	struct lr_proc_opts o = opts(argv);
	struct lr_proc *p = (struct lr_proc *)1;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), -ENOENT);
	CHECK(p == NULL);
	CHECK_EQ_STR(err.msg, "cannot run 'no-such-program-xyz': No such file or directory");

	char *argv2[] = { "true", NULL };
	o = opts(argv2);
	o.cwd = "/no/such/dir";
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), -ENOENT);
	CHECK_EQ_STR(err.msg, "cannot change to directory '/no/such/dir': No such file or directory");
}

static int parse_pid(const struct lr_buf *b)
{
	return b->len ? atoi(b->data) : -1;
}

static int has_line(const struct lr_proc *p)
{
	const struct lr_buf *b = lr_proc_output(p, LR_PROC_STDOUT);
	return b->len && memchr(b->data, '\n', b->len) != NULL;
}

TEST(timeout_kills_group)
{
	char *argv[] = { "sh", "-c", "sleep 100 & echo $!; sleep 100", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = LR_PROC_PIPE;
	o.out_cap[1] = 1024;
	o.out_drop = 1;
	o.timeout = 0.2;
	struct lr_proc *p;
	struct lr_err err = { "" };
	uint64_t t0 = lr_now_ns();
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, lr_proc_done, 5));
	CHECK((lr_now_ns() - t0) < 2000000000ull);
	CHECK_EQ_INT(lr_proc_timed_out(p), 1);
	int code = 0, signo = 0;
	lr_proc_status(p, &code, &signo);
	CHECK_EQ_INT(signo, SIGKILL);
	int gc = parse_pid(lr_proc_output(p, LR_PROC_STDOUT));
	CHECK(gc > 0);
	if (gc > 0)
		CHECK(dead_within(gc, 1));
	lr_proc_close(p);
}

TEST(close_kills_running_group_and_reaps)
{
	char *argv[] = { "sh", "-c", "sleep 100 & echo $!; sleep 100", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = LR_PROC_PIPE;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, has_line, 5));
	int gc = parse_pid(lr_proc_output(p, LR_PROC_STDOUT));
	pid_t pid = lr_proc_pid(p);
	lr_proc_close(p);
	lr_proc_reap_all(loop);
	/* Reaped: the pid no longer exists (not even as a zombie). */
	char path[64];
	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	CHECK(access(path, F_OK) != 0 || !alive(pid));
	CHECK(gc > 0 && dead_within(gc, 1));
}

/*
 * A child with a lifeline (the sandbox helper's contract): ending the proc,
 * by lr_proc_kill(SIGKILL) or by the timeout, closes the proc's copy of
 * the write end instead of signalling; the child reads EOF there and ends
 * by itself (exit 0 here, not SIGKILL). The caller's own copy is closed
 * after the spawn, as the executor does.
 */
static struct lr_proc *spawn_with_lifeline(double timeout)
{
	static char *argv[] = { "sh", "-c", "cat <&3 >/dev/null; exit 0", NULL };
	int lp[2];
	if (pipe2(lp, O_CLOEXEC) < 0)
		return NULL;
	int w = fcntl(lp[1], F_DUPFD_CLOEXEC, 3); /* above 2, as lifeline_fd wants */
	close(lp[1]);
	struct lr_proc_opts o = opts(argv);
	o.extra_fds = &lp[0];
	o.n_extra = 1;
	o.lifeline_fd = w;
	o.timeout = timeout;
	struct lr_proc *p = NULL;
	struct lr_err err = { "" };
	if (lr_proc_spawn(loop, &o, &p, &err) != 0)
		p = NULL;
	close(lp[0]);
	close(w);
	return p;
}

TEST(lifeline_ends_the_child_instead_of_a_signal)
{
	struct lr_proc *p = spawn_with_lifeline(0);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(!run_until(p, exited, 0.2)); /* the proc's copy keeps it waiting */
	CHECK_EQ_INT(lr_proc_kill(p, SIGKILL), 0);
	CHECK(run_until(p, exited, 10));
	int code = -1, signo = -1;
	lr_proc_status(p, &code, &signo);
	CHECK_EQ_INT(code, 0);
	CHECK_EQ_INT(signo, 0);
	lr_proc_close(p);
	/* the timeout: the same */
	p = spawn_with_lifeline(0.1);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(run_until(p, lr_proc_done, 10));
	CHECK_EQ_INT(lr_proc_timed_out(p), 1);
	pid_t pid = lr_proc_pid(p);
	CHECK(dead_within(pid, 10));
	CHECK(run_until(p, exited, 10));
	code = signo = -1;
	lr_proc_status(p, &code, &signo);
	CHECK_EQ_INT(signo, 0);
	lr_proc_close(p);
}

/*
 * An end told before the exit (lr_proc_exit_told, the sandbox helper's
 * reaper): the proc is exited with the told status at once, its real exit
 * later adds no event and does not change it, and the child is still
 * reaped. lr_proc_leave_told then drops a told child that is still ending
 * without waiting for it; lr_proc_reap_all still waits for any other.
 */
static int exit_events;

static void count_exit(struct lr_proc *p, int events, void *arg)
{
	(void)p;
	(void)arg;
	if (events & LR_PROC_EV_EXIT)
		exit_events++;
}

TEST(an_end_told_before_the_exit)
{
	/* the child runs until its stdin closes, then exits 3 */
	char *argv[] = { "sh", "-c", "cat >/dev/null; exit 3", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[0] = LR_PROC_PIPE;
	o.on_event = count_exit;
	struct lr_proc *p;
	struct lr_err err = { "" };
	exit_events = 0;
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	pid_t pid = lr_proc_pid(p);
	CHECK(!exited(p));
	lr_proc_exit_told(p, 7 << 8);
	int code = -1, signo = -1;
	CHECK_EQ_INT(lr_proc_status(p, &code, &signo), 1);
	CHECK_EQ_INT(code, 7);
	CHECK_EQ_INT(signo, 0);
	CHECK_EQ_INT(exit_events, 1);
	CHECK(alive(pid)); /* told, still running */
	lr_proc_exit_told(p, 9 << 8); /* once only */
	lr_proc_close_stdin(p);
	CHECK(dead_within(pid, 10));
	for (int i = 0; i < 20; i++)
		lr_loop_once(loop, 1);
	CHECK_EQ_INT(exit_events, 1); /* the real exit (3) adds nothing */
	lr_proc_status(p, &code, &signo);
	CHECK_EQ_INT(code, 7);
	lr_proc_close(p);
	lr_proc_reap_all(loop);
	char path[64];
	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	CHECK(access(path, F_OK) != 0); /* reaped: not even a zombie */

	/*
	 * Told, then closed while it still runs: closing a lifeline child only
	 * closes the proc's copy of the write end, and this test holds another,
	 * so the child goes on; leave_told must not wait for it (reap_all would
	 * wait for ever). Then the test's copy goes, the child ends, and it is
	 * the test's to reap: nothing reaped it meanwhile.
	 */
	char *hold[] = { "sh", "-c", "cat <&3 >/dev/null; exit 0", NULL };
	int lp[2];
	CHECK_EQ_INT(pipe2(lp, O_CLOEXEC), 0);
	int w = fcntl(lp[1], F_DUPFD_CLOEXEC, 3);
	o = opts(hold);
	o.extra_fds = &lp[0];
	o.n_extra = 1;
	o.lifeline_fd = w;
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	close(lp[0]);
	close(w);
	pid = lr_proc_pid(p);
	lr_proc_exit_told(p, 0);
	lr_proc_close(p);
	CHECK(alive(pid));
	lr_proc_leave_told(loop);
	lr_proc_reap_all(loop); /* returns: nothing of the loop's is left to wait for */
	CHECK(alive(pid));
	close(lp[1]); /* the last write end: EOF, the child exits 0 */
	int st = -1;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(drop_mode_truncates_but_drains)
{
	char *argv[] = { "head", "-c", "500000", "/dev/zero", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = LR_PROC_PIPE;
	o.out_cap[1] = 10;
	o.out_drop = 1;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, lr_proc_done, 5));
	CHECK_EQ_INT(lr_proc_output(p, LR_PROC_STDOUT)->len, 10);
	CHECK_EQ_INT(lr_proc_truncated(p, LR_PROC_STDOUT), 1);
	int code = -1;
	lr_proc_status(p, &code, NULL);
	CHECK_EQ_INT(code, 0);
	lr_proc_close(p);
}

static int has_output_or_eof(const struct lr_proc *p)
{
	return lr_proc_output(p, LR_PROC_STDOUT)->len || lr_proc_output_eof(p, LR_PROC_STDOUT);
}

TEST(pause_mode_applies_backpressure)
{
	char *argv[] = { "head", "-c", "300000", "/dev/zero", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = LR_PROC_PIPE;
	o.out_cap[1] = 4096;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	size_t total = 0, most = 0;
	for (;;) {
		if (!run_until(p, has_output_or_eof, 5))
			break;
		const struct lr_buf *b = lr_proc_output(p, LR_PROC_STDOUT);
		if (!b->len)
			break;
		if (b->len > most)
			most = b->len;
		total += b->len;
		lr_proc_consume(p, LR_PROC_STDOUT, b->len);
	}
	CHECK_EQ_INT(total, 300000);
	CHECK(most <= 4096);
	CHECK_EQ_INT(lr_proc_truncated(p, LR_PROC_STDOUT), 0);
	CHECK(run_until(p, lr_proc_done, 5));
	lr_proc_close(p);
}

TEST(extra_fds_file_and_fd_stdio)
{
	int extra[2], out[2];
	CHECK_EQ_INT(pipe2(extra, O_CLOEXEC), 0);
	CHECK_EQ_INT(pipe2(out, O_CLOEXEC), 0);
	char *argv[] = { "custom-name", "-c", "echo $0 >&3; echo to-stdout", NULL };
	struct lr_proc_opts o = opts(argv);
	o.file = "/bin/sh";
	o.stdio[1] = LR_PROC_FD;
	o.stdio_fd[1] = out[1];
	o.extra_fds = &extra[1];
	o.n_extra = 1;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	close(extra[1]);
	close(out[1]);
	CHECK(run_until(p, exited, 5));
	char buf[64] = { 0 };
	CHECK(read(extra[0], buf, sizeof buf - 1) > 0);
	CHECK_EQ_STR(buf, "custom-name\n");
	memset(buf, 0, sizeof buf);
	CHECK(read(out[0], buf, sizeof buf - 1) > 0);
	CHECK_EQ_STR(buf, "to-stdout\n");
	close(extra[0]);
	close(out[0]);
	lr_proc_close(p);
}

TEST(child_gets_clean_signals_and_no_host_fds)
{
	/* The host blocks and ignores signals, and holds a CLOEXEC fd at 50. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, &old);
	struct sigaction ign = { .sa_handler = SIG_IGN }, oldsa;
	sigaction(SIGUSR2, &ign, &oldsa);
	int fd = fcntl(0, F_DUPFD_CLOEXEC, 50);
	CHECK(fd >= 50);
	char *argv[] = { "sh", "-c",
			 "grep -E '^Sig(Blk|Ign)' /proc/self/status; ls /proc/$$/fd | tr '\\n' ' '",
			 NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[1] = LR_PROC_PIPE;
	o.out_cap[1] = 4096;
	o.out_drop = 1;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, lr_proc_done, 5));
	const char *s = lr_proc_output(p, LR_PROC_STDOUT)->data;
	CHECK(s && strstr(s, "SigBlk:\t0000000000000000\n"));
	CHECK(s && strstr(s, "SigIgn:\t0000000000000000\n"));
	/* sh has 0, 1, 2 (and perhaps one fd of its own, >= 10), never 50. */
	CHECK(s && !strstr(s, " 50 ") && strstr(s, "0 1 ") && strstr(s, " 2 "));
	if (!s || !strstr(s, "SigIgn:\t0000000000000000\n") || strstr(s, " 50 "))
		fprintf(stderr, "child output: %s\n", s ? s : "(none)");
	lr_proc_close(p);
	close(fd);
	sigaction(SIGUSR2, &oldsa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

TEST(child_closing_stdin_is_reported_without_sigpipe)
{
	char *argv[] = { "sh", "-c", "exec 0<&-; echo ready; sleep 5", NULL };
	struct lr_proc_opts o = opts(argv);
	o.stdio[0] = o.stdio[1] = LR_PROC_PIPE;
	struct lr_proc *p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_proc_spawn(loop, &o, &p, &err), 0);
	CHECK(run_until(p, has_line, 5));
	/* The host would die of SIGPIPE here if the write raised it. */
	CHECK_EQ_INT(lr_proc_write(p, "data", 4), -EPIPE);
	CHECK_EQ_INT(lr_proc_input_status(p), -EPIPE);
	sigset_t pending;
	sigpending(&pending);
	CHECK(!sigismember(&pending, SIGPIPE));
	lr_proc_close(p);
}

TEST(many_children)
{
	enum { N = 40 };
	struct lr_proc *ps[N];
	struct lr_err err = { "" };
	char *argv[] = { "true", NULL };
	for (int i = 0; i < N; i++) {
		struct lr_proc_opts o = opts(argv);
		CHECK_EQ_INT(lr_proc_spawn(loop, &o, &ps[i], &err), 0);
	}
	for (int i = 0; i < N; i++) {
		int code = -1;
		CHECK(run_until(ps[i], exited, 10));
		lr_proc_status(ps[i], &code, NULL);
		CHECK_EQ_INT(code, 0);
		lr_proc_close(ps[i]);
	}
}

int main(void)
{
	if (lr_loop_new(&loop) != 0) {
		printf("not ok - loop\n");
		return 1;
	}
	RUN(exit_code);
	RUN(killed_by_signal);
	RUN(pipes_separate_streams);
	RUN(stdin_round_trip);
	RUN(missing_program_and_bad_cwd);
	RUN(timeout_kills_group);
	RUN(close_kills_running_group_and_reaps);
	RUN(lifeline_ends_the_child_instead_of_a_signal);
	RUN(an_end_told_before_the_exit);
	RUN(drop_mode_truncates_but_drains);
	RUN(pause_mode_applies_backpressure);
	RUN(extra_fds_file_and_fd_stdio);
	RUN(child_gets_clean_signals_and_no_host_fds);
	RUN(child_closing_stdin_is_reported_without_sigpipe);
	RUN(many_children);
	lr_proc_reap_all(loop);
	lr_loop_free(loop);
	return test_summary();
}
