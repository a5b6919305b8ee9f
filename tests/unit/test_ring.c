/*
 * test_ring.c - unit tests for cache/ring.c, the segmented ring store.
 *
 * Directed tests pin down each rule (placement, visibility, TTL boundary, rotation, pins,
 * index capacity, duplicate keys, geometry). test_random_model then drives the ring with
 * random operations and checks every answer against a naive reference model (SQLite's bitvec
 * test): the model keeps, per segment, the plain list of records inserted and answers a
 * lookup by scanning segments newest to oldest and records last to first. The seed is fixed
 * (override with TIERFS_RING_SEED) and printed with any failure. test_threads hammers one
 * ring from several threads and checks that bytes behind a pin never change.
 *
 * Time is always passed in; nothing sleeps.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache_i.h"

#define ALIGN64(x) (((uint64_t)(x) + 63) & ~(uint64_t)63)
#define ALIGN4K(x) (((uint64_t)(x) + 4095) & ~(uint64_t)4095)
/* where the ring puts a block of @len after @c: a page or more at a page boundary */
#define PLACE(c, len) ((len) >= 4096 ? ALIGN4K(c) : ALIGN64(c))
/* what a segment's size is a multiple of, with blocks up to @mb bytes */
#define SEG_ALIGN(mb) ((mb) >= 4096 ? (uint64_t)4096 : (uint64_t)64)
#define KEY(o, b)  ((struct cache_key){.oid = {.lo = (o)}, .blk = (b)})

static uint64_t mix(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t next_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ULL;
	return mix(*state);
}

/* Fill @p with @len bytes of a stream determined by @seed. */
static void pat_fill(void *p, uint32_t len, uint64_t seed)
{
	unsigned char *c = p;
	uint64_t st = seed, v;
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		v = next_rand(&st);
		memcpy(c + i, &v, 8);
	}
	if (i < len) {
		v = next_rand(&st);
		memcpy(c + i, &v, len - i);
	}
}

static bool pat_check(const void *p, uint32_t len, uint64_t seed)
{
	const unsigned char *c = p;
	uint64_t st = seed, v;
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		v = next_rand(&st);
		if (memcmp(c + i, &v, 8) != 0)
			return false;
	}
	if (i < len) {
		v = next_rand(&st);
		if (memcmp(c + i, &v, len - i) != 0)
			return false;
	}
	return true;
}

/* Reserve, fill with pattern @seed, commit, unpin. @return reserve's result; *ret_ref if 0. */
static int put(struct ring *r, struct cache_key k, uint32_t len, uint64_t now, uint64_t seed,
	       struct ring_ref *ret_ref)
{
	struct ring_ref ref;
	int rc = ring_reserve(r, k, len, now, &ref);

	if (rc < 0)
		return rc;
	pat_fill(ref.data, len, seed);
	ring_commit(r, &ref);
	ring_unpin(r, &ref);
	if (ret_ref)
		*ret_ref = ref;
	return 0;
}

/* Assert @k is visible at @now with @len bytes of pattern @seed. */
static void expect_block(struct ring *r, struct cache_key k, uint64_t now, uint32_t len,
			 uint64_t seed)
{
	struct ring_ref ref;

	assert_int_equal(ring_lookup(r, k, now, &ref), 0);
	assert_int_equal(ref.len, len);
	assert_true(pat_check(ref.data, len, seed));
	ring_unpin(r, &ref);
	assert_true(ring_contains(r, k, now));
}

static void expect_gone(struct ring *r, struct cache_key k, uint64_t now)
{
	struct ring_ref ref;

	assert_int_equal(ring_lookup(r, k, now, &ref), -ENOENT);
	assert_false(ring_contains(r, k, now));
}

static void expect_stats(struct ring *r, uint64_t now, uint64_t blocks, uint64_t bytes)
{
	struct ring_stats st;

	ring_get_stats(r, now, &st);
	assert_int_equal(st.blocks, blocks);
	assert_int_equal(st.bytes, bytes);
}

/* ring_new for the tests that only want a ring: NULL on failure. */
static struct ring *ring_make(uint64_t size, uint32_t nseg, uint32_t max_block, uint64_t ttl_ns)
{
	struct ring *r = NULL;

	return ring_new(size, nseg, max_block, ttl_ns, &r) == 0 ? r : NULL;
}

/* ------------------------------------------------------------------------------------------ */

static void test_new_refuses(void **state)
{
	struct ring *r = NULL;

	(void)state;
	assert_int_equal(ring_new(1 << 20, 0, 4096, 0, &r), -EINVAL);
	assert_int_equal(ring_new(1 << 20, 1, 4096, 0, &r), -EINVAL);
	assert_int_equal(ring_new(1 << 20, 3, 4096, 0, &r), -EINVAL);
	assert_int_equal(ring_new(1 << 20, 4, 0, 0, &r), -EINVAL);
	assert_int_equal(ring_new(0, 4, 64, 0, &r), -EINVAL);
	assert_null(r); /* written only on success */
	/* seg_size 128 holds exactly two 64-byte blocks */
	assert_int_equal(ring_geometry(4 * 128, 4, 64), 0);
	assert_int_equal(ring_new(4 * 128, 4, 64, 0, &r), 0);
	assert_non_null(r);
	assert_int_equal(ring_seg_size(r), 128);
	ring_free(r);
	/* 127 rounds down to 64 */
	assert_int_equal(ring_geometry(4 * 128 - 1, 4, 64), -EINVAL);
	assert_int_equal(ring_new(4 * 128 - 1, 4, 64, 0, &r), -EINVAL);
	/* 65-byte blocks: the second starts at 128, so a segment needs 193 -> 256 */
	assert_int_equal(ring_new(4 * 255, 4, 65, 0, &r), -EINVAL);
	r = ring_make(4 * 256, 4, 65, 0);
	assert_non_null(r);
	ring_free(r);
	/* a segment may not exceed 256 GiB (offsets are stored / 64 in 32 bits) */
	assert_int_equal(ring_geometry((uint64_t)4 << 40, 4, 4096), -EFBIG);
	assert_int_equal(ring_new((uint64_t)4 << 40, 4, 4096, 0, &r), -EFBIG);
	ring_free(NULL);
}

static void test_geometry(void **state)
{
	static const struct {
		uint64_t size;
		uint32_t nseg;
		uint64_t seg_size;
	} g[] = {
	    {1012345, 7, 144576}, {1000003, 5, 200000}, {(3 << 20) + 999, 16, 196608},
	    {16447, 4, 4096},	  {38898, 5, 7744},	{48999, 16, 3008},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
		struct ring *r = ring_make(g[i].size, g[i].nseg, 1000, 0);

		assert_non_null(r);
		assert_int_equal(ring_nseg(r), g[i].nseg);
		assert_int_equal(ring_seg_size(r), g[i].seg_size);
		ring_free(r);
	}
}

static void test_einval(void **state)
{
	struct ring *r = ring_make(4 * 65536, 4, 4096, 0);
	struct ring_ref ref;
	struct ring_stats st;

	(void)state;
	assert_non_null(r);
	assert_int_equal(ring_reserve(r, KEY(1, 1), 0, 0, &ref), -EINVAL);
	assert_int_equal(ring_reserve(r, KEY(1, 1), 4097, 0, &ref), -EINVAL);
	assert_int_equal(ring_reserve(r, KEY(1, 1), UINT32_MAX, 0, &ref), -EINVAL);
	ring_get_stats(r, 0, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(st.reserve_busy, 0);
	assert_int_equal(put(r, KEY(1, 1), 4096, 0, 7, NULL), 0);
	expect_block(r, KEY(1, 1), 0, 4096, 7);
	ring_free(r);
}

static void test_roundtrip(void **state)
{
	struct ring *r = ring_make(4 * 65536, 4, 4096, 0);
	struct ring_ref a, b, c, ref;
	const char msg[] = "tierfs: the quick brown fox jumps over the lazy dog";
	unsigned char buf[4096];

	(void)state;
	assert_non_null(r);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7 + 3);
	memcpy(buf, msg, sizeof(msg));

	assert_int_equal(ring_reserve(r, KEY(10, 0), 4096, 100, &a), 0);
	assert_int_equal(a.len, 4096);
	assert_int_equal(a.seg, 0);
	assert_int_equal((uintptr_t)a.data % 4096, 0); /* first block of a page-aligned arena */
	memcpy(a.data, buf, sizeof(buf));
	ring_commit(r, &a);
	ring_unpin(r, &a);

	/* small blocks follow each other at 64-byte aligned offsets */
	assert_int_equal(ring_reserve(r, KEY(10, 1), 100, 100, &b), 0);
	assert_ptr_equal(b.data, (char *)a.data + 4096);
	memset(b.data, 0xb1, 100);
	ring_commit(r, &b);
	ring_unpin(r, &b);
	assert_int_equal(ring_reserve(r, KEY(11, 0), 1, 100, &c), 0);
	assert_ptr_equal(c.data, (char *)b.data + 128);
	memset(c.data, 0xc1, 1);
	ring_commit(r, &c);
	ring_unpin(r, &c);
	/* a block of a page or more starts at the next page: a direct read can fill it */
	assert_int_equal(ring_reserve(r, KEY(12, 0), 4096, 100, &ref), 0);
	assert_ptr_equal(ref.data, (char *)a.data + 8192);
	ring_abort(r, &ref);

	assert_int_equal(ring_lookup(r, KEY(10, 0), 200, &ref), 0);
	assert_ptr_equal(ref.data, a.data);
	assert_int_equal(ref.len, 4096);
	assert_int_equal(ref.seg, 0);
	assert_memory_equal(ref.data, buf, sizeof(buf));
	assert_string_equal((char *)ref.data, msg);
	ring_unpin(r, &ref);

	assert_int_equal(ring_lookup(r, KEY(10, 1), 200, &ref), 0);
	assert_int_equal(ref.len, 100);
	for (int i = 0; i < 100; i++)
		assert_int_equal(((unsigned char *)ref.data)[i], 0xb1);
	ring_unpin(r, &ref);
	assert_int_equal(ring_lookup(r, KEY(11, 0), 200, &ref), 0);
	assert_int_equal(ref.len, 1);
	assert_int_equal(*(unsigned char *)ref.data, 0xc1);
	ring_unpin(r, &ref);

	/* keys are exact: neither field alone matches */
	expect_gone(r, KEY(11, 1), 200);
	expect_gone(r, KEY(1, 10), 200);
	expect_gone(r, KEY(0, 0), 200);
	expect_stats(r, 200, 3, 4096 + 100 + 1);
	ring_free(r);
}

static void test_reserved_invisible(void **state)
{
	struct ring *r = ring_make(4 * 65536, 4, 4096, 0);
	struct ring_ref ref;

	(void)state;
	assert_non_null(r);
	assert_int_equal(ring_reserve(r, KEY(1, 2), 300, 0, &ref), 0);
	pat_fill(ref.data, 300, 42);
	expect_gone(r, KEY(1, 2), 0);
	expect_stats(r, 0, 0, 0);
	ring_commit(r, &ref);
	expect_block(r, KEY(1, 2), 0, 300, 42);
	expect_stats(r, 0, 1, 300);
	ring_unpin(r, &ref);
	expect_block(r, KEY(1, 2), 0, 300, 42);
	ring_free(r);
}

static void test_abort(void **state)
{
	/* 4 segments of 4096 bytes, four 1024-byte blocks each */
	struct ring *r = ring_make(4 * 4096, 4, 1024, 0);
	struct ring_ref ref;
	struct ring_stats st;

	(void)state;
	assert_non_null(r);
	assert_int_equal(ring_reserve(r, KEY(1, 0), 1024, 0, &ref), 0);
	pat_fill(ref.data, 1024, 1);
	ring_abort(r, &ref);
	expect_gone(r, KEY(1, 0), 0);
	expect_stats(r, 0, 0, 0);

	/* an aborted duplicate does not hide the committed block */
	assert_int_equal(put(r, KEY(1, 1), 1000, 0, 5, NULL), 0);
	assert_int_equal(ring_reserve(r, KEY(1, 1), 500, 0, &ref), 0);
	pat_fill(ref.data, 500, 6);
	ring_abort(r, &ref);
	expect_block(r, KEY(1, 1), 0, 1000, 5);
	expect_stats(r, 0, 1, 1000);

	/*
	 * The aborts dropped their pins: writing round the ring and back into segment 0 works.
	 * Their space stays used: segment 0 now holds 1024 (aborted) + 1000 + 500 (aborted), so
	 * (2, 0) fits at 2560 and (2, 1) no longer does.
	 */
	assert_int_equal(put(r, KEY(2, 0), 1024, 0, 7, &ref), 0);
	assert_int_equal(ref.seg, 0);
	assert_int_equal(put(r, KEY(2, 1), 1024, 0, 7, &ref), 0);
	assert_int_equal(ref.seg, 1);
	for (uint64_t i = 2; i < 14; i++) {
		assert_int_equal(put(r, KEY(2, i), 1024, 0, 7, &ref), 0);
		assert_int_equal(ref.seg, (1 + (i - 1) / 4) % 4);
	}
	ring_get_stats(r, 0, &st);
	assert_int_equal(st.reserve_busy, 0);
	assert_int_equal(st.rotations, 1);
	expect_gone(r, KEY(1, 1), 0);
	ring_free(r);
}

static void test_ttl_boundary(void **state)
{
	struct ring *r = ring_make(4 * 65536, 4, 4096, 1000);
	struct ring_ref ref;
	struct ring_stats st;

	(void)state;
	assert_non_null(r);
	assert_int_equal(put(r, KEY(1, 0), 4096, 5000, 1, &ref), 0);
	assert_int_equal(ref.seg, 0);
	/* a later insert into the same segment does not extend its life */
	assert_int_equal(put(r, KEY(1, 1), 100, 5500, 2, &ref), 0);
	assert_int_equal(ref.seg, 0);

	/* visible while now - t0 < ttl, gone when now - t0 >= ttl */
	expect_block(r, KEY(1, 0), 5999, 4096, 1);
	expect_block(r, KEY(1, 1), 5999, 100, 2);
	expect_stats(r, 5999, 2, 4196);
	expect_gone(r, KEY(1, 0), 6000);
	expect_gone(r, KEY(1, 1), 6000);
	expect_stats(r, 6000, 0, 0);
	/* a clock reading before t0 counts as age 0 */
	expect_block(r, KEY(1, 0), 4000, 4096, 1);

	/* a reserve into an expired segment rotates; reusing an empty segment is no rotation */
	assert_int_equal(put(r, KEY(2, 0), 64, 6000, 3, &ref), 0);
	assert_int_equal(ref.seg, 1);
	ring_get_stats(r, 6000, &st);
	assert_int_equal(st.rotations, 0);
	assert_int_equal(st.blocks, 1);
	expect_block(r, KEY(2, 0), 6999, 64, 3);
	expect_gone(r, KEY(2, 0), 7000);
	/* one tick before expiry the reserve stays in the segment */
	assert_int_equal(put(r, KEY(2, 1), 64, 6999, 4, &ref), 0);
	assert_int_equal(ref.seg, 1);

	/* the TTL applies to lookups from now on, in both directions */
	ring_set_ttl(r, 2000);
	expect_block(r, KEY(1, 0), 6000, 4096, 1);
	expect_block(r, KEY(1, 0), 6999, 4096, 1);
	expect_gone(r, KEY(1, 0), 7000);
	expect_block(r, KEY(2, 1), 7999, 64, 4);
	ring_set_ttl(r, 0);
	expect_block(r, KEY(1, 0), UINT64_MAX, 4096, 1);
	expect_block(r, KEY(2, 0), UINT64_MAX, 64, 3);
	expect_stats(r, UINT64_MAX, 4, 4096 + 100 + 64 + 64);
	ring_set_ttl(r, 1);
	expect_block(r, KEY(2, 0), 6000, 64, 3);
	expect_gone(r, KEY(2, 0), 6001);
	ring_free(r);

	/* ttl 0: never */
	r = ring_make(4 * 65536, 4, 4096, 0);
	assert_non_null(r);
	assert_int_equal(put(r, KEY(1, 0), 10, 0, 9, NULL), 0);
	expect_block(r, KEY(1, 0), UINT64_MAX, 10, 9);
	ring_free(r);
}

static void test_rotation_evicts_oldest(void **state)
{
	/* 4 segments of 4096 bytes: exactly four 1024-byte blocks each */
	struct ring *r = ring_make(4 * 4096, 4, 1024, 0);
	struct ring_ref ref;
	struct ring_stats st;

	(void)state;
	assert_non_null(r);
	for (uint64_t n = 0; n < 100; n++) {
		assert_int_equal(put(r, KEY(3, n), 1024, n, n, &ref), 0);
		assert_int_equal(ref.seg, (n / 4) % 4);
		/* block n lives in segment n/4; the oldest 3 full segments plus the current stay */
		uint64_t first = n < 16 ? 0 : 4 * (n / 4) - 12;

		for (uint64_t k = 0; k <= n; k++) {
			if (k >= first)
				assert_true(ring_contains(r, KEY(3, k), n));
			else
				assert_false(ring_contains(r, KEY(3, k), n));
		}
		ring_get_stats(r, n, &st);
		assert_int_equal(st.blocks, n + 1 - first);
		assert_int_equal(st.bytes, 1024 * (n + 1 - first));
		assert_int_equal(st.rotations, n < 16 ? 0 : (n - 16) / 4 + 1);
		assert_int_equal(st.reserve_busy, 0);
	}
	for (uint64_t k = 99 - 15; k < 100; k++)
		expect_block(r, KEY(3, k), 100, 1024, k);
	ring_free(r);
}

/* ring_rekey renames an object's blocks in place (same bytes, no copy, pins untouched), leaves
 * other objects alone, keeps one committed entry per key, and a segment whose index is full
 * drops what it cannot rename; ring_drop forgets an object's blocks. */
static void test_rekey_and_drop(void **state)
{
	/* 4 segments of 4096 bytes; an index holds 64 entries, 64-byte blocks fill one exactly */
	struct ring *r = ring_make(4 * 4096, 4, 1024, 0);
	struct ring_ref pinned;

	(void)state;
	assert_non_null(r);
	assert_int_equal(put(r, KEY(7, 0), 1024, 1, 70, NULL), 0);
	assert_int_equal(put(r, KEY(7, 1), 1000, 1, 71, NULL), 0);
	assert_int_equal(put(r, KEY(9, 0), 1024, 1, 90, NULL), 0); /* another object */
	assert_int_equal(ring_lookup(r, KEY(7, 0), 1, &pinned), 0); /* a reader holds block 0 */
	assert_int_equal(ring_rekey(r, KEY(7, 0).oid, KEY(8, 0).oid), 2);
	expect_gone(r, KEY(7, 0), 2);
	expect_gone(r, KEY(7, 1), 2);
	expect_block(r, KEY(8, 0), 2, 1024, 70);
	expect_block(r, KEY(8, 1), 2, 1000, 71);
	expect_block(r, KEY(9, 0), 2, 1024, 90);
	expect_stats(r, 2, 3, 3048);
	assert_true(pat_check(pinned.data, 1024, 70)); /* the pin still points at the bytes */
	ring_unpin(r, &pinned);
	assert_int_equal(ring_rekey(r, KEY(7, 0).oid, KEY(8, 0).oid), 0); /* nothing left */
	assert_int_equal(ring_drop(r, KEY(8, 0).oid), 2);
	expect_gone(r, KEY(8, 0), 3);
	expect_gone(r, KEY(8, 1), 3);
	expect_block(r, KEY(9, 0), 3, 1024, 90);
	expect_stats(r, 3, 1, 1024);
	/* a dropped object's key can be stored again */
	assert_int_equal(put(r, KEY(8, 0), 256, 4, 5, NULL), 0);
	expect_block(r, KEY(8, 0), 4, 256, 5);
	ring_free(r);

	/* a segment with a full index (64 entries) renames nothing, and drops what it had */
	r = ring_make(4 * 4096, 4, 1024, 0);
	for (uint64_t b = 0; b < 64; b++)
		assert_int_equal(put(r, KEY(10, b), 64, 1, b, NULL), 0);
	expect_stats(r, 1, 64, 64 * 64);
	assert_int_equal(ring_rekey(r, KEY(10, 0).oid, KEY(11, 0).oid), 0);
	for (uint64_t b = 0; b < 64; b++) {
		expect_gone(r, KEY(10, b), 2);
		expect_gone(r, KEY(11, b), 2);
	}
	ring_free(r);
}

static void test_pinned_busy(void **state)
{
	struct ring *r = ring_make(4 * 4096, 4, 1024, 0);
	struct ring_ref held, held2, pend, ref;
	struct ring_stats st;

	(void)state;
	assert_non_null(r);
	for (uint64_t n = 0; n < 16; n++)
		assert_int_equal(put(r, KEY(4, n), 1024, 0, n, NULL), 0);

	/* a lookup ref pins segment 1 */
	assert_int_equal(ring_lookup(r, KEY(4, 5), 0, &held), 0);
	assert_int_equal(held.seg, 1);
	/* inserts into segment 0 (reused) go on next to it */
	for (uint64_t n = 16; n < 20; n++) {
		assert_int_equal(put(r, KEY(4, n), 1024, 0, 1000 + n, &ref), 0);
		assert_int_equal(ref.seg, 0);
	}
	/* the next one needs segment 1: refused, nothing reserved, nothing evicted */
	assert_int_equal(ring_reserve(r, KEY(4, 20), 1024, 0, &ref), -EBUSY);
	assert_int_equal(ring_reserve(r, KEY(4, 21), 1, 0, &ref), -EBUSY);
	ring_get_stats(r, 0, &st);
	assert_int_equal(st.reserve_busy, 2);
	assert_int_equal(st.rotations, 1);
	assert_int_equal(st.blocks, 16);
	expect_gone(r, KEY(4, 20), 0);
	assert_true(pat_check(held.data, 1024, 5));
	for (uint64_t n = 4; n < 20; n++)
		expect_block(r, KEY(4, n), 0, 1024, n < 16 ? n : 1000 + n);

	/* two pins need two unpins */
	ring_pin(r, &held);
	held2 = held;
	ring_unpin(r, &held);
	assert_int_equal(ring_reserve(r, KEY(4, 20), 1024, 0, &ref), -EBUSY);
	assert_true(pat_check(held2.data, 1024, 5));
	ring_unpin(r, &held2);

	/* free again: segment 1 is reused */
	assert_int_equal(put(r, KEY(4, 20), 1024, 0, 20, &ref), 0);
	assert_int_equal(ref.seg, 1);
	expect_gone(r, KEY(4, 5), 0);
	expect_block(r, KEY(4, 20), 0, 1024, 20);

	/* a reservation pins too, and a committed one until the caller unpins */
	assert_int_equal(ring_reserve(r, KEY(5, 0), 1024, 0, &pend), 0);
	assert_int_equal(pend.seg, 1);
	pat_fill(pend.data, 1024, 77);
	for (uint64_t n = 0; n < 2; n++)
		assert_int_equal(put(r, KEY(5, 1 + n), 1024, 0, n, NULL), 0);
	for (uint64_t n = 0; n < 12; n++)
		assert_int_equal(put(r, KEY(6, n), 1024, 0, n, NULL), 0);
	assert_int_equal(ring_reserve(r, KEY(6, 12), 1024, 0, &ref), -EBUSY);
	ring_commit(r, &pend);
	assert_int_equal(ring_reserve(r, KEY(6, 12), 1024, 0, &ref), -EBUSY);
	expect_block(r, KEY(5, 0), 0, 1024, 77);
	ring_unpin(r, &pend);
	assert_int_equal(put(r, KEY(6, 12), 1024, 0, 12, &ref), 0);
	assert_int_equal(ref.seg, 1);
	expect_gone(r, KEY(5, 0), 0);
	ring_get_stats(r, 0, &st);
	assert_int_equal(st.reserve_busy, 5);
	ring_free(r);
}

/* Fill a fresh ring with 1-byte blocks: exactly @max_entries go into segment 0. */
static void check_max_entries(uint64_t seg_size, uint32_t max_entries)
{
	struct ring *r = ring_make(4 * seg_size, 4, 4096, 0);
	struct ring_ref ref;
	struct ring_stats st;

	assert_non_null(r);
	for (uint32_t i = 0; i < max_entries; i++) {
		assert_int_equal(put(r, KEY(7, i), 1, 0, i, &ref), 0);
		assert_int_equal(ref.seg, 0);
	}
	assert_int_equal(put(r, KEY(7, max_entries), 1, 0, 0, &ref), 0);
	assert_int_equal(ref.seg, 1);
	/* aborted reservations use entries too */
	for (uint32_t i = 1; i < max_entries; i++) {
		assert_int_equal(ring_reserve(r, KEY(8, i), 1, 0, &ref), 0);
		assert_int_equal(ref.seg, 1);
		ring_abort(r, &ref);
	}
	assert_int_equal(put(r, KEY(9, 0), 1, 0, 0, &ref), 0);
	assert_int_equal(ref.seg, 2);
	ring_get_stats(r, 0, &st);
	assert_int_equal(st.blocks, max_entries + 2);
	assert_int_equal(st.rotations, 0);
	for (uint32_t i = 0; i <= max_entries; i++)
		expect_block(r, KEY(7, i), 0, 1, i == max_entries ? 0 : i);
	ring_free(r);
}

static void test_max_entries(void **state)
{
	(void)state;
	check_max_entries(1 << 20, 64);	 /* max(64, 16) */
	check_max_entries(4 << 20, 64);	 /* max(64, 64) */
	check_max_entries(8 << 20, 128); /* seg_size / 65536 */
	check_max_entries((16 << 20) + 65535, 256);
}

static void test_duplicates(void **state)
{
	struct ring *r = ring_make(4 * 65536, 4, 4096, 0);
	struct ring_ref old, a, b, ref;
	const struct cache_key k = KEY(12, 34);

	(void)state;
	assert_non_null(r);
	assert_int_equal(put(r, k, 100, 0, 1, NULL), 0);
	assert_int_equal(ring_lookup(r, k, 0, &old), 0);
	/* a second copy in the same segment wins; the first, still pinned, stays intact */
	assert_int_equal(put(r, k, 200, 0, 2, &ref), 0);
	assert_int_equal(ref.seg, 0);
	expect_block(r, k, 0, 200, 2);
	expect_stats(r, 0, 1, 200);
	assert_true(pat_check(old.data, 100, 1));
	ring_unpin(r, &old);

	/* a pending duplicate does not hide the committed copy until it commits */
	assert_int_equal(ring_reserve(r, k, 300, 0, &a), 0);
	pat_fill(a.data, 300, 3);
	expect_block(r, k, 0, 200, 2);
	ring_commit(r, &a);
	ring_unpin(r, &a);
	expect_block(r, k, 0, 300, 3);

	/* an aborted duplicate leaves the previous copy */
	assert_int_equal(ring_reserve(r, k, 400, 0, &a), 0);
	ring_abort(r, &a);
	expect_block(r, k, 0, 300, 3);

	/* two reservations committed out of order: the one reserved last wins */
	assert_int_equal(ring_reserve(r, k, 500, 0, &a), 0);
	assert_int_equal(ring_reserve(r, k, 600, 0, &b), 0);
	pat_fill(a.data, 500, 5);
	pat_fill(b.data, 600, 6);
	ring_commit(r, &b);
	expect_block(r, k, 0, 600, 6);
	ring_commit(r, &a);
	expect_block(r, k, 0, 600, 6);
	expect_stats(r, 0, 1, 600);
	assert_true(pat_check(a.data, 500, 5));
	ring_unpin(r, &a);
	ring_unpin(r, &b);

	/* a copy in a newer segment wins over the older segment's; counted once */
	for (uint64_t i = 0; i < 16; i++)
		assert_int_equal(put(r, KEY(13, i), 4096, 0, i, &ref), 0);
	assert_int_equal(ref.seg, 1);
	expect_block(r, k, 0, 600, 6);
	assert_int_equal(put(r, k, 700, 0, 7, &ref), 0);
	assert_int_equal(ref.seg, 1);
	expect_block(r, k, 0, 700, 7);
	expect_stats(r, 0, 17, 16 * 4096 + 700);
	/* an older-segment commit after a newer-segment copy exists stays shadowed */
	ring_free(r);

	r = ring_make(4 * 4096, 4, 1024, 0);
	assert_non_null(r);
	assert_int_equal(ring_reserve(r, k, 1000, 0, &a), 0);
	pat_fill(a.data, 1000, 10);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(put(r, KEY(14, i), 1024, 0, i, NULL), 0);
	assert_int_equal(ring_reserve(r, k, 900, 0, &b), 0);
	assert_int_equal(b.seg, 1);
	pat_fill(b.data, 900, 11);
	ring_commit(r, &b);
	ring_commit(r, &a);
	expect_block(r, k, 0, 900, 11);
	expect_stats(r, 0, 4, 900 + 3 * 1024);
	ring_unpin(r, &a);
	ring_unpin(r, &b);
	ring_free(r);
}

/* Sequential inserts of varied lengths through several wraps of odd geometries. */
static void test_geometries(void **state)
{
	static const struct {
		uint64_t size;
		uint32_t nseg;
		uint32_t max_block;
	} g[] = {
	    {4 * 4096 + 63, 4, 1000}, {1000003, 5, 4096},	{(3 << 20) + 999, 16, 65536},
	    {1012345, 7, 777},	      {5 * 7777 + 13, 5, 3000}, {16 * 3000 + 999, 16, 700},
	    {4 * 128 + 127, 4, 64},
	};

	(void)state;
	for (size_t gi = 0; gi < sizeof(g) / sizeof(g[0]); gi++) {
		struct ring *r = ring_make(g[gi].size, g[gi].nseg, g[gi].max_block, 0);
		uint64_t seg_size = (g[gi].size / g[gi].nseg) & ~(SEG_ALIGN(g[gi].max_block) - 1);
		uint64_t total = 0, n, cursor = 0;
		uint32_t seg = 0, ents = 0;
		unsigned char *base = NULL;
		struct ring_ref ref;

		assert_non_null(r);
		assert_int_equal(ring_seg_size(r), seg_size);
		for (n = 0; total < 5 * seg_size * g[gi].nseg; n++) {
			uint32_t len = 1 + (uint32_t)((n * 2654435761u) % g[gi].max_block);
			uint64_t off = PLACE(cursor, len);

			assert_int_equal(put(r, KEY(gi, n), len, 0, n, &ref), 0);
			if (!base)
				base = ref.data;
			assert_int_equal((uintptr_t)ref.data % (len >= 4096 ? 4096 : 64), 0);
			if (n > 0 && ref.seg != seg) {
				assert_int_equal(ref.seg, (seg + 1) % g[gi].nseg);
				/* rotated because the bytes or the 64 entries ran out */
				assert_true(off + len > seg_size || ents == 64);
				off = 0;
				ents = 0;
			}
			assert_ptr_equal(ref.data, base + ref.seg * seg_size + off);
			cursor = off + len;
			ents++;
			assert_true(cursor <= seg_size);
			seg = ref.seg;
			total += len;
		}
		/* every block still visible holds its own bytes; the newest ones are visible */
		for (uint64_t k = 0; k < n; k++) {
			uint32_t len = 1 + (uint32_t)((k * 2654435761u) % g[gi].max_block);

			if (k + 2 >= n)
				expect_block(r, KEY(gi, k), 0, len, k);
			else if (ring_contains(r, KEY(gi, k), 0))
				expect_block(r, KEY(gi, k), 0, len, k);
		}
		ring_free(r);
	}
}

/* ------------------------------------------------------------------------------------------
 * Randomized test against a naive reference model.
 * ---------------------------------------------------------------------------------------- */

enum { M_RESERVED = 1, M_COMMITTED, M_DEAD };

/* One insert, as the model remembers it. */
struct mrec {
	struct cache_key key; /* its key */
	uint32_t len;	     /* its length */
	uint64_t off;	     /* where the ring must have put it inside the segment */
	int state;	     /* M_RESERVED, M_COMMITTED, M_DEAD */
	uint64_t seed;	     /* pattern written into it */
};

/* One segment: the list of inserts since it became current, oldest first. */
struct mseg {
	struct mrec *recs; /* max_entries records */
	uint32_t n;	   /* records in use */
	uint64_t cursor;   /* next free offset */
	uint64_t t0;	   /* time of the first insert */
	uint32_t pins;	   /* outstanding refs */
};

struct model {
	uint32_t nseg, cur, max_entries, max_block;
	uint64_t seg_size, ttl, rotations, busy;
	struct mseg *segs;
};

static bool mseg_visible(const struct model *m, const struct mseg *s, uint64_t now)
{
	if (s->n == 0)
		return false;
	return m->ttl == 0 || now < s->t0 || now - s->t0 < m->ttl;
}

static int model_reserve(struct model *m, struct cache_key k, uint32_t len, uint64_t now,
			 uint64_t seed, uint32_t *ret_seg, uint32_t *ret_idx)
{
	struct mseg *s = &m->segs[m->cur];
	uint64_t off = PLACE(s->cursor, len);

	if (s->n > 0 &&
	    (s->n == m->max_entries || off + len > m->seg_size || !mseg_visible(m, s, now))) {
		uint32_t next = (m->cur + 1) % m->nseg;

		if (m->segs[next].pins > 0) {
			m->busy++;
			return -EBUSY;
		}
		m->cur = next;
		s = &m->segs[next];
		if (s->n > 0)
			m->rotations++;
		s->n = 0;
		s->cursor = 0;
		off = 0;
	}
	if (s->n == 0)
		s->t0 = now;
	s->recs[s->n] =
	    (struct mrec){.key = k, .len = len, .off = off, .state = M_RESERVED, .seed = seed};
	*ret_seg = m->cur;
	*ret_idx = s->n++;
	s->cursor = off + len;
	s->pins++;
	return 0;
}

/* The newest committed record for @k in a visible segment, newest segment first. */
static struct mrec *model_lookup(struct model *m, struct cache_key k, uint64_t now,
				 uint32_t *ret_seg)
{
	for (uint32_t n = 0; n < m->nseg; n++) {
		uint32_t si = (m->cur + m->nseg - n) % m->nseg;
		struct mseg *s = &m->segs[si];

		if (!mseg_visible(m, s, now))
			continue;
		for (uint32_t i = s->n; i-- > 0;) {
			struct mrec *e = &s->recs[i];

			if (e->state == M_COMMITTED && cache_key_eq(e->key, k)) {
				*ret_seg = si;
				return e;
			}
		}
	}
	return NULL;
}

/* Is @k committed in a segment that has expired? (coverage counting) */
static bool model_has_expired(const struct model *m, struct cache_key k, uint64_t now)
{
	for (uint32_t si = 0; si < m->nseg; si++) {
		const struct mseg *s = &m->segs[si];

		if (s->n == 0 || mseg_visible(m, s, now))
			continue;
		for (uint32_t i = 0; i < s->n; i++)
			if (s->recs[i].state == M_COMMITTED && s->recs[i].key.oid.lo == k.oid.lo &&
			    s->recs[i].key.blk == k.blk)
				return true;
	}
	return false;
}

/* How many committed copies of @k visible segments hold (coverage counting). */
static unsigned model_copies(const struct model *m, struct cache_key k, uint64_t now)
{
	unsigned n = 0;

	for (uint32_t si = 0; si < m->nseg; si++) {
		const struct mseg *s = &m->segs[si];

		if (!mseg_visible(m, s, now))
			continue;
		for (uint32_t i = 0; i < s->n; i++)
			n += s->recs[i].state == M_COMMITTED && s->recs[i].key.oid.lo == k.oid.lo &&
			     s->recs[i].key.blk == k.blk;
	}
	return n;
}

static void model_stats(struct model *m, uint64_t now, uint64_t *blocks, uint64_t *bytes)
{
	uint32_t seg;

	*blocks = *bytes = 0;
	for (uint32_t si = 0; si < m->nseg; si++) {
		struct mseg *s = &m->segs[si];

		if (!mseg_visible(m, s, now))
			continue;
		for (uint32_t i = 0; i < s->n; i++)
			if (s->recs[i].state == M_COMMITTED &&
			    model_lookup(m, s->recs[i].key, now, &seg) == &s->recs[i]) {
				(*blocks)++;
				*bytes += s->recs[i].len;
			}
	}
}

#define MAX_PENDING 6
#define MAX_HELD    8

/* A reservation not yet committed or aborted. */
struct pending {
	struct ring_ref ref; /* from ring_reserve */
	uint32_t mseg, midx; /* its model record */
};

/* A pin the test holds, with the bytes that must stay under it. */
struct held {
	struct ring_ref ref; /* pinned ref */
	uint64_t seed;	     /* pattern of its bytes */
	uint32_t mseg;	     /* model segment, for the model's pin count */
};

struct sim {
	uint64_t seed;	     /* the run's seed, printed with any failure */
	unsigned cfg;	     /* configuration number */
	unsigned long op;    /* operation number */
	uint64_t rng;	     /* generator state */
	uint64_t now;	     /* fake clock */
	uint64_t seq;	     /* pattern seeds handed out */
	unsigned char *base; /* arena start, learned from the first reservation */
	struct ring *r;
	struct model m;
	struct pending pend[MAX_PENDING];
	unsigned npend;
	struct held held[MAX_HELD];
	unsigned nheld;
	unsigned long hits;    /* lookups that found a block */
	unsigned long misses;  /* lookups that did not */
	unsigned long expired; /* misses where the key is committed in an expired segment */
	unsigned long shadows; /* hits where an older committed copy of the key exists */
};

#define SIM_CHECK(sim, cond)                                                                       \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fail_msg("TIERFS_RING_SEED=%" PRIu64                                       \
				 " config %u op %lu: %s failed (%s:%d)",                           \
				 (sim)->seed, (sim)->cfg, (sim)->op, #cond, __FILE__, __LINE__);   \
	} while (0)

static uint32_t rnd(struct sim *sim, uint32_t n)
{
	return (uint32_t)(next_rand(&sim->rng) % n);
}

static void sim_hold(struct sim *sim, const struct ring_ref *ref, uint64_t seed, uint32_t mseg)
{
	sim->held[sim->nheld++] = (struct held){.ref = *ref, .seed = seed, .mseg = mseg};
}

static void sim_unpin(struct sim *sim, unsigned i)
{
	struct held *h = &sim->held[i];

	SIM_CHECK(sim, pat_check(h->ref.data, h->ref.len, h->seed));
	ring_unpin(sim->r, &h->ref);
	SIM_CHECK(sim, sim->m.segs[h->mseg].pins > 0);
	sim->m.segs[h->mseg].pins--;
	sim->held[i] = sim->held[--sim->nheld];
}

static void sim_finish(struct sim *sim, unsigned i, bool commit)
{
	struct pending *p = &sim->pend[i];
	struct mrec *e = &sim->m.segs[p->mseg].recs[p->midx];

	SIM_CHECK(sim, pat_check(p->ref.data, p->ref.len, e->seed));
	if (commit) {
		ring_commit(sim->r, &p->ref);
		e->state = M_COMMITTED;
		/* the pin moves to the held list, or goes at once */
		if (sim->nheld < MAX_HELD && rnd(sim, 2))
			sim_hold(sim, &p->ref, e->seed, p->mseg);
		else {
			ring_unpin(sim->r, &p->ref);
			sim->m.segs[p->mseg].pins--;
		}
	} else {
		ring_abort(sim->r, &p->ref);
		e->state = M_DEAD;
		sim->m.segs[p->mseg].pins--;
	}
	sim->pend[i] = sim->pend[--sim->npend];
}

static struct cache_key sim_key(struct sim *sim, uint32_t nkeys)
{
	uint32_t k = rnd(sim, nkeys);

	return KEY(k % 3, k / 3);
}

static void sim_reserve(struct sim *sim, uint32_t nkeys)
{
	struct cache_key k = sim_key(sim, nkeys);
	uint32_t mb = sim->m.max_block, len, ms = 0, mi = 0;
	uint32_t pick = rnd(sim, 10);
	uint64_t seed = ++sim->seq;
	struct ring_ref ref;
	int rc, mrc;

	len = pick < 7 ? 1 + rnd(sim, mb) : pick < 9 ? mb : 1 + rnd(sim, 64 < mb ? 64 : mb);
	rc = ring_reserve(sim->r, k, len, sim->now, &ref);
	mrc = model_reserve(&sim->m, k, len, sim->now, seed, &ms, &mi);
	SIM_CHECK(sim, rc == mrc);
	if (rc < 0)
		return;
	if (!sim->base) {
		SIM_CHECK(sim, ms == 0 && mi == 0);
		sim->base = ref.data;
	}
	SIM_CHECK(sim, ref.seg == ms);
	SIM_CHECK(sim, ref.len == len);
	SIM_CHECK(sim, (unsigned char *)ref.data ==
			   sim->base + ms * sim->m.seg_size + sim->m.segs[ms].recs[mi].off);
	SIM_CHECK(sim, sim->m.segs[ms].recs[mi].off % (len >= 4096 ? 4096 : 64) == 0);
	SIM_CHECK(sim, sim->m.segs[ms].recs[mi].off + len <= sim->m.seg_size);
	pat_fill(ref.data, len, seed);
	sim->pend[sim->npend++] = (struct pending){.ref = ref, .mseg = ms, .midx = mi};
}

static void sim_lookup(struct sim *sim, uint32_t nkeys)
{
	struct cache_key k = sim_key(sim, nkeys);
	struct ring_ref ref;
	uint32_t ms = 0;
	struct mrec *e = model_lookup(&sim->m, k, sim->now, &ms);
	int rc = ring_lookup(sim->r, k, sim->now, &ref);

	SIM_CHECK(sim, rc == (e ? 0 : -ENOENT));
	if (!e) {
		sim->misses++;
		sim->expired += model_has_expired(&sim->m, k, sim->now);
		return;
	}
	sim->hits++;
	sim->shadows += model_copies(&sim->m, k, sim->now) > 1;
	sim->m.segs[ms].pins++;
	SIM_CHECK(sim, ref.seg == ms);
	SIM_CHECK(sim, ref.len == e->len);
	SIM_CHECK(sim, (unsigned char *)ref.data == sim->base + ms * sim->m.seg_size + e->off);
	SIM_CHECK(sim, pat_check(ref.data, ref.len, e->seed));
	if (sim->nheld < MAX_HELD && rnd(sim, 10) < 3) {
		sim_hold(sim, &ref, e->seed, ms);
	} else {
		ring_unpin(sim->r, &ref);
		sim->m.segs[ms].pins--;
	}
}

static void sim_check_stats(struct sim *sim)
{
	struct ring_stats st;
	uint64_t blocks, bytes;

	ring_get_stats(sim->r, sim->now, &st);
	model_stats(&sim->m, sim->now, &blocks, &bytes);
	SIM_CHECK(sim, st.blocks == blocks);
	SIM_CHECK(sim, st.bytes == bytes);
	SIM_CHECK(sim, st.rotations == sim->m.rotations);
	SIM_CHECK(sim, st.reserve_busy == sim->m.busy);
}

static void sim_step(struct sim *sim, uint32_t nkeys, uint64_t ttl0)
{
	uint32_t op = rnd(sim, 1000);

	if (op < 300) {
		if (sim->npend == MAX_PENDING)
			sim_finish(sim, rnd(sim, sim->npend), rnd(sim, 4) != 0);
		sim_reserve(sim, nkeys);
	} else if (op < 500) {
		if (sim->npend)
			sim_finish(sim, rnd(sim, sim->npend), rnd(sim, 4) != 0);
	} else if (op < 800) {
		sim_lookup(sim, nkeys);
	} else if (op < 850) {
		struct cache_key k = sim_key(sim, nkeys);
		uint32_t ms;

		SIM_CHECK(sim, ring_contains(sim->r, k, sim->now) ==
				   (model_lookup(&sim->m, k, sim->now, &ms) != NULL));
	} else if (op < 920) {
		if (sim->nheld)
			sim_unpin(sim, rnd(sim, sim->nheld));
	} else if (op < 930) {
		if (sim->nheld && sim->nheld < MAX_HELD) {
			unsigned i = rnd(sim, sim->nheld);

			ring_pin(sim->r, &sim->held[i].ref);
			sim->m.segs[sim->held[i].mseg].pins++;
			sim_hold(sim, &sim->held[i].ref, sim->held[i].seed, sim->held[i].mseg);
		}
	} else if (op < 975) {
		uint64_t t = sim->m.ttl ? sim->m.ttl : 1000;

		sim->now += rnd(sim, 20) == 0 ? rnd(sim, (uint32_t)(2 * t)) : rnd(sim, 50);
	} else if (op < 985) {
		/* land exactly on, or one before, some segment's expiry */
		struct mseg *s = &sim->m.segs[rnd(sim, sim->m.nseg)];
		uint64_t t;

		if (s->n && sim->m.ttl) {
			t = s->t0 + sim->m.ttl - rnd(sim, 2);
			if (t > sim->now)
				sim->now = t;
		}
	} else if (op < 988) {
		/* the naive model's stats are quadratic: check them sparingly */
		sim_check_stats(sim);
	} else if (op < 998) {
		struct cache_key k = sim_key(sim, nkeys);
		uint32_t ms;

		SIM_CHECK(sim, ring_contains(sim->r, k, sim->now) ==
				   (model_lookup(&sim->m, k, sim->now, &ms) != NULL));
	} else {
		static const uint64_t mult[] = {0, 1, 1, 1, 2, 3};
		uint64_t base = ttl0 ? ttl0 : 2000;
		uint64_t ttl = base * mult[rnd(sim, 6)] / 2;

		ring_set_ttl(sim->r, ttl);
		sim->m.ttl = ttl;
	}
}

static void sim_verify_pins(struct sim *sim)
{
	for (unsigned i = 0; i < sim->nheld; i++)
		SIM_CHECK(
		    sim, pat_check(sim->held[i].ref.data, sim->held[i].ref.len, sim->held[i].seed));
	for (unsigned i = 0; i < sim->npend; i++) {
		struct pending *p = &sim->pend[i];

		SIM_CHECK(sim, pat_check(p->ref.data, p->ref.len,
					 sim->m.segs[p->mseg].recs[p->midx].seed));
	}
}

static void run_model(uint64_t seed, unsigned cfg, uint64_t size, uint32_t nseg, uint32_t max_block,
		      uint64_t ttl, uint32_t nkeys, unsigned long ops)
{
	struct sim *sim = calloc(1, sizeof(*sim));
	struct model *m;

	assert_non_null(sim);
	sim->seed = seed;
	sim->cfg = cfg;
	sim->rng = seed ^ mix(cfg + 1);
	sim->now = 1000000;
	sim->r = ring_make(size, nseg, max_block, ttl);
	assert_non_null(sim->r);

	m = &sim->m;
	m->nseg = nseg;
	m->max_block = max_block;
	m->seg_size = (size / nseg) & ~(SEG_ALIGN(max_block) - 1);
	m->max_entries = m->seg_size / 65536 > 64 ? (uint32_t)(m->seg_size / 65536) : 64;
	m->ttl = ttl;
	assert_int_equal(ring_seg_size(sim->r), m->seg_size);
	m->segs = calloc(nseg, sizeof(*m->segs));
	assert_non_null(m->segs);
	for (uint32_t i = 0; i < nseg; i++) {
		m->segs[i].recs = calloc(m->max_entries, sizeof(struct mrec));
		assert_non_null(m->segs[i].recs);
	}

	for (sim->op = 0; sim->op < ops; sim->op++) {
		sim_step(sim, nkeys, ttl);
		if (sim->op % 512 == 0)
			sim_verify_pins(sim);
	}
	sim_verify_pins(sim);
	while (sim->npend)
		sim_finish(sim, 0, true);
	while (sim->nheld)
		sim_unpin(sim, 0);
	sim_check_stats(sim);
	for (uint32_t i = 0; i < nseg; i++)
		SIM_CHECK(sim, m->segs[i].pins == 0);
	/* with every pin gone, nothing can refuse a reservation */
	for (unsigned i = 0; i < 4 * nseg * m->max_entries; i++) {
		sim->op++;
		sim_reserve(sim, nkeys);
		SIM_CHECK(sim, sim->npend == 1);
		sim_finish(sim, 0, true);
		while (sim->nheld)
			sim_unpin(sim, 0);
	}
	sim_check_stats(sim);
	/* the run must have exercised every rule, or it proves little */
	SIM_CHECK(sim, sim->hits > 500 && sim->misses > 500);
	SIM_CHECK(sim, sim->expired > 50 && sim->shadows > 50);
	SIM_CHECK(sim, m->busy > 50 && m->rotations > 50);

	ring_free(sim->r);
	for (uint32_t i = 0; i < nseg; i++)
		free(m->segs[i].recs);
	free(m->segs);
	free(sim);
}

static void test_random_model(void **state)
{
	static const struct {
		uint64_t size;
		uint32_t nseg;
		uint32_t max_block;
		uint64_t ttl;
		uint32_t nkeys;
	} c[] = {
	    /* bytes and entries both limit; no TTL; many duplicates */
	    {4 * 20000, 4, 512, 0, 48},
	    /* odd sizes, TTL */
	    {5 * 7777 + 13, 5, 1000, 5000, 96},
	    /* many small segments, TTL shorter than a segment's life */
	    {16 * 3000 + 999, 16, 700, 800, 300},
	    /* 8 MiB segments: 128 entries, always the entry limit */
	    {4 * ((8 << 20) + 100), 4, 4096, 20000, 600},
	    /* segments of exactly two max blocks */
	    {6 * 2048, 6, 1024, 3000, 24},
	};
	uint64_t seed = 0x7e1f5eedc0ffee01ULL;
	const char *env = getenv("TIERFS_RING_SEED");

	(void)state;
	if (env && *env)
		seed = strtoull(env, NULL, 0);
	for (unsigned i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		run_model(seed, i, c[i].size, c[i].nseg, c[i].max_block, c[i].ttl, c[i].nkeys,
			  40000);
}

/* ------------------------------------------------------------------------------------------
 * Threads: several readers and writers on one ring; bytes under a pin never change.
 * ---------------------------------------------------------------------------------------- */

#define THR_N	4
#define THR_OPS 20000

/* Each block starts with this header, then pattern(seed). */
struct blkhdr {
	uint64_t seed; /* pattern of the rest */
	uint64_t obj;  /* key it was written for */
	uint64_t blk;
	uint32_t len; /* its length */
	uint32_t pad;
};

struct thr {
	struct ring *r;
	uint64_t rng;	   /* per-thread generator */
	unsigned failures; /* inconsistencies seen */
	unsigned hits;	   /* lookups that found something */
};

static bool blk_ok(const struct ring_ref *ref, struct cache_key k)
{
	struct blkhdr h;

	if (ref->len < sizeof(h))
		return false;
	memcpy(&h, ref->data, sizeof(h));
	return h.obj == k.oid.lo && h.blk == k.blk && h.len == ref->len &&
	       pat_check((char *)ref->data + sizeof(h), ref->len - (uint32_t)sizeof(h), h.seed);
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	struct ring_ref held[4];
	struct cache_key held_key[4];
	unsigned nheld = 0;

	for (unsigned i = 0; i < THR_OPS; i++) {
		uint64_t x = next_rand(&t->rng);
		struct cache_key k = KEY(x % 4, (x >> 8) % 64);
		struct ring_ref ref;

		if ((x >> 20) % 2 == 0) {
			uint32_t len =
			    (uint32_t)sizeof(struct blkhdr) + (uint32_t)((x >> 24) % 1000);
			struct blkhdr h = {.seed = x, .obj = k.oid.lo, .blk = k.blk, .len = len};

			if (ring_reserve(t->r, k, len, i, &ref) < 0)
				continue;
			memcpy(ref.data, &h, sizeof(h));
			pat_fill((char *)ref.data + sizeof(h), len - (uint32_t)sizeof(h), x);
			if ((x >> 40) % 10 == 0) {
				ring_abort(t->r, &ref);
				continue;
			}
			ring_commit(t->r, &ref);
			ring_unpin(t->r, &ref);
		} else if (ring_lookup(t->r, k, i, &ref) == 0) {
			t->hits++;
			if (!blk_ok(&ref, k))
				t->failures++;
			if (nheld < 4 && (x >> 40) % 4 == 0) {
				held[nheld] = ref;
				held_key[nheld++] = k;
			} else {
				ring_unpin(t->r, &ref);
			}
		}
		if (nheld && (x >> 50) % 8 == 0) {
			nheld--;
			if (!blk_ok(&held[nheld], held_key[nheld]))
				t->failures++;
			ring_unpin(t->r, &held[nheld]);
		}
	}
	while (nheld--) {
		if (!blk_ok(&held[nheld], held_key[nheld]))
			t->failures++;
		ring_unpin(t->r, &held[nheld]);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct ring *r = ring_make(8 * 8192, 8, 1100, 0);
	pthread_t tid[THR_N];
	struct thr t[THR_N];
	struct ring_stats st;
	unsigned hits = 0;

	(void)state;
	assert_non_null(r);
	for (unsigned i = 0; i < THR_N; i++) {
		t[i] = (struct thr){.r = r, .rng = mix(i + 99)};
		assert_int_equal(pthread_create(&tid[i], NULL, thr_main, &t[i]), 0);
	}
	for (unsigned i = 0; i < THR_N; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(t[i].failures, 0);
		hits += t[i].hits;
	}
	assert_true(hits > 0);
	ring_get_stats(r, 0, &st);
	assert_true(st.rotations > 0);
	assert_true(st.blocks > 0);
	ring_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_new_refuses),
	    cmocka_unit_test(test_geometry),
	    cmocka_unit_test(test_einval),
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_reserved_invisible),
	    cmocka_unit_test(test_abort),
	    cmocka_unit_test(test_ttl_boundary),
	    cmocka_unit_test(test_rotation_evicts_oldest),
	    cmocka_unit_test(test_pinned_busy),
	    cmocka_unit_test(test_rekey_and_drop),
	    cmocka_unit_test(test_max_entries),
	    cmocka_unit_test(test_duplicates),
	    cmocka_unit_test(test_geometries),
	    cmocka_unit_test(test_random_model),
	    cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
