/*
 * spawn_test.c — lr_spawn (util/spawn.c): the program runs with the fds it
 * was given, default dispositions and an empty mask; a missing program is
 * the return value; the parent death signal reaches the child when the
 * spawning thread ends.
 */
#include "test.h"

#include "../../util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_usr1(int sig)
{
	(void)sig;
}

TEST(missing_program_is_the_return_value)
{
	char *argv[] = { "luarig-no-such-program", NULL };
	struct lr_spawn_opts o = { .file = "luarig-no-such-program", .argv = argv, .fd = { -1, -1, -1 } };
	pid_t pid = -1;
	CHECK_EQ_INT(lr_spawn(&o, &pid), -ENOENT);
	CHECK_EQ_INT(pid, -1);
	/* an absolute path that is not a program: the exec's error, and no child left */
	char *argv2[] = { "/dev/null", NULL };
	struct lr_spawn_opts o2 = { .file = "/dev/null", .argv = argv2, .fd = { -1, -1, -1 } };
	CHECK_EQ_INT(lr_spawn(&o2, &pid), -EACCES);
	CHECK_EQ_INT(waitpid(-1, NULL, WNOHANG), -1);
	CHECK_EQ_INT(errno, ECHILD);
}

TEST(fds_are_the_ones_given)
{
	int out[2], err[2];
	CHECK_EQ_INT(pipe2(out, O_CLOEXEC), 0);
	CHECK_EQ_INT(pipe2(err, O_CLOEXEC), 0);
	char *argv[] = { "sh", "-c", "echo out; echo err >&2; cat", NULL };
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct lr_spawn_opts o = { .file = "sh", .argv = argv, .fd = { null, out[1], err[1] } };
	pid_t pid;
	CHECK_EQ_INT(lr_spawn(&o, &pid), 0);
	close(null);
	close(out[1]);
	close(err[1]);
	char a[64] = { 0 }, b[64] = { 0 };
	size_t na = 0, nb = 0;
	ssize_t r;
	while ((r = read(out[0], a + na, sizeof a - 1 - na)) > 0)
		na += (size_t)r;
	while ((r = read(err[0], b + nb, sizeof b - 1 - nb)) > 0)
		nb += (size_t)r;
	close(out[0]);
	close(err[0]);
	CHECK_EQ_STR(a, "out\n"); /* and cat read EOF from /dev/null */
	CHECK_EQ_STR(b, "err\n");
	int status;
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(child_has_default_dispositions_and_an_empty_mask)
{
	/* the parent catches SIGUSR1 and blocks SIGUSR2: the child does neither */
	struct sigaction sa = { 0 }, old;
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, &old);
	sigset_t usr2, prev;
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, &prev);
	char *argv[] = { "sh", "-c", "kill -USR1 $$; sleep 5", NULL };
	struct lr_spawn_opts o = { .file = "sh", .argv = argv, .fd = { -1, -1, -1 } };
	pid_t pid;
	CHECK_EQ_INT(lr_spawn(&o, &pid), 0);
	int status;
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1);
	char *argv2[] = { "sh", "-c", "kill -USR2 $$; sleep 5", NULL };
	o.argv = argv2;
	CHECK_EQ_INT(lr_spawn(&o, &pid), 0);
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR2);
	pthread_sigmask(SIG_SETMASK, &prev, NULL);
	sigaction(SIGUSR1, &old, NULL);
}

static void *spawn_and_leave(void *arg)
{
	pid_t *pid = arg;
	char *argv[] = { "sleep", "600", NULL };
	struct lr_spawn_opts o = { .file = "sleep", .argv = argv, .fd = { -1, -1, -1 },
				   .pdeathsig = SIGTERM };
	if (lr_spawn(&o, pid) != 0)
		*pid = -1;
	return NULL;
}

TEST(death_signal_reaches_the_child)
{
	pid_t pid = -1;
	pthread_t t;
	CHECK_EQ_INT(pthread_create(&t, NULL, spawn_and_leave, &pid), 0);
	pthread_join(t, NULL);
	CHECK(pid > 0);
	if (pid <= 0)
		return;
	/* the thread is gone: the child is sent SIGTERM (waiting for that event, no timer) */
	int status;
	CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
}

int main(void)
{
	RUN(missing_program_is_the_return_value);
	RUN(fds_are_the_ones_given);
	RUN(child_has_default_dispositions_and_an_empty_mask);
	RUN(death_signal_reaches_the_child);
	return test_summary();
}
