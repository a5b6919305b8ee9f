/*
 * key.c - the names of cached blocks: which version of which object, and which block of it.
 *
 * Every tier (the memory rings today, a disk tier and a shared Redis tier later) stores a
 * block under the same key, so the key must mean the same thing in every process and after
 * every restart. It is built from bytes only, never from a pointer, an inode number or a
 * counter:
 *
 *     oid = first 128 bits of SHA-256( "tierfs-oid-1" NUL store NUL path NUL version )
 *     key = (oid, block index)
 *
 *   store    the store's identity without secrets (scheme://bucket/prefix, base URL, directory)
 *   path     the object's path relative to the store
 *   version  the ETag, or for file:// "dev-ino-size-mtime_ns"; "size-mtime" when a store gives
 *            no ETag at all
 *
 * None of the three can contain a NUL, so the encoding is unambiguous: two different triples
 * are two different messages. A different version of the same path is a different oid, so a
 * superseded version's blocks can never be served for the new one; they are not dropped, they
 * age out of the ring like any block nobody reads (handles still open on the old version may
 * go on reading them).
 *
 * Collisions: an accidental collision among n versions has probability about n^2 / 2^129
 * (1e-27 for a billion versions). A deliberate one (someone who can upload objects, making
 * one object's blocks answer for another's) needs about 2^64 SHA-256 evaluations with the
 * generic birthday attack, as SHA-256 has no known shortcut: far beyond anyone who would
 * bother, and a 64-bit hash (2^32 work) would not have been. Hashing happens once per
 * version seen (lookup, open), never per block, so its cost does not matter.
 *
 * SHA-256 is written out here (FIPS 180-4) so that cache/ keeps depending on nothing.
 * No state, no locking.
 */
#include <stdint.h>
#include <string.h>

#include "cache.h"
#include "cache_i.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

static uint32_t ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
			hh = h[7];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = hh + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) +
			      K[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));

		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += hh;
}

void cache_sha256(const struct cache_sha256_part *parts, size_t n, unsigned char ret[32])
{
	uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
			 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	unsigned char buf[64];
	size_t used = 0;
	uint64_t total = 0;

	for (size_t i = 0; i < n; i++) {
		const unsigned char *p = parts[i].data;
		size_t len = parts[i].len;

		total += len;
		while (len) {
			size_t take = 64 - used < len ? 64 - used : len;

			memcpy(buf + used, p, take);
			used += take;
			p += take;
			len -= take;
			if (used == 64) {
				compress(h, buf);
				used = 0;
			}
		}
	}
	buf[used++] = 0x80;
	if (used > 56) {
		memset(buf + used, 0, 64 - used);
		compress(h, buf);
		used = 0;
	}
	memset(buf + used, 0, 56 - used);
	total *= 8;
	for (int i = 0; i < 8; i++)
		buf[56 + i] = (unsigned char)(total >> (56 - 8 * i));
	compress(h, buf);
	for (int i = 0; i < 8; i++) {
		ret[4 * i] = (unsigned char)(h[i] >> 24);
		ret[4 * i + 1] = (unsigned char)(h[i] >> 16);
		ret[4 * i + 2] = (unsigned char)(h[i] >> 8);
		ret[4 * i + 3] = (unsigned char)h[i];
	}
}

struct cache_oid cache_oid_make(const char *store, const char *path, const char *version)
{
	static const char tag[] = "tierfs-oid-1"; /* with its NUL */
	struct cache_sha256_part parts[] = {
		{tag, sizeof(tag)},
		{store, strlen(store) + 1},
		{path, strlen(path) + 1},
		{version, strlen(version)},
	};
	unsigned char d[32];
	struct cache_oid id = {0, 0};

	cache_sha256(parts, sizeof(parts) / sizeof(parts[0]), d);
	for (int i = 0; i < 8; i++) {
		id.hi = id.hi << 8 | d[i];
		id.lo = id.lo << 8 | d[8 + i];
	}
	return id;
}
