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
 *
 * The standard tools (rig.tools) work on paths beneath a workspace root. rel
 * is a relative path of plain components ("", "." and ".." refused); every
 * component is opened with O_NOFOLLOW from an fd of the one before, so a
 * symbolic link anywhere on the way (say one swapped in after the path was
 * checked) is refused ("refused"), never followed out of the root:
 *
 *   core.fs_realpath(path) -> canonical absolute path | nil, msg, code
 *   core.fs_read_beneath(root, rel, max_bytes) -> bytes, truncated, size
 *     a regular file only; at most max_bytes (truncated = true when the
 *     file holds more; size is its size)
 *   core.fs_write_beneath(root, rel, bytes, how) -> true | nil, msg, code
 *     how = "create": the file must not exist ("EEXIST" if it appeared);
 *     "replace": an existing regular file is replaced, keeping its mode.
 *     Missing parent directories are made (0755). Temp (O_EXCL, 0600) +
 *     fsync + rename (create: link, so nothing is ever overwritten) +
 *     fsync of the directory.
 *   core.fs_list_beneath(root, rel) -> { { name =, type = }, ... } sorted by
 *     name; type as fs_lstat's, links never followed; at most 100000 entries
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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
	int rc = lr_read_fd(fd, &b, 0);
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
	if (fchmod(fd, 0600) != 0 || (rc = lr_write_all(fd, data, n)) != 0 || fsync(fd) != 0) {
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

static int fs_realpath(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char *r = realpath(path, NULL);
	if (!r)
		return lr_pushfail(L, -errno, "'%s': %s", path, strerror(errno));
	lua_pushstring(L, r); /* a raise here (out of memory) leaks r: acceptable, it is tiny */
	free(r);
	return 1;
}


/*
 * Opens the directory holding rel's last component, beneath root, one
 * component at a time without following links. *last points into rel at the
 * last component ("" when rel is ""). mkdirs makes missing directories.
 * Returns an fd or a negative status with err filled in.
 */
static int walk_parent(const char *root, const char *rel, int mkdirs, const char **last,
		       struct lr_err *err)
{
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		int e = errno;
		lr_err_set(err, "workspace '%s': %s", root, strerror(e));
		return -e;
	}
	const char *p = rel;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if ((n == 0 && (slash || p != rel)) || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.') || n > NAME_MAX) {
			close(dfd);
			lr_err_set(err, "'%s' is not a plain relative path", rel);
			return LR_EREFUSED;
		}
		if (!slash) {
			*last = p;
			return dfd;
		}
		char comp[NAME_MAX + 1];
		memcpy(comp, p, n);
		comp[n] = '\0';
		int fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && mkdirs) {
			if (mkdirat(dfd, comp, 0755) != 0 && errno != EEXIST) {
				int e = errno;
				close(dfd);
				lr_err_set(err, "cannot make the directory '%.*s': %s",
					   (int)(slash - rel), rel, strerror(e));
				return -e;
			}
			fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0) {
			int e = errno;
			struct stat st;
			int link = fstatat(dfd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
			close(dfd);
			if (link) {
				lr_err_set(err, "'%.*s' is a symbolic link", (int)(slash - rel), rel);
				return LR_EREFUSED;
			}
			lr_err_set(err, "'%.*s': %s", (int)(slash - rel), rel, strerror(e));
			return -e;
		}
		close(dfd);
		dfd = fd;
		p = slash + 1;
	}
}

/* Opens rel's last component for reading, refusing a link or a non-regular file. */
static int open_final(int dfd, const char *rel, const char *name, struct stat *st,
		      struct lr_err *err)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP) {
			lr_err_set(err, "'%s' is a symbolic link", rel);
			return LR_EREFUSED;
		}
		lr_err_set(err, "'%s': %s", rel, strerror(e));
		return -e;
	}
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
		int dir = S_ISDIR(st->st_mode);
		close(fd);
		lr_err_set(err, "'%s' is %s", rel, dir ? "a directory" : "not a regular file");
		return LR_EREFUSED;
	}
	return fd;
}

static int fs_read_beneath(lua_State *L)
{
	const char *root = luaL_checkstring(L, 1);
	const char *rel = luaL_checkstring(L, 2);
	lua_Integer max = luaL_checkinteger(L, 3);
	luaL_argcheck(L, max >= 0 && max <= (1 << 30), 3, "must be 0 to 1 GiB");
	struct lr_err err = { "" };
	const char *name;
	int rc = 0;
	int dfd = walk_parent(root, rel, 0, &name, &err);
	if (dfd < 0)
		return lr_pushfail(L, dfd, "%s", err.msg);
	struct stat st;
	int fd = open_final(dfd, rel, name, &st, &err);
	close(dfd);
	if (fd < 0)
		return lr_pushfail(L, fd, "%s", err.msg);
	/* read into C memory first, so a raise (out of memory) cannot leak the fd */
	struct lr_buf b;
	lr_buf_init(&b, (size_t)max + 1);
	int truncated = 0;
	rc = lr_read_fd(fd, &b, (size_t)max + 1);
	close(fd);
	if (rc) {
		lr_buf_release(&b);
		return lr_pushfail(L, rc, "'%s': %s", rel, lr_strerror(rc));
	}
	size_t len = b.len;
	if (len > (size_t)max) {
		truncated = 1;
		len = (size_t)max;
	}
	lua_pushlstring(L, b.data ? b.data : "", len);
	lr_buf_release(&b);
	lua_pushboolean(L, truncated);
	lua_pushinteger(L, (lua_Integer)st.st_size);
	return 3;
}

static int fs_write_beneath(lua_State *L)
{
	const char *root = luaL_checkstring(L, 1);
	const char *rel = luaL_checkstring(L, 2);
	size_t n;
	const char *data = luaL_checklstring(L, 3, &n);
	static const char *const hows[] = { "create", "replace", NULL };
	int create = luaL_checkoption(L, 4, NULL, hows) == 0;
	struct lr_err err = { "" };
	char tmp[64];
	const char *name;
	int rc = 0, fd = -1;
	tmp[0] = '\0';
	int dfd = walk_parent(root, rel, 1, &name, &err);
	if (dfd < 0)
		return lr_pushfail(L, dfd, "%s", err.msg);
	if (!*name) {
		close(dfd);
		return lr_pushfail(L, LR_EREFUSED, "'%s' is not a file path", rel);
	}
	struct stat st;
	mode_t mode = 0644;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (create) {
			rc = -EEXIST;
			lr_err_set(&err, "'%s' already exists", rel);
			goto out;
		}
		if (!S_ISREG(st.st_mode)) {
			rc = LR_EREFUSED;
			lr_err_set(&err, "'%s' is %s", rel,
				   S_ISLNK(st.st_mode) ? "a symbolic link" :
				   S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
			goto out;
		}
		mode = st.st_mode & 07777;
	} else if (!create) {
		rc = -errno;
		lr_err_set(&err, "'%s': %s", rel, strerror(errno));
		goto out;
	}
	for (int i = 0; i < 100 && fd < 0; i++) {
		unsigned r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
			r = (unsigned)getpid() * 2654435761u + (unsigned)i;
		snprintf(tmp, sizeof tmp, ".lr-tmp-%08x", r);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		rc = -errno;
		tmp[0] = '\0';
		lr_err_set(&err, "cannot create a temp file for '%s': %s", rel, strerror(errno));
		goto out;
	}
	if ((rc = lr_write_all(fd, data, n)) != 0 || fchmod(fd, mode) != 0 || fsync(fd) != 0) {
		if (!rc)
			rc = -errno;
		lr_err_set(&err, "cannot write '%s': %s", rel, lr_strerror(rc));
		goto out;
	}
	if (create) {
		/* link never replaces: a file that appeared since the check wins */
		if (linkat(dfd, tmp, dfd, name, 0) != 0) {
			rc = -errno;
			lr_err_set(&err, rc == -EEXIST ? "'%s' already exists" : "cannot create '%s': %s",
				   rel, strerror(errno));
			goto out;
		}
	} else if (renameat(dfd, tmp, dfd, name) != 0) {
		rc = -errno;
		lr_err_set(&err, "cannot rename over '%s': %s", rel, strerror(errno));
		goto out;
	} else {
		tmp[0] = '\0';
	}
	if (fsync(dfd) != 0) {
		rc = -errno;
		lr_err_set(&err, "cannot sync the directory of '%s': %s", rel, strerror(errno));
	}
out:
	if (fd >= 0)
		close(fd);
	if (tmp[0])
		unlinkat(dfd, tmp, 0);
	close(dfd);
	if (rc)
		return lr_pushfail(L, rc, "%s", err.msg);
	lua_pushboolean(L, 1);
	return 1;
}

struct entry {
	char *name;
	const char *type;
};

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

#define LIST_MAX 100000

static int fs_list_beneath(lua_State *L)
{
	const char *root = luaL_checkstring(L, 1);
	const char *rel = luaL_checkstring(L, 2);
	struct lr_err err = { "" };
	const char *name;
	int dfd = walk_parent(root, rel, 0, &name, &err);
	if (dfd < 0)
		return lr_pushfail(L, dfd, "%s", err.msg);
	if (*name) { /* else rel is "": the root itself */
		int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(dfd);
		if (fd < 0 && e == ELOOP)
			return lr_pushfail(L, LR_EREFUSED, "'%s' is a symbolic link", rel);
		if (fd < 0)
			return lr_pushfail(L, -e, "'%s': %s", rel, strerror(e));
		dfd = fd;
	}
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = errno;
		close(dfd);
		return lr_pushfail(L, -e, "'%s': %s", rel, strerror(e));
	}
	struct entry *v = NULL;
	size_t nv = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (nv == LIST_MAX) {
			rc = LR_ETOOBIG;
			break;
		}
		if (nv == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct entry *nvv = realloc(v, nc * sizeof *nvv);
			if (!nvv) {
				rc = -ENOMEM;
				break;
			}
			v = nvv;
			cap = nc;
		}
		struct stat st;
		const char *type = "other";
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			type = type_name(st.st_mode);
		if (!(v[nv].name = strdup(de->d_name))) {
			rc = -ENOMEM;
			break;
		}
		v[nv++].type = type;
	}
	closedir(d);
	if (!rc && nv > 1)
		qsort(v, nv, sizeof *v, entry_cmp);
	if (!rc) {
		/* pushing can raise (out of memory): the names leak then, which is acceptable */
		lua_createtable(L, (int)nv, 0);
		for (size_t i = 0; i < nv; i++) {
			lua_createtable(L, 0, 2);
			lua_pushstring(L, v[i].name);
			lua_setfield(L, -2, "name");
			lua_pushstring(L, v[i].type);
			lua_setfield(L, -2, "type");
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
	}
	for (size_t i = 0; i < nv; i++)
		free(v[i].name);
	free(v);
	if (rc)
		return lr_pushfail(L, rc, "'%s': %s", rel, lr_strerror(rc));
	return 1;
}

void lr__fs_open(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{ "fs_lstat", fs_lstat },
		{ "fs_getuid", fs_getuid },
		{ "fs_read_private", fs_read_private },
		{ "fs_write_atomic", fs_write_atomic },
		{ "fs_realpath", fs_realpath },
		{ "fs_read_beneath", fs_read_beneath },
		{ "fs_write_beneath", fs_write_beneath },
		{ "fs_list_beneath", fs_list_beneath },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
