/*
 * Datagram rsockets through the shim's librdmacm (issue 37): two SOCK_DGRAM rsockets of one
 * process exchange datagrams (the first over the UDP service, the rest over UD once each
 * side learnt the other's QPN), and the error paths: a datagram larger than a 2048-byte slot
 * (EMSGSIZE), rsend without a destination (EDESTADDRREQ), an empty non-blocking receive
 * (EAGAIN), rconnect with a short address (the kernel's EINVAL), rlisten (EOPNOTSUPP), an
 * unknown handle (EBADF). Arguments: the device's IPv4 address and its MTU (default 4096): the
 * largest datagram is the smaller of the slot and the MTU less the header. Prints "ok <checks>".
 */
#include "common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/socket.h>

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
	return a;
}

/* Waits at most 2 s for a datagram on s. */
static void wait_readable(int s)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	CHECK(rpoll(&p, 1, 2000) == 1);
	CHECK(p.revents & POLLIN);
}

/* One datagram of len bytes (pattern seed) from `from` to `to_addr`, received on `to`. */
static void exchange(int from, int to, struct sockaddr_in *to_addr, struct sockaddr_in *from_addr,
		     size_t len, int seed)
{
	static unsigned char out[4096], in[4096];
	struct sockaddr_in src;
	socklen_t slen = sizeof src;
	size_t i;

	for (i = 0; i < len; i++)
		out[i] = (unsigned char)(i * 7 + seed);
	CHECK(rsendto(from, out, len, 0, (struct sockaddr *)to_addr, sizeof *to_addr) == (ssize_t)len);
	wait_readable(to);
	memset(in, 0, sizeof in);
	CHECK(rrecvfrom(to, in, sizeof in, 0, (struct sockaddr *)&src, &slen) == (ssize_t)len);
	CHECK(memcmp(in, out, len) == 0);
	CHECK(slen == sizeof src);
	CHECK(src.sin_port == from_addr->sin_port);
	CHECK(src.sin_addr.s_addr == from_addr->sin_addr.s_addr);
}

int main(int argc, char **argv)
{
	static unsigned char big[4096];
	const char *ip = argc > 1 ? argv[1] : "127.0.0.1";
	int mtu = argc > 2 ? atoi(argv[2]) : 4096;
	int max = (mtu < 2048 ? mtu : 2048) - 8;
	struct sockaddr_in aa = addr_of(ip, 7611), ab = addr_of(ip, 7612);
	struct sockaddr_in name;
	socklen_t nlen = sizeof name;
	char buf[64];
	int a, b, c, i;

	CHECK(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP) == -1 && errno == ENOTSUP);
	a = rsocket(AF_INET, SOCK_DGRAM, 0);
	b = rsocket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
	CHECK(a >= 0 && b >= 0 && a != b);
	CHECK(rbind(a, (struct sockaddr *)&aa, sizeof aa) == 0);
	CHECK(rbind(b, (struct sockaddr *)&ab, sizeof ab) == 0);
	CHECK(rgetsockname(b, (struct sockaddr *)&name, &nlen) == 0);
	CHECK(name.sin_port == ab.sin_port && name.sin_addr.s_addr == ab.sin_addr.s_addr);

	/* An empty socket: EAGAIN when non-blocking, by flag or by rfcntl. */
	CHECK(rrecv(a, buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN);
	CHECK(rfcntl(b, F_SETFL, O_NONBLOCK) == 0);
	CHECK(rfcntl(b, F_GETFL) & O_NONBLOCK);
	CHECK(rrecv(b, buf, sizeof buf, 0) == -1 && errno == EAGAIN);

	/* The first datagram each way crosses by the UDP service, the rest over UD. */
	for (i = 0; i < 20; i++) {
		exchange(a, b, &ab, &aa, 1 + i * (max / 20), i);
		exchange(b, a, &aa, &ab, max - i * 13, i);
	}
	/* From now on a's datagrams to b cross over UD alone: with b's UDP socket (its handle)
	 * connected elsewhere, so that the kernel drops anything a sends it over UDP, they still
	 * arrive. */
	struct sockaddr_in elsewhere = addr_of(ip, 9);
	CHECK(connect(b, (struct sockaddr *)&elsewhere, sizeof elsewhere) == 0);
	for (i = 0; i < 5; i++)
		exchange(a, b, &ab, &aa, 100 + i, i);
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	CHECK(connect(b, &unspec, sizeof unspec) == 0);
	/* A datagram is cut to the buffer it is read into, the rest of it dropped. */
	CHECK(rsendto(a, "0123456789", 10, 0, (struct sockaddr *)&ab, sizeof ab) == 10);
	wait_readable(b);
	CHECK(rrecvfrom(b, buf, 4, MSG_PEEK, NULL, NULL) == 4);
	CHECK(rrecv(b, buf, 4, 0) == 4 && memcmp(buf, "0123", 4) == 0);
	CHECK(rrecv(b, buf, sizeof buf, 0) == -1 && errno == EAGAIN);

	/* Larger than the slot or the MTU less the 8-byte address header: EMSGSIZE. */
	CHECK(rsendto(a, big, max + 1, 0, (struct sockaddr *)&ab, sizeof ab) == -1 && errno == EMSGSIZE);
	CHECK(rsendto(a, big, 4096, 0, (struct sockaddr *)&ab, sizeof ab) == -1 && errno == EMSGSIZE);

	/* rsend needs a destination; rconnect gives one, with the kernel's checks. */
	c = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(c >= 0);
	CHECK(rsend(c, "x", 1, 0) == -1 && errno == EDESTADDRREQ);
	CHECK(rconnect(c, (struct sockaddr *)&ab, 4) == -1 && errno == EINVAL);
	CHECK(rlisten(c, 1) == -1 && errno == EOPNOTSUPP);
	CHECK(rconnect(c, (struct sockaddr *)&ab, sizeof ab) == 0);
	CHECK(rsend(c, "hello", 5, 0) == 5);
	wait_readable(b);
	CHECK(rrecv(b, buf, sizeof buf, 0) == 5 && memcmp(buf, "hello", 5) == 0);

	CHECK(rclose(c) == 0);
	CHECK(rclose(a) == 0);
	CHECK(rclose(b) == 0);
	CHECK(rclose(b) == -1 && errno == EBADF);
	CHECK(rsend(b, "x", 1, 0) == -1 && errno == EBADF);
	printf("ok %ld\n", checks);
	return 0;
}
