/*
 * stopat.c — SIGKILL a command at a chosen moment of its sandbox's set-up or
 * exit (tests/sandbox/run.sh, issue 16 §3).
 *
 *   stopat [--parent] SYSCALL MATCH CMD ARGS...
 *
 * Runs CMD under ptrace, following every process it starts. When a process
 * that is not CMD itself and whose command line holds MATCH (a helper, a
 * reaper: "__sandbox-helper") enters SYSCALL (unshare, pivot_root, kill,
 * execve, wait4, prctl), CMD is killed with SIGKILL, "stopped PID" is
 * printed, and the tracer exits, which detaches every tracee: the one that
 * was stopped goes on with its system call, now without its host. With
 * --parent, only a process whose parent's command line holds MATCH too
 * counts, and that parent is killed instead of CMD (a reaper whose helper
 * dies between its fork and its first system call).
 * Exit status: 0 when it fired, 1 when CMD ended first, 2 on a usage error,
 * 3 when this machine does not let it trace CMD (the caller skips then).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long syscall_nr(const char *name)
{
	static const struct { const char *name; long nr; } t[] = {
		{ "unshare", SYS_unshare }, { "pivot_root", SYS_pivot_root }, { "kill", SYS_kill },
		{ "execve", SYS_execve },   { "wait4", SYS_wait4 },	  { "prctl", SYS_prctl },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (strcmp(t[i].name, name) == 0)
			return t[i].nr;
	return -1;
}

/* 1 when the command line of pid holds match. */
static int cmdline_has(pid_t pid, const char *match)
{
	char p[64], buf[4096];
	snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
	FILE *f = fopen(p, "r");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
	return strstr(buf, match) != NULL;
}

/* A field of /proc/PID/status ("Tgid", "PPid"), or dflt. */
static pid_t status_field(pid_t pid, const char *name, pid_t dflt)
{
	char p[64], line[128], fmt[32];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	snprintf(fmt, sizeof fmt, "%s: %%d", name);
	FILE *f = fopen(p, "r");
	pid_t t = dflt;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, fmt, &t) == 1)
			break;
	if (f)
		fclose(f);
	return t;
}

int main(int argc, char **argv)
{
	int parent = argc > 1 && strcmp(argv[1], "--parent") == 0;
	argv += parent;
	argc -= parent;
	long nr = argc >= 4 ? syscall_nr(argv[1]) : -1;
	if (nr < 0) {
		fprintf(stderr, "usage: stopat [--parent] unshare|pivot_root|kill|execve|wait4|prctl "
			"MATCH CMD ARGS...\n");
		return 2;
	}
	const char *match = argv[2];
	pid_t root = fork();
	if (root == 0) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
			_exit(3);
		raise(SIGSTOP);
		execvp(argv[3], argv + 3);
		_exit(127);
	}
	int st;
	if (waitpid(root, &st, 0) != root || !WIFSTOPPED(st))
		return WIFEXITED(st) && WEXITSTATUS(st) == 3 ? 3 : 2;
	long opts = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
		    PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC;
	ptrace(PTRACE_SETOPTIONS, root, NULL, (void *)opts);
	ptrace(PTRACE_SYSCALL, root, NULL, NULL);
	for (;;) {
		pid_t p = waitpid(-1, &st, __WALL);
		if (p < 0)
			return 1;
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			if (p == root)
				return 1;
			continue;
		}
		int sig = WSTOPSIG(st), inject = 0;
		if (sig == (SIGTRAP | 0x80)) {
			struct __ptrace_syscall_info si;
			pid_t pp = parent ? status_field(p, "PPid", 0) : root;
			if (ptrace(PTRACE_GET_SYSCALL_INFO, p, (void *)sizeof si, &si) > 0 &&
			    si.op == PTRACE_SYSCALL_INFO_ENTRY && (long)si.entry.nr == nr &&
			    status_field(p, "Tgid", p) != root && cmdline_has(p, match) &&
			    (!parent || (pp > 0 && cmdline_has(pp, match)))) {
				kill(pp, SIGKILL);
				printf("stopped %d\n", (int)p);
				fflush(stdout);
				return 0; /* exiting detaches every tracee */
			}
		} else if ((st >> 16) == 0 && sig != SIGSTOP && sig != SIGTRAP) {
			inject = sig; /* a real signal: delivered; new tracees' SIGSTOP is not */
		}
		ptrace(PTRACE_SYSCALL, p, NULL, (void *)(long)inject);
	}
}
