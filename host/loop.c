/*
 * loop.c — the main-thread event loop: libevent plus reference counting,
 * timers, watches, deferred calls, signals and the worker pool.
 */
#include "loop.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define POOL_THREADS 4

/*
 * lr_loop_share's one job for a worker. state: OPEN while the worker may
 * still join in, IN once it has, DONE when it has left; CLOSED when the
 * loop thread finished first and the worker must not join (the job may sit
 * in the pool's queue behind other work: it returns at once when run).
 */
enum { SHARE_OPEN, SHARE_IN, SHARE_DONE, SHARE_CLOSED };
struct share {
	struct lr_work w; /* first: the job's address is the share's */
	_Atomic size_t next;
	size_t n;
	void (*fn)(size_t i, void *arg);
	void *arg;
	_Atomic int state;
	int submitted; /* the job is the pool's until its done() (loop thread only) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

struct lr_loop {
	struct event_base *base;
	int refs;
	int stop;

	/* Signals arrive through a self-pipe. */
	int sigpipe[2];
	struct event *sigev;

	/* The worker pool: a job queue and a completion queue. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct lr_work *jobs, **jobs_tail;
	struct lr_work *dones, **dones_tail;
	int unfinished; /* submitted jobs whose work has not returned yet */
	pthread_cond_t idle; /* signalled when unfinished falls to 0 */
	int nthreads;
	int quit;
	pthread_t threads[POOL_THREADS];
	int efd;
	struct event *efdev;
	struct share share;
};

struct sig_slot {
	struct lr_loop *loop;
	void (*cb)(int, void *);
	void *arg;
};
static struct sig_slot sig_slots[65];
static void (*volatile async_hook)(int);
static volatile int sig_write_fd = -1;

static void on_signal_pipe(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	(void)arg;
	unsigned char buf[64];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			struct sig_slot *s = &sig_slots[buf[i] < 65 ? buf[i] : 0];
			if (s->cb)
				s->cb(buf[i], s->arg);
		}
	}
}

static void on_signal(int signo)
{
	int saved = errno;
	void (*hook)(int) = async_hook;
	if (hook)
		hook(signo);
	unsigned char b = (unsigned char)signo;
	if (sig_write_fd >= 0 && write(sig_write_fd, &b, 1) < 0) {
		/* the pipe is full: signals are already pending */
	}
	errno = saved;
}

void lr_loop_set_async_signal_hook(void (*hook)(int))
{
	async_hook = hook;
}

int lr_loop_on_signal(struct lr_loop *loop, int signo,
		      void (*cb)(int signo, void *arg), void *arg)
{
	if (signo <= 0 || signo >= 65)
		return -EINVAL;
	if (loop->sigpipe[0] < 0) {
		if (pipe2(loop->sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
			return -errno;
		loop->sigev = event_new(loop->base, loop->sigpipe[0], EV_READ | EV_PERSIST,
					on_signal_pipe, loop);
		if (!loop->sigev || event_add(loop->sigev, NULL) < 0)
			return -ENOMEM;
		sig_write_fd = loop->sigpipe[1];
	}
	sig_slots[signo] = (struct sig_slot){ loop, cb, arg };
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = cb ? on_signal : SIG_DFL;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(signo, &sa, NULL) < 0)
		return -errno;
	return 0;
}

static void on_pool_done(evutil_socket_t fd, short what, void *arg);

int lr_loop_new(struct lr_loop **out)
{
	struct lr_loop *loop = calloc(1, sizeof *loop);
	if (!loop)
		return -ENOMEM;
	loop->sigpipe[0] = loop->sigpipe[1] = -1;
	loop->efd = -1;
	struct event_config *cfg = event_config_new();
	if (cfg) {
		event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
		loop->base = event_base_new_with_config(cfg);
		event_config_free(cfg);
	}
	if (!loop->base) {
		free(loop);
		return -ENOMEM;
	}
	pthread_mutex_init(&loop->mu, NULL);
	pthread_cond_init(&loop->cv, NULL);
	pthread_cond_init(&loop->idle, NULL);
	pthread_mutex_init(&loop->share.mu, NULL);
	pthread_cond_init(&loop->share.cv, NULL);
	loop->jobs_tail = &loop->jobs;
	loop->dones_tail = &loop->dones;
	/* The completion eventfd exists from the start, so any thread may post to it. */
	loop->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop->efd >= 0)
		loop->efdev = event_new(loop->base, loop->efd, EV_READ | EV_PERSIST,
					on_pool_done, loop);
	if (!loop->efdev || event_add(loop->efdev, NULL) < 0) {
		lr_loop_free(loop);
		return -ENOMEM;
	}
	*out = loop;
	return 0;
}

/*
 * Work still queued or running when the loop goes (a --max-memory stop, a
 * script that ends while a worker hashes): wait for it and run every
 * completion, so that what each item owns is freed there (an abandoned
 * operation frees itself in its done callback). A completion may submit
 * more work; the rounds are bounded all the same.
 */
static void pool_drain(struct lr_loop *loop)
{
	for (int round = 0; round < 64; round++) {
		pthread_mutex_lock(&loop->mu);
		while (loop->unfinished > 0)
			pthread_cond_wait(&loop->idle, &loop->mu);
		int none = !loop->dones;
		pthread_mutex_unlock(&loop->mu);
		if (none)
			return;
		on_pool_done(loop->efd, 0, loop);
	}
}

void lr_loop_free(struct lr_loop *loop)
{
	if (!loop)
		return;
	if (loop->nthreads)
		pool_drain(loop);
	if (loop->nthreads) {
		pthread_mutex_lock(&loop->mu);
		loop->quit = 1;
		pthread_cond_broadcast(&loop->cv);
		pthread_mutex_unlock(&loop->mu);
		for (int i = 0; i < loop->nthreads; i++)
			pthread_join(loop->threads[i], NULL);
	}
	if (loop->efdev)
		event_free(loop->efdev);
	if (loop->efd >= 0)
		close(loop->efd);
	if (loop->sigev)
		event_free(loop->sigev);
	if (loop->sigpipe[0] >= 0) {
		for (int i = 1; i < 65; i++) {
			if (sig_slots[i].loop == loop) {
				signal(i, SIG_DFL);
				sig_slots[i] = (struct sig_slot){ 0 };
			}
		}
		sig_write_fd = -1;
		close(loop->sigpipe[0]);
		close(loop->sigpipe[1]);
	}
	event_base_free(loop->base);
	pthread_mutex_destroy(&loop->mu);
	pthread_cond_destroy(&loop->cv);
	pthread_cond_destroy(&loop->idle);
	pthread_mutex_destroy(&loop->share.mu);
	pthread_cond_destroy(&loop->share.cv);
	free(loop);
}

struct event_base *lr_loop_base(struct lr_loop *loop)
{
	return loop->base;
}

double lr_loop_now(struct lr_loop *loop)
{
	(void)loop;
	return (double)lr_now_ns() / 1e9;
}

void lr_loop_ref(struct lr_loop *loop) { loop->refs++; }
void lr_loop_unref(struct lr_loop *loop) { loop->refs--; }
int lr_loop_refs(struct lr_loop *loop) { return loop->refs; }
void lr_loop_stop(struct lr_loop *loop)
{
	loop->stop = 1;
	event_base_loopbreak(loop->base);
}
int lr_loop_stopped(struct lr_loop *loop) { return loop->stop; }

int lr_loop_once(struct lr_loop *loop, int nowait)
{
	int rc = event_base_loop(loop->base, EVLOOP_ONCE | (nowait ? EVLOOP_NONBLOCK : 0));
	return rc < 0 ? -EIO : 0;
}

int lr_loop_run(struct lr_loop *loop)
{
	loop->stop = 0;
	while (!loop->stop && loop->refs > 0) {
		int rc = event_base_loop(loop->base, EVLOOP_ONCE);
		if (rc < 0)
			return -EIO;
		if (rc == 1) /* nothing registered at all: nothing can wake us */
			return -EDEADLK;
	}
	return 0;
}

/* Timers. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct lr_timer *t = arg;
	t->cb(t, t->arg);
}

int lr_timer_init(struct lr_loop *loop, struct lr_timer *t,
		  void (*cb)(struct lr_timer *t, void *arg), void *arg)
{
	t->cb = cb;
	t->arg = arg;
	t->ev = evtimer_new(loop->base, on_timer, t);
	return t->ev ? 0 : -ENOMEM;
}

void lr_timer_start(struct lr_timer *t, double seconds)
{
	if (seconds < 0)
		seconds = 0;
	struct timeval tv;
	tv.tv_sec = (time_t)seconds;
	tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
	evtimer_add(t->ev, &tv);
}

void lr_timer_stop(struct lr_timer *t)
{
	if (t->ev)
		evtimer_del(t->ev);
}

int lr_timer_pending(const struct lr_timer *t)
{
	return t->ev && evtimer_pending(t->ev, NULL);
}

void lr_timer_release(struct lr_timer *t)
{
	if (t->ev)
		event_free(t->ev);
	t->ev = NULL;
}

/* Watches. */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	struct lr_watch *w = arg;
	int ev = ((what & EV_READ) ? LR_READ : 0) | ((what & EV_WRITE) ? LR_WRITE : 0);
	w->cb(w, ev, w->arg);
}

int lr_watch_init(struct lr_loop *loop, struct lr_watch *w, int fd,
		  void (*cb)(struct lr_watch *w, int events, void *arg), void *arg)
{
	w->fd = fd;
	w->cb = cb;
	w->arg = arg;
	w->ev = event_new(loop->base, fd, 0, on_watch, w);
	return w->ev ? 0 : -ENOMEM;
}

int lr_watch_start(struct lr_watch *w, int events)
{
	short what = EV_PERSIST | ((events & LR_READ) ? EV_READ : 0) |
		     ((events & LR_WRITE) ? EV_WRITE : 0);
	struct event_base *base = event_get_base(w->ev);
	event_del(w->ev);
	if (event_assign(w->ev, base, w->fd, what, on_watch, w) < 0)
		return -EINVAL;
	return event_add(w->ev, NULL) < 0 ? -EINVAL : 0;
}

void lr_watch_stop(struct lr_watch *w)
{
	if (w->ev)
		event_del(w->ev);
}

void lr_watch_release(struct lr_watch *w)
{
	if (w->ev)
		event_free(w->ev);
	w->ev = NULL;
}

/* Deferred calls. */
static void on_defer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct lr_defer *d = arg;
	d->cb(d, d->arg);
}

int lr_defer_init(struct lr_loop *loop, struct lr_defer *d,
		  void (*cb)(struct lr_defer *d, void *arg), void *arg)
{
	d->cb = cb;
	d->arg = arg;
	d->ev = event_new(loop->base, -1, 0, on_defer, d);
	return d->ev ? 0 : -ENOMEM;
}

/*
 * A zero timeout, so that the call comes on the next loop round, after the
 * pending I/O. event_add can fail (the timer heap grows: out of memory);
 * then the event is made active, which allocates nothing and still runs it
 * from the loop, maybe in this round. Either way the call is never lost (a
 * lost scheduler wake-up would leave the loop waiting forever).
 */
void lr_defer_schedule(struct lr_defer *d)
{
	if (!event_pending(d->ev, EV_TIMEOUT, NULL)) {
		static const struct timeval zero = { 0, 0 };
		if (event_add(d->ev, &zero) != 0)
			event_active(d->ev, EV_TIMEOUT, 1);
	}
}

void lr_defer_release(struct lr_defer *d)
{
	if (d->ev)
		event_free(d->ev);
	d->ev = NULL;
}

/* The worker pool. */
static void post_locked(struct lr_loop *loop, struct lr_work *w)
{
	w->next = NULL;
	*loop->dones_tail = w;
	loop->dones_tail = &w->next;
	uint64_t one = 1;
	if (write(loop->efd, &one, sizeof one) < 0) {
		/* the counter saturated: the loop is already woken */
	}
}

static void *pool_main(void *arg)
{
	struct lr_loop *loop = arg;
	pthread_mutex_lock(&loop->mu);
	for (;;) {
		while (!loop->jobs && !loop->quit)
			pthread_cond_wait(&loop->cv, &loop->mu);
		if (loop->quit)
			break;
		struct lr_work *w = loop->jobs;
		loop->jobs = w->next;
		if (!loop->jobs)
			loop->jobs_tail = &loop->jobs;
		pthread_mutex_unlock(&loop->mu);

		w->work(w);

		pthread_mutex_lock(&loop->mu);
		post_locked(loop, w);
		if (--loop->unfinished == 0)
			pthread_cond_broadcast(&loop->idle);
	}
	pthread_mutex_unlock(&loop->mu);
	return NULL;
}

void lr_loop_post(struct lr_loop *loop, struct lr_work *w)
{
	pthread_mutex_lock(&loop->mu);
	post_locked(loop, w);
	pthread_mutex_unlock(&loop->mu);
}

static void on_pool_done(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct lr_loop *loop = arg;
	uint64_t n;
	if (read(fd, &n, sizeof n) < 0) {
		/* spurious wake-up */
	}
	pthread_mutex_lock(&loop->mu);
	struct lr_work *list = loop->dones;
	loop->dones = NULL;
	loop->dones_tail = &loop->dones;
	pthread_mutex_unlock(&loop->mu);
	while (list) {
		struct lr_work *w = list;
		list = w->next;
		loop->refs--;
		w->done(w);
	}
}

int lr_pool_submit(struct lr_loop *loop, struct lr_work *w)
{
	if (!loop->nthreads) {
		/* Threads start on first use: a script that never needs them pays nothing. */
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		int n = ncpu < 2 ? 2 : ncpu > POOL_THREADS ? POOL_THREADS : (int)ncpu;
		/* Workers block every signal: handlers and the Lua hook run on the loop thread. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		for (int i = 0; i < n; i++) {
			if (pthread_create(&loop->threads[i], NULL, pool_main, loop) != 0)
				break;
			loop->nthreads++;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (!loop->nthreads)
			return -EAGAIN;
	}
	w->next = NULL;
	loop->refs++;
	pthread_mutex_lock(&loop->mu);
	loop->unfinished++;
	*loop->jobs_tail = w;
	loop->jobs_tail = &w->next;
	pthread_cond_signal(&loop->cv);
	pthread_mutex_unlock(&loop->mu);
	return 0;
}

/* The calls of a share not taken yet, on whichever thread asks. */
static void share_run(struct share *sh)
{
	size_t i;
	while ((i = atomic_fetch_add(&sh->next, 1)) < sh->n)
		sh->fn(i, sh->arg);
}

static void share_work(struct lr_work *w)
{
	struct share *sh = (struct share *)w;
	int open = SHARE_OPEN;
	if (!atomic_compare_exchange_strong(&sh->state, &open, SHARE_IN))
		return; /* the loop thread finished without it */
	share_run(sh);
	pthread_mutex_lock(&sh->mu);
	atomic_store(&sh->state, SHARE_DONE);
	pthread_cond_signal(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
}

static void share_done(struct lr_work *w)
{
	((struct share *)w)->submitted = 0;
}

void lr_loop_share(struct lr_loop *loop, size_t n, void (*fn)(size_t i, void *arg), void *arg)
{
	struct share *sh = &loop->share;
	if (n < 2 || sh->submitted) {
		/* one call, or the last share's job is still the pool's: alone */
		for (size_t i = 0; i < n; i++)
			fn(i, arg);
		return;
	}
	sh->fn = fn;
	sh->arg = arg;
	sh->n = n;
	atomic_store(&sh->next, 0);
	atomic_store(&sh->state, SHARE_OPEN);
	sh->w.work = share_work;
	sh->w.done = share_done;
	sh->submitted = 1;
	if (lr_pool_submit(loop, &sh->w) != 0)
		sh->submitted = 0;
	share_run(sh);
	int open = SHARE_OPEN;
	if (!sh->submitted ||
	    atomic_compare_exchange_strong(&sh->state, &open, SHARE_CLOSED))
		return;
	/* The worker joined in: it is finishing its last call. */
	pthread_mutex_lock(&sh->mu);
	while (atomic_load(&sh->state) != SHARE_DONE)
		pthread_cond_wait(&sh->cv, &sh->mu);
	pthread_mutex_unlock(&sh->mu);
}
