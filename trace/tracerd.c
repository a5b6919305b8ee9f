/*
 * tracerd.c - reading a trace file back, one read at a time (tierfs-sim's input).
 *
 *   file: header | O R R O R R R ... ──► buffer (1 MiB, refilled) ──► struct trace_read
 *                  │                                    ▲
 *                  └─► objects[ref] (every 'O' so far) ─┘ a read's object fields, by its ref
 *
 * The reader checks the header (magic, version, record lengths), then walks the records: an
 * object record is appended to the file's table, a read record is returned with its object's
 * fields filled in from the table. A record cut short at the end of the file (a mount that
 * died mid-write) ends the file and is counted (trace_reader_cut); anything else malformed is
 * -EBADMSG with a line saying where.
 *
 * Locking: none; one reader per thread. Workload: millions of records a second for tierfs-sim,
 * so the buffer is large and a record costs a few loads.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace.h"
#include "trace_i.h"

#define RBUF_LEN (1u << 20)

struct trace_reader {
	int fd;
	struct trace_hdr hdr;
	uint8_t *buf;		  /* RBUF_LEN bytes */
	size_t pos, end;	  /* unread bytes are buf[pos..end) */
	bool eof;		  /* read(2) said so */
	uint64_t offset;	  /* file offset of buf[pos] */
	uint64_t cut;		  /* bytes of a last record cut short */
	struct trace_objrec *obj; /* the file's object records, by ref */
	uint32_t nobj, capobj;
};

/* Have at least @want unread bytes in the buffer, unless the file ends first. @return the
 * bytes available (< @want only at the end), or -errno. */
static ssize_t fill(struct trace_reader *r, size_t want)
{
	if (r->end - r->pos >= want || r->eof)
		return (ssize_t)(r->end - r->pos);
	memmove(r->buf, r->buf + r->pos, r->end - r->pos);
	r->end -= r->pos;
	r->pos = 0;
	while (r->end < want && !r->eof) {
		ssize_t n = read(r->fd, r->buf + r->end, RBUF_LEN - r->end);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			r->eof = true;
		r->end += (size_t)n;
	}
	return (ssize_t)(r->end - r->pos);
}

int trace_reader_open(const char *path, struct trace_reader **ret, char *err, size_t errlen)
{
	struct trace_reader *r = calloc(1, sizeof(*r));
	ssize_t n;
	int e;

	if (!r)
		return -ENOMEM;
	r->buf = malloc(RBUF_LEN);
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!r->buf || r->fd < 0) {
		e = r->buf ? -errno : -ENOMEM;
		snprintf(err, errlen, "%s: %s", path, strerror(-e));
		goto fail;
	}
	n = fill(r, TRACE_HDR_LEN);
	e = n < 0 ? (int)n : n < TRACE_HDR_LEN ? -EBADMSG : trace_get_hdr(r->buf, &r->hdr);
	if (e < 0) {
		snprintf(err, errlen, "%s: %s", path,
			 e == -EPROTO	 ? "a tierfs trace of another format version"
			 : e == -EBADMSG ? "not a tierfs trace (no TIERFSTR header)"
					 : strerror(-e));
		e = e == -EPROTO ? -EBADMSG : e;
		goto fail;
	}
	r->pos = TRACE_HDR_LEN;
	r->offset = TRACE_HDR_LEN;
	*ret = r;
	return 0;
fail:
	trace_reader_close(r);
	return e;
}

const struct trace_hdr *trace_reader_hdr(const struct trace_reader *r)
{
	return &r->hdr;
}

uint64_t trace_reader_cut(const struct trace_reader *r)
{
	return r->cut;
}

static int add_obj(struct trace_reader *r, const uint8_t *p)
{
	if (r->nobj == r->capobj) {
		uint32_t cap = r->capobj ? 2 * r->capobj : 256;
		struct trace_objrec *o = realloc(r->obj, cap * sizeof(*o));

		if (!o)
			return -ENOMEM;
		r->obj = o;
		r->capobj = cap;
	}
	trace_get_obj(p, &r->obj[r->nobj++]);
	return 0;
}

/* A read record at @p into *ret, with its object. @return 1 or -EBADMSG. */
static int get_read(struct trace_reader *r, const uint8_t *p, struct trace_read *ret, char *err,
		    size_t errlen)
{
	uint32_t ref;

	trace_get_read(p, ret, &ref);
	if (ref >= r->nobj) {
		snprintf(err, errlen, "a read at byte %llu names object record %u of %u",
			 (unsigned long long)r->offset, ref, r->nobj);
		return -EBADMSG;
	}
	ret->obj = r->obj[ref].obj;
	ret->ver = r->obj[ref].ver;
	ret->size = r->obj[ref].size;
	ret->mtime = r->obj[ref].mtime;
	return 1;
}

int trace_reader_next(struct trace_reader *r, struct trace_read *ret, char *err, size_t errlen)
{
	for (;;) {
		ssize_t n =
		    fill(r, TRACE_OBJ_LEN > TRACE_READ_LEN ? TRACE_OBJ_LEN : TRACE_READ_LEN);
		const uint8_t *p = r->buf + r->pos;
		size_t len;
		int e;

		if (n <= 0)
			return (int)n;
		len = p[0] == TRACE_TYPE_OBJ ? TRACE_OBJ_LEN : TRACE_READ_LEN;
		if (p[0] != TRACE_TYPE_OBJ && p[0] != TRACE_TYPE_READ) {
			snprintf(err, errlen, "an unknown record (type 0x%02x) at byte %llu", p[0],
				 (unsigned long long)r->offset);
			return -EBADMSG;
		}
		if ((size_t)n < len) {
			r->cut = (uint64_t)n; /* the last record, cut short */
			r->pos = r->end;
			return 0;
		}
		e = p[0] == TRACE_TYPE_OBJ ? add_obj(r, p) : get_read(r, p, ret, err, errlen);
		r->pos += len;
		r->offset += len;
		if (e != 0)
			return e;
	}
}

void trace_reader_close(struct trace_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	free(r->obj);
	free(r);
}
