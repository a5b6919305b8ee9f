/*
 * test_upload.c - the upload contract (backend/upload.c's struct upload_plan) and the pure
 * pieces of S3's multipart planning, without I/O.
 *
 * 1. Configuration: defaults, the bounds each store sets.
 * 2. The plan step by step: which part S3 holds back, which one starts a multipart upload,
 *    what commit decides, every refusal (-EINVAL, -EAGAIN, -EFBIG, a failure seen).
 * 3. The plan against a naive reference model under random operations (SQLite's bitvec test):
 *    the same answer to every call, the same counts after it.
 * 4. The ETag S3 gives a multipart object, which a retried Complete is checked against.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "s3_i.h"
#include "upload.h"

#define MIB (1ull << 20)

/* ---- 1. configuration ---------------------------------------------------------------------- */

static void test_cfg_defaults_and_bounds(void **state)
{
	struct bk_upload_cfg c, in;

	(void)state;
	assert_int_equal(upload_plan_cfg(NULL, BK_PART_SIZE_MIN, &c), 0);
	assert_int_equal(c.part_size, BK_PART_SIZE_DEFAULT);
	assert_int_equal(c.max_parts_in_flight, BK_IN_FLIGHT_DEFAULT);
	assert_false(c.overwrite);
	assert_int_equal(c.prio, BK_URGENT);

	in = (struct bk_upload_cfg){.part_size = 5 * MIB,
				    .max_parts_in_flight = 2,
				    .overwrite = true,
				    .prio = BK_BACKGROUND};
	assert_int_equal(upload_plan_cfg(&in, BK_PART_SIZE_MIN, &c), 0);
	assert_int_equal(c.part_size, 5 * MIB);
	assert_int_equal(c.max_parts_in_flight, 2);
	assert_true(c.overwrite);
	assert_int_equal(c.prio, BK_BACKGROUND);

	/* S3's smallest part; file:// takes any */
	in = (struct bk_upload_cfg){.part_size = 5 * MIB - 1};
	c.part_size = 42;
	assert_int_equal(upload_plan_cfg(&in, BK_PART_SIZE_MIN, &c), -EINVAL);
	assert_int_equal(c.part_size, 42); /* written only on success */
	assert_int_equal(upload_plan_cfg(&in, 1, &c), 0);
	in.part_size = 1;
	assert_int_equal(upload_plan_cfg(&in, 1, &c), 0);
	in.part_size = BK_PART_SIZE_MAX + 1;
	assert_int_equal(upload_plan_cfg(&in, 1, &c), -EINVAL);
	in.part_size = BK_PART_SIZE_MAX;
	assert_int_equal(upload_plan_cfg(&in, BK_PART_SIZE_MIN, &c), 0);

	/* one part in flight would deadlock a caller against S3's held first part */
	in = (struct bk_upload_cfg){.max_parts_in_flight = 1};
	assert_int_equal(upload_plan_cfg(&in, 1, &c), -EINVAL);
	in.max_parts_in_flight = BK_IN_FLIGHT_MAX + 1;
	assert_int_equal(upload_plan_cfg(&in, 1, &c), -EINVAL);
	in.max_parts_in_flight = BK_IN_FLIGHT_MAX;
	assert_int_equal(upload_plan_cfg(&in, 1, &c), 0);
	in = (struct bk_upload_cfg){.prio = (enum bk_prio)7};
	assert_int_equal(upload_plan_cfg(&in, 1, &c), -EINVAL);
}

/* ---- 2. step by step ----------------------------------------------------------------------- */

static struct upload_plan plan(uint64_t part, unsigned in_flight, uint32_t max_parts)
{
	struct bk_upload_cfg c = {.part_size = part, .max_parts_in_flight = in_flight};
	struct upload_plan p;

	upload_plan_init(&p, &c, max_parts);
	return p;
}

static int take(struct upload_plan *p, size_t len, bool hold, uint32_t *no, uint64_t *off)
{
	return upload_plan_part(p, len, hold, no, off);
}

static void test_steps_s3(void **state)
{
	struct upload_plan p = plan(10, 8, BK_PARTS_MAX);
	uint32_t no = 0;
	uint64_t off = 0;

	(void)state;
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_HOLD);
	assert_int_equal(no, 1);
	assert_int_equal(off, 0);
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_START);
	assert_int_equal(no, 2);
	assert_int_equal(off, 10);
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_SEND);
	assert_int_equal(take(&p, 3, true, &no, &off), UPLOAD_SEND);
	assert_int_equal(no, 4);
	assert_int_equal(off, 30);
	assert_int_equal(p.size, 33);
	assert_int_equal(p.in_flight, 4);
	assert_int_equal(upload_plan_commit(&p, true), UPLOAD_COMPLETE);

	/* nothing, or one part (short or full): one PutObject */
	for (int n = 0; n <= 2; n++) {
		p = plan(10, 8, BK_PARTS_MAX);
		if (n)
			assert_int_equal(take(&p, n == 1 ? 4 : 10, true, &no, &off), UPLOAD_HOLD);
		assert_int_equal(upload_plan_commit(&p, true), UPLOAD_SINGLE);
		assert_int_equal(upload_plan_commit(&p, true), -EINVAL);
		assert_int_equal(upload_plan_abort(&p), -EINVAL);
	}
}

static void test_steps_file(void **state)
{
	struct upload_plan p = plan(10, 8, UINT32_MAX);
	uint32_t no;
	uint64_t off;

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_int_equal(take(&p, 10, false, &no, &off), UPLOAD_SEND);
	assert_int_equal(upload_plan_commit(&p, false), UPLOAD_COMPLETE);
	p = plan(10, 8, UINT32_MAX);
	assert_int_equal(upload_plan_commit(&p, false), UPLOAD_COMPLETE); /* empty object */
}

static void test_refusals(void **state)
{
	struct upload_plan p = plan(10, 2, 3);
	uint32_t no = 99;
	uint64_t off = 99;

	(void)state;
	assert_int_equal(take(&p, 0, true, &no, &off), -EINVAL);
	assert_int_equal(take(&p, 11, true, &no, &off), -EINVAL);
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_HOLD);
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_START);
	/* two in flight: a third waits for a done */
	no = off = 99;
	assert_int_equal(take(&p, 10, true, &no, &off), -EAGAIN);
	assert_int_equal(no, 99);
	assert_int_equal(off, 99);
	assert_int_equal(p.nparts, 2);
	upload_plan_done(&p, 0);
	assert_int_equal(take(&p, 10, true, &no, &off), UPLOAD_SEND);
	upload_plan_done(&p, 0);
	/* three parts is this store's limit */
	assert_int_equal(take(&p, 10, true, &no, &off), -EFBIG);
	/* a short part is the last */
	p = plan(10, 4, 100);
	assert_int_equal(take(&p, 4, false, &no, &off), UPLOAD_SEND);
	assert_int_equal(take(&p, 4, false, &no, &off), -EINVAL);
	assert_int_equal(take(&p, 10, false, &no, &off), -EINVAL);
	/* given back: as if never taken */
	upload_plan_untake(&p, 4);
	assert_int_equal(p.nparts, 0);
	assert_int_equal(p.size, 0);
	assert_int_equal(p.in_flight, 0);
	assert_int_equal(take(&p, 10, false, &no, &off), UPLOAD_SEND);
	assert_int_equal(no, 1);
	/* after the end: nothing */
	assert_int_equal(upload_plan_abort(&p), 0);
	assert_int_equal(take(&p, 10, false, &no, &off), -EINVAL);
	assert_int_equal(upload_plan_commit(&p, false), -EINVAL);
}

static void test_failure_is_handed_back(void **state)
{
	struct upload_plan p = plan(10, 4, 100);
	uint32_t no;
	uint64_t off;

	(void)state;
	assert_int_equal(take(&p, 10, false, &no, &off), UPLOAD_SEND);
	assert_int_equal(take(&p, 10, false, &no, &off), UPLOAD_SEND);
	upload_plan_done(&p, -ENOSPC);
	upload_plan_done(&p, -EIO); /* the first failure is the one kept */
	assert_int_equal(p.err, -ENOSPC);
	assert_int_equal(p.in_flight, 0);
	assert_int_equal(take(&p, 10, false, &no, &off), -ENOSPC);
	/* a caller's mistake is still named as such */
	assert_int_equal(take(&p, 11, false, &no, &off), -EINVAL);
	/* the size cannot wrap */
	p = plan(BK_PART_SIZE_MAX, 4, UINT32_MAX);
	p.size = UINT64_MAX - 5;
	assert_int_equal(take(&p, 6, false, &no, &off), -EFBIG);
	assert_int_equal(take(&p, 5, false, &no, &off), UPLOAD_SEND);
}

/* ---- 3. against a reference model ---------------------------------------------------------- */

/* The contract as plainly as it can be said, kept apart from upload.c's code. */
struct model {
	uint64_t part;
	unsigned max;
	uint32_t max_parts;
	uint32_t taken;
	uint64_t bytes;
	unsigned out;
	bool short_seen, over;
	int failure;
};

static int model_part(struct model *m, size_t len, bool hold, uint32_t *no)
{
	if (m->over || m->short_seen || len < 1 || len > m->part)
		return -EINVAL;
	if (m->failure)
		return m->failure;
	if (m->out == m->max)
		return -EAGAIN;
	if (m->taken == m->max_parts)
		return -EFBIG;
	m->taken++;
	*no = m->taken;
	m->bytes += len;
	m->out++;
	m->short_seen = len != m->part;
	if (hold && m->taken == 1)
		return UPLOAD_HOLD;
	return hold && m->taken == 2 ? UPLOAD_START : UPLOAD_SEND;
}

static void test_against_model(void **state)
{
	(void)state;
	srand(29);
	for (int round = 0; round < 2000; round++) {
		bool hold = round % 2;
		uint64_t part = 1 + (uint64_t)(rand() % 8);
		unsigned max = 2 + (unsigned)(rand() % 4);
		uint32_t max_parts = 1 + (uint32_t)(rand() % 12);
		struct upload_plan p = plan(part, max, max_parts);
		struct model m = {.part = part, .max = max, .max_parts = max_parts};

		for (int step = 0; step < 40; step++) {
			int r = rand() % 100, got, want;
			uint32_t no = 0, mno = 0;
			uint64_t off = 0;

			if (r < 60) { /* a part, now and then of a wrong size */
				size_t len = rand() % 5 ? part : (size_t)(rand() % (part + 2));
				uint64_t before = p.size;

				got = take(&p, len, hold, &no, &off);
				want = model_part(&m, len, hold, &mno);
				assert_int_equal(got, want);
				if (got >= 0) {
					assert_int_equal(no, mno);
					assert_int_equal(off, before);
				}
			} else if (r < 90 && m.out) { /* a done, now and then failed */
				int err = rand() % 10 ? 0 : -EIO;

				upload_plan_done(&p, err);
				m.out--;
				if (err && !m.failure)
					m.failure = err;
			} else if (r < 95) {
				got = upload_plan_commit(&p, hold);
				want = m.over		      ? -EINVAL
				       : hold && m.taken <= 1 ? UPLOAD_SINGLE
							      : UPLOAD_COMPLETE;
				m.over = true;
				assert_int_equal(got, want);
			}
			assert_int_equal(p.nparts, m.taken);
			assert_int_equal(p.size, m.bytes);
			assert_int_equal(p.in_flight, m.out);
			assert_int_equal(p.err, m.failure);
		}
	}
}

/* ---- 4. S3's multipart ETag ---------------------------------------------------------------- */

static void test_multipart_etag(void **state)
{
	/* MD5("hello"), MD5("world"); the object's ETag is MD5 of the two digests, "-2" */
	static const unsigned char md5s[2][16] = {{0x5d, 0x41, 0x40, 0x2a, 0xbc, 0x4b, 0x2a, 0x76,
						   0xb9, 0x71, 0x9d, 0x91, 0x10, 0x17, 0xc5, 0x92},
						  {0x7d, 0x79, 0x30, 0x37, 0xa0, 0x76, 0x01, 0x86,
						   0x57, 0x4b, 0x02, 0x82, 0xf2, 0xf4, 0x35, 0xe7}};
	static const unsigned char empty[1][16] = {{0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04,
						    0xe9, 0x80, 0x09, 0x98, 0xec, 0xf8, 0x42,
						    0x7e}};
	char etag[64];

	(void)state;
	s3_multipart_etag(md5s, 2, etag, sizeof(etag));
	assert_string_equal(etag, "\"065947336a2f2a95ba8899f3675c3be6-2\"");
	s3_multipart_etag(empty, 1, etag, sizeof(etag));
	assert_string_equal(etag, "\"59adb24ef3cdbe0297f05b395827453f-1\"");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cfg_defaults_and_bounds),
	    cmocka_unit_test(test_steps_s3),
	    cmocka_unit_test(test_steps_file),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_failure_is_handed_back),
	    cmocka_unit_test(test_against_model),
	    cmocka_unit_test(test_multipart_etag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
