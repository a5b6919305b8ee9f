/*
 * fuzz_sigv4.c - the AWS Signature Version 4 pieces in sigv4.c on arbitrary keys, query
 * parameters and headers.
 *
 * The input, up to its first NUL, is used three ways:
 *
 *   - as an object key for sigv4_uri_encode(), with and without keep_slash: the output may
 *     hold only unreserved characters, '/' (with keep_slash) and %XX with upper-case hex, and
 *     decoding it must give back the input byte for byte;
 *   - split at '&' into query parameters, each "name=value" or a bare "name" (NULL value),
 *     for sigv4_canonical_query(): the result must equal a reference built here from the
 *     encoded pairs sorted by (name, value);
 *   - split at '\n' into the fields of a request to sign:
 *
 *         line 0  method           line 3  access key
 *         line 1  canonical URI    line 4  secret key
 *         line 2  region           line 5  x-amz-date
 *         line 6+ headers, "name:value" (a line without ':' is a header with a NULL value)
 *
 *     (missing lines get the values of AWS's documented example). sigv4_sign() must refuse
 *     exactly the requests the header says it refuses (-EINVAL), and otherwise produce the
 *     same NUL-terminated "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=<64
 *     hex>" twice in a row, with the signed header names lower-case, sorted and unique. A
 *     buffer too small gives -ENOSPC and writes nothing past its length; inputs whose length
 *     is 3 mod 4 get such a small buffer first.
 *
 * The first 8 bytes also make a time_t for sigv4_amz_date(), and the whole input is hashed
 * by sigv4_sha256_hex().
 */
#include <errno.h>
#include <stdbool.h>

#include "sigv4.h"
#include "fuzz.h"

#define GUARD	   16
#define SIG_PREFIX "AWS4-HMAC-SHA256 Credential="

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1; /* lower-case hex is not what SigV4 wants */
}

static void check_encode(const char *s, bool keep_slash)
{
	char *e = sigv4_uri_encode(s, keep_slash);
	const char *in = s;

	FUZZ_CHECK(e);
	for (const char *p = e; *p; in++) {
		if (*p == '%') {
			int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);

			FUZZ_CHECK(hi >= 0 && lo >= 0);
			FUZZ_CHECK((unsigned char)*in == (unsigned)(hi * 16 + lo));
			/* only what must be encoded is */
			FUZZ_CHECK(!unreserved((unsigned char)*in) && !(keep_slash && *in == '/'));
			p += 3;
		} else {
			FUZZ_CHECK(unreserved((unsigned char)*p) || (keep_slash && *p == '/'));
			FUZZ_CHECK(*in == *p);
			p++;
		}
	}
	FUZZ_CHECK(*in == '\0');
	free(e);
}

struct pair {
	char *k, *v; /* encoded, owned */
};

static int pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	int r = strcmp(x->k, y->k);

	return r ? r : strcmp(x->v, y->v);
}

static void check_query(const char *s)
{
	char *copy = strdup(s), *q, *ref, *p;
	struct kv *params;
	struct pair *pairs;
	size_t n = 0, cap = 1, reflen = 1;

	FUZZ_CHECK(copy);
	for (p = copy; *p; p++)
		cap += *p == '&';
	params = calloc(cap, sizeof(*params));
	pairs = calloc(cap, sizeof(*pairs));
	FUZZ_CHECK(params && pairs);
	if (*copy) {
		for (p = copy;; p++) {
			char *amp = strchr(p, '&'), *eq;

			if (amp)
				*amp = '\0';
			eq = strchr(p, '=');
			if (eq)
				*eq = '\0';
			params[n].k = p;
			params[n].v = eq ? eq + 1 : NULL;
			n++;
			if (!amp)
				break;
			p = amp;
		}
	}

	q = sigv4_canonical_query(params, n);
	FUZZ_CHECK(q);

	/* The reference: encode, sort by (name, value), join. */
	for (size_t i = 0; i < n; i++) {
		pairs[i].k = sigv4_uri_encode(params[i].k, false);
		pairs[i].v = sigv4_uri_encode(params[i].v ? params[i].v : "", false);
		FUZZ_CHECK(pairs[i].k && pairs[i].v);
		reflen += strlen(pairs[i].k) + strlen(pairs[i].v) + 2;
	}
	qsort(pairs, n, sizeof(*pairs), pair_cmp);
	ref = malloc(reflen);
	FUZZ_CHECK(ref);
	ref[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (i)
			strcat(ref, "&");
		strcat(ref, pairs[i].k);
		strcat(ref, "=");
		strcat(ref, pairs[i].v);
	}
	FUZZ_CHECK(strcmp(q, ref) == 0);

	for (size_t i = 0; i < n; i++) {
		free(pairs[i].k);
		free(pairs[i].v);
	}
	free(pairs);
	free(params);
	free(ref);
	free(q);
	free(copy);
}

static bool empty(const char *s)
{
	return !s || !s[0];
}

static bool is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The Authorization value must be exactly: the credential scope, the lower-cased header names
 * sorted and unique, then 64 hex digits of signature. */
static void check_auth(const char *a, const struct sigv4_input *in)
{
	char **names = calloc(in->nheaders + 1, sizeof(*names)), *want, *w;
	size_t wantlen = strlen(SIG_PREFIX) + strlen(in->access_key) + strlen(in->region) +
			 strlen(in->service) + 128;
	const char *sig;

	FUZZ_CHECK(names);
	for (size_t i = 0; i < in->nheaders; i++) {
		names[i] = strdup(in->headers[i].k);
		FUZZ_CHECK(names[i]);
		for (char *c = names[i]; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		wantlen += strlen(names[i]) + 1;
	}
	qsort(names, in->nheaders, sizeof(*names), name_cmp);
	want = malloc(wantlen);
	FUZZ_CHECK(want);
	w = want + sprintf(want, "%s%s/%.8s/%s/%s/aws4_request, SignedHeaders=", SIG_PREFIX,
			   in->access_key, in->amz_date, in->region, in->service);
	for (size_t i = 0; i < in->nheaders; i++) {
		if (i && strcmp(names[i], names[i - 1]) == 0)
			continue;
		w += sprintf(w, "%s%s", i ? ";" : "", names[i]);
	}
	strcpy(w, ", Signature=");
	if (strncmp(a, want, strlen(want)) != 0)
		fprintf(stderr, "got  %s\nwant %s<sig>\n", a, want);
	FUZZ_CHECK(strncmp(a, want, strlen(want)) == 0);
	sig = a + strlen(want);
	FUZZ_CHECK(strlen(sig) == 64 && is_lower_hex(sig, 64));

	for (size_t i = 0; i < in->nheaders; i++)
		free(names[i]);
	free(names);
	free(want);
}

static void check_sign(const char *s, size_t size)
{
	static const char *const defaults[6] = {
	    "GET",
	    "/test.txt",
	    "us-east-1",
	    "AKIAIOSFODNN7EXAMPLE",
	    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	    "20130524T000000Z",
	};
	const char *field[6];
	char *copy = strdup(s), *p, *small, *big, *big2;
	struct kv *headers;
	size_t nlines = 0, nh = 0, cap = 1, smalllen, biglen;
	struct sigv4_input in;
	bool bad;
	int r;

	FUZZ_CHECK(copy);
	for (p = copy; *p; p++)
		cap += *p == '\n';
	headers = calloc(cap, sizeof(*headers));
	FUZZ_CHECK(headers);
	memcpy(field, defaults, sizeof(field));
	for (p = copy;;) {
		char *nl = strchr(p, '\n');

		if (nl)
			*nl = '\0';
		if (nlines < 6) {
			field[nlines] = p;
		} else {
			char *colon = strchr(p, ':');

			if (colon)
				*colon = '\0';
			headers[nh].k = p;
			headers[nh].v = colon ? colon + 1 : NULL;
			nh++;
		}
		nlines++;
		if (!nl)
			break;
		p = nl + 1;
	}

	in = (struct sigv4_input){
	    .method = field[0],
	    .canonical_uri = field[1],
	    .canonical_query = "",
	    .headers = nh ? headers : NULL,
	    .nheaders = nh,
	    .payload_hash = "UNSIGNED-PAYLOAD",
	    .amz_date = field[5],
	    .region = field[2],
	    .service = "s3",
	    .access_key = field[3],
	    .secret_key = field[4],
	};
	bad = empty(in.method) || empty(in.canonical_uri) || strlen(in.amz_date) != 16 ||
	      empty(in.region) || empty(in.access_key);
	for (size_t i = 0; i < nh; i++)
		bad |= empty(headers[i].k);

	/* Room for any answer: everything variable in it comes from the input. */
	biglen = 2 * size + 256;
	big = malloc(biglen + GUARD);
	big2 = malloc(biglen);
	FUZZ_CHECK(big && big2);
	memset(big, 'G', biglen + GUARD);
	r = sigv4_sign(&in, big, biglen);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
	FUZZ_CHECK((r == -EINVAL) == bad);
	for (size_t i = biglen; i < biglen + GUARD; i++)
		FUZZ_CHECK(big[i] == 'G');
	if (r == 0) {
		FUZZ_CHECK(memchr(big, '\0', biglen));
		check_auth(big, &in);
		FUZZ_CHECK(sigv4_sign(&in, big2, biglen) == 0 && strcmp(big, big2) == 0);

		/* Too small: -ENOSPC, nothing past the end. */
		if (size % 4 == 3) {
			smalllen = size % 200;
			if (smalllen > strlen(big))
				smalllen = strlen(big);
			small = malloc(smalllen + GUARD);
			FUZZ_CHECK(small);
			memset(small, 'G', smalllen + GUARD);
			r = sigv4_sign(&in, small, smalllen);
			FUZZ_CHECK(r == -ENOSPC);
			for (size_t i = smalllen; i < smalllen + GUARD; i++)
				FUZZ_CHECK(small[i] == 'G');
			free(small);
		}
	}
	free(big);
	free(big2);
	free(headers);
	free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_strndup(data, size), date[17], hex[65];
	int64_t t = 0;

	check_encode(s, true);
	check_encode(s, false);
	check_query(s);
	check_sign(s, size);

	memcpy(&t, data, size < sizeof(t) ? size : sizeof(t));
	sigv4_amz_date((time_t)t, date);
	FUZZ_CHECK(date[0] == '\0' || (strlen(date) == 16 && date[8] == 'T' && date[15] == 'Z'));

	sigv4_sha256_hex(data, size, hex);
	FUZZ_CHECK(strlen(hex) == 64 && is_lower_hex(hex, 64));
	free(s);
	return 0;
}
