/*
 * trace_i.h - declarations shared only inside trace/: the byte layout of a trace file's header
 * and records (tracefmt.c), used by the writer and the reader. Unit tests include it too.
 */
#ifndef TIERFS_TRACE_I_H
#define TIERFS_TRACE_I_H

#include <stdint.h>

#include "trace.h"

#define TRACE_TYPE_OBJ	'O' /* first byte of an object record */
#define TRACE_TYPE_READ 'R' /* first byte of a read record */

/* An object record: one version of one object, described once per file before its reads. */
struct trace_objrec {
	uint64_t obj;  /* salted hash of the key */
	uint32_t ver;  /* salted hash of the version */
	uint64_t size; /* bytes */
	int64_t mtime; /* seconds since the epoch */
};

/* What the writer's thread does every flush_ms: the ring into the buffer, and the buffer to the
 * file once half full or held through a second's drains (trace_writer_flush writes it all).
 * @return 0 or the trace's -errno. For tests: the thread calls it. */
int trace_writer_drain(struct trace_writer *w);

/* Write @h as TRACE_HDR_LEN bytes at @buf. */
void trace_put_hdr(uint8_t *buf, const struct trace_hdr *h);
/* Read a header. @return 0; -EBADMSG (not a trace), -EPROTO (a trace of another version). */
int trace_get_hdr(const uint8_t *buf, struct trace_hdr *ret);

/* TRACE_OBJ_LEN bytes. */
void trace_put_obj(uint8_t *buf, const struct trace_objrec *o);
void trace_get_obj(const uint8_t *buf, struct trace_objrec *ret);

/* TRACE_READ_LEN bytes: @r's fields but obj, ver, size and mtime, which object record @ref
 * (its index in the file, from 0) holds. */
void trace_put_read(uint8_t *buf, const struct trace_read *r, uint32_t ref);
/* The same back; the object's fields are left for the caller to fill from record *ret_ref. */
void trace_get_read(const uint8_t *buf, struct trace_read *ret, uint32_t *ret_ref);

#endif
