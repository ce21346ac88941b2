/*
 * sockets.c — the socket families, types and protocols a command may
 * create (tests/sandbox/run.sh case 29, issue 16 §5).
 *
 *   sockets        one line per case: "NAME ok" or "NAME ERRNO" (EAFNOSUPPORT, ...)
 *   sockets x32    the same socket through the x32 system call ABI
 *
 * run.sh runs it unconfined (the positive control: which of these this
 * kernel has) and confined, and compares.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *errname(int e)
{
	static const struct { int e; const char *n; } t[] = {
		{ EAFNOSUPPORT, "EAFNOSUPPORT" }, { EPROTONOSUPPORT, "EPROTONOSUPPORT" },
		{ ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT" }, { EPERM, "EPERM" }, { EACCES, "EACCES" },
		{ EINVAL, "EINVAL" }, { ENOSYS, "ENOSYS" }, { EOPNOTSUPP, "EOPNOTSUPP" },
		{ ENOENT, "ENOENT" }, { ENODEV, "ENODEV" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (t[i].e == e)
			return t[i].n;
	static char buf[16];
	snprintf(buf, sizeof buf, "E%d", e);
	return buf;
}

int main(int argc, char **argv)
{
	static const struct { const char *name; long fam, type, proto; int pair; } c[] = {
		/* what commands need */
		{ "unix-stream", AF_UNIX, SOCK_STREAM, 0, 0 },
		{ "unix-dgram", AF_UNIX, SOCK_DGRAM, 0, 0 },
		{ "unix-seqpacket", AF_UNIX, SOCK_SEQPACKET, 0, 0 },
		{ "unix-pair", AF_UNIX, SOCK_STREAM, 0, 1 },
		{ "tcp4", AF_INET, SOCK_STREAM, 0, 0 },
		{ "tcp4-ipproto", AF_INET, SOCK_STREAM, 6, 0 },
		{ "tcp4-flags", AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, 0 },
		{ "udp4", AF_INET, SOCK_DGRAM, 0, 0 },
		{ "udp4-ipproto", AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 17, 0 },
		{ "tcp6", AF_INET6, SOCK_STREAM, 6, 0 },
		{ "udp6", AF_INET6, SOCK_DGRAM, 0, 0 },
		/* protocols and types of IP beyond TCP and UDP */
		{ "mptcp4", AF_INET, SOCK_STREAM, 262, 0 },
		{ "mptcp6", AF_INET6, SOCK_STREAM, 262, 0 },
		{ "sctp4-stream", AF_INET, SOCK_STREAM, 132, 0 },
		{ "sctp4-seqpacket", AF_INET, SOCK_SEQPACKET, 132, 0 },
		{ "udplite4", AF_INET, SOCK_DGRAM, 136, 0 },
		{ "icmp4-ping", AF_INET, SOCK_DGRAM, 1, 0 },
		{ "icmp6-ping", AF_INET6, SOCK_DGRAM, 58, 0 },
		{ "raw4", AF_INET, SOCK_RAW, 1, 0 },
		{ "raw6", AF_INET6, SOCK_RAW, 58, 0 },
		/* the protocol with high bits the kernel drops (an int): 6 to it */
		{ "tcp4-highbits", AF_INET, SOCK_STREAM, 0x100000006L, 0 },
		/* other families */
		{ "unspec", AF_UNSPEC, SOCK_STREAM, 0, 0 },
		{ "netlink-route", AF_NETLINK, SOCK_RAW, 0, 0 },
		{ "netlink-audit", AF_NETLINK, SOCK_RAW, 9, 0 },
		{ "packet", AF_PACKET, SOCK_RAW, 0, 0 },
		{ "vsock", AF_VSOCK, SOCK_STREAM, 0, 0 },
		{ "bluetooth", AF_BLUETOOTH, SOCK_RAW, 1, 0 },
		{ "alg", AF_ALG, SOCK_SEQPACKET, 0, 0 },
		{ "key", AF_KEY, SOCK_RAW, 2, 0 },
		{ "tipc", AF_TIPC, SOCK_RDM, 0, 0 },
		{ "can", AF_CAN, SOCK_RAW, 1, 0 },
		{ "rds", AF_RDS, SOCK_SEQPACKET, 0, 0 },
		{ "xdp", AF_XDP, SOCK_RAW, 0, 0 },
		{ "qipcrtr", AF_QIPCRTR, SOCK_DGRAM, 0, 0 },
		{ "smc", AF_SMC, SOCK_STREAM, 0, 0 },
		{ "appletalk", AF_APPLETALK, SOCK_DGRAM, 0, 0 },
		{ "family-above-max", 200, SOCK_STREAM, 0, 0 },
		/* socketpair beyond AF_UNIX */
		{ "inet-pair", AF_INET, SOCK_STREAM, 0, 1 },
		{ "tipc-pair", AF_TIPC, SOCK_SEQPACKET, 0, 1 },
	};
	if (argc == 2 && strcmp(argv[1], "x32") == 0) {
#ifdef __x86_64__
		/* an x32 system call from a 64-bit process: the filter has no x32 rules */
		long fd = syscall(0x40000000L | SYS_socket, AF_NETLINK, SOCK_RAW, 0);
		printf("x32-netlink %s\n", fd >= 0 ? "ok" : errname(errno));
#else
		printf("x32-netlink ENOSYS\n");
#endif
		return 0;
	}
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		long r;
		int sv[2];
		if (c[i].pair)
			r = syscall(SYS_socketpair, c[i].fam, c[i].type, c[i].proto, sv);
		else
			r = syscall(SYS_socket, c[i].fam, c[i].type, c[i].proto);
		printf("%s %s\n", c[i].name, r >= 0 ? "ok" : errname(errno));
		if (r >= 0 && !c[i].pair)
			close((int)r);
		if (r >= 0 && c[i].pair) {
			close(sv[0]);
			close(sv[1]);
		}
	}
	return 0;
}
