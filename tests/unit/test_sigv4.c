/*
 * test_sigv4.c - SigV4 against two outside references and the edges of each helper.
 *
 * 1. The three header-signing examples from Amazon's S3 documentation, read from
 *    $TIERFS_TESTVECTORS/sigv4-aws-examples.txt (fields: method | path | canonical query |
 *    extra header | signed headers | signature; the constants are in its comment block).
 *    And the documentation's PUT example, whose body ("Welcome to Amazon S3.") is signed with
 *    its SHA-256 (test_aws_put_example).
 * 2. botocore: tests/unit/sigv4_botocore.py (run with /usr/bin/python3, Debian's
 *    python3-botocore) signs about forty S3 requests with S3SigV4Auth at a fixed time and
 *    prints the raw inputs, the URL it built, its canonical request and its Authorization
 *    header. Here the same raw inputs go through sigv4_uri_encode(), sigv4_canonical_query(),
 *    sigv4_amz_date() and sigv4_sign(), and every piece must match byte for byte. The write
 *    path's requests (PutObject, UploadPart, Create/Complete/AbortMultipartUpload,
 *    DeleteObject) come with their body: its SHA-256 (sigv4_sha256_hex) must be the payload
 *    hash botocore signed. The test is skipped, saying why, only if /usr/bin/python3 or
 *    botocore is missing.
 * 3. Unit edges: encoding of every byte, query sorting, dates, -ENOSPC, header folding.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sigv4.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* ------------------------------------------------------------------------------------------ */
/* helpers */

static char *trim(char *s)
{
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n > 0 &&
	       (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

static char *strip_prefix(char *s, const char *prefix)
{
	size_t n = strlen(prefix);

	return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

/* The signature part of an Authorization value. */
static const char *sig_of(const char *auth)
{
	const char *p = strstr(auth, "Signature=");

	assert_non_null(p);
	return p + strlen("Signature=");
}

/* ------------------------------------------------------------------------------------------ */
/* 1. AWS documentation examples */

static void test_aws_examples(void **state)
{
	const char *dir = getenv("TIERFS_TESTVECTORS");
	char path[PATH_MAX], line[2048], akid[128] = "", secret[128] = "", host[256] = "";
	char region[64] = "", service[64] = "", date[32] = "", payload[80] = "";
	int cases = 0;
	FILE *f;

	(void)state;
	assert_non_null(dir);
	snprintf(path, sizeof(path), "%s/sigv4-aws-examples.txt", dir);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char *fields[6], *p = trim(line), *q, *v;
		struct kv params[8], headers[8];
		size_t np = 0, nh = 0;
		char *query, *uri, auth[512], hdrname[64];
		struct sigv4_input in;
		int i;

		if ((v = strip_prefix(p, "#   access key")))
			snprintf(akid, sizeof(akid), "%s", trim(v));
		else if ((v = strip_prefix(p, "#   secret key")))
			snprintf(secret, sizeof(secret), "%s", trim(v));
		else if ((v = strip_prefix(p, "#   host")))
			snprintf(host, sizeof(host), "%s", trim(v));
		else if ((v = strip_prefix(p, "#   x-amz-content-sha256")))
			sscanf(v, " %79s", payload);
		else if ((v = strip_prefix(p, "#   region")))
			assert_int_equal(sscanf(v, " %63[^,], service %63[^,], x-amz-date %31s",
						region, service, date),
					 3);
		if (!*p || *p == '#')
			continue;

		/* method | path | canonical query | extra header | signed headers | signature */
		for (i = 0, q = p; i < 6; i++) {
			char *bar = strchr(q, '|');

			assert_true(i == 5 ? bar == NULL : bar != NULL);
			if (bar)
				*bar = '\0';
			fields[i] = trim(q);
			q = bar ? bar + 1 : NULL;
		}

		/* Rebuild the canonical query from its pairs, so sigv4_canonical_query() is
		 * checked against the documented string too. */
		if (fields[2][0]) {
			char *qs = strdup(fields[2]), *psave = NULL;

			for (q = strtok_r(qs, "&", &psave); q; q = strtok_r(NULL, "&", &psave)) {
				char *eq = strchr(q, '=');

				assert_non_null(eq);
				*eq = '\0';
				params[np].k = strdup(q);
				params[np].v = strdup(eq + 1);
				np++;
			}
			free(qs);
		}
		query = sigv4_canonical_query(params, np);
		assert_string_equal(query, fields[2]);

		headers[nh++] = (struct kv){"x-amz-date", date};
		headers[nh++] = (struct kv){"host", host};
		headers[nh++] = (struct kv){"x-amz-content-sha256", payload};
		if (fields[3][0]) {
			char *colon = strchr(fields[3], ':');

			assert_non_null(colon);
			snprintf(hdrname, sizeof(hdrname), "%.*s", (int)(colon - fields[3]),
				 fields[3]);
			headers[nh++] = (struct kv){hdrname, colon + 1};
		}
		uri = fields[1];
		in = (struct sigv4_input){
		    .method = fields[0],
		    .canonical_uri = uri,
		    .canonical_query = query,
		    .headers = headers,
		    .nheaders = nh,
		    .payload_hash = payload,
		    .amz_date = date,
		    .region = region,
		    .service = service,
		    .access_key = akid,
		    .secret_key = secret,
		};
		assert_int_equal(sigv4_sign(&in, auth, sizeof(auth)), 0);
		{
			char expect[512];

			snprintf(expect, sizeof(expect),
				 "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/aws4_request, "
				 "SignedHeaders=%s, Signature=%s",
				 akid, date, region, service, fields[4], fields[5]);
			assert_string_equal(auth, expect);
		}
		for (size_t k = 0; k < np; k++) {
			free((char *)params[k].k);
			free((char *)params[k].v);
		}
		free(query);
		cases++;
	}
	fclose(f);
	assert_string_equal(akid, "AKIAIOSFODNN7EXAMPLE");
	assert_string_equal(payload, EMPTY_SHA256);
	assert_int_equal(cases, 3);
}

/* The PUT example of the same page: a body, signed with its SHA-256, and two headers more
 * (date, x-amz-storage-class). */
static void test_aws_put_example(void **state)
{
	const char *body = "Welcome to Amazon S3.";
	char hash[65], auth[512];
	struct kv headers[] = {
	    {"date", "Fri, 24 May 2013 00:00:00 GMT"},
	    {"host", "examplebucket.s3.amazonaws.com"},
	    {"x-amz-date", "20130524T000000Z"},
	    {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
	    {"x-amz-content-sha256", hash},
	};
	char *uri = sigv4_uri_encode("/test$file.text", true);
	struct sigv4_input in = {
	    .method = "PUT",
	    .canonical_uri = uri,
	    .canonical_query = "",
	    .headers = headers,
	    .nheaders = sizeof(headers) / sizeof(headers[0]),
	    .payload_hash = hash,
	    .amz_date = "20130524T000000Z",
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key = "AKIAIOSFODNN7EXAMPLE",
	    .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	};

	(void)state;
	assert_non_null(uri);
	assert_string_equal(uri, "/test%24file.text");
	sigv4_sha256_hex(body, strlen(body), hash);
	assert_string_equal(hash,
			    "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
	assert_int_equal(sigv4_sign(&in, auth, sizeof(auth)), 0);
	assert_string_equal(auth,
			    "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1"
			    "/s3/aws4_request, SignedHeaders=date;host;x-amz-content-sha256;"
			    "x-amz-date;x-amz-storage-class, Signature=98ad721746da40c64f1a55b78f"
			    "14c238d841ea1380cd77a1b5971af0ece108bd");
	free(uri);
}

/* ------------------------------------------------------------------------------------------ */
/* 2. botocore */

/* Skip the running test, saying why: the reason goes to the log, and cmocka's skip() makes it a
 * SKIP in meson's count (tests/unit/cmocka_tap.py turns cmocka's TAP line into TAP's skip). */
#define SKIP_TEST(msg)                                                                             \
	do {                                                                                       \
		print_error("# SKIP %s\n", msg);                                                   \
		skip();                                                                            \
	} while (0)

#define MAXP 16

struct bcase {
	char name[128];
	char method[16];
	char scheme[8];
	char *hostname, *region, *akid, *secret, *token, *date, *payload, *path, *url, *creq, *auth;
	char *body; /* NULL: no body */
	size_t body_len;
	unsigned port;
	long long time;
	struct kv params[MAXP], headers[MAXP];
	size_t np, nh;
};

/* Copy @src into the fixed field @dst, which it must fit. */
static void copy_field(char *dst, size_t size, const char *src)
{
	size_t n = strlen(src);

	assert_true(n < size);
	memcpy(dst, src, n + 1);
}

/* Decode the script's hex ('-' is empty). @return a malloc'd NUL-terminated string. */
static char *unhex(const char *s)
{
	size_t n = strcmp(s, "-") == 0 ? 0 : strlen(s);
	char *out = malloc(n / 2 + 1);

	assert_non_null(out);
	assert_int_equal(n % 2, 0);
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;

		assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (char)v;
	}
	out[n / 2] = '\0';
	return out;
}

static void bcase_free(struct bcase *c)
{
	char **s[] = {&c->hostname, &c->region, &c->akid, &c->secret, &c->token, &c->date,
		      &c->payload,  &c->path,	&c->url,  &c->creq,   &c->auth};

	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
		free(*s[i]);
	free(c->body);
	for (size_t i = 0; i < c->np; i++) {
		free((char *)c->params[i].k);
		free((char *)c->params[i].v);
	}
	for (size_t i = 0; i < c->nh; i++) {
		free((char *)c->headers[i].k);
		free((char *)c->headers[i].v);
	}
	memset(c, 0, sizeof(*c));
}

/* Line @n (0-based) of @s, '\n'-separated, into a malloc'd string. */
static char *nth_line(const char *s, int n)
{
	const char *end;

	for (; n > 0; n--) {
		s = strchr(s, '\n');
		assert_non_null(s);
		s++;
	}
	end = strchr(s, '\n');
	return strndup(s, end ? (size_t)(end - s) : strlen(s));
}

static void check_bcase(struct bcase *c)
{
	struct kv headers[MAXP + 4];
	char host[300], date[17], auth[1024];
	char *uri, *query, *want_uri, *want_query;
	size_t nh = 0;
	struct sigv4_input in;
	int r;

	print_message("# botocore case %s\n", c->name);

	/* Path and query, as the S3 backend will build them. */
	uri = sigv4_uri_encode(c->path, true);
	query = sigv4_canonical_query(c->params, c->np);
	assert_non_null(uri);
	assert_non_null(query);
	want_uri = nth_line(c->creq, 1);
	want_query = nth_line(c->creq, 2);
	assert_string_equal(uri, want_uri);
	assert_string_equal(query, want_query);
	/* What is signed is what is sent: the URL botocore built carries the same path. */
	assert_non_null(strstr(c->url, uri));

	/* Host: the port only when it is not the scheme's default (botocore's rule). */
	if (c->port == 0 || (strcmp(c->scheme, "http") == 0 && c->port == 80) ||
	    (strcmp(c->scheme, "https") == 0 && c->port == 443))
		snprintf(host, sizeof(host), "%s", c->hostname);
	else
		snprintf(host, sizeof(host), "%s:%u", c->hostname, c->port);

	sigv4_amz_date((time_t)c->time, date);
	assert_string_equal(date, c->date);

	/* A body is signed with its own hash: what the S3 backend computes for each part. */
	if (c->body) {
		char hash[65];

		sigv4_sha256_hex(c->body, c->body_len, hash);
		assert_string_equal(hash, c->payload);
	}

	/* Deliberately not sorted: the extra headers first, then ours. */
	for (size_t i = 0; i < c->nh; i++)
		headers[nh++] = c->headers[i];
	headers[nh++] = (struct kv){"x-amz-date", date};
	if (c->token[0])
		headers[nh++] = (struct kv){"x-amz-security-token", c->token};
	headers[nh++] = (struct kv){"host", host};
	headers[nh++] = (struct kv){"x-amz-content-sha256", c->payload};

	in = (struct sigv4_input){
	    .method = c->method,
	    .canonical_uri = uri,
	    .canonical_query = query,
	    .headers = headers,
	    .nheaders = nh,
	    .payload_hash = c->payload,
	    .amz_date = date,
	    .region = c->region,
	    .service = "s3",
	    .access_key = c->akid,
	    .secret_key = c->secret,
	};
	r = sigv4_sign(&in, auth, sizeof(auth));
	assert_int_equal(r, 0);
	if (strcmp(auth, c->auth) != 0)
		print_error("# case %s: botocore signed this canonical request:\n%s\n", c->name,
			    c->creq);
	assert_string_equal(auth, c->auth);

	free(want_uri);
	free(want_query);
	free(uri);
	free(query);
}

static void test_botocore(void **state)
{
	const char *src = getenv("TIERFS_SRCDIR");
	char cmd[PATH_MAX + 64], script[PATH_MAX];
	char *line = NULL;
	size_t cap = 0;
	struct bcase c = {0};
	int cases = 0, status;
	bool in_case = false;
	FILE *p;

	(void)state;
	assert_non_null(src);
	snprintf(script, sizeof(script), "%s/tests/unit/sigv4_botocore.py", src);
	if (access("/usr/bin/python3", X_OK) != 0)
		SKIP_TEST("botocore comparison: /usr/bin/python3 is not installed "
			  "(scripts/test installs python3-botocore)");
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s'", script);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (getline(&line, &cap, p) >= 0) {
		char tag[32], a[8192], b[8192];
		int n = sscanf(trim(line), "%31s %8191s %8191s", tag, a, b);

		if (n < 1)
			continue;
		if (strcmp(tag, "case") == 0) {
			assert_int_equal(n, 2);
			assert_false(in_case);
			in_case = true;
			copy_field(c.name, sizeof(c.name), a);
			continue;
		}
		assert_true(in_case);
		if (strcmp(tag, "end") == 0) {
			check_bcase(&c);
			bcase_free(&c);
			in_case = false;
			cases++;
		} else if (strcmp(tag, "param") == 0 || strcmp(tag, "header") == 0) {
			struct kv *kv = tag[0] == 'p' ? &c.params[c.np++] : &c.headers[c.nh++];

			assert_int_equal(n, 3);
			assert_true(c.np <= MAXP && c.nh <= MAXP);
			kv->k = unhex(a);
			kv->v = unhex(b);
		} else {
			assert_int_equal(n, 2);
			if (strcmp(tag, "method") == 0)
				copy_field(c.method, sizeof(c.method), a);
			else if (strcmp(tag, "scheme") == 0)
				copy_field(c.scheme, sizeof(c.scheme), a);
			else if (strcmp(tag, "port") == 0)
				c.port = (unsigned)strtoul(a, NULL, 10);
			else if (strcmp(tag, "time") == 0)
				c.time = strtoll(a, NULL, 10);
			else if (strcmp(tag, "hostname") == 0)
				c.hostname = unhex(a);
			else if (strcmp(tag, "region") == 0)
				c.region = unhex(a);
			else if (strcmp(tag, "akid") == 0)
				c.akid = unhex(a);
			else if (strcmp(tag, "secret") == 0)
				c.secret = unhex(a);
			else if (strcmp(tag, "token") == 0)
				c.token = unhex(a);
			else if (strcmp(tag, "date") == 0)
				c.date = unhex(a);
			else if (strcmp(tag, "payload") == 0)
				c.payload = unhex(a);
			else if (strcmp(tag, "body") == 0)
				c.body = unhex(a), c.body_len = strcmp(a, "-") ? strlen(a) / 2 : 0;
			else if (strcmp(tag, "path") == 0)
				c.path = unhex(a);
			else if (strcmp(tag, "url") == 0)
				c.url = unhex(a);
			else if (strcmp(tag, "creq") == 0)
				c.creq = unhex(a);
			else if (strcmp(tag, "auth") == 0)
				c.auth = unhex(a);
			else
				fail_msg("unknown line '%s' from %s", tag, script);
		}
	}
	free(line);
	status = pclose(p);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		SKIP_TEST("botocore comparison: /usr/bin/python3 cannot import botocore "
			  "(apt-get install python3-botocore)");
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_false(in_case);
	assert_true(cases >= 38);
	print_message("# %d botocore cases match\n", cases);
}

/* ------------------------------------------------------------------------------------------ */
/* 3. unit edges */

static void test_uri_encode_every_byte(void **state)
{
	(void)state;
	for (int c = 1; c < 256; c++) {
		char in[2] = {(char)c, 0}, want[4];
		bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';

		for (int slash = 0; slash < 2; slash++) {
			char *got = sigv4_uri_encode(in, slash);

			if (keep || (slash && c == '/'))
				snprintf(want, sizeof(want), "%c", c);
			else
				snprintf(want, sizeof(want), "%%%02X", c);
			assert_non_null(got);
			assert_string_equal(got, want);
			free(got);
		}
	}
}

static void test_uri_encode_strings(void **state)
{
	static const struct {
		const char *in;
		bool slash;
		const char *out;
	} t[] = {
	    {"", true, ""},
	    {"a b/c~d_e-f.g", true, "a%20b/c~d_e-f.g"},
	    {"a b/c~d_e-f.g", false, "a%20b%2Fc~d_e-f.g"},
	    {"dïr/ø.log", true, "d%C3%AFr/%C3%B8.log"},
	    {"100%+=&?#", true, "100%25%2B%3D%26%3F%23"},
	    {"//a//", true, "//a//"},
	    {"\x7f\x80\xff", true, "%7F%80%FF"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char *got = sigv4_uri_encode(t[i].in, t[i].slash);

		assert_non_null(got);
		assert_string_equal(got, t[i].out);
		free(got);
	}
}

static void check_query(const struct kv *p, size_t n, const char *want)
{
	char *got = sigv4_canonical_query(p, n);

	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void test_canonical_query(void **state)
{
	(void)state;
	check_query(NULL, 0, "");
	check_query((struct kv[]){{"lifecycle", ""}}, 1, "lifecycle=");
	check_query((struct kv[]){{"lifecycle", NULL}}, 1, "lifecycle=");
	/* Sorted by encoded name (bytewise: 'B' < 'a'), then by encoded value. */
	check_query((struct kv[]){{"a", "2"}, {"B", "x"}, {"a", "1"}, {"a", ""}}, 4,
		    "B=x&a=&a=1&a=2");
	check_query((struct kv[]){{"prefix", "dïr/a b"}, {"list-type", "2"}, {"delimiter", "/"}}, 3,
		    "delimiter=%2F&list-type=2&prefix=d%C3%AFr%2Fa%20b");
	check_query((struct kv[]){{"continuation-token", "1/a+b=c=="}}, 1,
		    "continuation-token=1%2Fa%2Bb%3Dc%3D%3D");
	/* Encoding decides the order: "a%20" (from "a ") sorts before "a-". */
	check_query((struct kv[]){{"a-", "1"}, {"a ", "2"}}, 2, "a%20=2&a-=1");
}

static void test_amz_date(void **state)
{
	char d[17];

	(void)state;
	sigv4_amz_date(0, d);
	assert_string_equal(d, "19700101T000000Z");
	sigv4_amz_date(1369353600, d);
	assert_string_equal(d, "20130524T000000Z");
	sigv4_amz_date(1709251199, d);
	assert_string_equal(d, "20240229T235959Z");
	sigv4_amz_date(253402300799LL, d);
	assert_string_equal(d, "99991231T235959Z");
	sigv4_amz_date(253402300800LL, d); /* year 10000: no fixed-width form */
	assert_string_equal(d, "");
	sigv4_amz_date(-1, d);
	assert_string_equal(d, "19691231T235959Z");
}

static void test_sha256_hex(void **state)
{
	char h[65];

	(void)state;
	sigv4_sha256_hex("", 0, h);
	assert_string_equal(h, EMPTY_SHA256);
	sigv4_sha256_hex("abc", 3, h);
	assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	/* Length, not NUL: embedded NUL bytes count. */
	sigv4_sha256_hex("a\0b", 3, h);
	assert_string_not_equal(h,
				"ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb");
}

/* The first AWS example, as a struct the remaining tests vary. */
static struct sigv4_input example(struct kv *h)
{
	h[0] = (struct kv){"host", "examplebucket.s3.amazonaws.com"};
	h[1] = (struct kv){"range", "bytes=0-9"};
	h[2] = (struct kv){"x-amz-content-sha256", EMPTY_SHA256};
	h[3] = (struct kv){"x-amz-date", "20130524T000000Z"};
	return (struct sigv4_input){
	    .method = "GET",
	    .canonical_uri = "/test.txt",
	    .canonical_query = "",
	    .headers = h,
	    .nheaders = 4,
	    .payload_hash = EMPTY_SHA256,
	    .amz_date = "20130524T000000Z",
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key = "AKIAIOSFODNN7EXAMPLE",
	    .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	};
}

#define EXAMPLE_SIG "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

static void test_sign_enospc(void **state)
{
	struct kv h[4];
	struct sigv4_input in = example(h);
	char buf[512], small[512];
	size_t need;

	(void)state;
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), 0);
	assert_string_equal(sig_of(buf), EXAMPLE_SIG);
	need = strlen(buf) + 1;
	memset(small, 'x', sizeof(small));
	assert_int_equal(sigv4_sign(&in, small, need - 1), -ENOSPC);
	assert_int_equal(small[0], 'x'); /* written only on success */
	assert_int_equal(sigv4_sign(&in, small, 0), -ENOSPC);
	assert_int_equal(sigv4_sign(&in, small, need), 0);
	assert_string_equal(small, buf);
}

static void test_sign_bad_input(void **state)
{
	struct kv h[4];
	struct sigv4_input in;
	char buf[512];

	(void)state;
	in = example(h);
	in.amz_date = ""; /* what sigv4_amz_date() leaves for an unrepresentable time */
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), -EINVAL);
	in = example(h);
	in.access_key = NULL;
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), -EINVAL);
	in = example(h);
	h[1].k = "";
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), -EINVAL);
}

static void test_sign_header_folding(void **state)
{
	struct kv h[4];
	struct sigv4_input in;
	char buf[512];

	(void)state;
	/* Same signature whatever the order, the case of names, or the blanks around and
	 * inside values. */
	in = example(h);
	h[0] = (struct kv){"x-amz-date", "  20130524T000000Z\t"};
	h[1] = (struct kv){"Range", "\tbytes=0-9  "};
	h[2] = (struct kv){"HOST", " examplebucket.s3.amazonaws.com "};
	h[3] = (struct kv){"X-Amz-Content-SHA256", EMPTY_SHA256};
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), 0);
	assert_string_equal(sig_of(buf), EXAMPLE_SIG);
	assert_non_null(strstr(buf, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"));

	/* Inner runs fold to one space: "a  \t b" signs like "a b", and unlike "ab". */
	{
		struct kv h2[5];
		char a[512], b[512], c[512];

		in = example(h2);
		h2[4] = (struct kv){"x-amz-meta-x", "a  \t b"};
		in.nheaders = 5;
		assert_int_equal(sigv4_sign(&in, a, sizeof(a)), 0);
		h2[4].v = "a b";
		assert_int_equal(sigv4_sign(&in, b, sizeof(b)), 0);
		h2[4].v = "ab";
		assert_int_equal(sigv4_sign(&in, c, sizeof(c)), 0);
		assert_string_equal(a, b);
		assert_string_not_equal(a, c);
	}
}

static void test_sign_secret_not_in_output(void **state)
{
	struct kv h[4];
	struct sigv4_input in = example(h);
	char buf[512];

	(void)state;
	assert_int_equal(sigv4_sign(&in, buf, sizeof(buf)), 0);
	assert_null(strstr(buf, in.secret_key));
	assert_null(strstr(buf, "EXAMPLEKEY"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_aws_examples),
	    cmocka_unit_test(test_aws_put_example),
	    cmocka_unit_test(test_botocore),
	    cmocka_unit_test(test_uri_encode_every_byte),
	    cmocka_unit_test(test_uri_encode_strings),
	    cmocka_unit_test(test_canonical_query),
	    cmocka_unit_test(test_amz_date),
	    cmocka_unit_test(test_sha256_hex),
	    cmocka_unit_test(test_sign_enospc),
	    cmocka_unit_test(test_sign_bad_input),
	    cmocka_unit_test(test_sign_header_folding),
	    cmocka_unit_test(test_sign_secret_not_in_output),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
