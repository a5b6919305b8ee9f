/*
 * test_fleetval.c - cache/fleetval.c: a framed block checks as itself and as nothing else.
 * Every single flipped byte, every truncation, a padded value, another block's key, block size
 * or length, and foreign bytes are all refused.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fleetval.h"

#define LEN 300u
#define BS  4096u

static const struct cache_key K = {.oid = {.hi = 0x0123456789abcdefULL, .lo = 0xfedcba9876543210ULL},
				   .blk = 7};

/* A value of block K: header then LEN bytes of a pattern. */
static unsigned char *make(size_t *ret_len)
{
	unsigned char *v = malloc(FV_HDR_LEN + LEN);

	assert_non_null(v);
	for (unsigned i = 0; i < LEN; i++)
		v[FV_HDR_LEN + i] = (unsigned char)(i * 31 + 7);
	fv_header(v, K, BS, v + FV_HDR_LEN, LEN);
	*ret_len = FV_HDR_LEN + LEN;
	return v;
}

static void round_trip(void **state)
{
	size_t n;
	unsigned char *v = make(&n);
	const void *data = NULL;

	assert_int_equal(fv_check(v, n, K, BS, LEN, &data), 0);
	assert_ptr_equal(data, v + FV_HDR_LEN);
	free(v);
}

static void flipped_byte_anywhere(void **state)
{
	size_t n;
	unsigned char *v = make(&n);
	const void *data = NULL;

	for (size_t i = 0; i < n; i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			v[i] ^= (unsigned char)(1u << bit);
			assert_true(fv_check(v, n, K, BS, LEN, &data) < 0);
			v[i] ^= (unsigned char)(1u << bit);
		}
	}
	assert_null(data);
	assert_int_equal(fv_check(v, n, K, BS, LEN, &data), 0);
	free(v);
}

static void truncated_or_padded(void **state)
{
	size_t n;
	unsigned char *v = make(&n);
	unsigned char *big = calloc(1, n + 1);
	const void *data = NULL;

	for (size_t l = 0; l < n; l++)
		assert_true(fv_check(v, l, K, BS, LEN, &data) < 0);
	memcpy(big, v, n);
	assert_int_equal(fv_check(big, n + 1, K, BS, LEN, &data), -EBADMSG);
	assert_null(data);
	free(big);
	free(v);
}

static void another_block(void **state)
{
	size_t n;
	unsigned char *v = make(&n);
	const void *data = NULL;
	struct cache_key k;

	k = K;
	k.blk++;
	assert_int_equal(fv_check(v, n, k, BS, LEN, &data), -ESTALE);
	k = K;
	k.oid.hi ^= 1;
	assert_int_equal(fv_check(v, n, k, BS, LEN, &data), -ESTALE);
	k = K;
	k.oid.lo ^= 1ULL << 63;
	assert_int_equal(fv_check(v, n, k, BS, LEN, &data), -ESTALE);
	assert_int_equal(fv_check(v, n, K, BS * 2, LEN, &data), -ESTALE);
	assert_int_equal(fv_check(v, n, K, BS, LEN - 1, &data), -ESTALE);
	assert_null(data);
	free(v);
}

/* A value that is another block's, moved under this block's key: the header is
 * right for the other block only. And plain foreign bytes. */
static void foreign(void **state)
{
	unsigned char junk[FV_HDR_LEN + LEN];
	const void *data = NULL;

	memset(junk, 'x', sizeof(junk));
	assert_int_equal(fv_check(junk, sizeof(junk), K, BS, LEN, &data), -EPROTO);
	memcpy(junk, "TFSB", 4);
	assert_true(fv_check(junk, sizeof(junk), K, BS, LEN, &data) < 0);
	assert_int_equal(fv_check("OK", 2, K, BS, LEN, &data), -EPROTO);
	assert_null(data);
}

/* The same block with the data changed and a recomputed header is a valid value, but a
 * header copied from the original with the new data is not. */
static void header_and_data_bound(void **state)
{
	size_t n;
	unsigned char *v = make(&n), *w = make(&n);
	const void *data = NULL;

	w[FV_HDR_LEN + 5] ^= 0x40;
	fv_header(w, K, BS, w + FV_HDR_LEN, LEN);
	assert_int_equal(fv_check(w, n, K, BS, LEN, &data), 0);
	memcpy(w, v, FV_HDR_LEN);
	assert_int_equal(fv_check(w, n, K, BS, LEN, &data), -EBADMSG);
	free(v);
	free(w);
}

/* The header and the data apart (as a value parsed straight into a block lies): the same
 * answers as fv_check on the whole, for the value itself and every flipped byte. */
static void parts_apart(void **state)
{
	size_t n;
	unsigned char *v = make(&n), hdr[FV_HDR_LEN], *data = malloc(LEN);
	const void *whole;

	assert_non_null(data);
	memcpy(hdr, v, FV_HDR_LEN);
	memcpy(data, v + FV_HDR_LEN, LEN);
	assert_int_equal(fv_check_parts(hdr, data, n, K, BS, LEN), 0);
	for (size_t i = 0; i < n; i++) {
		unsigned char *p = i < FV_HDR_LEN ? &hdr[i] : &data[i - FV_HDR_LEN];

		v[i] ^= 0x10;
		*p ^= 0x10;
		assert_int_equal(fv_check_parts(hdr, data, n, K, BS, LEN),
				 fv_check(v, n, K, BS, LEN, &whole));
		assert_true(fv_check_parts(hdr, data, n, K, BS, LEN) < 0);
		v[i] ^= 0x10;
		*p ^= 0x10;
	}
	/* a length that disagrees with the header's, either way */
	assert_int_equal(fv_check_parts(hdr, data, n - 1, K, BS, LEN), -EBADMSG);
	assert_int_equal(fv_check_parts(hdr, data, n + 1, K, BS, LEN), -EBADMSG);
	assert_int_equal(fv_check_parts(hdr, data, FV_HDR_LEN - 1, K, BS, LEN), -EPROTO);
	free(data);
	free(v);
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
		cmocka_unit_test(flipped_byte_anywhere),
		cmocka_unit_test(truncated_or_padded),
		cmocka_unit_test(another_block),
		cmocka_unit_test(foreign),
		cmocka_unit_test(header_and_data_bound),
		cmocka_unit_test(parts_apart),
		cmocka_unit_test(keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
