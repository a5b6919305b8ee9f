/*
 * s3xml.c - the XML documents tierfs reads from S3: a ListObjectsV2 result page, an <Error>
 * body, and the answers to CreateMultipartUpload and CompleteMultipartUpload; and the one it
 * writes, CompleteMultipartUpload's list of parts. Parsed with expat, streaming, in one pass
 * over a body already in memory.
 *
 * Only these paths mean anything; every other element is skipped with its whole subtree:
 *
 *     ListBucketResult                      depth 1 (the root; anything else is -EIO)
 *       IsTruncated                         2   "true" | "false"
 *       NextContinuationToken               2   opaque, kept verbatim
 *       EncodingType                        2   "url": keys and prefixes are percent-encoded
 *       Contents                            2   one object: an entry at </Contents>
 *         Key, Size, LastModified, ETag     3
 *       CommonPrefixes                      2   one "directory": an entry at </CommonPrefixes>
 *         Prefix                            3
 *
 *     Error                                 depth 1
 *       Code, Message                       2
 *
 *     InitiateMultipartUploadResult         depth 1
 *       UploadId                            2
 *
 *     CompleteMultipartUploadResult         depth 1 (or Error: S3 may answer 200 with one,
 *       ETag                                2        when it failed after sending the status)
 *
 * Matching is by path, not by name: the <Prefix> that echoes the request at depth 2 and a
 * <Key> inside, say, an <Owner> are not listing entries. Entries are collected into an array
 * and handed to the callback only after the whole page parsed and checked, so a page that
 * turns out -EIO (truncated, malformed) has reported nothing. The parser keeps a small stack of
 * element ids (one per depth, deeper levels are only counted) and collects character data only
 * while inside a leaf it wants, into one buffer capped at TEXT_MAX bytes; a longer value makes
 * the page -EIO (S3 keys are at most 1024 bytes, tokens a few hundred). A wanted leaf that
 * contains an element, a Contents without a Key or Size, a Size that is not a plain decimal
 * that fits in 64 bits, a repeated field, or IsTruncated=true without a token are all -EIO:
 * a listing we do not fully understand is not guessed at. Entities (&amp;, &#x20AC;) are
 * decoded by expat; a DOCTYPE is refused outright, so no entity can be declared and expanded.
 *
 * Keys. tierfs asks for encoding-type=url, because S3 writes a key holding a character XML
 * cannot carry (U+0001, say) as "&#x1;", which expat rightly refuses, failing the whole page.
 * When the page says <EncodingType>url</EncodingType>, every Key and Prefix is decoded: %XY is
 * the byte 0xXY and '+' is a space (S3 form-encodes; a real '+' comes as %2B); a '%' without two
 * hex digits is kept as it is. A page without EncodingType (a store that ignores the parameter)
 * is taken verbatim. A decoded key may hold a NUL: the callback gets its length too, so it can
 * tell such a key (which cannot be a file name) from a shorter one.
 *
 * Each call owns its parser and context; there is no shared state and no locking. Workload:
 * up to 1000 entries per page, about 300 KB, parsed once per page by the listing thread.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <expat.h>

#include "s3xml.h"

#define TEXT_MAX  (64 * 1024)
#define STACK_MAX 8

enum elem {
	E_OTHER = 0,
	/* list */
	E_LIST,
	E_TRUNCATED,
	E_TOKEN,
	E_ENCODING,
	E_CONTENTS,
	E_KEY,
	E_SIZE,
	E_MTIME,
	E_ETAG,
	E_PREFIXES,
	E_PREFIX,
	/* error */
	E_ERROR,
	E_CODE,
	E_MESSAGE,
	/* multipart answers */
	E_INITIATE,
	E_UPLOADID,
	E_COMPLETE,
};

enum doc {
	DOC_LIST,
	DOC_ERROR,
	DOC_INITIATE,
	DOC_COMPLETE, /* a CompleteMultipartUploadResult or an Error */
};

/* One listing entry, kept until the whole page has been checked. */
struct entry {
	char *key;  /* owned; url-decoded in place once the page is known to be encoded */
	size_t keylen; /* bytes in key after decoding (it may hold a NUL) */
	char *etag; /* owned; NULL for a prefix or when absent */
	uint64_t size;
	int64_t mtime; /* INT64_MIN if absent or unparsable */
	bool is_prefix;
};

struct ctx {
	XML_Parser parser;
	enum doc doc;
	int depth;		    /* current element depth, root = 1 */
	enum elem stack[STACK_MAX]; /* element id per depth 1..STACK_MAX (index depth - 1) */
	bool collecting;	    /* inside a wanted leaf: character data goes to text */
	char *text;		    /* TEXT_MAX + 1 bytes */
	size_t textlen;
	int err; /* first error, 0 if none */

	/* list */
	struct entry *entries; /* in document order, owned */
	size_t nentries, capentries;
	bool truncated_seen, truncated;
	char *token;			 /* NextContinuationToken, owned */
	char *encoding;			 /* EncodingType, owned; NULL if absent */
	char *key, *size, *mtime, *etag; /* fields of the current Contents or CommonPrefixes */

	/* error */
	char *code, *msg;

	/* multipart answers */
	char *upload_id;
	bool is_error; /* DOC_COMPLETE: the root was <Error> */
};

/* The error for a document that is not what we expected: -EIO for a listing (the server
 * answered 200 with something unusable), -EINVAL for "not an error document". */
static int bad(const struct ctx *c)
{
	return c->doc == DOC_ERROR ? -EINVAL : -EIO;
}

static enum elem classify_root(const struct ctx *c, const char *name)
{
	switch (c->doc) {
	case DOC_LIST:
		return strcmp(name, "ListBucketResult") == 0 ? E_LIST : E_OTHER;
	case DOC_INITIATE:
		return strcmp(name, "InitiateMultipartUploadResult") == 0 ? E_INITIATE : E_OTHER;
	case DOC_COMPLETE:
		if (strcmp(name, "CompleteMultipartUploadResult") == 0)
			return E_COMPLETE;
		break; /* or an <Error> */
	case DOC_ERROR:
		break;
	}
	return strcmp(name, "Error") == 0 ? E_ERROR : E_OTHER;
}

static void fail(struct ctx *c, int err)
{
	if (!c->err)
		c->err = err;
	XML_StopParser(c->parser, XML_FALSE);
}

static enum elem classify(const struct ctx *c, const char *name)
{
	enum elem parent = c->depth > 0 && c->depth <= STACK_MAX ? c->stack[c->depth - 1] : E_OTHER;

	if (c->depth == 0)
		return classify_root(c, name);
	switch (parent) {
	case E_INITIATE:
		return strcmp(name, "UploadId") == 0 ? E_UPLOADID : E_OTHER;
	case E_COMPLETE:
		return strcmp(name, "ETag") == 0 ? E_ETAG : E_OTHER;
	case E_LIST:
		if (strcmp(name, "IsTruncated") == 0)
			return E_TRUNCATED;
		if (strcmp(name, "NextContinuationToken") == 0)
			return E_TOKEN;
		if (strcmp(name, "EncodingType") == 0)
			return E_ENCODING;
		if (strcmp(name, "Contents") == 0)
			return E_CONTENTS;
		if (strcmp(name, "CommonPrefixes") == 0)
			return E_PREFIXES;
		return E_OTHER;
	case E_CONTENTS:
		if (strcmp(name, "Key") == 0)
			return E_KEY;
		if (strcmp(name, "Size") == 0)
			return E_SIZE;
		if (strcmp(name, "LastModified") == 0)
			return E_MTIME;
		if (strcmp(name, "ETag") == 0)
			return E_ETAG;
		return E_OTHER;
	case E_PREFIXES:
		return strcmp(name, "Prefix") == 0 ? E_PREFIX : E_OTHER;
	case E_ERROR:
		if (strcmp(name, "Code") == 0)
			return E_CODE;
		if (strcmp(name, "Message") == 0)
			return E_MESSAGE;
		return E_OTHER;
	default:
		return E_OTHER;
	}
}

static bool is_leaf(enum elem e)
{
	switch (e) {
	case E_TRUNCATED:
	case E_TOKEN:
	case E_ENCODING:
	case E_KEY:
	case E_SIZE:
	case E_MTIME:
	case E_ETAG:
	case E_PREFIX:
	case E_CODE:
	case E_MESSAGE:
	case E_UPLOADID:
		return true;
	default:
		return false;
	}
}

static void clear_entry(struct ctx *c)
{
	free(c->key);
	free(c->size);
	free(c->mtime);
	free(c->etag);
	c->key = c->size = c->mtime = c->etag = NULL;
}

static void XMLCALL on_start(void *data, const XML_Char *name, const XML_Char **attrs)
{
	struct ctx *c = data;
	enum elem e;

	(void)attrs;
	if (c->err)
		return;
	if (c->collecting) {
		fail(c, bad(c)); /* an element inside a value we wanted as text */
		return;
	}
	e = classify(c, name);
	if (c->depth == 0 && e == E_OTHER) {
		fail(c, bad(c));
		return;
	}
	if (c->depth == 0)
		c->is_error = e == E_ERROR;
	if (c->depth == INT_MAX) {
		fail(c, bad(c));
		return;
	}
	c->depth++;
	if (c->depth <= STACK_MAX)
		c->stack[c->depth - 1] = e;
	if (e == E_CONTENTS || e == E_PREFIXES)
		clear_entry(c);
	if (is_leaf(e)) {
		c->collecting = true;
		c->textlen = 0;
		c->text[0] = '\0';
	}
}

static void XMLCALL on_text(void *data, const XML_Char *s, int len)
{
	struct ctx *c = data;

	if (c->err || !c->collecting || len <= 0)
		return;
	if ((size_t)len > TEXT_MAX - c->textlen) {
		fail(c, bad(c));
		return;
	}
	memcpy(c->text + c->textlen, s, (size_t)len);
	c->textlen += (size_t)len;
	c->text[c->textlen] = '\0';
}

/* Move the collected text into *@slot; a second value for the same slot is an error. */
static void take_text(struct ctx *c, char **slot)
{
	if (*slot) {
		fail(c, bad(c));
		return;
	}
	*slot = strndup(c->text, c->textlen);
	if (!*slot)
		fail(c, -ENOMEM);
}

static bool xml_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* @s with XML white space removed at both ends, in place. */
static char *trim(char *s)
{
	size_t n;

	while (xml_space(*s))
		s++;
	n = strlen(s);
	while (n > 0 && xml_space(s[n - 1]))
		s[--n] = '\0';
	return s;
}

static int parse_u64(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		unsigned d;

		if (*s < '0' || *s > '9')
			return -EINVAL;
		d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*ret = v;
	return 0;
}

/* Append an entry; it takes over c->key and c->etag. */
static void add_entry(struct ctx *c, bool is_prefix, uint64_t size, int64_t mtime)
{
	struct entry *e;

	if (c->nentries == c->capentries) {
		size_t cap = c->capentries ? 2 * c->capentries : 64;

		e = reallocarray(c->entries, cap, sizeof(*e));
		if (!e) {
			fail(c, -ENOMEM);
			return;
		}
		c->entries = e;
		c->capentries = cap;
	}
	e = &c->entries[c->nentries++];
	*e = (struct entry){
	    .key = c->key, .etag = c->etag, .size = size, .mtime = mtime, .is_prefix = is_prefix};
	c->key = c->etag = NULL;
}

static void end_contents(struct ctx *c)
{
	uint64_t size;
	int64_t mtime = INT64_MIN;

	if (!c->key || !c->key[0] || !c->size || parse_u64(trim(c->size), &size) < 0) {
		fail(c, -EIO);
		return;
	}
	if (c->mtime && s3xml_parse_time(trim(c->mtime), &mtime) < 0)
		mtime = INT64_MIN;
	add_entry(c, false, size, mtime);
}

static void end_prefixes(struct ctx *c)
{
	if (!c->key || !c->key[0]) {
		fail(c, -EIO);
		return;
	}
	free(c->etag);
	c->etag = NULL;
	add_entry(c, true, 0, INT64_MIN);
}

static void XMLCALL on_end(void *data, const XML_Char *name)
{
	struct ctx *c = data;
	enum elem e;

	(void)name;
	if (c->err)
		return;
	e = c->depth <= STACK_MAX ? c->stack[c->depth - 1] : E_OTHER;
	c->collecting = false;
	switch (e) {
	case E_TRUNCATED: {
		char *v;

		if (c->truncated_seen) {
			fail(c, -EIO);
			break;
		}
		c->truncated_seen = true;
		v = trim(c->text);
		if (strcmp(v, "true") == 0)
			c->truncated = true;
		else if (strcmp(v, "false") != 0)
			fail(c, -EIO);
		break;
	}
	case E_TOKEN:
		take_text(c, &c->token);
		break;
	case E_ENCODING:
		take_text(c, &c->encoding);
		break;
	case E_KEY:
	case E_PREFIX:
		take_text(c, &c->key);
		break;
	case E_SIZE:
		take_text(c, &c->size);
		break;
	case E_MTIME:
		take_text(c, &c->mtime);
		break;
	case E_ETAG:
		take_text(c, &c->etag);
		break;
	case E_CONTENTS:
		end_contents(c);
		clear_entry(c);
		break;
	case E_PREFIXES:
		end_prefixes(c);
		clear_entry(c);
		break;
	case E_CODE:
		take_text(c, &c->code);
		break;
	case E_MESSAGE:
		take_text(c, &c->msg);
		break;
	case E_UPLOADID:
		take_text(c, &c->upload_id);
		break;
	default:
		break;
	}
	c->depth--;
}

static void XMLCALL on_doctype(void *data, const XML_Char *name, const XML_Char *sysid,
			       const XML_Char *pubid, int has_internal_subset)
{
	struct ctx *c = data;

	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal_subset;
	fail(c, bad(c));
}

/* Run expat over @body. @return 0, the first error a handler recorded, or bad() for a
 * document expat itself rejects. */
static int run(struct ctx *c, const char *body, size_t len)
{
	int r = 0;

	c->text = malloc(TEXT_MAX + 1);
	c->parser = XML_ParserCreate(NULL);
	if (!c->text || !c->parser) {
		r = -ENOMEM;
		goto out;
	}
	XML_SetUserData(c->parser, c);
	XML_SetElementHandler(c->parser, on_start, on_end);
	XML_SetCharacterDataHandler(c->parser, on_text);
	XML_SetStartDoctypeDeclHandler(c->parser, on_doctype);

	/* XML_Parse takes an int length: feed large bodies in pieces. */
	do {
		size_t n = len > (1u << 30) ? (1u << 30) : len;

		if (XML_Parse(c->parser, body, (int)n, n == len) != XML_STATUS_OK) {
			if (XML_GetErrorCode(c->parser) == XML_ERROR_NO_MEMORY)
				r = -ENOMEM;
			else
				r = bad(c);
			break;
		}
		body += n;
		len -= n;
	} while (len > 0);
	if (c->err)
		r = c->err;
out:
	if (c->parser)
		XML_ParserFree(c->parser);
	free(c->text);
	c->parser = NULL;
	c->text = NULL;
	return r;
}

static void ctx_done(struct ctx *c)
{
	clear_entry(c);
	for (size_t i = 0; i < c->nentries; i++) {
		free(c->entries[i].key);
		free(c->entries[i].etag);
	}
	free(c->entries);
	free(c->token);
	free(c->encoding);
	free(c->code);
	free(c->msg);
	free(c->upload_id);
}

static int hex(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Decode @s in place (%XY, '+' = space). @return the decoded length; s[len] is a NUL. */
static size_t url_decode(char *s)
{
	char *w = s;

	for (const char *p = s; *p; p++) {
		if (*p == '%' && hex(p[1]) >= 0 && hex(p[2]) >= 0) {
			*w++ = (char)(hex(p[1]) * 16 + hex(p[2]));
			p += 2;
		} else {
			*w++ = *p == '+' ? ' ' : *p;
		}
	}
	*w = '\0';
	return (size_t)(w - s);
}

int s3xml_parse_list(const char *body, size_t len, s3xml_list_fn fn, void *arg, char **ret_token)
{
	struct ctx c = {.doc = DOC_LIST};
	int r;

	if (!fn)
		return -EINVAL;
	if (!body)
		return -EIO;
	r = run(&c, body, len);
	if (r < 0)
		goto out;
	if (c.truncated && (!c.token || !c.token[0])) {
		r = -EIO;
		goto out;
	}
	bool url = c.encoding && strcmp(trim(c.encoding), "url") == 0;

	/* The page is sound: only now does the caller hear about its entries. */
	for (size_t i = 0; i < c.nentries; i++) {
		struct entry *e = &c.entries[i];

		e->keylen = url ? url_decode(e->key) : strlen(e->key);
		r = fn(arg, e->key, e->keylen, e->is_prefix, e->size, e->mtime,
		       e->etag ? e->etag : "");
		if (r < 0)
			goto out;
	}
	r = 0;
	if (ret_token) {
		*ret_token = c.truncated ? c.token : NULL;
		if (c.truncated)
			c.token = NULL;
	}
out:
	ctx_done(&c);
	return r;
}

static void copy_trunc(char *dst, size_t dstlen, const char *src)
{
	size_t n;

	if (!dst || dstlen == 0)
		return;
	n = strlen(src);
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int s3xml_parse_error(const char *body, size_t len, char *code, size_t codelen, char *msg,
		      size_t msglen)
{
	struct ctx c = {.doc = DOC_ERROR};
	int r;

	if (!body)
		return -EINVAL;
	r = run(&c, body, len);
	if (r == 0 && (!c.code || !trim(c.code)[0]))
		r = -EINVAL;
	if (r == 0) {
		copy_trunc(code, codelen, trim(c.code));
		copy_trunc(msg, msglen, c.msg ? trim(c.msg) : "");
	}
	ctx_done(&c);
	return r;
}

static int digits(const char **p, int n, int *ret)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		char ch = (*p)[i];

		if (ch < '0' || ch > '9')
			return -EINVAL;
		v = v * 10 + (ch - '0');
	}
	*p += n;
	*ret = v;
	return 0;
}

static int expect(const char **p, char ch)
{
	if (**p != ch)
		return -EINVAL;
	(*p)++;
	return 0;
}

static bool leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int s3xml_parse_time(const char *s, int64_t *ret)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int y, mo, d, h, mi, sec, off = 0;
	struct tm tm = {0};
	const char *p = s;
	time_t t;

	if (!s)
		return -EINVAL;
	if (digits(&p, 4, &y) < 0 || expect(&p, '-') < 0 || digits(&p, 2, &mo) < 0 ||
	    expect(&p, '-') < 0 || digits(&p, 2, &d) < 0 || expect(&p, 'T') < 0 ||
	    digits(&p, 2, &h) < 0 || expect(&p, ':') < 0 || digits(&p, 2, &mi) < 0 ||
	    expect(&p, ':') < 0 || digits(&p, 2, &sec) < 0)
		return -EINVAL;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'Z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		/* A numeric offset is ISO 8601 too; some S3 look-alikes send "+00:00". */
		int sign = *p == '-' ? -1 : 1, oh, om;

		p++;
		if (digits(&p, 2, &oh) < 0 || expect(&p, ':') < 0 || digits(&p, 2, &om) < 0 ||
		    oh > 23 || om > 59)
			return -EINVAL;
		off = sign * (oh * 3600 + om * 60);
	} else {
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap(y)) || h > 23 ||
	    mi > 59 || sec > 60)
		return -EINVAL;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	*ret = (int64_t)t - off;
	return 0;
}

/* ---- multipart uploads ---------------------------------------------------------------------- */

int s3xml_parse_initiate(const char *body, size_t len, char **ret_id)
{
	struct ctx c = {.doc = DOC_INITIATE};
	int r;

	if (!body)
		return -EIO;
	r = run(&c, body, len);
	if (r == 0 && (!c.upload_id || !trim(c.upload_id)[0]))
		r = -EIO;
	if (r == 0) {
		char *id = strdup(trim(c.upload_id));

		if (!id)
			r = -ENOMEM;
		else
			*ret_id = id;
	}
	ctx_done(&c);
	return r;
}

int s3xml_parse_complete(const char *body, size_t len, char *etag, size_t etaglen, char *code,
			 size_t codelen)
{
	struct ctx c = {.doc = DOC_COMPLETE};
	int r;

	copy_trunc(code, codelen, "");
	if (!body)
		return -EIO;
	r = run(&c, body, len);
	if (r < 0)
		goto out;
	r = -EIO;
	if (c.is_error) {
		copy_trunc(code, codelen, c.code ? trim(c.code) : "");
		goto out;
	}
	/* no ETag, or an empty one (Ceph RGW 16 sends <ETag></ETag>): still a success */
	if (c.etag && strlen(trim(c.etag)) >= etaglen)
		goto out;
	copy_trunc(etag, etaglen, c.etag ? trim(c.etag) : "");
	r = 0;
out:
	ctx_done(&c);
	return r;
}

/* @s with the five characters XML gives a meaning to escaped, appended at @out (NULL: only
 * counted). @return the bytes it takes. */
static size_t xml_escape(const char *s, char *out)
{
	size_t n = 0;

	for (; *s; s++) {
		const char *rep = *s == '&'    ? "&amp;"
				  : *s == '<'  ? "&lt;"
				  : *s == '>'  ? "&gt;"
				  : *s == '"'  ? "&quot;"
				  : *s == '\'' ? "&apos;"
					       : NULL;
		size_t k = rep ? strlen(rep) : 1;

		if (out)
			memcpy(out + n, rep ? rep : s, k);
		n += k;
	}
	return n;
}

#define COMPLETE_HEAD "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
#define COMPLETE_TAIL "</CompleteMultipartUpload>"
#define PART_FMT      "<Part><PartNumber>%u</PartNumber><ETag>"
#define PART_TAIL     "</ETag></Part>"

/* Write (or with @out NULL, count) the document. @return its length. */
static size_t complete_doc(const char *const *etags, uint32_t n, char *out)
{
	size_t w = 0;
	char num[64];

	if (out)
		memcpy(out, COMPLETE_HEAD, strlen(COMPLETE_HEAD));
	w += strlen(COMPLETE_HEAD);
	for (uint32_t i = 0; i < n; i++) {
		int k = snprintf(num, sizeof(num), PART_FMT, i + 1);

		if (out)
			memcpy(out + w, num, (size_t)k);
		w += (size_t)k;
		w += xml_escape(etags[i], out ? out + w : NULL);
		if (out)
			memcpy(out + w, PART_TAIL, strlen(PART_TAIL));
		w += strlen(PART_TAIL);
	}
	if (out)
		memcpy(out + w, COMPLETE_TAIL, strlen(COMPLETE_TAIL));
	return w + strlen(COMPLETE_TAIL);
}

char *s3xml_complete_body(const char *const *etags, uint32_t n, size_t *ret_len)
{
	size_t len = complete_doc(etags, n, NULL);
	char *doc = malloc(len + 1);

	if (!doc)
		return NULL;
	complete_doc(etags, n, doc);
	doc[len] = '\0';
	*ret_len = len;
	return doc;
}
