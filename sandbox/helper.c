/*
 * helper.c — the confinement helper, "luarig __sandbox-helper" (docs/sandbox.md).
 *
 * The host re-executes its own binary with this hidden subcommand, before
 * any Lua state, thread or event loop exists, and hands it a sealed spec on
 * fd 3 and the run's lifeline on fd 4; or it runs lr_sbx_helper_main in a
 * copy made to look exec'd: a fork of `luarig sandbox run` (a host with no
 * thread, host/proc.c fork_main), a fork of a set's pre-forked helper
 * (sandbox/zygote.c), or a copy the zygote prepared ahead, which enters the
 * namespaces and builds the view before its run's spec arrives
 * (lr__sbx_standby_main, at the end of this file). The helper is single-threaded and
 * does everything in order, dying with exit 126 and "luarig sandbox:
 * <what>: <why>" at the first failure:
 *
 *   helper (host namespaces): read and check the spec and the lifeline,
 *     take the seccomp filter the host compiled into the spec (or, for a
 *     spec without one, open libseccomp and build it while the host's /usr
 *     is still visible), enter the cgroup, then for tier A unshare
 *     user+mount+pid+ipc+uts+net at once and map the real uid/gid; fork the
 *     reaper and wait for it, forwarding SIGTERM/SIGINT/SIGHUP/SIGQUIT and
 *     watching the lifeline; exit with its status.
 *   reaper (tier A: pid 1 of the new pid namespace): die with the helper,
 *     build the mount view, bring lo up, set the hostname, setsid, fork the
 *     target, reap every child, and when the target exits kill everything
 *     left and exit with the target's status (128+N for a signal).
 *   target: setsid, die with its parent, rlimits, every fd >= 3
 *     close-on-exec, capabilities dropped (bounding, ambient, permitted,
 *     effective, inheritable, locked securebits, no_new_privs), Landlock,
 *     the seccomp filter last, execve with the spec's environment (127 when
 *     the exec fails).
 *
 * Lifetime (issue 16 §3): nothing the run started outlives the host. The
 * host holds the lifeline's write end; however the host ends (SIGKILL
 * included) or ends the run, the helper reads EOF and kills: in tier A the
 * reaper, whose pid namespace the kernel then empties; otherwise every
 * descendant. The helper is killed itself only when nothing remains that
 * the kernel would not take with it (the reaper and the target carry
 * SIGKILL as their parent death signal, checked against the fork race).
 *
 * Tier B (no user namespace): the helper is a child subreaper instead of a
 * pid namespace's init; after the target exits it kills every descendant it
 * inherited. No mount view, no network namespace: Landlock, seccomp (which
 * then also refuses AF_INET/AF_INET6 sockets when the network is off),
 * rlimits, setsid and the capability drop.
 */
#include "internal.h"

#include <dirent.h>
#include <sys/time.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Landlock bits newer than Debian 12's header. */
#define LL_FS_REFER (UINT64_C(1) << 13)
#define LL_FS_TRUNCATE (UINT64_C(1) << 14)
#define LL_FS_IOCTL_DEV (UINT64_C(1) << 15)
#define LL_NET_BIND_TCP (UINT64_C(1) << 0)
#define LL_NET_CONNECT_TCP (UINT64_C(1) << 1)
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (UINT64_C(1) << 0)
#define LL_SCOPE_SIGNAL (UINT64_C(1) << 1)
/* Rights Landlock accepts on a non-directory. */
#define LL_FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | \
			LANDLOCK_ACCESS_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_DEV_RW (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR | \
		   LANDLOCK_ACCESS_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

struct ll_ruleset_attr {
	uint64_t handled_access_fs, handled_access_net, scoped;
};

#define NS_FLAGS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | \
		  CLONE_NEWNET)

/* ---- dying ---- */

__attribute__((format(printf, 2, 3), noreturn))
static void die(int e, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (e)
		dprintf(2, "luarig sandbox: %s: %s\n", msg, strerror(e));
	else
		dprintf(2, "luarig sandbox: %s\n", msg);
	_exit(LR_SBX_EXIT_SETUP);
}

/* ---- the spec on fd 3 ---- */

char *lr__sbx_read_sealed(int fd, size_t *len, int *err, const char **why)
{
	const int need = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
	struct stat st;
	*err = 0;
	if (fstat(fd, &st) < 0) {
		*err = errno;
		*why = "spec on fd 3";
		return NULL;
	}
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		*err = errno;
		*why = "spec on fd 3 is not a sealed memfd";
		return NULL;
	}
	if ((seals & need) != need) {
		*why = "spec on fd 3 is not sealed against every change";
		return NULL;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > LR_SBX_SPEC_MAX) {
		static char size_why[64]; /* the helper and the zygote are single-threaded */
		snprintf(size_why, sizeof size_why, "spec on fd 3 is not a file of at most %d bytes",
			 LR_SBX_SPEC_MAX);
		*why = size_why;
		return NULL;
	}
	size_t n = (size_t)st.st_size, off = 0;
	char *buf = malloc(n + 1);
	if (!buf) {
		*err = ENOMEM;
		*why = "spec";
		return NULL;
	}
	while (off < n) {
		ssize_t r = pread(fd, buf + off, n - off, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*err = r < 0 ? errno : EIO;
			*why = "reading the spec";
			free(buf);
			return NULL;
		}
		off += (size_t)r;
	}
	*len = n;
	return buf;
}

static char *read_spec(size_t *len)
{
	int e;
	const char *why;
	char *buf = lr__sbx_read_sealed(LR_SBX_FD_SPEC, len, &e, &why);
	if (!buf)
		die(e, "%s", why);
	close(LR_SBX_FD_SPEC);
	return buf;
}

/* ---- seccomp ---- */

/*
 * The filter when the spec carries none (a spec made by hand, or a host
 * that could not build it): built here by libseccomp, opened lazily while
 * the host's /usr is still visible (sandbox/seccomp.c).
 */
static scmp_filter_ctx seccomp_build(int inet_ok)
{
	const char *why = "";
	scmp_filter_ctx ctx = NULL;
	int rc = lr__seccomp_build(inet_ok, &ctx, &why);
	if (rc)
		die(rc == LR_EUNAVAILABLE ? 0 : -rc, "seccomp: %s", why);
	return ctx;
}

/*
 * The spec's filter, compiled once by the host (lr__seccomp_bpf): loaded as
 * libseccomp's seccomp_load would (no_new_privs is already set, no flags).
 */
static int load_bpf(const struct lr_sbx_spec *s)
{
	struct sock_fprog prog = { .len = (unsigned short)(s->seccomp_len / sizeof(struct sock_filter)),
				   .filter = (struct sock_filter *)s->seccomp_bpf };
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0 ? -errno : 0;
}

/* ---- the cgroup ---- */

static void write_file(const char *dir, const char *name, const char *val)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, val, strlen(val)) != (ssize_t)strlen(val)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		die(e, "cgroup: writing '%s'", p);
	}
	close(fd);
}

/* A cgroup named in the spec is demanded: any failure is fatal. */
static void enter_cgroup(const struct lr_sbx_spec *s)
{
	char v[32];
	if (mkdir(s->cgroup, 0755) < 0 && errno != EEXIST)
		die(errno, "cgroup: creating '%s'", s->cgroup);
	if (s->limits.memory_bytes) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)s->limits.memory_bytes);
		write_file(s->cgroup, "memory.max", v);
	}
	if (s->limits.nproc) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)s->limits.nproc);
		write_file(s->cgroup, "pids.max", v);
	}
	snprintf(v, sizeof v, "%ld", (long)getpid());
	write_file(s->cgroup, "cgroup.procs", v);
}

/* ---- the user namespace ---- */

static void write_proc(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		die(e, "writing '%s'", path);
	}
	close(fd);
}

static void enter_namespaces(const struct lr_sbx_spec *s)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (s->uid != uid || s->gid != gid)
		die(0, "spec uid/gid %lu/%lu are not the real ones (%lu/%lu)", (unsigned long)s->uid,
		    (unsigned long)s->gid, (unsigned long)uid, (unsigned long)gid);
	if (unshare(NS_FLAGS) < 0)
		die(errno, "unshare of the user, mount, pid, ipc, uts and network namespaces");
	char map[64];
	write_proc("/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%lu %lu 1\n", (unsigned long)uid, (unsigned long)uid);
	write_proc("/proc/self/uid_map", map);
	snprintf(map, sizeof map, "%lu %lu 1\n", (unsigned long)gid, (unsigned long)gid);
	write_proc("/proc/self/gid_map", map);
}

/* ---- /etc as others see it (luarig as root) ---- */

/*
 * A user namespace whose only mapping is 0 -> 65534, as an fd; or -errno.
 * A child is cloned into a new user namespace and exits at once: its
 * namespace stays reachable through /proc/PID until it is reaped, so the
 * maps are written and the namespace opened without waiting for it to run.
 */
static int idmap_userns(void)
{
	struct clone_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
	pid_t c = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
	if (c < 0)
		return -errno;
	if (c == 0)
		_exit(0);
	int rc = 0, fd = -1;
	static const char *const maps[] = { "uid_map", "gid_map" };
	char path[64];
	for (int i = 0; i < 2 && !rc; i++) {
		snprintf(path, sizeof path, "/proc/%ld/%s", (long)c, maps[i]);
		int m = open(path, O_WRONLY | O_CLOEXEC);
		if (m < 0 || write(m, "0 65534 1\n", 10) != 10)
			rc = -errno;
		if (m >= 0)
			close(m);
	}
	if (!rc) {
		snprintf(path, sizeof path, "/proc/%ld/ns/user", (long)c);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			rc = -errno;
	}
	while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
		;
	return rc ? rc : fd;
}

/*
 * A detached, read-only clone of the host's /etc whose owners are mapped
 * through a namespace that maps only uid/gid 0 to 65534: every file shows an
 * owner the target is not, so uid 0 without capabilities reads exactly what
 * others may (no /etc/shadow, no ssh host keys, no 0700 directory), at any
 * depth, with one mount instead of a walk. Made in the host's user
 * namespace (idmapping needs CAP_SYS_ADMIN over the filesystem).
 */
int lr__sbx_idmap_ns = -1;

int lr__sbx_idmap_userns(void)
{
	return idmap_userns();
}

int lr__sbx_etc_idmapped(void)
{
	int ns = lr__sbx_idmap_ns >= 0 ? lr__sbx_idmap_ns : idmap_userns();
	lr__sbx_idmap_ns = -1; /* a zygote copy's own dup: used once, closed below */
	if (ns < 0)
		return ns;
	int t = open_tree(AT_FDCWD, "/etc", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (t < 0) {
		int e = errno;
		close(ns);
		return -e;
	}
	struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
					    MOUNT_ATTR_NODEV,
				.userns_fd = (uint64_t)ns };
	int rc = mount_setattr(t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0 ? -errno : 0;
	close(ns);
	if (rc) {
		close(t);
		return rc;
	}
	return t;
}

static int g_etc = -1; /* the idmapped /etc, made before unshare, attached in the view */

/* ---- the mount view (tier A, in the reaper) ---- */

static int openat2_path(int dirfd, const char *path, uint64_t resolve, int nofollow)
{
	struct open_how how = { .flags = O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0),
				.resolve = resolve };
	while (*path == '/')
		path++;
	return (int)syscall(SYS_openat2, dirfd, *path ? path : ".", &how, sizeof how);
}

/*
 * A fresh file system, detached, through the fd-based mount API; a tmpfs
 * with bytes > 0 holds at most that many bytes and inodes files (writes
 * past them fail with ENOSPC).
 */
static int new_fs(const char *type, const char *mode, uint64_t bytes, uint64_t inodes,
		  unsigned attrs)
{
	int fs = fsopen(type, FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	char size[24], nr[24];
	snprintf(size, sizeof size, "%llu", (unsigned long long)bytes);
	snprintf(nr, sizeof nr, "%llu", (unsigned long long)inodes);
	if ((mode && fsconfig(fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0) ||
	    (bytes && fsconfig(fs, FSCONFIG_SET_STRING, "size", size, 0) < 0) ||
	    (inodes && fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", nr, 0) < 0) ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		int e = errno;
		close(fs);
		return -e;
	}
	int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	int e = errno;
	close(fs);
	return m < 0 ? -e : m;
}

static void attach(int mfd, int target_fd, const char *what)
{
	if (move_mount(mfd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		die(errno, "mounting %s", what);
	close(mfd);
}

static void mount_fs(const char *type, const char *mode, unsigned attrs, int target_fd,
		     const char *what)
{
	int m = new_fs(type, mode, 0, 0, attrs);
	if (m < 0)
		die(-m, "creating the %s for %s", type, what);
	attach(m, target_fd, what);
}

/* A tmpfs the target may write: never without a size and a file count. */
static void mount_sized(const char *mode, uint64_t bytes, uint64_t inodes, unsigned attrs,
			int target_fd, const char *what)
{
	int m = new_fs("tmpfs", mode, bytes, inodes, attrs);
	if (m < 0)
		die(-m, "creating the tmpfs for %s", what);
	attach(m, target_fd, what);
}

/*
 * Walks path below root_fd without following any symlink, creating missing
 * directories (and, when file is set, the last component as an empty file),
 * and returns an O_PATH fd of the result.
 */
static int make_point(int root_fd, const char *path, int file)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	int dir = dup(root_fd);
	char *save = NULL;
	for (char *c = strtok_r(buf, "/", &save); c && dir >= 0; c = strtok_r(NULL, "/", &save)) {
		int last = save == NULL || *save == '\0';
		if (last && file) {
			int f = openat(dir, c, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
			if (f >= 0)
				close(f);
		} else if (mkdirat(dir, c, 0755) < 0 && errno != EEXIST) {
			close(dir);
			return -1;
		}
		int next = openat(dir, c, O_PATH | O_NOFOLLOW | O_CLOEXEC | (last && file ? 0 : O_DIRECTORY));
		close(dir);
		dir = next;
	}
	return dir;
}

/* A bind of src_fd (recursive) onto dst_fd with attributes set on the copy. */
static void bind_fd(int src_fd, int dst_fd, unsigned attrs, const char *what)
{
	int t = open_tree(src_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
	if (t < 0)
		die(errno, "open_tree of %s", what);
	struct mount_attr a = { .attr_set = attrs };
	if (mount_setattr(t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
		die(errno, "mount_setattr on %s", what);
	attach(t, dst_fd, what);
}

static size_t depth(const char *p)
{
	size_t d = 0;
	for (; *p; p++)
		d += *p == '/';
	return d;
}

/* Over pointers into one array: shallower first, ties in the spec's order. */
static int by_depth(const void *a, const void *b)
{
	const struct lr_sbx_mount *ma = *(const struct lr_sbx_mount *const *)a;
	const struct lr_sbx_mount *mb = *(const struct lr_sbx_mount *const *)b;
	size_t da = depth(ma->dst), db = depth(mb->dst);
	if (da != db)
		return da < db ? -1 : 1;
	return ma < mb ? -1 : ma > mb;
}

/*
 * A prepared copy's (lr__sbx_standby_main): per mount, in the spec's order,
 * the identity its source had when the zygote made the copy; a source that
 * is another file by the time it is bound fails the copy, so the view it
 * holds is the one the zygote checks again when it hands the copy a run.
 * NULL in every other helper.
 */
static const struct lr__sbx_ident *g_want;

static void check_ident(const struct lr__sbx_ident *want, const struct stat *st, const char *src)
{
	if (want && (want->dev != (uint64_t)st->st_dev || want->ino != (uint64_t)st->st_ino))
		die(0, "mount source '%s' changed while the sandbox was prepared", src);
}

static void spec_mount(int old_fd, int new_fd, const struct lr_sbx_mount *m,
		       const struct lr__sbx_ident *want)
{
	if (g_etc >= 0 && !m->writable && strcmp(m->dst, "/etc") == 0 &&
	    strcmp(m->src, "/etc") == 0) {
		struct stat et;
		if (want && fstat(g_etc, &et) < 0)
			die(errno, "the idmapped /etc");
		if (want)
			check_ident(want, &et, m->src);
		int dst = make_point(new_fd, "etc", 0);
		if (dst < 0)
			die(errno, "mount point '/etc'");
		attach(g_etc, dst, "the idmapped /etc");
		g_etc = -1;
		close(dst);
		return;
	}
	int src = openat2_path(old_fd, m->src, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS, 1);
	if (src < 0)
		die(errno, "mount source '%s'", m->src);
	struct stat st;
	if (fstat(src, &st) < 0)
		die(errno, "mount source '%s'", m->src);
	check_ident(want, &st, m->src);
	if (S_ISLNK(st.st_mode)) {
		/* /bin -> usr/bin on a merged-/usr host: the same link in the view. */
		char target[PATH_MAX];
		ssize_t n = readlinkat(src, "", target, sizeof target - 1);
		if (n < 0)
			die(errno, "reading the link '%s'", m->src);
		target[n] = '\0';
		char parent[PATH_MAX];
		snprintf(parent, sizeof parent, "%s", m->dst);
		*strrchr(parent, '/') = '\0';
		int pfd = make_point(new_fd, parent, 0);
		if (pfd < 0 || symlinkat(target, pfd, strrchr(m->dst, '/') + 1) < 0)
			die(errno, "link '%s' in the view", m->dst);
		close(pfd);
		close(src);
		return;
	}
	if (S_ISCHR(st.st_mode)) {
		/* A mask (src /dev/null): over a directory of the view, an empty
		   read-only tmpfs nobody may enter; over a file, the device. */
		int at = openat2_path(new_fd, m->dst, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS, 1);
		struct stat dst_st;
		if (want && want->dino &&
		    (at < 0 || fstat(at, &dst_st) < 0 || want->ddev != (uint64_t)dst_st.st_dev ||
		     want->dino != (uint64_t)dst_st.st_ino))
			die(0, "masked path '%s' changed while the sandbox was prepared", m->dst);
		if (at >= 0 && fstat(at, &dst_st) == 0 && S_ISDIR(dst_st.st_mode)) {
			char what[PATH_MAX + 16];
			snprintf(what, sizeof what, "mask of '%s'", m->dst);
			mount_fs("tmpfs", "0000", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
				 MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, at, what);
			close(at);
			close(src);
			return;
		}
		if (at >= 0)
			close(at);
	}
	int dst = make_point(new_fd, m->dst, !S_ISDIR(st.st_mode));
	if (dst < 0)
		die(errno, "mount point '%s'", m->dst);
	unsigned attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (m->writable ? 0 : MOUNT_ATTR_RDONLY);
	char what[PATH_MAX + 8];
	snprintf(what, sizeof what, "'%s'", m->src);
	bind_fd(src, dst, attrs, what);
	close(src);
	close(dst);
}

/*
 * A protected path inside a writable root, re-bound read-only. The host
 * found it (or made its placeholder) just before: one that is gone or has
 * become a symbolic link fails the run rather than leave it writable.
 */
static void readonly_mount(int new_fd, const char *path)
{
	int fd = openat2_path(new_fd, path, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS, 0);
	if (fd < 0)
		die(errno, "protected path '%s'", path);
	char what[PATH_MAX + 8];
	snprintf(what, sizeof what, "'%s'", path);
	bind_fd(fd, fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, what);
	close(fd);
}

/* The spec's protected paths, in a view already pivoted into (a prepared copy's). */
static void readonly_binds(const struct lr_sbx_spec *s)
{
	int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		die(errno, "the view's root");
	for (size_t i = 0; i < s->nreadonly; i++)
		readonly_mount(root, s->readonly[i]);
	close(root);
}

static void build_dev(int old_fd, int new_fd, uint64_t shm_bytes, uint64_t shm_inodes)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty", NULL };
	int dev = make_point(new_fd, "dev", 0);
	if (dev < 0)
		die(errno, "mount point '/dev'");
	/* only the helper's nodes and links: Landlock lets the target create nothing here */
	mount_sized("0755", 1u << 20, 64, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, dev, "/dev");
	close(dev);
	dev = openat2_path(new_fd, "dev", RESOLVE_NO_SYMLINKS, 0);
	if (dev < 0)
		die(errno, "the view's /dev");
	char host[32];
	for (size_t i = 0; nodes[i]; i++) {
		snprintf(host, sizeof host, "dev/%s", nodes[i]);
		int src = openat2_path(old_fd, host, RESOLVE_IN_ROOT, 0);
		if (src < 0)
			die(errno, "host '/%s'", host);
		int dst = make_point(dev, nodes[i], 1);
		if (dst < 0)
			die(errno, "mount point '/%s'", host);
		bind_fd(src, dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, host);
		close(src);
		close(dst);
	}
	int pts = make_point(dev, "pts", 0), shm = make_point(dev, "shm", 0);
	if (pts < 0 || shm < 0)
		die(errno, "mount points in '/dev'");
	/* A private devpts instance; when the kernel refuses it, pts stays empty. */
	int fs = fsopen("devpts", FSOPEN_CLOEXEC);
	if (fs >= 0) {
		if (fsconfig(fs, FSCONFIG_SET_FLAG, "newinstance", NULL, 0) == 0 &&
		    fsconfig(fs, FSCONFIG_SET_STRING, "ptmxmode", "0666", 0) == 0 &&
		    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0620", 0) == 0 &&
		    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0) {
			int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
			if (m >= 0)
				attach(m, pts, "/dev/pts");
		}
		close(fs);
	}
	mount_sized("1777", shm_bytes, shm_inodes, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, shm,
		    "/dev/shm");
	close(pts);
	close(shm);
	static const char *const links[][2] = { { "/proc/self/fd", "fd" },
						{ "/proc/self/fd/0", "stdin" },
						{ "/proc/self/fd/1", "stdout" },
						{ "/proc/self/fd/2", "stderr" },
						{ "pts/ptmx", "ptmx" } };
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlinkat(links[i][0], dev, links[i][1]) < 0)
			die(errno, "link '/dev/%s'", links[i][1]);
	close(dev);
}

/*
 * The view: a tmpfs root holding read-only binds of the spec's host roots,
 * the writable binds, the protected paths re-bound read-only, a fresh /proc
 * of the new pid namespace, a minimal /dev and empty /tmp and /run. Built
 * from a scratch root (a tmpfs pivoted onto, with the host's root under
 * /oldroot) so that every source resolves inside the host's tree, then
 * pivoted into, and the host's tree detached.
 */
/*
 * The view, pivoted into. readonly: bind the protected paths too (a
 * prepared copy binds its run's, from that run's spec, once it has it).
 */
static void build_view(const struct lr_sbx_spec *s, int readonly)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die(errno, "making the mounts private");
	int base = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (base < 0)
		die(errno, "opening /tmp");
	mount_fs("tmpfs", "0700", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, base, "the scratch root");
	close(base);
	if (chdir("/tmp") < 0 || mkdir("newroot", 0755) < 0 || mkdir("oldroot", 0755) < 0)
		die(errno, "the scratch root");
	if (syscall(SYS_pivot_root, ".", "oldroot") < 0)
		die(errno, "pivot_root to the scratch root");
	if (chdir("/") < 0)
		die(errno, "chdir /");
	int nr = open("/newroot", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (nr < 0)
		die(errno, "/newroot");
	mount_fs("tmpfs", "0755", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, nr, "the new root");
	close(nr);
	int old_fd = open("/oldroot", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int new_fd = open("/newroot", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (old_fd < 0 || new_fd < 0)
		die(errno, "the scratch root");

	/* /tmp and /dev/shm sized from the limits, /run an eighth of that */
	uint64_t bytes, inodes;
	lr_sbx_tmpfs_limits(&s->limits, &bytes, &inodes);
	static const char *const tmps[][2] = { { "tmp", "1777" }, { "run", "0755" } };
	for (size_t i = 0; i < 2; i++) {
		int p = make_point(new_fd, tmps[i][0], 0);
		if (p < 0)
			die(errno, "mount point '/%s'", tmps[i][0]);
		mount_sized(tmps[i][1], i ? bytes / 8 : bytes, i ? inodes / 8 : inodes,
			    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, p, tmps[i][0]);
		close(p);
	}
	const struct lr_sbx_mount **order = malloc((s->nmounts ? s->nmounts : 1) * sizeof *order);
	if (!order)
		die(ENOMEM, "the mounts");
	for (size_t i = 0; i < s->nmounts; i++)
		order[i] = &s->mounts[i];
	qsort(order, s->nmounts, sizeof *order, by_depth);
	for (size_t i = 0; i < s->nmounts; i++)
		spec_mount(old_fd, new_fd, order[i], g_want ? &g_want[order[i] - s->mounts] : NULL);
	free(order);
	if (g_etc >= 0) { /* no read-only /etc in this view */
		close(g_etc);
		g_etc = -1;
	}
	for (size_t i = 0; readonly && i < s->nreadonly; i++)
		readonly_mount(new_fd, s->readonly[i]);
	build_dev(old_fd, new_fd, bytes, inodes);
	/* /proc of the new pid namespace; the kernel wants the host's /proc still visible. */
	int proc = make_point(new_fd, "proc", 0);
	if (proc < 0)
		die(errno, "mount point '/proc'");
	mount_fs("proc", NULL, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, proc, "/proc");
	close(proc);
	close(old_fd);
	/* The root directory itself is read-only: nothing lands beside the binds. */
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	if (mount_setattr(new_fd, "", AT_EMPTY_PATH, &ro, sizeof ro) < 0)
		die(errno, "making the new root read-only");
	if (fchdir(new_fd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		die(errno, "pivot_root into the view");
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		die(errno, "detaching the host's tree");
	close(new_fd);
}

static void loopback_up(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
	if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		die(errno, "loopback");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		die(errno, "bringing loopback up");
	close(fd);
}

/* ---- the target's own confinement ---- */

static void set_limit(int res, uint64_t v, const char *name)
{
	struct rlimit r;
	if (!v)
		return;
	if (getrlimit(res, &r) < 0)
		die(errno, "getrlimit %s", name);
	rlim_t want = (rlim_t)v;
	if (r.rlim_max != RLIM_INFINITY && want > r.rlim_max)
		want = r.rlim_max; /* never above what the host itself may use */
	r.rlim_cur = r.rlim_max = want;
	if (setrlimit(res, &r) < 0)
		die(errno, "setrlimit %s", name);
}

static void set_limits(const struct lr_sbx_limits *l)
{
	set_limit(RLIMIT_AS, l->as_bytes, "RLIMIT_AS");
	set_limit(RLIMIT_FSIZE, l->fsize_bytes, "RLIMIT_FSIZE");
	set_limit(RLIMIT_NPROC, l->nproc, "RLIMIT_NPROC");
	set_limit(RLIMIT_NOFILE, l->nofile, "RLIMIT_NOFILE");
	set_limit(RLIMIT_CPU, l->cpu_seconds, "RLIMIT_CPU");
}

static int has_cap(int cap)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

/*
 * Every capability gone from every set, and locked so that exec of a
 * setuid-root binary or uid 0 gives none back. Without CAP_SETPCAP (tier B
 * as an ordinary user) the bounding set and securebits cannot be changed;
 * the process holds no capability then, and no_new_privs keeps it so.
 */
static void drop_caps(void)
{
	if (has_cap(CAP_SETPCAP)) {
		if (prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP |
						     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT |
						     SECBIT_NOROOT_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
						     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
			die(errno, "securebits");
		for (int cap = 0;; cap++) {
			if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
				continue;
			if (errno == EINVAL)
				break;
			die(errno, "dropping capability %d from the bounding set", cap);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		die(errno, "clearing the ambient capabilities");
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) < 0)
		die(errno, "capset");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die(errno, "no_new_privs");
}

static void add_rule(int rfd, const char *path, uint64_t access, uint64_t handled, int abi,
		     int optional)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (optional && errno == ENOENT)
			return;
		die(errno, "landlock rule for '%s'", path);
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		die(errno, "landlock rule for '%s'", path);
	if (!S_ISDIR(st.st_mode))
		access &= LL_FILE_RIGHTS;
	else if (abi >= 2 && (access & LANDLOCK_ACCESS_FS_MAKE_REG))
		access |= LL_FS_REFER; /* a writable root: renames and links inside it (git mv) */
	struct landlock_path_beneath_attr pb = { .allowed_access = access & handled,
						 .parent_fd = fd };
	if (pb.allowed_access &&
	    syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
		die(errno, "landlock rule for '%s'", path);
	close(fd);
}

static int mount_below(const struct lr_sbx_spec *s, const char *dir)
{
	size_t n = strlen(dir);
	for (size_t i = 0; i < s->nmounts; i++)
		if (strncmp(s->mounts[i].dst, dir, n) == 0 &&
		    (s->mounts[i].dst[n] == '/' || s->mounts[i].dst[n] == '\0'))
			return 1;
	return 0;
}

/*
 * Every filesystem right the kernel's ABI knows is handled, so whatever no
 * rule grants is denied. Besides the spec's rules, the helper grants what it
 * built itself: /proc read-only, the device nodes read-write and, in tier A,
 * the private tmpfs on /tmp, /run and /dev/shm.
 */
static void apply_landlock(const struct lr_sbx_spec *s)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi < 1)
		die(abi < 0 ? errno : 0, "landlock is not available");
	struct ll_ruleset_attr attr = { .handled_access_fs = (UINT64_C(1) << 13) - 1 };
	if (abi >= 2)
		attr.handled_access_fs |= LL_FS_REFER;
	if (abi >= 3)
		attr.handled_access_fs |= LL_FS_TRUNCATE;
	if (abi >= 5)
		attr.handled_access_fs |= LL_FS_IOCTL_DEV;
	if (abi >= 4 && s->tier == LR_TIER_B && s->net != LR_SBX_NET_HOST)
		attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
	if (abi >= 6)
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
	size_t size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (rfd < 0)
		die(errno, "landlock_create_ruleset");
	uint64_t all = attr.handled_access_fs;
	for (size_t i = 0; i < s->nrules; i++)
		add_rule(rfd, s->rules[i].path, s->rules[i].access, all, (int)abi, 0);
	add_rule(rfd, "/proc", LL_READ, all, (int)abi, 1);
	static const char *const nodes[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
					     "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/ptmx",
					     NULL };
	for (size_t i = 0; nodes[i]; i++)
		add_rule(rfd, nodes[i], LL_DEV_RW, all, (int)abi, 1);
	if (s->tier == LR_TIER_A) {
		/*
		 * Landlock rights are inherited down the tree: a rule on /tmp would
		 * open every bind placed below it (a workspace under /tmp), so the
		 * private /tmp and /run are granted only when no bind lies inside.
		 */
		if (!mount_below(s, "/tmp"))
			add_rule(rfd, "/tmp", all, all, (int)abi, 0);
		if (!mount_below(s, "/run"))
			add_rule(rfd, "/run", all, all, (int)abi, 0);
		add_rule(rfd, "/dev/shm", all, all, (int)abi, 0);
		add_rule(rfd, "/dev", LANDLOCK_ACCESS_FS_READ_DIR, all, (int)abi, 0);
	}
	if (syscall(SYS_landlock_restrict_self, rfd, 0) < 0)
		die(errno, "landlock_restrict_self");
	close(rfd);
}

/* In the target, after fork: the per-process layers, the filter last, exec. */
__attribute__((noreturn))
static void exec_target(struct lr_sbx_spec *s, scmp_filter_ctx filter, pid_t parent)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	if (setsid() < 0)
		die(errno, "setsid");
	/*
	 * The helper (or reaper) gone means the run is over; the signal survives
	 * exec. A parent that died before the prctl sent none: then the parent
	 * is another process already, and the target never runs.
	 */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		die(errno, "parent death signal");
	if (getppid() != parent)
		die(0, "the helper died before the command started");
	set_limits(&s->limits);
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		die(errno, "close_range");
	if (!s->unconfined) {
		drop_caps();
		apply_landlock(s);
		int rc = s->seccomp_len ? load_bpf(s) : lr__scmp.load(filter);
		if (rc)
			die(-rc, "loading the seccomp filter");
	}
	execve(s->argv[0], s->argv, s->envp);
	dprintf(2, "luarig sandbox: exec '%s': %s\n", s->argv[0], strerror(errno));
	_exit(127);
}

/* ---- the reaper ---- */

static volatile pid_t g_target;

static void forward(int sig)
{
	if (g_target > 0)
		kill(g_target, sig);
}

static void on_forwarded_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = forward;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
}

static int status_code(int st)
{
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* Tier B: no pid namespace; kill each child we inherited as subreaper. */
static void kill_children(void)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	long pid;
	while (fscanf(f, "%ld", &pid) == 1)
		kill((pid_t)pid, SIGKILL);
	fclose(f);
}

/*
 * The process cap. RLIMIT_NPROC does not bind uid 0 (the kernel exempts
 * the initial user's root), so when luarig runs as root a fork bomb inside
 * would only meet the machine's own limits; and this machine has no pids
 * cgroup. So the reaper, pid 1 of the sandbox's pid namespace, counts the
 * namespace's processes every 10 ms and kills them all past the cap.
 */
static volatile sig_atomic_t g_tick;

static void on_tick(int sig)
{
	(void)sig;
	g_tick = 1;
}

static void start_ticks(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_tick; /* no SA_RESTART: waitpid returns EINTR */
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 10000 }, { 0, 10000 } };
	setitimer(ITIMER_REAL, &it, NULL);
}

static long count_procs(void)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	long n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
			n++;
	closedir(d);
	return n;
}

/*
 * The reaper's wait (pid 1 of the sandbox's pid namespace): waits for the
 * target, then kills whatever is left (kill(-1) from the namespace's init
 * reaches every process in it) and reaps them all. cap: the most processes
 * the namespace may hold (0: no cap).
 */
static int reap(pid_t target, uint64_t cap)
{
	int code = -1, st, over = 0;
	if (cap)
		start_ticks();
	for (;;) {
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR) {
			if (g_tick) {
				g_tick = 0;
				long n = count_procs();
				if (n > 0 && (uint64_t)n > cap + 1) { /* +1: the reaper itself */
					if (!over)
						fprintf(stderr, "luarig sandbox: the command exceeded its "
							"limit of %llu processes and was killed\n",
							(unsigned long long)cap);
					over = 1;
					kill(-1, SIGKILL);
				}
			}
			continue;
		}
		if (p < 0)
			break;
		if (p == target) {
			code = status_code(st);
			g_target = 0;
		}
		if (code >= 0)
			kill(-1, SIGKILL);
	}
	return code < 0 ? LR_SBX_EXIT_SETUP : code;
}

/*
 * The reaper's first part: die with the helper, then the view (readonly:
 * with the spec's protected paths), loopback and the hostname.
 */
static void reaper_setup(const struct lr_sbx_spec *s, int alive_fd, const sigset_t *mask,
			 int readonly)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		die(errno, "parent death signal");
	struct pollfd pf = { .fd = alive_fd, .events = POLLIN };
	if (poll(&pf, 1, 0) != 0)
		die(0, "the helper died while the sandbox was being set up");
	close(alive_fd);
	signal(SIGCHLD, SIG_DFL);
	sigprocmask(SIG_SETMASK, mask, NULL);
	build_view(s, readonly);
	loopback_up();
	if (sethostname("sandbox", 7) < 0)
		die(errno, "sethostname");
}

/* The reaper's last part: the target, started in the view, and its reaping; the exit status. */
static int start_target(struct lr_sbx_spec *s, scmp_filter_ctx filter)
{
	if (chdir(s->cwd) < 0)
		die(errno, "chdir '%s'", s->cwd);
	if (setsid() < 0)
		die(errno, "setsid");
	on_forwarded_signals();
	pid_t t = fork();
	if (t < 0)
		die(errno, "fork");
	if (t == 0)
		exec_target(s, filter, 1);
	g_target = t;
	return reap(t, s->limits.nproc);
}

/*
 * The reaper dies with the helper (the parent death signal; the helper is
 * single-threaded, so its one thread is the parent the signal watches), and
 * the pid namespace dies with its pid 1. getppid() says nothing across the
 * namespace (it is 0 for pid 1), so a helper that died before the prctl is
 * seen on alive_fd instead: the read end of a pipe only the helper writes.
 */
__attribute__((noreturn))
static void run_reaper(struct lr_sbx_spec *s, scmp_filter_ctx filter, int alive_fd,
		       const sigset_t *mask, int end_fd)
{
	close(LR_SBX_FD_LIFELINE); /* the helper watches it */
	reaper_setup(s, alive_fd, mask, 1);
	if (s->net == LR_SBX_NET_PROXY) {
		/* the proxy's listeners, made here inside the new network namespace and
		   handed to the host, which serves them on its loop (docs/sandbox.md) */
		int rc = lr_sbx_make_listeners(s->proxy_port, s->dns_port, LR_SBX_FD_CONTROL);
		if (rc)
			die(-rc, "cannot make the proxy listeners on fd %d", LR_SBX_FD_CONTROL);
		close(LR_SBX_FD_CONTROL);
	}
	int code = start_target(s, filter);
	/* nothing of the run is left: its end is told before the exits tear the namespaces down */
	if (end_fd >= 0) {
		struct lr_sbx_end e = { LR_SBX_END_MAGIC, code };
		if (write(end_fd, &e, sizeof e) != (ssize_t)sizeof e) {
			/* the host learns it from the helper's exit */
		}
	}
	_exit(code);
}

/* ---- the helper's wait and the lifeline ---- */

/* Anything on the lifeline (EOF: its write end closed) ends the run. */
static int lifeline_ended(int timeout_ms)
{
	struct pollfd pf = { .fd = LR_SBX_FD_LIFELINE, .events = POLLIN };
	return poll(&pf, 1, timeout_ms) > 0;
}

static void check_lifeline(void)
{
	struct stat st;
	if (fstat(LR_SBX_FD_LIFELINE, &st) < 0)
		die(errno, "the lifeline on fd %d", LR_SBX_FD_LIFELINE);
	int fl = fcntl(LR_SBX_FD_LIFELINE, F_GETFL);
	if (!S_ISFIFO(st.st_mode) || fl < 0 || (fl & O_ACCMODE) != O_RDONLY)
		die(0, "the lifeline on fd %d is not the read end of a pipe", LR_SBX_FD_LIFELINE);
	if (fcntl(LR_SBX_FD_LIFELINE, F_SETFD, FD_CLOEXEC) < 0)
		die(errno, "the lifeline on fd %d", LR_SBX_FD_LIFELINE);
	if (lifeline_ended(0))
		die(0, "the host is gone (its lifeline on fd %d is closed)", LR_SBX_FD_LIFELINE);
}

static void on_chld(int sig)
{
	(void)sig; /* only to interrupt ppoll */
}

/*
 * The helper's signals before it forks: the forwarded ones, and SIGCHLD
 * blocked (*old: the mask before) except inside helper_wait's ppoll
 * (*waitmask), where it interrupts the wait.
 */
static void helper_signals(sigset_t *old, sigset_t *waitmask)
{
	on_forwarded_signals();
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP; /* no SA_RESTART: ppoll returns EINTR */
	sigaction(SIGCHLD, &sa, NULL);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, old);
	*waitmask = *old;
	sigdelset(waitmask, SIGCHLD);
}

/*
 * The helper's wait: reaps its children (tier A: the reaper; otherwise the
 * target and, as child subreaper, every orphan of the run), forwards the
 * signals (their handlers), and watches the lifeline. SIGCHLD is blocked
 * except inside ppoll, so no exit is missed between a reap and the wait.
 * When the lifeline ends, or the target exited (not tier A), what is left
 * is killed: tier A the reaper, and with it its pid namespace; otherwise
 * the target's group and every child, again after each reap, since the
 * orphans of a dying process are reparented here.
 */
static int helper_wait(pid_t child, int tier_a, const sigset_t *waitmask)
{
	int code = -1, st, ending = 0, life = 1;
	for (;;) {
		pid_t p;
		while ((p = waitpid(-1, &st, WNOHANG)) > 0)
			if (p == child) {
				code = status_code(st);
				g_target = 0;
				ending = 1;
			}
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			break; /* ECHILD: nothing is left */
		if (ending && !tier_a)
			kill_children();
		struct pollfd pf = { .fd = LR_SBX_FD_LIFELINE, .events = POLLIN };
		if (ppoll(&pf, life ? 1 : 0, NULL, waitmask) > 0 && pf.revents) {
			life = 0;
			ending = 1;
			kill(tier_a ? child : -child, SIGKILL);
			if (!tier_a)
				kill_children();
		}
	}
	return code < 0 ? LR_SBX_EXIT_SETUP : code;
}

/* --end-fd=N: the next fd after the others, the write end of a pipe; close-on-exec from here. */
static int end_fd_check(const char *v)
{
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || end == v || n <= LR_SBX_FD_LIFELINE || n > LR_SBX_FD_CONTROL + 1)
		die(0, "--end-fd wants %d or %d, not '%s'", LR_SBX_FD_CONTROL, LR_SBX_FD_CONTROL + 1, v);
	struct stat st;
	int fl = fcntl((int)n, F_GETFL);
	if (fstat((int)n, &st) < 0 || fl < 0 || !S_ISFIFO(st.st_mode) || (fl & O_ACCMODE) != O_WRONLY)
		die(0, "the end on fd %ld is not the write end of a pipe", n);
	if (fcntl((int)n, F_SETFD, FD_CLOEXEC) < 0)
		die(errno, "the end on fd %ld", n);
	return (int)n;
}

int lr_sbx_helper_main(int argc, char **argv)
{
	/* a host that closed the run also closed our stderr: a message must not kill us
	   before we end the tree (the target gets every disposition back by default) */
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && strcmp(argv[2], "--zygote") == 0)
		lr_sbx_zygote_main();
	int end_fd = -1;
	if (argc == 3 && strncmp(argv[2], "--end-fd=", 9) == 0) {
		end_fd = end_fd_check(argv[2] + 9);
		argc = 2;
	}
	if (argc != 2)
		die(0, "usage: luarig __sandbox-helper [--end-fd=N] (with the spec on fd 3)");
	size_t len;
	char *buf = read_spec(&len);
	check_lifeline();
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	if (lr_sbx_spec_decode(buf, len, &s, &err))
		die(0, "%s", err.msg);
	free(buf);
	if (!s.unconfined && s.net == LR_SBX_NET_HOST)
		die(0, "host networking needs an unconfined spec");
	scmp_filter_ctx filter = NULL;
	if (!s.unconfined && !s.seccomp_len)
		filter = seccomp_build(s.tier == LR_TIER_A || s.net == LR_SBX_NET_HOST);
	if (s.cgroup)
		enter_cgroup(&s);
	int tier_a = s.tier == LR_TIER_A && !s.unconfined;
	if (!tier_a && s.net == LR_SBX_NET_PROXY)
		die(0, "proxy networking needs tier A");
	if (s.etc_idmap) {
		if (!tier_a || getuid() != 0)
			die(0, "an idmapped /etc is for a tier A helper running as root");
		g_etc = lr__sbx_etc_idmapped();
		if (g_etc < 0)
			die(-g_etc, "making the idmapped /etc");
	}
	if (lr__sbx_idmap_ns >= 0) { /* a zygote copy's, unused: nothing after this holds it */
		close(lr__sbx_idmap_ns);
		lr__sbx_idmap_ns = -1;
	}
	if (tier_a)
		enter_namespaces(&s);
	else if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		die(errno, "child subreaper");
	if (!tier_a && chdir(s.cwd) < 0)
		die(errno, "chdir '%s'", s.cwd);
	sigset_t old, waitmask;
	helper_signals(&old, &waitmask);
	int alive[2] = { -1, -1 };
	if (tier_a && pipe2(alive, O_CLOEXEC) < 0)
		die(errno, "pipe");
	if (!tier_a && end_fd >= 0) { /* told by this process's exit, nothing earlier */
		close(end_fd);
		end_fd = -1;
	}
	pid_t self = getpid();
	pid_t child = fork();
	if (child < 0)
		die(errno, "fork");
	if (child == 0) {
		if (tier_a) {
			close(alive[1]);
			run_reaper(&s, filter, alive[0], &old, end_fd);
		}
		exec_target(&s, filter, self);
	}
	if (tier_a) {
		close(alive[0]); /* alive[1] stays open as long as this process lives */
		/*
		 * The reaper holds the run's end and its stdio; this process only
		 * waits from here on and says nothing more, so its copies go: a
		 * captured output ends (EOF) with the reaper, not with this exit.
		 */
		if (end_fd >= 0)
			close(end_fd);
		for (int fd = 0; fd <= 2; fd++)
			close(fd);
	}
	g_target = child;
	/*
	 * _exit, not return: in tier A this process shares the view's mount
	 * namespace but not its pid namespace, and nothing at exit may run here.
	 */
	_exit(helper_wait(child, tier_a, &waitmask));
}

/* ---- a prepared copy (internal.h, sandbox/zygote.c) ---- */

int lr__sbx_take_fds(struct msghdr *mh, int *fds, int max)
{
	int n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (n < max)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	return n;
}

void lr__sbx_as_spawned(void)
{
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int lr__sbx_standby_ok(const struct lr_sbx_spec *s)
{
	return s->tier == LR_TIER_A && !s->unconfined && s->net == LR_SBX_NET_NONE && !s->cgroup &&
	       s->seccomp_len > 0;
}

int lr__sbx_same_view(const struct lr_sbx_spec *a, const struct lr_sbx_spec *b)
{
	if (a->tier != b->tier || a->unconfined != b->unconfined || a->net != b->net ||
	    !same_str(a->cgroup, b->cgroup) || a->etc_idmap != b->etc_idmap || a->uid != b->uid ||
	    a->gid != b->gid || a->nmounts != b->nmounts)
		return 0;
	uint64_t ab, ai, bb, bi;
	lr_sbx_tmpfs_limits(&a->limits, &ab, &ai);
	lr_sbx_tmpfs_limits(&b->limits, &bb, &bi);
	if (ab != bb || ai != bi)
		return 0;
	for (size_t i = 0; i < a->nmounts; i++)
		if (strcmp(a->mounts[i].src, b->mounts[i].src) != 0 ||
		    strcmp(a->mounts[i].dst, b->mounts[i].dst) != 0 ||
		    !a->mounts[i].writable != !b->mounts[i].writable)
			return 0;
	return 1;
}

/* want fds (close-on-exec) from one message on sock: 0, or -1 (none kept). */
static int recv_fds(int sock, int *fds, int want)
{
	struct lr__sbx_standby_msg m;
	struct iovec iov = { &m, sizeof m };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof u.buf };
	ssize_t r;
	do
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	int n = r > 0 ? lr__sbx_take_fds(&mh, fds, want) : 0;
	if (r == (ssize_t)sizeof m && m.magic == LR__SBX_STANDBY_MAGIC && m.nfds == (uint32_t)want &&
	    n == want && !(mh.msg_flags & MSG_CTRUNC))
		return 0;
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return -1;
}

/* fds placed as 0..n-1 through numbers above all of them (none overwrites a source to come). */
static void place_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		int d = fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
		if (d < 0)
			die(errno, "the run's fds");
		close(fds[i]);
		fds[i] = d;
	}
	for (int i = 0; i < n; i++) {
		if (dup2(fds[i], i) < 0)
			die(errno, "the run's fds");
		close(fds[i]);
	}
}

/*
 * The prepared reaper: the view and the network of s, then its run (its
 * fds from rsock) as any reaper's, with the run's own spec.
 */
__attribute__((noreturn))
static void standby_reaper(struct lr_sbx_spec *s, int alive_fd, int rsock, const sigset_t *mask)
{
	reaper_setup(s, alive_fd, mask, 0);
	int fds[4];
	if (recv_fds(rsock, fds, 4) < 0)
		_exit(LR_SBX_EXIT_SETUP); /* dropped by the zygote, or gone */
	place_fds(fds, 4); /* from here on, messages reach the run's stderr */
	size_t len;
	char *buf = read_spec(&len);
	struct lr_sbx_spec run;
	struct lr_err err = { "" };
	if (lr_sbx_spec_decode(buf, len, &run, &err))
		die(0, "%s", err.msg);
	free(buf);
	if (!lr__sbx_standby_ok(&run) || !lr__sbx_same_view(s, &run))
		die(0, "the prepared sandbox is not the run's");
	readonly_binds(&run);
	int code = start_target(&run, NULL);
	/* nothing of the run is left: its end can be told before this exit tears the namespaces down */
	struct lr__sbx_standby_end e = { LR__SBX_STANDBY_MAGIC, code };
	if (send(rsock, &e, sizeof e, MSG_NOSIGNAL) < 0) {
		/* the zygote learns it from the copy's exit */
	}
	_exit(code);
}

void lr__sbx_standby_main(struct lr_sbx_spec *s, const struct lr__sbx_ident *want, int hsock,
			  int rsock, pid_t zygote)
{
	signal(SIGPIPE, SIG_IGN);
	g_want = want;
	if (s->etc_idmap) {
		g_etc = lr__sbx_etc_idmapped();
		if (g_etc < 0)
			die(-g_etc, "making the idmapped /etc");
	}
	if (lr__sbx_idmap_ns >= 0) {
		close(lr__sbx_idmap_ns);
		lr__sbx_idmap_ns = -1;
	}
	enter_namespaces(s);
	/* the zygote gone means the set is closed: nothing is to be prepared */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != zygote)
		_exit(LR_SBX_EXIT_SETUP);
	sigset_t old, waitmask;
	helper_signals(&old, &waitmask);
	int alive[2];
	if (pipe2(alive, O_CLOEXEC) < 0)
		die(errno, "pipe");
	pid_t child = fork();
	if (child < 0)
		die(errno, "fork");
	if (child == 0) {
		close(alive[1]);
		close(hsock);
		standby_reaper(s, alive[0], rsock, &old);
	}
	close(alive[0]);
	close(rsock);
	g_target = child;
	/* the run, or the reaper's end (its set-up failed): then this copy ends unused */
	for (;;) {
		struct pollfd pf = { .fd = hsock, .events = POLLIN };
		int r = ppoll(&pf, 1, NULL, &waitmask);
		if (r > 0)
			break;
		if (r < 0 && errno != EINTR)
			_exit(LR_SBX_EXIT_SETUP);
		int st;
		if (waitpid(child, &st, WNOHANG) == child)
			_exit(LR_SBX_EXIT_SETUP);
	}
	int fds[2];
	if (recv_fds(hsock, fds, 2) < 0) {
		kill(child, SIGKILL);
		_exit(LR_SBX_EXIT_SETUP);
	}
	close(hsock);
	for (int i = 0; i < 2; i++) { /* above every target number, so that no dup2 below closes one */
		int d = fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
		if (d < 0)
			die(errno, "the run's fds");
		close(fds[i]);
		fds[i] = d;
	}
	if (dup2(fds[0], 2) < 0 || dup2(fds[1], LR_SBX_FD_LIFELINE) < 0)
		die(errno, "the run's fds");
	close(fds[0]);
	close(fds[1]);
	/* the run's now: it ends with its lifeline, as a forked copy's does, not with the zygote */
	if (prctl(PR_SET_PDEATHSIG, 0) < 0)
		die(errno, "parent death signal");
	check_lifeline();
	_exit(helper_wait(child, 1, &waitmask));
}
