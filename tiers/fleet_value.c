/*
 * fleet_value.c - the framing of blocks in the fleet tier (see fleet_value.h for the layout).
 *
 * Integers are written little-endian byte by byte, so a value written on one machine checks on
 * any other. The CRC covers the header's first 40 bytes (everything that names the block) and
 * the data, so a value moved under another key, or with its header edited, fails as surely as
 * one with a flipped data byte. That stops accidents only: anyone who can write to Redis can
 * recompute a CRC. The MAC (with shared_key) stops them too: it covers the header's first 64
 * bytes (the block's name, its length, the CRC, the MAC kind and the salt) and the data, under
 * a key only the fleet's mounts hold, so a value can be made only by a mount of the fleet, and
 * only for the block it names.
 *
 * A check with a MAC does not compute the CRC: the MAC covers the same bytes, and more
 * strongly; the CRC is still written, so a mount without the key (a fleet half-way through
 * turning it on) can check the value the old way. A check without a MAC accepts a value with
 * one by its CRC: such a mount trusts Redis anyway. Tags are compared in constant time (a
 * forger must not learn how many of its bytes were right).
 *
 * No locks, no state: called from any thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "crc32c.h"
#include "fleet_value.h"

#define OFF_CRC  40u /* the CRC covers the bytes before it */
#define OFF_MAC  44u
#define OFF_SALT 48u
#define OFF_TAG  64u /* the MAC covers the bytes before it */

_Static_assert(OFF_TAG + FV_TAG_LEN == FV_HDR_LEN, "the tag ends the header");
_Static_assert(OFF_SALT + FV_SALT_LEN == OFF_TAG, "the salt is just before the tag");

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

/* Whether @a and @b (@n bytes) differ, in time that depends on @n only. */
static bool differ(const unsigned char *a, const unsigned char *b, size_t n)
{
	volatile unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= a[i] ^ b[i];
	return d != 0;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	unsigned char d = 0;

	for (size_t i = 0; i < n; i++)
		d |= p[i];
	return d == 0;
}

int fv_header(void *hdr, struct cache_key k, uint32_t block_size, const void *data,
	      uint32_t len, const struct fv_mac *mac, const unsigned char *salt)
{
	unsigned char *h = hdr;

	memcpy(h, magic, 4);
	put32(h + 4, FV_FORMAT);
	put64(h + 8, k.oid.hi);
	put64(h + 16, k.oid.lo);
	put64(h + 24, k.blk);
	put32(h + 32, block_size);
	put32(h + 36, len);
	put32(h + OFF_CRC, crc32c(crc32c(0, h, OFF_CRC), data, len));
	put32(h + OFF_MAC, mac ? FV_MAC_KEYED : FV_MAC_NONE);
	memset(h + OFF_SALT, 0, FV_SALT_LEN + FV_TAG_LEN);
	if (!mac)
		return 0;
	memcpy(h + OFF_SALT, salt, FV_SALT_LEN);
	return mac->fn(mac->arg, salt, h, OFF_TAG, data, len, h + OFF_TAG);
}

/* The MAC of a value whose framing and name have checked. @return 0 or -errno. */
static int check_mac(const unsigned char *h, const void *data, uint32_t len,
		     const struct fv_mac *mac)
{
	unsigned char tag[FV_TAG_LEN];
	int r;

	if (get32(h + OFF_MAC) != FV_MAC_KEYED)
		return -ENOKEY;
	r = mac->fn(mac->arg, h + OFF_SALT, h, OFF_TAG, data, len, tag);
	if (r < 0)
		return r;
	return differ(tag, h + OFF_TAG, FV_TAG_LEN) ? -EKEYREJECTED : 0;
}

int fv_check_parts(const void *hdr, const void *data, size_t vlen, struct cache_key k,
		   uint32_t block_size, uint32_t len, const struct fv_mac *mac)
{
	const unsigned char *h = hdr;
	uint32_t kind;

	if (vlen < FV_HDR_LEN || memcmp(h, magic, 4) != 0 || get32(h + 4) != FV_FORMAT)
		return -EPROTO;
	kind = get32(h + OFF_MAC);
	if (kind > FV_MAC_KEYED ||
	    (kind == FV_MAC_NONE && !all_zero(h + OFF_SALT, FV_SALT_LEN + FV_TAG_LEN)))
		return -EPROTO;
	if (get64(h + 8) != k.oid.hi || get64(h + 16) != k.oid.lo || get64(h + 24) != k.blk ||
	    get32(h + 32) != block_size || get32(h + 36) != len)
		return -ESTALE;
	if (vlen - FV_HDR_LEN != len)
		return -EBADMSG;
	if (mac)
		return check_mac(h, data, len, mac);
	if (crc32c(crc32c(0, h, OFF_CRC), data, len) != get32(h + OFF_CRC))
		return -EBADMSG;
	return 0;
}

int fv_check(const void *val, size_t vlen, struct cache_key k, uint32_t block_size,
	     uint32_t len, const struct fv_mac *mac, const void **ret_data)
{
	const unsigned char *h = val;
	int r = fv_check_parts(h, vlen < FV_HDR_LEN ? h : h + FV_HDR_LEN, vlen, k, block_size,
			       len, mac);

	if (r == 0)
		*ret_data = h + FV_HDR_LEN;
	return r;
}

int fv_key(char *buf, size_t n, const char *prefix, struct cache_key k, uint32_t block_size)
{
	return snprintf(buf, n, "%.*stfs1:%016" PRIx64 "%016" PRIx64 ":%" PRIx64 ":%" PRIu32,
			(int)FV_PREFIX_MAX, prefix, k.oid.hi, k.oid.lo, k.blk, block_size);
}
