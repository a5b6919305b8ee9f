/*
 * backend_i.h - declarations shared only inside backend/: protocol pieces that are pure
 * functions (SigV4, S3 XML, credentials, nginx JSON index, HTTP header values), the I/O loop,
 * and the per-scheme implementations. Unit and fuzz tests include this header.
 */
#ifndef TIERFS_BACKEND_I_H
#define TIERFS_BACKEND_I_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <curl/curl.h>

#include "backend.h"

struct kv {
	const char *k;
	const char *v;
};

/* ---------------------------------------------------------------------------------------------
 * sigv4.c: AWS Signature Version 4 (header form) for S3.
 * ------------------------------------------------------------------------------------------ */

/*
 * URI-encode @s the SigV4 way: A-Z a-z 0-9 - . _ ~ kept, '/' kept only if @keep_slash, every
 * other byte as %XY (upper-case hex).
 * @return a malloc'd string (caller frees), or NULL if out of memory.
 */
char *sigv4_uri_encode(const char *s, bool keep_slash);

/*
 * The canonical query string: each name and value URI-encoded (slashes too), pairs sorted by
 * encoded name then value, joined as n=v&n=v ("n=" for an empty value). The same string is
 * used in the request URL. @return malloc'd string ("" for n == 0) or NULL if out of memory.
 */
char *sigv4_canonical_query(const struct kv *params, size_t n);

/* 20130524T000000Z from @t (UTC). */
void sigv4_amz_date(time_t t, char ret[17]);

struct sigv4_input {
	const char *method;          /* "GET", "HEAD" */
	const char *canonical_uri;   /* already encoded, e.g. "/bucket/a%20b" */
	const char *canonical_query; /* from sigv4_canonical_query() */
	const struct kv *headers;    /* every header to sign, lower-case names, any order */
	size_t nheaders;
	const char *payload_hash;    /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;        /* the x-amz-date value */
	const char *region;
	const char *service;         /* "s3" */
	const char *access_key;
	const char *secret_key;
};

/*
 * Write the Authorization header value ("AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
 * Signature=...") into @ret (NUL-terminated). Header values are trimmed and inner runs of
 * spaces folded, as SigV4 requires.
 * @return 0, -ENOSPC if @len is too small, -ENOMEM.
 */
int sigv4_sign(const struct sigv4_input *in, char *ret, size_t len);

/* Hex SHA-256 of @data into @ret (65 bytes with the NUL). */
void sigv4_sha256_hex(const void *data, size_t len, char ret[65]);

/* ---------------------------------------------------------------------------------------------
 * s3xml.c: ListObjectsV2 and error documents, parsed with expat.
 * ------------------------------------------------------------------------------------------ */

/*
 * Called once per <Contents> (is_prefix false: key, size, mtime (seconds since epoch, or
 * INT64_MIN if absent or unparsable), etag as sent, with quotes) and once per
 * <CommonPrefixes><Prefix> (is_prefix true: key is the prefix including its trailing
 * delimiter; size 0, mtime INT64_MIN, etag ""). The key is url-decoded when the page says
 * EncodingType url; @keylen is its length, which differs from strlen(key) when it holds a NUL.
 * Return 0 to go on, negative to stop.
 */
typedef int (*s3xml_list_fn)(void *arg, const char *key, size_t keylen, bool is_prefix,
			     uint64_t size, int64_t mtime, const char *etag);

/*
 * Parse one ListObjectsV2 result page. If the page says IsTruncated=true, *ret_token is the
 * malloc'd NextContinuationToken (caller frees); otherwise NULL.
 * @return 0, -EIO for malformed XML or a truncated page without a token, -ENOMEM, or the
 * callback's negative value.
 */
int s3xml_parse_list(const char *body, size_t len, s3xml_list_fn fn, void *arg,
		     char **ret_token);

/*
 * Parse an S3 <Error> document into @code ("NoSuchBucket") and @msg, both truncated to fit.
 * @return 0, or -EINVAL if @body is not an error document.
 */
int s3xml_parse_error(const char *body, size_t len, char *code, size_t codelen, char *msg,
		      size_t msglen);

/* "2013-09-17T18:07:53.000Z" -> seconds since epoch. @return 0 or -EINVAL. */
int s3xml_parse_time(const char *s, int64_t *ret);

/* ---------------------------------------------------------------------------------------------
 * creds.c: where S3 credentials come from.
 * ------------------------------------------------------------------------------------------ */

struct s3_creds {
	char access_key[128];     /* empty: anonymous, requests go unsigned */
	char secret_key[128];
	char session_token[4096]; /* empty if none */
};

/*
 * Environment first (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the
 * shared credentials file @file (NULL: $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials)
 * section @profile (NULL: $AWS_PROFILE, else "default"), else anonymous. A file or profile
 * that was named explicitly (argument or environment) and is missing is an error; the default
 * file or profile missing means anonymous. @err gets one line for the user and never a secret.
 * @return 0, -ENOENT, -EINVAL (malformed file, key without secret), -ENAMETOOLONG.
 */
int creds_load(const char *file, const char *profile, struct s3_creds *ret, char *err,
	       size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * jsonidx.c: nginx `autoindex_format json` directory listings, parsed with json-c.
 * ------------------------------------------------------------------------------------------ */

/* Once per entry: name as sent, is_dir for "directory", size (0 for directories), mtime from
 * the RFC 1123 "mtime" (INT64_MIN if absent). Return 0 to go on, negative to stop. */
typedef int (*jsonidx_fn)(void *arg, const char *name, bool is_dir, uint64_t size,
			  int64_t mtime);

/* @return 0, -EIO if @body is not such a listing, or the callback's negative value. */
int jsonidx_parse(const char *body, size_t len, jsonidx_fn fn, void *arg);

/* ---------------------------------------------------------------------------------------------
 * httphdr.c: HTTP header values the range reader trusts only after checking.
 * ------------------------------------------------------------------------------------------ */

/* "bytes 0-99/1234" -> 0, 99, 1234; "bytes 0-99/ *" (no space) -> total UINT64_MAX.
 * @return 0 or -EINVAL (malformed, first > last, last >= total, overflow). */
int httphdr_content_range(const char *v, size_t len, uint64_t *ret_first, uint64_t *ret_last,
			  uint64_t *ret_total);

/* Decimal Content-Length, no sign, no overflow. @return 0 or -EINVAL. */
int httphdr_content_length(const char *v, size_t len, uint64_t *ret);

/* RFC 1123 / 850 / asctime date -> seconds since epoch. @return 0 or -EINVAL. */
int httphdr_date(const char *v, size_t len, int64_t *ret);

/* ---------------------------------------------------------------------------------------------
 * io.c: the I/O thread. One curl multi handle, a queue of requests in two priorities, timers
 * and plain jobs (the file backend's reads), retries with backoff, status -> errno.
 * ------------------------------------------------------------------------------------------ */

struct io;
struct io_req;

typedef void (*io_done_fn)(struct io_req *r);
/* Called before each attempt (first and retries) to append fresh auth headers to @list, which
 * already holds a copy of r->headers. @return 0 or -errno (the request fails). */
typedef int (*io_sign_fn)(struct io_req *r, struct curl_slist **list, void *arg);

/* One HTTP request. The submitter fills the first block; io fills the results. */
struct io_req {
	char *url;                   /* owned by the request (freed by io_req_free) */
	struct curl_slist *headers;  /* owned; sent with every attempt */
	bool head;                   /* HEAD instead of GET */
	uint64_t off;                /* range reads: first byte */
	uint32_t len;                /* range reads: exact length, 0 = not a range read */
	void *dst;                   /* range reads: where the bytes go (len bytes) */
	char *etag;                  /* range reads: expected ETag, owned, or NULL */
	bool lagging;                /* low priority: uses at most part of the connections */
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
	uint64_t length;             /* Content-Length, UINT64_MAX if none */
	char errmsg[256];            /* why it failed, for a log line or the user */

	/* io's own */
	void *easy;                  /* CURL * while running */
	struct curl_slist *att_headers; /* headers of the current attempt (copy + auth) */
	struct io_req *next;         /* queue link */
	unsigned attempt;            /* 0 for the first */
	uint64_t got;                /* body bytes received this attempt */
	uint64_t skip;               /* 200 answer to a range: bytes to drop before off */
	bool whole;                  /* this attempt got a 200 for a range request */
	bool complete;               /* range satisfied, the rest of a 200 body dropped */
	bool have_cr;                /* Content-Range seen */
	uint64_t cr_first, cr_last, cr_total;
	bool sync_done;              /* io_run's wait flag */
};

struct io_cfg {
	unsigned max_conns;
	unsigned timeout_s;
	unsigned retries;
	const char *ca_file;
	bool insecure;
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
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
/* Submit @r and wait for it (r->done must be NULL). @return r->err. */
int io_run(struct io *io, struct io_req *r);
/* Run @fn(@arg) on the I/O thread after @delay_ns (0: soon). @return 0 or -errno. */
int io_defer(struct io *io, uint64_t delay_ns, void (*fn)(void *), void *arg);

struct io_req *io_req_new(void);
void io_req_free(struct io_req *r);
/* Add "Name: value" to r->headers. @return 0 or -ENOMEM. */
int io_req_header(struct io_req *r, const char *name, const char *value);

void io_get_stats(struct io *io, struct bk_stats *ret);
/* Count a read done outside curl (file://): one request, @bytes received or an error. */
void io_account(struct io *io, uint64_t bytes, bool error);

/* HTTP status -> errno (0 for 2xx); is a failure with this status or curl code retryable? */
int io_status_errno(long status);

/* ---------------------------------------------------------------------------------------------
 * backend.c / s3.c / http.c / file.c: one set of operations per scheme.
 * ------------------------------------------------------------------------------------------ */

struct bk_ops {
	int (*check)(struct backend *b, char *err, size_t errlen);
	int (*stat)(struct backend *b, const char *path, struct bk_meta *ret);
	int (*list)(struct backend *b, const char *dir, bk_list_fn fn, void *arg);
	int (*read)(struct backend *b, const char *path, const char *etag, uint64_t off,
		    uint32_t len, void *dst, bool lagging, bk_done_fn done, void *arg);
	void (*free)(struct backend *b);
	/* asynchronous metadata (backend.h); NULL, or -EOPNOTSUPP from the call: the
	 * synchronous op runs as a job on the I/O thread instead (a local store, a manifest) */
	int (*stat_async)(struct backend *b, const char *path, bk_stat_done_fn done, void *arg);
	int (*list_async)(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			  void *arg);
};

struct backend {
	const struct bk_ops *ops;
	const char *scheme;   /* "s3", "http", "file" */
	struct io *io;        /* NULL for file:// */
	void *priv;           /* the scheme's own state */
	unsigned timeout_s;
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
};

/* Each sets b->ops, b->scheme, b->priv (and b->io when it needs one).
 * @return 0, or -errno with one line in @err. */
int s3_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int http_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);
int file_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen);

/* The io_cfg a scheme's I/O loop gets from @cfg. */
struct io_cfg backend_io_cfg(const struct backend_cfg *cfg);

/* Range read through @b->io with @r already holding url/headers/sign: fills the range fields,
 * wires completion to @done. Frees @r on every path. @return 0 or -errno (done not called). */
int backend_io_read(struct backend *b, struct io_req *r, const char *etag, uint64_t off,
		    uint32_t len, void *dst, bool lagging, bk_done_fn done, void *arg);

/* HEAD with @r (url and signing set): size, mtime and ETag into *ret. Frees @r.
 * @return 0 or -errno. */
int backend_io_head(struct backend *b, struct io_req *r, struct bk_meta *ret);

/* HEAD with @r (url and signing set) without waiting: @done gets size, mtime and ETag on the
 * I/O thread. Frees @r on every path. @return 0 or -errno (done not called). */
int backend_io_head_async(struct backend *b, struct io_req *r, bk_stat_done_fn done, void *arg);

/* A path ("a/b c") as URL path segments ("a/b%20c"). @return malloc'd or NULL. */
char *backend_url_path(const char *path);

#endif
