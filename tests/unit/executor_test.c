/*
 * executor_test.c — the spec an executor builds for one run: the mount
 * view, the Landlock rules, protected paths found at depth, the scrubbed
 * environment, proxy variables, network and command refusals, argv[0]
 * resolution. Pure: nothing is spawned.
 */
#include "../../host/host.h"
#include "../../sandbox/sandbox.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256]; /* a scratch dir for the whole run */
static char ws[300], home[300], tmp[300];

static void mkdirs(const char *path)
{
	char buf[512];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, 0700);
			*p = '/';
		}
	}
	mkdir(buf, 0700);
}

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

static void profile_init(struct lr_profile *p)
{
	memset(p, 0, sizeof *p);
	p->workspace_root = ws;
	p->workspace_read = LR_CAP_ALLOW;
	p->workspace_write = LR_CAP_ALLOW;
	p->host_read = LR_CAP_ALLOW;
	p->host_write = LR_CAP_DENY;
	p->network = LR_CAP_DENY;
	p->command = LR_CAP_ALLOW;
}

static char *host_env[] = { "PATH=/usr/bin:/bin",
			    "LANG=C.UTF-8",
			    "LC_ALL=C",
			    "TERM=xterm",
			    "HOME=/root",
			    "GITHUB_TOKEN=ghp_secret",
			    "AWS_SECRET_ACCESS_KEY=aws",
			    "AWS_REGION=eu",
			    "SSH_AUTH_SOCK=/run/agent",
			    "MY_PASSWORD_FILE=x",
			    "DEPLOY_KEY=k",
			    "FOO=bar",
			    NULL };

static void ctx_init(struct lr_exec_ctx *c)
{
	memset(c, 0, sizeof *c);
	c->exec_id = 7;
	c->home = home;
	c->tmpdir = tmp;
	c->host_env = host_env;
}

static struct lr_sbx_caps caps = { .tier = LR_TIER_A };

static const struct lr_sbx_mount *find_mount(const struct lr_sbx_spec *s, const char *dst)
{
	for (size_t i = 0; i < s->nmounts; i++)
		if (strcmp(s->mounts[i].dst, dst) == 0)
			return &s->mounts[i];
	return NULL;
}

static uint64_t rule_of(const struct lr_sbx_spec *s, const char *path)
{
	uint64_t acc = 0;
	for (size_t i = 0; i < s->nrules; i++)
		if (strcmp(s->rules[i].path, path) == 0)
			acc |= s->rules[i].access;
	return acc;
}

static int has_ro(const struct lr_sbx_spec *s, const char *path)
{
	for (size_t i = 0; i < s->nreadonly; i++)
		if (strcmp(s->readonly[i], path) == 0)
			return 1;
	return 0;
}

static const char *env_of(const struct lr_sbx_spec *s, const char *name)
{
	size_t n = strlen(name);
	for (char **e = s->envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static char *argv_true[] = { "true", NULL };

static int build(const struct lr_profile *p, const struct lr_exec_request *r,
		 const struct lr_exec_ctx *c, struct lr_sbx_spec *s, struct lr_err *err)
{
	int rc = lr_sbx_build_spec(p, &caps, r, c, s, err);
	if (rc)
		fprintf(stderr, "# build: %s\n", err->msg);
	return rc;
}

TEST(view_writable_workspace)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	struct lr_exec_request r = { .argv = argv_true };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	const struct lr_sbx_mount *m = find_mount(&s, "/usr");
	CHECK(m && !m->writable && strcmp(m->src, "/usr") == 0);
	CHECK(find_mount(&s, "/etc") && !find_mount(&s, "/etc")->writable);
	m = find_mount(&s, ws);
	CHECK(m && m->writable);
	CHECK(find_mount(&s, home) && find_mount(&s, home)->writable);
	CHECK(find_mount(&s, tmp) && find_mount(&s, tmp)->writable);
	CHECK(!find_mount(&s, "/root"));
	CHECK(!find_mount(&s, "/home"));
	uint64_t usr = rule_of(&s, "/usr");
	CHECK(usr & LANDLOCK_ACCESS_FS_EXECUTE);
	CHECK(usr & LANDLOCK_ACCESS_FS_READ_FILE);
	CHECK(!(usr & LANDLOCK_ACCESS_FS_WRITE_FILE));
	CHECK(!(usr & LANDLOCK_ACCESS_FS_REFER));
	uint64_t w = rule_of(&s, ws);
	CHECK(w & LANDLOCK_ACCESS_FS_WRITE_FILE);
	CHECK(w & LANDLOCK_ACCESS_FS_REFER);
	CHECK(w & LANDLOCK_ACCESS_FS_MAKE_DIR);
	CHECK(w & LANDLOCK_ACCESS_FS_REMOVE_FILE);
	CHECK(rule_of(&s, home) & LANDLOCK_ACCESS_FS_REFER);
	CHECK(!(rule_of(&s, "/proc") & LANDLOCK_ACCESS_FS_WRITE_FILE));
	CHECK_EQ_STR(s.cwd, ws);
	CHECK(s.argv && s.argv[0] && s.argv[0][0] == '/');
	CHECK(strstr(s.argv[0], "/true") != NULL);
	CHECK_EQ_INT(s.net, LR_SBX_NET_NONE);
	CHECK_EQ_INT(s.unconfined, 0);
	CHECK_EQ_INT(s.exec_id, 7);
	CHECK_EQ_INT(s.tier, LR_TIER_A);
	CHECK(s.limits.fsize_bytes == 1ull << 30);
	CHECK(s.limits.nproc == 512);
	CHECK(s.limits.nofile == 1024);
	CHECK(s.limits.as_bytes == 0);
	CHECK(s.limits.memory_bytes == 2ull << 30);
	/* /tmp and /dev/shm: a quarter of the memory limit, one file per 8 KiB */
	CHECK(s.limits.tmpfs_bytes == 512ull << 20);
	CHECK(s.limits.tmpfs_inodes == 65536);
	CHECK(s.cgroup == NULL); /* caps.cgroup is 0 */
	lr_sbx_spec_release(&s);
}

TEST(view_readonly_workspace_and_no_host)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	char *argv_abs[] = { "/usr/bin/true", NULL };
	struct lr_exec_request r = { .argv = argv_abs };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	p.workspace_write = LR_CAP_DENY;
	ctx_init(&c);
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	const struct lr_sbx_mount *m = find_mount(&s, ws);
	CHECK(m && !m->writable);
	CHECK(!(rule_of(&s, ws) & LANDLOCK_ACCESS_FS_WRITE_FILE));
	CHECK(rule_of(&s, ws) & LANDLOCK_ACCESS_FS_READ_FILE);
	CHECK_EQ_INT(s.nreadonly, 0); /* nothing writable to protect inside the workspace */
	lr_sbx_spec_release(&s);

	/* Workspace neither read nor written: not in the view at all. */
	p.workspace_read = LR_CAP_DENY;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(!find_mount(&s, ws));
	CHECK_EQ_STR(s.cwd, home);
	lr_sbx_spec_release(&s);

	/* No host read: no host roots, so a bare name is not found. */
	profile_init(&p);
	p.host_read = LR_CAP_DENY;
	struct lr_exec_request r2 = { .argv = argv_true };
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r2, &c, &s, &err), LR_ENOTFOUND);
	CHECK(strstr(err.msg, "'true' not found") != NULL);
	CHECK(s.argv == NULL && s.nmounts == 0);
}

static int has_bind(const struct lr_sbx_spec *s, const char *path, int writable)
{
	const struct lr_sbx_mount *m = find_mount(s, path);
	return m && m->writable == writable && strcmp(m->src, path) == 0;
}

TEST(protected_paths_at_depth)
{
	char p1[512];
	const char *dirs[] = { "/.git/hooks", "/.git/objects/info", "/.git/refs", "/a/b/c/.git/hooks",
			       "/a/b/c/.git/objects", "/a/b/c/.git/refs", "/node_modules/x/.git/hooks",
			       "/.vscode", "/.github/workflows", "/sub/.idea" };
	for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
		snprintf(p1, sizeof p1, "%s%s", ws, dirs[i]);
		mkdirs(p1);
	}
	const char *files[] = { "/.git/config", "/.git/HEAD", "/a/b/c/.git/config", "/a/b/c/.git/HEAD",
				"/.envrc" };
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		snprintf(p1, sizeof p1, "%s%s", ws, files[i]);
		touch(p1);
	}
	/* A symlink where a protected name is could be replaced: the run is refused, saying so. */
	snprintf(p1, sizeof p1, "%s/.claude", ws);
	symlink("/etc", p1);

	struct lr_profile p;
	struct lr_exec_ctx c;
	struct lr_exec_request r = { .argv = argv_true };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, ".claude") && strstr(err.msg, "symbolic link"));
	snprintf(p1, sizeof p1, "%s/.claude", ws);
	unlink(p1);

	struct lr_protect_plan plan;
	memset(&plan, 0, sizeof plan);
	c.plan = &plan;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	/* the git files of every repository at any depth (node_modules too), the names at the top */
	const char *want[] = { "/.git/hooks", "/.git/config", "/a/b/c/.git/hooks",
			       "/a/b/c/.git/config", "/node_modules/x/.git/hooks", "/.vscode",
			       "/.github/workflows", "/.envrc", "/.git/commondir",
			       "/.git/objects/info/alternates", "/.git/info", "/.git/modules",
			       "/a/b/c/.git/commondir", "/.mcp.json", "/.claude" };
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		snprintf(p1, sizeof p1, "%s%s", ws, want[i]);
		if (!has_ro(&s, p1))
			fprintf(stderr, "# missing protected %s\n", p1);
		CHECK(has_ro(&s, p1));
	}
	CHECK_EQ_INT(s.nreadonly, plan.nitems);
	snprintf(p1, sizeof p1, "%s/sub/.idea", ws); /* names only at the top and of repositories */
	CHECK(!has_ro(&s, p1));
	/* pins: no directory on the way to a protected path can be renamed away */
	const char *pins[] = { "/.git", "/a", "/a/b", "/a/b/c", "/a/b/c/.git", "/.github",
			       "/.git/objects", "/.git/objects/info" };
	for (size_t i = 0; i < sizeof pins / sizeof *pins; i++) {
		snprintf(p1, sizeof p1, "%s%s", ws, pins[i]);
		if (!has_bind(&s, p1, 1))
			fprintf(stderr, "# not pinned %s\n", p1);
		CHECK(has_bind(&s, p1, 1));
	}
	lr_sbx_spec_release(&s);
	lr_protect_plan_release(&plan);
	c.plan = NULL;

	/* A write grant on .git/hooks opens exactly that one; one on the workspace opens none. */
	char hooks[512];
	snprintf(hooks, sizeof hooks, "%s/.git/hooks", ws);
	const char *gw[] = { hooks };
	c.granted_write = gw;
	c.ngranted_write = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(!has_ro(&s, hooks));
	snprintf(p1, sizeof p1, "%s/.git/config", ws);
	CHECK(has_ro(&s, p1));
	lr_sbx_spec_release(&s);
	const char *gws[] = { ws };
	c.granted_write = gws;
	p.workspace_write = LR_CAP_GATED;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(has_ro(&s, hooks) && has_ro(&s, p1));
	lr_sbx_spec_release(&s);
	p.workspace_write = LR_CAP_ALLOW;

	/* git_readonly: each git directory read-only as a whole */
	ctx_init(&c);
	p.git_readonly = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	snprintf(p1, sizeof p1, "%s/.git", ws);
	CHECK(has_bind(&s, p1, 0));
	snprintf(p1, sizeof p1, "%s/a/b/c/.git", ws);
	CHECK(has_bind(&s, p1, 0));
	CHECK(!has_ro(&s, hooks));
	lr_sbx_spec_release(&s);
	p.git_readonly = 0;

	/* Without a mount view (tier B) a writable workspace is refused; a read-only one runs. */
	struct lr_sbx_caps b = { .tier = LR_TIER_B };
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &b, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "protected_files") != NULL);
	p.workspace_write = LR_CAP_DENY;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &b, &r, &c, &s, &err), 0);
	lr_sbx_spec_release(&s);

	/* A read-only workspace has nothing to protect. */
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_INT(s.nreadonly, 0);
	lr_sbx_spec_release(&s);
}

TEST(env_scrub)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	char *env[] = { "OPENAI_API_KEY=passed", "EXTRA=1", "LANG", "HOME=/evil", NULL };
	struct lr_exec_request r = { .argv = argv_true, .env = env };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_STR(env_of(&s, "PATH"), "/usr/bin:/bin");
	CHECK_EQ_STR(env_of(&s, "LC_ALL"), "C");
	CHECK_EQ_STR(env_of(&s, "TERM"), "xterm");
	CHECK(env_of(&s, "LANG") == NULL); /* removed by the request */
	CHECK(env_of(&s, "GITHUB_TOKEN") == NULL);
	CHECK(env_of(&s, "AWS_SECRET_ACCESS_KEY") == NULL);
	CHECK(env_of(&s, "AWS_REGION") == NULL);
	CHECK(env_of(&s, "SSH_AUTH_SOCK") == NULL);
	CHECK(env_of(&s, "MY_PASSWORD_FILE") == NULL);
	CHECK(env_of(&s, "DEPLOY_KEY") == NULL);
	CHECK(env_of(&s, "FOO") == NULL); /* not on the allow-list */
	CHECK_EQ_STR(env_of(&s, "OPENAI_API_KEY"), "passed"); /* passed explicitly */
	CHECK_EQ_STR(env_of(&s, "EXTRA"), "1");
	CHECK_EQ_STR(env_of(&s, "HOME"), home); /* forced */
	CHECK_EQ_STR(env_of(&s, "TMPDIR"), tmp);
	CHECK(env_of(&s, "HTTP_PROXY") == NULL);
	size_t homes = 0;
	for (char **e = s.envp; *e; e++)
		homes += strncmp(*e, "HOME=", 5) == 0;
	CHECK_EQ_INT(homes, 1);
	lr_sbx_spec_release(&s);

	/* No PATH in the host: a default one. */
	char *bare[] = { "FOO=1", NULL };
	c.host_env = bare;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(env_of(&s, "PATH") && strstr(env_of(&s, "PATH"), "/usr/bin"));
	lr_sbx_spec_release(&s);
}

TEST(network_and_proxy)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	char *targets[] = { "example.com:443", NULL };
	struct lr_exec_request r = { .argv = argv_true, .network = targets };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	c.proxy_port = 3128;
	c.dns_port = 5353;
	/* deny: refused, naming the target */
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "'example.com:443'") && strstr(err.msg, "denied"));
	/* gated without a grant: refused; with one: the proxy */
	p.network = LR_CAP_GATED;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "gated") != NULL);
	const char *gn[] = { "example.com:443" };
	c.granted_net = gn;
	c.ngranted_net = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_INT(s.net, LR_SBX_NET_PROXY);
	CHECK_EQ_INT(s.proxy_port, 3128);
	CHECK_EQ_INT(s.dns_port, 5353);
	const char *names[] = { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
				"https_proxy", "all_proxy", "npm_config_proxy",
				"npm_config_https_proxy", "PIP_PROXY" };
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		CHECK_EQ_STR(env_of(&s, names[i]), "http://127.0.0.1:3128");
	CHECK_EQ_STR(env_of(&s, "NO_PROXY"), "localhost,127.0.0.1");
	CHECK_EQ_STR(env_of(&s, "NODE_USE_ENV_PROXY"), "1");
	lr_sbx_spec_release(&s);

	/* allow with no targets named: every target, through the proxy */
	p.network = LR_CAP_ALLOW;
	struct lr_exec_request r2 = { .argv = argv_true };
	CHECK_EQ_INT(build(&p, &r2, &c, &s, &err), 0);
	CHECK_EQ_INT(s.net, LR_SBX_NET_PROXY);
	lr_sbx_spec_release(&s);
	/* an empty list asks for none */
	char *none[] = { NULL };
	r2.network = none;
	CHECK_EQ_INT(build(&p, &r2, &c, &s, &err), 0);
	CHECK_EQ_INT(s.net, LR_SBX_NET_NONE);
	CHECK(env_of(&s, "HTTP_PROXY") == NULL);
	lr_sbx_spec_release(&s);
	/* without a proxy the network cannot be given: said, not faked */
	c.proxy_port = 0;
	r2.network = NULL;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r2, &c, &s, &err), LR_EUNAVAILABLE);
	CHECK(strstr(err.msg, "egress proxy") != NULL);
}

TEST(commands_and_cwd)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	struct lr_exec_request r = { .command = "echo hi | cat" };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_STR(s.argv[0], "/bin/sh");
	CHECK_EQ_STR(s.argv[1], "-c");
	CHECK_EQ_STR(s.argv[2], "echo hi | cat");
	CHECK(s.argv[3] == NULL);
	lr_sbx_spec_release(&s);

	struct lr_buf line;
	lr_buf_init(&line, 1024);
	char *argv[] = { "git", "commit", "-m", "x", NULL };
	struct lr_exec_request r2 = { .argv = argv };
	CHECK_EQ_INT(lr_sbx_command_line(&r2, &line), 0);
	CHECK_EQ_STR(line.data, "git commit -m x");
	lr_buf_release(&line);

	p.command = LR_CAP_DENY;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "denied") != NULL);
	p.command = LR_CAP_GATED;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "gated") != NULL);
	c.command_granted = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	lr_sbx_spec_release(&s);

	/* cwd: relative to the workspace; outside the view refused; missing not found */
	profile_init(&p);
	ctx_init(&c);
	char sub[512];
	snprintf(sub, sizeof sub, "%s/a/b", ws);
	mkdirs(sub);
	r.cwd = "a/b";
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_STR(s.cwd, sub);
	lr_sbx_spec_release(&s);
	r.cwd = root; /* the parent of the workspace: not in the view */
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "outside the sandbox's view") != NULL);
	r.cwd = "nosuch";
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_ENOTFOUND);
	/* a relative argv[0] is taken from cwd */
	char *rel[] = { "./run.sh", NULL };
	struct lr_exec_request r3 = { .argv = rel, .cwd = "a" };
	CHECK_EQ_INT(build(&p, &r3, &c, &s, &err), 0);
	snprintf(sub, sizeof sub, "%s/a/./run.sh", ws);
	CHECK_EQ_STR(s.argv[0], sub);
	lr_sbx_spec_release(&s);
	struct lr_exec_request r4 = { 0 };
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r4, &c, &s, &err), -EINVAL);
}

TEST(grants_roots_home_unconfined)
{
	struct lr_profile p;
	struct lr_exec_ctx c;
	struct lr_exec_request r = { .argv = argv_true };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	/* gated workspace write: read-only until a grant names the workspace */
	p.workspace_write = LR_CAP_GATED;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(find_mount(&s, ws) && !find_mount(&s, ws)->writable);
	lr_sbx_spec_release(&s);
	const char *gw[] = { ws };
	c.granted_write = gw;
	c.ngranted_write = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(find_mount(&s, ws) && find_mount(&s, ws)->writable);
	lr_sbx_spec_release(&s);

	/* extra roots by their states */
	char ra[512], rb[512], rc_[512];
	snprintf(ra, sizeof ra, "%s/extra-rw", root);
	snprintf(rb, sizeof rb, "%s/extra-ro", root);
	snprintf(rc_, sizeof rc_, "%s/extra-none", root);
	mkdirs(ra);
	mkdirs(rb);
	mkdirs(rc_);
	struct lr_sbx_root roots[] = {
		{ ra, LR_CAP_ALLOW, LR_CAP_ALLOW },
		{ rb, LR_CAP_ALLOW, LR_CAP_DENY },
		{ rc_, LR_CAP_GATED, LR_CAP_DENY },
	};
	profile_init(&p);
	ctx_init(&c);
	p.roots = roots;
	p.nroots = 3;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(find_mount(&s, ra) && find_mount(&s, ra)->writable);
	CHECK(rule_of(&s, ra) & LANDLOCK_ACCESS_FS_REFER);
	CHECK(find_mount(&s, rb) && !find_mount(&s, rb)->writable);
	CHECK(!find_mount(&s, rc_));
	lr_sbx_spec_release(&s);
	const char *gr[] = { rc_ };
	c.granted_read = gr;
	c.ngranted_read = 1;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(find_mount(&s, rc_) && !find_mount(&s, rc_)->writable);
	lr_sbx_spec_release(&s);

	/* home real: the real home read-only (host read allow, host write deny) */
	char realhome[512], envhome[600];
	snprintf(realhome, sizeof realhome, "%s/realhome", root);
	mkdirs(realhome);
	snprintf(envhome, sizeof envhome, "HOME=%s", realhome);
	char *henv[] = { "PATH=/usr/bin:/bin", envhome, NULL };
	profile_init(&p);
	ctx_init(&c);
	c.host_env = henv;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(!find_mount(&s, realhome));
	lr_sbx_spec_release(&s);
	p.home = LR_HOME_REAL;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK(find_mount(&s, realhome) && !find_mount(&s, realhome)->writable);
	CHECK(!find_mount(&s, home));
	CHECK_EQ_STR(env_of(&s, "HOME"), realhome);
	lr_sbx_spec_release(&s);

	/* unconfined: no view, the host's network, argv[0] still resolved */
	profile_init(&p);
	ctx_init(&c);
	p.isolation = LR_ISO_UNCONFINED;
	p.network = LR_CAP_ALLOW;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	CHECK_EQ_INT(s.unconfined, 1);
	CHECK_EQ_INT(s.net, LR_SBX_NET_HOST);
	CHECK_EQ_INT(s.nmounts, 0);
	CHECK(s.argv[0][0] == '/');
	CHECK_EQ_STR(env_of(&s, "HOME"), home);
	lr_sbx_spec_release(&s);

	/* a cgroup per run when the machine has one */
	profile_init(&p);
	struct lr_sbx_caps cg = { .tier = LR_TIER_A, .cgroup = 1 };
	snprintf(cg.cgroup_path, sizeof cg.cgroup_path, "/sys/fs/cgroup/x");
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &cg, &r, &c, &s, &err), 0);
	CHECK(s.cgroup && strncmp(s.cgroup, "/sys/fs/cgroup/x/luarig-", 24) == 0);
	lr_sbx_spec_release(&s);
}

TEST(walk_is_bounded)
{
	/* Beyond the walk's caps the run is refused (never protected in part). */
	char p1[4096];
	int n = snprintf(p1, sizeof p1, "%s/deep", ws);
	for (int i = 0; i < LR_PROTECT_MAX_DEPTH + 2 && n < 3000; i++)
		n += snprintf(p1 + n, sizeof p1 - (size_t)n, "/d");
	mkdirs(p1);
	struct lr_profile p;
	struct lr_exec_ctx c;
	struct lr_exec_request r = { .argv = argv_true };
	struct lr_sbx_spec s;
	struct lr_err err = { "" };
	profile_init(&p);
	ctx_init(&c);
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "directories deep") != NULL);
	snprintf(p1, sizeof p1, "rm -rf '%s/deep'", ws);
	CHECK_EQ_INT(system(p1), 0);
	p.protect_max_entries = 3;
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "more than 3 entries") != NULL);
	p.protect_max_entries = 0;
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	lr_sbx_spec_release(&s);
	/* more repositories than the view can hold binds for: refused, saying so */
	for (int i = 0; i < 160; i++) {
		snprintf(p1, sizeof p1, "%s/many/r%03d/.git/objects", ws, i);
		mkdirs(p1);
		snprintf(p1, sizeof p1, "%s/many/r%03d/.git/refs", ws, i);
		mkdirs(p1);
		snprintf(p1, sizeof p1, "%s/many/r%03d/.git/HEAD", ws, i);
		touch(p1);
	}
	CHECK_EQ_INT(lr_sbx_build_spec(&p, &caps, &r, &c, &s, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "too many repositories") != NULL);
	snprintf(p1, sizeof p1, "rm -rf '%s/many'", ws);
	CHECK_EQ_INT(system(p1), 0);
	CHECK_EQ_INT(build(&p, &r, &c, &s, &err), 0);
	lr_sbx_spec_release(&s);
}

int main(void)
{
	snprintf(root, sizeof root, "/tmp/executor_test.XXXXXX");
	if (!mkdtemp(root))
		return 1;
	snprintf(ws, sizeof ws, "%s/ws", root);
	snprintf(home, sizeof home, "%s/home", root);
	snprintf(tmp, sizeof tmp, "%s/tmp", root);
	mkdirs(ws);
	mkdirs(home);
	mkdirs(tmp);
	RUN(view_writable_workspace);
	RUN(view_readonly_workspace_and_no_host);
	RUN(protected_paths_at_depth);
	RUN(env_scrub);
	RUN(network_and_proxy);
	RUN(commands_and_cwd);
	RUN(grants_roots_home_unconfined);
	RUN(walk_is_bounded);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", root);
	return test_summary();
}
