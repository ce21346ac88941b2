/*
 * netfds.c — the egress proxy's listening sockets. The helper makes them
 * inside the target's network namespace (where only loopback exists) and
 * passes them to the host over a UNIX socket; the host serves them from its
 * loop (host/egress.c). A socket keeps the namespace it was created in, so
 * the host accepts connections that the target makes to its own loopback,
 * with no bridge process and no route out.
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* Brings lo up unless it already is (then nothing needs a privilege). */
static int lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	int rc = 0;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		rc = -errno;
	} else if (!(ifr.ifr_flags & IFF_UP)) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			rc = -errno;
	}
	close(s);
	return rc;
}

static int bind_loopback(int type, uint16_t port)
{
	int s = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	if (type == SOCK_STREAM)
		(void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    (type == SOCK_STREAM && listen(s, 64) < 0)) {
		int rc = -errno;
		close(s);
		return rc;
	}
	return s;
}

int lr_sbx_send_fds(int sock, const void *buf, size_t len, const int *fds, int n, int flags)
{
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	if (n < 0 || n > 8)
		return -EINVAL;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	}
	ssize_t r;
	do
		r = sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)len ? 0 : r < 0 ? -errno : -EIO;
}

int lr_sbx_make_listeners(uint16_t proxy_port, uint16_t dns_port, int control_fd)
{
	int rc = lo_up();
	if (rc < 0)
		return rc;
	int tcp = bind_loopback(SOCK_STREAM, proxy_port);
	if (tcp < 0)
		return tcp;
	int udp = bind_loopback(SOCK_DGRAM, dns_port);
	if (udp < 0) {
		close(tcp);
		return udp;
	}

	char byte = 'L';
	int fds[2] = { tcp, udp };
	rc = lr_sbx_send_fds(control_fd, &byte, 1, fds, 2, 0);
	close(tcp);
	close(udp);
	return rc;
}

static int sockopt_int(int fd, int level, int name, int *out)
{
	socklen_t len = sizeof *out;
	if (getsockopt(fd, level, name, out, &len) < 0)
		return -errno;
	return len == sizeof *out ? 0 : -EPROTO;
}

/* A socket of the expected type, AF_INET, bound to 127.0.0.0/8. */
static int check_socket(int fd, int type, int listening)
{
	int v;
	if (sockopt_int(fd, SOL_SOCKET, SO_TYPE, &v) < 0 || v != type)
		return -EPROTO;
	if (sockopt_int(fd, SOL_SOCKET, SO_DOMAIN, &v) < 0 || v != AF_INET)
		return -EPROTO;
	if (sockopt_int(fd, SOL_SOCKET, SO_ACCEPTCONN, &v) < 0 || v != listening)
		return -EPROTO;
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || len != sizeof sa ||
	    (ntohl(sa.sin_addr.s_addr) >> 24) != 127)
		return -EPROTO;
	return 0;
}

static int set_flags(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	return 0;
}

int lr_sbx_recv_listeners(int control_fd, int *tcp, int *udp)
{
	*tcp = *udp = -1;
	char byte = 0;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	/* Room for more than we expect, so an extra descriptor is seen (and closed). */
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(8 * sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
	ssize_t n;
	do
		n = recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;

	int fds[8], nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && nfds < 8; i++)
			memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	int rc = 0;
	if (n == 0 && nfds == 0)
		rc = LR_ECLOSED;
	else if (n != 1 || byte != 'L' || nfds != 2 || (msg.msg_flags & MSG_CTRUNC))
		rc = -EPROTO;
	else if (check_socket(fds[0], SOCK_STREAM, 1) < 0 || check_socket(fds[1], SOCK_DGRAM, 0) < 0)
		rc = -EPROTO;
	else if ((rc = set_flags(fds[0])) == 0)
		rc = set_flags(fds[1]);
	if (rc < 0) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return rc;
	}
	*tcp = fds[0];
	*udp = fds[1];
	return 0;
}
