/*
 * ratelimit.c - the lagging tier's token bucket (docs/design.md invariants 1 and 4).
 *
 * What: every lagging-tier miss is charged here before its fetch is started. rl_take() never
 * sleeps: it either charges the request and returns 0, or charges nothing and returns the
 * nanoseconds after which the same request would pass; the I/O thread arms a timer for that
 * and calls again. Time is passed in, so the unit test drives it with a fake clock.
 *
 * Two buckets, both starting full and refilled on every call by the time since last_ns:
 *
 *     byte tokens   tokens    += rate * elapsed_ns / 1e9,  capped at burst  (burst 0 = 2 x rate)
 *     op tokens     op_tokens += ops  * elapsed_ns / 1e9,  capped at max(1, ops)
 *
 *          debt        0                     want = min(bytes, burst)    burst
 *     ------|----------|----------------------------|------------------------|
 *           ^ tokens after an oversize charge       a charge passes once tokens >= want
 *
 * A charge of b bytes passes when tokens >= min(b, burst) and op_tokens >= 1, and then takes b
 * and 1. Charging b itself (not block_size) makes a short last block cost its length. A charge
 * larger than the bucket (b > burst) thus passes once the bucket is full and leaves
 * tokens = burst - b < 0, a debt that later charges wait out: it never deadlocks and the
 * long-run rate still holds. Otherwise the wait is ceil((want - tokens) * 1e9 / rate) ns (at
 * least 1), the larger of the two buckets' waits, and neither bucket is touched.
 *
 * rate 0 or ops 0 switches that bucket off (unlimited); the other one still applies. A bucket
 * switched back on by rl_set() starts full, as in rl_init().
 *
 * Late timers: a refused caller comes back when its timer fires, which on a busy I/O loop is
 * a little after the wait it was given. By then a small bucket (one block, say) is full, and
 * the cap would throw the late part away: each wait would lose its lateness and the rate fall
 * by late / (wait + late). So the due time of the oldest refused charge is kept (due_ns), and
 * until a charge passes the caps are raised by what the time past it is worth (at most one
 * more bucket): the late caller finds exactly what it would have found on time, plus the
 * lateness, which the next charge then waits less for. Only lateness up to RL_LATE_NS counts:
 * past it, nobody came back (a waiter gone, a stalled loop) and the bucket is a plain one
 * again, so an idle limiter never holds more than its burst. Tokens are still only made by
 * time: granted + tokens <= burst + rate * elapsed holds as before.
 *
 * Arithmetic: tokens are doubles so fractional refills are kept (exact to well under a byte for
 * any sane burst). The product rate * elapsed is done in double, so hours of idle time or a
 * rate near UINT64_MAX cannot overflow, and waits beyond 2^64 ns saturate to UINT64_MAX. A
 * clock that goes backwards counts as no elapsed time: last_ns only moves forward, so time is
 * never credited twice, and a wait returned to a caller behind last_ns includes the gap.
 *
 * Locking: none. The caller serialises all calls on one struct rl with its own lock.
 * Workload: one call per lagging miss (a few thousand per second at most), O(1) each.
 */
#include "cache_i.h"

/* Tokens a bucket of @rate per second gains in @ns. */
static double gain(uint64_t rate, uint64_t ns)
{
	return (double)rate * (double)ns / 1e9;
}

static double refill_one(double tokens, uint64_t rate, uint64_t ns, double cap)
{
	tokens += gain(rate, ns);
	return tokens < cap ? tokens : cap;
}

static double op_cap(const struct rl *r)
{
	return r->ops ? (double)r->ops : 1.0;
}

uint64_t rl_burst(uint64_t rate, uint64_t burst)
{
	if (burst)
		return burst;
	return rate > UINT64_MAX / 2 ? UINT64_MAX : 2 * rate;
}

/* @cap raised by what @late ns are worth at @rate, by at most one more @cap ("Late timers"). */
static double late_cap(double cap, uint64_t rate, uint64_t late)
{
	double more = gain(rate, late);

	return cap + (more < cap ? more : cap);
}

static void refill(struct rl *r, uint64_t now_ns)
{
	uint64_t ns, late = 0;

	if (now_ns <= r->last_ns)
		return; /* same instant, or the clock went backwards */
	ns = now_ns - r->last_ns;
	r->last_ns = now_ns;
	if (r->due_ns && now_ns > r->due_ns) {
		late = now_ns - r->due_ns;
		if (late > RL_LATE_NS) /* nobody came back in time: a stall or a waiter gone */
			late = r->due_ns = 0;
	}
	if (r->rate)
		r->tokens = refill_one(r->tokens, r->rate, ns, late_cap((double)r->burst, r->rate, late));
	if (r->ops)
		r->op_tokens = refill_one(r->op_tokens, r->ops, ns, late_cap(op_cap(r), r->ops, late));
}

/*
 * Nanoseconds until a bucket holding @have (< @want) reaches @want at @rate: the smallest ns
 * (at least 1) for which the refill done after waiting ns gets there, computed with the very
 * expression refill() uses, so a caller that waits exactly this long passes. The ceiling is
 * usually exact already; the loop only absorbs double rounding.
 */
static uint64_t wait_ns(double have, double want, uint64_t rate)
{
	double x = (want - have) * 1e9 / (double)rate;
	uint64_t ns, step = 1;

	if (x >= 18446744073709551616.0) /* 2^64 */
		return UINT64_MAX;
	ns = (uint64_t)x;
	if ((double)ns < x)
		ns++;
	if (ns == 0)
		ns = 1;
	while (have + gain(rate, ns) < want && ns < UINT64_MAX) {
		ns = ns > UINT64_MAX - step ? UINT64_MAX : ns + step;
		step *= 2;
	}
	return ns;
}

void rl_init(struct rl *r, uint64_t rate, uint64_t burst, uint64_t ops, uint64_t now_ns)
{
	r->rate = rate;
	r->burst = rl_burst(rate, burst);
	r->tokens = (double)r->burst;
	r->ops = ops;
	r->op_tokens = op_cap(r);
	r->last_ns = now_ns;
	r->due_ns = 0;
}

void rl_set(struct rl *r, uint64_t rate, uint64_t burst, uint64_t ops, uint64_t now_ns)
{
	bool bytes_were_off = !r->rate, ops_were_off = !r->ops;

	refill(r, now_ns); /* bank the time so far at the old settings */
	r->rate = rate;
	r->burst = rl_burst(rate, burst);
	r->ops = ops;
	if (bytes_were_off || r->tokens > (double)r->burst)
		r->tokens = (double)r->burst; /* a debt (< 0) is kept */
	if (ops_were_off || r->op_tokens > op_cap(r))
		r->op_tokens = op_cap(r);
	r->due_ns = 0; /* a waiter asks again under the new settings */
}

uint64_t rl_take(struct rl *r, uint64_t bytes, uint64_t now_ns)
{
	uint64_t wait = 0, op_wait = 0;
	double want = (double)(bytes < r->burst ? bytes : r->burst);

	refill(r, now_ns);
	if (r->rate && r->tokens < want)
		wait = wait_ns(r->tokens, want, r->rate);
	if (r->ops && r->op_tokens < 1.0)
		op_wait = wait_ns(r->op_tokens, 1.0, r->ops);
	if (wait || op_wait) {
		wait = wait > op_wait ? wait : op_wait;
		if (!r->due_ns) /* the oldest refusal's due time: lateness counts from there */
			r->due_ns = r->last_ns > UINT64_MAX - wait ? UINT64_MAX : r->last_ns + wait;
		/* a clock behind last_ns waits for last_ns first, so the wait is never short */
		if (now_ns < r->last_ns)
			wait = r->last_ns - now_ns > UINT64_MAX - wait
				   ? UINT64_MAX
				   : wait + (r->last_ns - now_ns);
		return wait;
	}
	if (r->rate)
		r->tokens -= (double)bytes;
	if (r->ops)
		r->op_tokens -= 1.0;
	r->due_ns = 0;
	return 0;
}

void rl_charge(struct rl *r, uint64_t bytes, uint64_t now_ns)
{
	refill(r, now_ns);
	if (r->rate)
		r->tokens -= (double)bytes;
	if (r->ops)
		r->op_tokens -= 1.0;
}

double rl_tokens(struct rl *r, uint64_t now_ns)
{
	refill(r, now_ns);
	return r->tokens;
}
