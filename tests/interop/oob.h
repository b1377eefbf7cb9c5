/* The out-of-band TCP connection that sr_datacheck (datacheck.c) and sr_mwcheck (mwcheck.c)
 * share: perftest's, the client connecting (retried for 10 s while the server starts) and
 * writing first. Include after the C library headers, with OOB_PROGRAM defined to the
 * program's name for its error messages. */
#ifndef SR_OOB_H
#define SR_OOB_H

static int sock = -1, is_client;

/* Says what failed, on stderr, and exits 2. */
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, OOB_PROGRAM ": ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static void read_all(void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(sock, (char *)buf + got, len - got);
		if (n <= 0)
			die("out-of-band read: %s", n == 0 ? "peer closed" : strerror(errno));
		got += n;
	}
}

static void write_all(const void *buf, size_t len)
{
	if (write(sock, buf, len) != (ssize_t)len)
		die("out-of-band write: %s", strerror(errno));
}

/* perftest's lock-step exchange of equal-sized messages: the client writes first, the server
 * reads first. */
static void xchg(const void *mine, void *theirs, size_t len)
{
	if (is_client) {
		write_all(mine, len);
		read_all(theirs, len);
	} else {
		read_all(theirs, len);
		write_all(mine, len);
	}
}

/* Connects to SERVER's PORT (is_client), or accepts one connection on PORT. */
static void oob_connect(const char *server, int port)
{
	if (is_client) {
		struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
		char ps[16];
		snprintf(ps, sizeof(ps), "%d", port);
		if (getaddrinfo(server, ps, &hints, &res))
			die("cannot resolve %s", server);
		for (int tries = 0;; tries++) {
			sock = socket(AF_INET, SOCK_STREAM, 0);
			if (!connect(sock, res->ai_addr, res->ai_addrlen))
				break;
			close(sock);
			if (tries > 100)
				die("couldn't connect to %s:%d", server, port);
			usleep(100000);
		}
		freeaddrinfo(res);
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
		int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
			die("couldn't listen on port %d: %s", port, strerror(errno));
		sock = accept(l, NULL, NULL);
		if (sock < 0)
			die("accept: %s", strerror(errno));
		close(l);
	}
}

#endif
