/*
 * err.c — status messages and the short codes Lua sees.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *msg;
	const char *code;
} lr_errs[] = {
	[LR_ECANCELLED - LR_EBASE] = { "cancelled", "cancelled" },
	[LR_ETOOBIG - LR_EBASE] = { "too large", "too_large" },
	[LR_EPARSE - LR_EBASE] = { "malformed input", "parse" },
	[LR_ECORRUPT - LR_EBASE] = { "corrupt data", "corrupt" },
	[LR_ECONFLICT - LR_EBASE] = { "conflict", "conflict" },
	[LR_EAMBIGUOUS - LR_EBASE] = { "outcome unknown", "ambiguous" },
	[LR_ELEASEHELD - LR_EBASE] = { "lease held elsewhere", "lease_held" },
	[LR_ELEASELOST - LR_EBASE] = { "lease lost", "lease_lost" },
	[LR_ENOTFOUND - LR_EBASE] = { "not found", "not_found" },
	[LR_EBLOBCONFLICT - LR_EBASE] = { "different bytes under an existing blob", "blob_conflict" },
	[LR_ENETWORK - LR_EBASE] = { "network error", "network" },
	[LR_ETIMEOUT - LR_EBASE] = { "timed out", "timeout" },
	[LR_EHTTPSTATUS - LR_EBASE] = { "unexpected HTTP status", "status" },
	[LR_ECLOSED - LR_EBASE] = { "closed", "closed" },
	[LR_EREFUSED - LR_EBASE] = { "refused", "refused" },
	[LR_EUNAVAILABLE - LR_EBASE] = { "unavailable", "unavailable" },
};

const char *lr_strerror(int rc)
{
	if (rc == 0)
		return "ok";
	if (rc >= LR_EBASE && rc < LR_ELAST)
		return lr_errs[rc - LR_EBASE].msg;
	if (rc < 0)
		return strerror(-rc);
	return "unknown error";
}

const char *lr_errcode(int rc)
{
	if (rc == 0)
		return "ok";
	if (rc >= LR_EBASE && rc < LR_ELAST)
		return lr_errs[rc - LR_EBASE].code;
	switch (-rc) {
	case ETIMEDOUT: return "timeout";
	case ECANCELED: return "cancelled";
	case ENOMEM: return "ENOMEM";
	}
	if (rc < 0) {
		const char *n = strerrorname_np(-rc);
		if (n)
			return n;
	}
	return "error";
}

void lr_err_vset(struct lr_err *e, const char *fmt, va_list ap)
{
	if (e)
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
}

void lr_err_set(struct lr_err *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lr_err_vset(e, fmt, ap);
	va_end(ap);
}

int lr_err_fail(struct lr_err *e, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lr_err_vset(e, fmt, ap);
	va_end(ap);
	return rc;
}

void lr_err_clear(struct lr_err *e)
{
	if (e)
		e->msg[0] = '\0';
}
