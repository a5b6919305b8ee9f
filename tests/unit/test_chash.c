/*
 * test_chash.c - backend/redis.c's consistent-hash ring: shares are near even, a server added
 * takes about its share and nothing else moves, a server removed gives away only its keys, and
 * a ring built from the same names in another order places every key the same.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "redis.h"

#define NKEYS 100000

static const char *const names[] = {"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379",
				    "10.0.0.4:6379", "10.0.0.5:6379"};

static unsigned pick(const struct bk_chash *ch, unsigned i)
{
	char k[64];
	int n = snprintf(k, sizeof(k), "tfs1:%016x%016x:%x:4194304", i * 2654435761u, i, i % 97);

	return bk_chash_pick(ch, k, (size_t)n);
}

static void shares_even(void **state)
{
	struct bk_chash ch;
	unsigned count[3] = {0};

	assert_int_equal(bk_chash_build(&ch, names, 3, BK_CHASH_VNODES), 0);
	for (unsigned i = 0; i < NKEYS; i++)
		count[pick(&ch, i)]++;
	for (int s = 0; s < 3; s++) /* each within 20% of a third */
		assert_true(count[s] > NKEYS / 3 * 8 / 10 && count[s] < NKEYS / 3 * 12 / 10);
	bk_chash_done(&ch);
}

static void adding_moves_only_its_share(void **state)
{
	struct bk_chash a, b;
	unsigned moved = 0;

	assert_int_equal(bk_chash_build(&a, names, 4, BK_CHASH_VNODES), 0);
	assert_int_equal(bk_chash_build(&b, names, 5, BK_CHASH_VNODES), 0);
	for (unsigned i = 0; i < NKEYS; i++) {
		unsigned x = pick(&a, i), y = pick(&b, i);

		if (x != y) {
			assert_int_equal(y, 4); /* only ever to the new server */
			moved++;
		}
	}
	/* a fifth of the keys, give or take */
	assert_true(moved > NKEYS / 5 * 7 / 10 && moved < NKEYS / 5 * 13 / 10);
	bk_chash_done(&a);
	bk_chash_done(&b);
}

static void removing_moves_only_its_keys(void **state)
{
	const char *const fewer[] = {names[0], names[2], names[3]}; /* without names[1] */
	struct bk_chash a, b;

	assert_int_equal(bk_chash_build(&a, names, 4, BK_CHASH_VNODES), 0);
	assert_int_equal(bk_chash_build(&b, fewer, 3, BK_CHASH_VNODES), 0);
	for (unsigned i = 0; i < NKEYS; i++) {
		unsigned x = pick(&a, i), y = pick(&b, i);

		if (x != 1) /* a key of a server that stays stays on it */
			assert_string_equal(names[x], fewer[y]);
	}
	bk_chash_done(&a);
	bk_chash_done(&b);
}

static void order_does_not_matter(void **state)
{
	const char *const rev[] = {names[2], names[1], names[0]};
	struct bk_chash a, b;

	assert_int_equal(bk_chash_build(&a, names, 3, BK_CHASH_VNODES), 0);
	assert_int_equal(bk_chash_build(&b, rev, 3, BK_CHASH_VNODES), 0);
	for (unsigned i = 0; i < NKEYS; i += 7)
		assert_string_equal(names[pick(&a, i)], rev[pick(&b, i)]);
	bk_chash_done(&a);
	bk_chash_done(&b);
}

static void one_server(void **state)
{
	struct bk_chash a;

	assert_int_equal(bk_chash_build(&a, names, 0, BK_CHASH_VNODES), -22);
	assert_int_equal(bk_chash_build(&a, names, 1, BK_CHASH_VNODES), 0);
	for (unsigned i = 0; i < 1000; i++)
		assert_int_equal(pick(&a, i), 0);
	bk_chash_done(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shares_even),
		cmocka_unit_test(adding_moves_only_its_share),
		cmocka_unit_test(removing_moves_only_its_keys),
		cmocka_unit_test(order_does_not_matter),
		cmocka_unit_test(one_server),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
