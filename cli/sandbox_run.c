/*
 * sandbox_run.c — `luarig sandbox run [--profile readonly|trusted|unconfined]
 * [--workspace DIR] [--allow-net HOST:PORT]... [--timeout S]
 * [--protect NAME]... [--git-readonly] [--ack-unconfined] -- CMD ARGS...`:
 * one command, confined, with the terminal's stdin, stdout and stderr.
 * --protect adds a name to the protected list (kept as it is at the top of
 * the workspace and of its repositories); --git-readonly makes every git
 * directory in the workspace read-only as a whole. What the check after
 * the run moved aside is said on stderr ("luarig: sandbox run: '…' moved
 * to '…': why").
 *
 * The three profiles are this CLI's own (the library has no presets):
 *   readonly    the workspace and the host readable, nothing writable,
 *               commands allowed, no network;
 *   trusted     the workspace read-write, the host readable, no network
 *               unless --allow-net names targets (through the egress proxy);
 *   unconfined  everything allowed, no confinement at all; needs
 *               --ack-unconfined.
 *
 * Exit status: the command's (128+N when a signal ended it); 124 when
 * --timeout killed it; 125 when luarig itself failed (usage included);
 * 126 when confinement could not be set up (the helper's exit, a missing
 * guarantee, a refusal); 127 when the command was not found in the view.
 *
 * No Lua state is made: the loop, one executor set, one run.
 */
#include "cli.h"

#include "../host/loop.h"
#include "../host/proc.h"
#include "../host/executor.h"
#include "../sandbox/sandbox.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_TIMEOUT 124
#define EXIT_FAILED 125
#define EXIT_SETUP 126
#define EXIT_NOTFOUND 127

/* Every message starts "luarig: sandbox run: "; usage errors are luarig failing too. */
static const struct lr_cli run_cli = { "sandbox run: ", NULL, EXIT_FAILED, EXIT_FAILED };

struct cli {
	struct lr_loop *loop;
	struct lr_exec *x;
	int done;
	int signo;
};

static void on_done(struct lr_exec *x, void *arg)
{
	(void)x;
	struct cli *c = arg;
	c->done = 1;
	lr_loop_stop(c->loop);
}

/* Ctrl-C or SIGTERM: the tree dies with the run, then luarig exits 128+N. */
static void on_signal(int signo, void *arg)
{
	struct cli *c = arg;
	if (c->done)
		return;
	c->signo = signo;
	lr_exec_free(c->x);
	c->x = NULL;
	lr_loop_stop(c->loop);
}

static int exit_for(int rc)
{
	if (rc == LR_ENOTFOUND)
		return EXIT_NOTFOUND;
	if (rc == LR_EREFUSED || rc == LR_EUNAVAILABLE)
		return EXIT_SETUP;
	return EXIT_FAILED;
}

int lr_sandbox_run_cli(int argc, char **argv)
{
	const char *profile = "trusted", *workspace = ".";
	double timeout = 0;
	int ack = 0, i = 0, git_readonly = 0;
	size_t nnet = 0, nprot = 0;
	char **net = calloc((size_t)argc + 1, sizeof *net);
	char **prot = calloc((size_t)argc + 1, sizeof *prot);
	if (!net || !prot) {
		free(net);
		free(prot);
		return lr_cli_fail(&run_cli, "out of memory");
	}
	for (; i < argc; i++) {
		const char *a = argv[i];
		const char *val = NULL;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(a, "--ack-unconfined") == 0) {
			ack = 1;
			continue;
		}
		if (strcmp(a, "--git-readonly") == 0) {
			git_readonly = 1;
			continue;
		}
		static const char *const with_value[] = { "--profile", "--workspace", "--allow-net",
							  "--timeout", "--protect", NULL };
		int k = 0;
		for (; with_value[k]; k++) {
			size_t n = strlen(with_value[k]);
			if (strncmp(a, with_value[k], n) == 0 && (a[n] == '\0' || a[n] == '=')) {
				if (a[n] == '=')
					val = a + n + 1;
				else if (i + 1 < argc)
					val = argv[++i];
				else {
					free(net);
					free(prot);
					return lr_cli_fail(&run_cli, "'%s' needs a value", a);
				}
				break;
			}
		}
		if (!with_value[k]) {
			free(net);
			free(prot);
			return lr_cli_fail(&run_cli, "unknown option '%s' (the command follows '--')", a);
		}
		if (k == 0) {
			profile = val;
		} else if (k == 1) {
			workspace = val;
		} else if (k == 2) {
			const char *colon = strrchr(val, ':');
			if (!colon || colon == val || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
				free(net);
				free(prot);
				return lr_cli_fail(&run_cli, "'--allow-net' wants HOST:PORT, not '%s'", val);
			}
			net[nnet++] = (char *)val;
		} else if (k == 4) {
			if (lr_protect_name_check(val) != 0 || nprot >= LR_PROTECT_MAX_NAMES) {
				free(net);
				free(prot);
				return lr_cli_fail(&run_cli, "'--protect' wants a relative path without '.' or '..' "
					    "components (at most %d of them), not '%s'", LR_PROTECT_MAX_NAMES, val);
			}
			prot[nprot++] = (char *)val;
		} else {
			char *end;
			timeout = strtod(val, &end);
			if (*end || !(timeout > 0) || timeout > 1e9) {
				free(net);
				free(prot);
				return lr_cli_fail(&run_cli, "'--timeout' wants a positive number of seconds, not '%s'", val);
			}
		}
	}
	if (i >= argc) {
		free(net);
		free(prot);
		return lr_cli_fail(&run_cli, "no command (give it after '--')");
	}

	struct lr_profile p;
	memset(&p, 0, sizeof p);
	char ws[PATH_MAX];
	if (!realpath(workspace, ws)) {
		int e = errno;
		free(net);
		free(prot);
		return lr_cli_fail(&run_cli, "workspace '%s': %s", workspace, strerror(e));
	}
	p.workspace_root = ws;
	p.protect_names = prot;
	p.nprotect_names = nprot;
	p.git_readonly = git_readonly;
	p.workspace_read = LR_CAP_ALLOW;
	p.host_read = LR_CAP_ALLOW;
	p.command = LR_CAP_ALLOW;
	if (strcmp(profile, "readonly") == 0) {
		if (nnet) {
			free(net);
			free(prot);
			return lr_cli_fail(&run_cli, "the readonly profile has no network ('--allow-net')");
		}
	} else if (strcmp(profile, "trusted") == 0) {
		p.workspace_write = LR_CAP_ALLOW;
		p.network = nnet ? LR_CAP_ALLOW : LR_CAP_DENY;
	} else if (strcmp(profile, "unconfined") == 0) {
		if (!ack) {
			free(net);
			free(prot);
			return lr_cli_fail(&run_cli, "the unconfined profile runs the command with no confinement at "
					   "all; say so with --ack-unconfined");
		}
		p.workspace_write = p.host_write = p.network = LR_CAP_ALLOW;
		p.home = LR_HOME_REAL;
		p.isolation = LR_ISO_UNCONFINED;
		p.ack_unconfined = 1;
	} else {
		free(net);
		free(prot);
		return lr_cli_fail(&run_cli, "unknown profile '%s' (readonly, trusted or unconfined)", profile);
	}

	struct cli c = { 0 };
	struct lr_executor_set *set = NULL;
	struct lr_executor *e;
	struct lr_err err = { "" };
	int code = EXIT_FAILED, rc;
	if ((rc = lr_loop_new(&c.loop)) != 0) {
		free(net);
		free(prot);
		return lr_cli_fail(&run_cli, "cannot make the loop: %s", lr_strerror(rc));
	}
	if ((rc = lr_executor_set_new(c.loop, &p, NULL, 1, &set, &err)) != 0) {
		lr_cli_fail(&run_cli, "%s", err.msg[0] ? err.msg : lr_strerror(rc));
		code = rc == LR_EREFUSED ? EXIT_SETUP : EXIT_FAILED;
		goto out;
	}
	/* one run, from a process with no Lua state and no thread: its helper is a fork, not an exec */
	lr_executor_set_fork_helper(set, 1);
	if ((rc = lr_executor_get(set, "cli", &e, &err)) != 0) {
		lr_cli_fail(&run_cli, "%s", err.msg[0] ? err.msg : lr_strerror(rc));
		goto out;
	}
	struct lr_exec_request r = {
		.argv = argv + i,
		.timeout = timeout,
		.inherit_stdio = 1,
		.network = nnet ? net : NULL,
	};
	if ((rc = lr_executor_run(e, &r, on_done, &c, &c.x, &err)) != 0) {
		lr_cli_fail(&run_cli, "%s", err.msg[0] ? err.msg : lr_strerror(rc));
		code = exit_for(rc);
		goto out;
	}
	lr_loop_on_signal(c.loop, SIGINT, on_signal, &c);
	lr_loop_on_signal(c.loop, SIGTERM, on_signal, &c);
	lr_loop_on_signal(c.loop, SIGHUP, on_signal, &c);
	lr_loop_ref(c.loop); /* a child does not hold the loop by itself */
	lr_loop_run(c.loop);
	lr_loop_unref(c.loop);
	if (c.signo) {
		code = 128 + c.signo;
	} else if (c.done) {
		const struct lr_exec_result *res = lr_exec_result(c.x);
		if (res->timed_out) {
			lr_cli_fail(&run_cli, "timed out after %g s; the command was killed",
				    timeout);
			code = EXIT_TIMEOUT;
		} else if (res->signo) {
			code = 128 + res->signo;
		} else if (res->code >= 0) {
			code = res->code;
		}
	}
	if (c.x) {
		const struct lr_exec_result *res = lr_exec_result(c.x);
		for (const char *l = res->moved.data; l && *l;) {
			const char *nl = strchr(l, '\n');
			int n = nl ? (int)(nl - l) : (int)strlen(l);
			lr_cli_fail(&run_cli, "%.*s", n, l);
			l = nl ? nl + 1 : l + n;
		}
	}
out:
	lr_exec_free(c.x);
	/* a helper whose reaper told the end (nothing of the run is left) is not
	   waited for while its exit tears the namespaces down */
	lr_proc_leave_told(c.loop);
	lr_executor_set_free(set);
	lr_proc_reap_all(c.loop);
	lr_loop_free(c.loop);
	free(net);
	free(prot);
	return code;
}
