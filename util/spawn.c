/*
 * spawn.c — starting a program from a multi-threaded process, for the
 * layers below host/ (storage/nats.c's embedded server, the tests).
 *
 * Why not fork() + exec: a forked copy of a multi-threaded process may only
 * call async-signal-safe functions, and execlp is not one (its PATH search
 * may allocate while another thread held the allocator's lock at the
 * fork); the copy of every mapping costs time too. host/proc.c uses
 * posix_spawn for the same reason. Why not posix_spawn here: it cannot set
 * a parent death signal, and the embedded nats-server must end when its
 * owner does, however the owner ends.
 *
 * So this does what glibc's posix_spawn does, plus that one step: the
 * child is a clone with CLONE_VM | CLONE_VFORK (no copy; the parent waits
 * until the child execs or exits) on a stack of its own, with every signal
 * blocked in the parent across the clone; the child runs raw system calls
 * only (sigaction, prctl, dup2, fcntl, sigprocmask, execve, _exit), and a
 * failed exec comes back as the return value. The PATH search happens in
 * the parent, before the clone.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define STACK_BYTES (64u << 10)

struct child {
	const char *path;
	char *const *argv, *const *envp;
	int fd[3];
	int pdeathsig;
	pid_t parent;
	volatile int err; /* written by the child (shared memory), read after it execs or exits */
};

/*
 * Not instrumented by the sanitizers: it runs on a stack they do not know,
 * sharing the parent's memory, until the exec.
 */
__attribute__((no_sanitize("address", "undefined")))
static int child_main(void *arg)
{
	struct child *c = arg;
	/* Default dispositions for what the host catches (its handlers are not the child's). */
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sigaction(sig, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL ||
		    sa.sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = SIG_DFL;
		sigaction(sig, &sa, NULL);
	}
	if (c->pdeathsig) {
		/* the owner may have died before the signal was armed: then go at once */
		if (prctl(PR_SET_PDEATHSIG, c->pdeathsig) != 0)
			goto fail;
		if (getppid() != c->parent) {
			c->err = ESRCH;
			_exit(127);
		}
	}
	for (int i = 0; i < 3; i++) {
		int fd = c->fd[i];
		if (fd < 0)
			continue;
		if (fd == i ? fcntl(fd, F_SETFD, 0) < 0 : dup2(fd, i) < 0)
			goto fail;
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->path, c->argv, c->envp);
fail:
	c->err = errno;
	_exit(127);
}

/* file on PATH (or as given when it names a directory) into out; 0 or -ENOENT. */
static int search_path(const char *file, char *out, size_t cap)
{
	if (strchr(file, '/')) {
		if (snprintf(out, cap, "%s", file) >= (int)cap)
			return -ENAMETOOLONG;
		return 0;
	}
	const char *p = getenv("PATH");
	if (!p || !*p)
		p = "/usr/local/bin:/usr/bin:/bin";
	while (*p) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		/* an empty entry is the current directory, as for execvp */
		int w = n ? snprintf(out, cap, "%.*s/%s", (int)n, p, file)
			  : snprintf(out, cap, "./%s", file);
		if (w < (int)cap && access(out, X_OK) == 0)
			return 0;
		p += n;
		if (*p == ':')
			p++;
	}
	return -ENOENT;
}

int lr_spawn(const struct lr_spawn_opts *o, pid_t *pid)
{
	char path[PATH_MAX];
	int rc = search_path(o->file, path, sizeof path);
	if (rc)
		return rc;
	struct child c = {
		.path = path,
		.argv = o->argv,
		.envp = o->envp ? o->envp : environ,
		.fd = { o->fd[0], o->fd[1], o->fd[2] },
		.pdeathsig = o->pdeathsig,
		.parent = getpid(),
	};
	void *stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -errno;
	/* Every bit, not sigfillset (which leaves out glibc's internal signals): no
	   handler of the parent's may run on the child's stack before it execs. */
	sigset_t all, old;
	memset(&all, 0xff, sizeof all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t p = clone(child_main, (char *)stack + STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	int saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(stack, STACK_BYTES);
	if (p < 0)
		return -saved;
	if (c.err) {
		/* the child has exited (CLONE_VFORK returned at its _exit): reap it */
		while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
			;
		return -c.err;
	}
	*pid = p;
	return 0;
}
