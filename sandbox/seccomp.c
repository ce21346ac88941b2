/*
 * seccomp.c — the one symbol table of libseccomp (internal.h), opened on
 * first use by the probe, by the build tool that compiles the filter into
 * luarig (tools/seccompgen.c), by a host built without that (once per
 * process) and, for a spec that carries no filter, by the helper (before
 * its view hides /usr); and the filter itself.
 */
#include "internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const sonames[] = { "libseccomp.so.2", "libseccomp.so", NULL };
/* In the order of struct lr__seccomp's fields. */
static const char *const names[] = { "seccomp_init", "seccomp_rule_add", "seccomp_load",
				     "seccomp_release", "seccomp_syscall_resolve_name",
				     "seccomp_export_bpf", NULL };

struct lr__seccomp lr__scmp;

static struct lr_lazy lib = { .sonames = sonames, .names = names, .slots = (void **)&lr__scmp };

int lr__seccomp_open(const char **why)
{
	int rc = lr_lazy_open(&lib);
	if (rc && why)
		*why = lib.err.msg;
	return rc;
}

/* ---- the filter ---- */

static int deny(scmp_filter_ctx ctx, const char *name, int err)
{
	int nr = lr__scmp.resolve(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a syscall of this architecture */
	return lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
}

static int deny_arg(scmp_filter_ctx ctx, const char *name, unsigned n, struct scmp_arg_cmp a,
		    struct scmp_arg_cmp b)
{
	int nr = lr__scmp.resolve(name);
	return nr == __NR_SCMP_ERROR ? 0
	       : n == 1	     ? lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, a)
			     : lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 2, a, b);
}

/* One socket rule: refused with err when every comparison holds. */
static int deny_sock(scmp_filter_ctx ctx, int nr, int err, unsigned n, struct scmp_arg_cmp a,
		     struct scmp_arg_cmp b, struct scmp_arg_cmp c)
{
	return n == 1 ? lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 1, a)
	       : n == 2 ? lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 2, a, b)
			: lr__scmp.rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 3, a, b, c);
}

/*
 * A libseccomp rule compares each argument once, so "argument k is not one
 * of the allowed values" is written as the values between them, one rule
 * each (lo..hi), and one GE rule for everything above the last (open: hi
 * is then ignored). Comparisons are on all 64 bits: a value with high bits
 * set, which the kernel would truncate to an allowed int, is refused.
 */
static int deny_range(scmp_filter_ctx ctx, int nr, int err, unsigned k, unsigned long lo,
		      unsigned long hi, int open, unsigned n, struct scmp_arg_cmp a,
		      struct scmp_arg_cmp b)
{
	int rc = 0;
	for (unsigned long v = lo; !rc && (open ? v == lo : v <= hi); v++) {
		struct scmp_arg_cmp c = { k, open ? SCMP_CMP_GE : SCMP_CMP_EQ, v, 0 };
		if (n == 0)
			rc = deny_sock(ctx, nr, err, 1, c, a, b);
		else if (n == 1)
			rc = deny_sock(ctx, nr, err, 2, a, c, b);
		else
			rc = deny_sock(ctx, nr, err, 3, a, b, c);
	}
	return rc;
}

/*
 * socket(2) and socketpair(2): what commands need and no more (issue 16 §5,
 * docs/threat-model.md). AF_UNIX always. With inet_ok (tier A: a network
 * namespace of the sandbox's own, loopback and at most the proxy's
 * listeners), AF_INET and AF_INET6 for TCP (SOCK_STREAM, protocol 0 or
 * IPPROTO_TCP) and UDP (SOCK_DGRAM, 0 or IPPROTO_UDP), with any of the
 * SOCK_NONBLOCK / SOCK_CLOEXEC flags. Refused, with the errno the kernel
 * itself gives for what it does not support, so that programs take their
 * usual fallback: any other family EAFNOSUPPORT (netlink, packet, vsock,
 * alg, bluetooth, ...); any other type or protocol of IPv4/IPv6
 * EPROTONOSUPPORT (raw, MPTCP, SCTP, UDP-Lite, ICMP "ping" sockets, ...);
 * without inet_ok (tier B, no network namespace) every IP socket EACCES,
 * a refusal by policy. socketpair: AF_UNIX only (EAFNOSUPPORT).
 */
static int deny_sockets(scmp_filter_ctx ctx, int inet_ok)
{
	struct scmp_arg_cmp none = SCMP_A0(SCMP_CMP_EQ, 0); /* filler, never compared */
	int rc = 0;
	int nr = lr__scmp.resolve("socket");
	if (nr != __NR_SCMP_ERROR) {
		/* families: only AF_UNIX (1), AF_INET (2), AF_INET6 (10) */
		rc = deny_range(ctx, nr, EAFNOSUPPORT, 0, AF_UNSPEC, AF_UNSPEC, 0, 0, none, none);
		if (!rc)
			rc = deny_range(ctx, nr, EAFNOSUPPORT, 0, AF_INET + 1, AF_INET6 - 1, 0, 0,
					none, none);
		if (!rc)
			rc = deny_range(ctx, nr, EAFNOSUPPORT, 0, AF_INET6 + 1, 0, 1, 0, none, none);
		static const unsigned long ip[] = { AF_INET, AF_INET6 };
		for (size_t i = 0; i < 2 && !rc; i++) {
			struct scmp_arg_cmp fam = SCMP_A0(SCMP_CMP_EQ, ip[i]);
			if (!inet_ok) {
				rc = deny_sock(ctx, nr, EACCES, 1, fam, none, none);
				continue;
			}
			/* the type without its flags: SOCK_STREAM (1) and SOCK_DGRAM (2) only */
			for (unsigned long t = 0; t <= 0xf && !rc; t++)
				if (t != SOCK_STREAM && t != SOCK_DGRAM)
					rc = deny_sock(ctx, nr, EPROTONOSUPPORT, 2, fam,
						       SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, t), none);
			/* the protocol: 0 or the type's own */
			struct scmp_arg_cmp st = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_STREAM);
			struct scmp_arg_cmp dg = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_DGRAM);
			if (!rc)
				rc = deny_range(ctx, nr, EPROTONOSUPPORT, 2, 1, IPPROTO_TCP - 1, 0, 2,
						fam, st);
			if (!rc)
				rc = deny_range(ctx, nr, EPROTONOSUPPORT, 2, IPPROTO_TCP + 1, 0, 1, 2,
						fam, st);
			if (!rc)
				rc = deny_range(ctx, nr, EPROTONOSUPPORT, 2, 1, IPPROTO_UDP - 1, 0, 2,
						fam, dg);
			if (!rc)
				rc = deny_range(ctx, nr, EPROTONOSUPPORT, 2, IPPROTO_UDP + 1, 0, 1, 2,
						fam, dg);
		}
	}
	nr = lr__scmp.resolve("socketpair");
	if (!rc && nr != __NR_SCMP_ERROR) {
		rc = deny_range(ctx, nr, EAFNOSUPPORT, 0, AF_UNSPEC, AF_UNSPEC, 0, 0, none, none);
		if (!rc)
			rc = deny_range(ctx, nr, EAFNOSUPPORT, 0, AF_UNIX + 1, 0, 1, 0, none, none);
	}
	return rc;
}

/*
 * Kernel surfaces no build or test needs, namespace and mount changes, and
 * socket families and protocols beyond UNIX, TCP and UDP (deny_sockets).
 */
int lr__seccomp_build(int inet_ok, scmp_filter_ctx *out, const char **why)
{
	static const char *const denied[] = {
		"io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
		"keyctl", "add_key", "request_key", "init_module", "finit_module",
		"delete_module", "kexec_load", "kexec_file_load", "userfaultfd", "mount",
		"umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
		"fsmount", "fsconfig", "fspick", "mount_setattr", "unshare", "setns", "ptrace",
		"process_vm_readv", "process_vm_writev", "personality", "open_by_handle_at",
		"acct", "swapon", "swapoff", "reboot", NULL
	};
	static const unsigned long ns[] = { CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS,
					    CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
					    CLONE_NEWNET };
	*out = NULL;
	int rc = lr__seccomp_open(why);
	if (rc)
		return rc;
	scmp_filter_ctx ctx = lr__scmp.init(SCMP_ACT_ALLOW);
	if (!ctx) {
		*why = "seccomp_init failed";
		return -ENOMEM;
	}
	for (size_t i = 0; denied[i] && !rc; i++)
		rc = deny(ctx, denied[i], EPERM);
	/* clone3 hides its flags behind a pointer: ENOSYS makes libc fall back to clone. */
	if (!rc)
		rc = deny(ctx, "clone3", ENOSYS);
	struct scmp_arg_cmp none = SCMP_A0(SCMP_CMP_EQ, 0);
	for (size_t i = 0; i < sizeof ns / sizeof ns[0] && !rc; i++)
		rc = deny_arg(ctx, "clone", 1, SCMP_A0(SCMP_CMP_MASKED_EQ, ns[i], ns[i]), none);
	if (!rc)
		rc = deny_sockets(ctx, inet_ok);
	if (rc) {
		*why = "adding a rule";
		lr__scmp.release(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
}

/*
 * The compiled programs, one per inet_ok: a filter depends on nothing but
 * inet_ok and the architecture, so every run of every executor loads the
 * same bytes, and neither the host nor the helper builds it again. They
 * were compiled when luarig was built (lr__seccomp_baked); only a build
 * that had no libseccomp compiles them here, on first use, and keeps them
 * for the life of the process.
 */
static pthread_mutex_t bpf_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *bpf_prog[2];
static size_t bpf_len[2];

static int export_bpf(scmp_filter_ctx ctx, unsigned char **out, size_t *len)
{
	int fd = memfd_create("luarig-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = lr__scmp.export_bpf(ctx, fd);
	struct stat st;
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size <= 0 || st.st_size % 8 != 0 || st.st_size > LR_SBX_SECCOMP_MAX))
		rc = -E2BIG;
	unsigned char *buf = rc ? NULL : malloc((size_t)st.st_size);
	if (!rc && !buf)
		rc = -ENOMEM;
	size_t off = 0;
	while (!rc && off < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + off, (size_t)st.st_size - off, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc = r < 0 ? -errno : -EIO;
		else
			off += (size_t)r;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = off;
	return 0;
}

int lr__seccomp_compile(int inet_ok, unsigned char **prog, size_t *len, const char **why)
{
	scmp_filter_ctx ctx = NULL;
	*prog = NULL;
	*len = 0;
	int rc = lr__seccomp_build(inet_ok ? 1 : 0, &ctx, why);
	if (!rc) {
		rc = export_bpf(ctx, prog, len);
		if (rc)
			*why = "exporting the filter";
		lr__scmp.release(ctx);
	}
	return rc;
}

int lr__seccomp_bpf(int inet_ok, const unsigned char **prog, size_t *len, const char **why)
{
	int k = inet_ok ? 1 : 0, rc = 0;
	*prog = NULL;
	*len = 0;
	if (lr__seccomp_baked.len[k]) { /* compiled at build time: the same bytes */
		*prog = lr__seccomp_baked.prog[k];
		*len = lr__seccomp_baked.len[k];
		return 0;
	}
	pthread_mutex_lock(&bpf_lock);
	if (!bpf_prog[k])
		rc = lr__seccomp_compile(k, &bpf_prog[k], &bpf_len[k], why);
	if (!rc) {
		*prog = bpf_prog[k];
		*len = bpf_len[k];
	}
	pthread_mutex_unlock(&bpf_lock);
	return rc;
}
