/*
 * endpoint.c - metrics=[HOST:]PORT: the mount's counters over HTTP, for Prometheus to scrape.
 *
 *   fs_main: fs_endpoint_open ─► socket, bind, listen      before anything else: a port in use
 *            (mount.c)                                      fails the mount with one line
 *            ... mount, daemonize ...
 *            fs_endpoint_start ─► libmicrohttpd, one thread (epoll), on that socket
 *
 *   GET /metrics ─► fs_metrics_snap ─► fs_metrics_write ──┐
 *                   (each module's stats lock in turn)     ├─► one buffer ─► 200 text/plain
 *                   fs_process_metrics_write (/proc) ──────┘    version=0.0.4
 *   HEAD /metrics   the same, without the body
 *   other method    405 (Allow: GET, HEAD)      other path   404
 *
 * The answer is the stats file's text (the same snapshot and writer as .tierfs/stats), then
 * the standard process_* families. It is made from counters only: no lock a module holds
 * while it waits for the store, no FUSE request, no file of the mount. So a hung store, a
 * wedged FUSE worker or a full limiter leave the endpoint answering.
 *
 * HTTP is libmicrohttpd's: request parsing, keep-alive, limits. It runs one thread of its own
 * (an epoll loop), started after daemonizing, since a fork keeps only the calling thread; the
 * socket is bound before mounting, so a port that is taken fails the mount before anything
 * is mounted, and the fd crosses the fork. Bounds on what clients may hold:
 *   ENDPOINT_CONNS       connections at once; more are accepted and closed at once;
 *   ENDPOINT_IDLE_S      a connection idle (or trickling) this long is closed, so idle and
 *                        slow clients give their place back;
 *   ENDPOINT_CONN_MEM    bytes of a connection's request buffer (a request longer is refused);
 *   ENDPOINT_BACKLOG     the listen queue, as long as the limit: a burst of connections that
 *                        comes while the thread is busy or descheduled waits there, where a
 *                        SYN dropped by a full queue would be sent again only a second later.
 * A scrape costs a snapshot and a few hundred formatted lines; scrapes are answered one after
 * the other by the one thread, which keeps the endpoint's cost to one core at most however
 * many scrapers come, and a scrape waits only for the scrapes before it.
 *
 * Locking: none of its own. The daemon's thread reads the mount through fs_metrics_snap
 * (module locks, one at a time). Workload: a scrape every few seconds from one or two
 * Prometheus servers; a burst of dashboards at most.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "fs_i.h"
#include "metrics.h"

#define ENDPOINT_CONNS	  512
#define ENDPOINT_IDLE_S	  5
#define ENDPOINT_CONN_MEM (16u << 10)
#define ENDPOINT_BACKLOG  ENDPOINT_CONNS
#define ENDPOINT_PATH	  "/metrics"
#define CONTENT_TYPE	  "text/plain; version=0.0.4; charset=utf-8"

/* Written by fs_main's thread before the daemon's thread starts (fs_endpoint_start) and after
 * it stopped (fs_endpoint_free); read-only in between: no lock. */
struct fs_endpoint {
	int fd;		      /* the listening socket until started (then MHD's), or -1 */
	struct MHD_Daemon *d; /* once started */
	struct mount *m;      /* what it answers about; set at start */
	char addr[96];	      /* "127.0.0.1:9100", "[::1]:9100": for messages */
};

int fs_parse_endpoint(const char *spec, char *host, size_t hostlen, unsigned *ret_port)
{
	const char *colon, *port = spec, *h = "127.0.0.1";
	size_t hn = strlen(h);
	unsigned long v = 0;

	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		h = spec + 1;
		hn = (size_t)(close - h);
		port = close + 2;
	} else if ((colon = strchr(spec, ':'))) {
		if (strchr(colon + 1, ':'))
			return -EINVAL; /* an IPv6 address goes in brackets */
		h = spec;
		hn = (size_t)(colon - spec);
		port = colon + 1;
	}
	if (!hn || hn >= hostlen || strspn(port, "0123456789") != strlen(port) || !*port ||
	    strlen(port) > 5)
		return -EINVAL;
	v = strtoul(port, NULL, 10);
	if (v < 1 || v > 65535)
		return -EINVAL;
	memcpy(host, h, hn);
	host[hn] = '\0';
	*ret_port = (unsigned)v;
	return 0;
}

/* A socket listening on @host:@port (the first address that binds). @return the fd or
 * -errno. */
static int listen_on(const char *host, unsigned port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_ADDRCONFIG};
	struct addrinfo *res, *ai;
	char ps[8];
	int fd = -1, r = -EADDRNOTAVAIL, one = 1;

	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &res) != 0)
		return -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		/* a restart reuses the port at once (no wait for TIME_WAIT); a port another
		 * socket listens on still fails */
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, ENDPOINT_BACKLOG) == 0)
			break;
		r = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd >= 0 ? fd : r;
}

int fs_endpoint_open(const char *spec, struct fs_endpoint **ret, char *err, size_t errlen)
{
	struct fs_endpoint *e;
	char host[64];
	unsigned port;
	int fd;

	if (fs_parse_endpoint(spec, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen,
			 "metrics=%s: use [HOST:]PORT (HOST an address or a name, "
			 "[ADDR] for IPv6; PORT 1-65535)",
			 spec);
		return -EINVAL;
	}
	fd = listen_on(host, port);
	if (fd < 0) {
		snprintf(err, errlen, "metrics=%s: cannot listen on %s port %u: %s", spec, host,
			 port, strerror(-fd));
		return fd;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e->fd = fd;
	snprintf(e->addr, sizeof(e->addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
	*ret = e;
	return 0;
}

/* ---- answers -------------------------------------------------------------------------------- */

/* The scrape's text, as it grows: one request's, on the daemon's thread (no lock). */
struct body {
	char *s;
	size_t len, cap;
};

static int body_write(void *arg, const char *s, size_t n)
{
	struct body *b = arg;

	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64 << 10;
		char *p;

		while (cap < b->len + n)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p)
			return -ENOMEM;
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	return 0;
}

/* The metrics, into *ret (malloc'd). @return 0 or -errno. */
static int scrape(struct mount *m, struct body *ret)
{
	struct fs_metrics_snap snap;
	struct fs_metrics_sink sink = {.write = body_write, .arg = ret};
	int r;

	fs_metrics_snap(m, &snap);
	r = fs_metrics_write(&snap, &sink);
	if (r == 0)
		r = fs_process_metrics_write(&sink);
	return r;
}

/* Queue @len bytes of @text (freed by MHD when it is @owned) with @status. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *text, size_t len,
			     bool owned, const char *allow)
{
	struct MHD_Response *rs = MHD_create_response_from_buffer(
	    len, text, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	enum MHD_Result r;

	if (!rs) {
		if (owned)
			free(text);
		return MHD_NO; /* MHD closes the connection */
	}
	MHD_add_response_header(rs, MHD_HTTP_HEADER_CONTENT_TYPE,
				status == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(rs, MHD_HTTP_HEADER_ALLOW, allow);
	r = MHD_queue_response(c, status, rs);
	MHD_destroy_response(rs);
	return r;
}

static char not_found[] = "404 not found: the metrics are at " ENDPOINT_PATH "\n";
static char not_allowed[] = "405 method not allowed: GET or HEAD\n";
static char failed[] = "500 the metrics could not be written (out of memory)\n";

/*
 * MHD's access handler, called when a request's headers are in, then once per piece of its
 * body, then once more with none. A wrong path or method is answered at the first call
 * (without waiting for a body: MHD closes such a connection after the answer); a scrape at
 * the last, so that MHD knows the request is whole and keeps the connection alive.
 */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **con_cls)
{
	static int seen; /* *con_cls after the first call: its address, a marker */
	struct fs_endpoint *e = cls;
	struct body b = {0};

	if (strcmp(url, ENDPOINT_PATH) != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, not_found, sizeof(not_found) - 1, false, NULL);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed, sizeof(not_allowed) - 1,
			     false, "GET, HEAD");
	if (!*con_cls) {
		*con_cls = &seen;
		return MHD_YES;
	}
	if (*upload_len) { /* a body with a GET: read and ignored */
		*upload_len = 0;
		return MHD_YES;
	}
	if (scrape(e->m, &b) < 0) {
		free(b.s);
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, failed, sizeof(failed) - 1, false,
			     NULL);
	}
	return reply(c, MHD_HTTP_OK, b.s, b.len, true, NULL);
}

int fs_endpoint_start(struct fs_endpoint *e, struct mount *m)
{
	if (!e)
		return 0;
	e->m = m;
	e->d = MHD_start_daemon(
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC, 0, NULL, NULL, on_request, e,
	    MHD_OPTION_LISTEN_SOCKET, (MHD_socket)e->fd, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned)ENDPOINT_CONNS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ENDPOINT_IDLE_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)ENDPOINT_CONN_MEM, MHD_OPTION_END);
	if (!e->d) {
		fuse_log(FUSE_LOG_ERR, "tierfs: metrics on %s: cannot start the HTTP server\n",
			 e->addr);
		return -EIO;
	}
	e->fd = -1; /* the daemon's: MHD_stop_daemon closes it */
	fuse_log(FUSE_LOG_INFO, "tierfs: metrics on http://%s%s\n", e->addr, ENDPOINT_PATH);
	return 0;
}

const char *fs_endpoint_addr(const struct fs_endpoint *e)
{
	return e ? e->addr : NULL;
}

void fs_endpoint_free(struct fs_endpoint *e)
{
	if (!e)
		return;
	if (e->d)
		MHD_stop_daemon(e->d);
	if (e->fd >= 0)
		close(e->fd);
	free(e);
}
