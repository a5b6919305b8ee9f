/*
 * backend.h - the object store behind a mount: stat, list, read a range.
 *
 * Three schemes share this interface: s3://bucket[/prefix], http(s)://base/ and file:///dir.
 * Paths are relative to the mount's root, '/'-separated, without a leading slash ("" is the
 * root). Metadata calls come in two forms: synchronous (backend_stat, backend_list: the
 * caller waits, so never from a FUSE worker) and asynchronous (backend_stat_async,
 * backend_list_async); range reads are asynchronous. Asynchronous calls complete on the
 * backend's single I/O thread. Every error crossing this interface is a -errno: HTTP status
 * and curl codes are mapped inside backend/ and never leave it.
 */
#ifndef TIERFS_BACKEND_H
#define TIERFS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"

#define BK_ETAG_MAX 128

struct bk_meta {
	uint64_t size;
	int64_t mtime;          /* seconds since epoch; INT64_MIN if the store gave none */
	uint32_t mtime_ns;      /* its fraction in ns, 0..999999999; 0 where the store gives
				 * whole seconds (HTTP Last-Modified; S3, whose HEAD does) */
	char etag[BK_ETAG_MAX]; /* as the store sends it (quotes included); "" if none */
	bool have_perm;         /* the store has permission bits (file://); false for s3, http */
	uint32_t perm;          /* with have_perm: the store's permission bits, 0..0777 */
};

struct backend_cfg {
	const char *url;         /* s3://, http://, https:// or file:// */
	const char *endpoint;    /* s3: http(s)://host[:port]; NULL = AWS for the region */
	const char *region;      /* s3: NULL = us-east-1 */
	bool path_style;         /* s3: bucket in the path instead of the host name */
	const char *profile;     /* s3: credentials profile */
	const char *credentials; /* s3: credentials file */
	const char *manifest;    /* http: file of relative paths, one per line, instead of index */
	const char *ca_file;     /* https: extra CA bundle */
	bool insecure;           /* https: do not verify the peer */
	unsigned max_conns;      /* parallel transfers (>= 2) */
	unsigned timeout_s;      /* per request */
	unsigned retries;        /* extra attempts for retryable failures */
	/* Where the backend reports failures worth a log line (never a secret); may be NULL.
	 * Called from any thread. level: 0 error, 1 warning, 2 info, 3 debug. */
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
};

struct backend;

/*
 * Parse @cfg->url and set up (credentials loaded, no thread yet, no network yet).
 * @return 0 and *ret; or -errno with one line for the user in @err.
 */
int backend_new(const struct backend_cfg *cfg, struct backend **ret, char *err, size_t errlen);
void backend_free(struct backend *b);

/* Does @url start with a scheme this backend serves (s3://, http://, https://, file://, in any
 * case)? The one list of schemes; option parsing asks it through backend_url_check. */
bool backend_scheme_known(const char *url);

/*
 * Check @url against the rules of its scheme (backend.c's table, url.c), before anything is
 * set up, and lower-case its scheme in place ("HTTPS://h" -> "https://h": schemes are compared
 * byte for byte later). A scheme must be there and known; s3:// names a bucket, http(s):// a
 * host, file:// an absolute path; no scheme takes user:password@. @url holds no control
 * character (the caller's check).
 * @return 0; -EINVAL with one line in @err; -EACCES with one line in @err when the URL
 * carries a password, which the caller may word its own way (where credentials go instead).
 */
int backend_url_check(char *url, char *err, size_t errlen);

/* Start / stop the I/O thread. Metadata calls and reads need it running. Stopping fails every
 * queued or running read with -ESHUTDOWN. @return 0 or -errno. */
int backend_start(struct backend *b);
void backend_stop(struct backend *b);

/*
 * Check the store answers at the root (bucket exists, credentials accepted, server up).
 * @return 0, or -errno with one line for the user in @err.
 */
int backend_check(struct backend *b, char *err, size_t errlen);

/* HEAD (or stat) one object; *ret is written whole (fields a store lacks are zero).
 * @return 0 and *ret, -ENOENT, -EACCES, -EIO, -ETIMEDOUT... */
int backend_stat(struct backend *b, const char *path, struct bk_meta *ret);

/*
 * Called once per entry of a directory: @name is one path segment; @meta is NULL if the listing
 * gave no metadata for a file (then the caller stats it). For a directory @meta is NULL, or
 * carries only have_perm and perm (file://). Return 0 to go on, negative to stop.
 */
typedef int (*bk_list_fn)(void *arg, const char *name, bool is_dir, const struct bk_meta *meta);

/* List directory @dir ("" = root). Entries may repeat and come in any order.
 * @return 0, the callback's negative value, or -errno. */
int backend_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg);

/* Completion of a read: 0 when exactly the requested bytes are in dst, else -errno
 * (-ESTALE: the object is no longer the version @etag named). */
typedef void (*bk_done_fn)(void *arg, int err);

/* How soon a read is wanted. Background reads use only part of the connection slots, so urgent
 * reads always have some; urgent ones start first. */
enum bk_prio {
	BK_URGENT = 0,
	BK_BACKGROUND = 1,
};

/*
 * Read @len bytes at @off of @path into @dst, asynchronously, with priority @prio. If @etag is
 * non-empty the request is conditional on it. @done runs exactly once, on the I/O thread, also
 * on failure; until then @dst must stay valid.
 * @return 0 (queued) or -errno (not queued, @done not called).
 */
int backend_read(struct backend *b, const char *path, const char *etag, uint64_t off,
		 uint32_t len, void *dst, enum bk_prio prio, bk_done_fn done, void *arg);

/* Run @cb(@arg) on the I/O thread after @delay_ns. @return 0 or -errno. */
int backend_defer(struct backend *b, uint64_t delay_ns, void (*cb)(void *arg), void *arg);

/* What a request to the store does, as its latency is labelled (op="get", bk_op_name). */
enum bk_op {
	BK_OP_GET,  /* a range read */
	BK_OP_HEAD, /* an object's metadata */
	BK_OP_LIST, /* a listing (or an index, or the check at mount) */
	BK_OP_N,
};

/* "get", "head", "list". */
const char *bk_op_name(enum bk_op op);

struct bk_stats {
	uint64_t requests;   /* HTTP requests (or file reads) started, retries included */
	uint64_t retries;
	uint64_t errors;     /* requests that finished with an error after retries */
	uint64_t bytes;      /* body bytes received for range reads */
	uint64_t active;     /* transfers running now */
	uint64_t queued;     /* reads waiting for a connection slot */
	uint64_t slowdowns;  /* 503 SlowDown / 429 answers received */
	uint64_t window;     /* transfers allowed at once now (AIMD), <= max_conns */
	uint64_t merged;     /* range reads that went out inside another's request (io.c) */
	/* time from a request sent to its answer, each attempt on its own, by what it does
	 * (file://: a read's pread) */
	struct bk_hist lat[BK_OP_N];
};
/* Hold this thread's range reads until backend_unplug and submit them together, so that
 * consecutive ones can go to the store as one request (io_plug). s3 and http: file's reads
 * are jobs (io_defer), which a plug does not hold. */
void backend_plug(struct backend *b);
void backend_unplug(struct backend *b);
void backend_get_stats(struct backend *b, struct bk_stats *ret);

/* The scheme @b serves: "s3", "http" or "file" (https:// is "http"). */
const char *backend_scheme(const struct backend *b);

/* ---- asynchronous metadata ---------------------------------------------------------------- */

/* Completion of backend_stat_async: @err 0 with @meta (valid during the call only), or -errno
 * as backend_stat returns it (-EISDIR: a directory on a store that has them). */
typedef void (*bk_stat_done_fn)(void *arg, int err, const struct bk_meta *meta);

/*
 * backend_stat without waiting: HEAD through the I/O loop (s3, http), or a job on the I/O
 * thread (file). @done runs exactly once, on the I/O thread, also on failure.
 * @return 0 (queued) or -errno (not queued, @done not called).
 */
int backend_stat_async(struct backend *b, const char *path, bk_stat_done_fn done, void *arg);

/*
 * backend_list without waiting: @fn is called for each entry and then @done once with 0, the
 * callback's negative value or -errno, all on the I/O thread. S3 pages are asked one after
 * another, each as the previous one arrives; @fn sees every page's entries as it is parsed.
 * @return 0 (queued) or -errno (not queued, neither @fn nor @done called).
 */
int backend_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
		       void *arg);

#endif
