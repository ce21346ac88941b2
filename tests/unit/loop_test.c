/*
 * loop_test.c — the event loop, timers, watches, deferred calls, signals
 * and the worker pool, against a real libevent loop.
 */
#include "../../host/host.h"
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static struct lr_loop *loop;

static void new_loop(void)
{
	CHECK(lr_loop_new(&loop) == 0);
}

/* Timers fire in deadline order and the loop ends once nothing holds it. */
static int fired[3], nfired;
static void on_timer(struct lr_timer *t, void *arg)
{
	(void)t;
	fired[nfired++] = (int)(intptr_t)arg;
	lr_loop_unref(loop);
}

TEST(timers_fire_in_order)
{
	new_loop();
	struct lr_timer t[3];
	double delay[3] = { 0.03, 0.01, 0.02 };
	nfired = 0;
	for (int i = 0; i < 3; i++) {
		CHECK(lr_timer_init(loop, &t[i], on_timer, (void *)(intptr_t)i) == 0);
		lr_timer_start(&t[i], delay[i]);
		lr_loop_ref(loop);
	}
	CHECK(lr_timer_pending(&t[0]));
	CHECK(lr_loop_run(loop) == 0);
	CHECK_EQ_INT(nfired, 3);
	CHECK_EQ_INT(fired[0], 1);
	CHECK_EQ_INT(fired[1], 2);
	CHECK_EQ_INT(fired[2], 0);
	CHECK(!lr_timer_pending(&t[0]));
	for (int i = 0; i < 3; i++)
		lr_timer_release(&t[i]);
	lr_loop_free(loop);
}

TEST(stopped_timer_never_fires)
{
	new_loop();
	struct lr_timer t, later;
	nfired = 0;
	CHECK(lr_timer_init(loop, &t, on_timer, (void *)(intptr_t)1) == 0);
	CHECK(lr_timer_init(loop, &later, on_timer, (void *)(intptr_t)2) == 0);
	lr_timer_start(&t, 0.01);
	lr_timer_stop(&t);
	CHECK(!lr_timer_pending(&t));
	/* a timer due after the stopped one: once it fired, the stopped one's time has passed */
	lr_loop_ref(loop);
	lr_timer_start(&later, 0.02);
	while (nfired == 0)
		lr_loop_once(loop, 0);
	CHECK_EQ_INT(nfired, 1);
	CHECK_EQ_INT(fired[0], 2);
	lr_timer_release(&later);
	lr_timer_release(&t);
	lr_timer_release(&t); /* releasing twice is harmless */
	lr_loop_free(loop);
}

/* A deferred call never runs inside the scheduling call, and runs once however often it is scheduled. */
static int deferred;
static void on_defer(struct lr_defer *d, void *arg)
{
	(void)d;
	(void)arg;
	deferred++;
	lr_loop_unref(loop);
}

TEST(defer_runs_later_and_once)
{
	new_loop();
	struct lr_defer d;
	deferred = 0;
	CHECK(lr_defer_init(loop, &d, on_defer, NULL) == 0);
	lr_loop_ref(loop);
	lr_defer_schedule(&d);
	lr_defer_schedule(&d);
	CHECK_EQ_INT(deferred, 0);
	CHECK(lr_loop_run(loop) == 0);
	CHECK_EQ_INT(deferred, 1);
	lr_defer_release(&d);
	lr_loop_free(loop);
}

/* A watch reports readability of a pipe. */
static char got[16];
static void on_read(struct lr_watch *w, int events, void *arg)
{
	(void)arg;
	CHECK(events & LR_READ);
	ssize_t n = read(w->fd, got, sizeof got - 1);
	CHECK(n == 5);
	lr_watch_stop(w);
	lr_loop_unref(loop);
}

static void on_write_later(struct lr_timer *t, void *arg)
{
	(void)t;
	int fd = *(int *)arg;
	CHECK(write(fd, "hello", 5) == 5);
}

TEST(watch_reads_a_pipe)
{
	new_loop();
	int p[2];
	CHECK(pipe(p) == 0);
	struct lr_watch w;
	struct lr_timer t;
	CHECK(lr_watch_init(loop, &w, p[0], on_read, NULL) == 0);
	CHECK(lr_watch_start(&w, LR_READ) == 0);
	CHECK(lr_timer_init(loop, &t, on_write_later, &p[1]) == 0);
	lr_timer_start(&t, 0.01);
	lr_loop_ref(loop);
	CHECK(lr_loop_run(loop) == 0);
	CHECK_EQ_STR(got, "hello");
	lr_watch_release(&w);
	lr_timer_release(&t);
	close(p[0]);
	close(p[1]);
	lr_loop_free(loop);
}

/* The pool: work on other threads, completions back on the loop thread. */
struct job {
	struct lr_work w;
	int input, output;
	pthread_t worker;
};
static pthread_t main_thread;
static int ndone, done_on_main;

static void job_work(struct lr_work *w)
{
	struct job *j = (struct job *)w;
	j->worker = pthread_self();
	usleep(1000);
	j->output = j->input * j->input;
}

static void job_done(struct lr_work *w)
{
	(void)w;
	ndone++;
	if (pthread_equal(pthread_self(), main_thread))
		done_on_main++;
}

TEST(pool_runs_work_off_the_loop_thread)
{
	new_loop();
	main_thread = pthread_self();
	ndone = done_on_main = 0;
	enum { N = 200 };
	struct job *jobs = calloc(N, sizeof *jobs);
	for (int i = 0; i < N; i++) {
		jobs[i].w.work = job_work;
		jobs[i].w.done = job_done;
		jobs[i].input = i;
		CHECK(lr_pool_submit(loop, &jobs[i].w) == 0);
	}
	CHECK_EQ_INT(lr_loop_refs(loop), N); /* each in-flight item holds the loop */
	CHECK(lr_loop_run(loop) == 0);
	CHECK_EQ_INT(ndone, N);
	CHECK_EQ_INT(done_on_main, N);
	int off_main = 0, right = 0;
	for (int i = 0; i < N; i++) {
		off_main += !pthread_equal(jobs[i].worker, main_thread);
		right += jobs[i].output == i * i;
	}
	CHECK_EQ_INT(off_main, N);
	CHECK_EQ_INT(right, N);
	CHECK_EQ_INT(lr_loop_refs(loop), 0);
	lr_loop_free(loop); /* joins the workers */
	free(jobs);
}

/* lr_loop_post: completions from a thread the loop does not own. */
struct posted {
	struct lr_work w;
	struct lr_loop *loop;
	int on_main;
};

static void posted_done(struct lr_work *w)
{
	struct posted *p = (struct posted *)w;
	p->on_main = pthread_equal(pthread_self(), main_thread);
}

static void *poster(void *arg)
{
	struct posted *p = arg;
	usleep(10000);
	lr_loop_post(p->loop, &p->w);
	return NULL;
}

TEST(post_from_a_foreign_thread)
{
	new_loop();
	main_thread = pthread_self();
	struct posted p = { .w.done = posted_done, .loop = loop, .on_main = -1 };
	lr_loop_ref(loop); /* taken when the work starts, dropped after done() */
	pthread_t th;
	CHECK(pthread_create(&th, NULL, poster, &p) == 0);
	CHECK(lr_loop_run(loop) == 0);
	pthread_join(th, NULL);
	CHECK_EQ_INT(p.on_main, 1);
	CHECK_EQ_INT(lr_loop_refs(loop), 0);
	lr_loop_free(loop);
}

/*
 * lr_loop_share: every index is called exactly once, the worker really
 * takes part, and a busy pool never makes the loop thread wait.
 */
static struct {
	_Atomic int *calls;
	atomic_int off_main;   /* calls made on another thread */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int wait_for_worker;   /* the loop thread's calls wait until a worker's has begun */
} sh = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void share_fn(size_t i, void *arg)
{
	CHECK(arg == &sh);
	atomic_fetch_add(&sh.calls[i], 1);
	if (!pthread_equal(pthread_self(), main_thread)) {
		pthread_mutex_lock(&sh.mu);
		atomic_fetch_add(&sh.off_main, 1);
		pthread_cond_broadcast(&sh.cv);
		pthread_mutex_unlock(&sh.mu);
		return;
	}
	if (!sh.wait_for_worker)
		return;
	/* the worker was handed its job before the loop thread's first call:
	 * it comes (bounded, so a broken share fails instead of hanging) */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	pthread_mutex_lock(&sh.mu);
	while (atomic_load(&sh.off_main) == 0 &&
	       pthread_cond_timedwait(&sh.cv, &sh.mu, &until) == 0)
		;
	pthread_mutex_unlock(&sh.mu);
}

static int share_once(size_t n)
{
	sh.calls = calloc(n ? n : 1, sizeof *sh.calls);
	atomic_store(&sh.off_main, 0);
	lr_loop_share(loop, n, share_fn, &sh);
	int once = 0;
	for (size_t i = 0; i < n; i++)
		once += atomic_load(&sh.calls[i]) == 1;
	free(sh.calls);
	return once;
}

TEST(share_calls_every_index_once_and_a_worker_joins)
{
	new_loop();
	main_thread = pthread_self();
	static const size_t ns[] = { 0, 1, 2, 3, 64, 1000, 100000 };
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		sh.wait_for_worker = 0;
		CHECK_EQ_INT(share_once(ns[k]), (int)ns[k]);
		/* the worker's job comes back to the loop as a completion */
		for (int i = 0; i < 1000 && lr_loop_refs(loop) > 0; i++)
			lr_loop_once(loop, 0);
		CHECK_EQ_INT(lr_loop_refs(loop), 0);
	}
	sh.wait_for_worker = 1;
	CHECK_EQ_INT(share_once(16), 16);
	CHECK(atomic_load(&sh.off_main) > 0);
	lr_loop_free(loop);
}

/* Pool jobs that hold every worker until released. */
static pthread_mutex_t block_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t block_cv = PTHREAD_COND_INITIALIZER;
static int block_released, block_in;

static void block_work(struct lr_work *w)
{
	(void)w;
	pthread_mutex_lock(&block_mu);
	block_in++;
	pthread_cond_broadcast(&block_cv);
	while (!block_released)
		pthread_cond_wait(&block_cv, &block_mu);
	pthread_mutex_unlock(&block_mu);
}

static void block_done(struct lr_work *w)
{
	(void)w;
}

TEST(share_runs_alone_while_the_pool_is_busy)
{
	new_loop();
	main_thread = pthread_self();
	enum { W = 8 }; /* at least the pool's threads: every worker is held */
	struct lr_work blocks[W];
	block_released = block_in = 0;
	for (int i = 0; i < W; i++) {
		blocks[i] = (struct lr_work){ .work = block_work, .done = block_done };
		CHECK(lr_pool_submit(loop, &blocks[i]) == 0);
	}
	pthread_mutex_lock(&block_mu);
	while (block_in == 0) /* the pool's threads exist and are busy */
		pthread_cond_wait(&block_cv, &block_mu);
	pthread_mutex_unlock(&block_mu);
	sh.wait_for_worker = 0;
	/* no worker is free: the loop thread makes every call and returns */
	CHECK_EQ_INT(share_once(500), 500);
	CHECK_EQ_INT(atomic_load(&sh.off_main), 0);
	/* the job of that share is still queued: the next one runs alone too */
	CHECK_EQ_INT(share_once(500), 500);
	CHECK_EQ_INT(atomic_load(&sh.off_main), 0);
	pthread_mutex_lock(&block_mu);
	block_released = 1;
	pthread_cond_broadcast(&block_cv);
	pthread_mutex_unlock(&block_mu);
	CHECK(lr_loop_run(loop) == 0); /* the held jobs and the share's job complete */
	CHECK_EQ_INT(lr_loop_refs(loop), 0);
	/* and the worker helps again once its job is back */
	sh.wait_for_worker = 1;
	CHECK_EQ_INT(share_once(16), 16);
	CHECK(atomic_load(&sh.off_main) > 0);
	lr_loop_free(loop);
}

/* Signals: the async hook runs in the handler, the callback on the loop. */
static atomic_int hook_calls;
static int sig_seen;
static void async_hook(int signo)
{
	if (signo == SIGUSR1)
		atomic_fetch_add(&hook_calls, 1);
}
static void on_sig(int signo, void *arg)
{
	(void)arg;
	sig_seen = signo;
	lr_loop_unref(loop);
}

TEST(signals_reach_the_loop)
{
	new_loop();
	sig_seen = 0;
	lr_loop_set_async_signal_hook(async_hook);
	CHECK(lr_loop_on_signal(loop, SIGUSR1, on_sig, NULL) == 0);
	lr_loop_ref(loop);
	raise(SIGUSR1);
	CHECK(lr_loop_run(loop) == 0);
	CHECK_EQ_INT(sig_seen, SIGUSR1);
	CHECK_EQ_INT(atomic_load(&hook_calls), 1);
	lr_loop_set_async_signal_hook(NULL);
	lr_loop_free(loop); /* restores the default disposition */
	struct sigaction sa;
	sigaction(SIGUSR1, NULL, &sa);
	CHECK(sa.sa_handler == SIG_DFL);
}

/* lr_loop_stop ends a run even while references remain. */
static void on_stop(struct lr_timer *t, void *arg)
{
	(void)t;
	(void)arg;
	lr_loop_stop(loop);
}

TEST(stop_ends_the_run)
{
	new_loop();
	struct lr_timer t;
	CHECK(lr_timer_init(loop, &t, on_stop, NULL) == 0);
	lr_timer_start(&t, 0.01);
	lr_loop_ref(loop);
	CHECK(lr_loop_run(loop) == 0);
	CHECK(lr_loop_stopped(loop));
	lr_timer_release(&t);
	lr_loop_free(loop);
}

TEST(buffers_respect_their_cap)
{
	struct lr_buf b;
	lr_buf_init(&b, 10);
	CHECK(lr_buf_add(&b, "hello", 5) == 0);
	CHECK(lr_buf_printf(&b, "%d", 1234) == 0);
	CHECK_EQ_STR(b.data, "hello1234");
	CHECK(lr_buf_add(&b, "xy", 2) == LR_ETOOBIG);
	CHECK_EQ_INT(b.len, 9);
	lr_buf_consume(&b, 5);
	CHECK_EQ_STR(b.data, "1234");
	size_t n;
	char *p = lr_buf_take(&b, &n);
	CHECK_EQ_INT(n, 4);
	CHECK_EQ_STR(p, "1234");
	free(p);
	lr_buf_release(&b);
}

TEST(sha256_matches_known_vectors)
{
	char hex[65];
	CHECK(lr_sha256_hex("abc", 3, hex) == 0);
	CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	CHECK(lr_sha256_hex("", 0, hex) == 0);
	CHECK_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(error_codes_have_names)
{
	CHECK_EQ_STR(lr_errcode(LR_ETIMEOUT), "timeout");
	CHECK_EQ_STR(lr_errcode(LR_ECANCELLED), "cancelled");
	CHECK_EQ_STR(lr_errcode(-2), "ENOENT");
	CHECK_EQ_STR(lr_strerror(LR_ETOOBIG), "too large");
	CHECK_EQ_STR(lr_strerror(0), "ok");
}

int main(void)
{
	RUN(timers_fire_in_order);
	RUN(stopped_timer_never_fires);
	RUN(defer_runs_later_and_once);
	RUN(watch_reads_a_pipe);
	RUN(pool_runs_work_off_the_loop_thread);
	RUN(post_from_a_foreign_thread);
	RUN(share_calls_every_index_once_and_a_worker_joins);
	RUN(share_runs_alone_while_the_pool_is_busy);
	RUN(signals_reach_the_loop);
	RUN(stop_ends_the_run);
	RUN(buffers_respect_their_cap);
	RUN(sha256_matches_known_vectors);
	RUN(error_codes_have_names);
	return test_summary();
}
