/*
 * fleetval.h - how a block is written into a shared tier (Redis) and checked when it comes
 * back: the value's framing and the key it is stored under. Pure code, no I/O: fs/ frames and
 * checks, backend/ only moves opaque bytes.
 *
 * A shared tier is written by many processes, versions and possibly other programs; what it
 * hands back may be stale, truncated, another block's, or simply wrong. A value is served only
 * if its header names exactly the block asked for (oid, block index, block size, length) and
 * its CRC-32C matches; anything else is rejected and the block is fetched from the store.
 *
 *   value:  0        4        8                 24        32      36      40      44     48
 *           | magic  | format |   oid (hi, lo)   |  blk    |  bs   |  len  | crc32c| zero |  data (len)
 *           "TFSB"     1         little-endian integers          crc over bytes 0..40 and data
 */
#ifndef TIERFS_FLEETVAL_H
#define TIERFS_FLEETVAL_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

#define FV_HDR_LEN 48u
#define FV_FORMAT  1u
#define FV_KEY_MAX 160u /* longest key fv_key writes, NUL included, for a prefix of 64 */
#define FV_PREFIX_MAX 64u

/* Write the header of block @k (blocks of @block_size bytes) whose @len bytes are @data into
 * @hdr (FV_HDR_LEN bytes); the value is the header followed by the data. */
void fv_header(void *hdr, struct cache_key k, uint32_t block_size, const void *data,
		uint32_t len);

/*
 * Check value @val of @vlen bytes against block @k of @block_size, @len bytes long.
 * @return 0 and *ret_data pointing at its @len bytes of data inside @val; -EPROTO not a value
 * of ours (short, bad magic) or another format; -ESTALE a value of another block, block size
 * or length; -EBADMSG a CRC mismatch or a length that disagrees with @vlen (truncated or
 * padded).
 */
int fv_check(const void *val, size_t vlen, struct cache_key k, uint32_t block_size,
	      uint32_t len, const void **ret_data);

/* fv_check for a value whose header (FV_HDR_LEN bytes) and data lie apart: @hdr and @data,
 * @vlen bytes in all. The same answers; the data is where the caller put it. */
int fv_check_parts(const void *hdr, const void *data, size_t vlen, struct cache_key k,
		    uint32_t block_size, uint32_t len);

/* The key of block @k under @prefix (at most FV_PREFIX_MAX bytes, may be ""):
 * "<prefix>tfs1:<oid hex 32>:<blk hex>:<block_size>". Written like snprintf into @buf.
 * @return its length. */
int fv_key(char *buf, size_t n, const char *prefix, struct cache_key k, uint32_t block_size);

#endif
