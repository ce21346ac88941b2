/*
 * nats.c — the NATS JetStream backend (multi-process, multi-host), through
 * the nats.c client opened lazily (util/lazy.c): a process that never opens
 * a NATS store never loads libnats.
 *
 * Layout on the server (names with namespace "" — a namespace NS gives
 * LR_NS_LEDGERS, KV_LR_NS_KV, lr.NS.ledger.… and so on):
 *
 *   stream LR_LEDGERS, subjects lr.ledger.>  one subject per ledger,
 *       lr.ledger.<token>; each message carries "Lr-Seq: <ledger seq>".
 *       Append reads the subject's last message (its stream sequence S
 *       and Lr-Seq), compares Lr-Seq with the expected tip, and publishes
 *       with "Nats-Expected-Last-Subject-Sequence: S" (0 for an empty
 *       ledger: the client library only sends the header for values above
 *       zero, so it is set on the message here) and a message id that a
 *       retry of the same append repeats (ledger_publish). The server
 *       refuses with 10071 when another append got in between:
 *       LR_ECONFLICT. A publish whose acknowledgement does not arrive is
 *       LR_EAMBIGUOUS.
 *       Reads use direct get (next_by_subj), finding a middle record by
 *       binary search over stream sequences; delete purges the subject.
 *   bucket LR_KV (stream KV_LR_KV, subjects $KV.LR_KV.>, history 1): kv,
 *       one subject per key; "Lr-Rev: <revision>" counts per key from 1;
 *       put is compare-and-swap through the same per-subject check.
 *       Delete purges the key's subject (no tombstone is kept).
 *   bucket LR_LEASES (stream KV_LR_LEASES): leases, value
 *       "v1 <epoch> <holder hex or -> <expires, unix ms>", written with
 *       the kv compare-and-swap. Release writes holder "-" and keeps the
 *       epoch. A heartbeat thread renews every TTL/3; a holder that has
 *       not renewed within the TTL (measured on its monotonic clock from
 *       before the last successful renewal was sent) fences itself.
 *   stream LR_BLOBS, subjects lr.blob.>: a blob is chunks of 256 KiB on
 *       lr.blob.<token>.c.<upload id> ("Lr-Seq: <chunk number>") and a
 *       commit record on lr.blob.<token>.m,
 *       "v1 <size> <sha256 hex> <upload id> <chunks> <first chunk seq>",
 *       published create-only once every chunk is stored. Reads stream the
 *       chunks and verify count, size and SHA-256.
 *
 * A name's token is the name with '.' written as '=' ('=' is outside the
 * name grammar, '/' is an ordinary subject character): one subject token,
 * a valid KV key.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- libnats, opened lazily ---- */

static const char *const nats_sonames[] = { "libnats.so.3.4", "libnats.so", NULL };
static const char *const nats_names[] = {
	"natsOptions_Create", "natsOptions_Destroy", "natsOptions_SetURL",
	"natsOptions_SetTimeout", "natsOptions_SetMaxReconnect", "natsOptions_SetReconnectWait",
	"natsOptions_SetUserInfo", "natsOptions_SetToken",
	"natsOptions_SetUserCredentialsFromFiles", "natsOptions_SetNKeyFromSeed",
	"natsOptions_SetName",
	"natsConnection_Connect", "natsConnection_Close", "natsConnection_Destroy",
	"natsConnection_JetStream", "jsCtx_Destroy", "jsOptions_Init", "jsStreamConfig_Init",
	"js_AddStream", "js_GetStreamInfo", "jsStreamInfo_Destroy", "js_PurgeStream",
	"jsDirectGetMsgOptions_Init", "js_DirectGetMsg", "jsPubOptions_Init", "js_PublishMsg",
	"jsPubAck_Destroy", "natsMsg_Create", "natsMsg_Destroy", "natsMsg_GetData",
	"natsMsg_GetDataLength", "natsMsgHeader_Set", "natsMsgHeader_Get", "natsStatus_GetText",
	"nats_GetLastError", "jsSubOptions_Init", "js_SubscribeSync", "natsSubscription_NextMsg",
	"natsSubscription_Unsubscribe", "natsSubscription_Destroy", "natsConnection_Request",
	"natsOptions_SetServers", "natsOptions_SetFailRequestsOnDisconnect", NULL
};
static struct {
	__typeof__(natsOptions_Create) *opts_create;
	__typeof__(natsOptions_Destroy) *opts_destroy;
	__typeof__(natsOptions_SetURL) *opts_url;
	__typeof__(natsOptions_SetTimeout) *opts_timeout;
	__typeof__(natsOptions_SetMaxReconnect) *opts_max_reconnect;
	__typeof__(natsOptions_SetReconnectWait) *opts_reconnect_wait;
	__typeof__(natsOptions_SetUserInfo) *opts_user;
	__typeof__(natsOptions_SetToken) *opts_token;
	__typeof__(natsOptions_SetUserCredentialsFromFiles) *opts_creds;
	__typeof__(natsOptions_SetNKeyFromSeed) *opts_nkey;
	__typeof__(natsOptions_SetName) *opts_name;
	__typeof__(natsConnection_Connect) *connect;
	__typeof__(natsConnection_Close) *conn_close;
	__typeof__(natsConnection_Destroy) *conn_destroy;
	__typeof__(natsConnection_JetStream) *jetstream;
	__typeof__(jsCtx_Destroy) *js_destroy;
	__typeof__(jsOptions_Init) *jsopts_init;
	__typeof__(jsStreamConfig_Init) *cfg_init;
	__typeof__(js_AddStream) *add_stream;
	__typeof__(js_GetStreamInfo) *stream_info;
	__typeof__(jsStreamInfo_Destroy) *stream_info_destroy;
	__typeof__(js_PurgeStream) *purge;
	__typeof__(jsDirectGetMsgOptions_Init) *dg_init;
	__typeof__(js_DirectGetMsg) *direct_get;
	__typeof__(jsPubOptions_Init) *pubopts_init;
	__typeof__(js_PublishMsg) *publish;
	__typeof__(jsPubAck_Destroy) *puback_destroy;
	__typeof__(natsMsg_Create) *msg_create;
	__typeof__(natsMsg_Destroy) *msg_destroy;
	__typeof__(natsMsg_GetData) *msg_data;
	__typeof__(natsMsg_GetDataLength) *msg_len;
	__typeof__(natsMsgHeader_Set) *hdr_set;
	__typeof__(natsMsgHeader_Get) *hdr_get;
	__typeof__(natsStatus_GetText) *status_text;
	__typeof__(nats_GetLastError) *last_error;
	__typeof__(jsSubOptions_Init) *subopts_init;
	__typeof__(js_SubscribeSync) *subscribe_sync;
	__typeof__(natsSubscription_NextMsg) *next_msg;
	__typeof__(natsSubscription_Unsubscribe) *unsubscribe;
	__typeof__(natsSubscription_Destroy) *sub_destroy;
	__typeof__(natsConnection_Request) *request;
	__typeof__(natsOptions_SetServers) *opts_servers;
	__typeof__(natsOptions_SetFailRequestsOnDisconnect) *opts_fail_requests;
} N;
static struct lr_lazy natslib = {
	.sonames = nats_sonames, .names = nats_names, .slots = (void **)&N,
};

#define CHUNK ((size_t)256 << 10)
#define ASYNC_THREADS 2
/* A read of more records than this streams them through an ordered consumer. */
#define STREAM_MIN 32
/* Ledgers whose last record this handle knows (a direct-mapped cache). */
#define TIPS 512
#define TOKEN_MAX (LR_STORE_NAME_MAX + 1)
#define SUBJ_MAX (TOKEN_MAX + 64)

struct job {
	struct job *next;
	char name[LR_STORE_NAME_MAX + 1];
	uint64_t expected;
	void *data;
	size_t len;
	lr_append_cb cb;
	void *arg;
};

struct nlease {
	struct lr_lease pub; /* first: the caller's view */
	struct nlease *next;
	uint64_t rev;        /* Lr-Rev of our last write */
	uint64_t sseq;       /* its stream sequence */
	int64_t deadline;    /* monotonic ms: lost after this without a renewal */
	int64_t next_renew;  /* monotonic ms */
	int listed;          /* in the heartbeat list */
};

/* A ledger's tip and its last record's stream sequence, as last seen here. */
struct tipslot {
	char name[LR_STORE_NAME_MAX + 1];
	uint64_t tip, sseq;
};

struct nstore {
	LR_STORE_HEAD;
	natsConnection *nc;
	jsCtx *js;
	int64_t ttl_ms, wait_ms;
	int replicas;
	/* a stream with replicas: reads ask its leader (bit per stream, see stream_bit) */
	unsigned leader_reads;
	char s_ledgers[64], s_kv[64], s_leases[64], s_blobs[64];    /* stream names */
	char p_ledgers[64], p_kv[64], p_leases[64], p_blobs[64];    /* subject prefixes */
	char holder[33];
	/* the tip cache: a hint, never trusted (the publish checks it) */
	pthread_mutex_t tmu;
	struct tipslot *tips;
	/* async appends */
	pthread_mutex_t qmu;
	pthread_cond_t qcv;
	struct job *qhead, *qtail;
	int qstop;
	pthread_t workers[ASYNC_THREADS];
	int nworkers;
	/* leases (recursive: on_lost may release) */
	pthread_mutex_t lmu;
	pthread_cond_t lcv;
	struct nlease *leases;
	pthread_t hb;
	int hb_running, hb_stop;
	/* embedded server */
	pid_t server;
	int lock_fd;
	char *dir;
	char ports_file[PATH_MAX];
};

/* ---- small helpers ---- */

static int64_t now_ms(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tokenize(char *out, const char *name)
{
	size_t i = 0;
	for (; i < TOKEN_MAX - 1 && name[i]; i++)
		out[i] = name[i] == '.' ? '=' : name[i];
	out[i] = 0;
}

static void untokenize(char *s)
{
	for (; *s; s++)
		if (*s == '=')
			*s = '.';
}

static void subject(char *out, const char *prefix, const char *name, const char *suffix)
{
	char tok[TOKEN_MAX];
	tokenize(tok, name);
	snprintf(out, SUBJ_MAX, "%s%s%s", prefix, tok, suffix ? suffix : "");
}

/* A status as an lr code, with "storage: <what>: <library text>" in e. */
static int nfail(struct lr_err *e, natsStatus s, const char *what)
{
	const char *detail = N.last_error ? N.last_error(NULL) : NULL;
	if (!detail || !*detail)
		detail = N.status_text ? N.status_text(s) : "error";
	lr_err_set(e, "storage: %s: %s", what, detail);
	switch (s) {
	case NATS_TIMEOUT:
		return LR_ETIMEOUT;
	case NATS_NOT_FOUND:
		return LR_ENOTFOUND;
	case NATS_NO_MEMORY:
		return -ENOMEM;
	case NATS_MAX_PAYLOAD:
		return LR_ETOOBIG;
	case NATS_CONNECTION_CLOSED:
	case NATS_CONNECTION_DISCONNECTED:
	case NATS_NO_SERVER:
	case NATS_IO_ERROR:
	case NATS_STALE_CONNECTION:
	case NATS_NO_RESPONDERS:
		return LR_ENETWORK;
	default:
		return -EIO;
	}
}

static int hdr_u64(natsMsg *m, const char *key, uint64_t *v)
{
	const char *s = NULL;
	if (N.hdr_get(m, key, &s) != NATS_OK || !s || !*s)
		return -1;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes len bytes of standard base64 in place; the decoded length, or -1. */
static long b64decode(char *s, size_t len)
{
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;
	for (size_t i = 0; i < len && s[i] != '='; i++) {
		int v = b64val((unsigned char)s[i]);
		if (v < 0)
			return -1;
		acc = acc << 6 | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			s[o++] = (char)(acc >> bits & 0xff);
		}
	}
	return (long)o;
}

/* The JSON string value of "key" in a message-get reply (no escapes in what it holds). */
static char *json_str(char *body, const char *key, size_t *len)
{
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	char *p = strstr(body, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	char *q = strchr(p, '"');
	if (!q)
		return NULL;
	*len = (size_t)(q - p);
	return p;
}

static int json_u64(const char *body, const char *key, uint64_t *v)
{
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(body, pat);
	if (!p)
		return -1;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(p + strlen(pat), &end, 10);
	if (errno || end == p + strlen(pat))
		return -1;
	*v = x;
	return 0;
}

int lr__nats_msgget_parse(char *body, struct lr__msgget *out)
{
	memset(out, 0, sizeof *out);
	uint64_t code = 0;
	size_t sl = 0;
	if (strstr(body, "\"error\":")) {
		if (json_u64(body, "err_code", &code) == 0 && code == 10037)
			return 1; /* no message found */
		out->err = json_str(body, "description", &out->err_len);
		out->busy = json_u64(body, "code", &code) == 0 && code == 503;
		return 2;
	}
	char *subj = json_str(body, "subject", &sl);
	if (!subj || json_u64(body, "seq", &out->seq))
		return LR_ECORRUPT;
	/* the fields follow the subject (the server writes subject, seq, hdrs, data, time) */
	char *rest = subj + sl + 1;
	subj[sl] = 0;
	out->subject = subj;
	size_t dl = 0, hl = 0;
	char *data = *rest ? json_str(rest, "data", &dl) : NULL;
	char *hdrs = *rest ? json_str(rest, "hdrs", &hl) : NULL;
	long dn = data ? b64decode(data, dl) : 0, hn = hdrs ? b64decode(hdrs, hl) : 0;
	if (dn < 0 || hn < 0)
		return LR_ECORRUPT;
	out->data = data;
	out->data_len = (size_t)dn;
	out->hdrs = hdrs;
	out->hdrs_len = (size_t)hn;
	return 0;
}

int lr__nats_hdrs_each(char *h, size_t len, int (*cb)(void *arg, const char *key,
							 const char *val), void *arg)
{
	char *end = h + len;
	char *p = h ? memchr(h, '\n', len) : NULL; /* past the status line */
	while (p && p < end) {
		p++;
		char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			break;
		char *colon = memchr(p, ':', (size_t)(eol - p));
		char *vend = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
		if (colon && colon < vend) {
			*colon = 0;
			char *v = colon + 1;
			while (v < vend && *v == ' ')
				v++;
			*vend = 0;
			int rc = cb(arg, p, v);
			if (rc)
				return rc;
		}
		p = eol;
	}
	return 0;
}

static int set_hdr(void *arg, const char *key, const char *val)
{
	return N.hdr_set(arg, key, val) == NATS_OK ? 0 : -ENOMEM;
}

/*
 * dget through the stream leader: a $JS.API.STREAM.MSG.GET request (which
 * only the leader answers), its reply made into a message like a direct
 * get's: the subject, the data, the stored headers and Nats-Sequence.
 */
static int leader_get(struct nstore *n, const char *stream, const char *last_subj,
		      const char *next_subj, uint64_t seq, natsMsg **out, uint64_t *sseq,
		      struct lr_err *e, const char *what)
{
	char api[128], req[SUBJ_MAX + 64];
	snprintf(api, sizeof api, "$JS.API.STREAM.MSG.GET.%s", stream);
	int rl = last_subj ? snprintf(req, sizeof req, "{\"last_by_subj\":\"%s\"}", last_subj)
			   : snprintf(req, sizeof req, "{\"seq\":%" PRIu64 ",\"next_by_subj\":\"%s\"}",
				      seq, next_subj);
	natsMsg *reply = NULL;
	natsStatus s;
	char *body = NULL;
	struct lr__msgget g;
	int rc;
	/* No responders, or a 503 (JetStream temporarily unavailable): the stream has
	 * no leader this moment (see publish); asked again until the wait is over. */
	int64_t deadline = now_ms(CLOCK_MONOTONIC) + n->wait_ms;
	for (int64_t pause = 50;; pause = pause < 400 ? pause * 2 : 500) {
		s = N.request(&reply, n->nc, api, req, rl, n->wait_ms);
		int again = now_ms(CLOCK_MONOTONIC) + pause < deadline;
		/* a read asks again after a disconnect too (its node died): nothing changed */
		if ((s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_DISCONNECTED) && again) {
			usleep((useconds_t)pause * 1000);
			continue;
		}
		if (s != NATS_OK)
			return nfail(e, s, what);
		int len = N.msg_len(reply);
		body = malloc((size_t)len + 1);
		if (!body) {
			N.msg_destroy(reply);
			lr_err_set(e, "storage: %s: out of memory", what);
			return -ENOMEM;
		}
		memcpy(body, N.msg_data(reply), (size_t)len);
		body[len] = 0;
		N.msg_destroy(reply);
		rc = lr__nats_msgget_parse(body, &g);
		if (rc != 2 || !g.busy || !again)
			break;
		free(body);
		body = NULL;
		usleep((useconds_t)pause * 1000);
	}
	natsMsg *m = NULL;
	if (rc == 1) {
		rc = LR_ENOTFOUND;
	} else if (rc == 2) {
		lr_err_set(e, "storage: %s: %.*s", what, g.err ? (int)(g.err_len > 200 ? 200 : g.err_len) : 5,
			   g.err ? g.err : "error");
		rc = g.busy ? LR_ENETWORK : -EIO;
	} else if (rc) {
		lr_err_set(e, "storage: %s: a message-get reply this cannot read", what);
	} else if ((s = N.msg_create(&m, g.subject, NULL, g.data_len ? g.data : NULL,
				     (int)g.data_len)) != NATS_OK) {
		rc = nfail(e, s, what);
	} else if (lr__nats_hdrs_each(g.hdrs, g.hdrs_len, set_hdr, m)) {
		lr_err_set(e, "storage: %s: out of memory", what);
		rc = -ENOMEM;
	} else {
		char sq[24];
		snprintf(sq, sizeof sq, "%" PRIu64, g.seq);
		*sseq = g.seq;
		if ((s = N.hdr_set(m, "Nats-Sequence", sq)) != NATS_OK)
			rc = nfail(e, s, what);
	}
	free(body);
	if (rc) {
		if (m)
			N.msg_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

/* A bit of leader_reads: which of the four streams `stream` is. */
static unsigned stream_bit(struct nstore *n, const char *stream)
{
	return stream == n->s_ledgers ? 1u : stream == n->s_kv ? 2u : stream == n->s_leases ? 4u : 8u;
}

/*
 * One message by direct get: the last on last_subj, or (last_subj NULL)
 * the first on next_subj at stream sequence >= seq. LR_ENOTFOUND when
 * there is none. *sseq receives its stream sequence.
 */
static int dget(struct nstore *n, const char *stream, const char *last_subj,
		const char *next_subj, uint64_t seq, natsMsg **out, uint64_t *sseq,
		struct lr_err *e, const char *what)
{
	/* a replica may lag its leader (an acknowledged record not yet there): ask the leader */
	if (n->leader_reads & stream_bit(n, stream))
		return leader_get(n, stream, last_subj, next_subj, seq, out, sseq, e, what);
	jsDirectGetMsgOptions o;
	N.dg_init(&o);
	if (last_subj) {
		o.LastBySubject = last_subj;
	} else {
		o.Sequence = seq;
		o.NextBySubject = next_subj;
	}
	natsMsg *m = NULL;
	natsStatus s = N.direct_get(&m, n->js, stream, NULL, &o);
	if (s == NATS_NOT_FOUND)
		return LR_ENOTFOUND;
	if (s != NATS_OK)
		return nfail(e, s, what);
	if (hdr_u64(m, "Nats-Sequence", sseq)) {
		N.msg_destroy(m);
		lr_err_set(e, "storage: %s: a reply without its sequence", what);
		return LR_ECORRUPT;
	}
	*out = m;
	return 0;
}

/*
 * Publishes data on subj with "Nats-Expected-Last-Subject-Sequence:
 * expect" (when expect is not UINT64_MAX), "<chdr>: <cval>" (when chdr
 * is set) and "Nats-Msg-Id: <msgid>" (when msgid is set: the server
 * drops a second message with the same id within its duplicate window
 * and acknowledges it with the first one's sequence, *dup set). 0 and
 * *sseq, LR_ECONFLICT (the subject moved), LR_EAMBIGUOUS (sent, no
 * acknowledgement) or a definite failure.
 */
static int publish(struct nstore *n, const char *subj, uint64_t expect, const char *chdr,
		   uint64_t cval, const char *msgid, const void *data, size_t len, uint64_t *sseq,
		   int *dup, struct lr_err *e, const char *what)
{
	if (len > INT_MAX) {
		lr_err_set(e, "storage: %s: %zu bytes is too big", what, len);
		return LR_ETOOBIG;
	}
	natsMsg *m = NULL;
	natsStatus s = N.msg_create(&m, subj, NULL, data, (int)len);
	char buf[24];
	if (s == NATS_OK && expect != UINT64_MAX) {
		snprintf(buf, sizeof buf, "%" PRIu64, expect);
		s = N.hdr_set(m, "Nats-Expected-Last-Subject-Sequence", buf);
	}
	if (s == NATS_OK && chdr) {
		snprintf(buf, sizeof buf, "%" PRIu64, cval);
		s = N.hdr_set(m, chdr, buf);
	}
	if (s != NATS_OK) {
		N.msg_destroy(m);
		return nfail(e, s, what);
	}
	jsPubOptions po;
	N.pubopts_init(&po);
	po.MaxWait = n->wait_ms;
	po.MsgId = msgid;
	jsPubAck *pa = NULL;
	jsErrCode jerr = 0;
	/* No responders: nothing stored it (a clustered stream electing a leader has no one
	 * taking its subjects for a moment): definite, so sent again until the wait is over.
	 * A disconnect while the request was out (the node it went through died: libnats
	 * fails it at once, see lr_store_nats_open) leaves it unknown whether it was stored;
	 * with a message id it is sent again on the next connection, and the server keeps
	 * one of the two and acknowledges the second as a duplicate of the first. */
	int64_t deadline = now_ms(CLOCK_MONOTONIC) + n->wait_ms;
	for (int64_t pause = 50;; pause = pause < 400 ? pause * 2 : 500) {
		jerr = 0;
		s = N.publish(&pa, n->js, m, &po, &jerr);
		/* "JetStream system temporarily unavailable" is a refusal too: not stored */
		int retry = s == NATS_NO_RESPONDERS || jerr == JSClusterNotAvailErr ||
			    (s == NATS_CONNECTION_DISCONNECTED && msgid);
		if (!retry || now_ms(CLOCK_MONOTONIC) + pause >= deadline)
			break;
		usleep((useconds_t)pause * 1000);
	}
	N.msg_destroy(m);
	if (s == NATS_OK) {
		if (sseq)
			*sseq = pa->Sequence;
		if (dup)
			*dup = pa->Duplicate;
		N.puback_destroy(pa);
		return 0;
	}
	if (jerr == JSStreamWrongLastSequenceErr) {
		lr_err_set(e, "storage: %s conflicts", what);
		return LR_ECONFLICT;
	}
	int rc = nfail(e, s, what);
	/* the message may have been stored: only a refusal or a local failure is definite */
	if (!jerr && s != NATS_NO_RESPONDERS && s != NATS_MAX_PAYLOAD && s != NATS_NO_MEMORY &&
	    s != NATS_INVALID_ARG) {
		char m2[sizeof e->msg];
		snprintf(m2, sizeof m2, "%s", e->msg);
		lr_err_set(e, "%s (outcome unknown)", m2);
		return LR_EAMBIGUOUS;
	}
	if (jerr && rc == -EIO)
		rc = LR_EREFUSED;
	return rc;
}

static int purge(struct nstore *n, const char *stream, const char *subj, struct lr_err *e,
		 const char *what)
{
	jsOptions o;
	N.jsopts_init(&o);
	o.Stream.Purge.Subject = subj;
	jsErrCode jerr = 0;
	natsStatus s = N.purge(n->js, stream, &o, &jerr);
	return s == NATS_OK ? 0 : nfail(e, s, what);
}

/* Subjects matching filter, each with the prefix cut off and decoded, sorted. */
struct names {
	char **v;
	size_t n;
};

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_subjects(struct nstore *n, const char *stream, const char *filter,
			 size_t cut, const char *suffix, const char *prefix, struct names *out,
			 struct lr_err *e, const char *what)
{
	jsOptions o;
	N.jsopts_init(&o);
	o.Stream.Info.SubjectsFilter = filter;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	natsStatus s = N.stream_info(&si, n->js, stream, &o, &jerr);
	if (s != NATS_OK)
		return nfail(e, s, what);
	out->v = NULL;
	out->n = 0;
	jsStreamStateSubjects *ss = si->State.Subjects;
	size_t cap = ss ? (size_t)ss->Count : 0, plen = strlen(prefix), slen = suffix ? strlen(suffix) : 0;
	int rc = 0;
	if (cap && !(out->v = calloc(cap, sizeof *out->v)))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < cap; i++) {
		const char *sub = ss->List[i].Subject;
		size_t l = strlen(sub);
		if (l < cut + slen || ss->List[i].Msgs == 0)
			continue;
		char *name = strndup(sub + cut, l - cut - slen);
		if (!name) {
			rc = -ENOMEM;
			break;
		}
		untokenize(name);
		if (strncmp(name, prefix, plen) != 0) {
			free(name);
			continue;
		}
		out->v[out->n++] = name;
	}
	N.stream_info_destroy(si);
	if (rc) {
		names_free(out);
		lr_err_set(e, "storage: %s: out of memory", what);
		return rc;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof *out->v, cmp_str);
	return 0;
}

static int names_emit(struct names *ns, lr_name_cb cb, void *arg)
{
	int rc = 0;
	for (size_t i = 0; i < ns->n && !rc; i++)
		rc = cb(arg, ns->v[i]);
	names_free(ns);
	return rc;
}

/* ---- ledgers ---- */

static struct tipslot *tip_slot(struct nstore *n, const char *name)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return &n->tips[h % TIPS];
}

/* 1 and the cached tip and stream sequence of name, or 0. */
static int tip_get(struct nstore *n, const char *name, uint64_t *tip, uint64_t *sseq)
{
	if (!n->tips)
		return 0;
	pthread_mutex_lock(&n->tmu);
	struct tipslot *t = tip_slot(n, name);
	int hit = strcmp(t->name, name) == 0;
	if (hit) {
		*tip = t->tip;
		*sseq = t->sseq;
	}
	pthread_mutex_unlock(&n->tmu);
	return hit;
}

static void tip_put(struct nstore *n, const char *name, uint64_t tip, uint64_t sseq)
{
	if (!n->tips)
		return;
	pthread_mutex_lock(&n->tmu);
	struct tipslot *t = tip_slot(n, name);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->tip = tip;
	t->sseq = sseq;
	pthread_mutex_unlock(&n->tmu);
}

static void tip_drop(struct nstore *n, const char *name)
{
	if (!n->tips)
		return;
	pthread_mutex_lock(&n->tmu);
	struct tipslot *t = tip_slot(n, name);
	if (strcmp(t->name, name) == 0)
		t->name[0] = 0;
	pthread_mutex_unlock(&n->tmu);
}

/* The ledger's tip and the stream sequence of its last record (0, 0 when empty). */
static int ledger_last(struct nstore *n, const char *name, const char *subj, uint64_t *tip,
		       uint64_t *sseq, struct lr_err *e)
{
	natsMsg *m = NULL;
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "ledger '%s'", name);
	int rc = dget(n, n->s_ledgers, subj, NULL, 0, &m, sseq, e, what);
	if (rc == LR_ENOTFOUND) {
		*tip = *sseq = 0;
		return 0;
	}
	if (rc)
		return rc;
	rc = hdr_u64(m, "Lr-Seq", tip) ? LR_ECORRUPT : 0;
	if (rc)
		lr_err_set(e, "storage: ledger '%s': a record without Lr-Seq", name);
	N.msg_destroy(m);
	return rc;
}

/* An append's message id: the same for a retry of the same append (this handle, ledger,
 * position and bytes), so the server keeps one of the two (see ledger_publish). */
#define MSGID_MAX 112
/* FNV-1a of a name: what message ids carry of the ledger or lease they are for. */
static uint64_t name_hash(const char *name)
{
	uint64_t h = 14695981039346656037u;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211u;
	return h;
}

static void append_msgid(struct nstore *n, const char *name, uint64_t expected, const void *rec,
			 size_t len, char out[MSGID_MAX])
{
	unsigned char d[LR_SHA256_LEN];
	if (lr_sha256(rec, len, d))
		lr_sha256_builtin(rec, len, d);
	char hex[33];
	lr_hex(d, 16, hex);
	snprintf(out, MSGID_MAX, "%s.%016" PRIx64 ".%" PRIu64 ".%s", n->holder, name_hash(name),
		 expected + 1, hex);
}

/*
 * Publishes record expected + 1 of the ledger on subj (its last record at
 * stream sequence last) with the append's message id. An append whose
 * acknowledgement was lost is sent again (lr_store_append_definitely); a
 * clustered nats-server checks the expected subject sequence only before
 * it replicates a message, against what it has applied, so while the first
 * copy is replicated but not yet applied (a leader that lost its quorum for
 * a moment, then regained it) the second passes the check too, and both
 * would be stored: the journal would hold a record twice (make soak's
 * cluster storm; nats-server issue 4320). With the same message id the
 * server drops the second copy on every replica and acknowledges it as a
 * duplicate of the first: ours, if that message is still record
 * expected + 1 here; if it is gone (the ledger deleted and written again
 * since), the record is sent anew under a fresh id.
 */
static int ledger_publish(struct nstore *n, const char *subj, uint64_t last, uint64_t expected,
			  const char *msgid, const void *rec, size_t len, uint64_t *sseq,
			  struct lr_err *e, const char *what)
{
	int dup = 0;
	int rc = publish(n, subj, last, "Lr-Seq", expected + 1, msgid, rec, len, sseq, &dup, e,
			 what);
	if (rc || !dup)
		return rc;
	natsMsg *m = NULL;
	uint64_t sq = 0, k = 0;
	rc = dget(n, n->s_ledgers, NULL, subj, *sseq, &m, &sq, e, what);
	if (rc == 0) {
		int ours = sq == *sseq && hdr_u64(m, "Lr-Seq", &k) == 0 && k == expected + 1;
		N.msg_destroy(m);
		if (ours)
			return 0;
	} else if (rc != LR_ENOTFOUND) {
		/* stored under this id, and it cannot tell whether that is still ours */
		char why[sizeof e->msg];
		snprintf(why, sizeof why, "%s", e->msg);
		lr_err_set(e, "%s (outcome unknown)", why);
		return LR_EAMBIGUOUS;
	}
	unsigned char r[8];
	char fresh[MSGID_MAX + 20], hex[17];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		memset(r, 0, sizeof r);
	lr_hex(r, sizeof r, hex);
	snprintf(fresh, sizeof fresh, "%s.%s", msgid, hex);
	return publish(n, subj, last, "Lr-Seq", expected + 1, fresh, rec, len, sseq, NULL, e, what);
}

static int n_append(struct lr_store *s, const char *name, uint64_t expected, const void *rec,
		    size_t len, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(subj, n->p_ledgers, name, NULL);
	snprintf(what, sizeof what, "append to '%s'", name);
	uint64_t tip, last, sseq = 0;
	int rc;
	char msgid[MSGID_MAX];
	append_msgid(n, name, expected, rec, len, msgid);
	/* Our last append (or read of the tip) here: publish on it at once. The server's
	 * per-subject check makes a stale entry a conflict, never a wrong write; a conflict
	 * is then decided the long way. */
	if (tip_get(n, name, &tip, &last) && tip == expected) {
		rc = ledger_publish(n, subj, last, expected, msgid, rec, len, &sseq, e, what);
		if (rc == 0) {
			tip_put(n, name, expected + 1, sseq);
			return 0;
		}
		tip_drop(n, name);
		if (rc != LR_ECONFLICT)
			return rc;
	}
	rc = ledger_last(n, name, subj, &tip, &last, e);
	if (rc)
		return rc;
	tip_put(n, name, tip, last);
	if (tip != expected) {
		lr_err_set(e, "storage: append to '%s' conflicts at expected tip %llu (tip is %llu)",
			   name, (unsigned long long)expected, (unsigned long long)tip);
		return LR_ECONFLICT;
	}
	rc = ledger_publish(n, subj, last, expected, msgid, rec, len, &sseq, e, what);
	if (rc == 0) {
		tip_put(n, name, expected + 1, sseq);
		return 0;
	}
	tip_drop(n, name);
	if (rc == LR_ECONFLICT)
		lr_err_set(e, "storage: append to '%s' conflicts at expected tip %llu (it moved)",
			   name, (unsigned long long)expected);
	return rc;
}

static void *async_main(void *arg)
{
	struct nstore *n = arg;
	pthread_mutex_lock(&n->qmu);
	for (;;) {
		while (!n->qhead && !n->qstop)
			pthread_cond_wait(&n->qcv, &n->qmu);
		struct job *j = n->qhead;
		if (!j)
			break; /* stopping and drained */
		n->qhead = j->next;
		if (!n->qhead)
			n->qtail = NULL;
		pthread_mutex_unlock(&n->qmu);
		struct lr_err e = { "" };
		int rc = n_append(&n->base, j->name, j->expected, j->data, j->len, &e);
		j->cb(j->arg, rc, rc ? 0 : j->expected + 1, &e);
		free(j->data);
		free(j);
		pthread_mutex_lock(&n->qmu);
	}
	pthread_mutex_unlock(&n->qmu);
	return NULL;
}

static void n_append_async(struct lr_store *s, const char *name, uint64_t expected,
			   const void *rec, size_t len, lr_append_cb cb, void *arg)
{
	struct nstore *n = (struct nstore *)s;
	struct job *j = calloc(1, sizeof *j);
	void *copy = j ? malloc(len ? len : 1) : NULL;
	if (!copy) {
		free(j);
		struct lr_err e;
		lr_err_set(&e, "storage: append to '%s': out of memory", name);
		cb(arg, -ENOMEM, 0, &e);
		return;
	}
	memcpy(copy, rec, len);
	snprintf(j->name, sizeof j->name, "%s", name);
	j->expected = expected;
	j->data = copy;
	j->len = len;
	j->cb = cb;
	j->arg = arg;
	pthread_mutex_lock(&n->qmu);
	if (n->qtail)
		n->qtail->next = j;
	else
		n->qhead = j;
	n->qtail = j;
	pthread_cond_signal(&n->qcv);
	pthread_mutex_unlock(&n->qmu);
}

/* The record `want` (1 <= want <= tip) by binary search over stream sequences. */
static int ledger_find(struct nstore *n, const char *name, const char *subj, uint64_t want,
		       uint64_t last, natsMsg **out, uint64_t *sseq, struct lr_err *e)
{
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "read of '%s'", name);
	uint64_t lo = 1, hi = last;
	while (lo <= hi) {
		uint64_t mid = lo + (hi - lo) / 2, k, sq;
		natsMsg *m = NULL;
		int rc = dget(n, n->s_ledgers, NULL, subj, mid, &m, &sq, e, what);
		if (rc)
			return rc; /* LR_ENOTFOUND: deleted meanwhile */
		if (hdr_u64(m, "Lr-Seq", &k)) {
			N.msg_destroy(m);
			lr_err_set(e, "storage: ledger '%s': a record without Lr-Seq", name);
			return LR_ECORRUPT;
		}
		if (k == want) {
			*out = m;
			*sseq = sq;
			return 0;
		}
		N.msg_destroy(m);
		if (k < want)
			lo = sq + 1;
		else if (mid == 0)
			break;
		else
			hi = mid - 1;
	}
	lr_err_set(e, "storage: ledger '%s': record %llu is missing", name,
		   (unsigned long long)want);
	return LR_ECORRUPT;
}

/* $JS.API.STREAM.LEADER.STEPDOWN: the stream's leader hands over to another replica. */
static void stepdown(struct nstore *n, const char *stream)
{
	char api[128];
	snprintf(api, sizeof api, "$JS.API.STREAM.LEADER.STEPDOWN.%s", stream);
	natsMsg *reply = NULL;
	if (N.request(&reply, n->nc, api, NULL, 0, n->wait_ms) == NATS_OK)
		N.msg_destroy(reply);
}

/* How long a read has waited for a record its leader lacks (see gap). */
struct gapwait {
	int64_t deadline, pause;
	int stepped;
};

/*
 * Record seq was not where it was due (nothing there, or a record other
 * than seq). 0: the ledger ended there (it was deleted meanwhile, and is
 * shorter now); 1: ask again; LR_ECORRUPT: the record is missing. A read
 * that stopped at such a place without an error would hand on a journal
 * without its last records as if whole (make soak's cluster storm).
 *
 * On a replicated stream the leader that answered may not have applied
 * yet what its quorum acknowledged (a leader just elected), or lack a
 * record the others have (nats-server 2.9.10 after a node's kill -9): the
 * record is asked for again until the request timeout has passed, and
 * after half of it the leader is asked to step down, so that a replica
 * holding the record can lead. Only then is a record missing, or the
 * ledger shorter.
 */
static int gap(struct nstore *n, const char *name, const char *subj, uint64_t seq, uint64_t k,
	       struct gapwait *w, struct lr_err *e)
{
	uint64_t tip = 0, last = 0;
	struct lr_err te;
	int ended = ledger_last(n, name, subj, &tip, &last, &te) == 0 && tip < seq;
	if (n->leader_reads & stream_bit(n, n->s_ledgers)) {
		int64_t now = now_ms(CLOCK_MONOTONIC);
		if (!w->deadline) {
			w->deadline = now + n->wait_ms;
			w->pause = 50;
		}
		if (now + w->pause < w->deadline) {
			if (!ended && !w->stepped && now >= w->deadline - n->wait_ms / 2) {
				stepdown(n, n->s_ledgers);
				w->stepped = 1;
			}
			usleep((useconds_t)w->pause * 1000);
			w->pause = w->pause < 400 ? w->pause * 2 : 500;
			return 1;
		}
	}
	if (ended)
		return 0;
	lr_err_set(e, "storage: ledger '%s': record %llu is missing%s", name,
		   (unsigned long long)seq, k && k < seq ? " (an older record follows)" : "");
	return LR_ECORRUPT;
}

/*
 * 1 when m, found where record seq was due, is record seq - 1 again with
 * the bytes of prev (the record seq - 1 just read): one append stored
 * twice (a journal written before appends carried message ids, see
 * ledger_publish), which is one record, not a hole.
 */
static int repeats(natsMsg *m, uint64_t seq, natsMsg *prev)
{
	uint64_t k = 0;
	if (!prev || hdr_u64(m, "Lr-Seq", &k) || k + 1 != seq)
		return 0;
	int l = N.msg_len(m);
	return l == N.msg_len(prev) && (l == 0 || memcmp(N.msg_data(m), N.msg_data(prev),
							(size_t)l) == 0);
}

/*
 * Records seq..end of the ledger on subj, the first at stream sequence
 * start or after, through an ordered consumer (one request to create it,
 * then the server pushes them with flow control) instead of a direct get
 * per record. The same checks as the direct-get loop of n_read; prev (the
 * record before seq, or NULL) is this function's to destroy.
 */
static int read_stream(struct nstore *n, const char *name, const char *subj, uint64_t start,
		       uint64_t seq, uint64_t end, natsMsg *prev, lr_record_cb cb, void *arg,
		       struct lr_err *e)
{
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "read of '%s'", name);
	jsOptions jo;
	N.jsopts_init(&jo);
	jo.Wait = n->wait_ms;
	jsSubOptions so;
	N.subopts_init(&so);
	so.Stream = n->s_ledgers;
	so.Ordered = true;
	so.Config.DeliverPolicy = js_DeliverByStartSequence;
	so.Config.OptStartSeq = start;
	so.Config.MemoryStorage = true;
	natsSubscription *sub = NULL;
	jsErrCode jerr = 0;
	natsStatus st = N.subscribe_sync(&sub, n->js, subj, &jo, &so, &jerr);
	if (st != NATS_OK) {
		if (prev)
			N.msg_destroy(prev);
		return nfail(e, st, what);
	}
	int rc = 0;
	while (!rc && seq <= end) {
		natsMsg *m = NULL;
		st = N.next_msg(&m, sub, n->wait_ms);
		if (st != NATS_OK) {
			rc = nfail(e, st, what);
			break;
		}
		uint64_t k = 0;
		if (hdr_u64(m, "Lr-Seq", &k) || k != seq) {
			int again = repeats(m, seq, prev);
			N.msg_destroy(m);
			if (again)
				continue;
			/* a stream without replicas: gap answers at once */
			struct gapwait w = { 0, 0, 0 };
			rc = gap(n, name, subj, seq, k, &w, e);
			break;
		}
		struct lr_record r = { seq, N.msg_data(m), (size_t)N.msg_len(m) };
		if (!r.data)
			r.data = "";
		rc = cb(arg, &r);
		if (prev)
			N.msg_destroy(prev);
		prev = m;
		seq++;
	}
	if (prev)
		N.msg_destroy(prev);
	N.unsubscribe(sub);
	N.sub_destroy(sub);
	return rc;
}

static int n_read(struct lr_store *s, const char *name, uint64_t from, uint64_t limit,
		  lr_record_cb cb, void *arg, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(subj, n->p_ledgers, name, NULL);
	snprintf(what, sizeof what, "read of '%s'", name);
	uint64_t tip, last;
	int rc = ledger_last(n, name, subj, &tip, &last, e);
	if (rc)
		return rc;
	if (from == 0)
		from = 1;
	if (from > tip)
		return 0;
	uint64_t end = limit && limit - 1 < tip - from ? from + limit - 1 : tip;
	natsMsg *m = NULL, *prev = NULL;
	uint64_t sq;
	struct gapwait w = { 0, 0, 0 };
	for (;;) {
		rc = ledger_find(n, name, subj, from, last, &m, &sq, e);
		if (rc != LR_ENOTFOUND && rc != LR_ECORRUPT)
			break;
		rc = gap(n, name, subj, from, 0, &w, e);
		if (rc != 1)
			return rc;
		if ((rc = ledger_last(n, name, subj, &tip, &last, e)) != 0)
			return rc;
	}
	for (uint64_t seq = from; !rc;) {
		struct lr_record r = { seq, N.msg_data(m), (size_t)N.msg_len(m) };
		if (!r.data)
			r.data = "";
		rc = cb(arg, &r);
		if (prev)
			N.msg_destroy(prev);
		prev = m;
		m = NULL;
		if (rc || seq == end)
			break;
		seq++;
		/* Not on a replicated stream: an ordered consumer may be placed on any replica,
		 * and a replica can lack a record its leader has (nats-server 2.9 after a
		 * node's kill -9: the consumer skipped it), so each record is asked of the
		 * leader (one round trip per record). */
		if (end - seq >= STREAM_MIN && !(n->leader_reads & stream_bit(n, n->s_ledgers))) {
			rc = read_stream(n, name, subj, sq + 1, seq, end, prev, cb, arg, e);
			prev = NULL;
			break;
		}
		/* record seq: the next message on the subject after record seq - 1 */
		uint64_t after = sq + 1, at = after;
		w.deadline = 0;
		w.stepped = 0;
		for (;;) {
			uint64_t k = 0;
			rc = dget(n, n->s_ledgers, NULL, subj, at, &m, &sq, e, what);
			if (rc == 0 && hdr_u64(m, "Lr-Seq", &k) == 0 && k == seq)
				break;
			if (rc && rc != LR_ENOTFOUND)
				break;
			int again = rc == 0 && repeats(m, seq, prev);
			if (m)
				N.msg_destroy(m);
			m = NULL;
			if (again) {
				at = sq + 1; /* one append stored twice: the next one */
				continue;
			}
			rc = gap(n, name, subj, seq, k, &w, e);
			if (rc != 1)
				break;
			at = after;
		}
		if (!m)
			break; /* ended (0) or failed */
	}
	if (m)
		N.msg_destroy(m);
	if (prev)
		N.msg_destroy(prev);
	return rc;
}

static int n_tip(struct lr_store *s, const char *name, uint64_t *tip, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX];
	subject(subj, n->p_ledgers, name, NULL);
	uint64_t last;
	return ledger_last(n, name, subj, tip, &last, e);
}

static int n_ledger_delete(struct lr_store *s, const char *name, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(subj, n->p_ledgers, name, NULL);
	snprintf(what, sizeof what, "delete of ledger '%s'", name);
	tip_drop(n, name);
	int rc = purge(n, n->s_ledgers, subj, e, what);
	tip_drop(n, name);
	return rc;
}

/* ---- kv (also under leases) ---- */

/* The key's value and revision, the stream sequence of its record; LR_ENOTFOUND if absent. */
static int kv_last(struct nstore *n, const char *stream, const char *subj, const char *key,
		   natsMsg **out, uint64_t *rev, uint64_t *sseq, struct lr_err *e)
{
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "key '%s'", key);
	natsMsg *m = NULL;
	int rc = dget(n, stream, subj, NULL, 0, &m, sseq, e, what);
	if (rc == LR_ENOTFOUND) {
		*sseq = 0;
		lr_err_set(e, "storage: key '%s' not found", key);
		return rc;
	}
	if (rc)
		return rc;
	const char *op = NULL;
	if (N.hdr_get(m, "KV-Operation", &op) == NATS_OK && op) {
		/* another client's delete marker: absent, but the subject has a last sequence */
		N.msg_destroy(m);
		lr_err_set(e, "storage: key '%s' not found", key);
		return LR_ENOTFOUND;
	}
	if (hdr_u64(m, "Lr-Rev", rev)) {
		N.msg_destroy(m);
		lr_err_set(e, "storage: key '%s': a value without Lr-Rev", key);
		return LR_ECORRUPT;
	}
	*out = m;
	return 0;
}

static int kv_cas(struct nstore *n, const char *stream, const char *prefix, const char *key,
		  uint64_t expected, const void *val, size_t len, uint64_t *new_rev,
		  uint64_t *new_sseq, struct lr_err *e)
{
	char subj[SUBJ_MAX];
	subject(subj, prefix, key, NULL);
	natsMsg *m = NULL;
	uint64_t cur = 0, sseq = 0;
	int rc = kv_last(n, stream, subj, key, &m, &cur, &sseq, e);
	if (rc == LR_ENOTFOUND)
		cur = 0;
	else if (rc)
		return rc;
	else
		N.msg_destroy(m);
	if (cur != expected) {
		lr_err_set(e, "storage: put of '%s' conflicts: expected revision %llu, found %llu",
			   key, (unsigned long long)expected, (unsigned long long)cur);
		return LR_ECONFLICT;
	}
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "put of '%s'", key);
	uint64_t got;
	rc = publish(n, subj, sseq, "Lr-Rev", cur + 1, NULL, val, len, &got, NULL, e, what);
	if (rc == LR_ECONFLICT)
		lr_err_set(e, "storage: put of '%s' conflicts: expected revision %llu (it moved)",
			   key, (unsigned long long)expected);
	if (rc)
		return rc;
	if (new_rev)
		*new_rev = cur + 1;
	if (new_sseq)
		*new_sseq = got;
	return 0;
}

static int n_kv_get(struct lr_store *s, const char *key, struct lr_bytes *val, uint64_t *rev,
		    struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX];
	subject(subj, n->p_kv, key, NULL);
	natsMsg *m = NULL;
	uint64_t r, sseq;
	int rc = kv_last(n, n->s_kv, subj, key, &m, &r, &sseq, e);
	if (rc)
		return rc;
	size_t len = (size_t)N.msg_len(m);
	val->data = malloc(len ? len : 1);
	if (!val->data) {
		N.msg_destroy(m);
		return -ENOMEM;
	}
	if (len)
		memcpy(val->data, N.msg_data(m), len);
	val->len = len;
	N.msg_destroy(m);
	if (rev)
		*rev = r;
	return 0;
}

static int n_kv_put(struct lr_store *s, const char *key, uint64_t expected, const void *val,
		    size_t len, uint64_t *new_rev, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	return kv_cas(n, n->s_kv, n->p_kv, key, expected, val, len, new_rev, NULL, e);
}

static int n_kv_keys(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		     struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char filter[128];
	snprintf(filter, sizeof filter, "%s>", n->p_kv);
	struct names ns;
	int rc = list_subjects(n, n->s_kv, filter, strlen(n->p_kv), NULL, prefix, &ns, e,
			       "listing keys");
	return rc ? rc : names_emit(&ns, cb, arg);
}

static int n_kv_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(subj, n->p_kv, key, NULL);
	snprintf(what, sizeof what, "delete of '%s'", key);
	return purge(n, n->s_kv, subj, e, what);
}

/* ---- leases ---- */

struct leaseval {
	uint64_t epoch;
	char holder[33];
	int64_t expires;
};

static int lease_parse(const void *p, size_t len, struct leaseval *v)
{
	char buf[128];
	if (len >= sizeof buf)
		return -1;
	memcpy(buf, p, len);
	buf[len] = 0;
	unsigned long long ep;
	long long ex;
	int used = 0;
	if (sscanf(buf, "v1 %llu %32s %lld%n", &ep, v->holder, &ex, &used) != 3 ||
	    (size_t)used != len)
		return -1;
	v->epoch = ep;
	v->expires = ex;
	return 0;
}

static size_t lease_format(char *buf, size_t cap, uint64_t epoch, const char *holder,
			   int64_t expires)
{
	int k = snprintf(buf, cap, "v1 %llu %s %lld", (unsigned long long)epoch, holder,
			 (long long)expires);
	return k < 0 ? 0 : (size_t)k;
}

static void *hb_main(void *arg);

static void lease_fire_lost(struct nlease *l)
{
	lr__lease_fire_lost(&l->pub);
}

static void lease_unlist(struct nstore *n, struct nlease *l)
{
	for (struct nlease **p = &n->leases; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			l->listed = 0;
			return;
		}
}

static int n_acquire(struct lr_store *s, const char *name, struct lr_lease **out,
		     struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char subj[SUBJ_MAX];
	subject(subj, n->p_leases, name, NULL);
	for (int attempt = 0; attempt < 8; attempt++) {
		natsMsg *m = NULL;
		uint64_t rev = 0, sseq = 0;
		struct leaseval v = { 0, "-", 0 };
		int rc = kv_last(n, n->s_leases, subj, name, &m, &rev, &sseq, e);
		if (rc == 0) {
			int bad = lease_parse(N.msg_data(m), (size_t)N.msg_len(m), &v);
			N.msg_destroy(m);
			if (bad) {
				lr_err_set(e, "storage: lease '%s': an unreadable record", name);
				return LR_ECORRUPT;
			}
		} else if (rc != LR_ENOTFOUND) {
			return rc;
		} else {
			rev = 0;
		}
		int64_t wall = now_ms(CLOCK_REALTIME), mono = now_ms(CLOCK_MONOTONIC);
		if (strcmp(v.holder, "-") != 0 && v.expires > wall) {
			lr_err_set(e, "storage: lease '%s' is held (epoch %llu)", name,
				   (unsigned long long)v.epoch);
			return LR_ELEASEHELD;
		}
		char buf[128];
		size_t len = lease_format(buf, sizeof buf, v.epoch + 1, n->holder, wall + n->ttl_ms);
		uint64_t new_rev, new_sseq;
		rc = kv_cas(n, n->s_leases, n->p_leases, name, rev, buf, len, &new_rev, &new_sseq, e);
		if (rc == LR_ECONFLICT)
			continue; /* someone else moved: look again */
		if (rc)
			return rc;
		struct nlease *l = calloc(1, sizeof *l);
		if (!l) {
			/* the grant stands until it expires; nobody holds it here */
			lr_err_set(e, "storage: lease '%s': out of memory", name);
			return -ENOMEM;
		}
		l->pub.store = s;
		snprintf(l->pub.name, sizeof l->pub.name, "%s", name);
		l->pub.epoch = v.epoch + 1;
		l->rev = new_rev;
		l->sseq = new_sseq;
		l->deadline = mono + n->ttl_ms;
		l->next_renew = mono + n->ttl_ms / 3;
		pthread_mutex_lock(&n->lmu);
		l->next = n->leases;
		n->leases = l;
		l->listed = 1;
		if (!n->hb_running && pthread_create(&n->hb, NULL, hb_main, n) == 0)
			n->hb_running = 1;
		pthread_cond_signal(&n->lcv);
		pthread_mutex_unlock(&n->lmu);
		*out = &l->pub;
		return 0;
	}
	lr_err_set(e, "storage: lease '%s': too many concurrent changes", name);
	return LR_ECONFLICT;
}

/* One renewal; called with lmu held. 0, LR_ECONFLICT (taken) or another failure. */
static int lease_renew(struct nstore *n, struct nlease *l, int release)
{
	char subj[SUBJ_MAX], buf[128];
	subject(subj, n->p_leases, l->pub.name, NULL);
	int64_t wall = now_ms(CLOCK_REALTIME), mono = now_ms(CLOCK_MONOTONIC);
	size_t len = release ? lease_format(buf, sizeof buf, l->pub.epoch, "-", 0)
			     : lease_format(buf, sizeof buf, l->pub.epoch, n->holder,
					    wall + n->ttl_ms);
	struct lr_err e;
	uint64_t sseq;
	/* a message id of this holder's revision rev + 1 (a renewal or a release): one sent
	 * again after a disconnect is acknowledged as the first, not refused as a conflict
	 * that would lose the lease */
	char msgid[MSGID_MAX];
	snprintf(msgid, sizeof msgid, "%s.L%016" PRIx64 ".%" PRIu64 ".%" PRIu64 ".%c", n->holder,
		 name_hash(l->pub.name), l->pub.epoch, l->rev + 1, release ? 'x' : 'r');
	int rc = publish(n, subj, l->sseq, "Lr-Rev", l->rev + 1, msgid, buf, len, &sseq, NULL, &e,
			 "lease");
	if (rc == 0) {
		l->rev++;
		l->sseq = sseq;
		l->deadline = mono + n->ttl_ms;
	}
	return rc;
}

static void *hb_main(void *arg)
{
	struct nstore *n = arg;
	pthread_mutex_lock(&n->lmu);
	while (!n->hb_stop) {
		int64_t now = now_ms(CLOCK_MONOTONIC), wake = now + 1000;
		int again = 0;
		for (struct nlease *l = n->leases; l; l = l->next) {
			if (now >= l->deadline) {
				lease_unlist(n, l);
				lease_fire_lost(l); /* may release l */
				again = 1;
				break;
			}
			if (now >= l->next_renew) {
				int rc = lease_renew(n, l, 0);
				now = now_ms(CLOCK_MONOTONIC);
				if (rc == LR_ECONFLICT) {
					lease_unlist(n, l);
					lease_fire_lost(l);
					again = 1;
					break;
				}
				/* on success every TTL/3; on failure retry soon until the deadline */
				l->next_renew = now + (rc ? n->ttl_ms / 10 : n->ttl_ms / 3);
			}
			if (l->next_renew < wake)
				wake = l->next_renew;
			if (l->deadline < wake)
				wake = l->deadline;
		}
		if (again)
			continue;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		int64_t d = wake - now_ms(CLOCK_MONOTONIC);
		if (d <= 0)
			continue;
		ts.tv_sec += d / 1000;
		ts.tv_nsec += (d % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&n->lcv, &n->lmu, &ts);
	}
	pthread_mutex_unlock(&n->lmu);
	return NULL;
}

static int n_release(struct lr_lease *pub, struct lr_err *e)
{
	(void)e;
	struct nlease *l = (struct nlease *)pub;
	struct nstore *n = (struct nstore *)pub->store;
	pthread_mutex_lock(&n->lmu);
	int held = l->listed && !__atomic_load_n(&l->pub.lost, __ATOMIC_SEQ_CST);
	lease_unlist(n, l);
	/* keep the epoch, clear the holder; a conflict means it was taken over already */
	if (held)
		lease_renew(n, l, 1);
	lease_fire_lost(l);
	pthread_mutex_unlock(&n->lmu);
	free(l);
	return 0;
}

/* ---- blobs ---- */

struct blobmeta {
	uint64_t size, chunks, first;
	char sha[65];
	char id[33];
};

static int meta_get(struct nstore *n, const char *key, const char *msubj,
		    struct blobmeta *bm, struct lr_err *e)
{
	char what[LR_STORE_NAME_MAX + 40];
	snprintf(what, sizeof what, "blob '%s'", key);
	natsMsg *m = NULL;
	uint64_t sseq;
	int rc = dget(n, n->s_blobs, msubj, NULL, 0, &m, &sseq, e, what);
	if (rc == LR_ENOTFOUND)
		lr_err_set(e, "storage: blob '%s' not found", key);
	if (rc)
		return rc;
	char buf[256];
	size_t len = (size_t)N.msg_len(m);
	int bad = len >= sizeof buf;
	if (!bad) {
		memcpy(buf, N.msg_data(m), len);
		buf[len] = 0;
		unsigned long long sz, ch, fi;
		int used = 0;
		bad = sscanf(buf, "v1 %llu %64s %32s %llu %llu%n", &sz, bm->sha, bm->id, &ch, &fi,
			     &used) != 5 || (size_t)used != len || strlen(bm->sha) != 64;
		bm->size = sz;
		bm->chunks = ch;
		bm->first = fi;
	}
	N.msg_destroy(m);
	if (bad) {
		lr_err_set(e, "storage: blob '%s': an unreadable commit record", key);
		return LR_ECORRUPT;
	}
	return 0;
}

static void hexify(char *out, const unsigned char *p, size_t n)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[p[i] >> 4];
		out[2 * i + 1] = hx[p[i] & 15];
	}
	out[2 * n] = 0;
}

/* A source of blob bytes: memory or an fd. */
struct src {
	const unsigned char *p;
	int fd;
	uint64_t len, off;
};

/* Up to cap bytes; 0 at the declared end; <0 on a read error or an early end. */
static ssize_t src_read(struct src *s, void *buf, size_t cap)
{
	uint64_t left = s->len - s->off;
	size_t want = left < cap ? (size_t)left : cap;
	if (!want)
		return 0;
	if (s->p) {
		memcpy(buf, s->p + s->off, want);
		s->off += want;
		return (ssize_t)want;
	}
	size_t got = 0;
	while (got < want) {
		ssize_t k = read(s->fd, (char *)buf + got, want - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return LR_ECORRUPT;
		got += (size_t)k;
	}
	s->off += got;
	return (ssize_t)got;
}

/* Hashes the rest of the source (the key exists: same bytes or a conflict). */
static int blob_compare(struct nstore *n, const char *key, struct src *sr,
			const struct blobmeta *bm, unsigned char *buf, struct lr_err *e)
{
	(void)n;
	struct lr_sha256 h;
	int rc = lr_sha256_begin(&h);
	if (rc) {
		lr_err_set(e, "storage: blob '%s': no SHA-256 (libcrypto)", key);
		return rc;
	}
	ssize_t k;
	while ((k = src_read(sr, buf, CHUNK)) > 0)
		lr_sha256_update(&h, buf, (size_t)k);
	unsigned char d[LR_SHA256_LEN];
	lr_sha256_end(&h, d);
	if (k < 0) {
		lr_err_set(e, "storage: blob '%s': reading its source failed after %llu of %llu "
			      "bytes", key, (unsigned long long)sr->off, (unsigned long long)sr->len);
		return (int)k;
	}
	char hex[65];
	hexify(hex, d, sizeof d);
	if (sr->len != bm->size || strcmp(hex, bm->sha) != 0) {
		lr_err_set(e, "storage: blob '%s' exists with different bytes", key);
		return LR_EBLOBCONFLICT;
	}
	return 0;
}

static int blob_put_src(struct nstore *n, const char *key, struct src *sr, struct lr_err *e)
{
	char msubj[SUBJ_MAX], csubj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(msubj, n->p_blobs, key, ".m");
	snprintf(what, sizeof what, "blob '%s'", key);
	unsigned char *buf = malloc(CHUNK);
	if (!buf)
		return -ENOMEM;
	struct blobmeta bm;
	int rc = meta_get(n, key, msubj, &bm, e);
	if (rc == 0) {
		rc = blob_compare(n, key, sr, &bm, buf, e);
		free(buf);
		return rc;
	}
	if (rc != LR_ENOTFOUND) {
		free(buf);
		return rc;
	}
	unsigned char idb[16];
	char id[33];
	if (getrandom(idb, sizeof idb, 0) != (ssize_t)sizeof idb) {
		free(buf);
		lr_err_set(e, "storage: blob '%s': no random bytes", key);
		return -EIO;
	}
	hexify(id, idb, sizeof idb);
	char sfx[48];
	snprintf(sfx, sizeof sfx, ".c.%s", id);
	subject(csubj, n->p_blobs, key, sfx);
	struct lr_sha256 h;
	rc = lr_sha256_begin(&h);
	if (rc) {
		free(buf);
		lr_err_set(e, "storage: blob '%s': no SHA-256 (libcrypto)", key);
		return rc;
	}
	uint64_t chunks = 0, first = 0;
	ssize_t k = 0;
	for (;;) {
		k = src_read(sr, buf, CHUNK);
		if (k <= 0)
			break; /* the end (an empty blob has no chunks) or a failure */
		lr_sha256_update(&h, buf, (size_t)k);
		uint64_t sq;
		rc = publish(n, csubj, UINT64_MAX, "Lr-Seq", chunks + 1, NULL, buf, (size_t)k, &sq,
			     NULL, e, what);
		if (rc)
			break;
		if (!chunks)
			first = sq;
		chunks++;
	}
	unsigned char d[LR_SHA256_LEN];
	lr_sha256_end(&h, d);
	if (!rc && k < 0) {
		lr_err_set(e, "storage: blob '%s': reading its source failed after %llu of %llu "
			      "bytes", key, (unsigned long long)sr->off, (unsigned long long)sr->len);
		rc = (int)k;
	}
	free(buf);
	struct lr_err pe;
	if (rc) {
		purge(n, n->s_blobs, csubj, &pe, what);
		return rc;
	}
	char hex[65], meta[256];
	hexify(hex, d, sizeof d);
	int ml = snprintf(meta, sizeof meta, "v1 %llu %s %s %llu %llu",
			  (unsigned long long)sr->len, hex, id, (unsigned long long)chunks,
			  (unsigned long long)first);
	rc = publish(n, msubj, 0, NULL, 0, NULL, meta, (size_t)ml, NULL, NULL, e, what);
	if (rc == 0)
		return 0;
	if (rc == LR_ECONFLICT || rc == LR_EAMBIGUOUS) {
		/* someone committed first, or we cannot tell: the commit record decides */
		int was = rc;
		rc = meta_get(n, key, msubj, &bm, e);
		if (rc == 0 && strcmp(bm.id, id) == 0)
			return 0; /* ours landed */
		if (rc == 0)
			rc = sr->len == bm.size && strcmp(hex, bm.sha) == 0 ? 0 : LR_EBLOBCONFLICT;
		else if (rc == LR_ENOTFOUND)
			rc = was;
		if (rc == LR_EBLOBCONFLICT)
			lr_err_set(e, "storage: blob '%s' exists with different bytes", key);
	}
	/* someone else's commit stands (or nothing does): our chunks go */
	purge(n, n->s_blobs, csubj, &pe, what);
	return rc;
}

static int n_blob_put(struct lr_store *s, const char *key, const void *data, size_t len,
		      struct lr_err *e)
{
	struct src sr = { data ? data : (const void *)"", -1, len, 0 };
	return blob_put_src((struct nstore *)s, key, &sr, e);
}

static int n_blob_put_fd(struct lr_store *s, const char *key, int fd, uint64_t len,
			 struct lr_err *e)
{
	struct src sr = { NULL, fd, len, 0 };
	return blob_put_src((struct nstore *)s, key, &sr, e);
}

/* Streams a blob's chunks to sink, verifying them; *len receives the size. */
typedef int (*sink_fn)(void *arg, const void *p, size_t n);

static int blob_stream(struct nstore *n, const char *key, sink_fn sink, void *arg,
		       uint64_t *size, struct lr_err *e)
{
	char msubj[SUBJ_MAX], csubj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(msubj, n->p_blobs, key, ".m");
	snprintf(what, sizeof what, "blob '%s'", key);
	struct blobmeta bm;
	int rc = meta_get(n, key, msubj, &bm, e);
	if (rc)
		return rc;
	if (size)
		*size = bm.size;
	char sfx[48];
	snprintf(sfx, sizeof sfx, ".c.%s", bm.id);
	subject(csubj, n->p_blobs, key, sfx);
	struct lr_sha256 h;
	if ((rc = lr_sha256_begin(&h))) {
		lr_err_set(e, "storage: blob '%s': no SHA-256 (libcrypto)", key);
		return rc;
	}
	uint64_t seq = bm.first, total = 0;
	for (uint64_t i = 1; i <= bm.chunks; i++) {
		natsMsg *m = NULL;
		uint64_t sq, k;
		rc = dget(n, n->s_blobs, NULL, csubj, seq, &m, &sq, e, what);
		if (rc == LR_ENOTFOUND || (!rc && (hdr_u64(m, "Lr-Seq", &k) || k != i))) {
			lr_err_set(e, "storage: blob '%s': chunk %llu is missing", key,
				   (unsigned long long)i);
			rc = LR_ECORRUPT;
		}
		if (!rc) {
			size_t len = (size_t)N.msg_len(m);
			lr_sha256_update(&h, N.msg_data(m), len);
			total += len;
			rc = sink(arg, N.msg_data(m), len);
			if (rc)
				lr_err_set(e, "storage: blob '%s': writing it out failed", key);
		}
		if (m)
			N.msg_destroy(m);
		if (rc) {
			unsigned char d[LR_SHA256_LEN];
			lr_sha256_end(&h, d);
			return rc;
		}
		seq = sq + 1;
	}
	unsigned char d[LR_SHA256_LEN];
	lr_sha256_end(&h, d);
	char hex[65];
	hexify(hex, d, sizeof d);
	if (total != bm.size || strcmp(hex, bm.sha) != 0) {
		lr_err_set(e, "storage: blob '%s': contents do not match their SHA-256", key);
		return LR_ECORRUPT;
	}
	return 0;
}

struct memsink {
	unsigned char *p;
	size_t len, cap;
};

static int mem_sink(void *arg, const void *p, size_t n)
{
	struct memsink *m = arg;
	if (m->len + n > m->cap)
		return LR_ECORRUPT;
	memcpy(m->p + m->len, p, n);
	m->len += n;
	return 0;
}

static int fd_sink(void *arg, const void *p, size_t n)
{
	int fd = *(int *)arg;
	size_t off = 0;
	while (off < n) {
		ssize_t k = write(fd, (const char *)p + off, n - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		off += (size_t)k;
	}
	return 0;
}

static int n_blob_stat(struct lr_store *s, const char *key, uint64_t *len, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char msubj[SUBJ_MAX];
	subject(msubj, n->p_blobs, key, ".m");
	struct blobmeta bm;
	int rc = meta_get(n, key, msubj, &bm, e);
	if (!rc)
		*len = bm.size;
	return rc;
}

static int n_blob_get(struct lr_store *s, const char *key, struct lr_bytes *out,
		      struct lr_err *e)
{
	uint64_t size;
	int rc = n_blob_stat(s, key, &size, e);
	if (rc)
		return rc;
	if (size > SIZE_MAX / 2) {
		lr_err_set(e, "storage: blob '%s' is too big to hold in memory", key);
		return LR_ETOOBIG;
	}
	struct memsink m = { malloc(size ? (size_t)size : 1), 0, (size_t)size };
	if (!m.p)
		return -ENOMEM;
	rc = blob_stream((struct nstore *)s, key, mem_sink, &m, NULL, e);
	if (rc) {
		free(m.p);
		return rc;
	}
	out->data = m.p;
	out->len = m.len;
	return 0;
}

static int n_blob_get_fd(struct lr_store *s, const char *key, int fd, uint64_t *len,
			 struct lr_err *e)
{
	return blob_stream((struct nstore *)s, key, fd_sink, &fd, len, e);
}

static int n_blob_delete(struct lr_store *s, const char *key, struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char msubj[SUBJ_MAX], csubj[SUBJ_MAX], what[LR_STORE_NAME_MAX + 40];
	subject(msubj, n->p_blobs, key, ".m");
	subject(csubj, n->p_blobs, key, ".c.>");
	snprintf(what, sizeof what, "delete of blob '%s'", key);
	int rc = purge(n, n->s_blobs, msubj, e, what);
	return rc ? rc : purge(n, n->s_blobs, csubj, e, what);
}

static int n_blob_list(struct lr_store *s, const char *prefix, lr_name_cb cb, void *arg,
		       struct lr_err *e)
{
	struct nstore *n = (struct nstore *)s;
	char filter[128];
	snprintf(filter, sizeof filter, "%s*.m", n->p_blobs);
	struct names ns;
	int rc = list_subjects(n, n->s_blobs, filter, strlen(n->p_blobs), ".m", prefix, &ns, e,
			       "listing blobs");
	return rc ? rc : names_emit(&ns, cb, arg);
}

/* ---- open and close ---- */

static void server_stop(struct nstore *n)
{
	if (n->server > 0) {
		kill(n->server, SIGTERM);
		int status;
		for (int i = 0; i < 100; i++) {
			if (waitpid(n->server, &status, WNOHANG) == n->server) {
				n->server = 0;
				break;
			}
			usleep(50000);
		}
		if (n->server > 0) {
			kill(n->server, SIGKILL);
			waitpid(n->server, &status, 0);
		}
		n->server = 0;
	}
	if (n->ports_file[0])
		unlink(n->ports_file);
	if (n->lock_fd >= 0)
		close(n->lock_fd);
	n->lock_fd = -1;
}

static void n_close(struct lr_store *s)
{
	struct nstore *n = (struct nstore *)s;
	/* finish queued appends first (like LMDB's close) */
	pthread_mutex_lock(&n->qmu);
	n->qstop = 1;
	pthread_cond_broadcast(&n->qcv);
	pthread_mutex_unlock(&n->qmu);
	for (int i = 0; i < n->nworkers; i++)
		pthread_join(n->workers[i], NULL);
	pthread_mutex_lock(&n->lmu);
	n->hb_stop = 1;
	pthread_cond_broadcast(&n->lcv);
	int hb = n->hb_running;
	pthread_mutex_unlock(&n->lmu);
	if (hb)
		pthread_join(n->hb, NULL);
	if (n->js)
		N.js_destroy(n->js);
	if (n->nc) {
		N.conn_close(n->nc);
		N.conn_destroy(n->nc);
	}
	server_stop(n);
	free(n->dir);
	pthread_mutex_destroy(&n->qmu);
	pthread_cond_destroy(&n->qcv);
	pthread_mutex_destroy(&n->lmu);
	pthread_cond_destroy(&n->lcv);
	pthread_mutex_destroy(&n->tmu);
	free(n->tips);
	free(n);
}

static const struct lr_store_ops nats_ops = {
	.kind = "nats",
	.append = n_append,
	.append_async = n_append_async,
	.read = n_read,
	.tip = n_tip,
	.ledger_delete = n_ledger_delete,
	.acquire = n_acquire,
	.release = n_release,
	.kv_get = n_kv_get,
	.kv_put = n_kv_put,
	.kv_keys = n_kv_keys,
	.kv_delete = n_kv_delete,
	.blob_put = n_blob_put,
	.blob_put_fd = n_blob_put_fd,
	.blob_get = n_blob_get,
	.blob_get_fd = n_blob_get_fd,
	.blob_stat = n_blob_stat,
	.blob_delete = n_blob_delete,
	.blob_list = n_blob_list,
	.close = n_close,
};

/* The URL (or each of a comma-separated list) with its user information
 * replaced by three stars: credentials never leave. */
void lr__nats_redact(const char *url, char *out, size_t cap)
{
	size_t o = 0;
	if (cap)
		out[0] = 0;
	for (const char *u = url; cap && *u;) {
		const char *end = strchr(u, ',');
		if (!end)
			end = u + strlen(u);
		const char *scheme = strstr(u, "://");
		const char *start = scheme && scheme < end ? scheme + 3 : u;
		const char *at = NULL;
		for (const char *p = start; p < end && *p != '/'; p++)
			if (*p == '@')
				at = p;
		int k = at ? snprintf(out + o, cap - o, "%.*s***%.*s", (int)(start - u), u,
				      (int)(end - at), at)
			   : snprintf(out + o, cap - o, "%.*s", (int)(end - u), u);
		if (k < 0 || (size_t)k >= cap - o)
			break;
		o += (size_t)k;
		if (!*end)
			break;
		if (o + 1 < cap) {
			out[o++] = ',';
			out[o] = 0;
		}
		u = end + 1;
	}
}

static int stream_ensure(struct nstore *n, const char *name, const char *subj, int kv,
			 struct lr_err *e)
{
	jsStreamConfig c;
	N.cfg_init(&c);
	const char *subjects[1] = { subj };
	c.Name = name;
	c.Subjects = subjects;
	c.SubjectsLen = 1;
	c.Storage = js_FileStorage;
	c.Replicas = n->replicas;
	c.AllowDirect = true;
	c.MaxMsgSize = -1;
	if (kv) {
		/* what a JetStream KV bucket is (nats kv tools see it as one) */
		c.MaxMsgsPerSubject = 1;
		c.Discard = js_DiscardNew;
		c.AllowRollup = true;
		c.DenyDelete = true;
	}
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	natsStatus s = N.add_stream(&si, n->js, &c, NULL, &jerr);
	if (s != NATS_OK && jerr == JSStreamNameExistErr) /* there already, maybe made by hand */
		s = N.stream_info(&si, n->js, name, NULL, &jerr);
	if (s == NATS_OK) {
		if (si->Config && si->Config->Replicas > 1)
			n->leader_reads |= stream_bit(n, name);
		N.stream_info_destroy(si);
		return 0;
	}
	char what[128];
	snprintf(what, sizeof what, "nats: creating stream '%s'", name);
	return nfail(e, s, what);
}

static int ns_check(const char *ns, struct lr_err *e)
{
	size_t len = strlen(ns);
	int ok = len <= 32;
	for (size_t i = 0; ok && i < len; i++) {
		char c = ns[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		     c == '_' || c == '-';
	}
	if (!ok)
		lr_err_set(e, "storage: nats: invalid namespace '%.40s' ([A-Za-z0-9_-]{0,32})", ns);
	return ok ? 0 : -EINVAL;
}

/* Starts nats-server -js on a private loopback port storing in dir; url receives its URL. */
static int server_start(struct nstore *n, const char *dir, const char *bin, char *url,
			size_t cap, struct lr_err *e)
{
	int rc = lr_mkdirs(dir, 0700, NULL);
	if (rc) {
		lr_err_set(e, "storage: nats: cannot create '%s': %s", dir, strerror(-rc));
		return rc;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/luarig-nats.lock", dir);
	n->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (n->lock_fd < 0) {
		rc = -errno;
		lr_err_set(e, "storage: nats: cannot open '%s': %s", path, strerror(errno));
		return rc;
	}
	if (flock(n->lock_fd, LOCK_EX | LOCK_NB)) {
		lr_err_set(e, "storage: nats: '%s' is owned by another process", dir);
		return -EBUSY;
	}
	char conf[PATH_MAX], jsdir[PATH_MAX], log[PATH_MAX];
	snprintf(conf, sizeof conf, "%s/nats-server.conf", dir);
	snprintf(jsdir, sizeof jsdir, "%s/jetstream", dir);
	snprintf(log, sizeof log, "%s/nats-server.log", dir);
	FILE *f = fopen(conf, "we");
	if (!f) {
		rc = -errno;
		lr_err_set(e, "storage: nats: cannot write '%s': %s", conf, strerror(errno));
		return rc;
	}
	/* the payload must hold a 1 MiB record with its framing */
	fprintf(f, "listen: \"127.0.0.1:-1\"\nmax_payload: 8MB\n"
		   "jetstream {\n  store_dir: \"%s\"\n}\n", jsdir);
	fclose(f);
	/* the ports file is named after the server's pid: remove stale ones first */
	/* start-up errors (a bad configuration) go to stderr, before -l takes over */
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	int lf = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	char *argv[] = { (char *)bin, "-c", conf, "-js", "-l", log, "--ports_file_dir", (char *)dir,
			 NULL };
	struct lr_spawn_opts so = {
		.file = bin,
		.argv = argv,
		.fd = { null, null, lf },
		.pdeathsig = SIGTERM, /* the server ends with its owner, however the owner ends */
	};
	pid_t pid = 0;
	rc = null < 0 || lf < 0 ? -errno : lr_spawn(&so, &pid);
	if (null >= 0)
		close(null);
	if (lf >= 0)
		close(lf);
	if (rc) {
		lr_err_set(e, "storage: nats: cannot start '%s': %s", bin, strerror(-rc));
		return rc == -ENOENT || rc == -EACCES ? LR_EUNAVAILABLE : rc;
	}
	n->server = pid;
	snprintf(n->ports_file, sizeof n->ports_file, "%s/%s_%d.ports", dir,
		 strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin, (int)pid);
	for (int i = 0; i < 200; i++) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			n->server = 0;
			lr_err_set(e, "storage: nats: '%s' exited at start (exit status %d; see %s)",
				   bin, WIFEXITED(status) ? WEXITSTATUS(status) : -1, log);
			return LR_EUNAVAILABLE;
		}
		FILE *pf = fopen(n->ports_file, "re");
		if (pf) {
			char buf[1024];
			size_t k = fread(buf, 1, sizeof buf - 1, pf);
			fclose(pf);
			buf[k] = 0;
			char *u = strstr(buf, "nats://");
			int port = 0;
			if (u && sscanf(u, "nats://127.0.0.1:%d", &port) == 1 && port > 0) {
				snprintf(url, cap, "nats://127.0.0.1:%d", port);
				return 0;
			}
		}
		usleep(50000);
	}
	lr_err_set(e, "storage: nats: '%s' did not start within 10 s (see %s)", bin, log);
	return LR_ETIMEOUT;
}

/*
 * The client's servers: one URL, or a cluster's as a comma-separated list
 * (spaces around the commas allowed), which the library takes only as a
 * list of its own.
 */
static natsStatus set_servers(natsOptions *no, const char *url)
{
	if (!strchr(url, ','))
		return N.opts_url(no, url);
	char *copy = strdup(url);
	const char *v[16];
	int k = 0;
	if (!copy)
		return NATS_NO_MEMORY;
	for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && k < 16;
	     t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ' || *t == '\t')
			t++;
		char *end = t + strlen(t);
		while (end > t && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = 0;
		if (*t)
			v[k++] = t;
	}
	natsStatus s = k ? N.opts_servers(no, v, k) : NATS_INVALID_ARG;
	free(copy);
	return s;
}

int lr_store_nats_open(const struct lr_nats_opts *o, struct lr_store **out, struct lr_err *e)
{
	*out = NULL;
	int have_url = o->url && *o->url, have_dir = o->embedded_dir && *o->embedded_dir;
	if (have_url == have_dir) {
		lr_err_set(e, "storage: nats: give exactly one of url and embedded_dir");
		return -EINVAL;
	}
	if (have_dir && o->embedded_dir[0] != '/') {
		lr_err_set(e, "storage: nats: embedded_dir '%s' is not absolute", o->embedded_dir);
		return -EINVAL;
	}
	if ((o->nkey && *o->nkey) != (o->nkey_seed_file && *o->nkey_seed_file)) {
		lr_err_set(e, "storage: nats: nkey and nkey_seed_file go together");
		return -EINVAL;
	}
	const char *ns = o->ns ? o->ns : "";
	int rc = ns_check(ns, e);
	if (rc)
		return rc;
	rc = lr_lazy_open(&natslib);
	if (rc) {
		lr_err_set(e, "storage: nats: %s", natslib.err.msg);
		return rc;
	}
	struct nstore *n = calloc(1, sizeof *n);
	if (!n) {
		lr_err_set(e, "storage: out of memory");
		return -ENOMEM;
	}
	n->base.ops = &nats_ops;
	n->lock_fd = -1;
	n->ttl_ms = o->lease_ttl_ms > 0 ? o->lease_ttl_ms : 10000;
	n->wait_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
	n->replicas = o->replicas > 0 ? o->replicas : 1;
	pthread_mutex_init(&n->qmu, NULL);
	pthread_cond_init(&n->qcv, NULL);
	pthread_mutex_init(&n->tmu, NULL);
	n->tips = calloc(TIPS, sizeof *n->tips); /* NULL: no cache, every append reads first */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&n->lmu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->lcv, &ca);
	pthread_condattr_destroy(&ca);
	const char *u = *ns ? "_" : "";
	snprintf(n->s_ledgers, sizeof n->s_ledgers, "LR%s%s_LEDGERS", u, ns);
	snprintf(n->s_kv, sizeof n->s_kv, "KV_LR%s%s_KV", u, ns);
	snprintf(n->s_leases, sizeof n->s_leases, "KV_LR%s%s_LEASES", u, ns);
	snprintf(n->s_blobs, sizeof n->s_blobs, "LR%s%s_BLOBS", u, ns);
	snprintf(n->p_ledgers, sizeof n->p_ledgers, "lr.%s%sledger.", ns, *ns ? "." : "");
	snprintf(n->p_kv, sizeof n->p_kv, "$KV.LR%s%s_KV.", u, ns);
	snprintf(n->p_leases, sizeof n->p_leases, "$KV.LR%s%s_LEASES.", u, ns);
	snprintf(n->p_blobs, sizeof n->p_blobs, "lr.%s%sblob.", ns, *ns ? "." : "");
	unsigned char hb[16];
	if (getrandom(hb, sizeof hb, 0) != (ssize_t)sizeof hb) {
		lr_err_set(e, "storage: nats: no random bytes");
		n_close(&n->base);
		return -EIO;
	}
	hexify(n->holder, hb, sizeof hb);

	char url[256];
	if (have_dir) {
		n->dir = strdup(o->embedded_dir);
		rc = server_start(n, o->embedded_dir, o->server_bin ? o->server_bin : "nats-server",
				  url, sizeof url, e);
		if (rc) {
			n_close(&n->base);
			return rc;
		}
	} else {
		snprintf(url, sizeof url, "%s", o->url);
	}
	char shown[256];
	lr__nats_redact(url, shown, sizeof shown);
	natsOptions *no = NULL;
	natsStatus s = N.opts_create(&no);
	if (s == NATS_OK)
		s = set_servers(no, url);
	if (s == NATS_OK)
		s = N.opts_timeout(no, n->wait_ms);
	if (s == NATS_OK)
		s = N.opts_name(no, "luarig");
	if (s == NATS_OK)
		s = N.opts_max_reconnect(no, -1); /* operations time out meanwhile; leases fence */
	if (s == NATS_OK)
		s = N.opts_reconnect_wait(no, 250);
	/* A request out when its node dies fails at once instead of waiting out its whole
	 * timeout (a session stalled ~10 s when the node its client used was killed);
	 * publish and leader_get send it again on the next connection. */
	if (s == NATS_OK)
		s = N.opts_fail_requests(no, true);
	if (s == NATS_OK && o->user && *o->user)
		s = N.opts_user(no, o->user, o->password ? o->password : "");
	if (s == NATS_OK && o->token && *o->token)
		s = N.opts_token(no, o->token);
	if (s == NATS_OK && o->creds_file && *o->creds_file)
		s = N.opts_creds(no, o->creds_file, NULL);
	if (s == NATS_OK && o->nkey && *o->nkey)
		s = N.opts_nkey(no, o->nkey, o->nkey_seed_file);
	if (s == NATS_OK)
		s = N.connect(&n->nc, no);
	if (no)
		N.opts_destroy(no);
	if (s != NATS_OK) {
		/* the library's text may quote the URL: say only the status and the redacted URL */
		lr_err_set(e, "storage: nats: cannot connect to '%s': %s", shown, N.status_text(s));
		rc = s == NATS_TIMEOUT ? LR_ETIMEOUT : LR_ENETWORK;
		n_close(&n->base);
		return rc;
	}
	jsOptions jo;
	N.jsopts_init(&jo);
	jo.Wait = n->wait_ms;
	s = N.jetstream(&n->js, n->nc, &jo);
	if (s != NATS_OK) {
		rc = nfail(e, s, "nats: jetstream");
		n_close(&n->base);
		return rc;
	}
	char subj[96];
	snprintf(subj, sizeof subj, "%s>", n->p_ledgers);
	rc = stream_ensure(n, n->s_ledgers, subj, 0, e);
	snprintf(subj, sizeof subj, "%s>", n->p_kv);
	if (!rc)
		rc = stream_ensure(n, n->s_kv, subj, 1, e);
	snprintf(subj, sizeof subj, "%s>", n->p_leases);
	if (!rc)
		rc = stream_ensure(n, n->s_leases, subj, 1, e);
	snprintf(subj, sizeof subj, "%s>", n->p_blobs);
	if (!rc)
		rc = stream_ensure(n, n->s_blobs, subj, 0, e);
	for (int i = 0; !rc && i < ASYNC_THREADS; i++) {
		if (pthread_create(&n->workers[i], NULL, async_main, n)) {
			lr_err_set(e, "storage: nats: cannot start a thread");
			rc = -EAGAIN;
		} else {
			n->nworkers++;
		}
	}
	if (rc) {
		n_close(&n->base);
		return rc;
	}
	*out = &n->base;
	return 0;
}
