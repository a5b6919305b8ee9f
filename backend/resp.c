/*
 * resp.c - the bounds on a Redis server's replies (see resp.h): a scanner over the byte
 * stream, and the step that hands scanned bytes to hiredis.
 *
 *   socket ─read(2) into the room at the end of hiredis's buffer─► bk_resp_feed
 *                                                        │ bk_resp_scan the new bytes
 *                                  over a bound, unasked ┴─► -errno: the bytes stay out of
 *                                                        │   the buffer, the caller closes
 *                                                        └─► sdsIncrLen: hiredis parses them
 *
 * The scanner keeps no bytes, only where it is in the grammar: the type byte of the item
 * being read, the line so far (its length, and the number it spells for a length or an
 * integer line), the bytes of a bulk string still to pass, and what each open array still
 * owes. A bulk string's length is checked as soon as its line ends, before a byte of its body
 * is buffered, so a server that declares 4 GB is refused after the chunk that held the
 * declaration; a body is passed over in O(1) per read, so the scan costs nothing next to the
 * copy hiredis makes of a value.
 *
 * It reads RESP exactly as hiredis 0.14's reader does (read.c), or more strictly: a line ends
 * at the first CR LF (a lone CR is part of the line); a number is string2ll's (an optional
 * minus, no leading zero, no plus, at most 64 bits: "0" but not "-0" or "01"); a bulk string's
 * body is followed by two bytes hiredis skips unread; $-1 and *-1 are nil. So whatever the
 * scanner passes, hiredis parses without error, into as many replies as the scanner counted
 * (the fuzz target checks both), and nothing it passes can make hiredis hold more than one
 * reply of at most max_bulk plus what one read brings.
 *
 * No locks: one scanner per connection, used on the I/O thread.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "resp.h"

void bk_resp_init(struct bk_resp *s, uint64_t max_bulk)
{
	memset(s, 0, sizeof(*s));
	s->max_bulk = max_bulk;
	s->max_reply = max_bulk + BK_RESP_LINE_MAX + 3;
}

static int fail(struct bk_resp *s, int err)
{
	s->err = err;
	return err;
}

/* An item is whole: its arrays may be too. @return 1 if a whole reply ended with it. */
static int item_done(struct bk_resp *s)
{
	s->type = 0;
	while (s->depth) {
		if (--s->left[s->depth - 1] > 0)
			return 0;
		s->depth--;
	}
	s->in_reply = 0;
	return 1;
}

static int start_item(struct bk_resp *s, unsigned char c)
{
	if (c != '+' && c != '-' && c != ':' && c != '$' && c != '*')
		return -EPROTO;
	s->type = c;
	s->line = 0;
	s->num = 0;
	s->cr = s->bad = s->neg = s->zero = false;
	return 0;
}

/* One byte of a length or integer line, as hiredis's string2ll reads the whole line. */
static void number_byte(struct bk_resp *s, unsigned char c)
{
	unsigned first = s->neg ? 2 : 1; /* where the first digit is */

	if (s->line == 1 && c == '-') {
		s->neg = true;
		return;
	}
	if (c < '0' || c > '9' || s->zero) {
		s->bad = true;
		return;
	}
	if (s->line == first && c == '0') {
		s->zero = true; /* "0" alone, or nothing valid */
		return;
	}
	if (s->num > UINT64_MAX / 10 || s->num * 10 > UINT64_MAX - (uint64_t)(c - '0'))
		s->bad = true;
	else
		s->num = s->num * 10 + (uint64_t)(c - '0');
}

static int content(struct bk_resp *s, unsigned char c)
{
	if (++s->line > BK_RESP_LINE_MAX)
		return -EMSGSIZE;
	if (s->type != '+' && s->type != '-')
		number_byte(s, c);
	return 0;
}

/* @return 1 when @c ends the line, 0 when it does not, or -errno. */
static int line_byte(struct bk_resp *s, unsigned char c)
{
	int r;

	if (s->cr) {
		if (c == '\n')
			return 1;
		s->cr = false; /* a lone CR is part of the line */
		r = content(s, '\r');
		if (r < 0)
			return r;
	}
	if (c == '\r') {
		s->cr = true;
		return 0;
	}
	return content(s, c);
}

/* The number of a line that ended, as string2ll takes it: @return 0 and *ret_neg and
 * *ret_v (its magnitude), or -EPROTO. */
static int number(const struct bk_resp *s, bool *ret_neg, uint64_t *ret_v)
{
	if (s->bad || s->line == 0 || (s->neg && s->line == 1) || (s->zero && s->neg) ||
	    (s->neg ? s->num > (uint64_t)1 << 63 : s->num > (uint64_t)INT64_MAX))
		return -EPROTO;
	*ret_neg = s->neg;
	*ret_v = s->num;
	return 0;
}

/* A line ended. @return 1 if a whole reply ended with it, 0, or -errno. */
static int line_end(struct bk_resp *s)
{
	bool neg = false;
	uint64_t v = 0;

	if (s->type == '+' || s->type == '-')
		return item_done(s);
	if (number(s, &neg, &v) < 0)
		return -EPROTO;
	if (s->type == ':')
		return item_done(s);
	if (neg) /* -1 is nil; anything lower is an error */
		return v == 1 ? item_done(s) : -EPROTO;
	if (s->type == '$') {
		if (v > s->max_bulk || s->in_reply + v + 2 > s->max_reply)
			return -EMSGSIZE;
		s->type = 0;
		s->skip = v + 2; /* the body, and the two bytes hiredis skips after it */
		return 0;
	}
	if (v > BK_RESP_ELEMS_MAX || s->depth == BK_RESP_DEPTH_MAX)
		return -E2BIG; /* an empty array is an array too (fuzz_resp found one at depth 3) */
	if (v == 0)
		return item_done(s);
	s->left[s->depth++] = (uint32_t)v;
	s->type = 0;
	return 0;
}

int bk_resp_scan(struct bk_resp *s, const void *buf, size_t n)
{
	const unsigned char *p = buf, *end = p + n;
	int done = 0, r;

	if (s->err)
		return s->err;
	while (p < end) {
		if (s->skip) {
			size_t k = (size_t)(end - p) < s->skip ? (size_t)(end - p) : s->skip;

			p += k;
			s->skip -= k;
			s->in_reply += k;
			if (!s->skip)
				done += item_done(s);
			continue;
		}
		if (++s->in_reply > s->max_reply)
			r = -EMSGSIZE;
		else if (!s->type)
			r = start_item(s, *p++);
		else if ((r = line_byte(s, *p++)) > 0)
			r = line_end(s);
		if (r < 0)
			return fail(s, r);
		done += r;
	}
	return done;
}

int bk_resp_feed(struct bk_resp *s, redisReader *r, size_t n, unsigned owed)
{
	int k;

	if (r->err || n > (size_t)INT32_MAX)
		return fail(s, -EPROTO);
	k = bk_resp_scan(s, r->buf + sdslen(r->buf), n);
	if (k < 0)
		return k;
	if ((unsigned)k > owed)
		return fail(s, -EPROTO);
	sdsIncrLen(r->buf, (int)n);
	r->len = sdslen(r->buf);
	return k;
}

/* ---- hiredis's reply functions, arrays capped ------------------------------------------- */

static redisReplyObjectFunctions defaults;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void take_defaults(void)
{
	redisReader *r = redisReaderCreate();

	if (r) {
		defaults = *r->fn;
		redisReaderFree(r);
	}
}

static void *capped_array(const redisReadTask *task, int elements)
{
	if (elements < 0 || (unsigned)elements > BK_RESP_ELEMS_MAX || !defaults.createArray)
		return NULL;
	return defaults.createArray(task, elements);
}

int bk_resp_functions(redisReplyObjectFunctions *fns)
{
	pthread_once(&defaults_once, take_defaults);
	if (!defaults.createString)
		return -ENOMEM; /* the reader that would have shown them could not be made */
	*fns = defaults;
	fns->createArray = capped_array;
	return 0;
}
