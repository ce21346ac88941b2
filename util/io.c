/*
 * io.c — the file-descriptor loops every folder needs once: reading to the
 * end, writing everything, making a directory and its parents.
 */
#include "util.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_CHUNK (32u << 10)

int lr_read_fd(int fd, struct lr_buf *b, size_t limit)
{
	char chunk[READ_CHUNK];
	size_t got = 0;
	for (;;) {
		size_t want = sizeof chunk;
		if (limit && limit - got < want)
			want = limit - got;
		if (want == 0)
			return 0;
		ssize_t n = read(fd, chunk, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		int rc = lr_buf_add(b, chunk, (size_t)n);
		if (rc)
			return rc;
		got += (size_t)n;
	}
}

int lr_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int lr_mkdirs(const char *path, mode_t mode, struct lr_err *e)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf) {
		lr_err_set(e, "cannot create '%.200s': %s", path, strerror(ENAMETOOLONG));
		return -ENAMETOOLONG;
	}
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST) {
			int err = errno;
			lr_err_set(e, "cannot create '%s': %s", buf, strerror(err));
			return -err;
		}
		buf[i] = c;
	}
	return 0;
}
