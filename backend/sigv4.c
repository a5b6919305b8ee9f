/*
 * sigv4.c - AWS Signature Version 4, header form, as S3 checks it.
 *
 * A signed request carries "Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
 * Signature=...". The signature is an HMAC chain over three derived strings:
 *
 *     canonical request            string to sign                   signing key
 *     -----------------            --------------                   -----------
 *     GET\n                        AWS4-HMAC-SHA256\n               k = HMAC("AWS4" secret, date)
 *     /bucket/a%20b.log\n          20130524T000000Z\n               k = HMAC(k, region)
 *     list-type=2&prefix=x\n       20130524/us-east-1/s3/           k = HMAC(k, "s3")
 *     host:h\nrange:bytes=0-9\n      aws4_request\n                 k = HMAC(k, "aws4_request")
 *     x-amz-...:...\n\n            hex(SHA256(canonical request))
 *     host;range;x-amz-...\n                                        Signature =
 *     <payload hash>                                                  hex(HMAC(k, string to sign))
 *
 * S3 differs from the other services in one place: the path is signed exactly as it is sent
 * (no dot-segment removal, no "//" folding, no second round of percent-encoding), so the
 * caller encodes each key once with sigv4_uri_encode(key, true) and passes the same string in
 * the URL and in sigv4_input.canonical_uri. The query string is built once by
 * sigv4_canonical_query() and likewise used verbatim in the URL, which keeps what is signed
 * and what is sent from ever drifting apart.
 *
 * Headers: names are lower-cased and sorted (bytewise), repeated names are joined with ','
 * in the order given, and values are trimmed with inner whitespace runs folded to one space.
 *
 * Crypto is OpenSSL's (EVP_Digest, HMAC); nothing is hand-rolled. Key material (the "AWS4"
 * prefixed secret and every derived key), the signature, and the canonical request (which
 * carries the session token) live in buffers that are cleansed before they are freed; the
 * growable strings never realloc, which would free a copy unseen.
 * The module keeps no state: every function is reentrant and may run on any thread. Workload:
 * one signature per S3 request, a few microseconds each, so clarity wins over speed here. This
 * is library code; it never prints anything.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "sigv4.h"

#define SHA256_LEN 32
#define AUTH_FMT                                                                                   \
	"AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, Signature=%s"

/* A growable string. Appends after an allocation failure are ignored and remembered in oom,
 * so a caller builds the whole string and checks once at the end. */
struct sbuf {
	char *p;    /* NUL-terminated once anything was appended; owned */
	size_t len; /* bytes used, without the NUL */
	size_t cap; /* bytes allocated */
	bool oom;   /* an append failed */
};

static void sb_addn(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		/* not realloc: the canonical request holds the session token, and realloc
		 * would leave a copy in the block it frees */
		p = malloc(cap);
		if (!p) {
			b->oom = true;
			return;
		}
		if (b->p) {
			memcpy(p, b->p, b->len + 1);
			OPENSSL_cleanse(b->p, b->cap);
			free(b->p);
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Zero and free @b's bytes. */
static void sb_free(struct sbuf *b)
{
	if (b->p)
		OPENSSL_cleanse(b->p, b->cap);
	free(b->p);
	b->p = NULL;
}

static void sb_add(struct sbuf *b, const char *s)
{
	sb_addn(b, s, strlen(s));
}

static void sb_addc(struct sbuf *b, char c)
{
	sb_addn(b, &c, 1);
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

char *sigv4_uri_encode(const char *s, bool keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	size_t n = 0;
	char *ret, *o;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (unreserved(*p) || (keep_slash && *p == '/')) ? 1 : 3;
	ret = malloc(n + 1);
	if (!ret)
		return NULL;
	o = ret;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (unreserved(*p) || (keep_slash && *p == '/')) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = digits[*p >> 4];
			*o++ = digits[*p & 15];
		}
	}
	*o = '\0';
	return ret;
}

struct qpair {
	char *k; /* encoded name, owned */
	char *v; /* encoded value, owned */
};

static int qpair_cmp(const void *a, const void *b)
{
	const struct qpair *x = a, *y = b;
	int r = strcmp(x->k, y->k);

	return r ? r : strcmp(x->v, y->v);
}

char *sigv4_canonical_query(const struct kv *params, size_t n)
{
	struct qpair *pairs;
	struct sbuf b = {0};
	char *ret = NULL;
	size_t i;

	if (n == 0)
		return strdup("");
	pairs = calloc(n, sizeof(*pairs));
	if (!pairs)
		return NULL;
	for (i = 0; i < n; i++) {
		pairs[i].k = sigv4_uri_encode(params[i].k, false);
		pairs[i].v = sigv4_uri_encode(params[i].v ? params[i].v : "", false);
		if (!pairs[i].k || !pairs[i].v)
			goto out;
	}
	qsort(pairs, n, sizeof(*pairs), qpair_cmp);
	for (i = 0; i < n; i++) {
		if (i)
			sb_addc(&b, '&');
		sb_add(&b, pairs[i].k);
		sb_addc(&b, '=');
		sb_add(&b, pairs[i].v);
	}
	if (!b.oom) {
		ret = b.p;
		b.p = NULL;
	}
out:
	for (i = 0; i < n; i++) {
		free(pairs[i].k);
		free(pairs[i].v);
	}
	free(pairs);
	free(b.p);
	return ret;
}

void sigv4_amz_date(time_t t, char ret[17])
{
	struct tm tm;

	/* Years past 9999 would not fit the fixed-width form; leave an empty string, which
	 * sigv4_sign() refuses, rather than a wrong date. */
	if (!gmtime_r(&t, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900 ||
	    strftime(ret, 17, "%Y%m%dT%H%M%SZ", &tm) != 16)
		ret[0] = '\0';
}

void sigv4_sha256_hex(const void *data, size_t len, char ret[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != SHA256_LEN) {
		ret[0] = '\0';
		return;
	}
	hex_encode(md, SHA256_LEN, ret);
}

/* The characters SigV4's Trimall() removes and folds: the C locale's isspace() set, spelled
 * out so a process locale cannot change what is signed. */
static bool ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void sb_add_trimmed(struct sbuf *b, const char *v)
{
	bool pending = false;

	while (*v && ws(*v))
		v++;
	for (; *v; v++) {
		if (ws(*v)) {
			pending = true;
			continue;
		}
		if (pending)
			sb_addc(b, ' ');
		pending = false;
		sb_addc(b, *v);
	}
}

struct hdr {
	char *name;	   /* lower-cased copy, owned */
	const char *value; /* the caller's */
	size_t idx;	   /* position in the input, to keep repeated names in order */
};

static int hdr_cmp(const void *a, const void *b)
{
	const struct hdr *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/*
 * Append the canonical header block (each "name:value\n") to @canon and the signed header list
 * ("a;b;c") to @signed_hdrs. @return 0, -EINVAL (empty name) or -ENOMEM.
 */
static int canonical_headers(const struct kv *headers, size_t n, struct sbuf *canon,
			     struct sbuf *signed_hdrs)
{
	struct hdr *h;
	size_t i;
	int r = 0;

	if (n == 0)
		return 0;
	h = calloc(n, sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (!headers[i].k || !headers[i].k[0]) {
			r = -EINVAL;
			goto out;
		}
		h[i].name = strdup(headers[i].k);
		if (!h[i].name) {
			r = -ENOMEM;
			goto out;
		}
		for (char *c = h[i].name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		h[i].value = headers[i].v ? headers[i].v : "";
		h[i].idx = i;
	}
	qsort(h, n, sizeof(*h), hdr_cmp);
	for (i = 0; i < n; i++) {
		bool repeat = i > 0 && strcmp(h[i].name, h[i - 1].name) == 0;

		if (repeat) {
			sb_addc(canon, ',');
		} else {
			if (i > 0) {
				sb_addc(canon, '\n');
				sb_addc(signed_hdrs, ';');
			}
			sb_add(canon, h[i].name);
			sb_addc(canon, ':');
			sb_add(signed_hdrs, h[i].name);
		}
		sb_add_trimmed(canon, h[i].value);
	}
	sb_addc(canon, '\n');
	if (canon->oom || signed_hdrs->oom)
		r = -ENOMEM;
out:
	for (i = 0; i < n; i++)
		free(h[i].name);
	free(h);
	return r;
}

/* @return 0, -EINVAL (a key longer than HMAC() takes) or -ENOMEM (OpenSSL failed). */
static int hmac256(const void *key, size_t keylen, const char *msg, unsigned char out[SHA256_LEN])
{
	unsigned int outlen = 0;

	if (keylen > INT_MAX)
		return -EINVAL;
	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), out,
		  &outlen) ||
	    outlen != SHA256_LEN)
		return -ENOMEM;
	return 0;
}

static bool str_ok(const char *s)
{
	return s && s[0];
}

static bool input_ok(const struct sigv4_input *in)
{
	return in && str_ok(in->method) && str_ok(in->canonical_uri) && str_ok(in->payload_hash) &&
	       in->amz_date && strlen(in->amz_date) == 16 && str_ok(in->region) &&
	       str_ok(in->service) && str_ok(in->access_key) && in->secret_key &&
	       (!in->nheaders || in->headers);
}

/* The canonical request into @creq, its hex SHA-256 into @hash, the signed header list into
 * @shdrs. @return 0, -EINVAL (an empty header name) or -ENOMEM. */
static int canonical_request(const struct sigv4_input *in, struct sbuf *creq, struct sbuf *shdrs,
			     char hash[65])
{
	int r;

	sb_add(creq, in->method);
	sb_addc(creq, '\n');
	sb_add(creq, in->canonical_uri);
	sb_addc(creq, '\n');
	sb_add(creq, in->canonical_query ? in->canonical_query : "");
	sb_addc(creq, '\n');
	sb_add(shdrs, ""); /* so shdrs->p is a string even with no headers */
	r = canonical_headers(in->headers, in->nheaders, creq, shdrs);
	if (r < 0)
		return r;
	sb_addc(creq, '\n');
	sb_add(creq, shdrs->p);
	sb_addc(creq, '\n');
	sb_add(creq, in->payload_hash);
	if (creq->oom || shdrs->oom)
		return -ENOMEM;
	sigv4_sha256_hex(creq->p, creq->len, hash);
	return hash[0] ? 0 : -ENOMEM;
}

/* "AWS4-HMAC-SHA256\n<amz date>\n<date>/<region>/<service>/aws4_request\n<hash>" into @sts.
 * @return 0 or -ENOMEM. */
static int string_to_sign(const struct sigv4_input *in, const char *date, const char *creq_hash,
			  struct sbuf *sts)
{
	sb_add(sts, "AWS4-HMAC-SHA256\n");
	sb_add(sts, in->amz_date);
	sb_addc(sts, '\n');
	sb_add(sts, date);
	sb_addc(sts, '/');
	sb_add(sts, in->region);
	sb_addc(sts, '/');
	sb_add(sts, in->service);
	sb_add(sts, "/aws4_request\n");
	sb_add(sts, creq_hash);
	return sts->oom ? -ENOMEM : 0;
}

/* The signature of @sts, in hex, into @ret: HMAC with the signing key, which is AWS4+secret ->
 * date -> region -> service -> aws4_request. Every key and the signature's bytes are cleansed
 * before return; the buffer of AWS4+secret is sized once, so no realloc leaves a copy of the
 * secret behind. @return 0, -EINVAL or -ENOMEM. */
static int signature(const struct sigv4_input *in, const char *date, const char *sts,
		     char ret[2 * SHA256_LEN + 1])
{
	unsigned char k1[SHA256_LEN], k2[SHA256_LEN], sig[SHA256_LEN];
	size_t klen = 4 + strlen(in->secret_key);
	char *kbuf = malloc(klen + 1);
	int r;

	if (!kbuf)
		return -ENOMEM;
	memcpy(kbuf, "AWS4", 4);
	memcpy(kbuf + 4, in->secret_key, klen - 4 + 1);
	if ((r = hmac256(kbuf, klen, date, k1)) == 0 &&
	    (r = hmac256(k1, SHA256_LEN, in->region, k2)) == 0 &&
	    (r = hmac256(k2, SHA256_LEN, in->service, k1)) == 0 &&
	    (r = hmac256(k1, SHA256_LEN, "aws4_request", k2)) == 0 &&
	    (r = hmac256(k2, SHA256_LEN, sts, sig)) == 0)
		hex_encode(sig, SHA256_LEN, ret);
	OPENSSL_cleanse(k1, sizeof(k1));
	OPENSSL_cleanse(k2, sizeof(k2));
	OPENSSL_cleanse(sig, sizeof(sig));
	OPENSSL_cleanse(kbuf, klen + 1);
	free(kbuf);
	return r;
}

int sigv4_sign(const struct sigv4_input *in, char *ret, size_t len)
{
	struct sbuf creq = {0}, shdrs = {0}, sts = {0};
	char creq_hash[65], sig_hex[2 * SHA256_LEN + 1], date[9];
	int need, r;

	if (!input_ok(in))
		return -EINVAL;
	memcpy(date, in->amz_date, 8);
	date[8] = '\0';
	r = canonical_request(in, &creq, &shdrs, creq_hash);
	if (r == 0)
		r = string_to_sign(in, date, creq_hash, &sts);
	if (r == 0)
		r = signature(in, date, sts.p, sig_hex);
	if (r < 0)
		goto out;
	r = -ENOMEM;
	need = snprintf(NULL, 0, AUTH_FMT, in->access_key, date, in->region, in->service, shdrs.p,
			sig_hex);
	if (need < 0)
		goto out;
	r = -ENOSPC;
	if (!ret || (size_t)need >= len)
		goto out;
	snprintf(ret, len, AUTH_FMT, in->access_key, date, in->region, in->service, shdrs.p,
		 sig_hex);
	r = 0;
out:
	OPENSSL_cleanse(sig_hex, sizeof(sig_hex));
	sb_free(&creq); /* holds x-amz-security-token */
	sb_free(&shdrs);
	sb_free(&sts);
	return r;
}
