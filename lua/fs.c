/*
 * fs.c — the few filesystem calls the Lua library needs for files that
 * hold policy (rig.permissions.file), where io.open is not careful enough.
 *
 *   core.fs_lstat(path) -> { type = "file" | "dir" | "link" | "other",
 *                            uid =, gid =, mode = (permission bits), size =,
 *                            ino =, mtime_ns = }
 *                        | nil, msg, code ("ENOENT", ...)
 *   core.fs_getuid() -> the effective uid
 *   core.fs_read_private(path, max_bytes) -> bytes | nil, msg, code
 *     opens without following a symlink, then refuses (code "refused") a
 *     file that is not a regular file, is not owned by the effective uid,
 *     or is writable by group or others; "toobig" past max_bytes; a missing
 *     file is nil, msg, "ENOENT". The checks are made on the open fd, so
 *     nothing can be swapped in between the check and the read.
 *   core.fs_write_atomic(path, bytes) -> true | nil, msg, code
 *     writes a temp file in the same directory (mode 0600), fsyncs it,
 *     renames it over path and fsyncs the directory. On any failure the
 *     temp file is removed and path is untouched.
 *
 * These block the loop briefly: they are meant for small files (a few KiB)
 * read or written at definition time or when a person approves something.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *type_name(mode_t m)
{
	if (S_ISREG(m))
		return "file";
	if (S_ISDIR(m))
		return "dir";
	if (S_ISLNK(m))
		return "link";
	return "other";
}

static int fs_lstat(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct stat st;
	if (lstat(path, &st) != 0)
		return lr_pushfail(L, -errno, "'%s': %s", path, strerror(errno));
	lua_createtable(L, 0, 7);
	lua_pushstring(L, type_name(st.st_mode));
	lua_setfield(L, -2, "type");
	lua_pushinteger(L, (lua_Integer)st.st_uid);
	lua_setfield(L, -2, "uid");
	lua_pushinteger(L, (lua_Integer)st.st_gid);
	lua_setfield(L, -2, "gid");
	lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
	lua_setfield(L, -2, "mode");
	lua_pushinteger(L, (lua_Integer)st.st_size);
	lua_setfield(L, -2, "size");
	lua_pushinteger(L, (lua_Integer)st.st_ino);
	lua_setfield(L, -2, "ino");
	lua_pushinteger(L, (lua_Integer)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	lua_setfield(L, -2, "mtime_ns");
	return 1;
}

static int fs_getuid(lua_State *L)
{
	lua_pushinteger(L, (lua_Integer)geteuid());
	return 1;
}

static int fs_read_private(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	luaL_argcheck(L, max >= 0, 2, "must not be negative");
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			return lr_pushfail(L, LR_EREFUSED, "'%s' is a symbolic link", path);
		return lr_pushfail(L, -e, "'%s': %s", path, strerror(e));
	}
	struct stat st;
	const char *why = NULL;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return lr_pushfail(L, -e, "'%s': %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode))
		why = "is not a regular file";
	else if (st.st_uid != geteuid())
		why = "is not owned by the current user";
	else if (st.st_mode & (S_IWGRP | S_IWOTH))
		why = "is writable by group or others (chmod go-w)";
	if (why) {
		close(fd);
		return lr_pushfail(L, LR_EREFUSED, "'%s' %s", path, why);
	}
	if ((lua_Integer)st.st_size > max) {
		close(fd);
		return lr_pushfail(L, LR_ETOOBIG, "'%s' is larger than %d bytes", path, (int)max);
	}
	/* read into C memory first, so a raise (out of memory) cannot leak the fd */
	struct lr_buf b;
	lr_buf_init(&b, (size_t)max);
	int rc = 0;
	char chunk[4096];
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0 || (rc = lr_buf_add(&b, chunk, (size_t)n)) != 0)
			break;
	}
	close(fd);
	if (rc) {
		lr_buf_release(&b);
		if (rc == LR_ETOOBIG)
			return lr_pushfail(L, rc, "'%s' is larger than %d bytes", path, (int)max);
		return lr_pushfail(L, rc, "'%s': %s", path, lr_strerror(rc));
	}
	lua_pushlstring(L, b.data ? b.data : "", b.len);
	lr_buf_release(&b);
	return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Temp file, fsync, rename, fsync of the directory: after a crash the path
 * holds either the old bytes or the new ones, never a mix. The message is
 * built into err before any Lua call, so nothing is leaked by a raise.
 */
static int fs_write_atomic(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	size_t n;
	const char *data = luaL_checklstring(L, 2, &n);
	size_t plen = strlen(path);
	char *tmp = malloc(plen + 16);
	char *dir = malloc(plen + 2);
	int rc = 0, fd = -1, dfd = -1;
	const char *step = "write";
	if (!tmp || !dir) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(tmp, path, plen);
	memcpy(tmp + plen, ".tmp.XXXXXX", 12);
	memcpy(dir, path, plen + 1);
	char *slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	step = "create a temp file for";
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		tmp[0] = '\0';
		goto out;
	}
	step = "write";
	if (fchmod(fd, 0600) != 0 || (rc = write_all(fd, data, n)) != 0 || fsync(fd) != 0) {
		if (!rc)
			rc = -errno;
		goto out;
	}
	if (close(fd) != 0) {
		fd = -1;
		rc = -errno;
		goto out;
	}
	fd = -1;
	step = "rename over";
	if (rename(tmp, path) != 0) {
		rc = -errno;
		goto out;
	}
	tmp[0] = '\0';
	step = "sync the directory of";
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0)
		rc = -errno;
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (tmp && tmp[0])
		unlink(tmp);
	free(tmp);
	free(dir);
	if (rc)
		return lr_pushfail(L, rc, "cannot %s '%s': %s", step, path, lr_strerror(rc));
	lua_pushboolean(L, 1);
	return 1;
}

void lr__fs_open(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{ "fs_lstat", fs_lstat },
		{ "fs_getuid", fs_getuid },
		{ "fs_read_private", fs_read_private },
		{ "fs_write_atomic", fs_write_atomic },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
