/*
 * sandbox_grant_test.c — grants: a minted token redeems once for exactly
 * the spawn it was approved for; every other binding is refused with a
 * message naming it. Each refusal has its positive control: the same grant
 * shape, redeemed with the matching request, succeeds.
 */
#include "test.h"

#include "../../sandbox/sandbox.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[PATH_MAX / 2], file[PATH_MAX], other[PATH_MAX], fresh[PATH_MAX];
static const char fp[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char fp2[] = "f123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static void touch(const char *p)
{
	FILE *f = fopen(p, "w");
	if (!f)
		abort();
	fputs("x", f);
	fclose(f);
}

static void setup(void)
{
	char t[] = "/tmp/lr-grant-XXXXXX";
	if (!mkdtemp(t) || strlen(t) >= sizeof dir)
		abort();
	memcpy(dir, t, sizeof t);
	snprintf(file, sizeof file, "%s/approved", dir);
	snprintf(other, sizeof other, "%s/secret", dir);
	snprintf(fresh, sizeof fresh, "%s/new-file", dir);
	touch(file);
	touch(other);
}

static void teardown(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static struct lr_grant_req req(void)
{
	struct lr_grant_req r = {
		.exec_id = 42, .command = "git commit -m x", .cwd = "/work/ws", .fingerprint = fp,
		.cls = LR_GRANT_FS_WRITE, .target = file, .ttl = 30,
	};
	return r;
}

/* Mints for base, redeems with r; returns the status and leaves the message in err. */
static int mint_redeem(struct lr_grants *g, struct lr_grant_req base, struct lr_grant_req r,
		       struct lr_err *err)
{
	char tok[33];
	CHECK_EQ_INT(lr_grant_mint(g, &base, tok, err), 0);
	lr_err_clear(err);
	return lr_grant_redeem(g, tok, &r, err);
}

TEST(mint_and_redeem_once)
{
	struct lr_grants *g;
	char tok[33], tok2[33];
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct lr_grant_req r = req();
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	CHECK_EQ_INT(strlen(tok), 32);
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok2, &err), 0);
	CHECK(strcmp(tok, tok2) != 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), 0);
	/* replay */
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: already used");
	/* the second token is independent */
	CHECK_EQ_INT(lr_grant_redeem(g, tok2, &r, &err), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, "00000000000000000000000000000000", &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: unknown token");
	CHECK_EQ_INT(lr_grant_redeem(g, "short", &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: malformed token");
	lr_grants_free(g);
	lr_grants_free(NULL);
}

TEST(each_binding_refused)
{
	struct lr_grants *g;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct row {
		const char *msg;
		struct lr_grant_req r;
	} rows[7];
	for (int i = 0; i < 7; i++)
		rows[i].r = req();
	rows[0].msg = "grant: for another command";
	rows[0].r.command = "git commit -m y";
	rows[1].msg = "grant: for another directory";
	rows[1].r.cwd = "/work/ws/sub";
	rows[2].msg = "grant: for another execution";
	rows[2].r.exec_id = 43;
	rows[3].msg = "grant: for another profile";
	rows[3].r.fingerprint = fp2;
	rows[4].msg = "grant: for another class of access";
	rows[4].r.cls = LR_GRANT_FS_READ;
	rows[5].msg = "grant: for another target";
	rows[5].r.target = other;
	rows[6].msg = "grant: for another command";
	rows[6].r.command = "git commit -m x "; /* exact, not a prefix */
	for (int i = 0; i < 7; i++) {
		CHECK_EQ_INT(mint_redeem(g, req(), rows[i].r, &err), LR_EREFUSED);
		CHECK_EQ_STR(err.msg, rows[i].msg);
		/* positive control */
		CHECK_EQ_INT(mint_redeem(g, rows[i].r, rows[i].r, &err), 0);
	}
	/* a refused attempt consumes the token: the right request cannot use it afterwards */
	char tok[33];
	struct lr_grant_req ok = req(), wrong = req();
	wrong.cwd = "/elsewhere";
	CHECK_EQ_INT(lr_grant_mint(g, &ok, tok, &err), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &wrong, &err), LR_EREFUSED);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &ok, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: already used");
	lr_grants_free(g);
}

TEST(expiry)
{
	struct lr_grants *g;
	char tok[33];
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct lr_grant_req r = req();
	r.ttl = 0.05;
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	struct timespec ts = { 0, 150 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: expired");
	/* positive control: the same ttl redeemed at once */
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), 0);
	lr_grants_free(g);
}

TEST(target_swapped)
{
	struct lr_grants *g;
	char tok[33];
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct lr_grant_req r = req();

	/* replaced by a symlink to a secret between mint and redeem */
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	CHECK_EQ_INT(unlink(file), 0);
	CHECK_EQ_INT(symlink(other, file), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: the target changed since approval");
	/* positive control: minted on the symlink, unchanged, it redeems */
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), 0);
	unlink(file);
	touch(file);

	/* replaced by another file (rename over it) */
	char tmpf[PATH_MAX + 8];
	snprintf(tmpf, sizeof tmpf, "%s.tmp", file);
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	touch(tmpf);
	CHECK_EQ_INT(rename(tmpf, file), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: the target changed since approval");

	/* removed */
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	unlink(file);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: the target changed since approval");
	touch(file);

	/* a path that does not exist yet: planting anything there is a change */
	struct lr_grant_req n = req();
	n.target = fresh;
	CHECK_EQ_INT(lr_grant_mint(g, &n, tok, &err), 0);
	CHECK_EQ_INT(symlink(other, fresh), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &n, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: the target changed since approval");
	unlink(fresh);
	CHECK_EQ_INT(lr_grant_mint(g, &n, tok, &err), 0);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &n, &err), 0); /* still absent: fine */

	/* content changes keep the inode: still the approved file */
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), 0);
	touch(file);
	CHECK_EQ_INT(lr_grant_redeem(g, tok, &r, &err), 0);
	lr_grants_free(g);
}

TEST(network_and_command_targets)
{
	struct lr_grants *g;
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct lr_grant_req r = req(), o = req();
	r.cls = o.cls = LR_GRANT_NETWORK;
	r.target = "github.com:443";
	o.target = "github.com:22";
	CHECK_EQ_INT(mint_redeem(g, r, o, &err), LR_EREFUSED);
	CHECK_EQ_STR(err.msg, "grant: for another target");
	CHECK_EQ_INT(mint_redeem(g, r, r, &err), 0);
	lr_grants_free(g);
}

TEST(mint_refuses_bad_requests)
{
	struct lr_grants *g;
	char tok[33];
	struct lr_err err = { "" };
	CHECK_EQ_INT(lr_grants_new(&g), 0);
	struct lr_grant_req r;
	r = req(); r.command = "";
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), -EINVAL);
	CHECK(strstr(err.msg, "command") != NULL);
	r = req(); r.cwd = "relative";
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), -EINVAL);
	CHECK(strstr(err.msg, "working directory") != NULL);
	r = req(); r.fingerprint = "";
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), -EINVAL);
	CHECK(strstr(err.msg, "fingerprint") != NULL);
	r = req(); r.ttl = 0;
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), -EINVAL);
	CHECK(strstr(err.msg, "ttl") != NULL);
	r = req(); r.target = "relative/path";
	CHECK_EQ_INT(lr_grant_mint(g, &r, tok, &err), -EINVAL);
	CHECK(strstr(err.msg, "absolute target") != NULL);
	r = req(); r.target = "/nonexistent-lr-dir/x";
	CHECK(lr_grant_mint(g, &r, tok, &err) != 0);
	CHECK(strstr(err.msg, "cannot pin") != NULL);
	lr_grants_free(g);
}

int main(void)
{
	setup();
	RUN(mint_and_redeem_once);
	RUN(each_binding_refused);
	RUN(expiry);
	RUN(target_swapped);
	RUN(network_and_command_targets);
	RUN(mint_refuses_bad_requests);
	teardown();
	return test_summary();
}
