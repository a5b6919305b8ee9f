/*
 * sigv4.h - AWS Signature Version 4 (header form) for S3: pure functions, checked against the
 * AWS test vectors and botocore (tests/unit/test_sigv4.c) and fuzzed (tests/fuzz/).
 */
#ifndef TIERFS_SIGV4_H
#define TIERFS_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

struct kv {
	const char *k;
	const char *v;
};

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

#endif
