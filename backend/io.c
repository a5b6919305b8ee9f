/*
 * io.c - the backend's single I/O thread.
 *
 * Every network request of a mount runs here, on one curl multi handle, so connections are
 * kept alive and shared, and no FUSE worker waits on a socket for a block (metadata calls wait
 * on a condition variable for their own request; see io_run).
 *
 *   submitters (any thread)                 I/O thread
 *   io_submit ──► incoming list ──wakeup──► urgent queue ─────┐      ┌─► curl multi (≤ max_conns)
 *   io_defer  ──► incoming timers           background queue ─┴slots─┘        │ done
 *                                           timers (sorted) ◄──── retries ◄───┤ retryable failure
 *                                                                             └► r->done(r)
 *
 * Slots: at most max_conns transfers run; BK_BACKGROUND ones at most max_conns - reserve, with
 * reserve = max(1, max_conns / 4), so a burst of background fetches never takes the
 * connections urgent ones need. Urgent requests always start first. Which reads are urgent is
 * the caller's business: io knows priorities, not the cache tiers behind them.
 *
 * A range read is trusted only after checking: a 206 must carry a Content-Range naming exactly
 * the bytes asked for; a 200 (a server that ignores Range) is accepted by skipping to the
 * offset and dropping the rest; an ETag other than the one expected means the object changed
 * (-ESTALE), and no ETag at all, when one was expected, means the bytes cannot be tied to a
 * version (-EIO: a broken answer, retried; a store that never sends ETags has none to expect
 * and is read as it is); a body shorter or longer than asked is an error, and the bytes are
 * never handed on. Retryable failures (connection errors, timeouts, 408, 429, 5xx, short
 * bodies) are tried again after an exponential backoff with jitter, up to `retries` more times.
 *
 * Back-pressure: a store that answers 503 (SlowDown) or 429 is asking for fewer requests. The
 * number of transfers allowed at once is a window managed like TCP's congestion window:
 * halved on such an answer (at most once per 100 ms, so one burst of refusals counts once),
 * grown by one per window of successful answers, never below 1 nor above max_conns. The stats
 * file shows the window and the count of slow-down answers.
 *
 * Latency. Each attempt is timed from its start to its answer (transfer_done) and counted in
 * the histogram of what it does (bk_stats.lat: a range GET, a HEAD, anything else a listing),
 * so a slow store shows in the quantiles whatever the queue in front of it. A merged request
 * counts once. A request of another kind (an upload's PUT) adds its op to bk_op and says so
 * in op_of.
 *
 * Merged reads. The range reads one thread submits under one plug (io_plug: the blocks of
 * one FUSE read and its readahead) reach the queue together, as a batch. When an urgent
 * range read is taken from the queue and the reads queued right behind it are of its batch
 * and ask for the next bytes of the same object (same URL, ETag, headers and signer), they
 * go out as one range request of up to MERGE_MAX bytes, carried by a request of io's own
 * (the carrier, struct io_xfer.parts). Reads of other batches (other readers) are never
 * merged, and neither are background (lagging) reads: their limiter counts requests too
 * (fleet_lagging_ops).
 * Its body is dealt out to the reads in order, and each read completes as soon as its last
 * byte is in, not when the whole request ends: a reader waiting for the first block waits
 * for that block only. If the request fails, the reads not yet complete fail or are retried
 * each on its own, as if each had gone out alone. Fewer, larger requests cost a store that
 * pays a price per request less (docs/performance.md has the figures), and cost S3
 * fewer GET charges.
 *
 * A store that refuses connections (a request could not connect even after its retries)
 * fails the requests queued behind it at once, rather than each going through its own
 * retries; requests submitted afterwards go out as usual, so reads recover as soon as the
 * store is back. A request that merely timed out says nothing about the others and trips
 * nothing.
 *
 * Time and randomness come in through io_cfg (the monotonic clock and rand() unless a test
 * passes its own), and the rules above are pure functions (io_window_feedback, io_backoff_ns,
 * io_range_check) that tests/unit/test_io.c drives directly.
 *
 * Writes. A request may carry a method (PUT, POST, DELETE) and a body in the submitter's
 * memory, which every attempt hands to curl again from its first byte, so a retried part goes
 * out whole. Its answer goes through the same status table and retry rules as a read's; a
 * submitter's check (io_check_fn) may then fail an answer the status alone would pass (S3's
 * 200 carrying an <Error>, a part's ETag that is not the MD5 of the bytes sent), and a failure
 * it calls -EIO is retried like a corrupt read.
 *
 * A request (struct io_req, io.h) shows the submitter what it asks and what came back; io's
 * own state of it (struct io_xfer: the curl handle, the queue link, the attempt's progress) is
 * allocated with it and hidden here. The schemes share io_read (a range GET, If-Match) and
 * io_head (size, mtime, ETag) at the end of this file.
 *
 * One poller (io_set_poller: the shared tier's Redis client, redis.c) may add sockets of its
 * own to the same curl_multi_poll, so Redis replies are read on this thread too and no other
 * thread or event loop is needed; its timeouts are io_defer timers.
 *
 * Locking: io->lock guards the incoming lists and the stopping flag; everything else belongs
 * to the I/O thread alone. Stats are relaxed atomics.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "httphdr.h"
#include "io.h"

#define BODY_MAX (64u << 20) /* listings and error documents larger than this are refused */
#define POOL_MAX 64	     /* idle easy handles kept for reuse */
#define MERGE_MAX (16u << 20) /* the largest merged range read */

/* io's own state of a request, hidden from the submitter. The I/O thread's alone, but for
 * next, which io->lock guards while the request is on the incoming list, and sync_done, which
 * io->lock guards. */
struct io_xfer {
	CURL *easy;			/* while running */
	struct curl_slist *att_headers; /* headers of the current attempt (copy + auth) */
	struct io_req *next;		/* queue link */
	unsigned attempt;		/* 0 for the first */
	uint64_t got;			/* body bytes received this attempt */
	uint64_t skip;			/* 200 answer to a range: bytes to drop before off */
	bool whole;			/* this attempt got a 200 for a range request */
	bool complete;			/* range satisfied, the rest of a 200 body dropped */
	bool have_cr;			/* Content-Range seen */
	uint64_t cr_first, cr_last, cr_total;
	bool sync_done; /* io_run's wait flag */
	/* A carrier (see merge): its reads not yet completed, in range order, linked by next;
	 * the first one not whole yet gets the next body bytes (fill). */
	bool carrier;
	struct io_req *parts, *fill;
	uint64_t batch; /* the plug it was submitted under (io_unplug), 0: none */
	uint64_t sent_ns; /* when this attempt started (the loop's clock) */
};

/* A request and its io_xfer, in one allocation. */
struct req_block {
	struct io_req r;
	struct io_xfer x;
};

struct timer {
	uint64_t due; /* CLOCK_MONOTONIC ns */
	void (*fn)(void *arg);
	void *arg;
	struct io_req *retry; /* a request waiting to be tried again (fn NULL) */
	struct timer *next;
};

struct io {
	struct io_cfg cfg;
	char *ca_file; /* copy of cfg.ca_file */
	CURLM *multi;
	pthread_t thread;
	bool started; /* thread started; owner's thread only */

	pthread_mutex_t lock;
	pthread_cond_t cond;		  /* io_run waiters */
	struct io_req *in_head, *in_tail; /* submitted, not yet taken; lock */
	struct timer *tin;		  /* timers submitted; lock */
	bool stopping;			  /* lock */
	uint64_t batches;		  /* plugs handed over (io_unplug); lock */

	/* I/O thread only */
	struct io_req *head[2], *tail[2]; /* a queue per priority, indexed by enum bk_prio */
	struct timer *timers;		  /* sorted by due */
	unsigned active, active_bg;	  /* transfers running, of which BK_BACKGROUND */
	struct io_window win;		  /* AIMD: transfers allowed at once, 1..max_conns */
	struct io_req *running;		  /* transfers in the multi handle, linked by next */
	CURL *pool[POOL_MAX];
	unsigned npool;
	struct io_poller poller;	  /* set while stopped; fds NULL: none */

	struct bk_stats st; /* relaxed atomics */
};

#define STAT_ADD(io, f, v) __atomic_fetch_add(&(io)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(io, f, v) __atomic_fetch_sub(&(io)->st.f, (v), __ATOMIC_RELAXED)

/* The clock and the randomness io uses unless io_cfg names others. */
static uint64_t sys_mono_ns(void *env_arg)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static double sys_random(void *env_arg)
{
	return (double)rand() / ((double)RAND_MAX + 1);
}

static uint64_t now_ns(struct io *io)
{
	return io->cfg.mono_ns(io->cfg.env_arg);
}

static void logf_(struct io *io, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(struct io *io, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!io->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	io->cfg.log(io->cfg.log_arg, level, line);
}

/* HTTP status -> errno: the one table. Any other failure is -EIO. */
static const struct {
	long status;
	int err;       /* for a read (GET, HEAD) and a DELETE */
	int write_err; /* for a PUT or POST, where it differs */
} statuses[] = {
    {400, -EINVAL, 0},
    {401, -EACCES, 0},
    {403, -EACCES, 0},
    {404, -ENOENT, 0},
    {405, -EOPNOTSUPP, 0},
    {408, -ETIMEDOUT, 0},
    {410, -ENOENT, 0},
    /* a read's If-Match: the object is not (or no longer) the version we know; a write's
     * If-None-Match: *: the name is taken */
    {412, -ESTALE, -EEXIST},
    {416, -ESTALE, 0},
    {429, -EAGAIN, 0}, /* slow down; becomes EIO if retries run out */
    {501, -EOPNOTSUPP, 0},
    {503, -EAGAIN, 0},
    {504, -ETIMEDOUT, 0},
};

int io_status_errno(long status, bool write)
{
	if (status >= 200 && status < 300)
		return 0;
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].status == status)
			return write && statuses[i].write_err ? statuses[i].write_err
							      : statuses[i].err;
	return -EIO;
}

static bool status_retryable(long status)
{
	return status == 408 || status == 429 || status >= 500;
}

static int curl_errno(CURLcode code, bool *ret_retry)
{
	*ret_retry = false;
	switch (code) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EIO; /* errmsg says which; a reader sees an I/O error */
	case CURLE_COULDNT_CONNECT:
		*ret_retry = true;
		return -EIO;
	case CURLE_OPERATION_TIMEDOUT:
		*ret_retry = true;
		return -ETIMEDOUT;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CONNECT_ERROR:
		return -EPROTO;
	case CURLE_URL_MALFORMAT:
		return -EINVAL;
	case CURLE_UNSUPPORTED_PROTOCOL: /* also "Received HTTP/0.9": junk on a kept connection */
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_WEIRD_SERVER_REPLY:
		*ret_retry = true;
		return -EIO;
	default:
		return -EIO;
	}
}

struct io_req *io_req_new(void)
{
	struct req_block *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->r.xfer = &b->x;
	b->r.mtime = INT64_MIN;
	b->r.date = INT64_MIN;
	b->r.length = UINT64_MAX;
	return &b->r;
}

/* Free a list of an attempt's headers. The signer put credentials in it (Authorization,
 * x-amz-security-token), so every string is zeroed first: no freed heap block keeps one. */
static void slist_free_wiped(struct curl_slist *l)
{
	for (struct curl_slist *h = l; h; h = h->next)
		if (h->data)
			explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(l);
}

void io_req_free(struct io_req *r)
{
	if (!r)
		return;
	free(r->url);
	free(r->etag);
	curl_slist_free_all(r->headers);
	slist_free_wiped(r->xfer->att_headers);
	free(r->body);
	free(r);
}

int io_req_header(struct io_req *r, const char *name, const char *value)
{
	char line[8192];
	struct curl_slist *l;
	int n = snprintf(line, sizeof(line), "%s: %s", name, value);

	if (n < 0 || (size_t)n >= sizeof(line))
		return -EINVAL;
	l = curl_slist_append(r->headers, line);
	if (!l)
		return -ENOMEM;
	r->headers = l;
	return 0;
}

/* ---- response parsing ---------------------------------------------------------------------- */

static void reset_attempt(struct io_req *r)
{
	r->err = 0;
	r->status = 0;
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
	r->etag_got[0] = '\0';
	r->mtime = INT64_MIN;
	r->date = INT64_MIN;
	r->length = UINT64_MAX;
	r->sse[0] = '\0';
	r->errmsg[0] = '\0';
	r->xfer->got = 0;
	r->xfer->skip = 0;
	r->xfer->whole = false;
	r->xfer->complete = false;
	r->xfer->have_cr = false;
}

/* Does header line @h (length @n) start with @name (lower-case, with the colon)? Then return
 * its value trimmed, else NULL. */
static const char *header_value(const char *h, size_t n, const char *name, size_t *ret_len)
{
	size_t k = strlen(name);

	if (n < k || strncasecmp(h, name, k) != 0)
		return NULL;
	h += k;
	n -= k;
	while (n && (*h == ' ' || *h == '\t')) {
		h++;
		n--;
	}
	while (n && (h[n - 1] == '\r' || h[n - 1] == '\n' || h[n - 1] == ' ' || h[n - 1] == '\t'))
		n--;
	*ret_len = n;
	return h;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *arg)
{
	struct io_req *r = arg;
	size_t n = size * nitems, vlen;
	const char *v;

	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		/* a new response (after 100 Continue or a redirect): forget the previous one */
		const char *sp = memchr(buf, ' ', n);

		r->status = 0;
		r->etag_got[0] = '\0';
		r->mtime = INT64_MIN;
		r->date = INT64_MIN;
		r->length = UINT64_MAX;
		r->sse[0] = '\0';
		r->xfer->have_cr = false;
		if (sp && (size_t)(sp - buf) + 4 <= n)
			r->status = strtol(sp + 1, NULL, 10);
		return n;
	}
	if ((v = header_value(buf, n, "etag:", &vlen))) {
		if (vlen < sizeof(r->etag_got)) {
			memcpy(r->etag_got, v, vlen);
			r->etag_got[vlen] = '\0';
		}
	} else if ((v = header_value(buf, n, "last-modified:", &vlen))) {
		int64_t t;

		if (httphdr_date(v, vlen, &t) == 0)
			r->mtime = t;
	} else if ((v = header_value(buf, n, "date:", &vlen))) {
		int64_t t;

		if (httphdr_date(v, vlen, &t) == 0)
			r->date = t;
	} else if ((v = header_value(buf, n, "x-amz-server-side-encryption:", &vlen))) {
		if (vlen < sizeof(r->sse)) {
			memcpy(r->sse, v, vlen);
			r->sse[vlen] = '\0';
		}
	} else if ((v = header_value(buf, n, "content-length:", &vlen))) {
		uint64_t len;

		if (httphdr_content_length(v, vlen, &len) == 0)
			r->length = len;
	} else if ((v = header_value(buf, n, "content-range:", &vlen))) {
		struct io_xfer *x = r->xfer;

		x->have_cr =
		    httphdr_content_range(v, vlen, &x->cr_first, &x->cr_last, &x->cr_total) == 0;
	}
	return n;
}

static size_t body_append(struct io_req *r, const char *data, size_t n)
{
	char *b;

	if (r->body_len + n > BODY_MAX) {
		r->err = -EFBIG;
		snprintf(r->errmsg, sizeof(r->errmsg), "response body larger than %u bytes",
			 BODY_MAX);
		return 0;
	}
	b = realloc(r->body, r->body_len + n + 1);
	if (!b) {
		r->err = -ENOMEM;
		return 0;
	}
	memcpy(b + r->body_len, data, n);
	r->body = b;
	r->body_len += n;
	b[r->body_len] = '\0';
	return n;
}

int io_range_check(const struct io_range_answer *a, const char *etag, uint64_t off, uint32_t len,
		   char *errmsg, size_t errlen)
{
	uint64_t last = off + len - 1;

	if (etag && etag[0] && !a->etag[0]) {
		/* nothing names the version these bytes are of: not trusted, and not taken for a
		 * change either (nothing says it changed); retried like any broken answer */
		snprintf(errmsg, errlen, "answer without an ETag (expected %s)", etag);
		return -EIO;
	}
	if (etag && etag[0] && strcmp(etag, a->etag) != 0) {
		snprintf(errmsg, errlen, "object changed (ETag %s, expected %s)", a->etag, etag);
		return -ESTALE;
	}
	if (a->status == 200) {
		if (a->length != UINT64_MAX && a->length <= last) {
			snprintf(errmsg, errlen, "object is now %llu bytes",
				 (unsigned long long)a->length);
			return -ESTALE;
		}
		return 1;
	}
	if (!a->have_cr) {
		snprintf(errmsg, errlen, "206 answer without a valid Content-Range");
		return -EIO;
	}
	if (a->cr_total != UINT64_MAX && a->cr_total <= last) {
		snprintf(errmsg, errlen, "object is now %llu bytes",
			 (unsigned long long)a->cr_total);
		return -ESTALE;
	}
	if (a->cr_first != off || a->cr_last != last) {
		snprintf(errmsg, errlen, "Content-Range %llu-%llu, asked %llu-%llu",
			 (unsigned long long)a->cr_first, (unsigned long long)a->cr_last,
			 (unsigned long long)off, (unsigned long long)last);
		return -EIO;
	}
	return 0;
}

/* First body bytes of a range read: is this answer what we asked for? */
static int check_range_answer(struct io_req *r)
{
	struct io_xfer *x = r->xfer;
	struct io_range_answer a = {
	    .status = r->status,
	    .etag = r->etag_got,
	    .length = r->length,
	    .have_cr = x->have_cr,
	    .cr_first = x->cr_first,
	    .cr_last = x->cr_last,
	    .cr_total = x->cr_total,
	};
	int e = io_range_check(&a, r->etag, r->off, r->len, r->errmsg, sizeof(r->errmsg));

	if (e == 1) {
		x->whole = true;
		x->skip = r->off;
	}
	return e < 0 ? e : 0;
}

/* A carrier's body bytes, @n of them, to its reads, in order. */
static void deal(struct io_req *r, const char *data, size_t n)
{
	struct io_xfer *x = r->xfer;

	while (n && x->fill) {
		struct io_req *p = x->fill;
		size_t take = p->len - p->xfer->got < n ? p->len - p->xfer->got : n;

		memcpy((char *)p->dst + p->xfer->got, data, take);
		p->xfer->got += take;
		data += take;
		n -= take;
		if (p->xfer->got == p->len)
			x->fill = p->xfer->next;
	}
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct io_req *r = arg;
	size_t n = size * nmemb, take;

	if (!r->len || (r->status != 200 && r->status != 206))
		return body_append(r, data, n > 65536 ? 65536 : n) ? n : 0;

	if (r->xfer->got == 0 && !r->xfer->whole && r->xfer->skip == 0) {
		int e = check_range_answer(r);

		if (e < 0) {
			r->err = e;
			return 0;
		}
	}
	if (r->xfer->skip) {
		size_t drop = r->xfer->skip < n ? (size_t)r->xfer->skip : n;

		r->xfer->skip -= drop;
		data += drop;
		n -= drop;
		if (!n)
			return size * nmemb;
	}
	take = r->len - r->xfer->got;
	if (n > take && !r->xfer->whole) {
		snprintf(r->errmsg, sizeof(r->errmsg), "more bytes than asked for");
		r->err = -EIO;
		return 0;
	}
	if (take > n)
		take = n;
	if (r->xfer->parts)
		deal(r, data, take);
	else
		memcpy((char *)r->dst + r->xfer->got, data, take);
	r->xfer->got += take;
	if (r->xfer->whole && r->xfer->got == r->len) {
		r->xfer->complete =
		    true; /* stop the transfer: the rest of the object is not wanted */
		return 0;
	}
	return size * nmemb;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void timer_insert(struct io *io, struct timer *t)
{
	struct timer **pp = &io->timers;

	while (*pp && (*pp)->due <= t->due)
		pp = &(*pp)->next;
	t->next = *pp;
	*pp = t;
}

static void enqueue(struct io *io, struct io_req *r)
{
	struct io_req **head = &io->head[r->prio], **tail = &io->tail[r->prio];

	r->xfer->next = NULL;
	if (*tail)
		(*tail)->xfer->next = r;
	else
		*head = r;
	*tail = r;
	STAT_ADD(io, queued, 1);
}

static struct io_req *dequeue(struct io *io, enum bk_prio prio)
{
	struct io_req **head = &io->head[prio], **tail = &io->tail[prio];
	struct io_req *r = *head;

	if (r) {
		*head = r->xfer->next;
		if (!*head)
			*tail = NULL;
		r->xfer->next = NULL;
		STAT_SUB(io, queued, 1);
	}
	return r;
}

static void part_end(struct io *io, struct io_req *c, struct io_req *p, bool retry);

static const char *method_of(const struct io_req *r)
{
	return r->method ? r->method : r->head ? "HEAD" : "GET";
}

/* Does @r write (PUT, POST), for the status table? */
static bool writes(const struct io_req *r)
{
	return r->method && (!strcmp(r->method, "PUT") || !strcmp(r->method, "POST"));
}

/* The histogram an attempt of @r is counted in. */
static enum bk_op op_of(const struct io_req *r)
{
	if (r->method)
		return !strcmp(r->method, "PUT")    ? BK_OP_PUT
		       : !strcmp(r->method, "POST") ? BK_OP_POST
						    : BK_OP_DELETE;
	return r->head ? BK_OP_HEAD : r->len ? BK_OP_GET : BK_OP_LIST;
}

/* Say why @r is tried again (its attempt just counted): the status or curl's error. The
 * mount's log callback holds lines to its rate (fs/log.c: once per line per interval, digits
 * aside, and a bucket for all). */
static void log_retry(struct io *io, struct io_req *r)
{
	char status[32];
	const char *why = r->errmsg; /* names the status when there is one */

	if (!why[0] && r->status) {
		snprintf(status, sizeof(status), "HTTP %ld", r->status);
		why = status;
	} else if (!why[0]) {
		why = strerror(-r->err);
	}
	logf_(io, 1, "%s %s%s: %s; trying again (attempt %u of %u)", method_of(r), r->url,
	      r->len ? " (range)" : "", why, r->xfer->attempt + 1, io->cfg.retries + 1);
}

/* Count and log a request that failed for good; a HEAD that finds no object is an answer,
 * counted on its own (absent). */
static void failed(struct io *io, struct io_req *r)
{
	if (r->head && r->err == -ENOENT && !r->xfer->carrier) {
		STAT_ADD(io, absent, 1); /* the answer asked for: the name is free */
		return;
	}
	STAT_ADD(io, errors, 1);
	if (r->err != -ENOENT && r->err != -ESHUTDOWN)
		logf_(io, 1, "%s %s%s: %s", method_of(r), r->url, r->len ? " (range)" : "",
		      r->errmsg[0] ? r->errmsg : strerror(-r->err));
}

/* Carrier @c is over: its reads not yet completed end with its answer (@retry: those that
 * failed and have attempts left go again on their own), then it goes. */
static void carrier_end(struct io *io, struct io_req *c, bool retry)
{
	while (c->xfer->parts) {
		struct io_req *p = c->xfer->parts;

		c->xfer->parts = p->xfer->next;
		p->xfer->next = NULL;
		part_end(io, c, p, retry);
	}
	io_req_free(c);
}

static void finish(struct io *io, struct io_req *r)
{
	if (r->err)
		failed(io, r);
	if (r->xfer->carrier)
		carrier_end(io, r, false);
	else
		r->done(r);
}

/* Read @p of carrier @c ends with @c's answer: done; or, failed with @retry (@c's failure
 * not counted), tried again on its own after a backoff while it has attempts left, else
 * counted and logged as its own failure; or failed without (counted and logged as @c's). */
static void part_end(struct io *io, struct io_req *c, struct io_req *p, bool retry)
{
	p->err = c->err;
	p->status = c->status;
	memcpy(p->etag_got, c->etag_got, sizeof(p->etag_got));
	p->mtime = c->mtime;
	p->length = c->length;
	memcpy(p->errmsg, c->errmsg, sizeof(p->errmsg));
	if (!p->err && p->xfer->got != p->len) { /* cannot be: the carrier got every byte */
		p->err = -EIO;
		snprintf(p->errmsg, sizeof(p->errmsg), "short body: %llu of %u bytes",
			 (unsigned long long)p->xfer->got, p->len);
	}
	if (p->err && retry && p->xfer->attempt < io->cfg.retries) {
		struct timer *t = calloc(1, sizeof(*t));

		if (t) {
			p->xfer->attempt++;
			STAT_ADD(io, retries, 1);
			log_retry(io, p);
			t->due = now_ns(io) + io_backoff_ns(p->xfer->attempt - 1,
							    io->cfg.random(io->cfg.env_arg));
			t->retry = p;
			timer_insert(io, t);
			return;
		}
	}
	if (p->err == -EAGAIN)
		p->err = -EIO;
	if (!p->err)
		STAT_ADD(io, bytes, p->len);
	else if (retry)
		failed(io, p);
	p->done(p);
}

/* Complete the reads whose bytes are all in, of every running carrier: after each
 * curl_multi_perform, outside curl's callbacks (a read's done may submit more). */
static void complete_parts(struct io *io)
{
	for (struct io_req *c = io->running; c; c = c->xfer->next) {
		struct io_req *p;

		while ((p = c->xfer->parts) && p != c->xfer->fill) {
			c->xfer->parts = p->xfer->next;
			p->xfer->next = NULL;
			part_end(io, c, p, false);
		}
	}
}

static bool same_headers(const struct curl_slist *a, const struct curl_slist *b)
{
	for (; a && b; a = a->next, b = b->next)
		if (strcmp(a->data, b->data) != 0)
			return false;
	return !a && !b;
}

/* May queued read @q go out in one request with @lead, whose merged range ends at @end? */
static bool mergeable(const struct io_req *lead, uint64_t end, const struct io_req *q)
{
	return lead->xfer->batch && q->xfer->batch == lead->xfer->batch && q->prio == BK_URGENT &&
	       q->len && !q->head && q->off == end && end - lead->off + q->len <= MERGE_MAX &&
	       q->sign == lead->sign && q->sign_arg == lead->sign_arg &&
	       strcmp(q->url, lead->url) == 0 &&
	       (q->etag && lead->etag ? strcmp(q->etag, lead->etag) == 0 : q->etag == lead->etag) &&
	       same_headers(q->headers, lead->headers);
}

/* Range read @r was just taken from its queue: if the reads queued behind it continue its
 * range, take them too and return a carrier for them all (see the essay); else (or out of
 * memory) @r. */
static struct io_req *merge(struct io *io, struct io_req *r)
{
	struct io_req *q = io->head[r->prio], *c, *last = r;
	uint64_t end = r->off + r->len;

	if (r->prio != BK_URGENT || !r->len || r->head || !q || !mergeable(r, end, q))
		return r;
	c = io_req_new();
	if (!c)
		return r;
	c->url = strdup(r->url);
	c->etag = r->etag ? strdup(r->etag) : NULL;
	for (struct curl_slist *h = r->headers; h; h = h->next) {
		struct curl_slist *n = curl_slist_append(c->headers, h->data);

		if (!n)
			break;
		c->headers = n;
	}
	if (!c->url || (r->etag && !c->etag) || !same_headers(c->headers, r->headers)) {
		io_req_free(c);
		return r;
	}
	c->off = r->off;
	c->prio = r->prio;
	c->sign = r->sign;
	c->sign_arg = r->sign_arg;
	c->xfer->carrier = true;
	c->xfer->parts = r;
	r->xfer->next = NULL;
	while ((q = io->head[r->prio]) && mergeable(r, end, q)) {
		dequeue(io, r->prio);
		last->xfer->next = q;
		last = q;
		end += q->len;
		STAT_ADD(io, merged, 1);
	}
	c->len = (uint32_t)(end - r->off);
	return c;
}

/* The method, and the body of a PUT or POST: handed to curl again by every attempt, so a
 * retry sends it whole from its first byte (curl keeps the pointer, it copies nothing). A
 * pooled handle keeps the last request's settings: each one is set here, every time. */
static void set_method(CURL *e, const struct io_req *r)
{
	bool body = writes(r);

	curl_easy_setopt(e, CURLOPT_NOBODY, r->head ? 1L : 0L);
	if (!r->head)
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->upload_len);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->upload ? r->upload : "");
	}
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
}

/* The attempt's headers: the request's, then its signature's (r->sign). @return 0 or -errno. */
static int attempt_headers(struct io_req *r)
{
	struct curl_slist *l = NULL;
	int err;

	slist_free_wiped(r->xfer->att_headers);
	r->xfer->att_headers = NULL;
	for (struct curl_slist *h = r->headers; h; h = h->next) {
		struct curl_slist *n = curl_slist_append(l, h->data);

		if (!n) {
			slist_free_wiped(l);
			return -ENOMEM;
		}
		l = n;
	}
	if (r->sign && (err = r->sign(r, &l, r->sign_arg)) < 0) {
		slist_free_wiped(l);
		return err;
	}
	r->xfer->att_headers = l;
	return 0;
}

/* Everything curl needs for one attempt of @r on handle @e. */
static void attempt_setopts(struct io *io, CURL *e, struct io_req *r)
{
	char range[64];

	curl_easy_setopt(e, CURLOPT_URL, r->url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->xfer->att_headers);
	set_method(e, r);
	if (r->len) {
		snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)r->off,
			 (unsigned long long)(r->off + r->len - 1));
		curl_easy_setopt(e, CURLOPT_RANGE, range); /* curl copies it */
	} else {
		curl_easy_setopt(e, CURLOPT_RANGE, NULL);
	}
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errmsg);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)io->cfg.timeout_s * 1000L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)io->cfg.timeout_s * 1000L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	if (io->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, io->ca_file);
	if (io->cfg.insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
}

static int start_attempt(struct io *io, struct io_req *r)
{
	CURL *e = io->npool ? io->pool[--io->npool] : curl_easy_init();
	int err;

	if (!e)
		return -ENOMEM;
	reset_attempt(r);
	r->xfer->fill = r->xfer->parts;
	for (struct io_req *p = r->xfer->parts; p; p = p->xfer->next)
		reset_attempt(p);
	if ((err = attempt_headers(r)) < 0) {
		io->pool[io->npool++] = e;
		return err;
	}
	attempt_setopts(io, e, r);
	r->xfer->easy = e;
	r->attempts = r->xfer->attempt + 1;
	if (curl_multi_add_handle(io->multi, e) != CURLM_OK) {
		r->xfer->easy = NULL;
		io->pool[io->npool++] = e;
		return -EIO;
	}
	r->xfer->next = io->running;
	io->running = r;
	io->active++;
	if (r->prio == BK_BACKGROUND)
		io->active_bg++;
	STAT_ADD(io, requests, 1);
	STAT_ADD(io, active, 1);
	r->xfer->sent_ns = now_ns(io);
	return 0;
}

static void window_set(struct io_window *win, double w)
{
	if (w < 1)
		w = 1;
	if (w > win->max)
		w = win->max;
	win->w = w;
}

void io_window_init(struct io_window *win, unsigned max)
{
	*win = (struct io_window){.max = max};
	window_set(win, max);
}

bool io_window_feedback(struct io_window *win, long status, uint64_t now_ns)
{
	if (status == 503 || status == 429) {
		if (now_ns - win->last_cut_ns > 100000000ULL) {
			win->last_cut_ns = now_ns;
			window_set(win, win->w / 2);
		}
		return true;
	}
	if (status >= 200 && status < 500 && win->w < win->max)
		window_set(win, win->w + 1 / win->w);
	return false;
}

/* A store's answer to one request: slow down (503/429), or fine. */
static void window_feedback(struct io *io, long status)
{
	if (io_window_feedback(&io->win, status, now_ns(io)))
		STAT_ADD(io, slowdowns, 1);
	__atomic_store_n(&io->st.window, (uint64_t)io->win.w, __ATOMIC_RELAXED);
}

static void start_queued(struct io *io)
{
	unsigned max = (unsigned)io->win.w;
	/* kept for urgent requests; none when the store has squeezed us to one connection */
	unsigned reserve = max >= 4 ? max / 4 : max > 1 ? 1 : 0;

	for (;;) {
		struct io_req *r = NULL;

		if (io->active >= max)
			return;
		if (io->head[BK_URGENT])
			r = dequeue(io, BK_URGENT);
		else if (io->head[BK_BACKGROUND] && io->active_bg + reserve < max)
			r = dequeue(io, BK_BACKGROUND);
		if (!r)
			return;
		r = merge(io, r);
		int e = start_attempt(io, r);
		if (e < 0) {
			r->err = e;
			finish(io, r);
		}
	}
}

uint64_t io_backoff_ns(unsigned attempt, double u)
{
	uint64_t base = 100000000ULL << (attempt < 6 ? attempt : 6); /* 100 ms .. 6.4 s */

	/* full jitter in [base/2, base) */
	return base / 2 + (uint64_t)((double)(base / 2) * u);
}

static void running_unlink(struct io *io, struct io_req *r)
{
	struct io_req **pp = &io->running;

	while (*pp && *pp != r)
		pp = &(*pp)->xfer->next;
	if (*pp)
		*pp = r->xfer->next;
	r->xfer->next = NULL;
}

/* Fail every request waiting for a slot (not the running ones), with EIO and @why. */
static void fail_queued(struct io *io, const char *why)
{
	struct io_req *r;

	for (enum bk_prio prio = BK_URGENT; prio <= BK_BACKGROUND; prio++) {
		while ((r = dequeue(io, prio))) {
			r->err = -EIO;
			snprintf(r->errmsg, sizeof(r->errmsg), "%s", why);
			STAT_ADD(io, errors, 1);
			r->done(r); /* the failure that caused this was logged */
		}
	}
}

/* The outcome of @r's attempt that ended with @code: r->err (0, or -errno with r->errmsg), and
 * whether the error may pass (@return true: retry). */
static bool attempt_outcome(struct io_req *r, CURLcode code)
{
	bool retry = false;

	if (r->xfer->complete) {
		r->err = 0; /* a 200 answer cut short on purpose */
	} else if (r->err) {
		retry = r->err == -EIO; /* a corrupt answer may be a passing fault */
	} else if (code != CURLE_OK) {
		r->err = curl_errno(code, &retry);
		if (!r->errmsg[0])
			snprintf(r->errmsg, sizeof(r->errmsg), "%s", curl_easy_strerror(code));
	} else if ((r->err = io_status_errno(r->status, writes(r))) != 0) {
		retry = status_retryable(r->status);
		if (!r->errmsg[0])
			snprintf(r->errmsg, sizeof(r->errmsg), "HTTP %ld", r->status);
	} else if (r->len && r->xfer->got != r->len) {
		r->err = -EIO;
		retry = true;
		snprintf(r->errmsg, sizeof(r->errmsg), "short body: %llu of %u bytes",
			 (unsigned long long)r->xfer->got, r->len);
	}
	if (code == CURLE_OK && r->check && !r->xfer->complete)
		r->check(r, &retry);
	return retry;
}

/* Send @r again after its backoff. @return false if no timer could be had (it ends now). */
static bool retry_later(struct io *io, struct io_req *r)
{
	struct timer *t = calloc(1, sizeof(*t));

	if (!t)
		return false;
	r->xfer->attempt++;
	STAT_ADD(io, retries, 1);
	log_retry(io, r);
	t->due = now_ns(io) + io_backoff_ns(r->xfer->attempt - 1, io->cfg.random(io->cfg.env_arg));
	t->retry = r;
	timer_insert(io, t);
	return true;
}

static void transfer_done(struct io *io, CURL *e, CURLcode code)
{
	struct io_req *r = NULL;
	bool retry, unreachable = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST;

	curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
	bk_hist_observe(&io->st.lat[op_of(r)], now_ns(io) - r->xfer->sent_ns);
	running_unlink(io, r);
	curl_multi_remove_handle(io->multi, e);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
	if (io->npool < POOL_MAX)
		io->pool[io->npool++] = e;
	else
		curl_easy_cleanup(e);
	r->xfer->easy = NULL;
	io->active--;
	if (r->prio == BK_BACKGROUND)
		io->active_bg--;
	STAT_SUB(io, active, 1);

	retry = attempt_outcome(r, code);
	if (r->len && !r->err && !r->xfer->carrier)
		STAT_ADD(io, bytes, r->len); /* a carrier's reads count their own */
	if (r->status)
		window_feedback(io, r->status);
	if (r->xfer->carrier) {
		/* counted and logged once, as one request; its reads retry (or not) on their own */
		if (r->err && !retry)
			failed(io, r);
		carrier_end(io, r, retry);
	} else if (r->err && retry && r->xfer->attempt < io->cfg.retries && retry_later(io, r)) {
		return; /* it goes again: the queue waits for its next attempt */
	} else {
		if (r->err == -EAGAIN)
			r->err = -EIO; /* the store kept asking us to slow down */
		finish(io, r);
	}
	if (unreachable)
		fail_queued(io, "store unreachable: an earlier request could not connect");
}

static void take_incoming(struct io *io, bool *ret_stopping)
{
	struct io_req *in;
	struct timer *tin;

	pthread_mutex_lock(&io->lock);
	in = io->in_head;
	io->in_head = io->in_tail = NULL;
	tin = io->tin;
	io->tin = NULL;
	*ret_stopping = io->stopping;
	pthread_mutex_unlock(&io->lock);

	while (in) {
		struct io_req *next = in->xfer->next;

		enqueue(io, in);
		in = next;
	}
	while (tin) {
		struct timer *next = tin->next;

		timer_insert(io, tin);
		tin = next;
	}
}

/* Run the timers due at @now. @return ms until the next one (capped), for the poll. */
static int run_timers(struct io *io, uint64_t now)
{
	while (io->timers && io->timers->due <= now) {
		struct timer *t = io->timers;

		io->timers = t->next;
		if (t->retry)
			enqueue(io, t->retry);
		else
			t->fn(t->arg);
		free(t);
	}
	if (!io->timers)
		return 1000;
	uint64_t ms = (io->timers->due - now + 999999) / 1000000;
	return ms > 1000 ? 1000 : (int)ms;
}

static void fail_queue(struct io *io, enum bk_prio prio)
{
	struct io_req *r;

	while ((r = dequeue(io, prio))) {
		r->err = -ESHUTDOWN;
		finish(io, r);
	}
}

static void shutdown_all(struct io *io)
{
	bool stopping;
	CURL *e;

	/* running transfers */
	while (io->running) {
		struct io_req *r = io->running;

		io->running = r->xfer->next;
		r->xfer->next = NULL;
		e = r->xfer->easy;
		curl_multi_remove_handle(io->multi, e);
		curl_easy_cleanup(e);
		io->active--;
		STAT_SUB(io, active, 1);
		r->xfer->easy = NULL;
		r->err = -ESHUTDOWN;
		finish(io, r);
	}
	/* timers run now (a drain timer then finds the store gone), retries fail; anything they
	 * submit is refused, so this ends */
	do {
		take_incoming(io, &stopping);
		while (io->timers) {
			struct timer *t = io->timers;

			io->timers = t->next;
			if (t->retry) {
				t->retry->err = -ESHUTDOWN;
				finish(io, t->retry);
			} else {
				t->fn(t->arg);
			}
			free(t);
		}
		fail_queue(io, BK_URGENT);
		fail_queue(io, BK_BACKGROUND);
		pthread_mutex_lock(&io->lock);
		stopping = io->in_head || io->tin;
		pthread_mutex_unlock(&io->lock);
	} while (stopping);
}

#define POLLER_FDS 32 /* redis.c: two connections for each of up to 16 Redis servers */

static void *loop(void *arg)
{
	struct io *io = arg;
	struct curl_waitfd pfd[POLLER_FDS];
	bool stopping;

	for (;;) {
		int running, timeout, nmsg;
		CURLMsg *m;

		take_incoming(io, &stopping);
		if (stopping)
			break;
		start_queued(io);
		curl_multi_perform(io->multi, &running);
		complete_parts(io);
		while ((m = curl_multi_info_read(io->multi, &nmsg)))
			if (m->msg == CURLMSG_DONE)
				transfer_done(io, m->easy_handle, m->data.result);
		timeout = run_timers(io, now_ns(io));
		start_queued(io);
		/* a submission meanwhile wakes the poll (curl_multi_wakeup) */
		unsigned npfd = io->poller.fds ? io->poller.fds(io->poller.arg, pfd, POLLER_FDS) : 0;
		curl_multi_poll(io->multi, pfd, npfd, timeout, NULL);
		for (unsigned i = 0; i < npfd; i++) {
			if (pfd[i].revents) {
				io->poller.ready(io->poller.arg, pfd, npfd);
				break;
			}
		}
	}
	if (io->poller.stop)
		io->poller.stop(io->poller.arg);
	shutdown_all(io);
	return NULL;
}

/* ---- public -------------------------------------------------------------------------------- */

struct io *io_new(const struct io_cfg *cfg)
{
	struct io *io = calloc(1, sizeof(*io));

	if (!io)
		return NULL;
	io->cfg = *cfg;
	if (io->cfg.max_conns < 2)
		io->cfg.max_conns = 2;
	if (cfg->ca_file && !(io->ca_file = strdup(cfg->ca_file)))
		goto fail;
	io->cfg.ca_file = io->ca_file;
	io->multi = curl_multi_init();
	if (!io->multi)
		goto fail;
	if (!io->cfg.mono_ns)
		io->cfg.mono_ns = sys_mono_ns;
	if (!io->cfg.random)
		io->cfg.random = sys_random;
	io_window_init(&io->win, io->cfg.max_conns);
	io->st.window = io->cfg.max_conns;
	curl_multi_setopt(io->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)io->cfg.max_conns);
	curl_multi_setopt(io->multi, CURLMOPT_MAXCONNECTS, (long)io->cfg.max_conns);
	pthread_mutex_init(&io->lock, NULL);
	pthread_cond_init(&io->cond, NULL);
	return io;
fail:
	free(io->ca_file);
	free(io);
	return NULL;
}

void io_free(struct io *io)
{
	if (!io)
		return;
	io_stop(io);
	while (io->npool)
		curl_easy_cleanup(io->pool[--io->npool]);
	curl_multi_cleanup(io->multi);
	pthread_mutex_destroy(&io->lock);
	pthread_cond_destroy(&io->cond);
	free(io->ca_file);
	free(io);
}

int io_start(struct io *io)
{
	int e;

	if (io->started)
		return 0;
	pthread_mutex_lock(&io->lock);
	io->stopping = false;
	pthread_mutex_unlock(&io->lock);
	e = pthread_create(&io->thread, NULL, loop, io);
	if (e)
		return -e;
	io->started = true;
	return 0;
}

void io_stop(struct io *io)
{
	if (!io->started)
		return;
	pthread_mutex_lock(&io->lock);
	io->stopping = true;
	pthread_mutex_unlock(&io->lock);
	curl_multi_wakeup(io->multi);
	pthread_join(io->thread, NULL);
	io->started = false;
}

static void sync_done(struct io_req *r);

/* A thread's plug (io_plug): its submissions, held until io_unplug. */
static _Thread_local struct io *plug_io;
static _Thread_local unsigned plug_depth;
static _Thread_local struct io_req *plug_head, *plug_tail;

void io_plug(struct io *io)
{
	if (plug_depth++ == 0)
		plug_io = io;
}

void io_unplug(struct io *io)
{
	struct io_req *r = plug_head;

	if (!plug_depth || --plug_depth || plug_io != io)
		return;
	plug_io = NULL;
	plug_head = plug_tail = NULL;
	if (!r)
		return;
	pthread_mutex_lock(&io->lock);
	if (io->stopping) { /* stopped meanwhile: they end here, as the loop would end them */
		pthread_mutex_unlock(&io->lock);
		while (r) {
			struct io_req *next = r->xfer->next;

			r->xfer->next = NULL;
			r->err = -ESHUTDOWN;
			r->done(r);
			r = next;
		}
		return;
	}
	if (io->in_tail)
		io->in_tail->xfer->next = r;
	else
		io->in_head = r;
	io->batches++;
	for (;; r = r->xfer->next) {
		r->xfer->batch = io->batches;
		if (!r->xfer->next)
			break;
	}
	io->in_tail = r;
	pthread_mutex_unlock(&io->lock);
	curl_multi_wakeup(io->multi);
}

int io_submit(struct io *io, struct io_req *r)
{
	bool plugged = plug_depth && plug_io == io && r->done && r->done != sync_done;

	pthread_mutex_lock(&io->lock);
	if (io->stopping || !io->started) {
		pthread_mutex_unlock(&io->lock);
		return -ESHUTDOWN;
	}
	r->xfer->next = NULL;
	r->xfer->attempt = 0;
	r->xfer->batch = 0; /* io_unplug numbers a plug's */
	if (plugged) {
		pthread_mutex_unlock(&io->lock);
		if (plug_tail)
			plug_tail->xfer->next = r;
		else
			plug_head = r;
		plug_tail = r;
		return 0;
	}
	if (io->in_tail)
		io->in_tail->xfer->next = r;
	else
		io->in_head = r;
	io->in_tail = r;
	pthread_mutex_unlock(&io->lock);
	curl_multi_wakeup(io->multi);
	return 0;
}

static void sync_done(struct io_req *r)
{
	struct io *io = r->arg;

	pthread_mutex_lock(&io->lock);
	r->xfer->sync_done = true;
	pthread_cond_broadcast(&io->cond);
	pthread_mutex_unlock(&io->lock);
}

int io_run(struct io *io, struct io_req *r)
{
	int e;

	r->done = sync_done;
	r->arg = io;
	r->xfer->sync_done = false;
	e = io_submit(io, r);
	if (e < 0)
		return e;
	pthread_mutex_lock(&io->lock);
	while (!r->xfer->sync_done)
		pthread_cond_wait(&io->cond, &io->lock);
	pthread_mutex_unlock(&io->lock);
	return r->err;
}

int io_defer(struct io *io, uint64_t delay_ns, void (*fn)(void *), void *arg)
{
	struct timer *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->due = now_ns(io) + delay_ns;
	t->fn = fn;
	t->arg = arg;
	pthread_mutex_lock(&io->lock);
	if (io->stopping || !io->started) {
		pthread_mutex_unlock(&io->lock);
		free(t);
		return -ESHUTDOWN;
	}
	t->next = io->tin;
	io->tin = t;
	pthread_mutex_unlock(&io->lock);
	curl_multi_wakeup(io->multi);
	return 0;
}

void io_set_poller(struct io *io, const struct io_poller *p)
{
	if (p)
		io->poller = *p;
	else
		memset(&io->poller, 0, sizeof(io->poller));
}

uint64_t io_now_ns(struct io *io)
{
	return now_ns(io);
}

void io_get_stats(struct io *io, struct bk_stats *ret)
{
	ret->requests = __atomic_load_n(&io->st.requests, __ATOMIC_RELAXED);
	ret->retries = __atomic_load_n(&io->st.retries, __ATOMIC_RELAXED);
	ret->errors = __atomic_load_n(&io->st.errors, __ATOMIC_RELAXED);
	ret->absent = __atomic_load_n(&io->st.absent, __ATOMIC_RELAXED);
	ret->bytes = __atomic_load_n(&io->st.bytes, __ATOMIC_RELAXED);
	ret->active = __atomic_load_n(&io->st.active, __ATOMIC_RELAXED);
	ret->queued = __atomic_load_n(&io->st.queued, __ATOMIC_RELAXED);
	ret->slowdowns = __atomic_load_n(&io->st.slowdowns, __ATOMIC_RELAXED);
	ret->window = __atomic_load_n(&io->st.window, __ATOMIC_RELAXED);
	ret->merged = __atomic_load_n(&io->st.merged, __ATOMIC_RELAXED);
	for (int op = 0; op < BK_OP_N; op++)
		bk_hist_load(&io->st.lat[op], &ret->lat[op]);
}

void io_account(struct io *io, uint64_t bytes, bool error, uint64_t start_ns)
{
	bk_hist_observe(&io->st.lat[BK_OP_GET], now_ns(io) - start_ns);
	STAT_ADD(io, requests, 1);
	if (error)
		STAT_ADD(io, errors, 1);
	else
		STAT_ADD(io, bytes, bytes);
}

/* ---- for the schemes ------------------------------------------------------------------------ */

struct io_cfg io_cfg_from(const struct backend_cfg *cfg)
{
	return (struct io_cfg){
	    .max_conns = cfg->max_conns,
	    .timeout_s = cfg->timeout_s,
	    .retries = cfg->retries,
	    .ca_file = cfg->ca_file,
	    .insecure = cfg->insecure,
	    .log = cfg->log,
	    .log_arg = cfg->log_arg,
	};
}

struct read_ctx {
	bk_done_fn done;
	void *arg;
};

static void read_done(struct io_req *r)
{
	struct read_ctx *rc = r->arg;
	int err = r->err;

	io_req_free(r);
	rc->done(rc->arg, err);
	free(rc);
}

int io_read(struct io *io, struct io_req *r, const char *etag, uint64_t off, uint32_t len,
	    void *dst, enum bk_prio prio, bk_done_fn done, void *arg)
{
	struct read_ctx *rc = malloc(sizeof(*rc));
	int e;

	if (!rc) {
		io_req_free(r);
		return -ENOMEM;
	}
	rc->done = done;
	rc->arg = arg;
	r->off = off;
	r->len = len;
	r->dst = dst;
	r->etag = etag && etag[0] ? strdup(etag) : NULL;
	r->prio = prio;
	r->done = read_done;
	r->arg = rc;
	if (etag && etag[0] && (e = io_req_header(r, "If-Match", etag)) < 0)
		goto fail;
	e = io_submit(io, r);
	if (e == 0)
		return 0;
fail:
	free(rc);
	io_req_free(r);
	return e;
}

int io_head(struct io *io, struct io_req *r, struct bk_meta *ret)
{
	int e;

	r->head = true;
	e = io_run(io, r);
	if (e == 0) {
		ret->size = r->length == UINT64_MAX ? 0 : r->length;
		ret->mtime = r->mtime;
		snprintf(ret->etag, sizeof(ret->etag), "%s", r->etag_got);
	}
	io_req_free(r);
	return e;
}

struct head_ctx {
	bk_stat_done_fn done;
	void *arg;
};

static void head_done(struct io_req *r)
{
	struct head_ctx *hc = r->arg;
	struct bk_meta m = {0};
	int e = r->err;

	if (e == 0) {
		m.size = r->length == UINT64_MAX ? 0 : r->length;
		m.mtime = r->mtime;
		snprintf(m.etag, sizeof(m.etag), "%s", r->etag_got);
	}
	io_req_free(r);
	hc->done(hc->arg, e, e == 0 ? &m : NULL);
	free(hc);
}

int io_head_async(struct io *io, struct io_req *r, bk_stat_done_fn done, void *arg)
{
	struct head_ctx *hc = malloc(sizeof(*hc));
	int e;

	if (!hc) {
		io_req_free(r);
		return -ENOMEM;
	}
	hc->done = done;
	hc->arg = arg;
	r->head = true;
	r->done = head_done;
	r->arg = hc;
	e = io_submit(io, r);
	if (e < 0) {
		free(hc);
		io_req_free(r);
	}
	return e;
}
