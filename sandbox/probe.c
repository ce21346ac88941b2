/*
 * probe.c — what this machine can enforce, found by trying it, and the
 * guarantee report for a profile on those capabilities.
 *
 * Namespaces, uid maps, the mount API and seccomp are tried in forked
 * children (nothing they change touches the host process); Landlock's ABI
 * is a query; the cgroup layout is read from /proc and statfs and a child
 * cgroup is created and removed. The children run only system calls (and
 * seccomp_load on a filter the parent built), so forking from a host with
 * threads is safe.
 *
 * Tier A: user, mount, pid, network, ipc and uts namespaces with a uid map,
 * the fd-based mount API, Landlock and seccomp. Tier B: Landlock and
 * seccomp without user namespaces. Otherwise none: sandboxed profiles are
 * refused. The report claims only what the helper enforces on that tier.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define ALL_NS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)

/* ------------------------------------------------------------------ */
/* namespaces, uid maps and the mount API, in a child                   */

struct ns_result {
	int all;        /* unshare of every namespace at once worked */
	int all_errno;
	int user, mnt, pid, net, ipc, uts;
	int pid1;       /* the first child in the pid namespace was pid 1 */
	int uidmap;
	int uidmap_errno;
	int mount_api;
	int mount_errno;
	int mount_step; /* which call failed: 1 fsopen ... 5 move_mount (tree) */
};

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, s, strlen(s));
	int rc = n == (ssize_t)strlen(s) ? 0 : (n < 0 ? -errno : -EIO);
	close(fd);
	return rc;
}

/* fsopen/fsmount a tmpfs onto /tmp, open_tree a clone of /usr, move_mount it under it. */
static int try_mount_api(int *step)
{
	*step = 0;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return -errno;
	*step = 1;
	int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	*step = 2;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0)
		return -errno;
	*step = 3;
	int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
	if (m < 0)
		return -errno;
	*step = 4;
	if (syscall(SYS_move_mount, m, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH) != 0)
		return -errno;
	*step = 5;
	int t = (int)syscall(SYS_open_tree, AT_FDCWD, "/usr",
			     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (t < 0)
		return -errno;
	*step = 6;
	if (mkdir("/tmp/usr", 0700) != 0)
		return -errno;
	*step = 7;
	if (syscall(SYS_move_mount, t, "", AT_FDCWD, "/tmp/usr", MOVE_MOUNT_F_EMPTY_PATH) != 0)
		return -errno;
	*step = 8;
	struct stat a, b;
	if (stat("/usr", &a) != 0 || stat("/tmp/usr", &b) != 0 || a.st_ino != b.st_ino)
		return -EIO;
	return 0;
}

static void ns_child(int fd, uid_t uid, gid_t gid)
{
	struct ns_result r;
	memset(&r, 0, sizeof r);
	if (unshare(ALL_NS) == 0) {
		r.all = r.user = r.mnt = r.pid = r.net = r.ipc = r.uts = 1;
	} else {
		r.all_errno = errno;
		/* Which ones fail: the user namespace first, then each other alone. */
		if (unshare(CLONE_NEWUSER) == 0) {
			r.user = 1;
			r.mnt = unshare(CLONE_NEWNS) == 0;
			r.pid = unshare(CLONE_NEWPID) == 0;
			r.net = unshare(CLONE_NEWNET) == 0;
			r.ipc = unshare(CLONE_NEWIPC) == 0;
			r.uts = unshare(CLONE_NEWUTS) == 0;
		}
	}
	if (r.user) {
		/* The real uid and gid mapped to themselves, as the helper does. */
		char map[64];
		int rc = write_file("/proc/self/setgroups", "deny");
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
		if (!rc)
			rc = write_file("/proc/self/uid_map", map);
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
		if (!rc)
			rc = write_file("/proc/self/gid_map", map);
		r.uidmap = rc == 0 && getuid() == uid;
		r.uidmap_errno = rc ? -rc : 0;
	}
	if (r.pid) {
		pid_t c = fork();
		if (c == 0)
			_exit(getpid() == 1 ? 0 : 1);
		int st = 0;
		r.pid1 = c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	if (r.user && r.uidmap && r.mnt) {
		int rc = try_mount_api(&r.mount_step);
		r.mount_api = rc == 0;
		r.mount_errno = rc ? -rc : 0;
	}
	ssize_t n = write(fd, &r, sizeof r);
	_exit(n == (ssize_t)sizeof r ? 0 : 1);
}

/* Runs fn in a forked child that writes len bytes of result to a pipe. */
static int in_child(void (*fn)(int fd, void *arg), void *arg, void *out, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		close(p[0]);
		fn(p[1], arg);
		_exit(1);
	}
	close(p[1]);
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(p[0], (char *)out + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return got == len ? 0 : -EIO;
}

struct ids {
	uid_t uid;
	gid_t gid;
};

static void ns_trampoline(int fd, void *arg)
{
	const struct ids *ids = arg;
	ns_child(fd, ids->uid, ids->gid);
}

/* ------------------------------------------------------------------ */
/* seccomp: libseccomp opened lazily, a trivial filter loaded in a child */

struct sc_result {
	int loaded;
	int load_rc;
	int works; /* the filtered call failed with the errno the filter gives */
};

/* getpid() is made to fail with EXDEV: the filter is loaded and acts. */
static void sc_child(int fd, void *arg)
{
	struct sc_result r = { 0, 0, 0 };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		r.load_rc = -errno;
	} else {
		r.load_rc = lr__scmp.load((scmp_filter_ctx)arg);
		r.loaded = r.load_rc == 0;
		if (r.loaded)
			r.works = syscall(SYS_getpid) == -1 && errno == EXDEV;
	}
	ssize_t n = write(fd, &r, sizeof r);
	_exit(n == (ssize_t)sizeof r ? 0 : 1);
}

static int probe_seccomp(struct lr_err *why)
{
	const char *lib_why;
	if (lr__seccomp_open(&lib_why)) {
		lr_err_set(why, "libseccomp: %s", lib_why);
		return 0;
	}
	scmp_filter_ctx ctx = lr__scmp.init(SCMP_ACT_ALLOW);
	if (!ctx) {
		lr_err_set(why, "seccomp_init failed");
		return 0;
	}
	int ok = 0;
	if (lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(EXDEV), SCMP_SYS(getpid), 0) != 0) {
		lr_err_set(why, "seccomp_rule_add failed");
	} else {
		struct sc_result r;
		int rc = in_child(sc_child, ctx, &r, sizeof r);
		if (rc)
			lr_err_set(why, "the seccomp probe child failed: %s", lr_strerror(rc));
		else if (!r.loaded)
			lr_err_set(why, "seccomp_load failed: %s", lr_strerror(r.load_rc));
		else if (!r.works)
			lr_err_set(why, "a loaded seccomp filter did not act");
		else
			ok = 1;
	}
	lr__scmp.release(ctx);
	return ok;
}

/* ------------------------------------------------------------------ */
/* cgroups                                                              */

static int is_cgroup2(const char *path)
{
	struct statfs s;
	return statfs(path, &s) == 0 && (unsigned long)s.f_type == CGROUP2_SUPER_MAGIC;
}

static void read_small(const char *path, char *buf, size_t len)
{
	buf[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = '\0';
}

static int has_word(const char *list, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return 1;
	return 0;
}

/*
 * Our own cgroup in the v2 hierarchy (the "0::" line of /proc/self/cgroup)
 * under wherever cgroup2 is mounted: /sys/fs/cgroup on a v2 system,
 * /sys/fs/cgroup/unified on a hybrid one. Usable for limits when a child
 * we create there gets the memory and pids controllers.
 */
static void probe_cgroup(struct lr_sbx_caps *c)
{
	const char *mnt = NULL, *layout;
	if (is_cgroup2("/sys/fs/cgroup")) {
		mnt = "/sys/fs/cgroup";
		layout = "cgroup v2";
	} else if (is_cgroup2("/sys/fs/cgroup/unified")) {
		mnt = "/sys/fs/cgroup/unified";
		layout = "cgroup v1/v2 hybrid";
	} else {
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "no cgroup v2 hierarchy (cgroup v1 only or none): no cgroup limits");
		return;
	}
	char line[512] = "", self[256] = "";
	FILE *f = fopen("/proc/self/cgroup", "re");
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(self, sizeof self, "%.200s", line + 3);
		}
	if (f)
		fclose(f);
	if (!self[0]) {
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "%s at %s, but this process has no cgroup there", layout, mnt);
		return;
	}
	char dir[300], probe[340], path[400], ctl[256], child[256];
	snprintf(dir, sizeof dir, "%s%.200s", mnt, strcmp(self, "/") == 0 ? "" : self);
	snprintf(path, sizeof path, "%s/cgroup.controllers", dir);
	read_small(path, ctl, sizeof ctl);
	/* a child's controllers are among its parent's: without both here, no child can have them */
	if (!has_word(ctl, "memory") || !has_word(ctl, "pids")) {
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "%s at %s (controllers: %.40s); a child of %.50s gets no memory and pids "
			 "controllers, so no cgroup limits",
			 layout, mnt, ctl[0] ? ctl : "none", dir);
		return;
	}
	snprintf(probe, sizeof probe, "%s/luarig-probe-%ld", dir, (long)getpid());
	if (mkdir(probe, 0755) != 0) {
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "%s at %s (controllers: %.40s); cannot create a child of %.60s: %s",
			 layout, mnt, ctl[0] ? ctl : "none", dir, strerror(errno));
		return;
	}
	snprintf(path, sizeof path, "%s/cgroup.controllers", probe);
	read_small(path, child, sizeof child);
	rmdir(probe);
	if (has_word(child, "memory") && has_word(child, "pids")) {
		c->cgroup = 1;
		if (snprintf(c->cgroup_path, sizeof c->cgroup_path, "%s", dir) >=
		    (int)sizeof c->cgroup_path) {
			c->cgroup = 0; /* a path cut short is no path */
			c->cgroup_path[0] = '\0';
		}
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "%s: child cgroups of %.80s get memory and pids", layout, dir);
	} else {
		snprintf(c->cgroup_note, sizeof c->cgroup_note,
			 "%s at %s (controllers: %.40s); a child of %.50s gets no memory and pids "
			 "controllers, so no cgroup limits",
			 layout, mnt, ctl[0] ? ctl : "none", dir);
	}
}

/* ------------------------------------------------------------------ */
/* the probe                                                            */

static struct lr_sbx_caps caps;
static pthread_once_t once = PTHREAD_ONCE_INIT;

__attribute__((format(printf, 2, 3)))
static void add_why(struct lr_sbx_caps *c, const char *fmt, ...)
{
	size_t n = strlen(c->why);
	if (n + 3 >= sizeof c->why)
		return;
	if (n) {
		memcpy(c->why + n, "; ", 3);
		n += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->why + n, sizeof c->why - n, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ */
/* the per-boot cache of a tier-A result                                */

/*
 * The namespace and seccomp probes fork test children (~3 ms); their
 * answer changes only with the kernel, its settings or luarig itself. So a
 * complete tier-A result is remembered for the boot, in a file only the
 * user can write: root's in /run/luarig, another user's in
 * $XDG_RUNTIME_DIR/luarig or /tmp/luarig-UID. Each directory is opened
 * without following links and used only when it is a directory owned by
 * the user with no group or other permissions; the file only when it is a
 * regular file of the user's that nobody else may write.
 *
 * The file holds one line, the key: a format version, the boot id, the
 * kernel's release and version, the luarig binary's identity (device,
 * inode, size, mtime: another build may probe differently) and the uid and
 * gid. A line equal to the one this process would write is a hit; anything
 * else is a miss and the probe runs.
 *
 * Why this cannot weaken anything: the cache can only say "tier A", and
 * every step of tier A is redone by the helper, which dies with exit 126
 * when one fails (unshare, the uid map, the mount API, libseccomp, the
 * filter). A stale or forged line on a machine that lost a capability
 * (a sysctl turned user namespaces off) makes runs fail closed, never run
 * with less. Landlock's ABI and the cgroup layout (which differs per
 * process) are read fresh every time. A degraded result is not cached, so a
 * machine that gains a capability uses it at once. `luarig sandbox check`
 * always probes afresh and rewrites the file.
 */
#define CACHE_VERSION 1
#define CACHE_LINE 512

static int cache_dir_ok(int fd)
{
	struct stat st;
	return fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
	       st.st_uid == geteuid() && (st.st_mode & 077) == 0;
}

/* The cache directory, checked, or -1 (no cache here). Also protect.c's (its spare). */
int lr__sbx_runtime_dir(void)
{
	const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd = -1;
	if (geteuid() == 0) {
		if (mkdir("/run/luarig", 0700) < 0 && errno != EEXIST)
			return -1;
		fd = open("/run/luarig", flags);
	} else {
		const char *x = getenv("XDG_RUNTIME_DIR");
		int base = x && x[0] == '/' ? open(x, flags) : -1;
		if (cache_dir_ok(base)) {
			if (mkdirat(base, "luarig", 0700) < 0 && errno != EEXIST) {
				close(base);
				return -1;
			}
			fd = openat(base, "luarig", flags);
		} else {
			char tmp[64];
			snprintf(tmp, sizeof tmp, "/tmp/luarig-%lu", (unsigned long)geteuid());
			if (mkdir(tmp, 0700) == 0 || errno == EEXIST)
				fd = open(tmp, flags);
		}
		if (base >= 0)
			close(base);
	}
	if (!cache_dir_ok(fd)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The line this process would write; 0, or -1 when a part is unknown (no cache). */
static int cache_key(char *out, size_t len)
{
	char boot[64];
	read_small("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
	struct utsname u;
	struct stat exe;
	if (strlen(boot) != 36 || uname(&u) < 0 || stat("/proc/self/exe", &exe) < 0)
		return -1;
	int n = snprintf(out, len, "luarig probe v%d boot=%s kernel=%.64s %.100s exe=%llx:%llx:%lld:%lld.%09ld "
			 "uid=%lu gid=%lu tier=A", CACHE_VERSION, boot, u.release, u.version,
			 (unsigned long long)exe.st_dev, (unsigned long long)exe.st_ino,
			 (long long)exe.st_size, (long long)exe.st_mtim.tv_sec, exe.st_mtim.tv_nsec,
			 (unsigned long)getuid(), (unsigned long)getgid());
	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* The line after the key: " idmap=0\n" or " idmap=1\n" (an idmapped /etc can be made). */
#define CACHE_TAIL_LEN 9

/* -1: a miss; else the remembered idmap result (0 or 1). */
static int cache_hit(void)
{
	char key[CACHE_LINE], got[CACHE_LINE + CACHE_TAIL_LEN + 1] = "";
	if (cache_key(key, sizeof key))
		return -1;
	int dir = lr__sbx_runtime_dir();
	if (dir < 0)
		return -1;
	int fd = openat(dir, "probe", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	close(dir);
	if (fd < 0)
		return -1;
	struct stat st;
	size_t len = strlen(key);
	ssize_t n = -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    (st.st_mode & 022) == 0 && st.st_size == (off_t)(len + CACHE_TAIL_LEN))
		n = read(fd, got, sizeof got);
	close(fd);
	if (n != (ssize_t)(len + CACHE_TAIL_LEN) || memcmp(got, key, len) != 0)
		return -1;
	if (memcmp(got + len, " idmap=0\n", CACHE_TAIL_LEN) == 0)
		return 0;
	if (memcmp(got + len, " idmap=1\n", CACHE_TAIL_LEN) == 0)
		return 1;
	return -1;
}

/* Best effort: a write that fails leaves no file or the old one. */
static void cache_store(int idmap)
{
	char key[CACHE_LINE + CACHE_TAIL_LEN + 1], tmp[32];
	if (cache_key(key, CACHE_LINE))
		return;
	strcat(key, idmap ? " idmap=1\n" : " idmap=0\n");
	int dir = lr__sbx_runtime_dir();
	if (dir < 0)
		return;
	snprintf(tmp, sizeof tmp, "probe.%ld", (long)getpid());
	int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		size_t len = strlen(key);
		int ok = write(fd, key, len) == (ssize_t)len;
		ok = close(fd) == 0 && ok;
		if (!ok || renameat(dir, tmp, dir, "probe") < 0)
			unlinkat(dir, tmp, 0);
	}
	close(dir);
}

static const char *const step_names[] = { "making / private", "fsopen", "fsconfig", "fsmount",
					  "move_mount", "open_tree", "mkdir", "move_mount",
					  "checking the moved tree" };

static int fresh_only; /* lr_sbx_probe_fresh: skip the cache's answer */

/* As root: can the helper make an idmapped /etc? Tried in a child; the fds die with it. */
static void idmap_child(int fd, void *arg)
{
	(void)arg;
	int t = lr__sbx_etc_idmapped();
	int ok = t >= 0;
	ssize_t n = write(fd, &ok, sizeof ok);
	_exit(n == (ssize_t)sizeof ok ? 0 : 1);
}

static int probe_idmap(void)
{
	int ok = 0;
	if (geteuid() != 0 || getuid() != 0 || in_child(idmap_child, NULL, &ok, sizeof ok))
		return 0;
	return ok;
}

/* What the cache stands for: every namespace, the uid map, the mount API and seccomp work. */
static void probe_cached(struct lr_sbx_caps *c, int idmap)
{
	c->userns = c->mountns = c->pidns = c->netns = c->mount_api = c->seccomp = 1;
	c->etc_idmap = idmap;
	c->cached = 1;
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	c->landlock_abi = abi > 0 ? (int)abi : 0;
	if (abi <= 0)
		add_why(c, "no landlock: %s", strerror(errno));
	probe_cgroup(c);
	c->tier = c->landlock_abi >= 1 ? LR_TIER_A : LR_TIER_NONE;
}

static void probe(void)
{
	struct lr_sbx_caps *c = &caps;
	memset(c, 0, sizeof *c);
	int hit = fresh_only ? -1 : cache_hit();
	if (hit >= 0) {
		probe_cached(c, hit);
		return;
	}

	struct ids ids = { getuid(), getgid() };
	struct ns_result ns;
	int rc = in_child(ns_trampoline, &ids, &ns, sizeof ns);
	if (rc) {
		memset(&ns, 0, sizeof ns);
		add_why(c, "the namespace probe child failed: %s", lr_strerror(rc));
	}
	c->userns = ns.user && ns.uidmap;
	c->mountns = ns.mnt;
	c->pidns = ns.pid && ns.pid1;
	c->netns = ns.net;
	c->mount_api = ns.mount_api;
	if (!rc && !ns.user)
		add_why(c, "no user namespaces: unshare failed: %s", strerror(ns.all_errno));
	else if (!rc && !ns.all)
		add_why(c, "unshare of every namespace at once failed (%s): mount %s, pid %s, "
			"network %s, ipc %s, uts %s", strerror(ns.all_errno),
			ns.mnt ? "ok" : "no", ns.pid ? "ok" : "no", ns.net ? "ok" : "no",
			ns.ipc ? "ok" : "no", ns.uts ? "ok" : "no");
	if (ns.user && !ns.uidmap)
		add_why(c, "cannot write the uid map: %s", strerror(ns.uidmap_errno));
	if (ns.pid && !ns.pid1)
		add_why(c, "the pid namespace did not start at pid 1");
	if (ns.user && ns.uidmap && ns.mnt && !ns.mount_api)
		add_why(c, "mount API: %s failed: %s",
			step_names[ns.mount_step < 9 ? ns.mount_step : 0], strerror(ns.mount_errno));

	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	c->landlock_abi = abi > 0 ? (int)abi : 0;
	if (abi <= 0)
		add_why(c, "no landlock: %s", strerror(errno));

	struct lr_err sc_why = { "" };
	c->seccomp = probe_seccomp(&sc_why);
	if (!c->seccomp)
		add_why(c, "no seccomp: %s", sc_why.msg);

	probe_cgroup(c);

	int all_ns = c->userns && c->mountns && c->pidns && c->netns && ns.ipc && ns.uts && ns.all;
	if (all_ns && c->mount_api && c->landlock_abi >= 1 && c->seccomp) {
		c->tier = LR_TIER_A;
		c->etc_idmap = probe_idmap();
		cache_store(c->etc_idmap);
	}
	else if (c->landlock_abi >= 1 && c->seccomp)
		c->tier = LR_TIER_B;
	else
		c->tier = LR_TIER_NONE;
}

const struct lr_sbx_caps *lr_sbx_probe(void)
{
	pthread_once(&once, probe);
	return &caps;
}

const struct lr_sbx_caps *lr_sbx_probe_fresh(void)
{
	fresh_only = 1;
	return lr_sbx_probe();
}

/* ------------------------------------------------------------------ */
/* the report                                                           */

static const char *const g_names[LR_G_COUNT] = {
	"read_boundary", "write_boundary", "network_boundary", "target_network",
	"process_boundary", "resource_limits", "env_scrub", "protected_files",
};

const char *lr_guarantee_name(enum lr_guarantee g)
{
	return (unsigned)g < LR_G_COUNT ? g_names[g] : "unknown";
}

__attribute__((format(printf, 3, 4)))
static void set(struct lr_sbx_report *r, enum lr_guarantee g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->how[g], sizeof r->how[g], fmt, ap);
	va_end(ap);
	r->enforced[g] = 1;
}

__attribute__((format(printf, 3, 4)))
static void lack(struct lr_sbx_report *r, enum lr_guarantee g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->missing[g], sizeof r->missing[g], fmt, ap);
	va_end(ap);
	r->enforced[g] = 0;
}

static void enforce_a(const struct lr_sbx_caps *c, struct lr_sbx_report *r)
{
	set(r, LR_G_READ_BOUNDARY, "mount namespace view of the allowed roots + landlock ABI %d",
	    c->landlock_abi);
	set(r, LR_G_WRITE_BOUNDARY, "mount namespace view (protected paths read-only) + "
	    "landlock ABI %d", c->landlock_abi);
	set(r, LR_G_NETWORK_BOUNDARY, "network namespace with loopback only");
	set(r, LR_G_TARGET_NETWORK, "host egress proxy listening inside the network namespace, "
	    "allow-list per execution");
	set(r, LR_G_PROCESS_BOUNDARY, "user, pid, ipc and uts namespaces, a reaper as pid 1 that "
	    "ends with luarig (lifeline), setsid, no capabilities, seccomp (sockets: unix, tcp, udp)");
}

/* What the host interprets later: said the same way for every tier that has a mount view. */
static void protected_how(const struct lr_profile *p, struct lr_sbx_report *r)
{
	char files[160] = "";
	for (size_t i = 0, off = 0; lr_protect_git_files[i] && off < sizeof files; i++) {
		int w = snprintf(files + off, sizeof files - off, "%s%s", i ? ", " : "",
				 lr_protect_git_files[i]);
		off += w > 0 ? (size_t)w : 0;
	}
	set(r, LR_G_PROTECTED_FILES, "mount view: in writable roots %s%s%s of each repository "
	    "and the protected names read-only, missing ones held by placeholders; a .git made "
	    "inside a repository moved aside after the run",
	    p->git_readonly ? "the whole git directory" : "the git files that run code (",
	    p->git_readonly ? "" : files, p->git_readonly ? "" : ")");
}

static void enforce_b(const struct lr_sbx_caps *c, struct lr_sbx_report *r)
{
	set(r, LR_G_READ_BOUNDARY, "landlock ABI %d (degraded: no mount namespace)", c->landlock_abi);
	set(r, LR_G_WRITE_BOUNDARY, "landlock ABI %d (degraded: protected paths inside writable "
	    "roots stay writable without a mount namespace)", c->landlock_abi);
	set(r, LR_G_NETWORK_BOUNDARY, "seccomp refuses every socket but unix ones (degraded: no "
	    "network namespace)");
	lack(r, LR_G_TARGET_NETWORK, "the egress proxy needs a network namespace "
	     "(no user namespaces here)");
	if (c->landlock_abi >= 6)
		set(r, LR_G_PROCESS_BOUNDARY, "setsid, landlock signal and abstract-socket scopes, "
		    "seccomp, no capabilities, a subreaper that ends with luarig (degraded: no pid "
		    "namespace, host /proc visible)");
	else
		lack(r, LR_G_PROCESS_BOUNDARY, "no pid namespace and landlock ABI %d lacks the "
		     "signal scope (ABI 6)", c->landlock_abi);
}

int lr_sbx_report(const struct lr_profile *p, const struct lr_sbx_caps *c,
		  struct lr_sbx_report *r, struct lr_err *err)
{
	memset(r, 0, sizeof *r);
	r->tier = c->tier;
	int sandboxed = p->isolation == LR_ISO_SANDBOXED;
	int root_read = 0, root_write = 0;
	for (size_t i = 0; i < p->nroots; i++) {
		root_read |= p->roots[i].read != LR_CAP_ALLOW;
		root_write |= p->roots[i].write != LR_CAP_ALLOW;
	}
	int isolated = p->home == LR_HOME_ISOLATED;
	r->required[LR_G_READ_BOUNDARY] = sandboxed &&
		(p->workspace_read != LR_CAP_ALLOW || p->host_read != LR_CAP_ALLOW || root_read || isolated);
	r->required[LR_G_WRITE_BOUNDARY] = sandboxed &&
		(p->workspace_write != LR_CAP_ALLOW || p->host_write != LR_CAP_ALLOW || root_write ||
		 isolated);
	r->required[LR_G_NETWORK_BOUNDARY] = sandboxed && p->network != LR_CAP_ALLOW;
	/* Per-target network is needed by a run with an allow-list or a network
	 * grant, not by a profile state: the executor refuses such a run when
	 * it is not enforced. */
	r->required[LR_G_TARGET_NETWORK] = 0;
	r->required[LR_G_PROCESS_BOUNDARY] = sandboxed;
	r->required[LR_G_RESOURCE_LIMITS] = sandboxed;
	r->required[LR_G_ENV_SCRUB] = 1;
	/* A profile that lets commands write the workspace or a root needs the
	 * files the host interprets kept as they are; a gated one is checked per
	 * run (the executor refuses a write grant it cannot protect). */
	int root_writable = 0;
	for (size_t i = 0; i < p->nroots; i++)
		root_writable |= p->roots[i].write == LR_CAP_ALLOW;
	r->required[LR_G_PROTECTED_FILES] = sandboxed &&
		(p->workspace_write == LR_CAP_ALLOW || root_writable);
	size_t off = 0;
	for (int pass = 0; pass < 2; pass++) {
		size_t n = pass ? p->nprotect_names : SIZE_MAX;
		for (size_t i = 0; i < n; i++) {
			const char *nm = pass ? p->protect_names[i] : lr_protect_default_names[i];
			if (!nm)
				break;
			int w = snprintf(r->protected_names + off, sizeof r->protected_names - off, "%s%s",
					 off ? " " : "", nm);
			if (w < 0 || (size_t)w >= sizeof r->protected_names - off) {
				r->protected_names[off] = '\0';
				break;
			}
			off += (size_t)w;
		}
	}

	set(r, LR_G_ENV_SCRUB, "allow-listed environment with HOME, TMPDIR and proxy variables "
	    "forced; undeclared file descriptors closed");
	if (!sandboxed) {
		for (int g = 0; g < LR_G_ENV_SCRUB; g++)
			lack(r, (enum lr_guarantee)g, "isolation is unconfined");
		lack(r, LR_G_PROTECTED_FILES, "isolation is unconfined");
	} else if (c->tier == LR_TIER_NONE) {
		for (int g = 0; g < LR_G_ENV_SCRUB; g++)
			lack(r, (enum lr_guarantee)g, "no sandbox on this machine: %.130s",
			     c->why[0] ? c->why : "nothing to build one from");
		lack(r, LR_G_RESOURCE_LIMITS, "no sandbox on this machine to apply limits in");
		lack(r, LR_G_PROTECTED_FILES, "no sandbox on this machine: %.130s",
		     c->why[0] ? c->why : "nothing to build one from");
	} else {
		if (c->tier == LR_TIER_A) {
			enforce_a(c, r);
			protected_how(p, r);
		} else {
			enforce_b(c, r);
			lack(r, LR_G_PROTECTED_FILES, "no mount namespace: git directories and the "
			     "protected names inside writable roots stay writable (user namespaces are "
			     "unavailable here)");
		}
		/* the memory-backed file systems of the view, as every run gets them */
		struct lr_sbx_limits l;
		uint64_t bytes, inodes;
		lr_sbx_default_limits(&l);
		lr_sbx_tmpfs_limits(&l, &bytes, &inodes);
		char tmpfs[128];
		if (c->tier == LR_TIER_A)
			snprintf(tmpfs, sizeof tmpfs, "/tmp and /dev/shm tmpfs of %llu MiB and %llu files "
				 "each, /run %llu MiB", (unsigned long long)(bytes >> 20),
				 (unsigned long long)inodes, (unsigned long long)(bytes >> 23));
		else
			snprintf(tmpfs, sizeof tmpfs, "no private /tmp or /dev/shm (no mount namespace)");
		set(r, LR_G_RESOURCE_LIMITS, "rlimits (address space, file size, processes, open files, "
		    "cpu)%s; %s", c->cgroup ? " + cgroup memory.max and pids.max"
					  : "; no cgroup memory or pids limit here", tmpfs);
	}
	for (int g = 0; g < LR_G_COUNT; g++)
		if (r->required[g] && !r->enforced[g]) {
			lr_err_set(err, "sandbox: the profile needs '%s', which this machine cannot enforce: %.200s",
				   g_names[g], r->missing[g]);
			return LR_EREFUSED;
		}
	return 0;
}
