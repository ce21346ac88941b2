/*
 * sessions.c — `luarig sessions`, `luarig show ID`, `luarig log ID`:
 * the session catalog and journals from the shell, on the LMDB store
 * under the state root (--state DIR, the same default as `luarig
 * snapshot`) or on NATS JetStream (--store nats://HOST:PORT). Plain C
 * over storage/: no Lua state is opened.
 *
 * log prints one JSON object per line: an event, command or gate_prepared
 * record as stored with "seq" spliced in first, a fence as
 * {"seq":N,"type":"Fence","epoch":E}. --follow polls for new records
 * every 100 ms until a SessionStopped event is printed or SIGINT/SIGTERM.
 *
 * ID is a session id or a unique prefix of one (looked up in the catalog).
 * A read opens a store that exists and never creates one (no store at the
 * state root: exit 1).
 *
 * Exit codes: 0 ok, 1 the work failed (no store, an unknown or ambiguous
 * session), 2 usage.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../storage/storage.h"

static const char usage_text[] =
	"usage: luarig sessions [--state DIR | --store URL] [--json]\n"
	"       luarig show [--state DIR | --store URL] ID\n"
	"       luarig log [--state DIR | --store URL] ID [--from N] [--follow]\n"
	"(ID: a session id, or the start of one that no other session shares)\n";

static const struct lr_cli sessions_cli = { NULL, usage_text, LR_CLI_USAGE, LR_CLI_FAILED };

static void iso_time(double t, char out[32])
{
	time_t s = (time_t)t;
	struct tm tm;
	if (t <= 0 || !gmtime_r(&s, &tm)) {
		snprintf(out, 32, "-");
		return;
	}
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *entry_json(const struct lr_catalog_entry *c)
{
	const char *status = lr_catalog_status_name(c->status);
	const char *state = lr_catalog_state_name(c->state);
	json_t *o = json_pack("{s:s, s:s, s:f, s:f, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:s}",
			      "id", c->id, "title", c->title, "created_at", c->created_at,
			      "last_active_at", c->last_active_at, "status", status ? status : "unknown",
			      "state", state ? state : "unknown", "loop_count", (json_int_t)c->loop_count,
			      "last_seq", (json_int_t)c->last_seq, "input_tokens",
			      (json_int_t)c->input_tokens, "output_tokens", (json_int_t)c->output_tokens,
			      "cache_read_tokens", (json_int_t)c->cache_read_tokens, "cost", c->cost,
			      "workspace_ref", c->workspace_ref);
	/* a fork names its origin: { "session": id, "at": seq } */
	if (o && c->forked_from[0])
		json_object_set_new(o, "forked_from", json_pack("{s:s, s:I}", "session",
								c->forked_from, "at",
								(json_int_t)c->forked_at));
	return o;
}

/* Prints one JSON value on its own line (keys in insertion order). */
static void print_json(json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) : NULL;
	if (s) {
		puts(s);
		free(s);
	}
	json_decref(o);
}

/* A title on one table line: control characters become spaces. */
static void print_title(const char *t)
{
	for (const unsigned char *c = (const unsigned char *)t; *c; c++)
		putchar(*c < 0x20 || *c == 0x7f ? ' ' : *c);
}

struct list_ctx {
	int json;
	int n;
};

static int list_one(void *arg, const struct lr_catalog_entry *c)
{
	struct list_ctx *x = arg;
	if (x->json) {
		print_json(entry_json(c));
		return 0;
	}
	if (x->n++ == 0)
		printf("%-36s  %-15s  %-20s  %8s  %10s  %9s  %s\n", "ID", "STATE", "LAST ACTIVE",
		       "SEQ", "TOKENS", "COST", "TITLE");
	char when[32];
	iso_time(c->last_active_at, when);
	const char *state = lr_catalog_state_name(c->state);
	printf("%-36s  %-15s  %-20s  %8" PRIu64 "  %10" PRIu64 "  %9.4f  ", c->id,
	       state ? state : "unknown", when, c->last_seq, c->input_tokens + c->output_tokens,
	       c->cost);
	print_title(c->title);
	putchar('\n');
	return 0;
}

static int cmd_sessions(struct lr_store *s, int json)
{
	struct list_ctx x = { json, 0 };
	struct lr_err e;
	if (lr_catalog_list(s, list_one, &x, &e) != 0)
		return lr_cli_fail(&sessions_cli, "%s", e.msg);
	if (!json && x.n == 0)
		puts("no sessions");
	return 0;
}

static int cmd_show(struct lr_store *s, const char *sid)
{
	struct lr_catalog_entry c;
	struct lr_err e;
	char name[LR_JOURNAL_NAME_LEN];
	snprintf(name, sizeof name, "sessions/%s", sid);
	uint64_t tip = 0;
	if (lr_store_tip(s, name, &tip, &e) != 0)
		return lr_cli_fail(&sessions_cli, "%s", e.msg);
	int rc = lr_catalog_get(s, sid, &c, &e);
	if (rc == LR_ENOTFOUND && tip == 0) {
		return lr_cli_fail(&sessions_cli, "session '%s' not found", sid);
	}
	json_t *o;
	if (rc == LR_ENOTFOUND) /* a journal without a catalog entry */
		o = json_pack("{s:s}", "id", sid);
	else if (rc)
		return lr_cli_fail(&sessions_cli, "%s", e.msg);
	else
		o = entry_json(&c);
	if (o)
		json_object_set_new(o, "tip", json_integer((json_int_t)tip));
	print_json(o);
	return 0;
}

/*
 * An id or a unique prefix of one (as :attach takes in the REPL): a full
 * id is used as given (a journal may lack a catalog entry); a prefix is
 * looked up in the catalog. Prints the error and returns 1 when no
 * session or several match.
 */
struct prefix_ctx {
	const char *prefix;
	size_t len;
	int n;
	char first[37];
	char names[4][37];
};

static int prefix_one(void *arg, const struct lr_catalog_entry *c)
{
	struct prefix_ctx *x = arg;
	if (strncmp(c->id, x->prefix, x->len) != 0)
		return 0;
	if (x->n < 4)
		snprintf(x->names[x->n], sizeof x->names[0], "%s", c->id);
	if (x->n == 0)
		snprintf(x->first, sizeof x->first, "%s", c->id);
	x->n++;
	return 0;
}

static int resolve_id(struct lr_store *s, const char *arg, char out[37])
{
	struct lr_err e;
	if (lr_journal_id_check(arg, &e) == 0) {
		snprintf(out, 37, "%s", arg);
		return 0;
	}
	struct prefix_ctx x = { .prefix = arg, .len = strlen(arg) };
	if (lr_catalog_list(s, prefix_one, &x, &e) != 0)
		return lr_cli_fail(&sessions_cli, "%s", e.msg);
	if (x.n == 1) {
		snprintf(out, 37, "%s", x.first);
		return 0;
	}
	if (x.n == 0) {
		return lr_cli_fail(&sessions_cli, "no session id starts with '%s'", arg);
	}
	fprintf(stderr, "luarig: session id '%s' is ambiguous: %d sessions start with it (", arg,
		x.n);
	for (int i = 0; i < x.n && i < 4; i++)
		fprintf(stderr, "%s%s", i ? ", " : "", x.names[i]);
	fputs(x.n > 4 ? ", …)\n" : ")\n", stderr);
	return 1;
}

/* A full id, or a prefix of one: lower-case hex digits and '-'. */
static int id_like(const char *a)
{
	size_t n = strlen(a);
	return n > 0 && n <= 36 && strspn(a, "0123456789abcdef-") == n;
}

static volatile sig_atomic_t stop_signal;

static void on_stop(int signo)
{
	stop_signal = signo;
}

struct log_ctx {
	uint64_t next;
	int stopped; /* a SessionStopped event was printed */
};

static int log_one(void *arg, const struct lr_journal_rec *r)
{
	struct log_ctx *x = arg;
	x->next = r->seq + 1;
	if (r->kind == LR_JOURNAL_FENCE) {
		printf("{\"seq\":%" PRIu64 ",\"type\":\"Fence\",\"epoch\":%" PRIu64 "}\n", r->seq,
		       r->epoch);
		return 0;
	}
	const char *b = r->body;
	size_t n = r->len, i = 0;
	while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	json_error_t je;
	json_t *o = json_loadb(b, n, 0, &je);
	if (i == n || b[i] != '{' || !json_is_object(o)) {
		/* Not an object (never written by the runtime): shown as a string. */
		json_t *w = json_pack("{s:I, s:s, s:s%}", "seq", (json_int_t)r->seq, "type",
				      r->kind == LR_JOURNAL_COMMAND ? "Command" : "Record", "raw",
				      b, n);
		print_json(w);
		json_decref(o);
		return 0;
	}
	json_t *t = json_object_get(o, "type");
	if (r->kind == LR_JOURNAL_EVENT && json_is_string(t) &&
	    strcmp(json_string_value(t), "SessionStopped") == 0)
		x->stopped = 1;
	int empty = json_object_size(o) == 0;
	json_decref(o);
	printf("{\"seq\":%" PRIu64 "%s", r->seq, empty ? "}" : ",");
	if (!empty)
		fwrite(b + i + 1, 1, n - i - 1, stdout);
	putchar('\n');
	return 0;
}

static int cmd_log(struct lr_store *s, const char *sid, uint64_t from, int follow)
{
	char name[LR_JOURNAL_NAME_LEN];
	snprintf(name, sizeof name, "sessions/%s", sid);
	struct lr_err e;
	uint64_t tip = 0;
	if (lr_store_tip(s, name, &tip, &e) != 0)
		return lr_cli_fail(&sessions_cli, "%s", e.msg);
	if (tip == 0) {
		return lr_cli_fail(&sessions_cli, "session '%s' not found", sid);
	}
	if (follow) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_stop;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	struct log_ctx x = { from ? from : 1, 0 };
	for (;;) {
		int rc = lr_journal_replay(s, sid, x.next, log_one, &x, &e);
		fflush(stdout);
		if (rc)
			return lr_cli_fail(&sessions_cli, "%s", e.msg);
		if (!follow || x.stopped || stop_signal)
			return 0;
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		if (stop_signal)
			return 0;
	}
}

int lr_session_cli(const char *cmd, int argc, char **argv)
{
	const char *state = NULL, *store = NULL, *id = NULL;
	int json = 0, follow = 0;
	uint64_t from = 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--state") == 0) {
			if (i + 1 >= argc)
				return lr_cli_usage(&sessions_cli, "'--state' needs a directory");
			state = argv[++i];
		} else if (strncmp(a, "--state=", 8) == 0) {
			state = a + 8;
		} else if (strcmp(a, "--store") == 0) {
			if (i + 1 >= argc)
				return lr_cli_usage(&sessions_cli, "'--store' needs a url (nats://HOST:PORT)");
			store = argv[++i];
		} else if (strncmp(a, "--store=", 8) == 0) {
			store = a + 8;
		} else if (strcmp(a, "--json") == 0 && strcmp(cmd, "sessions") == 0) {
			json = 1;
		} else if (strcmp(a, "--follow") == 0 && strcmp(cmd, "log") == 0) {
			follow = 1;
		} else if (strcmp(a, "--from") == 0 && strcmp(cmd, "log") == 0) {
			if (i + 1 >= argc)
				return lr_cli_usage(&sessions_cli, "'--from' needs a sequence number");
			char *end;
			errno = 0;
			unsigned long long v = strtoull(argv[++i], &end, 10);
			if (errno || *end || !*argv[i] || argv[i][0] == '-' || v == 0)
				return lr_cli_usage(&sessions_cli, "'--from' needs a sequence number >= 1, not '%s'",
						   argv[i]);
			from = v;
		} else if (strcmp(a, "help") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		} else if (a[0] == '-') {
			return lr_cli_usage(&sessions_cli, "%s: unknown option '%s'", cmd, a);
		} else if (!id && strcmp(cmd, "sessions") != 0) {
			id = a;
		} else {
			return lr_cli_usage(&sessions_cli, "%s: unexpected argument '%s'", cmd, a);
		}
	}
	if (strcmp(cmd, "sessions") != 0) {
		if (!id)
			return lr_cli_usage(&sessions_cli, "%s needs a session id", cmd);
		if (!id_like(id))
			return lr_cli_usage(&sessions_cli, "%s: '%s' is not a session id (a lower-case uuid, or "
					   "the start of one)", cmd, id);
	}
	if (state && store)
		return lr_cli_usage(&sessions_cli, "%s: give one of '--state' and '--store'", cmd);
	if (store && strncmp(store, "nats://", 7) != 0)
		return lr_cli_usage(&sessions_cli, "'--store' needs a url (nats://HOST:PORT)");
	struct lr_store *s;
	if (lr_cli_store_open(state, store, 0, &s, NULL, 0))
		return LR_CLI_FAILED;
	int rc;
	char sid[37];
	if (strcmp(cmd, "sessions") == 0)
		rc = cmd_sessions(s, json);
	else if ((rc = resolve_id(s, id, sid)) != 0)
		;
	else if (strcmp(cmd, "show") == 0)
		rc = cmd_show(s, sid);
	else
		rc = cmd_log(s, sid, from, follow);
	lr_store_close(s);
	return rc;
}
