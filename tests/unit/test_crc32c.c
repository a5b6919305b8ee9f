/*
 * test_crc32c.c - cache/crc32c.c against the standard's check value, published vectors
 * (RFC 3720 B.4) and a bitwise reference, whole and in pieces.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "crc32c.h"

/* The definition: reflected polynomial 0x82f63b78, one bit at a time. */
static uint32_t ref_crc32c(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
	}
	return ~crc;
}

static void check_value(void **state)
{
	assert_int_equal(crc32c(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(crc32c(0, "", 0), 0);
}

static void rfc3720_vectors(void **state)
{
	unsigned char b[32];

	memset(b, 0, sizeof(b));
	assert_int_equal(crc32c(0, b, 32), 0x8a9136aau);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(crc32c(0, b, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	assert_int_equal(crc32c(0, b, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	assert_int_equal(crc32c(0, b, 32), 0x113fdb5cu);
}

static void matches_reference_whole_and_chained(void **state)
{
	static unsigned char buf[65536 + 7];
	uint32_t x = 12345;

	for (size_t i = 0; i < sizeof(buf); i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 16);
	}
	/* odd lengths and offsets exercise the vector code's heads and tails */
	for (size_t len = 0; len < sizeof(buf); len = len * 3 + 1) {
		uint32_t want = ref_crc32c(0, buf + 1, len);
		size_t cut = len / 3;

		assert_int_equal(crc32c(0, buf + 1, len), want);
		assert_int_equal(crc32c(crc32c(0, buf + 1, cut), buf + 1 + cut, len - cut), want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(check_value),
		cmocka_unit_test(rfc3720_vectors),
		cmocka_unit_test(matches_reference_whole_and_chained),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
