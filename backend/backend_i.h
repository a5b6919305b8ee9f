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
 * delimiter; size 0, mtime INT64_MIN, etag ""). Return 0 to go on, negative to stop.
 */
typedef int (*s3xml_list_fn)(void *arg, const char *key, bool is_prefix, uint64_t size,
			     int64_t mtime, const char *etag);

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

#endif
