/*
 * stopat.c — SIGKILL a command at a chosen moment of its sandbox's set-up or
 * exit (tests/sandbox/run.sh, issue 16 §3).
 *
 *   stopat SYSCALL MATCH CMD ARGS...
 *
 * Runs CMD under ptrace, following every process it starts. When a process
 * that is not CMD itself and whose command line holds MATCH (a helper, a
 * reaper: "__sandbox-helper") enters SYSCALL (unshare, pivot_root, kill,
 * execve, wait4), CMD is killed with SIGKILL, "stopped PID" is printed, and
 * the tracer exits, which detaches every tracee: the one that was stopped
 * goes on with its system call, now without its host.
 * Exit status: 0 when it fired, 1 when CMD ended first, 2 on a usage error.
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
		{ "execve", SYS_execve },   { "wait4", SYS_wait4 },
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

/* The thread group of pid (from /proc), or pid itself. */
static pid_t tgid_of(pid_t pid)
{
	char p[64], line[128];
	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	pid_t t = pid;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Tgid: %d", &t) == 1)
			break;
	if (f)
		fclose(f);
	return t;
}

int main(int argc, char **argv)
{
	long nr = argc >= 4 ? syscall_nr(argv[1]) : -1;
	if (nr < 0) {
		fprintf(stderr, "usage: stopat unshare|pivot_root|kill|execve|wait4 MATCH CMD ARGS...\n");
		return 2;
	}
	const char *match = argv[2];
	pid_t root = fork();
	if (root == 0) {
		ptrace(PTRACE_TRACEME, 0, NULL, NULL);
		raise(SIGSTOP);
		execvp(argv[3], argv + 3);
		_exit(127);
	}
	int st;
	if (waitpid(root, &st, 0) != root || !WIFSTOPPED(st))
		return 2;
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
			if (ptrace(PTRACE_GET_SYSCALL_INFO, p, (void *)sizeof si, &si) > 0 &&
			    si.op == PTRACE_SYSCALL_INFO_ENTRY && (long)si.entry.nr == nr &&
			    tgid_of(p) != root && cmdline_has(p, match)) {
				kill(root, SIGKILL);
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
