/*
 * store_lmdb_test.c — the conformance suite on the LMDB backend, then what
 * only LMDB has: durability across reopen, several processes on one root,
 * map growth, close flushing the queue, and corruption reported as
 * LR_ECORRUPT. Re-executes itself (argv[1] = a mode) for child processes.
 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <lmdb.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "test.h"
#include "store_conformance.h"

static char base[256];
static char cur_root[512];
static int roots;
static int small;

static int lm_open_root(const char *root, int no_sync, size_t map, struct lr_store **out,
			struct lr_err *e)
{
	struct lr_lmdb_opts o = { root, map, 0, no_sync, NULL };
	return lr_store_lmdb_open(&o, out, e);
}

/*
 * A fresh root per case, a 1 MiB map so that growth is exercised; with a
 * ctx, durable (every commit synced, most through the log).
 */
static int lm_open(struct lr_store **out, void *ctx, struct lr_err *e)
{
	snprintf(cur_root, sizeof cur_root, "%s/r%d", base, roots++);
	return lm_open_root(cur_root, ctx ? 0 : 1, (size_t)1 << 20, out, e);
}

static int lm_second(struct lr_store **out, void *ctx, struct lr_err *e)
{
	(void)ctx;
	return lm_open_root(cur_root, 1, 0, out, e);
}

/* Child: acquire the lease, report its epoch on fd 1, wait to be killed. */
static int holder_main(const char *root, const char *name)
{
	struct lr_store *s;
	struct lr_err e;
	if (lm_open_root(root, 1, 0, &s, &e))
		return 1;
	struct lr_lease *l;
	if (lr_store_acquire(s, name, &l, &e)) {
		fprintf(stderr, "holder: %s\n", e.msg);
		return 1;
	}
	printf("%llu\n", (unsigned long long)l->epoch);
	fflush(stdout);
	for (;;)
		pause();
}

/* Starts `self mode args…` with its stdout on a pipe; returns the read end. */
static int spawn_self(const char *const *argv, int *pid)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return -1;
	*pid = fork();
	if (*pid == 0) {
		dup2(p[1], 1);
		execv("/proc/self/exe", (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	return p[0];
}

static int lm_spawn_holder(void *ctx, const char *name, uint64_t *epoch, int *pid)
{
	(void)ctx;
	const char *argv[] = { "store_lmdb_test", "holder", cur_root, name, NULL };
	int fd = spawn_self(argv, pid);
	if (fd < 0)
		return -errno;
	char buf[64] = { 0 };
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		*pid = -1;
		return -EIO;
	}
	*epoch = strtoull(buf, NULL, 10);
	return 0;
}

/* Child: n durable appends to its ledger, each acknowledged seq on stdout. */
static int appender_main(const char *root, const char *name, int n)
{
	struct lr_store *s;
	struct lr_err e;
	if (lm_open_root(root, 0, 0, &s, &e))
		return 1;
	for (int i = 0; i < n; i++) {
		char buf[32];
		int len = snprintf(buf, sizeof buf, "%s.%d", name, i);
		if (lr_store_append(s, name, (uint64_t)i, buf, (size_t)len, &e)) {
			fprintf(stderr, "appender: %s\n", e.msg);
			return 1;
		}
	}
	lr_store_close(s);
	return 0;
}

/* Child: grows the map of a root another process has open (3 × 8 MiB records). */
static int grower_main(const char *root)
{
	struct lr_store *s;
	struct lr_err e;
	if (lm_open_root(root, 1, 0, &s, &e))
		return 1;
	size_t big = (size_t)8 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 12);
	for (int i = 0; i < 3; i++) {
		if (lr_store_append(s, "grown", (uint64_t)i, p, big, &e)) {
			fprintf(stderr, "grower: %s\n", e.msg);
			return 1;
		}
	}
	free(p);
	lr_store_close(s);
	return 0;
}

/* Child: opens root with a 1 MiB map and closes it. */
static int opener_main(const char *root)
{
	struct lr_store *s;
	struct lr_err e;
	if (lm_open_root(root, 0, (size_t)1 << 20, &s, &e))
		return 1;
	lr_store_close(s);
	return 0;
}

static void new_root(char *out, size_t cap);
static int log_full_size(const char *root);

#define FILL_N 300
#define FILL_LEN ((size_t)16 << 10)

/*
 * Child: FILL_N durable 16 KiB appends to its ledger from a 1 MiB map (so
 * the map grows past where it was written ahead, four times), then one
 * small append (acknowledged only once the writer has written ahead after
 * the last big one), "ok" on stdout, and it waits to be killed.
 */
static int filler_main(const char *root, const char *name, unsigned seed)
{
	struct lr_store *s;
	struct lr_err e;
	if (lm_open_root(root, 0, (size_t)1 << 20, &s, &e))
		return 1;
	unsigned char *p = malloc(FILL_LEN);
	for (int i = 0; i < FILL_N; i++) {
		conf_fill(p, FILL_LEN, seed + (unsigned)i);
		if (lr_store_append(s, name, (uint64_t)i, p, FILL_LEN, &e)) {
			fprintf(stderr, "filler: %s\n", e.msg);
			return 1;
		}
	}
	if (lr_store_append(s, name, FILL_N, "end", 3, &e))
		return 1;
	free(p);
	printf("ok\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_CREAT | O_TRUNC |
							       O_CLOEXEC, 0600);
	static char buf[1 << 20];
	ssize_t n = 0;
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return in < 0 || out < 0 || n < 0 ? -1 : 0;
}

/* Copies the two meta pages (the first two pages) of from over those of to. */
static int splice_metas(const char *from, const char *to)
{
	static char b[2 * 65536];
	size_t n = 2 * (size_t)sysconf(_SC_PAGESIZE);
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_CLOEXEC);
	int rc = in < 0 || out < 0 || n > sizeof b || pread(in, b, n, 0) != (ssize_t)n ||
		 pwrite(out, b, n, 0) != (ssize_t)n;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc ? -1 : 0;
}

/*
 * Child: durable writes after the open (a checkpoint: everything before
 * it synced), then a "disk" made of data.mdb as a power loss may leave it,
 * and an exit without closing: the log stays behind. The writes: five
 * appends to pl/a (a hundred with "laps": the log fills, is checkpointed
 * and starts again) and a kv put of pl/k. The disk, by mode:
 *   copy   data.mdb as it stood before the fifth append (the page cache then)
 *   metas  data.mdb as it stood at the checkpoint, with the meta pages of
 *          the end: the kernel wrote the metas back and none of the pages
 *          they point at
 *   reuse  first 40 rewrites of 8 kv values of 1.5 KiB (each commit frees
 *          the pages of the one before), then the writes; the disk is the
 *          end's data.mdb, every page written back, the metas too
 *   laps   as reuse, without the rewrites
 */
static int poweroff_main(const char *root, const char *mode)
{
	struct lr_store *s;
	struct lr_err e;
	char data[600], disk[600];
	snprintf(data, sizeof data, "%s/data.mdb", root);
	snprintf(disk, sizeof disk, "%s/disk.mdb", root);
	if (lm_open_root(root, 0, 0, &s, &e))
		return 1;
	if (strcmp(mode, "metas") == 0 && copy_file(data, disk))
		return 1;
	if (strcmp(mode, "reuse") == 0) {
		char v[1536];
		for (int i = 0; i < 40; i++) {
			char key[32];
			memset(v, 'a' + i, sizeof v);
			snprintf(key, sizeof key, "pl/r%d", i % 8);
			if (lr_store_kv_put(s, key, (uint64_t)(i / 8), v, sizeof v, NULL, &e)) {
				fprintf(stderr, "poweroff: %s\n", e.msg);
				return 1;
			}
		}
	}
	int n = strcmp(mode, "laps") == 0 ? 100 : 5;
	for (int i = 0; i < n; i++) {
		char buf[32];
		int len = snprintf(buf, sizeof buf, "rec.%d", i + 1);
		if (i == 4 && strcmp(mode, "copy") == 0 && copy_file(data, disk))
			return 1;
		if (lr_store_append(s, "pl/a", (uint64_t)i, buf, (size_t)len, &e)) {
			fprintf(stderr, "poweroff: %s\n", e.msg);
			return 1;
		}
	}
	if (lr_store_kv_put(s, "pl/k", 0, "v1", 2, NULL, &e)) {
		fprintf(stderr, "poweroff: %s\n", e.msg);
		return 1;
	}
	if (strcmp(mode, "metas") == 0 && splice_metas(data, disk))
		return 1;
	if ((strcmp(mode, "reuse") == 0 || strcmp(mode, "laps") == 0) && copy_file(data, disk))
		return 1;
	printf("ok\n");
	fflush(stdout);
	_exit(0);
}

/* The one log file (*.log) under root/wal (its path in out), or -1. */
static int find_log(const char *root, char *out, size_t cap)
{
	char dir[520];
	snprintf(dir, sizeof dir, "%s/wal", root);
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		size_t nl = strlen(de->d_name);
		if (nl > 4 && strcmp(de->d_name + nl - 4, ".log") == 0 && n++ == 0)
			snprintf(out, cap, "%s/%s", dir, de->d_name);
	}
	if (d)
		closedir(d);
	return n == 1 ? 0 : -1;
}

/* Runs the poweroff child on root and puts its "disk" (by mode) in place of data.mdb. */
static void power_loss(const char *root, const char *mode)
{
	const char *argv[] = { "store_lmdb_test", "poweroff", root, mode, NULL };
	int pid, fd = spawn_self(argv, &pid);
	CHECK(fd >= 0);
	char buf[8] = { 0 };
	CHECK_EQ_INT((int)read(fd, buf, sizeof buf - 1), 3);
	close(fd);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char from[600], to[600];
	snprintf(from, sizeof from, "%s/disk.mdb", root);
	snprintf(to, sizeof to, "%s/data.mdb", root);
	CHECK_EQ_INT(rename(from, to), 0);
}

static int open_after_reboot(const char *root, struct lr_store **s, struct lr_err *e)
{
	struct lr_lmdb_opts o = { root, 0, 0, 0, "00000000-test-boot-after-a-power-loss" };
	return lr_store_lmdb_open(&o, s, e);
}

/* A new root through a power loss of the given mode, opened after the reboot (NULL: failed). */
static struct lr_store *reopen_after_power_loss(const char *mode)
{
	char root[512];
	new_root(root, sizeof root);
	power_loss(root, mode);
	struct lr_store *s = NULL;
	struct lr_err e;
	CHECK_EQ_INT(open_after_reboot(root, &s, &e), 0);
	return s;
}

/*
 * A power loss after acknowledged appends whose meta page was never
 * synced: opened after the reboot, the store has every acknowledged write
 * back from the log, and the log is gone.
 */
TEST(power_loss_replays_the_log)
{
	char root[512], log[1024];
	new_root(root, sizeof root);
	power_loss(root, "copy");
	CHECK_EQ_INT(find_log(root, log, sizeof log), 0);
	CHECK_EQ_INT(log_full_size(root), 0); /* zeros past each slot's group: still read right */
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(open_after_reboot(root, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "pl/a"), 5);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "pl/a", 1, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT((int)r.n, 5);
	CHECK_EQ_STR(r.data[4], "rec.5");
	struct lr_bytes v = { 0 };
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_kv_get(s, "pl/k", &v, &rev, &e), 0);
	CHECK_EQ_INT((int)rev, 1);
	CHECK(v.len == 2 && memcmp(v.data, "v1", 2) == 0);
	free(v.data);
	CHECK(find_log(root, log, sizeof log) < 0);
	/* and it is not replayed again */
	CHECK_EQ_INT(lr_store_append(s, "pl/a", 5, "rec.6", 5, &e), 0);
	lr_store_close(s);
	CHECK_EQ_INT(open_after_reboot(root, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "pl/a"), 6);
	lr_store_close(s);
}

/* A torn slot (its CRC fails: its group was never acknowledged) is not replayed. */
TEST(power_loss_skips_a_torn_slot)
{
	char root[512], log[1024];
	new_root(root, sizeof root);
	power_loss(root, "copy");
	CHECK_EQ_INT(find_log(root, log, sizeof log), 0);
	/* a group a page from 0: the kv put, the sixth group, is at 5 pages */
	int fd = open(log, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	unsigned char b;
	off_t at = 5 * 4096 + 72 + 16;
	CHECK_EQ_INT((int)pread(fd, &b, 1, at), 1);
	b ^= 0xff;
	CHECK_EQ_INT((int)pwrite(fd, &b, 1, at), 1);
	close(fd);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(open_after_reboot(root, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "pl/a"), 5);
	struct lr_bytes v = { 0 };
	CHECK_EQ_INT(lr_store_kv_get(s, "pl/k", &v, NULL, &e), LR_ENOTFOUND);
	lr_store_close(s);
}

/* The five appends and the kv put of the poweroff child are all there. */
static void check_poweroff_writes(struct lr_store *s, int n)
{
	struct lr_err e;
	CHECK_EQ_INT(conf_tip(s, "pl/a"), n);
	struct conf_recs r = { 0 };
	uint64_t from = n > 64 ? (uint64_t)n - 63 : 1; /* conf_recs keeps 64 */
	CHECK_EQ_INT(lr_store_read(s, "pl/a", from, 0, conf_collect, &r, &e), 0);
	CHECK_EQ_INT((int)r.n, n - (int)from + 1);
	char want[32];
	snprintf(want, sizeof want, "rec.%d", n);
	CHECK(r.n >= 1 && strcmp(r.data[r.n - 1], want) == 0);
	CHECK_EQ_INT((int)r.last, n);
	struct lr_bytes v = { 0 };
	uint64_t rev = 0;
	CHECK_EQ_INT(lr_store_kv_get(s, "pl/k", &v, &rev, &e), 0);
	CHECK_EQ_INT((int)rev, 1);
	CHECK(v.len == 2 && memcmp(v.data, "v1", 2) == 0);
	free(v.data);
}

/*
 * A power loss after the kernel wrote the meta pages of the last commits
 * back but not the pages they point at: opened after the reboot, LMDB
 * starts from the checkpoint's meta (put back from root/wal/checkpoint),
 * not from a meta pointing at pages the disk never got, and the log
 * replays the rest.
 */
TEST(power_loss_with_meta_pages_ahead_of_their_data)
{
	struct lr_store *s = reopen_after_power_loss("metas");
	if (s) {
		check_poweroff_writes(s, 5);
		lr_store_close(s);
	}
}

/*
 * A power loss after commits that freed and rewrote pages, every page
 * written back: the checkpoint's tree is whole (its pages were pinned, so
 * no commit after it reused them), and the log replays the rewrites.
 */
TEST(power_loss_after_pages_were_rewritten)
{
	struct lr_store *s = reopen_after_power_loss("reuse");
	struct lr_err e;
	if (!s)
		return;
	check_poweroff_writes(s, 5);
	for (int k = 0; k < 8; k++) {
		char key[32];
		snprintf(key, sizeof key, "pl/r%d", k);
		struct lr_bytes v = { 0 };
		uint64_t rev = 0;
		CHECK_EQ_INT(lr_store_kv_get(s, key, &v, &rev, &e), 0);
		CHECK_EQ_INT((int)rev, 5);
		CHECK(v.len == 1536 && ((unsigned char *)v.data)[0] == 'a' + 32 + k &&
		      ((unsigned char *)v.data)[1535] == 'a' + 32 + k);
		free(v.data);
	}
	lr_store_close(s);
}

/* A hundred groups: the log was checkpointed and started again; the rest is replayed. */
TEST(power_loss_after_the_log_started_again)
{
	struct lr_store *s = reopen_after_power_loss("laps");
	if (s) {
		check_poweroff_writes(s, 100);
		lr_store_close(s);
	}
}

/*
 * data.mdb put back from a copy older than the last checkpoint, then
 * opened after a reboot: its metas are before the checkpoint's, so the
 * checkpoint's meta is not written over them; the copy opens as it was.
 */
TEST(older_copy_of_data_is_not_given_the_checkpoint)
{
	char root[512], data[600], copy[600];
	new_root(root, sizeof root);
	snprintf(data, sizeof data, "%s/data.mdb", root);
	snprintf(copy, sizeof copy, "%s/copy.mdb", root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "cp/a", 0, "one", 3, &e), 0);
	lr_store_close(s);
	CHECK_EQ_INT(copy_file(data, copy), 0);
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	for (int i = 1; i < 4; i++)
		CHECK_EQ_INT(lr_store_append(s, "cp/a", (uint64_t)i, "more", 4, &e), 0);
	lr_store_close(s);
	CHECK_EQ_INT(rename(copy, data), 0);
	CHECK_EQ_INT(open_after_reboot(root, &s, &e), 0);
	if (s) {
		CHECK_EQ_INT(conf_tip(s, "cp/a"), 1);
		CHECK_EQ_INT(lr_store_append(s, "cp/a", 1, "two", 3, &e), 0);
		lr_store_close(s);
	}
}

/* With no boot id, LMDB syncs every commit itself: no log, no checkpoint record. */
TEST(no_boot_id_no_log)
{
	char root[512], log[1024], path[600];
	new_root(root, sizeof root);
	struct lr_lmdb_opts o = { root, 0, 0, 0, "" };
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lr_store_lmdb_open(&o, &s, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "nb/a", 0, "x", 1, &e), 0);
	CHECK_EQ_INT(lr_store_kv_put(s, "nb/k", 0, "v", 1, NULL, &e), 0);
	CHECK(find_log(root, log, sizeof log) < 0);
	snprintf(path, sizeof path, "%s/wal/checkpoint", root);
	CHECK(access(path, F_OK) != 0);
	lr_store_close(s);
	CHECK_EQ_INT(lr_store_lmdb_open(&o, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "nb/a"), 1);
	lr_store_close(s);
}

/* A clean close leaves no log; the same boot's log of a dead process is removed. */
TEST(log_removed_on_close_and_after_a_kill)
{
	char root[512], log[1024];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "c/a", 0, "x", 1, &e), 0);
	CHECK_EQ_INT(find_log(root, log, sizeof log), 0);
	lr_store_close(s);
	CHECK(find_log(root, log, sizeof log) < 0);
	power_loss(root, "copy"); /* a kill: but this boot goes on, the page cache has it all */
	CHECK_EQ_INT(find_log(root, log, sizeof log), 0);
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	CHECK(find_log(root, log, sizeof log) < 0);
	lr_store_close(s);
}

/*
 * Bytes of data.mdb from LMDB's last page that are not written data (a
 * hole or an unwritten extent) within the next `want` bytes (the map's
 * end at most); -1 when FIEMAP cannot say. Opens the environment read-only:
 * no store may be open on root in this process.
 */
static long long unwritten_past_end(const char *root, size_t want)
{
	MDB_env *env;
	MDB_envinfo info;
	MDB_stat st;
	if (mdb_env_create(&env))
		return -1;
	if (mdb_env_open(env, root, MDB_RDONLY, 0600) ||
	    mdb_env_info(env, &info) || mdb_env_stat(env, &st)) {
		mdb_env_close(env);
		return -1;
	}
	mdb_env_close(env);
	char path[600];
	snprintf(path, sizeof path, "%s/data.mdb", root);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat fst;
	if (fd < 0 || fstat(fd, &fst)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	long long from = ((long long)info.me_last_pgno + 1) * st.ms_psize, to = from + (long long)want;
	if (to > (long long)fst.st_size)
		to = (long long)fst.st_size;
	long long pos = from, bad = 0;
	union {
		struct fiemap fm;
		char b[sizeof(struct fiemap) + 64 * sizeof(struct fiemap_extent)];
	} u;
	memset(&u, 0, sizeof u);
	u.fm.fm_start = (uint64_t)from;
	u.fm.fm_length = (uint64_t)(to - from);
	u.fm.fm_flags = FIEMAP_FLAG_SYNC;
	u.fm.fm_extent_count = 64;
	if (to <= from || ioctl(fd, FS_IOC_FIEMAP, &u.fm) < 0) {
		close(fd);
		return to <= from ? 0 : -1;
	}
	close(fd);
	for (unsigned i = 0; i < u.fm.fm_mapped_extents && pos < to; i++) {
		const struct fiemap_extent *x = &u.fm.fm_extents[i];
		long long a = (long long)x->fe_logical, b = a + (long long)x->fe_length;
		if (a > pos)
			bad += (a < to ? a : to) - pos; /* a hole */
		if (b > to)
			b = to;
		if ((x->fe_flags & (FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_DELALLOC)) &&
		    b > (a > pos ? a : pos))
			bad += b - (a > pos ? a : pos);
		if (b > pos)
			pos = b;
	}
	return bad + (to > pos ? to - pos : 0);
}

struct fill_read {
	unsigned seed;
	unsigned char *want;
	uint64_t n, bad;
};

static int fill_cb(void *arg, const struct lr_record *r)
{
	struct fill_read *f = arg;
	f->n++;
	if (r->seq == FILL_N + 1) {
		f->bad += r->len != 3 || memcmp(r->data, "end", 3) != 0;
		return 0;
	}
	conf_fill(f->want, FILL_LEN, f->seed + (unsigned)(r->seq - 1));
	f->bad += r->seq != f->n || r->len != FILL_LEN || memcmp(r->data, f->want, FILL_LEN) != 0;
	return 0;
}

/* Every record of a filler's ledger, byte for byte: 0, or how many are wrong or missing. */
static long long fill_check(struct lr_store *s, const char *name, unsigned seed)
{
	struct lr_err e;
	struct fill_read f = { seed, malloc(FILL_LEN), 0, 0 };
	int rc = lr_store_read(s, name, 1, 0, fill_cb, &f, &e);
	free(f.want);
	return rc ? -1 : (long long)f.bad + (FILL_N + 1 - (long long)f.n);
}

/* The log of the one live or dead process under root: 0 when it is 2 MiB, written in full. */
static int log_full_size(const char *root)
{
	char log[1024];
	struct stat st;
	if (find_log(root, log, sizeof log) || stat(log, &st))
		return -1;
	return st.st_size == (off_t)2 << 20 && (long long)st.st_blocks * 512 >= (2LL << 20) ? 0 : 1;
}

/*
 * Two processes fill one root from a 1 MiB map, so that records land past
 * the map's old end and in what each wrote ahead (zeros, inside LMDB's
 * write lock); one is killed. Every acknowledged byte survives the reopen,
 * the bytes past LMDB's last page are written (no extent left for a sync
 * to convert), and the dead process's log was 2 MiB, both slots written.
 */
TEST(written_ahead_map_survives_growth_and_a_kill)
{
	char root[512];
	new_root(root, sizeof root);
	int pid;
	const char *argv[] = { "store_lmdb_test", "filler", root, "fill/child", "1000", NULL };
	int fd = spawn_self(argv, &pid);
	CHECK(fd >= 0);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, (size_t)1 << 20, &s, &e), 0);
	unsigned char *p = malloc(FILL_LEN);
	for (int i = 0; i < FILL_N; i++) {
		conf_fill(p, FILL_LEN, 1u + (unsigned)i);
		CHECK_EQ_INT(lr_store_append(s, "fill/parent", (uint64_t)i, p, FILL_LEN, &e), 0);
	}
	CHECK_EQ_INT(lr_store_append(s, "fill/parent", FILL_N, "end", 3, &e), 0);
	free(p);
	lr_store_close(s);
	char buf[8] = { 0 };
	CHECK_EQ_INT((int)read(fd, buf, sizeof buf - 1), 3);
	close(fd);
	CHECK_EQ_INT(log_full_size(root), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	CHECK_EQ_INT(log_full_size(root), 0);
	long long bad = unwritten_past_end(root, (size_t)1 << 20);
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	CHECK_EQ_INT(fill_check(s, "fill/parent", 1), 0);
	CHECK_EQ_INT(fill_check(s, "fill/child", 1000), 0);
	lr_store_close(s);
	if (bad < 0)
		SKIP("no FIEMAP here: the bytes written ahead are not checked");
	CHECK_EQ_INT(bad, 0);
}

static void new_root(char *out, size_t cap)
{
	snprintf(out, cap, "%s/x%d", base, roots++);
}

/* Durable group commit from 16 threads, then the data survives a reopen. */
struct gc_arg {
	struct lr_store *s;
	int id, n, err;
};

static void *gc_main(void *arg)
{
	struct gc_arg *g = arg;
	char name[32], buf[1024];
	struct lr_err e;
	snprintf(name, sizeof name, "gc/%d", g->id);
	for (int i = 0; i < g->n; i++) {
		memset(buf, 'a' + g->id % 26, sizeof buf);
		snprintf(buf, 32, "%d/%d", g->id, i);
		if (lr_store_append(g->s, name, (uint64_t)i, buf, sizeof buf, &e)) {
			fprintf(stderr, "gc: %s\n", e.msg);
			g->err++;
		}
	}
	return NULL;
}

TEST(durable_group_commit_and_reopen)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	struct gc_arg g[16];
	pthread_t th[16];
	int n = small ? 5 : 20;
	for (int i = 0; i < 16; i++) {
		g[i] = (struct gc_arg){ s, i, n, 0 };
		pthread_create(&th[i], NULL, gc_main, &g[i]);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(g[i].err, 0);
	}
	lr_store_close(s);
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	for (int i = 0; i < 16; i++) {
		char name[32];
		snprintf(name, sizeof name, "gc/%d", i);
		CHECK_EQ_INT(conf_tip(s, name), n);
		struct conf_recs r = { 0 };
		CHECK_EQ_INT(lr_store_read(s, name, (uint64_t)n, 1, conf_collect, &r, &e), 0);
		char want[32];
		snprintf(want, sizeof want, "%d/%d", i, n - 1);
		CHECK_EQ_STR(r.data[0], want);
		CHECK_EQ_INT(r.lens[0], 1024);
	}
	lr_store_close(s);
}

/* Two processes append to one root at once; LMDB's lock serializes them. */
TEST(two_processes_one_root)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	int n = small ? 20 : 100, pid;
	char nbuf[16];
	snprintf(nbuf, sizeof nbuf, "%d", n);
	const char *argv[] = { "store_lmdb_test", "appender", root, "child", nbuf, NULL };
	int fd = spawn_self(argv, &pid);
	CHECK(fd >= 0);
	for (int i = 0; i < n; i++) {
		char buf[32];
		int len = snprintf(buf, sizeof buf, "parent.%d", i);
		CHECK_EQ_INT(lr_store_append(s, "parent", (uint64_t)i, buf, (size_t)len, &e), 0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	close(fd);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ_INT(conf_tip(s, "parent"), n);
	CHECK_EQ_INT(conf_tip(s, "child"), n);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "child", (uint64_t)n, 0, conf_collect, &r, &e), 0);
	char want[32];
	snprintf(want, sizeof want, "child.%d", n - 1);
	CHECK_EQ_STR(r.data[0], want);
	lr_store_close(s);
}

/* The map starts at 1 MiB and must grow to hold 64 MiB records. */
static int big_cb(void *arg, const struct lr_record *r)
{
	const unsigned char *want = arg;
	return r->len == ((size_t)64 << 20) && memcmp(r->data, want, r->len) == 0 ? 0 : 9;
}

TEST(map_grows_64mib_record)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 1, (size_t)1 << 20, &s, &e), 0);
	size_t big = (size_t)64 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 9);
	CHECK_EQ_INT(lr_store_append(s, "big", 0, p, big, &e), 0);
	CHECK_EQ_INT(lr_store_append(s, "big", 1, p, big, &e), 0);
	CHECK_EQ_INT(lr_store_read(s, "big", 1, 0, big_cb, p, &e), 0);
	lr_store_close(s);
	/* a later open adopts the grown map */
	CHECK_EQ_INT(lm_open_root(root, 1, (size_t)1 << 20, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "big"), 2);
	CHECK_EQ_INT(lr_store_read(s, "big", 2, 0, big_cb, p, &e), 0);
	lr_store_close(s);
	free(p);
}

/* Another process grows the map while we have it open: we adopt it. */
TEST(map_resized_by_another_process)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 1, (size_t)1 << 20, &s, &e), 0);
	CHECK_EQ_INT(conf_append_str(s, "mine", 0, "a"), 0);
	int pid;
	const char *argv[] = { "store_lmdb_test", "grower", root, NULL };
	int fd = spawn_self(argv, &pid);
	int status = 0;
	waitpid(pid, &status, 0);
	close(fd);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ_INT(conf_tip(s, "grown"), 3);
	size_t big = (size_t)8 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 12);
	CHECK_EQ_INT(conf_append_str(s, "mine", 1, "b"), 0);
	CHECK_EQ_INT(lr_store_append(s, "mine", 2, p, big, &e), 0);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "grown", 3, 0, conf_collect, &r, &e), 0);
	CHECK(r.n == 1 && r.lens[0] == big);
	free(p);
	lr_store_close(s);
}

/*
 * A process opening the root with a map smaller than another's grown one
 * does not cut the file down to it (LMDB truncates data.mdb to the map it
 * is given): the grown map's pages stay in the file, and writes into them
 * go on (they would fault with SIGBUS past the end).
 */
TEST(smaller_map_opened_beside_does_not_truncate)
{
	char root[512], data[600];
	new_root(root, sizeof root);
	snprintf(data, sizeof data, "%s/data.mdb", root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, (size_t)1 << 20, &s, &e), 0);
	size_t big = (size_t)6 << 20;
	unsigned char *p = malloc(big);
	conf_fill(p, big, 7);
	CHECK_EQ_INT(lr_store_append(s, "grown", 0, p, big, &e), 0);
	struct stat before, after;
	CHECK_EQ_INT(stat(data, &before), 0);
	int pid;
	const char *argv[] = { "store_lmdb_test", "opener", root, NULL };
	int fd = spawn_self(argv, &pid);
	int status = 0;
	waitpid(pid, &status, 0);
	close(fd);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ_INT(stat(data, &after), 0);
	CHECK(after.st_size >= before.st_size);
	if (after.st_size >= before.st_size) {
		conf_fill(p, (size_t)1 << 20, 8);
		CHECK_EQ_INT(lr_store_append(s, "grown", 1, p, (size_t)1 << 20, &e), 0);
	}
	free(p);
	lr_store_close(s);
}

/* close() flushes what is queued: every async append is acknowledged and kept. */
static int acked;
static pthread_mutex_t acked_mu = PTHREAD_MUTEX_INITIALIZER;

static void ack_cb(void *arg, int rc, uint64_t seq, const struct lr_err *e)
{
	(void)arg;
	(void)seq;
	(void)e;
	pthread_mutex_lock(&acked_mu);
	if (rc == 0)
		acked++;
	pthread_mutex_unlock(&acked_mu);
}

TEST(close_flushes_queue)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	acked = 0;
	for (int i = 0; i < 200; i++)
		lr_store_append_async(s, "q", (uint64_t)i, "rec", 3, ack_cb, NULL);
	lr_store_close(s);
	CHECK_EQ_INT(acked, 200);
	CHECK_EQ_INT(lm_open_root(root, 0, 0, &s, &e), 0);
	CHECK_EQ_INT(conf_tip(s, "q"), 200);
	lr_store_close(s);
}

/* A tip value of the wrong size: LR_ECORRUPT naming the ledger. */
TEST(corrupt_tip_entry_is_named)
{
	char root[512];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 1, 0, &s, &e), 0);
	conf_append_str(s, "sessions/t", 0, "a");
	lr_store_close(s);
	/* write a 3-byte tip behind the backend's back */
	MDB_env *env;
	MDB_txn *t;
	MDB_dbi dbi;
	mdb_env_create(&env);
	mdb_env_set_maxdbs(env, 8);
	CHECK_EQ_INT(mdb_env_open(env, root, MDB_WRITEMAP, 0600), 0);
	mdb_txn_begin(env, NULL, 0, &t);
	CHECK_EQ_INT(mdb_dbi_open(t, "tip", 0, &dbi), 0);
	MDB_val k = { 10, (void *)"sessions/t" }, v = { 3, (void *)"abc" };
	CHECK_EQ_INT(mdb_put(t, dbi, &k, &v, 0), 0);
	mdb_txn_commit(t);
	mdb_env_close(env);
	CHECK_EQ_INT(lm_open_root(root, 1, 0, &s, &e), 0);
	uint64_t tip;
	CHECK_EQ_INT(lr_store_tip(s, "sessions/t", &tip, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "'sessions/t'") != NULL);
	CHECK_EQ_INT(lr_store_append(s, "sessions/t", 1, "b", 1, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, "'sessions/t'") != NULL);
	struct conf_recs r = { 0 };
	CHECK_EQ_INT(lr_store_read(s, "sessions/t", 1, 0, conf_collect, &r, &e), LR_ECORRUPT);
	/* other ledgers still work */
	CHECK_EQ_INT(conf_append_str(s, "sessions/u", 0, "a"), 0);
	lr_store_close(s);
}

/* A data file that is not LMDB at all: open says corrupt. */
TEST(garbage_data_file)
{
	char root[512], path[600];
	new_root(root, sizeof root);
	mkdir(root, 0700);
	snprintf(path, sizeof path, "%s/data.mdb", root);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	unsigned char junk[16384];
	conf_fill(junk, sizeof junk, 11);
	CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
	close(fd);
	struct lr_store *s = NULL;
	struct lr_err e;
	CHECK_EQ_INT(lm_open_root(root, 1, 0, &s, &e), LR_ECORRUPT);
	CHECK(strstr(e.msg, root) != NULL);
	CHECK(s == NULL);
}

/*
 * Zeroed pages in the middle of the used part of data.mdb: every record
 * read back is either exactly what was written or the read fails with
 * LR_ECORRUPT naming the ledger — never different bytes — and the damage
 * is detected.
 */
struct verify {
	int bad;
	uint64_t n;
};

static int verify_cb(void *arg, const struct lr_record *r)
{
	struct verify *v = arg;
	char want[1000];
	memset(want, 'r', sizeof want);
	snprintf(want, 32, "rec %llu", (unsigned long long)r->seq);
	if (r->len != sizeof want || memcmp(r->data, want, sizeof want) != 0)
		v->bad++;
	v->n++;
	return 0;
}

TEST(zeroed_pages_are_detected)
{
	char root[512], path[600];
	new_root(root, sizeof root);
	struct lr_store *s;
	struct lr_err e;
	int n = 3000;
	CHECK_EQ_INT(lm_open_root(root, 1, 0, &s, &e), 0);
	for (int i = 0; i < n; i++) {
		char rec[1000];
		memset(rec, 'r', sizeof rec);
		snprintf(rec, 32, "rec %d", i + 1);
		if (lr_store_append(s, "sessions/c", (uint64_t)i, rec, sizeof rec, &e))
			break;
	}
	lr_store_close(s);
	/* the used part of the file: last page number from LMDB */
	MDB_env *env;
	MDB_envinfo info;
	MDB_stat st;
	mdb_env_create(&env);
	mdb_env_set_maxdbs(env, 8);
	CHECK_EQ_INT(mdb_env_open(env, root, MDB_RDONLY, 0600), 0);
	mdb_env_info(env, &info);
	mdb_env_stat(env, &st);
	mdb_env_close(env);
	size_t used = (info.me_last_pgno + 1) * st.ms_psize;
	size_t from = used / 3 / st.ms_psize * st.ms_psize, to = 2 * used / 3;
	snprintf(path, sizeof path, "%s/data.mdb", root);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	unsigned char *zero = calloc(1, to - from);
	CHECK(pwrite(fd, zero, to - from, (off_t)from) == (ssize_t)(to - from));
	free(zero);
	close(fd);
	int rc = lm_open_root(root, 1, 0, &s, &e);
	if (rc) {
		CHECK_EQ_INT(rc, LR_ECORRUPT);
		return;
	}
	struct verify v = { 0, 0 };
	uint64_t tip = 0;
	rc = lr_store_tip(s, "sessions/c", &tip, &e);
	if (rc == 0)
		rc = lr_store_read(s, "sessions/c", 1, 0, verify_cb, &v, &e);
	CHECK_EQ_INT(rc, LR_ECORRUPT);
	CHECK(strstr(e.msg, "'sessions/c'") != NULL);
	fprintf(stderr, "# zeroed pages: %s (after %llu good records)\n", e.msg,
		(unsigned long long)v.n);
	CHECK_EQ_INT(v.bad, 0);
	lr_store_close(s);
}

static void rm_rf(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "holder") == 0)
		return holder_main(argv[2], argv[3]);
	if (argc == 5 && strcmp(argv[1], "appender") == 0)
		return appender_main(argv[2], argv[3], atoi(argv[4]));
	if (argc == 3 && strcmp(argv[1], "grower") == 0)
		return grower_main(argv[2]);
	if (argc == 3 && strcmp(argv[1], "opener") == 0)
		return opener_main(argv[2]);
	if (argc == 4 && strcmp(argv[1], "poweroff") == 0)
		return poweroff_main(argv[2], argv[3]);
	if (argc == 5 && strcmp(argv[1], "filler") == 0)
		return filler_main(argv[2], argv[3], (unsigned)atoi(argv[4]));
	small = getenv("ASAN_OPTIONS") != NULL;
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/lr-lmdb-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	struct conformance h = { "lmdb", lm_open, lm_second, lm_spawn_holder, NULL, small, NULL };
	conformance_run(&h);
	int durable = 1;
	struct conformance hd = { "lmdb-durable", lm_open, lm_second, lm_spawn_holder, &durable,
				  small, NULL };
	conformance_run(&hd);
	RUN(durable_group_commit_and_reopen);
	RUN(two_processes_one_root);
	RUN(map_grows_64mib_record);
	RUN(map_resized_by_another_process);
	RUN(smaller_map_opened_beside_does_not_truncate);
	RUN(close_flushes_queue);
	RUN(corrupt_tip_entry_is_named);
	RUN(garbage_data_file);
	RUN(zeroed_pages_are_detected);
	RUN(power_loss_replays_the_log);
	RUN(power_loss_skips_a_torn_slot);
	RUN(power_loss_with_meta_pages_ahead_of_their_data);
	RUN(power_loss_after_pages_were_rewritten);
	RUN(power_loss_after_the_log_started_again);
	RUN(older_copy_of_data_is_not_given_the_checkpoint);
	RUN(no_boot_id_no_log);
	RUN(log_removed_on_close_and_after_a_kill);
	RUN(written_ahead_map_survives_growth_and_a_kill);
	rm_rf(base);
	return test_summary();
}
