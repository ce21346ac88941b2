/*
 * sandbox_probe_test.c — the machine probe and the guarantee report.
 *
 * The probe's claims are checked against the facts independently: the
 * Landlock ABI against the kernel's own answer, user namespaces by an
 * unshare done here in a child, the cgroup note against /sys/fs/cgroup.
 * This machine (Debian 12, Landlock ABI >= 1, unprivileged user
 * namespaces) must come out tier A. The report is checked on synthetic
 * capabilities for each tier, so the refusal paths run everywhere.
 */
#include "test.h"

#include "../../sandbox/sandbox.h"

#include <errno.h>
#include <limits.h>
#include <linux/landlock.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char ws[PATH_MAX];

/* Our own check that a child can make a user namespace. */
static int can_unshare_user(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? 0 : 1);
	int st = 0;
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

TEST(probe_tier_a_here)
{
	const struct lr_sbx_caps *c = lr_sbx_probe();
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	fprintf(stderr, "# tier %d userns %d mountns %d pidns %d netns %d mount_api %d landlock %d "
		"seccomp %d cgroup %d\n# why: %s\n# cgroup: %s\n", c->tier, c->userns, c->mountns,
		c->pidns, c->netns, c->mount_api, c->landlock_abi, c->seccomp, c->cgroup, c->why,
		c->cgroup_note);
	/* the facts, found independently */
	CHECK(abi >= 1);
	CHECK_EQ_INT(c->landlock_abi, abi);
	CHECK(can_unshare_user());
	CHECK(c->userns);
	CHECK(c->mountns && c->pidns && c->netns);
	CHECK(c->mount_api);
	CHECK(c->seccomp);
	CHECK_EQ_INT(c->tier, LR_TIER_A);
	/* cached: the same answer, the same object */
	CHECK(lr_sbx_probe() == c);
}

TEST(probe_cgroup_honest)
{
	const struct lr_sbx_caps *c = lr_sbx_probe();
	struct statfs s;
	int v2 = statfs("/sys/fs/cgroup", &s) == 0 && (unsigned long)s.f_type == 0x63677270UL;
	int hybrid = !v2 && statfs("/sys/fs/cgroup/unified", &s) == 0 &&
		     (unsigned long)s.f_type == 0x63677270UL;
	CHECK(c->cgroup_note[0] != '\0');
	if (v2)
		CHECK(strstr(c->cgroup_note, "cgroup v2") == c->cgroup_note);
	else if (hybrid)
		CHECK(strstr(c->cgroup_note, "cgroup v1/v2 hybrid") != NULL &&
		      strstr(c->cgroup_note, "/sys/fs/cgroup/unified") != NULL);
	else
		CHECK(strstr(c->cgroup_note, "no cgroup v2") != NULL);
	/* a usable cgroup is claimed only with its path, and only where memory
	 * and pids can be delegated: on a hybrid layout they live on v1 */
	CHECK(!c->cgroup || c->cgroup_path[0] == '/');
	if (hybrid) {
		FILE *f = fopen("/sys/fs/cgroup/unified/cgroup.controllers", "r");
		char line[256] = "";
		if (f) {
			if (!fgets(line, sizeof line, f))
				line[0] = 0;
			fclose(f);
		}
		if (!strstr(line, "memory"))
			CHECK_EQ_INT(c->cgroup, 0);
	}
}

static void base(struct lr_profile *p)
{
	lr_profile_init(p);
	p->workspace_root = ws;
}

static struct lr_sbx_caps fake(enum lr_tier t, int abi)
{
	struct lr_sbx_caps c;
	memset(&c, 0, sizeof c);
	c.tier = t;
	c.landlock_abi = abi;
	c.userns = c.mountns = c.pidns = c.netns = c.mount_api = t == LR_TIER_A;
	c.seccomp = t != LR_TIER_NONE;
	snprintf(c.why, sizeof c.why, "%s", t == LR_TIER_NONE ? "no landlock: test" : "");
	snprintf(c.cgroup_note, sizeof c.cgroup_note, "test layout");
	return c;
}

TEST(report_names)
{
	CHECK_EQ_STR(lr_guarantee_name(LR_G_READ_BOUNDARY), "read_boundary");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_WRITE_BOUNDARY), "write_boundary");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_NETWORK_BOUNDARY), "network_boundary");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_TARGET_NETWORK), "target_network");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_PROCESS_BOUNDARY), "process_boundary");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_RESOURCE_LIMITS), "resource_limits");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_ENV_SCRUB), "env_scrub");
	CHECK_EQ_STR(lr_guarantee_name(LR_G_COUNT), "unknown");
}

/* The default profile on this machine: everything enforced, as tier A. */
TEST(report_default_here)
{
	struct lr_profile p;
	struct lr_sbx_report r;
	struct lr_err err = { "" };
	base(&p);
	CHECK_EQ_INT(lr_sbx_report(&p, lr_sbx_probe(), &r, &err), 0);
	CHECK_EQ_INT(r.tier, LR_TIER_A);
	for (int g = 0; g < LR_G_COUNT; g++) {
		CHECK(r.enforced[g]);
		CHECK(r.how[g][0] != '\0');
	}
	CHECK(strstr(r.how[LR_G_READ_BOUNDARY], "landlock ABI") != NULL);
	CHECK(strstr(r.how[LR_G_NETWORK_BOUNDARY], "network namespace") != NULL);
	/* what the default needs: everything but target network */
	CHECK(r.required[LR_G_READ_BOUNDARY]);  /* home isolated */
	CHECK(r.required[LR_G_WRITE_BOUNDARY]); /* workspace write gated */
	CHECK(r.required[LR_G_NETWORK_BOUNDARY]);
	CHECK(!r.required[LR_G_TARGET_NETWORK]);
	CHECK(r.required[LR_G_PROCESS_BOUNDARY]);
	CHECK(r.required[LR_G_RESOURCE_LIMITS]);
	CHECK(r.required[LR_G_ENV_SCRUB]);
}

TEST(report_tier_b)
{
	struct lr_profile p;
	struct lr_sbx_report r;
	struct lr_err err = { "" };
	struct lr_sbx_caps c = fake(LR_TIER_B, 6);
	base(&p);
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	CHECK_EQ_INT(r.tier, LR_TIER_B);
	CHECK(r.enforced[LR_G_READ_BOUNDARY] && strstr(r.how[LR_G_READ_BOUNDARY], "degraded"));
	CHECK(!r.enforced[LR_G_TARGET_NETWORK] && r.missing[LR_G_TARGET_NETWORK][0]);
	CHECK(r.enforced[LR_G_PROCESS_BOUNDARY]);
	/* landlock without scopes cannot hold the process boundary: refused, named */
	c = fake(LR_TIER_B, 3);
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "'process_boundary'") != NULL);
	CHECK(!r.enforced[LR_G_PROCESS_BOUNDARY]);
	/* positive control: an unconfined profile needs only the env scrub */
	p.isolation = LR_ISO_UNCONFINED;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
}

/* What the host interprets later: held with a mount view only; needed by a writable workspace. */
TEST(report_protected_files)
{
	struct lr_profile p;
	struct lr_sbx_report r;
	struct lr_err err = { "" };
	struct lr_sbx_caps a = fake(LR_TIER_A, 7), b = fake(LR_TIER_B, 6);
	base(&p);
	CHECK_EQ_INT(lr_sbx_report(&p, &a, &r, &err), 0);
	CHECK(r.enforced[LR_G_PROTECTED_FILES]);
	CHECK(!r.required[LR_G_PROTECTED_FILES]); /* gated: the executor checks each run */
	CHECK(strstr(r.how[LR_G_PROTECTED_FILES], "commondir") != NULL);
	CHECK(strstr(r.protected_names, ".vscode") && strstr(r.protected_names, ".github/workflows"));
	CHECK_EQ_STR(lr_guarantee_name(LR_G_PROTECTED_FILES), "protected_files");
	/* a workspace commands may write needs it: tier B cannot hold it and refuses, naming it */
	p.workspace_write = LR_CAP_ALLOW;
	CHECK_EQ_INT(lr_sbx_report(&p, &a, &r, &err), 0);
	CHECK(r.required[LR_G_PROTECTED_FILES]);
	CHECK_EQ_INT(lr_sbx_report(&p, &b, &r, &err), LR_EREFUSED);
	CHECK(strstr(err.msg, "'protected_files'") && strstr(err.msg, "mount namespace"));
	/* positive control: tier B with a gated workspace runs (read-only unless a grant) */
	p.workspace_write = LR_CAP_GATED;
	CHECK_EQ_INT(lr_sbx_report(&p, &b, &r, &err), 0);
	CHECK(!r.enforced[LR_G_PROTECTED_FILES]);
	/* the profile's names and git mode are said */
	char *names[] = { ".tool-versions" };
	p.protect_names = names;
	p.nprotect_names = 1;
	p.git_readonly = 1;
	CHECK_EQ_INT(lr_sbx_report(&p, &a, &r, &err), 0);
	CHECK(strstr(r.protected_names, ".envrc .github/workflows .tool-versions") != NULL);
	CHECK(strstr(r.how[LR_G_PROTECTED_FILES], "the whole git directory") != NULL);
}

TEST(report_tier_none_refuses)
{
	struct lr_profile p;
	struct lr_sbx_report r;
	struct lr_err err = { "" };
	struct lr_sbx_caps c = fake(LR_TIER_NONE, 0);
	base(&p);
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), LR_EREFUSED);
	/* the first missing required guarantee, in report order */
	CHECK(strstr(err.msg, "'read_boundary'") != NULL);
	CHECK(strstr(err.msg, "no landlock: test") != NULL);
	for (int g = 0; g < LR_G_ENV_SCRUB; g++)
		CHECK(!r.enforced[g] && r.missing[g][0]);
	CHECK(r.enforced[LR_G_ENV_SCRUB]);
	/* everything allow but still sandboxed, real home: the network is not
	 * needed, the process boundary still is */
	p.workspace_write = p.host_write = p.network = LR_CAP_ALLOW;
	p.home = LR_HOME_REAL;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), LR_EREFUSED);
	CHECK(!r.required[LR_G_READ_BOUNDARY] && !r.required[LR_G_WRITE_BOUNDARY]);
	CHECK(!r.required[LR_G_NETWORK_BOUNDARY]);
	CHECK(strstr(err.msg, "'process_boundary'") != NULL);
	/* unconfined: requires nothing but the env scrub, enforces nothing else */
	p.isolation = LR_ISO_UNCONFINED;
	p.ack_unconfined = 1;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	for (int g = 0; g < LR_G_ENV_SCRUB; g++) {
		CHECK(!r.required[g] && !r.enforced[g]);
		CHECK(strstr(r.missing[g], "unconfined") != NULL);
	}
	/* and unconfined on tier A still claims nothing else */
	struct lr_sbx_caps a = fake(LR_TIER_A, 7);
	CHECK_EQ_INT(lr_sbx_report(&p, &a, &r, &err), 0);
	CHECK(!r.enforced[LR_G_READ_BOUNDARY] && r.enforced[LR_G_ENV_SCRUB]);
}

TEST(report_requirements_follow_states)
{
	struct lr_profile p;
	struct lr_sbx_report r;
	struct lr_err err = { "" };
	struct lr_sbx_caps c = fake(LR_TIER_A, 7);
	base(&p);
	p.home = LR_HOME_REAL;
	p.workspace_write = p.host_write = p.network = LR_CAP_ALLOW;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	CHECK(!r.required[LR_G_WRITE_BOUNDARY] && !r.required[LR_G_NETWORK_BOUNDARY]);
	p.host_write = LR_CAP_GATED;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	CHECK(r.required[LR_G_WRITE_BOUNDARY]);
	p.network = LR_CAP_DENY;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	CHECK(r.required[LR_G_NETWORK_BOUNDARY]);
	CHECK(!r.required[LR_G_READ_BOUNDARY]);
	p.host_read = LR_CAP_GATED;
	p.host_write = LR_CAP_DENY;
	CHECK_EQ_INT(lr_sbx_report(&p, &c, &r, &err), 0);
	CHECK(r.required[LR_G_READ_BOUNDARY]);
}

int main(void)
{
	char t[] = "/tmp/lr-probe-XXXXXX";
	if (!mkdtemp(t) || !realpath(t, ws))
		return 1;
	RUN(probe_tier_a_here);
	RUN(probe_cgroup_honest);
	RUN(report_names);
	RUN(report_default_here);
	RUN(report_tier_b);
	RUN(report_protected_files);
	RUN(report_tier_none_refuses);
	RUN(report_requirements_follow_states);
	rmdir(ws);
	return test_summary();
}
