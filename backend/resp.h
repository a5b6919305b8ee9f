/*
 * resp.h - the bounds on what a Redis server may make tierfs hold: a scanner that sees every
 * byte of a server's replies before hiredis buffers it, and the hand-over of the bytes that
 * pass to hiredis's reader. Used by redis.c on each connection, and by the fuzz target
 * (tests/fuzz/fuzz_resp.c) without a socket.
 *
 * hiredis 0.14 buffers a bulk string of any declared length until it is whole ($4000000000
 * is 4 GB), and an array of up to INT_MAX elements; its reader's maxbuf only says when an
 * empty buffer may be freed, and bounds nothing. So the scanner follows the RESP grammar as
 * hiredis parses it, byte by byte, and refuses a bulk string longer than max_bulk, a reply
 * longer than that and a line (an array of values would hold several), an array of more than
 * BK_RESP_ELEMS_MAX elements or nested deeper than BK_RESP_DEPTH_MAX, a line over
 * BK_RESP_LINE_MAX bytes, anything hiredis would not parse, and more whole replies than were
 * asked for (hiredis asserts, and aborts the process, on an unasked reply that is not an
 * error). This header is for backend/ and its tests only (it includes hiredis).
 */
#ifndef TIERFS_RESP_H
#define TIERFS_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/read.h>

#define BK_RESP_ELEMS_MAX 16u   /* the replies tierfs asks for: a script's pair, a few more */
#define BK_RESP_DEPTH_MAX 2u    /* an array in an array, at most */
#define BK_RESP_LINE_MAX  4096u /* a status, error, integer or length line, CRLF excluded */

/* Where a scanner is in a server's stream. Plain data, one per connection; no locking. */
struct bk_resp {
	uint64_t max_bulk;  /* longest bulk string taken */
	uint64_t max_reply; /* longest reply taken: max_bulk, a line, and its CRLF */
	uint64_t in_reply;  /* bytes of the reply being read, so far */
	int err;            /* 0, or the -errno that stopped it (sticky) */
	unsigned char type; /* the item being read: its type byte, 0 between items */
	bool cr;            /* the last byte was a CR of the current line */
	bool bad;           /* the number on the current line is not one hiredis would take */
	bool neg;           /* ... it has a minus sign */
	bool zero;          /* ... its first digit is 0 (valid only as "0" alone) */
	uint32_t line;      /* bytes of the current line so far, CRLF excluded */
	uint64_t num;       /* ... its value so far (digits) */
	uint64_t skip;      /* bytes left of a bulk string's body and its CRLF */
	unsigned depth;     /* arrays open */
	uint32_t left[BK_RESP_DEPTH_MAX]; /* elements each open array still owes */
};

/* A scanner taking bulk strings of up to @max_bulk bytes, and replies of up to that and a
 * line (BK_RESP_LINE_MAX and 3 bytes). */
void bk_resp_init(struct bk_resp *s, uint64_t max_bulk);

/*
 * Scan the next @n bytes of the stream. @return the number of replies they complete (>= 0),
 * or -EMSGSIZE (a bulk string over max_bulk, a reply over max_reply, a line over
 * BK_RESP_LINE_MAX), -E2BIG (an array
 * over BK_RESP_ELEMS_MAX, or nested too deep), -EPROTO (not RESP as hiredis reads it). After
 * an error the scanner answers that error for ever.
 */
int bk_resp_scan(struct bk_resp *s, const void *buf, size_t n);

/*
 * @n bytes read from the server lie just past the end of @r's buffer (in room that
 * sdsMakeRoomFor made): scan them with @s, and if they break no bound and complete no more
 * than @owed replies, make them part of the buffer for hiredis to parse.
 * @return the replies they complete, or -errno (the scanner's, or -EPROTO for an unasked
 * reply), the bytes left out of the buffer.
 */
int bk_resp_feed(struct bk_resp *s, redisReader *r, size_t n, unsigned owed);

/* Write into @fns hiredis's reply functions, but for createArray, which refuses (NULL:
 * hiredis's out-of-memory error) an array over BK_RESP_ELEMS_MAX: a second line behind the
 * scanner. @return 0 or -ENOMEM. */
int bk_resp_functions(redisReplyObjectFunctions *fns);

#endif
