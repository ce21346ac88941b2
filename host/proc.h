/*
 * proc.h — processes (host/proc.c).
 *
 * Part of host/, the C runtime under the Lua layer; host.h includes every
 * host header. Never includes lua.h.
 */
#ifndef LR_HOST_PROC_H
#define LR_HOST_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "loop.h"

/*
 * Process supervision: spawn a child with argv/cwd/env/fds, watch it on the
 * loop and end it. The host is multi-threaded, so children are started with
 * posix_spawn (glibc's CLONE_VFORK path: an exec failure comes back as the
 * return value), never by running code in a forked copy, except when the
 * caller gives fork_main and the host has never started a thread (the
 * sandbox helper of `luarig sandbox run`: lr_proc_opts). Every child leads
 * its own process group; lr_proc_kill and lr_proc_close signal the whole
 * group. A pidfd per child is watched on the loop; the exit status is read
 * with waitid(P_PIDFD, WNOWAIT), and the child is reaped only by
 * lr_proc_close, so until then its zombie keeps the process-group id from
 * being reused and the group can still be killed safely.
 *
 * The child gets exactly the fds named in lr_proc_opts (0, 1, 2 and
 * extra_fds as 3, 4, ...): everything the host opens is O_CLOEXEC. Its
 * signal mask is empty and every signal has its default disposition.
 *
 * Everything runs on the loop thread. The later sandbox executor builds on
 * this: it spawns its re-executed helper (file = "/proc/self/exe", argv
 * naming the helper mode) with extra_fds carrying the profile.
 */
struct lr_proc;

enum { LR_PROC_STDIN = 0, LR_PROC_STDOUT = 1, LR_PROC_STDERR = 2 };
/* What one of the child's fds 0, 1, 2 is connected to. */
enum {
	LR_PROC_NULL = 0, /* /dev/null */
	LR_PROC_PIPE,     /* a non-blocking pipe to the host, read/written here */
	LR_PROC_INHERIT,  /* the host's own fd of the same number */
	LR_PROC_FD,       /* stdio_fd[i], duplicated (the caller keeps it) */
};
/* Events passed to on_event. */
enum {
	LR_PROC_EV_EXIT = 1,    /* the exit status is known (or the timeout fired) */
	LR_PROC_EV_OUTPUT = 2,  /* bytes or EOF on stdout or stderr */
	LR_PROC_EV_INPUT = 4,   /* the stdin queue drained, or stdin failed */
};

struct lr_proc_opts {
	const char *file;          /* the program; NULL: argv[0]. Without a '/' it is searched in PATH */
	char *const *argv;         /* NULL-terminated, argv[0] required */
	char *const *envp;         /* the complete environment; NULL: the host's */
	const char *cwd;           /* NULL: the host's */
	int stdio[3];              /* LR_PROC_NULL (0), PIPE, INHERIT or FD, for fds 0, 1, 2 */
	int stdio_fd[3];           /* the host fd for LR_PROC_FD */
	const int *extra_fds;      /* become the child's fds 3, 4, ...; the caller keeps them */
	int n_extra;
	size_t out_cap[3];         /* [1], [2]: bytes buffered per output pipe */
	int out_drop;              /* 1: beyond out_cap keep draining, drop, mark truncated
				      (a cap of 0 keeps nothing); 0: stop reading until
				      lr_proc_consume makes room (a cap of 0 means 64 KiB) */
	double timeout;            /* seconds (> 0): then SIGKILL to the group; 0: none */
	/*
	 * The write end (an fd above 2; 0: none) of a pipe whose read end the
	 * child watches, as the confinement helper does: the proc keeps its own
	 * copy for the child's lifetime (the caller keeps theirs, and closes it
	 * after the spawn). Ending the proc, by lr_proc_close, the timeout or
	 * lr_proc_kill(SIGKILL), then closes that copy instead of signalling
	 * the group, and the child ends itself and everything it started.
	 */
	int lifeline_fd;
	/*
	 * 1: the child gets no other fd at all, not even one the host inherited
	 * without close-on-exec (closefrom after the dup2s; a forked copy always
	 * closes them). 0: such fds pass through, as to any exec'd program (a
	 * jobserver's, say).
	 */
	int close_inherited;
	/*
	 * Started by another process instead of posix_spawn (the sandbox's
	 * pre-forked helper, host/executor.c): launch gets the fds the child is
	 * to have as 0, 1, 2, 3, ... (borrowed: it sends copies) and gives back
	 * the pid and a pidfd of the started process, which leads its own
	 * group and is not our child: its end is told by lr_proc_remote_exit.
	 * cwd must be NULL. 0, or -errno with err.
	 */
	int (*launch)(void *arg, const int *fds, int nfds, pid_t *pid, int *pidfd,
		      struct lr_err *err);
	void *launch_arg;
	/*
	 * Run in a forked copy of the host instead of exec'ing file, when the
	 * host has never started a thread (__libc_single_threaded) and its
	 * /proc/self/stat is readable; otherwise ignored, and file is exec'd as
	 * usual. For a host that is small and single-threaded when it spawns
	 * (the CLI's `sandbox run`): the copy skips an exec and a dynamic link.
	 * The copy is what an exec'd child would be, as far as the program and
	 * /proc can tell: exactly the fds above (every other fd closed, not
	 * only the close-on-exec ones), its own process group, an empty signal
	 * mask, every disposition the default, environ set to envp with the
	 * host's environment block zeroed (/proc/PID/environ), argv written
	 * over the host's argument block (/proc/PID/cmdline, cut to fit); then
	 * _exit(fork_main(fork_arg)). The host's memory is otherwise still
	 * there: fork_main must be code that a fresh exec of the host would
	 * run. launch takes precedence; cwd applies; an envp string inside the
	 * host's environment block means an exec. A failure before fork_main
	 * (placing the fds) exits 126 with a line on stderr.
	 */
	int (*fork_main)(void *arg);
	void *fork_arg;
	/* Called on the loop after something changed; must not call lr_proc_close. */
	void (*on_event)(struct lr_proc *p, int events, void *arg);
	void *arg;
};

/*
 * Starts a child. On success *out is a heap object that the caller must
 * end with lr_proc_close. On failure returns -errno and writes a message to
 * err ("cannot run 'nosuch': No such file or directory", "cannot change to
 * directory 'x': ..."); on_event is then never called.
 */
int lr_proc_spawn(struct lr_loop *loop, const struct lr_proc_opts *o,
		  struct lr_proc **out, struct lr_err *err);
pid_t lr_proc_pid(const struct lr_proc *p);
/*
 * 1 once the child exited: *code is its exit status or -1, *signo the
 * signal that killed it or 0. 0 while it runs.
 */
int lr_proc_status(const struct lr_proc *p, int *code, int *signo);
int lr_proc_timed_out(const struct lr_proc *p);
/* Exited and every output pipe at EOF (or the timeout fired, so leftovers are not awaited). */
int lr_proc_done(const struct lr_proc *p);
/* Sends signo to the child's process group (SIGKILL with a lifeline: closes it); 0 or -errno. */
int lr_proc_kill(struct lr_proc *p, int signo);

/*
 * stdin (LR_PROC_PIPE only). lr_proc_write copies n bytes into the queue
 * and writes them as the pipe accepts them; LR_PROC_EV_INPUT fires when the
 * queue is empty again or writing failed. lr_proc_input_status says: 0 open,
 * LR_ECLOSED after lr_proc_close_stdin (or when stdin is not a pipe),
 * -EPIPE when the child closed its end (the queue is then dropped), another
 * -errno on failure. lr_proc_close_stdin closes after the queue drains.
 */
int lr_proc_write(struct lr_proc *p, const void *data, size_t n);
size_t lr_proc_input_pending(const struct lr_proc *p);
int lr_proc_input_status(const struct lr_proc *p);
void lr_proc_close_stdin(struct lr_proc *p);

/*
 * Output (stream LR_PROC_STDOUT or LR_PROC_STDERR, piped). The buffer is
 * borrowed: valid until the next loop round or lr_proc_consume.
 * lr_proc_output_eof is 1 at EOF, 0 before, -errno after a read error.
 */
const struct lr_buf *lr_proc_output(const struct lr_proc *p, int stream);
int lr_proc_output_eof(const struct lr_proc *p, int stream);
int lr_proc_truncated(const struct lr_proc *p, int stream);
/* Drops the first n buffered bytes and resumes reading a paused pipe. */
void lr_proc_consume(struct lr_proc *p, int stream, size_t n);

/*
 * A launched child (lr_proc_opts.launch) ended with wait status st, as
 * its parent reaped it; LR_PROC_LOST when that parent can no longer say
 * (the child is then taken as ended, code -1, once its pidfd says it is
 * gone). Never after lr_proc_close.
 */
#define LR_PROC_LOST (-1)
void lr_proc_remote_exit(struct lr_proc *p, int st);

/*
 * Our own child told how it ends (wait status st) before its exit, as the
 * sandbox helper's reaper does once nothing of the run is left: the proc
 * counts as exited with st from now on (LR_PROC_EV_EXIT, the timeout
 * stopped), although the process may still be ending. It is still reaped,
 * in lr_proc_close or after it (lr_proc_reap_all), and its real exit adds
 * no event. Nothing after an exit, a remote child or lr_proc_close.
 */
void lr_proc_exit_told(struct lr_proc *p, int st);

/*
 * Ends a child: if it has not exited, SIGKILL to its group; after exit,
 * SIGKILL to what is left of the group (the zombie still pins the id).
 * Then reaps it, right away or, if it is not dead yet, from the loop in the
 * background. Closes the pipes, frees p. Accepts NULL.
 */
void lr_proc_close(struct lr_proc *p);
/* Reaps, waiting if need be, every child of loop that lr_proc_close left
 * to the background: call before lr_loop_free. */
void lr_proc_reap_all(struct lr_loop *loop);
/*
 * For a host about to exit: every child of loop that lr_proc_close left to
 * the background after its end was told (lr_proc_exit_told) is reaped if it
 * is gone and otherwise left to end by itself, unwaited (whoever inherits
 * it at our exit reaps it). Other children stay for lr_proc_reap_all.
 */
void lr_proc_leave_told(struct lr_loop *loop);

#endif
