/*
 * fleetval.c - the framing of blocks in a shared tier (see fleetval.h for the layout).
 *
 * Integers are written little-endian byte by byte, so a value written on one machine checks on
 * any other. The CRC covers the header's first 40 bytes (everything that names the block) and
 * the data, so a value moved under another key, or with its header edited, fails as surely as
 * one with a flipped data byte. No locks, no state: called from any thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "crc32c.h"
#include "fleetval.h"

static const unsigned char magic[4] = {'T', 'F', 'S', 'B'};

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void fv_header(void *hdr, struct cache_key k, uint32_t block_size, const void *data,
		uint32_t len)
{
	unsigned char *h = hdr;

	memcpy(h, magic, 4);
	put32(h + 4, FV_FORMAT);
	put64(h + 8, k.oid.hi);
	put64(h + 16, k.oid.lo);
	put64(h + 24, k.blk);
	put32(h + 32, block_size);
	put32(h + 36, len);
	put32(h + 40, crc32c(crc32c(0, h, 40), data, len));
	put32(h + 44, 0);
}

int fv_check_parts(const void *hdr, const void *data, size_t vlen, struct cache_key k,
		    uint32_t block_size, uint32_t len)
{
	const unsigned char *h = hdr;

	if (vlen < FV_HDR_LEN || memcmp(h, magic, 4) != 0 || get32(h + 4) != FV_FORMAT ||
	    get32(h + 44) != 0)
		return -EPROTO;
	if (get64(h + 8) != k.oid.hi || get64(h + 16) != k.oid.lo || get64(h + 24) != k.blk ||
	    get32(h + 32) != block_size || get32(h + 36) != len)
		return -ESTALE;
	if (vlen - FV_HDR_LEN != len)
		return -EBADMSG;
	if (crc32c(crc32c(0, h, 40), data, len) != get32(h + 40))
		return -EBADMSG;
	return 0;
}

int fv_check(const void *val, size_t vlen, struct cache_key k, uint32_t block_size,
	      uint32_t len, const void **ret_data)
{
	const unsigned char *h = val;
	int r = fv_check_parts(h, vlen < FV_HDR_LEN ? h : h + FV_HDR_LEN, vlen, k, block_size,
				len);

	if (r == 0)
		*ret_data = h + FV_HDR_LEN;
	return r;
}

int fv_key(char *buf, size_t n, const char *prefix, struct cache_key k, uint32_t block_size)
{
	return snprintf(buf, n, "%.*stfs1:%016" PRIx64 "%016" PRIx64 ":%" PRIx64 ":%" PRIu32,
			(int)FV_PREFIX_MAX, prefix, k.oid.hi, k.oid.lo, k.blk, block_size);
}
