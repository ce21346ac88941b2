/*
 * io_test.c — util/io.c (lr_read_fd, lr_write_all, lr_mkdirs) and
 * lr_lazy_open from many threads at once (util/lazy.c).
 */
#include "test.h"

#include "../../util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[] = "/tmp/luarig-io-test-XXXXXX";

TEST(read_fd_to_the_end_to_a_limit_and_to_the_cap)
{
	char path[128];
	snprintf(path, sizeof path, "%s/data", base);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	static char big[100000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)('a' + i % 26);
	CHECK_EQ_INT(lr_write_all(fd, big, sizeof big), 0);
	struct lr_buf b;
	lr_buf_init(&b, 1 << 20);
	lseek(fd, 0, SEEK_SET);
	CHECK_EQ_INT(lr_read_fd(fd, &b, 0), 0);
	CHECK_EQ_INT(b.len, sizeof big);
	CHECK(b.len == sizeof big && memcmp(b.data, big, sizeof big) == 0);
	/* a limit stops the reading there, the rest stays unread */
	lr_buf_reset(&b);
	lseek(fd, 0, SEEK_SET);
	CHECK_EQ_INT(lr_read_fd(fd, &b, 40000), 0);
	CHECK_EQ_INT(b.len, 40000);
	CHECK_EQ_INT(lseek(fd, 0, SEEK_CUR), 40000);
	lr_buf_release(&b);
	/* the buffer's cap is the reader's: LR_ETOOBIG */
	lr_buf_init(&b, 1000);
	lseek(fd, 0, SEEK_SET);
	CHECK_EQ_INT(lr_read_fd(fd, &b, 0), LR_ETOOBIG);
	lr_buf_release(&b);
	close(fd);
	CHECK_EQ_INT(lr_read_fd(-1, &b, 0), -EBADF);
	CHECK_EQ_INT(lr_write_all(-1, "x", 1), -EBADF);
}

TEST(mkdirs_makes_every_parent_and_names_what_failed)
{
	char path[256];
	snprintf(path, sizeof path, "%s/a/b/c", base);
	struct lr_err e;
	CHECK_EQ_INT(lr_mkdirs(path, 0700, &e), 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	CHECK_EQ_INT(lr_mkdirs(path, 0700, &e), 0); /* again: they exist */
	/* a file in the way: the component is named */
	char file[256];
	snprintf(file, sizeof file, "%s/a/f", base);
	int fd = open(file, O_WRONLY | O_CREAT, 0600);
	close(fd);
	snprintf(path, sizeof path, "%s/a/f/g", base);
	CHECK_EQ_INT(lr_mkdirs(path, 0700, &e), -ENOTDIR);
	char want[300];
	snprintf(want, sizeof want, "cannot create '%s/a/f/g': Not a directory", base);
	CHECK_EQ_STR(e.msg, want);
	CHECK_EQ_INT(lr_mkdirs("", 0700, NULL), -ENAMETOOLONG);
}

/* libc, opened by many threads at once: every one sees every slot. */
static const char *const libc_sonames[] = { "libc.so.6", NULL };
static const char *const libc_names[] = { "getpid", "getppid", "strlen", NULL };
static struct {
	pid_t (*getpid)(void);
	pid_t (*getppid)(void);
	size_t (*strlen)(const char *);
} libc_fns;
static struct lr_lazy libc_lazy = { .sonames = libc_sonames, .names = libc_names,
				    .slots = (void **)&libc_fns };
static pthread_barrier_t start;

static void *opener(void *arg)
{
	int *ok = arg;
	pthread_barrier_wait(&start);
	*ok = lr_lazy_open(&libc_lazy) == 0 && libc_fns.getpid && libc_fns.getppid &&
	      libc_fns.strlen && libc_fns.strlen("four") == 4;
	return NULL;
}

TEST(lazy_open_from_many_threads)
{
	enum { N = 16 };
	pthread_t t[N];
	int ok[N] = { 0 };
	pthread_barrier_init(&start, NULL, N);
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, opener, &ok[i]);
	int all = 1;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		all &= ok[i];
	}
	pthread_barrier_destroy(&start);
	CHECK(all);
	CHECK_EQ_INT(libc_fns.getpid(), getpid());
	/* a library that is not there: the same failure for every later call */
	static const char *const none[] = { "libluarig-no-such.so", NULL };
	static void *slot;
	static struct lr_lazy missing = { .sonames = none, .names = libc_names, .slots = &slot };
	CHECK_EQ_INT(lr_lazy_open(&missing), LR_EUNAVAILABLE);
	CHECK(strstr(missing.err.msg, "cannot load 'libluarig-no-such.so'") != NULL);
	CHECK_EQ_INT(lr_lazy_open(&missing), LR_EUNAVAILABLE);
}

int main(void)
{
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(read_fd_to_the_end_to_a_limit_and_to_the_cap);
	RUN(mkdirs_makes_every_parent_and_names_what_failed);
	RUN(lazy_open_from_many_threads);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", base);
	return test_summary();
}
