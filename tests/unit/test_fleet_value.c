/*
 * test_fleet_value.c - tiers/fleet_value.c: a framed block checks as itself and as nothing else.
 * Every single flipped bit, every truncation, a padded value, another block's key, block size
 * or length, and foreign bytes are all refused; with a MAC, so are a value under another key,
 * one without a MAC, and one whose bytes were changed and whose CRC was recomputed (what
 * anyone who can write to Redis can do).
 *
 * The MAC here is a toy keyed hash (toy_mac): fleet_value.c only calls it, and what is tested is
 * what the framing does with it. backend/mac.c's own MAC is tested in test_mac.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "crc32c.h"
#include "fleet_value.h"

#define LEN 300u
#define BS  4096u

static const struct cache_key K = {.oid = {.hi = 0x0123456789abcdefULL, .lo = 0xfedcba9876543210ULL},
				   .blk = 7};
static const unsigned char SALT[FV_SALT_LEN] = "0123456789abcde";

/* A keyed hash standing in for the fleet's MAC: FNV-1a over key, salt and message, twice
 * with different seeds, each through splitmix64's finaliser. @arg is the key (a string). */
static uint64_t mix(uint64_t h)
{
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	return h ^ (h >> 31);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

static int toy_mac(void *arg, const unsigned char *salt, const void *a, size_t alen,
		   const void *b, size_t blen, unsigned char *ret_tag)
{
	const char *key = arg;

	for (int half = 0; half < 2; half++) {
		uint64_t h = fnv(0xcbf29ce484222325ULL + (uint64_t)half, key, strlen(key));

		h = fnv(fnv(fnv(h, salt, FV_SALT_LEN), a, alen), b, blen);
		h = mix(h);
		memcpy(ret_tag + 8 * half, &h, 8);
	}
	return 0;
}

static int failing_mac(void *arg, const unsigned char *salt, const void *a, size_t alen,
		       const void *b, size_t blen, unsigned char *ret_tag)
{
	return -ENOMEM;
}

static const struct fv_mac KEY_A = {.fn = toy_mac, .arg = (void *)"key a"};
static const struct fv_mac KEY_B = {.fn = toy_mac, .arg = (void *)"key b"};

/* A value of block K: header then LEN bytes of a pattern; with @mac, under SALT. */
static unsigned char *make_with(const struct fv_mac *mac, size_t *ret_len)
{
	unsigned char *v = malloc(FV_HDR_LEN + LEN);

	assert_non_null(v);
	for (unsigned i = 0; i < LEN; i++)
		v[FV_HDR_LEN + i] = (unsigned char)(i * 31 + 7);
	assert_int_equal(fv_header(v, K, BS, v + FV_HDR_LEN, LEN, mac, SALT), 0);
	*ret_len = FV_HDR_LEN + LEN;
	return v;
}

static unsigned char *make(size_t *ret_len)
{
	return make_with(NULL, ret_len);
}

static void round_trip(void **state)
{
	size_t n;
	unsigned char *v = make(&n), *w = make_with(&KEY_A, &n);
	const void *data = NULL;

	assert_int_equal(fv_check(v, n, K, BS, LEN, NULL, &data), 0);
	assert_ptr_equal(data, v + FV_HDR_LEN);
	data = NULL;
	assert_int_equal(fv_check(w, n, K, BS, LEN, &KEY_A, &data), 0);
	assert_ptr_equal(data, w + FV_HDR_LEN);
	/* a mount without the key checks a keyed value by its CRC (a fleet turning it on) */
	assert_int_equal(fv_check(w, n, K, BS, LEN, NULL, &data), 0);
	free(v);
	free(w);
}

/* Every flipped bit of a value is refused by the check of its kind: by the MAC for a keyed
 * value (all of it is covered), by the CRC for a plain one. A mount without the key checks a
 * keyed value by its CRC, which covers the name and the data but not the salt and tag (its
 * MAC's, which it cannot check): a flip there still leaves the right data, and is refused
 * only if it makes the kind unknown. A plain value whose kind flips to keyed is, to such a
 * mount, a keyed value whose salt and tag it does not check. */
static bool flip_passes(int m, size_t i, unsigned bit)
{
	if (m == 1)
		return false;
	if (m == 0)
		return i == 44 && bit == 0;
	return i >= 48 && i < FV_HDR_LEN;
}

static void flipped_bit_anywhere(void **state)
{
	const struct fv_mac *make_mac[3] = {NULL, &KEY_A, &KEY_A};
	const struct fv_mac *check_mac[3] = {NULL, &KEY_A, NULL};

	for (int m = 0; m < 3; m++) {
		size_t n;
		unsigned char *v = make_with(make_mac[m], &n);
		const void *data = NULL;

		for (size_t i = 0; i < n; i++) {
			for (unsigned bit = 0; bit < 8; bit++) {
				int r;

				v[i] ^= (unsigned char)(1u << bit);
				r = fv_check(v, n, K, BS, LEN, check_mac[m], &data);
				if (flip_passes(m, i, bit))
					assert_int_equal(r, 0);
				else
					assert_true(r < 0);
				v[i] ^= (unsigned char)(1u << bit);
			}
		}
		assert_int_equal(fv_check(v, n, K, BS, LEN, check_mac[m], &data), 0);
		free(v);
	}
}

/* With the key, which check refuses a flipped bit: the name's fields (oid, blk, block size,
 * len) by name, the data, the CRC, the salt and the tag by the MAC, the MAC's kind as
 * another kind or none. */
static void keyed_refusals(void **state)
{
	static const struct {
		size_t off;
		int err;
	} cases[] = {
		{8, -ESTALE},  {16, -ESTALE}, {23, -ESTALE}, {24, -ESTALE}, {32, -ESTALE},
		{36, -ESTALE}, {40, -EKEYREJECTED}, {48, -EKEYREJECTED}, {63, -EKEYREJECTED},
		{64, -EKEYREJECTED}, {79, -EKEYREJECTED}, {FV_HDR_LEN, -EKEYREJECTED},
		{FV_HDR_LEN + LEN - 1, -EKEYREJECTED}, {0, -EPROTO}, {4, -EPROTO},
	};
	size_t n;
	unsigned char *v = make_with(&KEY_A, &n);
	const void *data = NULL;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		v[cases[i].off] ^= 0x01;
		assert_int_equal(fv_check(v, n, K, BS, LEN, &KEY_A, &data), cases[i].err);
		v[cases[i].off] ^= 0x01;
	}
	v[44] ^= 0x01; /* the kind: 1 -> 0, no MAC, but a salt and tag that are not zero */
	assert_int_equal(fv_check(v, n, K, BS, LEN, &KEY_A, &data), -EPROTO);
	v[44] ^= 0x03; /* 1 -> 2: a kind nobody writes */
	assert_int_equal(fv_check(v, n, K, BS, LEN, &KEY_A, &data), -EPROTO);
	assert_null(data);
	free(v);
}

static void wrong_key_or_none(void **state)
{
	size_t n;
	unsigned char *a = make_with(&KEY_A, &n), *none = make(&n);
	const void *data = NULL;

	assert_int_equal(fv_check(a, n, K, BS, LEN, &KEY_B, &data), -EKEYREJECTED);
	assert_int_equal(fv_check(none, n, K, BS, LEN, &KEY_A, &data), -ENOKEY);
	assert_null(data);
	free(a);
	free(none);
}

/* What anyone who can write to Redis does: new bytes, and a CRC recomputed over them. It
 * checks without a key (the audit's POISONED!! value); with one it never does. */
static void forged_with_recomputed_crc(void **state)
{
	const struct fv_mac *macs[2] = {NULL, &KEY_A};

	for (int m = 0; m < 2; m++) {
		size_t n;
		unsigned char *v = make_with(macs[m], &n);
		const void *data = NULL;

		memcpy(v + FV_HDR_LEN, "POISONED!!", 10);
		v[40] = v[41] = v[42] = v[43] = 0;
		{
			uint32_t crc = crc32c(crc32c(0, v, 40), v + FV_HDR_LEN, LEN);

			for (int i = 0; i < 4; i++)
				v[40 + i] = (unsigned char)(crc >> (8 * i));
		}
		assert_int_equal(fv_check(v, n, K, BS, LEN, NULL, &data), 0); /* CRC only */
		data = NULL;
		/* and the forger's own MAC-less value, or the signed one edited */
		assert_int_equal(fv_check(v, n, K, BS, LEN, &KEY_A, &data),
				 m ? -EKEYREJECTED : -ENOKEY);
		assert_null(data);
		free(v);
	}
}

static void truncated_or_padded(void **state)
{
	const struct fv_mac *macs[2] = {NULL, &KEY_A};

	for (int m = 0; m < 2; m++) {
		size_t n;
		unsigned char *v = make_with(macs[m], &n);
		unsigned char *big = calloc(1, n + 1);
		const void *data = NULL;

		for (size_t l = 0; l < n; l++)
			assert_true(fv_check(v, l, K, BS, LEN, macs[m], &data) < 0);
		memcpy(big, v, n);
		assert_int_equal(fv_check(big, n + 1, K, BS, LEN, macs[m], &data), -EBADMSG);
		assert_null(data);
		free(big);
		free(v);
	}
}

static void another_block(void **state)
{
	size_t n;
	unsigned char *v = make_with(&KEY_A, &n);
	const void *data = NULL;
	struct cache_key k;

	k = K;
	k.blk++;
	assert_int_equal(fv_check(v, n, k, BS, LEN, &KEY_A, &data), -ESTALE);
	k = K;
	k.oid.hi ^= 1;
	assert_int_equal(fv_check(v, n, k, BS, LEN, &KEY_A, &data), -ESTALE);
	k = K;
	k.oid.lo ^= 1ULL << 63;
	assert_int_equal(fv_check(v, n, k, BS, LEN, NULL, &data), -ESTALE);
	assert_int_equal(fv_check(v, n, K, BS * 2, LEN, &KEY_A, &data), -ESTALE);
	assert_int_equal(fv_check(v, n, K, BS, LEN - 1, &KEY_A, &data), -ESTALE);
	assert_null(data);
	free(v);
}

/* Plain foreign bytes, and a value of the format before this one (a 48-byte header). */
static void foreign(void **state)
{
	unsigned char junk[FV_HDR_LEN + LEN];
	const void *data = NULL;

	memset(junk, 'x', sizeof(junk));
	assert_int_equal(fv_check(junk, sizeof(junk), K, BS, LEN, NULL, &data), -EPROTO);
	memcpy(junk, "TFSB", 4);
	assert_true(fv_check(junk, sizeof(junk), K, BS, LEN, NULL, &data) < 0);
	assert_int_equal(fv_check("OK", 2, K, BS, LEN, &KEY_A, &data), -EPROTO);
	memset(junk, 0, sizeof(junk));
	memcpy(junk, "TFSB\x01\0\0\0", 8);
	assert_int_equal(fv_check(junk, 48 + LEN, K, BS, LEN, NULL, &data), -EPROTO);
	assert_int_equal(fv_check(junk, 48 + LEN, K, BS, LEN, &KEY_A, &data), -EPROTO);
	assert_null(data);
}

/* The same block with the data changed and a recomputed header is a valid value, but a
 * header copied from the original with the new data is not; with or without the key. */
static void header_and_data_bound(void **state)
{
	const struct fv_mac *macs[2] = {NULL, &KEY_A};

	for (int m = 0; m < 2; m++) {
		size_t n;
		unsigned char *v = make_with(macs[m], &n), *w = make_with(macs[m], &n);
		const void *data = NULL;

		w[FV_HDR_LEN + 5] ^= 0x40;
		assert_int_equal(fv_header(w, K, BS, w + FV_HDR_LEN, LEN, macs[m], SALT), 0);
		assert_int_equal(fv_check(w, n, K, BS, LEN, macs[m], &data), 0);
		memcpy(w, v, FV_HDR_LEN);
		assert_int_equal(fv_check(w, n, K, BS, LEN, macs[m], &data),
				 m ? -EKEYREJECTED : -EBADMSG);
		free(v);
		free(w);
	}
}

/* A MAC that fails: no value is made, and no value checks. */
static void mac_errors(void **state)
{
	const struct fv_mac bad = {.fn = failing_mac};
	unsigned char hdr[FV_HDR_LEN], data[LEN] = {0};
	size_t n;
	unsigned char *v = make_with(&KEY_A, &n);
	const void *d = NULL;

	assert_int_equal(fv_header(hdr, K, BS, data, LEN, &bad, SALT), -ENOMEM);
	assert_int_equal(fv_check(v, n, K, BS, LEN, &bad, &d), -ENOMEM);
	assert_null(d);
	free(v);
}

/* The header and the data apart (as a value parsed straight into a block lies): the same
 * answers as fv_check on the whole, for the value itself and every flipped byte. */
static void parts_apart(void **state)
{
	const struct fv_mac *macs[2] = {NULL, &KEY_A};

	for (int m = 0; m < 2; m++) {
		size_t n;
		unsigned char *v = make_with(macs[m], &n), hdr[FV_HDR_LEN], *data = malloc(LEN);
		const void *whole;

		assert_non_null(data);
		memcpy(hdr, v, FV_HDR_LEN);
		memcpy(data, v + FV_HDR_LEN, LEN);
		assert_int_equal(fv_check_parts(hdr, data, n, K, BS, LEN, macs[m]), 0);
		for (size_t i = 0; i < n; i++) {
			unsigned char *p = i < FV_HDR_LEN ? &hdr[i] : &data[i - FV_HDR_LEN];

			v[i] ^= 0x10;
			*p ^= 0x10;
			assert_int_equal(fv_check_parts(hdr, data, n, K, BS, LEN, macs[m]),
					 fv_check(v, n, K, BS, LEN, macs[m], &whole));
			assert_true(fv_check_parts(hdr, data, n, K, BS, LEN, macs[m]) < 0);
			v[i] ^= 0x10;
			*p ^= 0x10;
		}
		/* a length that disagrees with the header's, either way */
		assert_int_equal(fv_check_parts(hdr, data, n - 1, K, BS, LEN, macs[m]), -EBADMSG);
		assert_int_equal(fv_check_parts(hdr, data, n + 1, K, BS, LEN, macs[m]), -EBADMSG);
		assert_int_equal(fv_check_parts(hdr, data, FV_HDR_LEN - 1, K, BS, LEN, macs[m]),
				 -EPROTO);
		free(data);
		free(v);
	}
}

static void keys(void **state)
{
	char a[FV_KEY_MAX], b[FV_KEY_MAX], p[FV_PREFIX_MAX + 10];
	struct cache_key k = K;
	int n;

	n = fv_key(a, sizeof(a), "fleet1:", K, BS);
	assert_string_equal(a, "fleet1:tfs1:0123456789abcdeffedcba9876543210:7:4096");
	assert_int_equal(n, (int)strlen(a));
	fv_key(b, sizeof(b), "fleet1:", K, BS * 2);
	assert_string_not_equal(a, b); /* block sizes never mix */
	k.blk = 8;
	fv_key(b, sizeof(b), "fleet1:", k, BS);
	assert_string_not_equal(a, b);
	fv_key(b, sizeof(b), "fleet2:", K, BS);
	assert_string_not_equal(a, b);
	memset(p, 'p', sizeof(p) - 1);
	p[sizeof(p) - 1] = 0;
	k.blk = UINT64_MAX;
	n = fv_key(a, sizeof(a), p, k, UINT32_MAX);
	assert_true(n > 0 && (size_t)n < FV_KEY_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip),
		cmocka_unit_test(flipped_bit_anywhere),
		cmocka_unit_test(keyed_refusals),
		cmocka_unit_test(wrong_key_or_none),
		cmocka_unit_test(forged_with_recomputed_crc),
		cmocka_unit_test(truncated_or_padded),
		cmocka_unit_test(another_block),
		cmocka_unit_test(foreign),
		cmocka_unit_test(header_and_data_bound),
		cmocka_unit_test(mac_errors),
		cmocka_unit_test(parts_apart),
		cmocka_unit_test(keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
