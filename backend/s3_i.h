/*
 * s3_i.h - what s3.c (reads, listings) shares with s3write.c (uploads, deletes): the bucket's
 * state, building a request for a key, and signing one.
 */
#ifndef TIERFS_S3_I_H
#define TIERFS_S3_I_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "creds.h"
#include "io.h"
#include "sigv4.h"
#include "upload.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Set up by s3_init, read-only afterwards: no lock. */
struct s3 {
	char *bucket;
	char *prefix;	/* "" or "some/prefix/" */
	char *endpoint; /* scheme://host[:port], for messages */
	char *base_url; /* where keys start: "http://h:9000/bucket" or "https://bucket.h" */
	char *region;
	bool path_style;
	struct s3_creds creds;
};

/* A request for key @key (prefix not yet added) with @query (canonical, or NULL) or, with @key
 * NULL, for the bucket; signed for GET/HEAD of an empty body. @return it, or NULL if out of
 * memory. */
struct io_req *s3_new_req(struct s3 *s, const char *key, const char *query);

/*
 * Append SigV4 headers for @r (its method, URL and headers final) to @list: x-amz-date,
 * x-amz-content-sha256 = @payload_hash (hex SHA-256 of the body, or UNSIGNED-PAYLOAD), the
 * session token, and the Authorization that signs them, host, and @extra (headers @r already
 * carries that must be signed too, lower-case names). Nothing when anonymous.
 * @return 0 or -errno.
 */
int s3_sign(struct s3 *s, struct io_req *r, struct curl_slist **list, const char *payload_hash,
	    const struct kv *extra, size_t nextra);

/* s3write.c: the write operations of s3_ops (scheme.h says what each does). */
int s3_upload_init(struct bk_upload *u);
int s3_upload_part(struct bk_upload *u, struct bk_part *p, int step);
int s3_upload_commit(struct bk_upload *u);
void s3_upload_abort(struct bk_upload *u);
int s3_unlink(struct backend *b, const char *path, bk_done_fn done, void *arg);
int s3_rename(struct backend *b, const char *from, const char *to, bool overwrite, bk_done_fn done,
	      void *arg);
int s3_mkdir(struct backend *b, const char *path, bool rm, bk_done_fn done, void *arg);

/*
 * The ETag S3 gives an object made by CompleteMultipartUpload of @n parts whose MD5s are
 * @md5s (without KMS): "\"" hex(MD5(md5s[0] || ... || md5s[n-1])) "-" n "\"". @ret holds at
 * least 48 bytes. Pure, for the retried Complete's check (s3write.c) and its unit test.
 */
void s3_multipart_etag(const unsigned char (*md5s)[16], uint32_t n, char *ret, size_t retlen);

#endif
