/*
 * fuzz_fleet_value.c - the shared tier's value check (tiers/fleet_value.c) on arbitrary bytes.
 *
 * The input is [mode][value bytes...]. mode's bits:
 *   0x01  check with a key (a toy keyed MAC, as test_fleet_value.c's: the framing is what is
 *         fuzzed, backend/mac.c's MAC is tested on its own)
 *   0x02  ask for the block the value's own header names (so the check gets past the name
 *         to the length, the CRC and the MAC), else for a fixed block
 *   0x04  frame the value bytes as a block's data first (fv_header, keyed if 0x01), then flip
 *         one bit of the result, chosen by the input, unless 0x08: the round trip must check,
 *         the flipped one must not (but where a mount without the key cannot see it)
 * Checked beyond "no crash, no read out of bounds, no UB":
 *   - the answer is 0 or one of fleet_value.h's errors, and fv_check_parts gives the same;
 *   - on success the data is the value's bytes after the header, and framing that data
 *     again under the value's salt makes the same header: nothing but a value fv_header made
 *     ever checks; on failure *ret_data is untouched.
 */
#include <errno.h>
#include <stdbool.h>

#include "fleet_value.h"
#include "fuzz.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	h ^= h >> 31;
	return h * 0x94d049bb133111ebULL;
}

static int toy_mac(void *arg, const unsigned char *salt, const void *a, size_t alen,
		   const void *b, size_t blen, unsigned char *ret_tag)
{
	for (int half = 0; half < 2; half++) {
		uint64_t h = fnv(0xcbf29ce484222325ULL + (uint64_t)half, arg, 8);

		h = fnv(fnv(fnv(h, salt, FV_SALT_LEN), a, alen), b, blen);
		memcpy(ret_tag + 8 * half, &h, 8);
	}
	return 0;
}

static const struct fv_mac KEY = {.fn = toy_mac, .arg = (void *)"fuzz-key"};
static const struct cache_key FIXED = {.oid = {.hi = 1, .lo = 2}, .blk = 3};

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* The answer for @v (@n bytes) as block @k of @bs, @len long, checked both ways. */
static int check(const uint8_t *v, size_t n, struct cache_key k, uint32_t bs, uint32_t len,
		 const struct fv_mac *mac)
{
	const void *data = (const void *)&data; /* poison: untouched on failure */
	int r = fv_check(v, n, k, bs, len, mac, &data);

	FUZZ_CHECK(r == 0 || r == -EPROTO || r == -ESTALE || r == -EBADMSG || r == -ENOKEY ||
		   r == -EKEYREJECTED);
	FUZZ_CHECK(fv_check_parts(v, n < FV_HDR_LEN ? v : v + FV_HDR_LEN, n, k, bs, len, mac) == r);
	if (r < 0) {
		FUZZ_CHECK(data == (const void *)&data);
		return r;
	}
	FUZZ_CHECK(n == FV_HDR_LEN + len && data == v + FV_HDR_LEN);
	{
		unsigned char h[FV_HDR_LEN];

		FUZZ_CHECK(fv_header(h, k, bs, data, len, v[44] ? &KEY : NULL, v + 48) == 0);
		/* a mount without the key does not check the salt and tag of a keyed value */
		FUZZ_CHECK(memcmp(h, v, mac || !v[44] ? FV_HDR_LEN : 48) == 0);
	}
	return 0;
}

/* Frame @d as block FIXED, flip bit @bit of the value (or none), check it. */
static void round_trip(const uint8_t *d, size_t n, bool keyed, bool flip, size_t bit)
{
	uint8_t *v = malloc(FV_HDR_LEN + n + 1);
	const unsigned char salt[FV_SALT_LEN] = "fuzz-salt-012345";
	const struct fv_mac *mac = keyed ? &KEY : NULL;
	size_t i;

	FUZZ_CHECK(v);
	memcpy(v + FV_HDR_LEN, d, n);
	FUZZ_CHECK(fv_header(v, FIXED, 1u << 20, v + FV_HDR_LEN, (uint32_t)n, mac, salt) == 0);
	FUZZ_CHECK(check(v, FV_HDR_LEN + n, FIXED, 1u << 20, (uint32_t)n, mac) == 0);
	if (flip) {
		i = (bit / 8) % (FV_HDR_LEN + n);
		v[i] ^= (uint8_t)(1u << (bit % 8));
		FUZZ_CHECK(check(v, FV_HDR_LEN + n, FIXED, 1u << 20, (uint32_t)n, mac) < 0 ||
			   (!keyed && i == 44 && bit % 8 == 0));
	}
	free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t mode;
	const uint8_t *v;
	size_t n;

	if (size < 1)
		return 0;
	mode = data[0];
	v = data + 1;
	n = size - 1;
	if (mode & 0x04) {
		size_t bit = n >= 2 ? (size_t)le(v, 2) : 0;

		if (n > (1u << 20))
			return 0;
		round_trip(v, n, mode & 0x01, !(mode & 0x08), bit);
		return 0;
	}
	if ((mode & 0x02) && n >= 40) {
		struct cache_key k = {.oid = {.hi = le(v + 8, 8), .lo = le(v + 16, 8)},
				      .blk = le(v + 24, 8)};

		check(v, n, k, (uint32_t)le(v + 32, 4), (uint32_t)le(v + 36, 4),
		      mode & 0x01 ? &KEY : NULL);
	} else {
		check(v, n, FIXED, 1u << 20, n > FV_HDR_LEN ? (uint32_t)(n - FV_HDR_LEN) : 0,
		      mode & 0x01 ? &KEY : NULL);
	}
	return 0;
}
