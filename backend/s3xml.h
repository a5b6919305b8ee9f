/*
 * s3xml.h - S3 ListObjectsV2, error and multipart upload documents, parsed with expat; the
 * CompleteMultipartUpload request body, written.
 */
#ifndef TIERFS_S3XML_H
#define TIERFS_S3XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/*
 * The answer to CreateMultipartUpload (InitiateMultipartUploadResult): its UploadId, trimmed,
 * malloc'd into *ret_id (caller frees). @return 0, -EIO (another document, no UploadId),
 * -ENOMEM.
 */
int s3xml_parse_initiate(const char *body, size_t len, char **ret_id);

/*
 * The answer to CompleteMultipartUpload. S3 sends its 200 before it has assembled the object
 * and reports a failure after that as a 200 whose body is an <Error>, so a 200 is a success
 * only with a CompleteMultipartUploadResult. That one names the ETag, except on stores that
 * leave it out or send it empty (Ceph RGW 16: <ETag></ETag>): @etag is then "".
 * @return 0 and the ETag as sent (quotes included, trimmed; "" for none) in @etag; -EIO for
 * an <Error> (its Code in @code, truncated to fit), an ETag too long for @etaglen, or any other
 * document (@code ""); -ENOMEM.
 */
int s3xml_parse_complete(const char *body, size_t len, char *etag, size_t etaglen, char *code,
			 size_t codelen);

/*
 * The body of CompleteMultipartUpload for parts 1..@n whose ETags (as the store answered them,
 * quotes included) are @etags[0..n-1], XML-escaped. @return the malloc'd, NUL-terminated
 * document with its length in *ret_len, or NULL if out of memory.
 */
char *s3xml_complete_body(const char *const *etags, uint32_t n, size_t *ret_len);

/* "2013-09-17T18:07:53.000Z" -> seconds since epoch. @return 0 or -EINVAL. */
int s3xml_parse_time(const char *s, int64_t *ret);

#endif
