/*
 * shim.c — the allocation-failure ("torture") mode, as curl's torture tests:
 * linked into build/san/luarig-torture only, never into luarig.
 *
 * The torture binary is luarig's own objects linked with
 * -Wl,--wrap=malloc,--wrap=calloc,... (Makefile, TORTURE_WRAP): every call
 * that luarig's C code makes to one of the wrapped functions comes here,
 * and so does every allocation of the Lua state (lua/state.c's allocator
 * calls realloc). jansson and libevent are pointed at the same counting
 * functions (json_set_alloc_funcs, event_set_mem_functions). What is not
 * reached: allocations made inside other libraries on their own (LMDB,
 * libcurl, libarchive, libc's stdio), and every allocation made on a
 * thread other than the main one (the worker pool, the LMDB writer), which
 * would make the count depend on timing.
 *
 *   LUARIG_TORTURE=N        the Nth counted allocation fails (ENOMEM); 0 counts only
 *   LUARIG_TORTURE_FROM=    start (default): count from the process start;
 *                           loop: from the first lr_loop_run, i.e. the main task
 *   LUARIG_TORTURE_LOG=FILE "fail N <function> <size>" when it fails, "count M"
 *                           at exit (M allocations were counted)
 *   LUARIG_TORTURE_TRACE=1  the stack of the failed allocation on stderr
 *
 * Lua retries a failed allocation once after an emergency collection; if
 * the next counted call is that retry (the same function and arguments),
 * it fails too, or a failure of a Lua allocation would never be seen. The
 * variables are removed from the environment at start, so child processes
 * (a luarig spawned by a test) run normally.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

struct lr_loop;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_vasprintf(char **out, const char *fmt, va_list ap);
char *__real_realpath(const char *path, char *resolved);
int __real_lr_loop_run(struct lr_loop *loop);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_vasprintf(char **out, const char *fmt, va_list ap);
int __wrap_asprintf(char **out, const char *fmt, ...);
char *__wrap_realpath(const char *path, char *resolved);
int __wrap_lr_loop_run(struct lr_loop *loop);

static unsigned long fail_at;   /* 0: count only */
static unsigned long counted;
static int armed;               /* counting has started */
static int from_loop;
static int log_fd = -1;
static int trace;
static pid_t main_tid;
/* the call that failed, so that its immediate retry fails as well */
static const char *last_fn;
static const void *last_p;
static size_t last_n;
static int last_failed;

static void say(const char *fmt, ...)
{
	if (log_fd < 0)
		return;
	char buf[160];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n > 0 && write(log_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1) < 0) {
		/* nothing to do: the harness reports the missing line */
	}
}

/* Whether this allocation (fn with p, n) fails. Main thread only. */
static int should_fail(const char *fn, const void *p, size_t n)
{
	if (!armed || (pid_t)syscall(SYS_gettid) != main_tid)
		return 0;
	if (last_failed) {
		last_failed = 0;
		if (fn == last_fn && p == last_p && n == last_n)
			return 1; /* Lua's retry after its emergency collection */
	}
	counted++;
	if (counted != fail_at)
		return 0;
	last_failed = 1;
	last_fn = fn;
	last_p = p;
	last_n = n;
	say("fail %lu %s %zu\n", counted, fn, n);
	if (trace)
		__sanitizer_print_stack_trace();
	return 1;
}

void *__wrap_malloc(size_t n)
{
	if (should_fail("malloc", NULL, n)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	if (should_fail("calloc", NULL, n * m)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
	if (n && should_fail("realloc", p, n)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	if (should_fail("strdup", NULL, strlen(s) + 1)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	if (should_fail("strndup", NULL, n)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_strndup(s, n);
}

int __wrap_vasprintf(char **out, const char *fmt, va_list ap)
{
	if (should_fail("vasprintf", NULL, 0)) {
		errno = ENOMEM;
		return -1;
	}
	return __real_vasprintf(out, fmt, ap);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = __wrap_vasprintf(out, fmt, ap);
	va_end(ap);
	return rc;
}

char *__wrap_realpath(const char *path, char *resolved)
{
	if (!resolved && should_fail("realpath", NULL, PATH_MAX)) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_realpath(path, resolved);
}

int __wrap_lr_loop_run(struct lr_loop *loop)
{
	if (from_loop)
		armed = 1;
	return __real_lr_loop_run(loop);
}

static void *lib_malloc(size_t n)
{
	return __wrap_malloc(n);
}

static void *lib_realloc(void *p, size_t n)
{
	return __wrap_realloc(p, n);
}

static void torture_end(void)
{
	say("count %lu\n", counted);
}

__attribute__((constructor)) static void torture_start(void)
{
	const char *v = getenv("LUARIG_TORTURE");
	const char *from = getenv("LUARIG_TORTURE_FROM");
	const char *log = getenv("LUARIG_TORTURE_LOG");
	const char *tr = getenv("LUARIG_TORTURE_TRACE");
	if (!v)
		return;
	fail_at = strtoul(v, NULL, 10);
	from_loop = from && strcmp(from, "loop") == 0;
	trace = tr && strcmp(tr, "1") == 0;
	if (log)
		log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	main_tid = (pid_t)syscall(SYS_gettid);
	unsetenv("LUARIG_TORTURE");
	unsetenv("LUARIG_TORTURE_FROM");
	unsetenv("LUARIG_TORTURE_LOG");
	unsetenv("LUARIG_TORTURE_TRACE");
	json_set_alloc_funcs(lib_malloc, free);
	event_set_mem_functions(lib_malloc, lib_realloc, free);
	atexit(torture_end);
	armed = !from_loop;
}
