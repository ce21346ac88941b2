/*
 * sandbox_seccomp_test.c — the confinement filter compiled at build time
 * (tools/seccompgen.c, build/gen/seccomp_bpf.c): the very bytes libseccomp
 * makes from sandbox/seccomp.c's rules here and now, handed out without
 * opening libseccomp, and a filter that acts when loaded.
 */
#include "test.h"

#include "../../sandbox/internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* libseccomp is installed here (the probe needs it), so the build had it too: both are baked. */
TEST(baked_equals_a_fresh_compile)
{
	for (int k = 0; k < 2; k++) {
		unsigned char *fresh = NULL;
		size_t n = 0;
		const char *why = "";
		CHECK_EQ_INT(lr__seccomp_compile(k, &fresh, &n, &why), 0);
		CHECK(lr__seccomp_baked.len[k] > 0);
		CHECK(lr__seccomp_baked.len[k] == n);
		CHECK(fresh && lr__seccomp_baked.prog[k] &&
		      memcmp(fresh, lr__seccomp_baked.prog[k], n) == 0);
		free(fresh);
		const unsigned char *prog = NULL;
		CHECK_EQ_INT(lr__seccomp_bpf(k, &prog, &n, &why), 0);
		CHECK(prog == lr__seccomp_baked.prog[k]); /* the baked bytes, not a compile */
		CHECK(n == lr__seccomp_baked.len[k]);
	}
}

/*
 * In a child: the probes before the filter (the positive control), then the
 * baked filter loaded, then the probes again. Exit bits: 1 a control failed,
 * 2 the load failed, 4 unshare passed, 8 a netlink socket passed, 16 a TCP
 * socket was refused with inet_ok / passed without it.
 */
static int child(int k)
{
	int bad = 0, fd;
	if ((fd = socket(AF_NETLINK, SOCK_RAW, 0)) < 0)
		bad |= 1;
	else
		close(fd);
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		bad |= 1;
	else
		close(fd);
	struct sock_fprog p = { .len = (unsigned short)(lr__seccomp_baked.len[k] / sizeof(struct sock_filter)),
				.filter = (struct sock_filter *)lr__seccomp_baked.prog[k] };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p) < 0)
		return bad | 2;
	if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
		bad |= 4;
	if ((fd = socket(AF_NETLINK, SOCK_RAW, 0)) >= 0 || errno != EAFNOSUPPORT)
		bad |= 8;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (k ? fd < 0 : (fd >= 0 || errno != EACCES))
		bad |= 16;
	return bad;
}

TEST(baked_filter_acts)
{
	for (int k = 0; k < 2; k++) {
		if (!lr__seccomp_baked.len[k])
			continue; /* baked_equals_a_fresh_compile fails for it */
		pid_t pid = fork();
		if (pid == 0)
			_exit(child(k));
		int st = 0;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECK(WIFEXITED(st));
		if (WEXITSTATUS(st))
			printf("# inet_ok %d: exit bits %d\n", k, WEXITSTATUS(st));
		CHECK_EQ_INT(WEXITSTATUS(st), 0);
	}
}

int main(void)
{
	RUN(baked_equals_a_fresh_compile);
	RUN(baked_filter_acts);
	return test_summary();
}
