/*
 * events.c - simulated time: one clock and one queue of things to run at given times, for the
 * whole simulated fleet.
 *
 *   heap[0] = the earliest (t, seq)         sim_ev_run_until(T): pop while heap[0].t <= T,
 *        /            \                        now = its t, run it (it may push more)
 *   heap[1]          heap[2]                   then now = T
 *   ...
 *
 * A binary min-heap on (time, sequence number): events due at the same instant run in the
 * order they were scheduled, so a replay is deterministic. The clock never goes back: an
 * event scheduled in the past runs at now. The cache sees the clock through sim_env: mono_ns
 * is now plus a constant (the cache takes 0 to mean "never" in places), wall_s the traces'
 * wall clock at now, and defer is a push.
 *
 * Also here: splitmix64, and a lognormal draw for latencies (Box-Muller on two uniforms).
 *
 * Locking: none; one thread runs the world. Workload: one push and one pop per store GET,
 * Redis call and limiter timer; the heap holds what is in flight, a few thousand at most.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "sim_i.h"

void sim_ev_init(struct sim_events *q, uint64_t now)
{
	*q = (struct sim_events){.now = now};
}

void sim_ev_done(struct sim_events *q)
{
	free(q->heap);
	q->heap = NULL;
	q->n = q->cap = 0;
}

static bool before(const struct sim_ev *a, const struct sim_ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

int sim_ev_at(struct sim_events *q, uint64_t t, void (*fn)(void *), void *arg)
{
	size_t i;

	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 1024;
		struct sim_ev *h = realloc(q->heap, cap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		q->heap = h;
		q->cap = cap;
	}
	struct sim_ev e = {t < q->now ? q->now : t, q->seq++, fn, arg};

	for (i = q->n++; i > 0 && before(&e, &q->heap[(i - 1) / 2]); i = (i - 1) / 2)
		q->heap[i] = q->heap[(i - 1) / 2];
	q->heap[i] = e;
	return 0;
}

static struct sim_ev pop(struct sim_events *q)
{
	struct sim_ev top = q->heap[0], last = q->heap[--q->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= q->n)
			break;
		if (c + 1 < q->n && before(&q->heap[c + 1], &q->heap[c]))
			c++;
		if (!before(&q->heap[c], &last))
			break;
		q->heap[i] = q->heap[c];
		i = c;
	}
	if (q->n)
		q->heap[i] = last;
	return top;
}

uint64_t sim_ev_run_until(struct sim_events *q, uint64_t t)
{
	uint64_t ran = 0;

	while (q->n && q->heap[0].t <= t) {
		struct sim_ev e = pop(q);

		q->now = e.t;
		e.fn(e.arg);
		ran++;
	}
	if (t > q->now)
		q->now = t;
	q->ran += ran;
	return ran;
}

uint64_t sim_ev_run_all(struct sim_events *q)
{
	uint64_t ran = 0;

	while (q->n) {
		struct sim_ev e = pop(q);

		q->now = e.t;
		e.fn(e.arg);
		ran++;
	}
	q->ran += ran;
	return ran;
}

/* ---- the cache's environment ---------------------------------------------------------------- */

static uint64_t clk_mono(void *arg)
{
	const struct sim_clock *c = arg;

	return c->q->now + c->mono0;
}

static int64_t clk_wall(void *arg)
{
	const struct sim_clock *c = arg;

	return (int64_t)((c->wall0_ns + c->q->now) / 1000000000ULL);
}

static int clk_defer(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg)
{
	struct sim_clock *c = arg;

	return sim_ev_at(c->q, c->q->now + delay_ns, cb, cb_arg);
}

static void nothing(void *ctx)
{
	(void)ctx;
}

struct cache_env sim_env(struct sim_clock *clk)
{
	return (struct cache_env){
	    .arg = clk,
	    .mono_ns = clk_mono,
	    .wall_s = clk_wall,
	    .defer = clk_defer,
	    .hold = nothing,
	    .release = nothing,
	};
}

/* ---- randomness ----------------------------------------------------------------------------- */

uint64_t sim_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A uniform draw in (0, 1). */
static double uniform(uint64_t *state)
{
	return ((double)(sim_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

uint64_t sim_lognormal(uint64_t *state, uint64_t p50, uint64_t p99)
{
	double mu = log((double)(p50 ? p50 : 1));
	double sigma = p99 > p50 ? log((double)p99 / (double)p50) / 2.3263478740 : 0.0;
	double z = sqrt(-2.0 * log(uniform(state))) * cos(6.283185307179586 * uniform(state));

	return (uint64_t)exp(mu + sigma * z);
}
