/*
 * test_ratelimit.c - unit tests for cache/ratelimit.c, driven by a fake clock (no sleeps).
 *
 * The consumer model used throughout is the I/O thread's: call rl_take(); on a wait, advance
 * the clock by exactly that wait and call again. Exact waits are checked where the arithmetic
 * is exact; long-run rates within 0.1%; a randomised run checks the bucket against its
 * conservation law (granted + tokens <= burst + rate * elapsed) and that every returned wait
 * is enough.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cache_i.h"

#define NS  1000000000ull
#define MIB (1024ull * 1024)
#define T0  1000000000000ull /* an arbitrary, non-zero start time */
#define BLK (4 * MIB)

/* A consumer taking @bytes at a time until @secs of simulated time have passed. */
struct run {
	uint64_t now;	  /* fake clock */
	uint64_t granted; /* bytes charged */
	uint64_t takes;	  /* successful rl_take() calls */
};

/*
 * Keep taking @bytes, advancing the clock by exactly each returned wait, until the clock
 * reaches @until. Every wait must be enough: the take right after it passes.
 */
static void consume(struct rl *r, struct run *s, uint64_t bytes, uint64_t until)
{
	while (s->now < until) {
		uint64_t w = rl_take(r, bytes, s->now);

		if (w) {
			s->now += w;
			assert_int_equal(rl_take(r, bytes, s->now), 0);
		}
		s->granted += bytes;
		s->takes++;
	}
}

/* @amount / elapsed must be within 0.1% of @rate. */
static void check_rate(double amount, uint64_t elapsed_ns, uint64_t rate)
{
	double got = amount * 1e9 / (double)elapsed_ns;
	double err = (got - (double)rate) / (double)rate;

	if (err < 0)
		err = -err;
	assert_true(err < 0.001);
}

static void long_run(uint64_t rate, uint64_t burst, uint64_t bytes)
{
	struct rl r;
	struct run s = {.now = T0};

	rl_init(&r, rate, burst, 0, T0);
	consume(&r, &s, bytes, T0 + 100 * NS);
	if (bytes <= r.burst) /* the bucket ends about empty: granted - burst is the rate's work */
		check_rate((double)s.granted - (double)r.burst, s.now - T0, rate);
	/* in general (oversize charges end in debt): granted - (tokens at start - at end) */
	check_rate((double)s.granted - (double)r.burst + rl_tokens(&r, s.now), s.now - T0, rate);
}

static void test_long_run_rate(void **state)
{
	(void)state;
	long_run(20000000, 0, BLK);
	long_run(100000000, 0, BLK);
	long_run(20000000, MIB, BLK); /* every charge oversize */
	long_run(100000000, 1, BLK);
	long_run(3000000, 0, 1234); /* odd sizes: fractional refills */
}

static void test_exact_waits(void **state)
{
	struct rl r;

	(void)state;
	rl_init(&r, 1000000, 1000000, 0, 0);
	assert_int_equal(r.burst, 1000000);
	assert_int_equal(rl_take(&r, 1000000, 0), 0);
	/* 1000 bytes short at 1,000,000 B/s: 1 ms */
	assert_int_equal(rl_take(&r, 1000, 0), 1000000);
	assert_true(rl_tokens(&r, 0) == 0.0); /* nothing taken by a wait */
	assert_int_equal(rl_take(&r, 1000, 500000), 500000);
	assert_int_equal(rl_take(&r, 1000, 999999), 1);
	assert_int_equal(rl_take(&r, 1000, 1000000), 0);
	assert_true(rl_tokens(&r, 1000000) == 0.0);

	/* 3 B/s, 1 byte: 333333333.3 ns rounds up */
	rl_init(&r, 3, 3, 0, 0);
	assert_int_equal(rl_take(&r, 3, 0), 0);
	assert_int_equal(rl_take(&r, 1, 0), 333333334);
	assert_int_equal(rl_take(&r, 1, 333333333), 1);
	assert_int_equal(rl_take(&r, 1, 333333334), 0);

	/* burst 0 means 2 x rate */
	rl_init(&r, 1000000, 0, 0, 0);
	assert_int_equal(r.burst, 2000000);
	assert_true(rl_tokens(&r, 0) == 2000000.0);
}

static void test_burst(void **state)
{
	struct rl r;
	uint64_t now = T0, passed = 0;

	(void)state;
	rl_init(&r, 1000000, 0, 0, now);
	assert_int_equal(rl_take(&r, 2000000, now), 0); /* drain */
	now += 3600 * NS;				/* idle: refills to burst, no further */
	while (rl_take(&r, 1000, now) == 0)
		passed += 1000;
	assert_int_equal(passed, r.burst);
	assert_int_equal(rl_take(&r, 1000, now), 1000000);

	/* the whole burst in one charge passes too; one byte more waits 1 us */
	now += 10 * NS;
	assert_int_equal(rl_take(&r, 2000000, now), 0);
	assert_int_equal(rl_take(&r, 1, now), 1000);
}

static void test_oversize(void **state)
{
	struct rl r;
	uint64_t now = T0;
	int i;

	(void)state;
	/* 4 MiB charge, 1 MB bucket: passes when full, leaves a debt */
	rl_init(&r, 1000000, 1000000, 0, now);
	assert_int_equal(rl_take(&r, BLK, now), 0);
	assert_true(rl_tokens(&r, now) == 1000000.0 - (double)BLK);
	/* the next one waits until the bucket is full again: debt plus burst */
	assert_int_equal(rl_take(&r, BLK, now), BLK * 1000);
	now += BLK * 1000;
	assert_int_equal(rl_take(&r, BLK, now), 0);
	/* a small charge waits out the debt */
	assert_int_equal(rl_take(&r, 1000, now), (BLK - 1000000 + 1000) * 1000);

	/* not full yet: the wait is until full, not until 4 MiB */
	rl_init(&r, 1000000, 1000000, 0, now);
	assert_int_equal(rl_take(&r, 400000, now), 0);
	assert_int_equal(rl_take(&r, BLK, now), 400000 * 1000);

	/* a 1-byte bucket */
	rl_init(&r, 1000000, 1, 0, now);
	assert_int_equal(rl_take(&r, BLK, now), 0);
	assert_true(rl_tokens(&r, now) == 1.0 - (double)BLK);
	for (i = 0; i < 1000; i++) {
		uint64_t w = rl_take(&r, BLK, now);

		assert_int_equal(w, BLK * 1000); /* (debt + 1) bytes at 1 byte/us */
		now += w;
		assert_int_equal(rl_take(&r, BLK, now), 0);
	}
	/* a 1-byte bucket with 1-byte charges: one per microsecond */
	rl_init(&r, 1000000, 1, 0, now);
	assert_int_equal(rl_take(&r, 1, now), 0);
	assert_int_equal(rl_take(&r, 1, now), 1000);
}

static void test_short_block(void **state)
{
	struct rl r;

	(void)state;
	rl_init(&r, 1000000, 1000000, 0, 0);
	assert_int_equal(rl_take(&r, 1234, 0), 0);
	assert_true(rl_tokens(&r, 0) == 1000000.0 - 1234.0);
	assert_int_equal(rl_take(&r, 1000000, 0), 1234000);
	assert_int_equal(rl_take(&r, 1000000, 1234000), 0);
	assert_true(rl_tokens(&r, 1234000) == 0.0);
}

static void test_ops(void **state)
{
	struct rl r;
	struct run s = {.now = T0};
	double before, op_before;

	(void)state;
	/* ops=10, bytes practically unlimited: 10 at once, then one per 100 ms */
	rl_init(&r, 1000000000000000ull, 0, 10, T0);
	while (s.takes < 1000) {
		uint64_t w = rl_take(&r, BLK, s.now);

		if (w)
			s.now += w;
		else
			s.takes++;
	}
	assert_int_equal(s.now - T0, 99 * NS);

	/* both limits, ops slower: 1000-byte takes at 1 MB/s could run 1000/s, ops allow 10/s */
	rl_init(&r, 1000000, 1000000, 10, T0);
	s = (struct run){.now = T0};
	consume(&r, &s, 1000, T0 + 100 * NS);
	check_rate((double)s.takes - 10, s.now - T0, 10);

	/* both limits, bytes slower: 1 MB takes at 1 MB/s are 1/s, ops allow 10/s */
	rl_init(&r, 1000000, 1000000, 10, T0);
	s = (struct run){.now = T0};
	consume(&r, &s, 1000000, T0 + 100 * NS);
	check_rate((double)s.takes - 1, s.now - T0, 1);

	/* the wait is the larger of both, and nothing is taken from either bucket */
	rl_init(&r, 1000000, 1000000, 1, T0);
	assert_int_equal(rl_take(&r, 999000, T0), 0);
	before = rl_tokens(&r, T0);
	op_before = r.op_tokens;
	assert_int_equal(rl_take(&r, 2000, T0), NS); /* bytes need 1 ms, the op 1 s */
	assert_true(rl_tokens(&r, T0) == before);
	assert_true(r.op_tokens == op_before);
	rl_init(&r, 1000, 1000, 1000, T0);
	assert_int_equal(rl_take(&r, 1000, T0), 0);
	assert_int_equal(rl_take(&r, 1, T0), 1000000); /* bytes short, an op token left */
	assert_int_equal(rl_take(&r, 500, T0), 500000000);
	assert_true(r.op_tokens == 999.0);

	/* ops capacity is max(1, ops): ops=1 allows one request, not zero */
	rl_init(&r, 0, 0, 1, T0);
	assert_int_equal(rl_take(&r, 1, T0), 0);
	assert_int_equal(rl_take(&r, 1, T0), NS);
}

static void test_unlimited(void **state)
{
	struct rl r;
	int i;

	(void)state;
	rl_init(&r, 0, 0, 0, T0);
	for (i = 0; i < 1000; i++)
		assert_int_equal(rl_take(&r, UINT64_MAX, T0), 0);
	assert_int_equal(rl_take(&r, BLK, 0), 0); /* even with the clock going backwards */

	/* rate 0 turns off the byte bucket only: an ops limit still applies */
	rl_init(&r, 0, 0, 2, T0);
	assert_int_equal(rl_take(&r, UINT64_MAX, T0), 0);
	assert_int_equal(rl_take(&r, UINT64_MAX, T0), 0);
	assert_int_equal(rl_take(&r, UINT64_MAX, T0), NS / 2);

	/* switching to unlimited mid-debt lets everything pass */
	rl_init(&r, 1000, 1000, 0, T0);
	assert_int_equal(rl_take(&r, BLK, T0), 0);
	assert_int_not_equal(rl_take(&r, 1, T0), 0);
	rl_set(&r, 0, 0, 0, T0);
	assert_int_equal(rl_take(&r, BLK, T0), 0);
	/* and back on: the bucket starts full, like rl_init() */
	rl_set(&r, 1000, 1000, 0, T0);
	assert_true(rl_tokens(&r, T0) == 1000.0);
	assert_int_equal(rl_take(&r, 1000, T0), 0);
	assert_int_equal(rl_take(&r, 1, T0), 1000000);
}

static void test_set(void **state)
{
	struct rl r;
	struct run s = {.now = T0};
	uint64_t mid, granted_mid;

	(void)state;
	/* 20M/s for 50 s, then 100M/s for 50 s: each half measures its own rate */
	rl_init(&r, 20000000, 0, 0, T0);
	consume(&r, &s, BLK, T0 + 50 * NS);
	check_rate((double)s.granted - (double)r.burst, s.now - T0, 20000000);
	mid = s.now;
	granted_mid = s.granted;
	rl_set(&r, 100000000, 0, 0, mid);
	assert_int_equal(r.burst, 200000000);
	assert_true(rl_tokens(&r, mid) < (double)BLK); /* kept, not refilled to the new burst */
	consume(&r, &s, BLK, mid + 50 * NS);
	check_rate((double)(s.granted - granted_mid), s.now - mid, 100000000);

	/* the time before rl_set() is refilled at the old rate */
	rl_init(&r, 1000000, 1000000, 0, 0);
	assert_int_equal(rl_take(&r, 1000000, 0), 0);
	rl_set(&r, 2000000, 1000000, 0, NS / 2);
	assert_true(rl_tokens(&r, NS / 2) == 500000.0);
	assert_true(rl_tokens(&r, NS / 2 + NS / 4) == 1000000.0);

	/* a smaller burst clamps the tokens; a larger one does not add any */
	rl_init(&r, 1000000, 1000000, 0, 0);
	rl_set(&r, 1000000, 1000, 0, 0);
	assert_true(rl_tokens(&r, 0) == 1000.0);
	rl_set(&r, 1000000, 5000, 0, 0);
	assert_true(rl_tokens(&r, 0) == 1000.0);
	assert_int_equal(rl_take(&r, 1001, 0), 1000);

	/* a debt survives a burst change */
	rl_init(&r, 1000000, 1000000, 0, 0);
	assert_int_equal(rl_take(&r, BLK, 0), 0);
	rl_set(&r, 1000000, 1000, 0, 0);
	assert_true(rl_tokens(&r, 0) == 1000000.0 - (double)BLK);

	/* fewer ops clamps the op tokens */
	rl_init(&r, 0, 0, 100, 0);
	rl_set(&r, 0, 0, 2, 0);
	assert_true(r.op_tokens == 2.0);
}

static void test_clock_backwards(void **state)
{
	struct rl r;
	uint64_t w, w2;

	(void)state;
	rl_init(&r, 1000000, 1000000, 10, 10 * NS);
	assert_int_equal(rl_take(&r, 1000000, 10 * NS), 0);
	w = rl_take(&r, 1000, 10 * NS);
	assert_int_equal(w, 1000000);
	w2 = rl_take(&r, 1000, 5 * NS);	  /* earlier: no tokens appear, nothing wraps */
	assert_int_equal(w2, w + 5 * NS); /* and the wait counts from the caller's clock */
	assert_true(rl_tokens(&r, 0) == 0.0);
	/* back at the old time: the interval is not credited twice */
	assert_true(rl_tokens(&r, 10 * NS) == 0.0);
	assert_true(rl_tokens(&r, 10 * NS + NS / 2) == 500000.0);
	rl_set(&r, 1000000, 1000000, 10, 0); /* rl_set() with an old time is harmless too */
	assert_true(rl_tokens(&r, 10 * NS + NS / 2) == 500000.0);
}

static void test_huge(void **state)
{
	struct rl r;

	(void)state;
	/* ten hours idle at 100M/s, and the whole uint64 clock range */
	rl_init(&r, 100000000, 0, 10, 0);
	assert_int_equal(rl_take(&r, 200000000, 0), 0);
	assert_true(rl_tokens(&r, 36000 * NS) == 200000000.0);
	assert_true(rl_tokens(&r, UINT64_MAX) == 200000000.0);
	assert_int_equal(rl_take(&r, 200000000, UINT64_MAX), 0);
	assert_int_equal(rl_take(&r, 1, UINT64_MAX), 10); /* 1 byte at 100M/s */

	/* the largest rate: burst saturates, refills do not overflow */
	rl_init(&r, UINT64_MAX, 0, UINT64_MAX, 0);
	assert_int_equal(r.burst, UINT64_MAX);
	assert_int_equal(rl_take(&r, UINT64_MAX, 0), 0);
	assert_int_equal(rl_take(&r, UINT64_MAX, UINT64_MAX), 0);

	/* a wait longer than the clock can count saturates */
	rl_init(&r, 1, 0, 0, 0);
	assert_int_equal(rl_take(&r, UINT64_MAX, 0), 0); /* oversize at full: a debt of ~2^64 */
	assert_int_equal(rl_take(&r, 1, 0), UINT64_MAX);

	/* a clock at 0 after the last call at UINT64_MAX: the wait saturates */
	rl_init(&r, 1000000, 1000000, 0, UINT64_MAX);
	assert_int_equal(rl_take(&r, 1000000, UINT64_MAX), 0);
	assert_int_equal(rl_take(&r, 1, UINT64_MAX), 1000);
	assert_int_equal(rl_take(&r, 1, 0), UINT64_MAX);
}

/* xorshift64*: a fixed-seed generator so failures reproduce */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return (rnd_state * 2685821657736338717ull) % n;
}

/*
 * Random charges, clock steps (exact waits, shorter, longer, backwards) and settings. Per
 * settings epoch: granted + tokens never exceeds the start tokens + rate * elapsed, tokens
 * never exceed burst, and waiting a returned wait is always enough (checked on a copy).
 */
/*
 * A timer fires late (the I/O loop is busy): the time past a wait's end is not lost to a
 * full bucket. A bucket of one block refilled to its cap at the due time used to drop the
 * late part, and the rate fell by late / (late + wait) (2.3% here); it now holds within 0.1%.
 */
static void test_late_timers(void **state)
{
	const uint64_t rate = 100000000, late = NS / 1000;
	struct rl r;
	struct run s = {.now = T0};
	double granted;

	(void)state;
	rl_init(&r, rate, BLK, 0, T0);
	while (s.now < T0 + 100 * NS) {
		uint64_t w = rl_take(&r, BLK, s.now);

		if (w) {
			s.now += w + late;
			assert_int_equal(rl_take(&r, BLK, s.now), 0);
		}
		s.granted += BLK;
	}
	/* the tokens left are the last timer's lateness, never more than a bucket */
	granted = (double)s.granted - (double)BLK + rl_tokens(&r, s.now);
	check_rate(granted, s.now - T0, rate);
	assert_true(rl_tokens(&r, s.now) <= (double)rate * (double)late / 1e9 + 1.0);

	/* 20 ms late: found what was due plus those 20 ms (within the wait's rounding up) */
	rl_init(&r, rate, BLK, 0, T0);
	assert_int_equal(rl_take(&r, BLK, T0), 0);
	s.now = T0 + rl_take(&r, BLK, T0) + 20 * NS / 1000;
	assert_true(rl_tokens(&r, s.now) >= (double)BLK + (double)rate * 0.02);
	assert_true(rl_tokens(&r, s.now) < (double)BLK + (double)rate * 0.02 + 1.0);

	/* later than RL_LATE_NS, or never back (the reader went away): no credit, a plain bucket */
	rl_init(&r, rate, BLK, 0, T0);
	assert_int_equal(rl_take(&r, BLK, T0), 0);
	s.now = T0 + rl_take(&r, BLK, T0) + 2 * RL_LATE_NS;
	assert_true(rl_tokens(&r, s.now) == (double)BLK);
	assert_true(rl_tokens(&r, s.now + 3600 * NS) == (double)BLK);

	/* the request bucket is credited alike: 10 requests/s, each timer 20 ms late */
	rl_init(&r, 0, 0, 10, T0);
	s = (struct run){.now = T0};
	while (s.now < T0 + 100 * NS) {
		uint64_t w = rl_take(&r, 1, s.now);

		if (w) {
			s.now += w + 20 * NS / 1000;
			assert_int_equal(rl_take(&r, 1, s.now), 0);
		}
		s.takes++;
	}
	check_rate((double)s.takes - 10.0 + r.op_tokens, s.now - T0, 10);
}

static void test_random(void **state)
{
	int round, i;

	(void)state;
	for (round = 0; round < 200; round++) {
		uint64_t rate = 1000 + rnd(200000000), burst = rnd(3) ? rnd(16 * MIB) : 0;
		uint64_t now = rnd(UINT64_MAX / 2), hi = now, start = now, granted = 0;
		double start_tokens, bound, slack;
		struct rl r;

		rl_init(&r, rate, burst, rnd(2) ? 0 : 1 + rnd(1000), now);
		start_tokens = rl_tokens(&r, now);
		for (i = 0; i < 2000; i++) {
			uint64_t bytes = 1 + rnd(8 * MIB), w, back;
			struct rl copy;

			if (rnd(50) == 0) { /* new settings: a new epoch */
				rate = 1000 + rnd(200000000);
				burst = rnd(3) ? rnd(16 * MIB) : 0;
				rl_set(&r, rate, burst, rnd(2) ? 0 : 1 + rnd(1000), now);
				start = r.last_ns;
				start_tokens = r.tokens;
				granted = 0;
			}

			w = rl_take(&r, bytes, now);
			if (w == 0) {
				granted += bytes;
			} else {
				copy = r;
				assert_int_equal(rl_take(&copy, bytes, now + w), 0);
			}
			switch (rnd(4)) {
			case 0:
				now += w;
				break;
			case 1:
				now += w / 2;
				break;
			case 2:
				now += rnd(2 * NS);
				break;
			default:
				back = rnd(NS); /* the clock steps backwards */
				now -= back < now ? back : 0;
				break;
			}
			if (now > hi)
				hi = now;
			/* a late caller's credit is at most one more bucket */
			assert_true(r.tokens <= 2.0 * (double)r.burst);
			bound = start_tokens + (double)rate * (double)(r.last_ns - start) / 1e9;
			/* slack for double rounding: 1e-12 relative */
			slack = (bound < 0 ? -bound : bound) * 1e-12 + 1e-6;
			assert_true((double)granted + r.tokens <= bound + slack);
		}
		assert_true(r.last_ns <= hi);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exact_waits),	    cmocka_unit_test(test_long_run_rate),
	    cmocka_unit_test(test_burst),	    cmocka_unit_test(test_oversize),
	    cmocka_unit_test(test_short_block),	    cmocka_unit_test(test_ops),
	    cmocka_unit_test(test_unlimited),	    cmocka_unit_test(test_set),
	    cmocka_unit_test(test_clock_backwards), cmocka_unit_test(test_huge),
	    cmocka_unit_test(test_late_timers),	    cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, 0, 0);
}
