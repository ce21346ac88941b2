/*
 * protect_fuzz.c — the parsers of sandbox/protect.c on arbitrary bytes: a
 * .git file's "gitdir: PATH" (read from a workspace a command wrote), the
 * reader of git config files (core.hooksPath, include paths) and the
 * protected-name check (profile fields, the file tools' options).
 *
 * Invariants: a parsed target is the bytes after "gitdir: " without the
 * trailing CR/LF, non-empty, holding no NUL or LF and fitting out; anything
 * else is -EINVAL. The config reader returns 0 or -EINVAL and gives only
 * non-empty values of the two kinds. An accepted name is relative, printable, without empty,
 * "." or ".." components and at most LR_PROTECT_NAME_MAX bytes.
 */
#include "../../sandbox/sandbox.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_gitfile(const char *buf, size_t len, size_t outlen)
{
	char out[300];
	int rc = lr_protect_gitfile(buf, len, out, outlen);
	if (rc != 0 && rc != -EINVAL)
		abort();
	if (rc)
		return;
	size_t n = strlen(out);
	if (n == 0 || n >= outlen || memcmp(buf, "gitdir: ", 8) != 0 || memcmp(out, buf + 8, n) != 0 ||
	    memchr(out, '\n', n))
		abort();
	for (size_t i = 8 + n; i < len; i++) /* only the line end was dropped */
		if (buf[i] != '\r' && buf[i] != '\n')
			abort();
}

static void check_name(const char *s)
{
	if (lr_protect_name_check(s) != 0)
		return;
	size_t n = strlen(s);
	if (n == 0 || n > LR_PROTECT_NAME_MAX || s[0] == '/' || s[n - 1] == '/' || strstr(s, "//"))
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			abort();
	if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strncmp(s, "./", 2) == 0 ||
	    strncmp(s, "../", 3) == 0 || strstr(s, "/./") || strstr(s, "/../") ||
	    (n >= 2 && strcmp(s + n - 2, "/.") == 0) || (n >= 3 && strcmp(s + n - 3, "/..") == 0))
		abort();
}

static void found(void *arg, enum lr_protect_key key, const char *value)
{
	(void)arg;
	if ((key != LR_PROTECT_HOOKSPATH && key != LR_PROTECT_INCLUDE) || !value[0] ||
	    strlen(value) >= 4096)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	check_gitfile(buf, size, 300);
	check_gitfile(buf, size, 16); /* a target that does not fit */
	check_name(buf);
	int rc = lr_protect_config_paths(buf, size, found, NULL);
	if (rc != 0 && rc != -EINVAL)
		abort();
	free(buf);
	return 0;
}
