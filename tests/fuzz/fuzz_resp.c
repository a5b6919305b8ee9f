/*
 * fuzz_resp.c - a Redis server's replies through the path that bounds them (backend/resp.c):
 * the scanner, the hand-over to hiredis's reader (bk_resp_feed), and hiredis's parse with
 * tierfs's reply functions (arrays capped), as redis.c's read_all runs them on a socket.
 *
 * The input is [max][owed][cuts][stream...]: max sets the longest bulk string taken
 * (max * 16 bytes), owed the replies asked for (0xff: any number), and cuts how the stream is
 * cut into reads (a read of (cuts % 61) + 1 bytes, then the next, ...), so a line or a
 * length split across reads is exercised. Checked beyond "no crash, no leak, no UB":
 *   - while the scanner passes the bytes, hiredis's reader never fails on them, and it gives
 *     exactly as many replies as the scanner counted, never more than were owed;
 *   - every reply hiredis builds is within the bounds: strings of at most max bytes and all
 *     of a reply's strings together at most max and a line, arrays of at most
 *     BK_RESP_ELEMS_MAX elements nested at most BK_RESP_DEPTH_MAX deep;
 *   - what the reader holds unparsed is never more than one reply's bound and one read;
 *   - once the scanner refuses, it refuses for ever, and nothing more is handed over.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "resp.h"
#include "fuzz.h"

/* Check @r (depth @depth) against the bounds; @return the bytes of its strings. */
static uint64_t bounded(const redisReply *r, unsigned depth, uint64_t max)
{
	uint64_t sum = 0;

	switch (r->type) {
	case REDIS_REPLY_STRING:
	case REDIS_REPLY_STATUS:
	case REDIS_REPLY_ERROR:
		FUZZ_CHECK(r->len <= max || (r->type != REDIS_REPLY_STRING &&
					     r->len <= BK_RESP_LINE_MAX));
		return r->len;
	case REDIS_REPLY_ARRAY:
		FUZZ_CHECK(depth < BK_RESP_DEPTH_MAX && r->elements <= BK_RESP_ELEMS_MAX);
		for (size_t i = 0; i < r->elements; i++)
			sum += bounded(r->element[i], depth + 1, max);
		return sum;
	default:
		FUZZ_CHECK(r->type == REDIS_REPLY_INTEGER || r->type == REDIS_REPLY_NIL);
		return 0;
	}
}

/* Take the replies hiredis has whole. @return how many. */
static unsigned take(redisReader *rd, uint64_t max)
{
	unsigned n = 0;
	void *reply;

	while (redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
		FUZZ_CHECK(bounded(reply, 0, max) <= max + BK_RESP_LINE_MAX + 3);
		freeReplyObject(reply);
		n++;
	}
	FUZZ_CHECK(rd->err == 0);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReplyObjectFunctions fns;
	struct bk_resp s;
	redisReader *rd;
	uint64_t max;
	unsigned owed, got = 0, counted = 0;
	size_t cut, off = 3;

	if (size < 3)
		return 0;
	max = (uint64_t)data[0] * 16;
	owed = data[1] == 0xff ? UINT_MAX : data[1];
	cut = (size_t)(data[2] % 61) + 1;
	rd = redisReaderCreate();
	FUZZ_CHECK(rd && bk_resp_functions(&fns) == 0);
	rd->fn = &fns;
	bk_resp_init(&s, max);
	while (off < size) {
		size_t n = size - off < cut ? size - off : cut;
		sds b = sdsMakeRoomFor(rd->buf, n);
		int k;

		FUZZ_CHECK(b);
		rd->buf = b;
		memcpy(b + sdslen(b), data + off, n);
		off += n;
		k = bk_resp_feed(&s, rd, n, owed - counted);
		if (k < 0) {
			FUZZ_CHECK(k == -EMSGSIZE || k == -E2BIG || k == -EPROTO);
			FUZZ_CHECK(bk_resp_scan(&s, "+OK\r\n", 5) == k); /* sticky */
			break;
		}
		counted += (unsigned)k;
		got += take(rd, max);
		FUZZ_CHECK(got == counted && counted <= owed);
		FUZZ_CHECK(rd->len - rd->pos <= max + BK_RESP_LINE_MAX + 3 + cut);
	}
	redisReaderFree(rd);
	return 0;
}
