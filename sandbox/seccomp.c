/*
 * seccomp.c — the one symbol table of libseccomp (internal.h), opened on
 * first use by the probe (in the host) and by the helper (before its view
 * hides /usr).
 */
#include "internal.h"

static const char *const sonames[] = { "libseccomp.so.2", "libseccomp.so", NULL };
/* In the order of struct lr__seccomp's fields. */
static const char *const names[] = { "seccomp_init", "seccomp_rule_add", "seccomp_load",
				     "seccomp_release", "seccomp_syscall_resolve_name", NULL };

struct lr__seccomp lr__scmp;

static struct lr_lazy lib = { .sonames = sonames, .names = names, .slots = (void **)&lr__scmp };

int lr__seccomp_open(const char **why)
{
	int rc = lr_lazy_open(&lib);
	if (rc && why)
		*why = lib.err;
	return rc;
}
