/*
 * fleet_value.h - how a block is written into the fleet tier (Redis) and checked when it comes
 * back: the value's framing and the key it is stored under. Pure code, no I/O: the fleet tier
 * (fleet.c) frames and checks, backend/ only moves opaque bytes (and, in backend/mac.c, computes the MAC that fleet.c
 * hands in here as a function).
 *
 * The fleet tier is written by many processes, versions and possibly other programs; what it
 * hands back may be stale, truncated, another block's, or simply wrong, and whoever can write
 * to Redis can write any bytes at all. A value is served only if its header names exactly the
 * block asked for (oid, block index, block size, length) and, with the fleet's key
 * (shared_key), its MAC checks; without a key, its CRC-32C. Anything else is rejected and the
 * block is fetched from the store.
 *
 *   0      4      8            24    32   36    40    44    48        64        80
 *   |magic |format| oid (hi,lo) | blk | bs | len | crc | mac | salt 16 | tag 16 | data (len)
 *   "TFSB"   2      little-endian integers      crc32c over bytes 0..40 and data
 *                                               mac: 0 none (salt, tag zero), 1 the fleet's
 *                                               MAC: tag over bytes 0..64 and data, keyed
 *                                               by the fleet's key and the salt
 *
 * Format 1 (a 48-byte header, CRC only) is refused as another format: a fleet that turns
 * shared_key on writes over its old values as it reads them.
 */
#ifndef TIERFS_FLEET_VALUE_H
#define TIERFS_FLEET_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

#define FV_HDR_LEN    80u
#define FV_FORMAT     2u
#define FV_SALT_LEN   16u
#define FV_TAG_LEN    16u
#define FV_MAC_NONE   0u  /* the header's mac field: no MAC, CRC-32C only */
#define FV_MAC_KEYED  1u  /* ... the fleet's keyed MAC (backend/mac.h) */
#define FV_KEY_MAX    160u /* longest key fv_key writes, NUL included, for a prefix of 64 */
#define FV_PREFIX_MAX 64u

/*
 * A keyed MAC, supplied by the caller (cache/ has no cryptography; backend/mac.h has the
 * fleet's). @fn writes into @ret_tag (FV_TAG_LEN bytes) the MAC of @a (@alen bytes) followed
 * by @b (@blen bytes), under the key behind @arg and the value's @salt (FV_SALT_LEN bytes).
 * It returns 0 or -errno, and must be callable from any thread.
 */
struct fv_mac {
	int (*fn)(void *arg, const unsigned char *salt, const void *a, size_t alen, const void *b,
		  size_t blen, unsigned char *ret_tag);
	void *arg;
};

/* Write the header of block @k (blocks of @block_size bytes) whose @len bytes are @data into
 * @hdr (FV_HDR_LEN bytes); the value is the header followed by the data. With @mac (not
 * NULL), the value carries its MAC under @salt (FV_SALT_LEN fresh random bytes: never one
 * used before). @return 0 or the MAC's -errno (then @hdr is not a value). */
int fv_header(void *hdr, struct cache_key k, uint32_t block_size, const void *data,
	      uint32_t len, const struct fv_mac *mac, const unsigned char *salt);

/*
 * Check value @val of @vlen bytes against block @k of @block_size, @len bytes long: with @mac
 * (not NULL) by its MAC, else by its CRC-32C (a value with a MAC has its CRC too).
 * @return 0 and *ret_data pointing at its @len bytes of data inside @val; -EPROTO not a value
 * of ours (short, bad magic, unknown MAC kind, stray bytes) or another format; -ESTALE a value
 * of another block, block size or length; -EBADMSG a CRC mismatch or a length that disagrees
 * with @vlen (truncated or padded); -ENOKEY no MAC where @mac asks for one; -EKEYREJECTED a
 * MAC that does not check (forged, or another key's); or the MAC's own -errno.
 */
int fv_check(const void *val, size_t vlen, struct cache_key k, uint32_t block_size,
	     uint32_t len, const struct fv_mac *mac, const void **ret_data);

/* fv_check for a value whose header (FV_HDR_LEN bytes) and data lie apart: @hdr and @data,
 * @vlen bytes in all. The same answers; the data is where the caller put it. */
int fv_check_parts(const void *hdr, const void *data, size_t vlen, struct cache_key k,
		   uint32_t block_size, uint32_t len, const struct fv_mac *mac);

/* The key of block @k under @prefix (at most FV_PREFIX_MAX bytes, may be ""):
 * "<prefix>tfs1:<oid hex 32>:<blk hex>:<block_size>". Written like snprintf into @buf.
 * @return its length. */
int fv_key(char *buf, size_t n, const char *prefix, struct cache_key k, uint32_t block_size);

#endif
