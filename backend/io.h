/*
 * io.h - the I/O thread. One curl multi handle, a queue of requests in two priorities, timers
 * and plain jobs (the file backend's reads), retries with backoff, status -> errno.
 */
#ifndef TIERFS_IO_H
#define TIERFS_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "backend.h"

struct io;
struct io_req;
struct io_xfer;

typedef void (*io_done_fn)(struct io_req *r);
/* Called before each attempt (first and retries) to append fresh auth headers to @list, which
 * already holds a copy of r->headers. @return 0 or -errno (the request fails). */
typedef int (*io_sign_fn)(struct io_req *r, struct curl_slist **list, void *arg);

/*
 * Called on the I/O thread when an attempt got a whole answer (any status), after io mapped
 * its status to r->err (0 for 2xx) and decided *retry: may change both, e.g. to fail a 200
 * whose body says the request failed, or a part whose ETag is not the bytes sent (-EIO and
 * *retry true: tried again like a corrupt answer).
 */
typedef void (*io_check_fn)(struct io_req *r, bool *retry);

/* One HTTP request. The submitter fills the first block; io fills the results. */
struct io_req {
	char *url;                   /* owned by the request (freed by io_req_free) */
	struct curl_slist *headers;  /* owned; sent with every attempt */
	bool head;                   /* HEAD instead of GET */
	const char *method; /* NULL: GET (or HEAD); else "PUT", "POST", "DELETE" (static) */
	const void *upload; /* PUT, POST: the body, sent whole by every attempt; not owned,
			     * valid until done (NULL: empty body) */
	size_t upload_len;
	io_check_fn check;	     /* NULL: the status alone decides */
	uint64_t off;                /* range reads: first byte */
	uint32_t len;                /* range reads: exact length, 0 = not a range read */
	void *dst;                   /* range reads: where the bytes go (len bytes) */
	char *etag;                  /* range reads: expected ETag, owned, or NULL */
	enum bk_prio prio;           /* BK_BACKGROUND: uses at most part of the connections */
	io_sign_fn sign;
	void *sign_arg;
	io_done_fn done;             /* runs once on the I/O thread; owns r afterwards */
	void *arg;

	/* results, valid in done() */
	int err;                     /* 0 or -errno */
	long status;                 /* last HTTP status, 0 if none */
	char *body;                  /* non-range requests: the body (NUL-terminated), or NULL */
	size_t body_len;
	char etag_got[BK_ETAG_MAX];  /* ETag header, "" if none */
	int64_t mtime;               /* Last-Modified, INT64_MIN if none */
	int64_t date;		     /* Date (the server's clock), INT64_MIN if none */
	uint64_t length;             /* Content-Length, UINT64_MAX if none */
	char sse[24];		     /* x-amz-server-side-encryption, "" if none */
	unsigned attempts;	     /* attempts started, retries included */
	char errmsg[256];            /* why it failed, for a log line or the user */

	struct io_xfer *xfer;        /* io's own state of the request (io.c); allocated with it */
};

struct io_cfg {
	unsigned max_conns;
	unsigned timeout_s;
	unsigned retries;
	const char *ca_file;
	bool insecure;
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
	/* The loop's clock (timers, retries, the window's cuts) and the randomness of its backoff
	 * jitter, called on the I/O thread and by io_defer's caller; NULL: CLOCK_MONOTONIC and
	 * rand(). Tests pass their own. */
	uint64_t (*mono_ns)(void *env_arg);
	double (*random)(void *env_arg); /* uniform in [0, 1) */
	void *env_arg;
};

/* @return the loop (thread not started) or NULL if out of memory. */
struct io *io_new(const struct io_cfg *cfg);
void io_free(struct io *io);
int io_start(struct io *io);
/* Stop the thread; queued and running requests complete with -ESHUTDOWN, timers and jobs are
 * dropped (their memory is the submitter's to reclaim). */
void io_stop(struct io *io);

/* Queue @r. @return 0, or -ESHUTDOWN when stopped (r->done not called). */
int io_submit(struct io *io, struct io_req *r);
/*
 * Plug this thread: until the matching io_unplug, its io_submits (not io_run's) are held and
 * then handed to the I/O thread together, so it sees a burst of reads at once and can merge
 * consecutive ones (as the block layer's plug). Nests; cheap when nothing is submitted. A
 * read held when the loop stops is ended at io_unplug, on this thread, with -ESHUTDOWN.
 */
void io_plug(struct io *io);
void io_unplug(struct io *io);
/* Submit @r and wait for it (r->done must be NULL). @return r->err. */
int io_run(struct io *io, struct io_req *r);
/* Run @fn(@arg) on the I/O thread after @delay_ns (0: soon). @return 0 or -errno. */
int io_defer(struct io *io, uint64_t delay_ns, void (*fn)(void *), void *arg);

struct io_req *io_req_new(void);
void io_req_free(struct io_req *r);
/* Add "Name: value" to r->headers. @return 0 or -ENOMEM. */
int io_req_header(struct io_req *r, const char *name, const char *value);

/*
 * Other sockets served by the I/O thread (the shared tier's Redis connections), polled with
 * curl's in one curl_multi_poll. All three run on the I/O thread: @fds fills up to @max
 * descriptors to wait on (events set, revents zero) and returns how many; @ready gets them
 * back with revents after the poll (called only when one is set); @stop runs when the thread
 * stops, before the pending timers, so the poller can close its sockets and answer its
 * requests.
 */
struct io_poller {
	unsigned (*fds)(void *arg, struct curl_waitfd *fds, unsigned max);
	void (*ready)(void *arg, const struct curl_waitfd *fds, unsigned n);
	void (*stop)(void *arg);
	void *arg;
};

/* Set the one poller (NULL: none), while the thread is stopped. */
void io_set_poller(struct io *io, const struct io_poller *p);

/* The loop's clock (io_cfg's mono_ns). */
uint64_t io_now_ns(struct io *io);

void io_get_stats(struct io *io, struct bk_stats *ret);
/* Count a read done outside curl (file://): one request, @bytes received or an error, begun
 * at @start_ns of the loop's clock (io_now_ns). */
void io_account(struct io *io, uint64_t bytes, bool error, uint64_t start_ns);

/* HTTP status -> errno (0 for 2xx), for a read or DELETE, or for a PUT or POST (@write): the
 * one table of them. */
int io_status_errno(long status, bool write);

/* ---- the loop's rules as pure functions, exposed for tests ---------------------------------- */

/* The number of transfers allowed at once, managed like TCP's congestion window (AIMD). */
struct io_window {
	double w;             /* allowed now, 1..max */
	unsigned max;         /* max_conns */
	uint64_t last_cut_ns; /* when w was last halved */
};

/* w = @max, never cut yet. */
void io_window_init(struct io_window *win, unsigned max);

/*
 * Feed one answer's HTTP @status, received at @now_ns: 503 or 429 halve the window, at most
 * once per 100 ms (a burst of refusals counts once); any other answer below 500 grows it by
 * 1/w (one per window of answers). Never below 1 nor above max.
 * @return true if @status asked to slow down (503, 429), cut or not.
 */
bool io_window_feedback(struct io_window *win, long status, uint64_t now_ns);

/* The delay before retry @attempt + 1 (@attempt 0 after the first failure): full jitter in
 * [base/2, base), base = 100 ms << min(@attempt, 6), placed by @u, uniform in [0, 1). */
uint64_t io_backoff_ns(unsigned attempt, double u);

/* What the headers of an answer to a range read said, up to its first body byte. */
struct io_range_answer {
	long status;      /* 200 or 206 */
	const char *etag; /* the ETag header, "" if none */
	uint64_t length;  /* Content-Length, UINT64_MAX if none */
	bool have_cr;     /* a well-formed Content-Range came */
	uint64_t cr_first, cr_last, cr_total; /* with have_cr; total UINT64_MAX for "/ *" */
};

/*
 * Is @a the answer to a read of @len (> 0) bytes at @off of the version @etag (NULL or "":
 * any)? A 200 is the whole object: usable if it is long enough. A 206 must name exactly the
 * bytes asked for. With an @etag, the answer must carry that ETag: another one is a changed
 * object, none at all an answer that cannot be checked. On failure @errmsg says why (the log
 * line's text).
 * @return 1 (a 200: skip to @off, drop the rest), 0 (a 206 with exactly the range), -ESTALE
 * (another ETag, or the object is now too short), -EIO (no ETag though @etag is set, no or
 * another Content-Range).
 */
int io_range_check(const struct io_range_answer *a, const char *etag, uint64_t off,
		   uint32_t len, char *errmsg, size_t errlen);

/* The io_cfg a scheme's I/O loop gets from @cfg. */
struct io_cfg io_cfg_from(const struct backend_cfg *cfg);

/* Range read with @r already holding url/headers/sign: fills the range fields, adds If-Match
 * when @etag is not empty, wires completion to @done. Frees @r on every path.
 * @return 0 or -errno (done not called). */
int io_read(struct io *io, struct io_req *r, const char *etag, uint64_t off, uint32_t len,
	    void *dst, enum bk_prio prio, bk_done_fn done, void *arg);

/* HEAD with @r (url and signing set): size, mtime and ETag into *ret. Frees @r.
 * @return 0 or -errno. */
int io_head(struct io *io, struct io_req *r, struct bk_meta *ret);

/* HEAD with @r (url and signing set) without waiting: @done gets size, mtime and ETag on the
 * I/O thread. Frees @r on every path. @return 0 or -errno (done not called). */
int io_head_async(struct io *io, struct io_req *r, bk_stat_done_fn done, void *arg);

#endif
