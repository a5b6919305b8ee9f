/*
 * s3.c - s3://bucket[/prefix]: ListObjectsV2, HEAD and ranged GET, signed with SigV4.
 *
 * Addressing: path style puts the bucket in the path (http://endpoint/bucket/key), virtual-hosted
 * style in the host name (https://bucket.endpoint/key). The canonical URI that SigV4 signs is
 * exactly the path of the URL we send, so the signer reads it back from the URL:
 *
 *     https://bucket.s3.us-east-1.amazonaws.com/logs/seg%2001.log?x=y
 *             └──────────── Host ─────────────┘└─ canonical URI ─┘ └ query ┘
 *
 * Each attempt (retries too) is signed afresh with the current time. Anonymous access (no
 * credentials anywhere) sends unsigned requests. Secrets live in struct s3_creds (zeroed at
 * free) and are never put in a URL, a log line or an error; the header lines a signature
 * makes (session token, Authorization) are zeroed on the stack here and in the attempt's
 * header list when io.c frees it. curl's own copy of a request's headers is not ours to wipe.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "creds.h"
#include "s3_i.h"
#include "s3xml.h"
#include "io.h"
#include "scheme.h"
#include "sigv4.h"

static void s3_free(struct backend *b)
{
	struct s3 *s = b->priv;

	if (!s)
		return;
	free(s->bucket);
	free(s->prefix);
	free(s->endpoint);
	free(s->base_url);
	free(s->region);
	explicit_bzero(&s->creds, sizeof(s->creds));
	free(s);
}

/* Split @url into the Host curl sends (@host) and the path it signs (@curi), and its query.
 * @return 0 or -errno. */
static int url_parts(const char *url, char host[512], char curi[8192], const char **ret_query)
{
	const char *p = strstr(url, "://"), *q;

	p = p ? p + 3 : url;
	q = strchr(p, '/');
	if (!q || (size_t)(q - p) >= 512)
		return -EINVAL;
	memcpy(host, p, (size_t)(q - p));
	host[q - p] = '\0';
	/* curl leaves a default port out of the Host it sends; sign what it sends */
	size_t hl = strlen(host);
	if (strncmp(url, "http://", 7) == 0 && hl > 3 && strcmp(host + hl - 3, ":80") == 0)
		host[hl - 3] = '\0';
	else if (strncmp(url, "https://", 8) == 0 && hl > 4 && strcmp(host + hl - 4, ":443") == 0)
		host[hl - 4] = '\0';
	const char *qm = strchr(q, '?');
	size_t ulen = qm ? (size_t)(qm - q) : strlen(q);
	if (ulen >= 8192)
		return -ENAMETOOLONG;
	memcpy(curi, q, ulen);
	curi[ulen] = '\0';
	*ret_query = qm ? qm + 1 : "";
	return 0;
}

#define SIGNED_EXTRA_MAX 4

int s3_sign(struct s3 *s, struct io_req *r, struct curl_slist **list, const char *payload_hash,
	    const struct kv *extra, size_t nextra)
{
	char host[512], curi[8192], date[17], auth[1024], line[4200];
	struct kv hdr[4 + SIGNED_EXTRA_MAX];
	const char *query;
	size_t nh = 0, nown;
	int e;

	if (!s->creds.access_key[0])
		return 0; /* anonymous */
	if (nextra > SIGNED_EXTRA_MAX)
		return -EINVAL;
	e = url_parts(r->url, host, curi, &query);
	if (e < 0)
		return e;
	sigv4_amz_date(time(NULL), date);
	hdr[nh++] = (struct kv){"host", host};
	hdr[nh++] = (struct kv){"x-amz-content-sha256", payload_hash};
	hdr[nh++] = (struct kv){"x-amz-date", date};
	if (s->creds.session_token[0])
		hdr[nh++] = (struct kv){"x-amz-security-token", s->creds.session_token};
	nown = nh;
	for (size_t i = 0; i < nextra; i++)
		hdr[nh++] = extra[i];
	struct sigv4_input in = {
	    .method = r->method ? r->method
		      : r->head ? "HEAD"
				: "GET",
	    .canonical_uri = curi,
	    .canonical_query = query,
	    .headers = hdr,
	    .nheaders = nh,
	    .payload_hash = payload_hash,
	    .amz_date = date,
	    .region = s->region,
	    .service = "s3",
	    .access_key = s->creds.access_key,
	    .secret_key = s->creds.secret_key,
	};
	e = sigv4_sign(&in, auth, sizeof(auth));
	if (e < 0)
		goto out;
	e = -ENOMEM;
	for (size_t i = 1; i < nown; i++) { /* ours; host and @extra are sent already */
		snprintf(line, sizeof(line), "%s: %s", hdr[i].k, hdr[i].v);
		struct curl_slist *l = curl_slist_append(*list, line);
		if (!l)
			goto out;
		*list = l;
	}
	snprintf(line, sizeof(line), "Authorization: %s", auth);
	struct curl_slist *l = curl_slist_append(*list, line);
	if (!l)
		goto out;
	*list = l;
	e = 0;
out:
	/* line held the session token, then the Authorization header; the list owns copies,
	 * which io.c zeroes when it frees them */
	explicit_bzero(line, sizeof(line));
	explicit_bzero(auth, sizeof(auth));
	return e;
}

/* The signer of requests without a body. */
static int sign(struct io_req *r, struct curl_slist **list, void *arg)
{
	return s3_sign(arg, r, list, EMPTY_SHA256, NULL, 0);
}

struct io_req *s3_new_req(struct s3 *s, const char *key, const char *query)
{
	struct io_req *r = io_req_new();
	char *full = NULL, *enc = NULL;

	if (!r)
		return NULL;
	if (key) {
		if (asprintf(&full, "%s%s", s->prefix, key) < 0)
			goto fail;
		if (!(enc = sigv4_uri_encode(full, true)))
			goto fail;
		if (asprintf(&r->url, "%s/%s%s%s", s->base_url, enc, query ? "?" : "",
			     query ? query : "") < 0) {
			r->url = NULL;
			goto fail;
		}
	} else if (asprintf(&r->url, "%s%s?%s", s->base_url, s->path_style ? "" : "/", query) < 0) {
		r->url = NULL;
		goto fail;
	}
	free(full);
	free(enc);
	r->sign = sign;
	r->sign_arg = s;
	return r;
fail:
	free(full);
	free(enc);
	io_req_free(r);
	return NULL;
}

/* One line for the user about a failed bucket-level request. */
static void explain(struct s3 *s, struct io_req *r, char *err, size_t errlen)
{
	char code[64] = "", msg[160] = "";

	if (r->body)
		s3xml_parse_error(r->body, r->body_len, code, sizeof(code), msg, sizeof(msg));
	if (!r->status)
		snprintf(err, errlen, "cannot reach %s: %s", s->endpoint,
			 r->errmsg[0] ? r->errmsg : strerror(-r->err));
	else if (r->status == 404 && (!code[0] || strcmp(code, "NoSuchBucket") == 0))
		snprintf(err, errlen, "bucket '%s' does not exist at %s", s->bucket, s->endpoint);
	else if (r->status == 403 || r->status == 401)
		snprintf(err, errlen,
			 "access to bucket '%s' denied (%s%s%s): check the credentials", s->bucket,
			 code[0] ? code : "HTTP 403", msg[0] ? ": " : "", msg);
	else if (r->status == 301 || r->status == 307 || strcmp(code, "PermanentRedirect") == 0 ||
		 strcmp(code, "AuthorizationHeaderMalformed") == 0)
		snprintf(err, errlen,
			 "bucket '%s' is not in region %s (%s): set -o region=", s->bucket,
			 s->region, code[0] ? code : "redirect");
	else
		snprintf(err, errlen, "%s answered HTTP %ld%s%s%s%s for bucket '%s'", s->endpoint,
			 r->status, code[0] ? " " : "", code, msg[0] ? ": " : "", msg, s->bucket);
}

struct list_ctx {
	struct backend *b;      /* for its log */
	const char *dir_prefix; /* full key prefix of the directory listed, with its slash */
	size_t plen;
	bk_list_fn fn;
	void *arg;
};

/* One log line for a key that exists in the store but cannot be a file name. The key is
 * shown url-encoded, so that whatever bytes it holds make one printable line. */
static void skipped(struct list_ctx *lc, const char *key, size_t keylen, const char *why)
{
	char enc[600], line[800];
	size_t w = 0;

	if (!lc->b->log)
		return;
	for (size_t i = 0; i < keylen && w + 4 < sizeof(enc); i++) {
		unsigned char ch = (unsigned char)key[i];

		if (ch > 0x20 && ch < 0x7f && ch != '%')
			enc[w++] = (char)ch;
		else
			w += (size_t)snprintf(enc + w, sizeof(enc) - w, "%%%02X", ch);
	}
	enc[w] = '\0';
	snprintf(line, sizeof(line), "listing: skipped key '%s%s': %s", enc,
		 w + 4 >= sizeof(enc) ? "..." : "", why);
	lc->b->log(lc->b->log_arg, 1, line);
}

static int on_list_entry(void *arg, const char *key, size_t keylen, bool is_prefix, uint64_t size,
			 int64_t mtime, const char *etag)
{
	struct list_ctx *lc = arg;
	const char *full = key;
	char name[1024];
	size_t n;

	if (strncmp(key, lc->dir_prefix, lc->plen) != 0)
		return 0; /* not under the directory: a confused server */
	if (strlen(key) != keylen) {
		skipped(lc, full, keylen, "it holds a NUL byte");
		return 0;
	}
	key += lc->plen;
	n = strlen(key);
	if (is_prefix && n && key[n - 1] == '/')
		n--;
	if (n == 0 || memchr(key, '/', n))
		return 0; /* a directory marker ("dir/"), or an empty segment */
	if (n > 255 || n >= sizeof(name)) {
		skipped(lc, full, keylen, "a name longer than 255 bytes");
		return 0;
	}
	memcpy(name, key, n);
	name[n] = '\0';
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		skipped(lc, full, keylen, "'.' and '..' cannot be file names");
		return 0;
	}
	if (is_prefix)
		return lc->fn(lc->arg, name, true, NULL);
	struct bk_meta m = {.size = size, .mtime = mtime};
	snprintf(m.etag, sizeof(m.etag), "%s", etag ? etag : "");
	return lc->fn(lc->arg, name, false, &m);
}

static int s3_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct s3 *s = b->priv;
	struct list_ctx lc = {.b = b, .fn = fn, .arg = arg};
	char *prefix = NULL, *token = NULL;
	int e;

	if (asprintf(&prefix, "%s%s%s", s->prefix, dir, dir[0] ? "/" : "") < 0)
		return -ENOMEM;
	lc.dir_prefix = prefix;
	lc.plen = strlen(prefix);
	for (int pages = 0;; pages++) {
		struct io_req *r = NULL;
		char *next = NULL;

		if (pages > 1000000) {
			e = -ELOOP;
			break;
		}
		struct kv q[5];
		size_t n = 0;
		q[n++] = (struct kv){"list-type", "2"};
		q[n++] = (struct kv){"delimiter", "/"};
		/* keys come percent-encoded: one holding a character XML cannot carry would
		 * otherwise make the page unparsable (s3xml.c) */
		q[n++] = (struct kv){"encoding-type", "url"};
		q[n++] = (struct kv){"prefix", prefix};
		if (token)
			q[n++] = (struct kv){"continuation-token", token};
		char *query = sigv4_canonical_query(q, n);
		if (!query || !(r = s3_new_req(s, NULL, query))) {
			free(query);
			e = -ENOMEM;
			break;
		}
		free(query);
		e = io_run(b->io, r);
		if (e == 0)
			e = s3xml_parse_list(r->body ? r->body : "", r->body_len, on_list_entry,
					     &lc, &next);
		io_req_free(r);
		free(token);
		token = next;
		if (e < 0 || !token)
			break;
	}
	free(token);
	free(prefix);
	return e;
}

static int ignore_entry(void *arg, const char *key, size_t keylen, bool is_prefix, uint64_t size,
			int64_t mtime, const char *etag)
{
	return 0;
}

static int s3_check(struct backend *b, char *err, size_t errlen)
{
	struct s3 *s = b->priv;
	struct kv q[] = {{"list-type", "2"},
			 {"max-keys", "1"},
			 {"prefix", s->prefix},
			 {"encoding-type", "url"}};
	char *query = sigv4_canonical_query(q, 4);
	struct io_req *r = query ? s3_new_req(s, NULL, query) : NULL;
	int e;

	free(query);
	if (!r)
		return -ENOMEM;
	char *token = NULL;

	e = io_run(b->io, r);
	if (e == 0 &&
	    s3xml_parse_list(r->body ? r->body : "", r->body_len, ignore_entry, NULL, &token) < 0) {
		snprintf(err, errlen, "%s did not answer with an S3 bucket listing", s->endpoint);
		e = -EPROTO;
	} else if (e < 0) {
		explain(s, r, err, errlen);
	}
	free(token);
	io_req_free(r);
	return e;
}

static struct io_req *s3_object_req(struct backend *b, const char *path)
{
	return s3_new_req(b->priv, path, NULL);
}

/* A listing in flight: one ListObjectsV2 page at a time, the next asked when one arrives. */
struct s3_list_async {
	struct backend *b;
	struct list_ctx lc;
	char *prefix;            /* lc.dir_prefix */
	char *token;             /* continuation of the next page, or NULL for the first */
	int pages;
	bk_done_fn done;
	void *arg;
};

static int submit_page(struct s3_list_async *la);

static void page_done(struct io_req *r)
{
	struct s3_list_async *la = r->arg;
	char *next = NULL;
	int e = r->err;

	if (e == 0)
		e = s3xml_parse_list(r->body ? r->body : "", r->body_len, on_list_entry, &la->lc,
				     &next);
	io_req_free(r);
	free(la->token);
	la->token = next;
	if (e == 0 && la->token && ++la->pages <= 1000000 && (e = submit_page(la)) == 0)
		return;
	if (e == 0 && la->token)
		e = -ELOOP;
	la->done(la->arg, e);
	free(la->token);
	free(la->prefix);
	free(la);
}

static int submit_page(struct s3_list_async *la)
{
	struct kv q[5];
	size_t n = 0;
	struct io_req *r;
	char *query;
	int e;

	q[n++] = (struct kv){"list-type", "2"};
	q[n++] = (struct kv){"delimiter", "/"};
	q[n++] = (struct kv){"encoding-type", "url"};
	q[n++] = (struct kv){"prefix", la->prefix};
	if (la->token)
		q[n++] = (struct kv){"continuation-token", la->token};
	query = sigv4_canonical_query(q, n);
	r = query ? s3_new_req(la->b->priv, NULL, query) : NULL;
	free(query);
	if (!r)
		return -ENOMEM;
	r->done = page_done;
	r->arg = la;
	e = io_submit(la->b->io, r);
	if (e < 0)
		io_req_free(r);
	return e;
}

static int s3_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			 void *arg)
{
	struct s3 *s = b->priv;
	struct s3_list_async *la = calloc(1, sizeof(*la));
	int e;

	if (!la)
		return -ENOMEM;
	if (asprintf(&la->prefix, "%s%s%s", s->prefix, dir, dir[0] ? "/" : "") < 0) {
		free(la);
		return -ENOMEM;
	}
	la->b = b;
	la->lc = (struct list_ctx){.b = b, .dir_prefix = la->prefix, .plen = strlen(la->prefix),
				   .fn = fn, .arg = arg};
	la->done = done;
	la->arg = arg;
	e = submit_page(la);
	if (e < 0) {
		free(la->prefix);
		free(la);
	}
	return e;
}

static const struct bk_ops s3_ops = {
    .check = s3_check,
    .object_req = s3_object_req,
    .list = s3_list,
    .free = s3_free,
    .list_async = s3_list_async,
    .min_part = BK_PART_SIZE_MIN,
    .max_parts = BK_PARTS_MAX,
    .hold_first = true,
    .upload_init = s3_upload_init,
    .upload_part = s3_upload_part,
    .upload_commit = s3_upload_commit,
    .upload_abort = s3_upload_abort,
    .unlink = s3_unlink,
    .rename = s3_rename,
    .mkdir = s3_mkdir,
};

/* Valid S3 bucket names are 3..63 of [a-z0-9.-]; be a little lenient (upper case, '_') for
 * other stores, but refuse anything that would change the URL's meaning. */
static bool bucket_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 255)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '_'))
			return false;
	return true;
}

/* The key prefix of the URL's path @p: without leading or repeated slashes, with one trailing
 * slash ("" for none). @return it (malloc'd) or NULL. */
static char *prefix_of(const char *p)
{
	char *prefix = malloc(strlen(p) + 2);
	size_t n = 0;

	if (!prefix)
		return NULL;
	for (const char *seg = p; *seg;) {
		while (*seg == '/')
			seg++;
		size_t l = strcspn(seg, "/");
		if (!l)
			break;
		memcpy(prefix + n, seg, l);
		n += l;
		prefix[n++] = '/';
		seg += l;
	}
	prefix[n] = '\0';
	return prefix;
}

/* Can the bucket not be put in the name of @host ("host[:port]")? Not in an IP address (v4,
 * or v6 in brackets) nor in "localhost": "bucket.127.0.0.1" resolves to nothing, so such
 * endpoints (a self-hosted store: Ceph RGW, MinIO) take the bucket in the path, as botocore
 * does. */
static bool host_needs_path_style(const char *host)
{
	size_t n = strcspn(host, ":");
	struct in_addr a;
	char buf[64];

	if (host[0] == '[')
		return true;
	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, host, n);
	buf[n] = '\0';
	return strcasecmp(buf, "localhost") == 0 || inet_pton(AF_INET, buf, &a) == 1;
}

int s3_init(struct backend *b, const struct backend_cfg *cfg, char *err, size_t errlen)
{
	struct s3 *s = calloc(1, sizeof(*s));
	const char *rest = cfg->url + 5, *slash;
	const char *ep;
	struct io_cfg ioc;
	int e = -ENOMEM;

	if (!s)
		return -ENOMEM;
	b->priv = s;
	b->ops = &s3_ops;
	b->scheme = "s3";
	slash = strchr(rest, '/');
	s->bucket = slash ? strndup(rest, (size_t)(slash - rest)) : strdup(rest);
	if (!s->bucket)
		goto fail;
	if (!bucket_ok(s->bucket)) {
		snprintf(err, errlen, "URL %s: '%s' is not a bucket name", cfg->url, s->bucket);
		e = -EINVAL;
		goto fail;
	}
	s->prefix = prefix_of(slash ? slash : "");
	if (!s->prefix)
		goto fail;
	s->region = strdup(cfg->region && cfg->region[0] ? cfg->region : "us-east-1");
	if (!s->region)
		goto fail;
	s->path_style = cfg->path_style;
	if (cfg->endpoint && cfg->endpoint[0]) {
		size_t n = strlen(cfg->endpoint);

		while (n && cfg->endpoint[n - 1] == '/')
			n--;
		s->endpoint = strndup(cfg->endpoint, n);
	} else if (asprintf(&s->endpoint, "https://s3.%s.amazonaws.com", s->region) < 0) {
		s->endpoint = NULL;
	}
	if (!s->endpoint)
		goto fail;
	ep = strstr(s->endpoint, "://");
	if (!ep || strncasecmp(s->endpoint, "http", 4) != 0 || !ep[3] || strchr(ep + 3, '/') ||
	    strchr(ep + 3, '?')) {
		snprintf(err, errlen, "endpoint %s: expected http(s)://host[:port]", s->endpoint);
		e = -EINVAL;
		goto fail;
	}
	if (!s->path_style && host_needs_path_style(ep + 3))
		s->path_style = true;
	if (s->path_style)
		e = asprintf(&s->base_url, "%s/%s", s->endpoint, s->bucket);
	else
		e = asprintf(&s->base_url, "%.*s%s.%s", (int)(ep + 3 - s->endpoint), s->endpoint,
			     s->bucket, ep + 3);
	if (e < 0) {
		s->base_url = NULL;
		e = -ENOMEM;
		goto fail;
	}
	e = creds_load(cfg->credentials, cfg->profile, &s->creds, err, errlen);
	if (e < 0)
		goto fail;
	ioc = io_cfg_from(cfg);
	b->io = io_new(&ioc);
	if (!b->io) {
		e = -ENOMEM;
		goto fail;
	}
	return 0;
fail:
	s3_free(b);
	b->priv = NULL;
	return e;
}
