/*
 * tracefmt.c - the bytes of a trace file (docs/trace-format.md), and the salted hash that
 * names objects in it.
 *
 * A file is a header, then records back to back. Every integer is little-endian. A record's
 * first byte says what it is, and so its length:
 *
 *   header (64)  "TIERFSTR" | version u16 | header, object and read record lengths u16 x3 |
 *                trace id u64 | part u32 | block_size u32 | start (CLOCK_REALTIME ns) u64 |
 *                salt 16 bytes | flags u8 (1: complete) | reserved 7 bytes
 *   object (32)  'O' 0 0 0 | ver u32 | obj u64 | size u64 | mtime i64
 *   read (40)    'R' tier flags 0 | object ref u32 | t_ns u64 | off u64 | len u32 |
 *                lat_us u32 | fetched u32 | stream u32
 *
 * An object is described once per file (the writer keeps a table of what it described), and
 * a read names it by its record's index in the file, so a read costs 40 bytes and each file
 * can be read alone. A reader refuses a version it does not know; the lengths in the header
 * are there so that a later version can add fields at the end of a record and still be read
 * by skipping them (a rule for version 2's reader, not a promise of this one).
 *
 * The hash is SipHash-2-4 (Aumasson and Bernstein) keyed by the trace's salt: a keyed hash,
 * so that the same key hashes differently in two traces with two salts, and a list of likely
 * names hashed in advance matches nothing.
 *
 * No state, no locking. Workload: a handful of stores per read written, or read back.
 */
#include <errno.h>
#include <string.h>

#include "trace.h"
#include "trace_i.h"

static const char *const tier_names[TRACE_NTIERS] = {
    [TRACE_HOT] = "hot",       [TRACE_LAGGING] = "lagging", [TRACE_DISK] = "disk",
    [TRACE_FLEET] = "fleet",   [TRACE_STORE] = "store",
};

const char *trace_tier_name(unsigned t)
{
	if (t == TRACE_NONE)
		return "none";
	return t < TRACE_NTIERS ? tier_names[t] : NULL;
}

uint8_t trace_tier_code(const char *name)
{
	for (unsigned t = 0; name && t < TRACE_NTIERS; t++)
		if (strcmp(name, tier_names[t]) == 0)
			return (uint8_t)t;
	return TRACE_NONE;
}

/* ---- little-endian fields ------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- header and records --------------------------------------------------------------------- */

void trace_put_hdr(uint8_t *buf, const struct trace_hdr *h)
{
	memset(buf, 0, TRACE_HDR_LEN);
	memcpy(buf, TRACE_MAGIC, 8);
	put16(buf + 8, TRACE_VERSION);
	put16(buf + 10, TRACE_HDR_LEN);
	put16(buf + 12, TRACE_OBJ_LEN);
	put16(buf + 14, TRACE_READ_LEN);
	put64(buf + 16, h->id);
	put32(buf + 24, h->part);
	put32(buf + 28, h->block_size);
	put64(buf + 32, h->start_wall_ns);
	memcpy(buf + 40, h->salt, TRACE_SALT_LEN);
	buf[TRACE_HDR_FLAGS] = h->complete ? TRACE_HDR_COMPLETE : 0;
}

int trace_get_hdr(const uint8_t *buf, struct trace_hdr *ret)
{
	if (memcmp(buf, TRACE_MAGIC, 8) != 0)
		return -EBADMSG;
	if (get16(buf + 8) != TRACE_VERSION || get16(buf + 10) != TRACE_HDR_LEN ||
	    get16(buf + 12) != TRACE_OBJ_LEN || get16(buf + 14) != TRACE_READ_LEN)
		return -EPROTO;
	ret->id = get64(buf + 16);
	ret->part = get32(buf + 24);
	ret->block_size = get32(buf + 28);
	ret->start_wall_ns = get64(buf + 32);
	memcpy(ret->salt, buf + 40, TRACE_SALT_LEN);
	ret->complete = buf[TRACE_HDR_FLAGS] & TRACE_HDR_COMPLETE;
	return 0;
}

void trace_put_obj(uint8_t *buf, const struct trace_objrec *o)
{
	buf[0] = TRACE_TYPE_OBJ;
	buf[1] = buf[2] = buf[3] = 0;
	put32(buf + 4, o->ver);
	put64(buf + 8, o->obj);
	put64(buf + 16, o->size);
	put64(buf + 24, (uint64_t)o->mtime);
}

void trace_get_obj(const uint8_t *buf, struct trace_objrec *ret)
{
	ret->ver = get32(buf + 4);
	ret->obj = get64(buf + 8);
	ret->size = get64(buf + 16);
	ret->mtime = (int64_t)get64(buf + 24);
}

void trace_put_read(uint8_t *buf, const struct trace_read *r, uint32_t ref)
{
	buf[0] = TRACE_TYPE_READ;
	buf[1] = r->tier;
	buf[2] = r->flags;
	buf[3] = 0;
	put32(buf + 4, ref);
	put64(buf + 8, r->t_ns);
	put64(buf + 16, r->off);
	put32(buf + 24, r->len);
	put32(buf + 28, r->lat_us);
	put32(buf + 32, r->fetched);
	put32(buf + 36, r->stream);
}

void trace_get_read(const uint8_t *buf, struct trace_read *ret, uint32_t *ret_ref)
{
	ret->tier = buf[1];
	ret->flags = buf[2];
	*ret_ref = get32(buf + 4);
	ret->t_ns = get64(buf + 8);
	ret->off = get64(buf + 16);
	ret->len = get32(buf + 24);
	ret->lat_us = get32(buf + 28);
	ret->fetched = get32(buf + 32);
	ret->stream = get32(buf + 36);
}

/* ---- SipHash-2-4 ---------------------------------------------------------------------------- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static void sipround(uint64_t v[4])
{
	v[0] += v[1];
	v[1] = ROTL(v[1], 13);
	v[1] ^= v[0];
	v[0] = ROTL(v[0], 32);
	v[2] += v[3];
	v[3] = ROTL(v[3], 16);
	v[3] ^= v[2];
	v[0] += v[3];
	v[3] = ROTL(v[3], 21);
	v[3] ^= v[0];
	v[2] += v[1];
	v[1] = ROTL(v[1], 17);
	v[1] ^= v[2];
	v[2] = ROTL(v[2], 32);
}

static void sipword(uint64_t v[4], uint64_t m)
{
	v[3] ^= m;
	sipround(v);
	sipround(v);
	v[0] ^= m;
}

uint64_t trace_hash(const uint8_t salt[TRACE_SALT_LEN], const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t k0 = get64(salt), k1 = get64(salt + 8), last = (uint64_t)len << 56;
	uint64_t v[4] = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL,
			 k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
	size_t i;

	for (i = 0; i + 8 <= len; i += 8)
		sipword(v, get64(p + i));
	for (size_t j = 0; i + j < len; j++)
		last |= (uint64_t)p[i + j] << (8 * j);
	sipword(v, last);
	v[2] ^= 0xff;
	for (int r = 0; r < 4; r++)
		sipround(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}
