/*
 * probe.c - a connect with a deadline to each server of a list (probe.h).
 *
 *   "redis://a:6379,[::1]:6380" ─► "a" 6379, "::1" 6380 ─► getaddrinfo ─► non-blocking
 *   connect ─► poll(timeout) ─► SO_ERROR ─► close        a failure: bad(arg, "a:6379", -errno)
 *
 * Only reachability: no byte is sent, so neither the server's protocol nor its password is
 * checked (the client finds those out on first use, and counts them). Every address a name
 * resolves to is tried until one connects.
 *
 * Locking: none. Workload: once per mount, a handful of servers.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

/* Connect to one address within @timeout_ms. @return 0 or -errno. */
static int connect_one(const struct addrinfo *ai, unsigned timeout_ms)
{
	int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int e = 0;
	socklen_t el = sizeof(e);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		goto out;
	if (errno != EINPROGRESS) {
		e = errno;
		goto out;
	}
	if (poll(&p, 1, (int)timeout_ms) <= 0)
		e = ETIMEDOUT;
	else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		e = errno;
out:
	close(fd);
	return -e;
}

/* "host:port" or "[v6]:port" (@n bytes at @s) to a connect. @return 0 or -errno. */
static int probe_one(const char *s, size_t n, unsigned timeout_ms)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res;
	const char *colon = memrchr(s, ':', n);
	char host[256], port[8];
	size_t hl;
	int e = -EHOSTUNREACH;

	if (!colon || colon == s || n - (size_t)(colon - s) - 1 >= sizeof(port))
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (s[0] == '[' && colon[-1] == ']') { /* [v6]:port */
		s++;
		hl -= 2;
	}
	if (!hl || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	snprintf(port, sizeof(port), "%.*s", (int)(n - (size_t)(colon + 1 - s)), colon + 1);
	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -ENOENT;
	for (const struct addrinfo *ai = res; ai && e < 0; ai = ai->ai_next)
		e = connect_one(ai, timeout_ms);
	freeaddrinfo(res);
	return e;
}

int bk_probe_servers(const char *servers, unsigned timeout_ms, bk_probe_fn bad, void *arg)
{
	const char *p = servers;
	int failed = 0;

	if (strncmp(p, "redis://", 8) == 0)
		p += 8;
	while (*p) {
		size_t n = strcspn(p, ",");
		char name[300];
		int e = probe_one(p, n, timeout_ms);

		if (e < 0) {
			snprintf(name, sizeof(name), "%.*s", (int)n, p);
			bad(arg, name, e);
			failed++;
		}
		p += n + (p[n] == ',');
	}
	return failed;
}
