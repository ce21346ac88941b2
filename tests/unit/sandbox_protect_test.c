/*
 * sandbox_protect_test.c — sandbox/protect.c on real trees: what the scan
 * protects (the git files of every kind of repository, the names, pins,
 * read-only modules/, git_readonly), what it refuses (symbolic links, the
 * caps), placeholders (made, held, removed only when nobody holds them),
 * the check after a run (moved aside inside repositories only), the answer
 * for the file tools, and the .git file parser.
 */
#include "../../sandbox/internal.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[256];
static char ws[300];

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fprintf(stderr, "# failed: %s\n", cmd);
}

/* A fresh workspace. */
static void fresh(void)
{
	sh("rm -rf '%s' && mkdir -p '%s'", ws, ws);
}

/* A fake git directory at ws/rel: HEAD, objects/info, refs, config, hooks. */
static void gitdir(const char *rel)
{
	sh("cd '%s' && mkdir -p '%s/objects/info' '%s/refs/heads' '%s/hooks' && echo 'ref: refs/heads/m' "
	   "> '%s/HEAD' && echo '[core]' > '%s/config'", ws, rel, rel, rel, rel, rel);
}

static const struct lr_protect_item *item(const struct lr_protect_plan *p, const char *rel)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", ws, rel);
	for (size_t i = 0; i < p->nitems; i++)
		if (strcmp(p->items[i].path, path) == 0)
			return &p->items[i];
	return NULL;
}

static const struct lr_protect_bind *bind_of(const struct lr_protect_plan *p, const char *rel)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", ws, rel);
	for (size_t i = 0; i < p->nbinds; i++)
		if (strcmp(p->binds[i].path, path) == 0)
			return &p->binds[i];
	return NULL;
}

static int scan(const struct lr_protect_opts *o, struct lr_protect_plan *p, struct lr_err *err)
{
	const char *roots[] = { ws };
	int rc = lr_protect_scan(roots, 1, o, p, err);
	if (rc)
		fprintf(stderr, "# scan: %s\n", err->msg);
	return rc;
}

static int exists(const char *rel)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", ws, rel);
	return lstat(path, &st) == 0;
}

TEST(scan_protects_every_repository)
{
	fresh();
	gitdir(".git");
	gitdir("a/b/c/.git");
	gitdir("node_modules/x/.git");
	gitdir(".git/modules/sub"); /* a submodule's git directory */
	sh("cd '%s' && mkdir -p sub && echo 'gitdir: ../.git/modules/sub' > sub/.git", ws);
	sh("cd '%s' && mkdir -p .git/worktrees/w1 && echo ../.. > .git/worktrees/w1/commondir", ws);
	gitdir("fixtures/bare.git"); /* a bare repository */
	sh("cd '%s' && mkdir -p .vscode sub2/.idea && echo x > .envrc && mkdir -p a/b/c/.vscode", ws);
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	static const char *const ro[] = { ".git/config", ".git/hooks", "a/b/c/.git/config",
					  "a/b/c/.git/hooks", "node_modules/x/.git/hooks",
					  ".git/modules/sub/config", ".git/modules/sub/hooks", "sub/.git",
					  ".git/worktrees/w1/commondir", "fixtures/bare.git/config",
					  ".vscode", ".envrc", "a/b/c/.vscode" };
	for (size_t i = 0; i < sizeof ro / sizeof *ro; i++) {
		const struct lr_protect_item *it = item(&p, ro[i]);
		if (!it || it->kind != LR_PROTECT_RO)
			fprintf(stderr, "# not read-only: %s\n", ro[i]);
		CHECK(it && it->kind == LR_PROTECT_RO);
	}
	/* missing ones: placeholders (commondir names the git directory itself) */
	const struct lr_protect_item *it = item(&p, ".git/commondir");
	CHECK(it && it->kind == LR_PROTECT_FILE && strcmp(it->content, ".\n") == 0);
	it = item(&p, ".git/info"); /* no info/: the directory is the placeholder */
	CHECK(it && it->kind == LR_PROTECT_DIR);
	it = item(&p, ".git/objects/info/alternates");
	CHECK(it && it->kind == LR_PROTECT_FILE && strcmp(it->content, "") == 0);
	CHECK(item(&p, ".git/config.worktree") && item(&p, "a/b/c/.git/modules"));
	CHECK(item(&p, ".mcp.json") && item(&p, ".mcp.json")->kind == LR_PROTECT_DIR);
	CHECK(item(&p, ".github") && item(&p, ".github")->kind == LR_PROTECT_DIR);
	/* a linked worktree's git directory reads the common config: no placeholder for its own */
	CHECK(!item(&p, ".git/worktrees/w1/config"));
	CHECK(item(&p, ".git/worktrees/w1/config.worktree"));
	/* names only at the top of the workspace and of repositories */
	CHECK(!item(&p, "sub2/.idea"));
	/* modules/ read-only as a whole, the git directory inside writable again */
	const struct lr_protect_bind *b = bind_of(&p, ".git/modules");
	CHECK(b && !b->writable);
	b = bind_of(&p, ".git/modules/sub");
	CHECK(b && b->writable);
	/* pins: every directory between the root and an item */
	static const char *const pins[] = { ".git", "a", "a/b", "a/b/c", "a/b/c/.git", "sub",
					    ".git/objects", ".git/objects/info", "fixtures/bare.git" };
	for (size_t i = 0; i < sizeof pins / sizeof *pins; i++) {
		b = bind_of(&p, pins[i]);
		if (!b || !b->writable)
			fprintf(stderr, "# not pinned: %s\n", pins[i]);
		CHECK(b && b->writable);
	}
	/* zones: every worktree root; the .git entries known */
	char path[PATH_MAX];
	int zone = 0, known = 0;
	snprintf(path, sizeof path, "%s/a/b/c", ws);
	for (size_t i = 0; i < p.nzones; i++)
		zone |= strcmp(p.zones[i], path) == 0;
	snprintf(path, sizeof path, "%s/sub/.git", ws);
	for (size_t i = 0; i < p.ndotgits; i++)
		known |= strcmp(p.dotgits[i], path) == 0;
	CHECK(zone && known);
	/* a nested repository's missing names are watched, not placeheld */
	snprintf(path, sizeof path, "%s/a/b/c/.envrc", ws);
	int watched = 0;
	for (size_t i = 0; i < p.nwatch; i++)
		watched |= strcmp(p.watch[i], path) == 0;
	CHECK(watched);
	CHECK(!item(&p, "a/b/c/.envrc"));
	lr_protect_plan_release(&p);

	/* git_readonly: each git directory read-only whole, nothing inside listed */
	o.git_readonly = 1;
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	b = bind_of(&p, ".git");
	CHECK(b && !b->writable);
	b = bind_of(&p, "a/b/c/.git");
	CHECK(b && !b->writable);
	CHECK(!item(&p, ".git/config") && !item(&p, ".git/commondir"));
	CHECK(item(&p, "sub/.git") && item(&p, ".vscode"));
	lr_protect_plan_release(&p);
}

TEST(scan_grants_and_names)
{
	fresh();
	gitdir(".git");
	char hooks[PATH_MAX], wsg[PATH_MAX];
	snprintf(hooks, sizeof hooks, "%s/.git/hooks", ws);
	snprintf(wsg, sizeof wsg, "%s", ws);
	/* a grant on .git/hooks opens that; a grant on the workspace opens nothing */
	const char *g1[] = { hooks };
	struct lr_protect_opts o = { .granted = g1, .ngranted = 1 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	CHECK(!item(&p, ".git/hooks") && item(&p, ".git/config"));
	lr_protect_plan_release(&p);
	const char *g2[] = { wsg };
	o.granted = g2;
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	CHECK(item(&p, ".git/hooks") && item(&p, ".git/config") && item(&p, ".vscode"));
	lr_protect_plan_release(&p);
	/* the profile's names join the defaults */
	const char *names[] = { ".tool-versions", "tools/hooks" };
	struct lr_protect_opts o2 = { .names = names, .nnames = 2 };
	CHECK_EQ_INT(scan(&o2, &p, &err), 0);
	CHECK(item(&p, ".tool-versions") && item(&p, "tools"));
	lr_protect_plan_release(&p);
	CHECK_EQ_INT(lr_protect_name_check(".tool-versions"), 0);
	CHECK_EQ_INT(lr_protect_name_check("a/b"), 0);
	static const char *const bad[] = { "", "/abs", "a/../b", "./a", "a//b", "a/", "..", "a b" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		CHECK(lr_protect_name_check(bad[i]) == -EINVAL);
}

TEST(scan_refuses_what_it_cannot_hold)
{
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	/* a symbolic link where a protected entry is */
	fresh();
	gitdir(".git");
	sh("cd '%s' && rm -rf .git/hooks && mkdir hk && ln -s ../hk .git/hooks", ws);
	CHECK_EQ_INT(scan(&o, &p, &err) == LR_EREFUSED, 1);
	CHECK(strstr(err.msg, ".git/hooks") && strstr(err.msg, "symbolic link"));
	CHECK_EQ_INT(p.nitems, 0); /* released */
	fresh();
	gitdir(".git");
	sh("cd '%s' && mv .git/objects objs && ln -s ../objs .git/objects", ws); /* a link on the way */
	CHECK_EQ_INT(scan(&o, &p, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, ".git/objects") && strstr(err.msg, "on the way to"));
	fresh();
	sh("cd '%s' && ln -s /etc .claude", ws);
	CHECK_EQ_INT(scan(&o, &p, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, ".claude") != NULL);
	fresh();
	sh("cd '%s' && mkdir r && ln -s /tmp r/.git", ws);
	CHECK_EQ_INT(scan(&o, &p, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "r/.git") && strstr(err.msg, "symbolic link"));
	/* more entries than the cap: refused, never partial */
	fresh();
	sh("cd '%s' && mkdir -p d && for i in $(seq 1 50); do : > d/f$i; done", ws);
	o.max_entries = 20;
	CHECK_EQ_INT(scan(&o, &p, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "more than 20 entries") && strstr(err.msg, "protect.max_entries"));
	o.max_entries = 100;
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	lr_protect_plan_release(&p);
	o.max_entries = 0;
	/* deeper than the depth cap: refused */
	fresh();
	char deep[PATH_MAX];
	int n = snprintf(deep, sizeof deep, "%s", ws);
	for (int i = 0; i <= LR_PROTECT_MAX_DEPTH; i++)
		n += snprintf(deep + n, sizeof deep - (size_t)n, "/d");
	sh("mkdir -p '%s'", deep);
	CHECK_EQ_INT(scan(&o, &p, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "directories deep") != NULL);
}

TEST(placeholders_are_held_and_removed)
{
	fresh();
	gitdir(".git");
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p, p2;
	struct lr_err err = { "" };
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	struct lr_protect_hold *h = NULL, *h2 = NULL;
	CHECK_EQ_INT(lr_protect_place(&p, &h, &err), 0);
	CHECK(exists(".vscode") && exists(".git/commondir") && exists(".git/info"));
	char path[PATH_MAX], buf[16];
	snprintf(path, sizeof path, "%s/.git/commondir", ws);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 2 && memcmp(buf, ".\n", 2) == 0);
	if (fd >= 0)
		close(fd);
	struct stat st;
	snprintf(path, sizeof path, "%s/.vscode", ws);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0555);
	/* a second run while the first holds them: its scan sees them as placeholders too */
	CHECK_EQ_INT(scan(&o, &p2, &err), 0);
	CHECK(item(&p2, ".vscode") && item(&p2, ".vscode")->kind == LR_PROTECT_DIR);
	CHECK(item(&p2, ".git/commondir") && item(&p2, ".git/commondir")->kind == LR_PROTECT_FILE);
	CHECK_EQ_INT(lr_protect_place(&p2, &h2, &err), 0);
	/* the first ends: the second still holds them, so they stay */
	lr_protect_unplace(h);
	CHECK(exists(".vscode") && exists(".git/commondir"));
	/* the second ends: gone, and the workspace is as it was */
	lr_protect_unplace(h2);
	CHECK(!exists(".vscode") && !exists(".git/commondir") && !exists(".git/info") &&
	      !exists(".github") && !exists(".envrc") && exists(".git/config"));
	lr_protect_plan_release(&p2);
	/* a placeholder someone wrote into (a directory no longer empty) is left */
	CHECK_EQ_INT(lr_protect_place(&p, &h, &err), 0);
	sh("chmod 755 '%s/.idea' && echo x > '%s/.idea/x'", ws, ws);
	lr_protect_unplace(h);
	CHECK(exists(".idea/x") && !exists(".cursor"));
	lr_protect_plan_release(&p);
}

static ino_t ino_of(const char *dir, const char *name)
{
	char path[PATH_MAX + 300];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return lstat(path, &st) == 0 ? st.st_ino : 0;
}

/* The inode of the first entry named d* in dir, or 0. */
static ino_t first_spare(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	ino_t ino = 0;
	while (d && !ino && (e = readdir(d)) != NULL)
		if (e->d_name[0] == 'd')
			ino = ino_of(dir, e->d_name);
	if (d)
		closedir(d);
	return ino;
}

/* Entries named d* in the spare directory at dir. */
static int spare_count(const char *dir)
{
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | grep -c '^d'", dir);
	FILE *f = popen(cmd, "r");
	int n = -1;
	if (f) {
		if (fscanf(f, "%d", &n) != 1)
			n = -1;
		pclose(f);
	}
	return n;
}

/* One place and unplace of the default names; 1 when the workspace is clean after. */
static int one_run(struct lr_protect_hold **h, struct lr_protect_plan *p)
{
	struct lr_protect_opts o = { 0 };
	struct lr_err err = { "" };
	if (scan(&o, p, &err) != 0 || lr_protect_place(p, h, &err) != 0)
		return 0;
	return 1;
}

/* The hook that swaps a spare entry, once, for a non-empty 0555 directory (a planted tasks.json). */
static const char *swap_dir;
static int swapped;
static void swap_in(const char *name)
{
	if (swapped++)
		return;
	sh("cd '%s' && mkdir planted && echo '{}' > planted/tasks.json && chmod 555 planted && "
	   "rmdir '%s' && mv planted '%s'", swap_dir, name, name);
}

TEST(placeholders_reused_from_the_spare)
{
	char spare[PATH_MAX];
	snprintf(spare, sizeof spare, "%s/luarig-spare-%lu", root, (unsigned long)geteuid());
	lr__protect_spare_parent = root;
	lr__protect_spare_reset();
	sh("rm -rf '%s'", spare);
	fresh();
	struct lr_protect_plan p;
	struct lr_protect_hold *h = NULL;
	/* the first run makes them; given back, they wait in a 0700 directory of ours */
	CHECK(one_run(&h, &p));
	CHECK(exists(".vscode") && exists(".github"));
	lr_protect_unplace(h);
	lr_protect_plan_release(&p);
	CHECK(!exists(".vscode") && !exists(".github") && !exists(".envrc"));
	struct stat st;
	CHECK(lstat(spare, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 &&
	      st.st_uid == geteuid());
	CHECK_EQ_INT(spare_count(spare), 8);
	/* the next run takes them from there (the same inodes), empty and 0555 */
	ino_t d0 = first_spare(spare);
	CHECK(d0 != 0);
	CHECK(one_run(&h, &p));
	CHECK_EQ_INT(spare_count(spare), 0);
	char path[PATH_MAX + 64];
	int seen = 0;
	for (const char *const *n = lr_protect_default_names; *n; n++) {
		char top[64];
		snprintf(top, sizeof top, "%.*s", (int)strcspn(*n, "/"), *n);
		snprintf(path, sizeof path, "%s/%s", ws, top);
		seen += lstat(path, &st) == 0 && st.st_ino == d0;
		CHECK(lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0555);
	}
	CHECK_EQ_INT(seen, 1);
	/* written into while held: not given back (it stays, as before) */
	sh("chmod 755 '%s/.idea' && echo x > '%s/.idea/x'", ws, ws);
	lr_protect_unplace(h);
	lr_protect_plan_release(&p);
	CHECK(exists(".idea/x") && !exists(".vscode"));
	CHECK_EQ_INT(spare_count(spare), 7);
	/* an entry that is not an empty 0555 directory of ours is never lent */
	fresh();
	sh("cd '%s' && rm -rf d* && mkdir d1 d2 d3 && echo '{}' > d1/tasks.json && chmod 555 d1 && "
	   "chmod 755 d2 && chmod 555 d3 && chown 65534 d3", spare);
	ino_t d1 = ino_of(spare, "d1"), d2 = ino_of(spare, "d2"),
	      d3 = ino_of(spare, "d3");
	CHECK(one_run(&h, &p));
	CHECK(ino_of(ws, ".vscode") != d1 && ino_of(ws, ".vscode") != d2 &&
	      ino_of(ws, ".vscode") != d3);
	CHECK(ino_of(spare, "d1") == d1 && ino_of(spare, "d2") == d2 &&
	      ino_of(spare, "d3") == d3);
	lr_protect_unplace(h);
	lr_protect_plan_release(&p);
	/* an entry swapped under its name after its check (a command that can write the spare):
	   what arrives in the workspace is moved out again, and the placeholder made afresh */
	fresh();
	sh("cd '%s' && rm -rf d* x* && mkdir -m 555 d5", spare);
	swap_dir = spare;
	lr__protect_spare_hook = swap_in;
	CHECK(one_run(&h, &p));
	lr__protect_spare_hook = NULL;
	CHECK(swapped == 1);
	snprintf(path, sizeof path, "%s/.vscode/tasks.json", ws);
	CHECK(lstat(path, &st) != 0);
	CHECK(exists(".vscode") && exists(".idea"));
	char cmd[PATH_MAX * 2];
	snprintf(cmd, sizeof cmd, "test -f %s/x*/tasks.json", spare);
	CHECK(system(cmd) == 0);
	lr_protect_unplace(h);
	lr_protect_plan_release(&p);
	CHECK(!exists(".vscode"));
	/* a spare directory planted by another user, or open to others, or a symbolic
	   link: never used (nothing taken from it, nothing given to it) */
	for (int i = 0; i <= 3; i++) {
		lr__protect_spare_reset();
		sh("rm -rf '%s' '%s.real'", spare, spare);
		if (i < 3) {
			sh("mkdir -m 700 '%s' && mkdir -m 555 '%s/d0'", spare, spare);
			if (i == 0)
				sh("chown 65534 '%s'", spare);
			else
				sh("chmod %s '%s'", i == 1 ? "0777" : "0750", spare);
		} else {
			sh("mkdir -m 700 '%s.real' && mkdir -m 555 '%s.real/d0' && ln -s '%s.real' '%s'",
			   spare, spare, spare, spare);
		}
		d0 = ino_of(spare, "d0");
		fresh();
		CHECK(one_run(&h, &p));
		CHECK(exists(".vscode") && ino_of(ws, ".vscode") != d0 &&
		      ino_of(ws, ".idea") != d0);
		lr_protect_unplace(h);
		lr_protect_plan_release(&p);
		CHECK(!exists(".vscode") && !exists(".idea"));
		CHECK_EQ_INT(spare_count(spare), 1);
	}
	sh("rm -rf '%s' '%s.real'", spare, spare);
	lr__protect_spare_reset();
}

/* Moves lines of the check after the run into a string. */
static int after(struct lr_protect_plan *p, char *out, size_t n)
{
	struct lr_protect_opts o = { 0 };
	struct lr_buf moved;
	lr_buf_init(&moved, 1 << 16);
	struct lr_err err = { "" };
	int rc = lr_protect_after(p, &o, &moved, &err);
	snprintf(out, n, "%s", moved.data ? moved.data : "");
	lr_buf_release(&moved);
	return rc;
}

TEST(after_moves_new_repositories_aside)
{
	fresh();
	gitdir("r/.git");
	gitdir("r/vendor/lib/.git");
	sh("cd '%s' && mkdir -p r/src r/old plain", ws);
	sh("cd '%s' && mkdir -p r/old && echo 'gitdir: ../x' > r/old/.git", ws); /* known before */
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	char out[8192];
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	/* what a command leaves: a new repository in r (a .git dir, a .git file, a bare one),
	   a new one outside any repository, and a protected name at the top of a nested one */
	gitdir("r/evil/.git");
	sh("cd '%s' && mkdir -p r/src/deep && echo 'gitdir: /tmp/x' > r/src/deep/.git", ws);
	gitdir("r/src/bare");
	gitdir("plain/new/.git");
	sh("cd '%s' && mkdir -p r/vendor/lib/.vscode", ws);
	CHECK_EQ_INT(after(&p, out, sizeof out), 0);
	CHECK(!exists("r/evil/.git") && exists("r/evil/.git.luarig-quarantine"));
	CHECK(!exists("r/src/deep/.git") && exists("r/src/deep/.git.luarig-quarantine"));
	CHECK(!exists("r/src/bare/HEAD") && exists("r/src/bare/HEAD.luarig-quarantine"));
	CHECK(!exists("r/vendor/lib/.vscode") && exists("r/vendor/lib/.vscode.luarig-quarantine"));
	/* what was there before, and a repository outside every repository, stay */
	CHECK(exists("r/.git/HEAD") && exists("r/vendor/lib/.git") && exists("r/old/.git"));
	CHECK(exists("plain/new/.git"));
	CHECK(strstr(out, "r/evil/.git' moved to") && strstr(out, "git on the host"));
	/* again: a second quarantine of the same name does not overwrite the first */
	gitdir("r/evil/.git");
	CHECK_EQ_INT(after(&p, out, sizeof out), 0);
	CHECK(exists("r/evil/.git.luarig-quarantine-2"));
	lr_protect_plan_release(&p);
}

TEST(after_in_a_workspace_inside_a_repository)
{
	/* the workspace is a directory of a repository: a .git anywhere in it is moved aside */
	char outer[512];
	snprintf(outer, sizeof outer, "%s/outer", root);
	sh("rm -rf '%s' && mkdir -p '%s/.git' '%s/ws'", outer, outer, outer);
	char w[600];
	snprintf(w, sizeof w, "%s/ws", outer);
	const char *roots[] = { w };
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_protect_scan(roots, 1, &o, &p, &err), 0);
	CHECK(p.nzones == 1 && strcmp(p.zones[0], w) == 0);
	sh("mkdir -p '%s/.git'", w);
	struct lr_buf moved;
	lr_buf_init(&moved, 1 << 16);
	CHECK_EQ_INT(lr_protect_after(&p, &o, &moved, &err), 0);
	char q[700];
	snprintf(q, sizeof q, "%s/.git.luarig-quarantine", w);
	struct stat st;
	CHECK(stat(q, &st) == 0);
	lr_buf_release(&moved);
	lr_protect_plan_release(&p);
}

/* Waits until the file system's coarse clock has moved on (20 ms), so a change
 * made next cannot carry the same ctime as one made before (racy ctimes are
 * what lr__protect_recent_ns guards against outside tests). */
static void next_tick(void)
{
	struct timespec a, b;
	clock_gettime(CLOCK_REALTIME_COARSE, &a);
	do {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
		clock_gettime(CLOCK_REALTIME_COARSE, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) < 20000000LL);
}

/* A later walk reuses what did not change, and still sees what did. */
TEST(walks_reuse_the_tree)
{
	lr__protect_recent_ns = 0; /* these directories are seconds old at most */
	fresh();
	gitdir(".git");
	sh("cd '%s' && mkdir -p a/b/c d/e/f g && : > a/b/c/x", ws);
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p1, p2, p3;
	struct lr_err err = { "" };
	char out[4096];
	next_tick(); /* (a ctime finer than the coarse clock would count as changed during the walk) */
	CHECK_EQ_INT(scan(&o, &p1, &err), 0);
	size_t all = p1.dirs_read;
	CHECK(all >= 10);
	/* nothing changed: nothing read again */
	o.cache = p1.tree;
	CHECK_EQ_INT(scan(&o, &p2, &err), 0);
	CHECK_EQ_INT(p2.dirs_read, 0);
	CHECK_EQ_INT(p2.entries, p1.entries);
	CHECK_EQ_INT(p2.nitems, p1.nitems);
	lr_protect_plan_release(&p2);
	/* a repository cloned deep inside meanwhile: read again there only, and protected */
	next_tick();
	gitdir("d/e/f/lib/.git");
	CHECK_EQ_INT(scan(&o, &p2, &err), 0);
	CHECK(p2.dirs_read > 0 && p2.dirs_read < all);
	CHECK(item(&p2, "d/e/f/lib/.git/config") && item(&p2, "d/e/f/lib/.git/hooks"));
	/* the check after a run reuses the scan's tree and finds what the command made */
	next_tick();
	sh("cd '%s' && mkdir -p a/b/c/new && mkdir -p a/b/c/new/.git && : > g/y", ws);
	CHECK_EQ_INT(after(&p2, out, sizeof out), 0);
	CHECK(!exists("a/b/c/new/.git") && exists("a/b/c/new/.git.luarig-quarantine"));
	CHECK(p2.dirs_read > 0 && p2.dirs_read < all);
	/* a directory replaced by another of the same name is read again (its parent moved) */
	lr_protect_plan_release(&p1);
	o.cache = p2.tree;
	next_tick();
	sh("cd '%s' && rm -rf d/e && mkdir -p d/e/f2/.git && touch d/e/f2/.git/HEAD", ws);
	CHECK_EQ_INT(scan(&o, &p3, &err), 0);
	CHECK(item(&p3, "d/e/f2/.git/config") && !item(&p3, "d/e/f/lib/.git/config"));
	lr_protect_plan_release(&p3);
	lr_protect_plan_release(&p2);
	/* recent directories are never reused (here: everything changed within the hour) */
	lr__protect_recent_ns = 3600LL * 1000000000LL;
	o.cache = NULL;
	CHECK_EQ_INT(scan(&o, &p1, &err), 0);
	o.cache = p1.tree;
	CHECK_EQ_INT(scan(&o, &p2, &err), 0);
	CHECK_EQ_INT(p2.dirs_read, p1.dirs_read);
	lr_protect_plan_release(&p2);
	lr_protect_plan_release(&p1);
	lr__protect_recent_ns = 2000000000LL;
}

TEST(file_tools_answer)
{
	fresh();
	gitdir(".git");
	gitdir("vendor/lib/.git");
	gitdir("fixtures/bare.git");
	sh("cd '%s' && mkdir -p objs/objects objs/refs src", ws);
	struct lr_protect_opts o = { 0 };
	struct lr_err why = { "" };
	static const char *const refused[] = {
		".git/config", ".git/hooks/pre-commit", "vendor/lib/.git/commondir", "x/y/.git",
		"new/.git/config", ".vscode/tasks.json", ".envrc", ".claude/settings.json",
		".github/workflows/x.yml", ".mcp.json", ".idea/a.xml", ".devcontainer/d.json",
		".cursor/mcp.json", "vendor/lib/.envrc", "fixtures/bare.git/config",
		"fixtures/bare.git/hooks/post-checkout", "objs/HEAD",
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
		int rc = lr_protect_path(ws, refused[i], &o, &why);
		if (rc != 1)
			fprintf(stderr, "# not refused: %s\n", refused[i]);
		CHECK_EQ_INT(rc, 1);
	}
	static const char *const fine[] = { "src/a.c", "README.md", "vendor/lib/src.c",
					    ".github/CODEOWNERS", "docs/.envrc.md", "sub/.vscode/x",
					    ".gitignore", "a.git/x", "objs/x" };
	for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
		int rc = lr_protect_path(ws, fine[i], &o, &why);
		if (rc != 0)
			fprintf(stderr, "# refused: %s: %s\n", fine[i], why.msg);
		CHECK_EQ_INT(rc, 0);
	}
	CHECK_EQ_INT(lr_protect_path(ws, "vendor/lib/.git/commondir", &o, &why), 1);
	CHECK(strstr(why.msg, "vendor/lib/.git") != NULL);
	CHECK_EQ_INT(lr_protect_path(ws, ".vscode/tasks.json", &o, &why), 1);
	CHECK(strstr(why.msg, "'.vscode'") && strstr(why.msg, "protected list"));
	CHECK_EQ_INT(lr_protect_path(ws, "fixtures/bare.git/config", &o, &why), 1);
	CHECK(strstr(why.msg, "fixtures/bare.git") && strstr(why.msg, "git directory"));
	/* a file a repository's config includes from its worktree (here, the nested one's) */
	sh("cd '%s' && printf '[include]\\n\\tpath = ../conf/lib.gitconfig\\n' >> vendor/lib/.git/config", ws);
	CHECK_EQ_INT(lr_protect_path(ws, "vendor/lib/conf/lib.gitconfig", &o, &why), 1);
	CHECK(strstr(why.msg, "'vendor/lib'") && strstr(why.msg, "includes it"));
	CHECK_EQ_INT(lr_protect_path(ws, "vendor/lib/conf/other", &o, &why), 0);
	const char *names[] = { ".tool-versions" };
	struct lr_protect_opts o2 = { .names = names, .nnames = 1 };
	CHECK_EQ_INT(lr_protect_path(ws, ".tool-versions", &o, &why), 0);
	CHECK_EQ_INT(lr_protect_path(ws, ".tool-versions", &o2, &why), 1);
}

static char got[8][256];
static int ngot;

static void collect(void *arg, enum lr_protect_key key, const char *value)
{
	(void)arg;
	if (ngot < 8)
		snprintf(got[ngot++], sizeof got[0], "%s=%s", key == LR_PROTECT_HOOKSPATH ? "hooks" : "inc", value);
}

static int cfg(const char *text)
{
	ngot = 0;
	return lr_protect_config_paths(text, strlen(text), collect, NULL);
}

TEST(config_reader)
{
	CHECK_EQ_INT(cfg("[core]\n\thooksPath = .husky/_\n[include]\n\tpath = ../common.gitconfig\n"), 0);
	CHECK_EQ_INT(ngot, 2);
	CHECK_EQ_STR(got[0], "hooks=.husky/_");
	CHECK_EQ_STR(got[1], "inc=../common.gitconfig");
	/* case, quotes, escapes, comments, continuation, the old [section.sub] form */
	CHECK_EQ_INT(cfg("[CORE] HOOKSPATH = \"a b\"c # x\n[includeIf \"gitdir:/x/\"]\n path = p\\\nq ; c\n"
			 "[includeIf \"onbranch:m\"]\npath=r\n[core \"sub\"]\nhookspath = no\n[other]\npath = no\n"), 0);
	CHECK_EQ_INT(ngot, 3);
	CHECK_EQ_STR(got[0], "hooks=a bc");
	CHECK_EQ_STR(got[1], "inc=pq");
	CHECK_EQ_STR(got[2], "inc=r");
	/* a line git refuses ends the reading; what came before is given */
	CHECK_EQ_INT(cfg("[include]\npath = a\n= b\npath = c\n"), -EINVAL);
	CHECK_EQ_INT(ngot, 1);
	CHECK_EQ_INT(cfg("[include]\npath = \"open\n"), -EINVAL);
	CHECK_EQ_INT(cfg("[core]\nbare\n"), 0);
	CHECK_EQ_INT(ngot, 0);
}

TEST(scan_follows_the_config)
{
	fresh();
	gitdir(".git");
	sh("cd '%s' && printf '[include]\\n\\tpath = ../common.gitconfig\\n\\tpath = ../missing.gitconfig\\n"
	   "[core]\\n\\thooksPath = .git/myhooks\\n' >> .git/config && printf '[include]\\n\\tpath = deeper.gitconfig\\n' "
	   "> common.gitconfig && : > deeper.gitconfig && mkdir -p .husky", ws);
	struct lr_protect_opts o = { 0 };
	struct lr_protect_plan p;
	struct lr_err err = { "" };
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	CHECK(item(&p, "common.gitconfig") && item(&p, "common.gitconfig")->kind == LR_PROTECT_RO);
	CHECK(item(&p, "deeper.gitconfig")); /* included by the included file */
	CHECK(item(&p, ".git/myhooks") && item(&p, ".git/myhooks")->kind == LR_PROTECT_DIR);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/missing.gitconfig", ws);
	int watched = 0;
	for (size_t i = 0; i < p.nwatch; i++)
		watched |= strcmp(p.watch[i], path) == 0;
	CHECK(watched);
	lr_protect_plan_release(&p);
	/* hooks the config keeps in the worktree are files of the project: not held */
	sh("cd '%s' && git config --file .git/config core.hooksPath .husky", ws);
	CHECK_EQ_INT(scan(&o, &p, &err), 0);
	CHECK(!item(&p, ".husky"));
	lr_protect_plan_release(&p);
}

TEST(gitfile_parser)
{
	char out[64];
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: ../x\n", 13, out, sizeof out), 0);
	CHECK_EQ_STR(out, "../x");
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: /a b\r\n", 14, out, sizeof out), 0);
	CHECK_EQ_STR(out, "/a b");
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: ", 8, out, sizeof out), -EINVAL);
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: \n", 9, out, sizeof out), -EINVAL);
	CHECK_EQ_INT(lr_protect_gitfile("gitdir:x", 8, out, sizeof out), -EINVAL);
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: a\nb", 11, out, sizeof out), -EINVAL);
	CHECK_EQ_INT(lr_protect_gitfile("gitdir: a\0b", 11, out, sizeof out), -EINVAL);
	char big[100];
	memset(big, 'a', sizeof big);
	memcpy(big, "gitdir: ", 8);
	CHECK_EQ_INT(lr_protect_gitfile(big, sizeof big, out, sizeof out), -EINVAL);
}

int main(void)
{
	snprintf(root, sizeof root, "/tmp/sandbox_protect_test.XXXXXX");
	if (!mkdtemp(root))
		return 1;
	snprintf(ws, sizeof ws, "%s/ws", root);
	lr__protect_spare_parent = root; /* not the user's own spare in /tmp */
	RUN(scan_protects_every_repository);
	RUN(scan_grants_and_names);
	RUN(scan_refuses_what_it_cannot_hold);
	RUN(placeholders_are_held_and_removed);
	RUN(placeholders_reused_from_the_spare);
	RUN(after_moves_new_repositories_aside);
	RUN(after_in_a_workspace_inside_a_repository);
	RUN(walks_reuse_the_tree);
	RUN(file_tools_answer);
	RUN(config_reader);
	RUN(scan_follows_the_config);
	RUN(gitfile_parser);
	sh("rm -rf '%s'", root);
	return test_summary();
}
