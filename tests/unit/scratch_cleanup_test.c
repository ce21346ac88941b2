/*
 * scratch_cleanup_test.c — removing an executor set's scratch tree follows
 * no symlink, even one swapped in while the walk runs (issue 16 §3).
 *
 * The swap is made deterministic with ptrace: the set is freed in a traced
 * child, and at the exit of the first system call of the cleanup that
 * names the directory "swapme" (the look at what it is), the tracer
 * renames that directory away and plants a symlink to a directory outside
 * in its place, as a process of the run that is still alive could. The
 * outside directory's mode and contents must be untouched. A walk that
 * stats a name and then chmods or opens it by name again follows the link.
 */
#include "../../host/host.h"
#include "../../sandbox/sandbox.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char top[64], scratch[128], outside[128], home[PATH_MAX];

static void write_file(const char *dir, const char *name)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
}

static int exists(const char *dir, const char *name)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	struct stat st;
	return lstat(p, &st) == 0;
}

/* The argument of syscall info that names a path, or -1. */
static int path_arg(uint64_t nr)
{
	switch (nr) {
	case SYS_openat:
	case SYS_newfstatat:
	case SYS_fchmodat:
	case SYS_unlinkat:
	case SYS_statx:
	case SYS_faccessat:
	case SYS_mkdirat:
	case SYS_readlinkat:
#ifdef SYS_faccessat2
	case SYS_faccessat2:
#endif
	case 452: /* fchmodat2 */
		return 1;
#ifdef SYS_open
	case SYS_open:
	case SYS_stat:
	case SYS_lstat:
	case SYS_chmod:
	case SYS_rmdir:
	case SYS_unlink:
		return 0;
#endif
	}
	return -1;
}

/* The NUL-terminated string at addr in pid, at most n-1 bytes. */
static int read_str(pid_t pid, uint64_t addr, char *buf, size_t n)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/mem", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = pread(fd, buf, n - 1, (off_t)addr);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = '\0';
	return 0;
}

/* The set's cleanup in a traced child; returns 1 when the swap was made. */
static int cleanup_traced(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct lr_loop *loop;
		if (lr_loop_new(&loop))
			_exit(90);
		struct lr_profile p;
		lr_profile_init(&p);
		p.workspace_root = top;
		p.command = LR_CAP_ALLOW;
		struct lr_executor_set *set;
		struct lr_executor *e;
		struct lr_err err = { "" };
		if (lr_executor_set_new(loop, &p, scratch, 1, &set, &err) ||
		    lr_executor_get(set, "k", &e, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			_exit(91);
		}
		/* what a command leaves: a 000 directory with a file, a planted link */
		snprintf(home, sizeof home, "%s", lr_executor_home(e));
		char d[PATH_MAX + 16];
		snprintf(d, sizeof d, "%s/swapme", home);
		if (mkdir(d, 0700) < 0)
			_exit(92);
		write_file(d, "inside");
		chmod(d, 0);
		char l[PATH_MAX + 16];
		snprintf(l, sizeof l, "%s/planted", home);
		if (symlink(outside, l) < 0)
			_exit(93);
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
			_exit(94);
		raise(SIGSTOP);
		lr_executor_set_free(set);
		_exit(0);
	}
	int st, swapped = 0, pending = 0, sig = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st))
		return -1;
	ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
	char d[PATH_MAX], real[PATH_MAX + 16];
	snprintf(d, sizeof d, "%s/k/home/swapme", scratch);
	snprintf(real, sizeof real, "%s.real", d);
	for (;;) {
		if (ptrace(PTRACE_SYSCALL, pid, NULL, (void *)(long)sig) < 0)
			break;
		sig = 0;
		if (waitpid(pid, &st, 0) != pid || WIFEXITED(st) || WIFSIGNALED(st))
			break;
		if (!WIFSTOPPED(st))
			continue;
		if (WSTOPSIG(st) != (SIGTRAP | 0x80)) {
			sig = WSTOPSIG(st) == SIGSTOP ? 0 : WSTOPSIG(st);
			continue;
		}
		struct __ptrace_syscall_info si;
		if (ptrace(PTRACE_GET_SYSCALL_INFO, pid, (void *)sizeof si, &si) <= 0)
			continue;
		if (si.op == PTRACE_SYSCALL_INFO_ENTRY && !swapped) {
			int k = path_arg(si.entry.nr);
			char name[PATH_MAX];
			if (k >= 0 && read_str(pid, si.entry.args[k], name, sizeof name) == 0) {
				const char *base = strrchr(name, '/');
				base = base ? base + 1 : name;
				pending = strcmp(base, "swapme") == 0;
			}
		} else if (si.op == PTRACE_SYSCALL_INFO_EXIT && pending) {
			pending = 0;
			swapped = rename(d, real) == 0 && symlink(outside, d) == 0;
		}
	}
	waitpid(pid, &st, 0);
	return swapped;
}

TEST(cleanup_follows_no_symlink)
{
	snprintf(scratch, sizeof scratch, "%s/scratch", top);
	snprintf(outside, sizeof outside, "%s/outside", top);
	CHECK(mkdir(outside, 0750) == 0);
	write_file(outside, "keep");
	chmod(outside, 0750);
	int swapped = cleanup_traced();
	CHECK_EQ_INT(swapped, 1); /* else the case proves nothing */
	struct stat st;
	CHECK(stat(outside, &st) == 0);
	CHECK_EQ_INT(st.st_mode & 07777, 0750);
	CHECK(exists(outside, "keep"));
	/* and the links are gone, the one planted before and the one swapped in */
	char h[PATH_MAX];
	snprintf(h, sizeof h, "%s/k/home", scratch);
	CHECK(!exists(h, "planted"));
	CHECK(!exists(h, "swapme"));
}

/* Without a race: a 000 directory and a planted link are removed, the tree is gone. */
TEST(cleanup_removes_the_tree)
{
	char s2[160];
	snprintf(s2, sizeof s2, "%s/scratch2", top);
	struct lr_loop *loop;
	CHECK_EQ_INT(lr_loop_new(&loop), 0);
	struct lr_profile p;
	lr_profile_init(&p);
	p.workspace_root = top;
	p.command = LR_CAP_ALLOW;
	struct lr_executor_set *set;
	struct lr_executor *e;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_executor_set_new(loop, &p, s2, 1, &set, &err), 0);
	CHECK_EQ_INT(lr_executor_get(set, "k", &e, &err), 0);
	char d[PATH_MAX + 16];
	snprintf(d, sizeof d, "%s/a", lr_executor_tmpdir(e));
	CHECK(mkdir(d, 0700) == 0);
	snprintf(d, sizeof d, "%s/a/b", lr_executor_tmpdir(e));
	CHECK(mkdir(d, 0700) == 0);
	write_file(d, "f");
	chmod(d, 0);
	snprintf(d, sizeof d, "%s/a", lr_executor_tmpdir(e));
	chmod(d, 0);
	snprintf(d, sizeof d, "%s/link", lr_executor_home(e));
	CHECK(symlink(outside, d) == 0);
	lr_executor_set_free(set);
	lr_loop_free(loop);
	struct stat st;
	CHECK(lstat(s2, &st) < 0 && errno == ENOENT);
	CHECK(exists(outside, "keep"));
}

int main(void)
{
	snprintf(top, sizeof top, "/tmp/lr-scratch.XXXXXX");
	if (!mkdtemp(top))
		return 1;
	RUN(cleanup_follows_no_symlink);
	RUN(cleanup_removes_the_tree);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s 2>/dev/null; rm -rf %s", top, top);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup of %s failed\n", top);
	return test_summary();
}
