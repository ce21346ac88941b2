/*
 * sandbox_profile_test.c — profiles: validation tables (each failure names
 * its field), the fingerprint (stable, sensitive to every field, roots in
 * any order), access_for for each kind (unknown kinds fail closed), and
 * restrict over every pair of states, proving it never widens.
 */
#include "test.h"

#include "../../sandbox/sandbox.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[PATH_MAX / 2], ws[PATH_MAX], r1[PATH_MAX], r2[PATH_MAX], r2sub[PATH_MAX],
	outside[PATH_MAX];

static void setup(void)
{
	char t[] = "/tmp/lr-profile-XXXXXX";
	char real[PATH_MAX];
	if (!mkdtemp(t) || !realpath(t, real) || strlen(real) >= sizeof tmp)
		abort();
	memcpy(tmp, real, strlen(real) + 1);
	snprintf(ws, sizeof ws, "%s/ws", tmp);
	snprintf(r1, sizeof r1, "%s/cache", tmp);
	snprintf(r2, sizeof r2, "%s/tool", tmp);
	snprintf(r2sub, sizeof r2sub, "%s/tool/sub", tmp);
	snprintf(outside, sizeof outside, "%s/outside", tmp);
	mkdir(ws, 0700);
	mkdir(r1, 0700);
	mkdir(r2, 0700);
	mkdir(r2sub, 0700);
	mkdir(outside, 0700);
	char f[PATH_MAX + 8];
	snprintf(f, sizeof f, "%s/file", ws);
	FILE *fp = fopen(f, "w");
	if (fp)
		fclose(fp);
	/* ws/escape -> outside: access_for must follow it */
	snprintf(f, sizeof f, "%s/escape", ws);
	if (symlink(outside, f) != 0)
		abort();
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmp);
}

static struct lr_sbx_root roots2[2];

static void base(struct lr_profile *p)
{
	lr_profile_init(p);
	p->workspace_root = ws;
}

static int validate(const struct lr_profile *p, struct lr_err *err)
{
	lr_err_clear(err);
	return lr_profile_validate(p, err);
}

TEST(names_parse)
{
	enum lr_cap c = LR_CAP_ALLOW;
	CHECK_EQ_STR(lr_cap_name(LR_CAP_DENY), "deny");
	CHECK_EQ_STR(lr_cap_name(LR_CAP_GATED), "gated");
	CHECK_EQ_STR(lr_cap_name(LR_CAP_ALLOW), "allow");
	CHECK_EQ_STR(lr_cap_name((enum lr_cap)7), "invalid");
	CHECK_EQ_INT(lr_cap_parse("gated", &c), 0);
	CHECK_EQ_INT(c, LR_CAP_GATED);
	CHECK_EQ_INT(lr_cap_parse("Allow", &c), -EINVAL);
	CHECK_EQ_INT(lr_cap_parse("", &c), -EINVAL);
	CHECK_EQ_INT(lr_cap_parse(NULL, &c), -EINVAL);
}

TEST(defaults_validate)
{
	struct lr_profile p;
	struct lr_err err = { "" };
	base(&p);
	CHECK_EQ_INT(validate(&p, &err), 0);
	CHECK_EQ_INT(p.workspace_read, LR_CAP_ALLOW);
	CHECK_EQ_INT(p.workspace_write, LR_CAP_GATED);
	CHECK_EQ_INT(p.host_read, LR_CAP_ALLOW);
	CHECK_EQ_INT(p.host_write, LR_CAP_DENY);
	CHECK_EQ_INT(p.network, LR_CAP_GATED);
	CHECK_EQ_INT(p.command, LR_CAP_GATED);
	CHECK_EQ_INT(p.delegate, LR_CAP_GATED);
	CHECK_EQ_INT(p.mcp, LR_CAP_GATED);
	CHECK_EQ_INT(p.home, LR_HOME_ISOLATED);
	CHECK_EQ_INT(p.isolation, LR_ISO_SANDBOXED);
}

/* Each row breaks one thing; the message must name the field. */
TEST(validation_table)
{
	char rel[] = "ws", noncanon[PATH_MAX + 8], missing[PATH_MAX + 8], file[PATH_MAX + 8],
	     inws[PATH_MAX + 8];
	snprintf(noncanon, sizeof noncanon, "%s/./ws", tmp);
	snprintf(missing, sizeof missing, "%s/nope", tmp);
	snprintf(file, sizeof file, "%s/file", ws);
	snprintf(inws, sizeof inws, "%s", ws);
	struct row {
		int what;
		const char *field;
	} rows[] = {
		{ 0, "'workspace_read'" },   { 1, "'workspace_write'" },  { 2, "'host_read'" },
		{ 3, "'host_write'" },       { 4, "'network'" },          { 5, "'command'" },
		{ 6, "'home'" },             { 7, "'isolation'" },        { 8, "'workspace_root'" },
		{ 9, "'workspace_root'" },   { 10, "'workspace_root'" },  { 11, "'workspace_root'" },
		{ 12, "'workspace_root'" },  { 13, "'workspace_write'" }, { 14, "'host_write'" },
		{ 15, "'roots[1].path'" },   { 16, "'roots[2].path'" },   { 17, "'roots[1].path'" },
		{ 18, "'roots[1].write'" },  { 19, "'roots[1].read'" },   { 20, "'network'" },
		{ 21, "'ack_unconfined'" },  { 22, "'roots[1]'" },        { 23, "'workspace_write'" },
		{ 24, "'roots[1].path'" },   { 25, "'delegate'" },        { 26, "'mcp'" },
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct lr_profile p;
		struct lr_err err = { "" };
		base(&p);
		roots2[0] = (struct lr_sbx_root){ r1, LR_CAP_ALLOW, LR_CAP_DENY };
		roots2[1] = (struct lr_sbx_root){ r2, LR_CAP_ALLOW, LR_CAP_ALLOW };
		switch (rows[i].what) {
		case 0: p.workspace_read = (enum lr_cap)3; break;
		case 1: p.workspace_write = (enum lr_cap)-1; break;
		case 2: p.host_read = (enum lr_cap)9; break;
		case 3: p.host_write = (enum lr_cap)3; break;
		case 4: p.network = (enum lr_cap)3; break;
		case 5: p.command = (enum lr_cap)3; break;
		case 6: p.home = (enum lr_home)2; break;
		case 7: p.isolation = (enum lr_isolation)2; break;
		case 8: p.workspace_root = NULL; break;
		case 9: p.workspace_root = rel; break;
		case 10: p.workspace_root = noncanon; break;
		case 11: p.workspace_root = missing; break;
		case 12: p.workspace_root = file; break;
		case 13: p.workspace_read = LR_CAP_GATED; p.workspace_write = LR_CAP_ALLOW; break;
		case 14: p.host_read = LR_CAP_DENY; p.host_write = LR_CAP_GATED; break;
		case 15: roots2[0].path = inws; p.roots = roots2; p.nroots = 1; break;
		case 16: roots2[1].path = r1; p.roots = roots2; p.nroots = 2; break;
		case 17: roots2[0].path = tmp; p.roots = roots2; p.nroots = 1; break; /* contains ws */
		case 18: roots2[0].read = LR_CAP_GATED; roots2[0].write = LR_CAP_ALLOW;
			 p.roots = roots2; p.nroots = 1; break;
		case 19: roots2[0].read = (enum lr_cap)5; p.roots = roots2; p.nroots = 1; break;
		case 20: p.isolation = LR_ISO_UNCONFINED; p.workspace_write = LR_CAP_ALLOW;
			 p.host_write = LR_CAP_ALLOW; p.ack_unconfined = 1; break;
		case 21: p.isolation = LR_ISO_UNCONFINED; p.workspace_write = LR_CAP_ALLOW;
			 p.host_write = LR_CAP_ALLOW; p.network = LR_CAP_ALLOW; break;
		case 22: p.isolation = LR_ISO_UNCONFINED; p.workspace_write = LR_CAP_ALLOW;
			 p.host_write = LR_CAP_ALLOW; p.network = LR_CAP_ALLOW; p.ack_unconfined = 1;
			 p.roots = roots2; p.nroots = 1; break;
		case 23: p.isolation = LR_ISO_UNCONFINED; p.host_write = LR_CAP_ALLOW;
			 p.network = LR_CAP_ALLOW; p.ack_unconfined = 1; break;
		case 24: roots2[0].path = missing; p.roots = roots2; p.nroots = 1; break;
		case 25: p.delegate = (enum lr_cap)3; break;
		case 26: p.mcp = (enum lr_cap)3; break;
		}
		int rc = validate(&p, &err);
		if (rc != -EINVAL || !strstr(err.msg, rows[i].field) || strncmp(err.msg, "profile: ", 9) != 0) {
			fprintf(stderr, "row %d: rc %d, message '%s', wanted %s\n", rows[i].what, rc,
				err.msg, rows[i].field);
			test_failed_now = 1;
		}
	}
	/* positive controls: the same shapes, made valid */
	struct lr_profile p;
	struct lr_err err = { "" };
	base(&p);
	roots2[0] = (struct lr_sbx_root){ r1, LR_CAP_ALLOW, LR_CAP_GATED };
	roots2[1] = (struct lr_sbx_root){ r2, LR_CAP_GATED, LR_CAP_DENY };
	p.roots = roots2;
	p.nroots = 2;
	CHECK_EQ_INT(validate(&p, &err), 0);
	p.isolation = LR_ISO_UNCONFINED;
	p.workspace_write = p.host_write = p.network = LR_CAP_ALLOW;
	p.ack_unconfined = 1;
	p.nroots = 0;
	CHECK_EQ_INT(validate(&p, &err), 0);
	p.command = LR_CAP_DENY; /* command is not a filesystem or network field */
	CHECK_EQ_INT(validate(&p, &err), 0);
}

TEST(fingerprint)
{
	struct lr_profile p, q;
	char a[65], b[65], c[65];
	base(&p);
	lr_profile_fingerprint(&p, a);
	lr_profile_fingerprint(&p, b);
	CHECK_EQ_INT(strlen(a), 64);
	CHECK_EQ_STR(a, b);
	for (const char *s = a; *s; s++)
		CHECK((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'));
	/* every field moves it */
	for (int f = 0; f < 14; f++) {
		base(&q);
		switch (f) {
		case 0: q.workspace_read = LR_CAP_GATED; break;
		case 1: q.workspace_write = LR_CAP_DENY; break;
		case 2: q.host_read = LR_CAP_DENY; break;
		case 3: q.host_write = LR_CAP_GATED; break;
		case 4: q.network = LR_CAP_ALLOW; break;
		case 5: q.command = LR_CAP_ALLOW; break;
		case 6: q.home = LR_HOME_REAL; break;
		case 7: q.isolation = LR_ISO_UNCONFINED; break;
		case 8: q.ack_unconfined = 1; break;
		case 9: q.workspace_root = tmp; break;
		case 10: roots2[0] = (struct lr_sbx_root){ r1, LR_CAP_ALLOW, LR_CAP_DENY };
			 q.roots = roots2; q.nroots = 1; break;
		case 11: roots2[0] = (struct lr_sbx_root){ r1, LR_CAP_ALLOW, LR_CAP_GATED };
			 q.roots = roots2; q.nroots = 1; break;
		case 12: q.delegate = LR_CAP_ALLOW; break;
		case 13: q.mcp = LR_CAP_ALLOW; break;
		}
		lr_profile_fingerprint(&q, c);
		if (strcmp(a, c) == 0) {
			fprintf(stderr, "field %d does not change the fingerprint\n", f);
			test_failed_now = 1;
		}
		if (f == 10)
			memcpy(b, c, sizeof b);
		if (f == 11)
			CHECK(strcmp(b, c) != 0); /* the root's write state counts */
	}
	/* roots in any order give the same digest; a copy gives the same */
	struct lr_sbx_root x[2] = { { r1, LR_CAP_ALLOW, LR_CAP_DENY }, { r2, LR_CAP_GATED, LR_CAP_DENY } };
	struct lr_sbx_root y[2] = { x[1], x[0] };
	base(&p);
	base(&q);
	p.roots = x;
	q.roots = y;
	p.nroots = q.nroots = 2;
	lr_profile_fingerprint(&p, a);
	lr_profile_fingerprint(&q, b);
	CHECK_EQ_STR(a, b);
	struct lr_profile cp;
	CHECK_EQ_INT(lr_profile_copy(&p, &cp), 0);
	lr_profile_fingerprint(&cp, c);
	CHECK_EQ_STR(a, c);
	lr_profile_release(&cp);
	lr_profile_release(&cp); /* twice is harmless */
}

static enum lr_cap acc(const struct lr_profile *p, const char *kind, const char *scope)
{
	enum lr_cap c = LR_CAP_ALLOW;
	struct lr_err err = { "" };
	int rc = lr_profile_access_for(p, kind, scope, &c, &err);
	if (rc) {
		CHECK(c == LR_CAP_DENY);
		return (enum lr_cap)-1;
	}
	return c;
}

TEST(access_for_kinds)
{
	struct lr_profile p;
	char in[PATH_MAX + 16], nested[PATH_MAX + 16], esc[PATH_MAX + 16], dotdot[PATH_MAX + 32],
		rsub[PATH_MAX + 16];
	base(&p);
	p.workspace_read = LR_CAP_ALLOW;
	p.workspace_write = LR_CAP_GATED;
	p.host_read = LR_CAP_GATED;
	p.host_write = LR_CAP_DENY;
	p.network = LR_CAP_DENY;
	p.command = LR_CAP_ALLOW;
	roots2[0] = (struct lr_sbx_root){ r2, LR_CAP_ALLOW, LR_CAP_ALLOW };
	roots2[1] = (struct lr_sbx_root){ r2sub, LR_CAP_GATED, LR_CAP_DENY };
	p.roots = roots2;
	p.nroots = 2;
	snprintf(in, sizeof in, "%s/file", ws);
	snprintf(nested, sizeof nested, "%s/new/dir/f", ws);
	snprintf(esc, sizeof esc, "%s/escape/x", ws);
	snprintf(dotdot, sizeof dotdot, "%s/../outside/f", ws);
	snprintf(rsub, sizeof rsub, "%s/sub/f", r2);

	CHECK_EQ_INT(acc(&p, "filesystem.read", in), LR_CAP_ALLOW);
	CHECK_EQ_INT(acc(&p, "filesystem.write", in), LR_CAP_GATED);
	CHECK_EQ_INT(acc(&p, "filesystem.write", ws), LR_CAP_GATED);
	CHECK_EQ_INT(acc(&p, "filesystem.write", nested), LR_CAP_GATED); /* not there yet */
	CHECK_EQ_INT(acc(&p, "filesystem.write", "rel/x"), LR_CAP_GATED); /* against the workspace */
	CHECK_EQ_INT(acc(&p, "filesystem.read", "/etc/passwd"), LR_CAP_GATED);
	CHECK_EQ_INT(acc(&p, "filesystem.write", "/etc/passwd"), LR_CAP_DENY);
	/* a symlink out of the workspace is judged where it lands */
	CHECK_EQ_INT(acc(&p, "filesystem.write", esc), LR_CAP_DENY);
	CHECK_EQ_INT(acc(&p, "filesystem.write", dotdot), LR_CAP_DENY);
	CHECK_EQ_INT(acc(&p, "filesystem.write", "../outside"), LR_CAP_DENY);
	/* roots: the longest match wins */
	CHECK_EQ_INT(acc(&p, "filesystem.write", r2), LR_CAP_ALLOW);
	CHECK_EQ_INT(acc(&p, "filesystem.write", rsub), LR_CAP_DENY);
	CHECK_EQ_INT(acc(&p, "filesystem.read", rsub), LR_CAP_GATED);
	CHECK_EQ_INT(acc(&p, "network", "example.com:443"), LR_CAP_DENY);
	CHECK_EQ_INT(acc(&p, "command.execute", "git status"), LR_CAP_ALLOW);
	CHECK_EQ_INT(acc(&p, "delegate", "researcher"), p.delegate);
	CHECK_EQ_INT(acc(&p, "mcp", "fs/read_file"), p.mcp);
	/* unknown kinds and missing paths fail closed with a message */
	enum lr_cap c = LR_CAP_ALLOW;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_profile_access_for(&p, "filesystem.exec", in, &c, &err), -EINVAL);
	CHECK_EQ_INT(c, LR_CAP_DENY);
	CHECK(strstr(err.msg, "unknown access kind 'filesystem.exec'") != NULL);
	c = LR_CAP_ALLOW;
	CHECK(lr_profile_access_for(&p, NULL, in, &c, &err) != 0);
	CHECK_EQ_INT(c, LR_CAP_DENY);
	c = LR_CAP_ALLOW;
	CHECK(lr_profile_access_for(&p, "filesystem.read", NULL, &c, &err) != 0);
	CHECK_EQ_INT(c, LR_CAP_DENY);
	CHECK(strstr(err.msg, "needs a path") != NULL);
	c = LR_CAP_ALLOW;
	CHECK(lr_profile_access_for(&p, "filesystem.read", "", &c, &err) != 0);
	CHECK_EQ_INT(c, LR_CAP_DENY);
}

/* Every pair of states: restrict gives the lower, never wider than either. */
TEST(restrict_every_pair)
{
	struct lr_err err = { "" };
	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 3; b++)
			for (int f = 0; f < 8; f++) {
				struct lr_profile x, y, z;
				base(&x);
				base(&y);
				enum lr_cap *fx[] = { &x.workspace_read, &x.workspace_write, &x.host_read,
						      &x.host_write, &x.network, &x.command, &x.delegate,
						      &x.mcp };
				enum lr_cap *fy[] = { &y.workspace_read, &y.workspace_write, &y.host_read,
						      &y.host_write, &y.network, &y.command, &y.delegate,
						      &y.mcp };
				*fx[f] = (enum lr_cap)a;
				*fy[f] = (enum lr_cap)b;
				CHECK_EQ_INT(lr_profile_restrict(&x, &y, &z, &err), 0);
				enum lr_cap got[] = { z.workspace_read, z.workspace_write, z.host_read,
						      z.host_write, z.network, z.command, z.delegate, z.mcp };
				CHECK_EQ_INT(got[f], a < b ? a : b);
				for (int g = 0; g < 8; g++)
					CHECK(got[g] <= *fx[g] && got[g] <= *fy[g]);
				lr_profile_release(&z);
			}
	/* home and isolation */
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 2; b++) {
			struct lr_profile x, y, z;
			base(&x);
			base(&y);
			x.home = (enum lr_home)a;
			y.home = (enum lr_home)b;
			x.isolation = (enum lr_isolation)a;
			y.isolation = (enum lr_isolation)b;
			x.ack_unconfined = a;
			y.ack_unconfined = b;
			CHECK_EQ_INT(lr_profile_restrict(&x, &y, &z, &err), 0);
			CHECK_EQ_INT(z.home, a && b ? LR_HOME_REAL : LR_HOME_ISOLATED);
			CHECK_EQ_INT(z.isolation, a && b ? LR_ISO_UNCONFINED : LR_ISO_SANDBOXED);
			CHECK_EQ_INT(z.ack_unconfined, a && b);
			lr_profile_release(&z);
		}
}

/*
 * Roots: for every pair of root states and host states, and paths inside
 * each root, the nested root, the workspace and the host, access in the
 * result is the lower of access in the two inputs.
 */
TEST(restrict_roots_never_widen)
{
	struct lr_err err = { "" };
	char pr1[PATH_MAX + 8], pr2[PATH_MAX + 8], psub[PATH_MAX + 8], pws[PATH_MAX + 8];
	snprintf(pr1, sizeof pr1, "%s/a", r1);
	snprintf(pr2, sizeof pr2, "%s/a", r2);
	snprintf(psub, sizeof psub, "%s/a", r2sub);
	snprintf(pws, sizeof pws, "%s/a", ws);
	const char *paths[] = { pr1, pr2, psub, pws, outside, r1, r2sub };
	const char *kinds[] = { "filesystem.read", "filesystem.write" };
	int checked = 0;
	for (int ra = 0; ra < 3; ra++)
		for (int rb = 0; rb < 3; rb++)
			for (int ha = 0; ha < 3; ha++)
				for (int hb = 0; hb < 3; hb++) {
					struct lr_profile x, y, z;
					struct lr_sbx_root xr[2], yr[1];
					base(&x);
					base(&y);
					x.host_read = x.host_write = (enum lr_cap)ha;
					y.host_read = y.host_write = (enum lr_cap)hb;
					xr[0] = (struct lr_sbx_root){ r1, (enum lr_cap)ra, (enum lr_cap)ra };
					xr[1] = (struct lr_sbx_root){ r2, LR_CAP_ALLOW, (enum lr_cap)ra };
					/* y has r2/sub nested inside x's r2, and no r1 */
					yr[0] = (struct lr_sbx_root){ r2sub, (enum lr_cap)rb, (enum lr_cap)rb };
					x.roots = xr;
					x.nroots = 2;
					y.roots = yr;
					y.nroots = 1;
					CHECK_EQ_INT(lr_profile_restrict(&x, &y, &z, &err), 0);
					CHECK_EQ_INT(lr_profile_validate(&z, &err), 0);
					for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
						for (int k = 0; k < 2; k++) {
							int ax = acc(&x, kinds[k], paths[i]);
							int ay = acc(&y, kinds[k], paths[i]);
							int az = acc(&z, kinds[k], paths[i]);
							int want = ax < ay ? ax : ay;
							if (az != want) {
								fprintf(stderr, "%s %s: %d and %d gave %d\n",
									kinds[k], paths[i], ax, ay, az);
								test_failed_now = 1;
							}
							checked++;
						}
					/* and the other way round */
					struct lr_profile w;
					CHECK_EQ_INT(lr_profile_restrict(&y, &x, &w, &err), 0);
					for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
						for (int k = 0; k < 2; k++)
							CHECK_EQ_INT(acc(&w, kinds[k], paths[i]),
								     acc(&z, kinds[k], paths[i]));
					lr_profile_release(&w);
					lr_profile_release(&z);
				}
	CHECK(checked == 81 * 14);
}

TEST(restrict_other_workspace)
{
	struct lr_profile x, y, z;
	struct lr_err err = { "" };
	base(&x);
	base(&y);
	y.workspace_root = outside;
	CHECK_EQ_INT(lr_profile_restrict(&x, &y, &z, &err), -EINVAL);
	CHECK(strstr(err.msg, "different workspaces") != NULL);
	CHECK(z.workspace_root == NULL);
}

TEST(resolve)
{
	struct lr_profile p;
	char out[PATH_MAX], want[PATH_MAX + 16];
	base(&p);
	CHECK_EQ_INT(lr_profile_resolve(&p, "a/./b/../c", out, sizeof out), 0);
	snprintf(want, sizeof want, "%s/a/c", ws);
	CHECK_EQ_STR(out, want);
	CHECK_EQ_INT(lr_profile_resolve(&p, "escape/y", out, sizeof out), 0);
	snprintf(want, sizeof want, "%s/y", outside);
	CHECK_EQ_STR(out, want);
	CHECK_EQ_INT(lr_profile_resolve(&p, "/../../", out, sizeof out), 0);
	CHECK_EQ_STR(out, "/");
	CHECK_EQ_INT(lr_profile_resolve(&p, "/nonexistent-lr/x//y/", out, sizeof out), 0);
	CHECK_EQ_STR(out, "/nonexistent-lr/x/y");
}

int main(void)
{
	setup();
	RUN(names_parse);
	RUN(defaults_validate);
	RUN(validation_table);
	RUN(fingerprint);
	RUN(access_for_kinds);
	RUN(restrict_every_pair);
	RUN(restrict_roots_never_widen);
	RUN(restrict_other_workspace);
	RUN(resolve);
	teardown();
	return test_summary();
}
