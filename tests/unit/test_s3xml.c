/*
 * test_s3xml.c - ListObjectsV2 pages, S3 error documents and the multipart upload documents
 * (CreateMultipartUpload's and CompleteMultipartUpload's answers, Complete's body) through
 * s3xml.c.
 *
 * Documents are written out in full as S3 (and s3rver) send them. Each listing test collects
 * the callback's calls into a small array and checks them in order; a page that must fail is
 * also checked to have reported nothing, and every strict prefix of a valid page must fail.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "s3xml.h"

#define MAXE 16

struct got {
	struct {
		char key[2048];
		size_t keylen;
		char etag[128];
		bool is_prefix;
		uint64_t size;
		int64_t mtime;
	} e[MAXE];
	int n;
	int stop_after; /* return -ECANCELED after this many calls; 0 = never */
};

static int collect(void *arg, const char *key, size_t keylen, bool is_prefix, uint64_t size,
		   int64_t mtime, const char *etag)
{
	struct got *g = arg;

	assert_true(g->n < MAXE);
	assert_true(keylen < sizeof(g->e[0].key));
	assert_true(strlen(key) <= keylen);
	memcpy(g->e[g->n].key, key, keylen + 1);
	g->e[g->n].keylen = keylen;
	assert_true(strlen(etag) < sizeof(g->e[0].etag));
	strcpy(g->e[g->n].etag, etag);
	g->e[g->n].is_prefix = is_prefix;
	g->e[g->n].size = size;
	g->e[g->n].mtime = mtime;
	g->n++;
	if (g->stop_after && g->n >= g->stop_after)
		return -ECANCELED;
	return 0;
}

static int parse(const char *doc, struct got *g, char **token)
{
	memset(g->e, 0, sizeof(g->e));
	g->n = 0;
	return s3xml_parse_list(doc, strlen(doc), collect, g, token);
}

/* A listing that must be refused, reporting nothing and no token. */
static void expect_eio(const char *doc)
{
	struct got g = {0};
	char *token = (char *)0x1;

	assert_int_equal(parse(doc, &g, &token), -EIO);
	assert_int_equal(g.n, 0);
	assert_ptr_equal(token, (char *)0x1); /* not written on failure */
}

#define HEAD                                                                                       \
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"                                             \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

/* A page as AWS sends it. */
static const char page1[] =
    HEAD "<Name>bucket</Name><Prefix>logs/</Prefix><KeyCount>2</KeyCount>"
	 "<MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated>\n"
	 "  <Contents>\n"
	 "    <Key>logs/a b.log</Key>\n"
	 "    <LastModified>2013-09-17T18:07:53.000Z</LastModified>\n"
	 "    <ETag>&quot;599bab3ed2c697f1d26842727561fd94&quot;</ETag>\n"
	 "    <Size>1234</Size>\n"
	 "    <Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>"
	 "<DisplayName>webfile</DisplayName></Owner>\n"
	 "    <StorageClass>STANDARD</StorageClass>\n"
	 "  </Contents>\n"
	 "  <Contents><Key>logs/empty</Key><LastModified>2024-02-29T23:59:59Z</LastModified>"
	 "<ETag>\"d41d8cd98f00b204e9800998ecf8427e\"</ETag><Size>0</Size>"
	 "<StorageClass>STANDARD</StorageClass></Contents>\n"
	 "</ListBucketResult>\n";

static void test_single_page(void **state)
{
	struct got g = {0};
	char *token = (char *)0x1;

	(void)state;
	assert_int_equal(parse(page1, &g, &token), 0);
	assert_null(token);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.e[0].key, "logs/a b.log");
	assert_false(g.e[0].is_prefix);
	assert_int_equal(g.e[0].size, 1234);
	assert_int_equal(g.e[0].mtime, 1379441273);
	assert_string_equal(g.e[0].etag, "\"599bab3ed2c697f1d26842727561fd94\"");
	assert_string_equal(g.e[1].key, "logs/empty");
	assert_int_equal(g.e[1].size, 0);
	assert_int_equal(g.e[1].mtime, 1709251199);
	assert_string_equal(g.e[1].etag, "\"d41d8cd98f00b204e9800998ecf8427e\"");

	/* No token wanted: fine too. */
	assert_int_equal(s3xml_parse_list(page1, strlen(page1), collect, &g, NULL), 0);
}

static void test_every_prefix_fails(void **state)
{
	const char *end = strstr(page1, "</ListBucketResult>") + strlen("</ListBucketResult>");
	size_t full = (size_t)(end - page1);

	(void)state;
	for (size_t len = 0; len < full; len++) {
		struct got g = {0};
		char *token = NULL;

		assert_int_equal(s3xml_parse_list(page1, len, collect, &g, &token), -EIO);
		assert_int_equal(g.n, 0);
	}
}

static void test_pagination(void **state)
{
	static const char p1[] =
	    HEAD "<Name>bucket</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1</MaxKeys>"
		 "<IsTruncated>true</IsTruncated>"
		 "<Contents><Key>a</Key><Size>1</Size></Contents>"
		 "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
		 "</NextContinuationToken></ListBucketResult>";
	/* The token may come before the entries, and may hold anything XML can carry. */
	static const char p2[] =
	    HEAD "<IsTruncated>true</IsTruncated><ContinuationToken>old</ContinuationToken>"
		 "<NextContinuationToken>a/b+c=d&lt;e&amp;f g%20h&#x7e;</NextContinuationToken>"
		 "<Contents><Key>b</Key><Size>2</Size></Contents></ListBucketResult>";
	static const char p3[] = HEAD "<Contents><Key>c</Key><Size>3</Size></Contents>"
				      "<IsTruncated>false</IsTruncated>"
				      "<NextContinuationToken>ignored</NextContinuationToken>"
				      "</ListBucketResult>";
	struct got g = {0};
	char *token = NULL;

	(void)state;
	assert_int_equal(parse(p1, &g, &token), 0);
	assert_string_equal(token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	assert_int_equal(g.n, 1);
	free(token);

	assert_int_equal(parse(p2, &g, &token), 0);
	assert_string_equal(token, "a/b+c=d<e&f g%20h~");
	assert_int_equal(g.n, 1);
	assert_string_equal(g.e[0].key, "b");
	free(token);

	token = (char *)0x1;
	assert_int_equal(parse(p3, &g, &token), 0);
	assert_null(token);
	assert_int_equal(g.n, 1);
}

static void test_truncated_flag(void **state)
{
	(void)state;
	/* Truncated without (or with an empty) token: the listing cannot go on. */
	expect_eio(HEAD "<IsTruncated>true</IsTruncated>"
			"<Contents><Key>a</Key><Size>1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>"
			"</NextContinuationToken></ListBucketResult>");
	expect_eio(HEAD "<IsTruncated>maybe</IsTruncated></ListBucketResult>");
	expect_eio(HEAD "<IsTruncated>TRUE</IsTruncated><NextContinuationToken>t"
			"</NextContinuationToken></ListBucketResult>");
	expect_eio(HEAD "<IsTruncated>false</IsTruncated><IsTruncated>true</IsTruncated>"
			"</ListBucketResult>");
	expect_eio(HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>a"
			"</NextContinuationToken><NextContinuationToken>b"
			"</NextContinuationToken></ListBucketResult>");
	/* White space around the flag is only formatting. */
	{
		struct got g = {0};
		char *token = NULL;

		assert_int_equal(parse(HEAD "<IsTruncated>\n true\n</IsTruncated>"
					    "<NextContinuationToken>t</NextContinuationToken>"
					    "</ListBucketResult>",
				       &g, &token),
				 0);
		assert_string_equal(token, "t");
		free(token);
	}
}

static void test_common_prefixes(void **state)
{
	static const char doc[] =
	    HEAD "<Name>bucket</Name><Prefix>logs/</Prefix><Delimiter>/</Delimiter>"
		 "<IsTruncated>false</IsTruncated>"
		 "<Contents><Key>logs/x</Key><Size>5</Size></Contents>"
		 "<CommonPrefixes><Prefix>logs/2023/</Prefix></CommonPrefixes>"
		 "<CommonPrefixes><Prefix>logs/d&#xEF;r &amp; co/</Prefix></CommonPrefixes>"
		 "</ListBucketResult>";
	struct got g = {0};
	char *token = NULL;

	(void)state;
	assert_int_equal(parse(doc, &g, &token), 0);
	assert_null(token);
	assert_int_equal(g.n, 3);
	assert_string_equal(g.e[0].key, "logs/x");
	assert_false(g.e[0].is_prefix);
	assert_string_equal(g.e[1].key, "logs/2023/");
	assert_true(g.e[1].is_prefix);
	assert_int_equal(g.e[1].size, 0);
	assert_int_equal(g.e[1].mtime, INT64_MIN);
	assert_string_equal(g.e[1].etag, "");
	assert_string_equal(g.e[2].key, "logs/d\xc3\xafr & co/");
	assert_true(g.e[2].is_prefix);

	expect_eio(HEAD "<CommonPrefixes></CommonPrefixes></ListBucketResult>");
	expect_eio(HEAD "<CommonPrefixes><Prefix></Prefix></CommonPrefixes></ListBucketResult>");
	expect_eio(HEAD "<CommonPrefixes><Prefix>a/</Prefix><Prefix>b/</Prefix></CommonPrefixes>"
			"</ListBucketResult>");
}

static void test_prefix_repeated_across_pages(void **state)
{
	/* s3rver repeats CommonPrefixes on every page; each page reports what it holds and the
	 * caller removes duplicates. */
	static const char p1[] =
	    HEAD "<IsTruncated>true</IsTruncated><NextContinuationToken>t1</NextContinuationToken>"
		 "<Contents><Key>a.log</Key><Size>1</Size></Contents>"
		 "<CommonPrefixes><Prefix>sub/</Prefix></CommonPrefixes></ListBucketResult>";
	static const char p2[] =
	    HEAD "<IsTruncated>false</IsTruncated>"
		 "<Contents><Key>b.log</Key><Size>2</Size></Contents>"
		 "<CommonPrefixes><Prefix>sub/</Prefix></CommonPrefixes></ListBucketResult>";
	struct got g = {0};
	char *token = NULL;

	(void)state;
	assert_int_equal(parse(p1, &g, &token), 0);
	assert_string_equal(token, "t1");
	free(token);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.e[1].key, "sub/");
	assert_true(g.e[1].is_prefix);

	assert_int_equal(parse(p2, &g, &token), 0);
	assert_null(token);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.e[0].key, "b.log");
	assert_string_equal(g.e[1].key, "sub/");
	assert_true(g.e[1].is_prefix);
}

static void test_entities(void **state)
{
	static const char doc[] =
	    HEAD "<Contents><Key>a &amp; b &lt;c&gt; &#x20AC;&#8364; &quot;q&quot; &apos;s"
		 "<![CDATA[<raw>&amp;]]></Key><Size>7</Size></Contents>"
		 "<Contents><Key>  spaced key  </Key><Size>1</Size></Contents>"
		 "</ListBucketResult>";
	struct got g = {0};

	(void)state;
	assert_int_equal(parse(doc, &g, NULL), 0);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.e[0].key, "a & b <c> \xe2\x82\xac\xe2\x82\xac \"q\" 's<raw>&amp;");
	assert_string_equal(g.e[1].key, "  spaced key  "); /* keys are never trimmed */

	/* Undefined entity, and a DOCTYPE (the door to entity expansion): refused. */
	expect_eio(HEAD "<Contents><Key>&nbsp;</Key><Size>1</Size></Contents></ListBucketResult>");
	expect_eio("<?xml version=\"1.0\"?>\n"
		   "<!DOCTYPE ListBucketResult [<!ENTITY a \"aaaaaaaaaa\">"
		   "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]>"
		   "<ListBucketResult><Contents><Key>&b;</Key><Size>1</Size></Contents>"
		   "</ListBucketResult>");
	expect_eio("<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><ListBucketResult/>");
}

static void test_empty_listing(void **state)
{
	struct got g = {0};
	char *token = (char *)0x1;

	(void)state;
	assert_int_equal(parse(HEAD "<Name>bucket</Name><Prefix>nothing/</Prefix>"
				    "<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
				    "<IsTruncated>false</IsTruncated></ListBucketResult>",
			       &g, &token),
			 0);
	assert_int_equal(g.n, 0);
	assert_null(token);
	assert_int_equal(parse("<ListBucketResult/>", &g, &token), 0);
	assert_int_equal(g.n, 0);
}

static void test_malformed(void **state)
{
	(void)state;
	expect_eio("");
	expect_eio("not xml at all");
	expect_eio("<ListBucketResult>");
	expect_eio("<ListBucketResult><Contents></ListBucketResult>");
	expect_eio("<ListBucketResult></ListBucketResult><ListBucketResult/>");
	expect_eio("<ListBucketResult></ListBucketResult>junk");
	expect_eio("<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>");
	expect_eio("\x89PNG\r\n\x1a\n");
	/* The right document type only: a 200 carrying an <Error> is not a listing. */
	expect_eio("<Error><Code>InternalError</Code></Error>");
	expect_eio("<ListAllMyBucketsResult/>");
	/* An element where text was expected. */
	expect_eio(HEAD "<Contents><Key>a<b/>c</Key><Size>1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD
		   "<Contents><Key>a</Key><Size><n>1</n></Size></Contents></ListBucketResult>");
	{
		/* Length, not NUL: an embedded NUL is not XML. */
		static const char nul[] = "<ListBucketResult>\0</ListBucketResult>";
		struct got g = {0};

		assert_int_equal(s3xml_parse_list(nul, sizeof(nul) - 1, collect, &g, NULL), -EIO);
	}
}

static void test_sizes(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse(HEAD "<Contents><Key>a</Key><Size>18446744073709551615</Size>"
				    "</Contents><Contents><Key>b</Key><Size>\n 0042 \n</Size>"
				    "</Contents></ListBucketResult>",
			       &g, NULL),
			 0);
	assert_int_equal(g.n, 2);
	assert_true(g.e[0].size == UINT64_MAX);
	assert_int_equal(g.e[1].size, 42);

	expect_eio(HEAD "<Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
			"</ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>99999999999999999999999</Size></Contents>"
			"</ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>+1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>1.5</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>1e3</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>0x10</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>1 2</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size></Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key></Contents></ListBucketResult>");
}

static void test_missing_and_repeated_fields(void **state)
{
	(void)state;
	expect_eio(HEAD "<Contents><Size>1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"
			"</ListBucketResult>");
	expect_eio(HEAD "<Contents><Key>a</Key><Size>1</Size><Size>2</Size></Contents>"
			"</ListBucketResult>");
	/* A bad entry anywhere spoils the page, entries before it included. */
	expect_eio(HEAD "<Contents><Key>ok</Key><Size>1</Size></Contents>"
			"<Contents><Key>bad</Key><Size>-1</Size></Contents></ListBucketResult>");
}

static void test_optional_fields(void **state)
{
	struct got g = {0};

	(void)state;
	assert_int_equal(parse(HEAD "<Contents><Key>a</Key><Size>1</Size></Contents>"
				    "<Contents><Key>b</Key><Size>1</Size>"
				    "<LastModified>yesterday</LastModified></Contents>"
				    "<Contents><Key>c</Key><Size>1</Size>"
				    "<LastModified>2024-01-02T03:04:05+02:00</LastModified>"
				    "<ETag></ETag></Contents></ListBucketResult>",
			       &g, NULL),
			 0);
	assert_int_equal(g.n, 3);
	assert_int_equal(g.e[0].mtime, INT64_MIN);
	assert_string_equal(g.e[0].etag, "");
	assert_int_equal(g.e[1].mtime, INT64_MIN);
	assert_int_equal(g.e[2].mtime, 1704164645 - 7200);
	assert_string_equal(g.e[2].etag, "");
}

static void test_wrong_depth(void **state)
{
	static const char doc[] =
	    HEAD "<Prefix>echo/</Prefix><Key>top-level-key</Key><Size>9</Size>"
		 "<Contents><Key>real</Key><Owner><Key>owner-key</Key><Size>x</Size></Owner>"
		 "<Size>3</Size><Extra><Contents><Key>deep</Key></Contents></Extra></Contents>"
		 "<Wrapper><Contents><Key>wrapped</Key><Size>1</Size></Contents>"
		 "<CommonPrefixes><Prefix>wrapped/</Prefix></CommonPrefixes></Wrapper>"
		 "<CommonPrefixes><Key>nope</Key><Prefix>p/</Prefix>"
		 "<Deep><Prefix>q/</Prefix></Deep></CommonPrefixes>"
		 "<a><b><c><d><e><f><g><h><i><j><Contents><Key>k</Key></Contents></j></i></h></g>"
		 "</f></e></d></c></b></a>"
		 "</ListBucketResult>";
	struct got g = {0};

	(void)state;
	assert_int_equal(parse(doc, &g, NULL), 0);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.e[0].key, "real");
	assert_int_equal(g.e[0].size, 3);
	assert_string_equal(g.e[1].key, "p/");
	assert_true(g.e[1].is_prefix);
}

static void test_long_values(void **state)
{
	size_t keylen = 1024, big = 70 * 1024;
	char *doc = malloc(big + 256), *p;
	struct got g = {0};

	(void)state;
	assert_non_null(doc);
	/* A 1024-byte key, the S3 maximum. */
	p = doc + sprintf(doc, "<ListBucketResult><Contents><Key>");
	memset(p, 'k', keylen);
	p += keylen;
	sprintf(p, "</Key><Size>1</Size></Contents></ListBucketResult>");
	assert_int_equal(parse(doc, &g, NULL), 0);
	assert_int_equal(g.n, 1);
	assert_int_equal(strlen(g.e[0].key), keylen);

	/* Past the 64 KiB cap: refused, even if split over many expat callbacks. */
	p = doc + sprintf(doc, "<ListBucketResult><Contents><Key>");
	for (size_t i = 0; i < big; i++)
		*p++ = i % 100 == 0 ? '\n' : 'k';
	sprintf(p, "</Key><Size>1</Size></Contents></ListBucketResult>");
	expect_eio(doc);

	/* Long text where we do not collect is fine. */
	p = doc + sprintf(doc, "<ListBucketResult><Owner>");
	memset(p, 'o', big);
	p += big;
	sprintf(p, "</Owner></ListBucketResult>");
	assert_int_equal(parse(doc, &g, NULL), 0);
	free(doc);
}

static void test_callback_stops(void **state)
{
	struct got g = {.stop_after = 1};
	char *token = (char *)0x1;

	(void)state;
	assert_int_equal(parse(page1, &g, &token), -ECANCELED);
	assert_int_equal(g.n, 1);
	assert_ptr_equal(token, (char *)0x1);
}

/* ------------------------------------------------------------------------------------------ */
/* error documents */

static void check_error(const char *doc, const char *code, const char *msg)
{
	char c[64], m[256];

	assert_int_equal(s3xml_parse_error(doc, strlen(doc), c, sizeof(c), m, sizeof(m)), 0);
	assert_string_equal(c, code);
	assert_string_equal(m, msg);
}

static void test_errors(void **state)
{
	(void)state;
	check_error("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		    "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not "
		    "exist</Message><BucketName>nope</BucketName><RequestId>4442587FB7D0A2F9"
		    "</RequestId><HostId>hid</HostId></Error>",
		    "NoSuchBucket", "The specified bucket does not exist");
	check_error("<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
		    "<RequestId>656c76696e6727732072657175657374</RequestId>"
		    "<HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>"
		    "</Error>",
		    "AccessDenied", "Access Denied");
	check_error("<Error>\n  <Code>SlowDown</Code>\n  <Message>Please reduce your request "
		    "rate.</Message>\n</Error>\n",
		    "SlowDown", "Please reduce your request rate.");
	/* Entities decoded, no Message at all, a nested Code ignored. */
	check_error("<Error><Details><Code>Inner</Code></Details><Code>InvalidArgument</Code>"
		    "<Message>a &lt; b &amp; &#x20AC;</Message></Error>",
		    "InvalidArgument", "a < b & \xe2\x82\xac");
	check_error("<Error><Code>InternalError</Code></Error>", "InternalError", "");
}

static void test_error_truncation(void **state)
{
	static const char doc[] = "<Error><Code>NoSuchBucket</Code><Message>The specified bucket "
				  "does not exist</Message></Error>";
	char c[5], m[8];

	(void)state;
	assert_int_equal(s3xml_parse_error(doc, strlen(doc), c, sizeof(c), m, sizeof(m)), 0);
	assert_string_equal(c, "NoSu");
	assert_string_equal(m, "The spe");
	/* Nowhere to write is allowed too. */
	assert_int_equal(s3xml_parse_error(doc, strlen(doc), NULL, 0, NULL, 0), 0);
}

static void test_not_errors(void **state)
{
	static const char *const bad[] = {
	    "",
	    "<html><body>502 Bad Gateway</body></html>",
	    "<ListBucketResult/>",
	    "<Error><Code>NoSuchKey</Code>",
	    "<Error><Message>no code</Message></Error>",
	    "<Error><Code></Code></Error>",
	    "<Error><Code>A</Code><Code>B</Code></Error>",
	    "<Error><Code>A<b/></Code></Error>",
	    "<!DOCTYPE Error><Error><Code>A</Code></Error>",
	    "Service Unavailable",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char c[16] = "untouched", m[16] = "untouched";

		assert_int_equal(
		    s3xml_parse_error(bad[i], strlen(bad[i]), c, sizeof(c), m, sizeof(m)), -EINVAL);
		assert_string_equal(c, "untouched");
		assert_string_equal(m, "untouched");
	}
}

/* ------------------------------------------------------------------------------------------ */
/* times */

static void test_time(void **state)
{
	static const struct {
		const char *s;
		int64_t t;
	} good[] = {
	    {"2013-09-17T18:07:53.000Z", 1379441273},
	    {"2013-09-17T18:07:53Z", 1379441273},
	    {"2013-09-17T18:07:53.123456789Z", 1379441273},
	    {"1970-01-01T00:00:00Z", 0},
	    {"1969-12-31T23:59:59.999Z", -1},
	    {"2024-02-29T23:59:59Z", 1709251199},
	    {"2000-02-29T00:00:00Z", 951782400},
	    {"2024-01-02T03:04:05+00:00", 1704164645},
	    {"2024-01-02T05:04:05+02:00", 1704164645},
	    {"2024-01-02T01:34:05-01:30", 1704164645},
	    {"2038-01-19T03:14:08Z", 2147483648LL},
	    {"9999-12-31T23:59:59Z", 253402300799LL},
	};
	static const char *const bad[] = {
	    "",
	    "2013-09-17T18:07:53",
	    "2013-09-17 18:07:53Z",
	    "2013-09-17T18:07:53.Z",
	    "2013-09-17T18:07:53.000ZZ",
	    "2013-09-17T18:07:53.000Z ",
	    " 2013-09-17T18:07:53Z",
	    "2013-9-17T18:07:53Z",
	    "2013-13-17T18:07:53Z",
	    "2013-00-17T18:07:53Z",
	    "2013-02-29T00:00:00Z",
	    "1900-02-29T00:00:00Z",
	    "2013-04-31T00:00:00Z",
	    "2013-09-00T00:00:00Z",
	    "2013-09-17T24:00:00Z",
	    "2013-09-17T18:60:00Z",
	    "2013-09-17T18:07:61Z",
	    "2013-09-17T18:07:53+0200",
	    "2013-09-17T18:07:53+24:00",
	    "+2013-09-17T18:07:53Z",
	    "Tue, 17 Sep 2013 18:07:53 GMT",
	};
	int64_t t;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		t = 0;
		assert_int_equal(s3xml_parse_time(good[i].s, &t), 0);
		assert_int_equal(t, good[i].t);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		t = 12345;
		if (s3xml_parse_time(bad[i], &t) != -EINVAL)
			fail_msg("accepted '%s'", bad[i]);
		assert_int_equal(t, 12345);
	}
}

/* encoding-type=url: keys and prefixes come percent-encoded ('+' for a space) and are decoded;
 * a key that S3 would otherwise send as "&#x1;" (which expat refuses, failing the page) is
 * harmless; a decoded NUL shows in keylen; a page without EncodingType is verbatim. */
static void test_url_encoded_keys(void **state)
{
	static const char page[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
	    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	    "<Name>b</Name><Prefix>p%2F</Prefix><EncodingType>url</EncodingType>"
	    "<KeyCount>6</KeyCount><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>p/ctl%01char</Key><Size>1</Size></Contents>"
	    "<Contents><Key>p/sp+ace%2Bplus</Key><Size>2</Size></Contents>"
	    "<Contents><Key>p/nul%00x</Key><Size>3</Size></Contents>"
	    "<Contents><Key>p/%E2%82%AC.log</Key><Size>4</Size></Contents>"
	    "<Contents><Key>p/odd%zz%4</Key><Size>5</Size></Contents>"
	    "<CommonPrefixes><Prefix>p/dir%20x%2F</Prefix></CommonPrefixes>"
	    "</ListBucketResult>";
	static const char verbatim[] =
	    "<ListBucketResult><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>a%20b+c</Key><Size>1</Size></Contents></ListBucketResult>";
	static const char unencoded_ctl[] =
	    "<ListBucketResult><IsTruncated>false</IsTruncated>"
	    "<Contents><Key>a&#x1;b</Key><Size>1</Size></Contents></ListBucketResult>";
	static struct got g; /* stop_after 0: never stop */

	(void)state;
	assert_int_equal(parse(page, &g, NULL), 0);
	assert_int_equal(g.n, 6);
	assert_string_equal(g.e[0].key, "p/ctl\001char");
	assert_int_equal(g.e[0].keylen, 10);
	assert_string_equal(g.e[1].key, "p/sp ace+plus");
	assert_int_equal(g.e[1].size, 2);
	assert_int_equal(g.e[2].keylen, 7); /* "p/nul", NUL, "x" */
	assert_int_equal(strlen(g.e[2].key), 5);
	assert_memory_equal(g.e[2].key, "p/nul\0x", 8);
	assert_string_equal(g.e[3].key, "p/\xe2\x82\xac.log");
	assert_string_equal(g.e[4].key, "p/odd%zz%4"); /* not an escape: kept */
	assert_true(g.e[5].is_prefix);
	assert_string_equal(g.e[5].key, "p/dir x/");
	assert_int_equal(g.e[5].keylen, 8);

	assert_int_equal(parse(verbatim, &g, NULL), 0);
	assert_int_equal(g.n, 1);
	assert_string_equal(g.e[0].key, "a%20b+c");
	assert_int_equal(g.e[0].keylen, 7);

	/* without encoding-type, S3 sends an XML 1.0 character reference expat must refuse: the
	 * reason tierfs asks for url encoding */
	assert_int_equal(parse(unencoded_ctl, &g, NULL), -EIO);
	assert_int_equal(g.n, 0);
}

/* ---- multipart uploads ---------------------------------------------------------------------- */

static void test_initiate(void **state)
{
	static const char doc[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	    "<Bucket>example-bucket</Bucket><Key>example-object</Key>\n"
	    "<UploadId> VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA--\n"
	    "</UploadId></InitiateMultipartUploadResult>";
	static const char *const bad[] = {
	    "",
	    "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>",
	    "<InitiateMultipartUploadResult><UploadId> </UploadId></InitiateMultipartUploadResult>",
	    "<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId>"
	    "</InitiateMultipartUploadResult>",
	    "<Error><Code>AccessDenied</Code></Error>",
	    "<InitiateMultipartUploadResult><UploadId>a<b/></UploadId>"
	    "</InitiateMultipartUploadResult>",
	    "<InitiateMultipartUploadResult><UploadId>abc</UploadId>",
	};
	char *id = (char *)0x1;

	(void)state;
	assert_int_equal(s3xml_parse_initiate(doc, strlen(doc), &id), 0);
	assert_string_equal(id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA--");
	free(id);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		id = (char *)0x1;
		assert_int_equal(s3xml_parse_initiate(bad[i], strlen(bad[i]), &id), -EIO);
		assert_ptr_equal(id, (char *)0x1); /* written only on success */
	}
	assert_int_equal(s3xml_parse_initiate(NULL, 0, &id), -EIO);
}

static void test_complete_answer(void **state)
{
	static const char ok[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<CompleteMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
	    "<Location>http://Example-Bucket.s3.amazonaws.com/Example-Object</Location>\n"
	    "<Bucket>Example-Bucket</Bucket><Key>Example-Object</Key>\n"
	    "<ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>\n"
	    "</CompleteMultipartUploadResult>";
	/* S3 sent 200, then failed: the body is an <Error> (white space first, as S3 pads the
	 * body while it works) */
	static const char err200[] =
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n\n"
	    "<Error><Code>InternalError</Code><Message>We encountered an internal error. Please "
	    "try again.</Message><RequestId>656c76696e6727732072657175657374</RequestId>"
	    "<HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId></Error>";
	static const char *const bad[] = {
	    "",
	    "<CompleteMultipartUploadResult><ETag>\"a\"</ETag><ETag>\"b\"</ETag>"
	    "</CompleteMultipartUploadResult>",
	    "<ListBucketResult><ETag>\"a\"</ETag></ListBucketResult>",
	    "<CompleteMultipartUploadResult><ETag>\"a\"</ETag>",
	    "<Error><Message>no code</Message></Error>",
	};
	char etag[128], code[16];

	(void)state;
	assert_int_equal(
	    s3xml_parse_complete(ok, strlen(ok), etag, sizeof(etag), code, sizeof(code)), 0);
	assert_string_equal(etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
	assert_string_equal(code, "");
	assert_int_equal(
	    s3xml_parse_complete(err200, strlen(err200), etag, sizeof(etag), code, sizeof(code)),
	    -EIO);
	assert_string_equal(code, "InternalError");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strcpy(code, "x");
		assert_int_equal(s3xml_parse_complete(bad[i], strlen(bad[i]), etag, sizeof(etag),
						      code, sizeof(code)),
				 -EIO);
		assert_string_equal(code, "");
	}
	/* a result without an ETag, or with an empty one (Ceph RGW 16), is a success: "" */
	static const char *const no_etag[] = {
	    "<CompleteMultipartUploadResult><Key>k</Key></CompleteMultipartUploadResult>",
	    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUploadResult "
	    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Location>tierfs-test/m.bin"
	    "</Location><Bucket>tierfs-test</Bucket><Key>m.bin</Key><ETag></ETag>"
	    "</CompleteMultipartUploadResult>",
	};
	for (size_t i = 0; i < sizeof(no_etag) / sizeof(no_etag[0]); i++) {
		strcpy(etag, "x");
		assert_int_equal(s3xml_parse_complete(no_etag[i], strlen(no_etag[i]), etag,
						      sizeof(etag), code, sizeof(code)),
				 0);
		assert_string_equal(etag, "");
		assert_string_equal(code, "");
	}
	/* an ETag that does not fit the caller's buffer is refused, not cut */
	assert_int_equal(s3xml_parse_complete(ok, strlen(ok), etag, 20, code, sizeof(code)), -EIO);
	assert_int_equal(s3xml_parse_complete(NULL, 0, etag, sizeof(etag), code, sizeof(code)),
			 -EIO);
}

static void test_complete_body(void **state)
{
	const char *etags[] = {"\"a54357aff0632cce46d942af68356b38\"",
			       "\"0c78aef83f66abc1fa1e8477f296d394\"", "\"x&y<z>'\"-3"};
	const char *want =
	    "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	    "<Part><PartNumber>1</PartNumber><ETag>&quot;a54357aff0632cce46d942af68356b38&quot;"
	    "</ETag></Part>"
	    "<Part><PartNumber>2</PartNumber><ETag>&quot;0c78aef83f66abc1fa1e8477f296d394&quot;"
	    "</ETag></Part>"
	    "<Part><PartNumber>3</PartNumber><ETag>&quot;x&amp;y&lt;z&gt;&apos;&quot;-3</ETag>"
	    "</Part></CompleteMultipartUpload>";
	size_t len = 0;
	char *doc;

	(void)state;
	doc = s3xml_complete_body(etags, 3, &len);
	assert_non_null(doc);
	assert_string_equal(doc, want);
	assert_int_equal(len, strlen(want));
	free(doc);
	doc = s3xml_complete_body(etags, 0, &len);
	assert_non_null(doc);
	assert_string_equal(doc, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/"
				 "2006-03-01/\"></CompleteMultipartUpload>");
	free(doc);
}

static void test_complete_body_many(void **state)
{
	/* 10,000 parts, the most S3 takes: the length counted is the length written */
	static char etag[] = "\"0123456789abcdef0123456789abcdef\"";
	const char **etags = calloc(10000, sizeof(*etags));
	size_t len = 0;
	char *doc;

	(void)state;
	assert_non_null(etags);
	for (int i = 0; i < 10000; i++)
		etags[i] = etag;
	doc = s3xml_complete_body(etags, 10000, &len);
	assert_non_null(doc);
	assert_int_equal(strlen(doc), len);
	assert_non_null(strstr(doc, "<Part><PartNumber>10000</PartNumber>"));
	free(doc);
	free(etags);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_single_page),
	    cmocka_unit_test(test_every_prefix_fails),
	    cmocka_unit_test(test_pagination),
	    cmocka_unit_test(test_truncated_flag),
	    cmocka_unit_test(test_common_prefixes),
	    cmocka_unit_test(test_prefix_repeated_across_pages),
	    cmocka_unit_test(test_entities),
	    cmocka_unit_test(test_empty_listing),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_missing_and_repeated_fields),
	    cmocka_unit_test(test_optional_fields),
	    cmocka_unit_test(test_wrong_depth),
	    cmocka_unit_test(test_long_values),
	    cmocka_unit_test(test_callback_stops),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_error_truncation),
	    cmocka_unit_test(test_not_errors),
	    cmocka_unit_test(test_time),
	    cmocka_unit_test(test_url_encoded_keys),
	    cmocka_unit_test(test_initiate),
	    cmocka_unit_test(test_complete_answer),
	    cmocka_unit_test(test_complete_body),
	    cmocka_unit_test(test_complete_body_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
