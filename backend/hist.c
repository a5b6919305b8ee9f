/*
 * hist.c - the latency histogram (hist.h).
 *
 *     observe(ns) ─► us = ns / 1000 ─► first bound >= us ─► counts[i] += 1, sum_us += us
 *                                      (none: the last, +Inf bucket)
 *
 *     bounds (us): 25 50 100 250 500 | 1k 2.5k 5k 10k 25k 50k 100k 250k 500k | 1M 2.5M 5M
 *                  10M 30M | +Inf
 *
 * The buckets are counted one by one, not cumulatively, so an observation is two atomic adds;
 * the writer sums them into Prometheus's cumulative form. A reader may see a count without its
 * share of the sum (or the reverse) for an instant: a scrape is a snapshot of counters, and the
 * next one agrees.
 *
 * Locking: none; relaxed atomics. Workload: one observation per store request and per read
 * answered, a load of 21 words per scrape.
 */
#include "hist.h"

const uint64_t bk_hist_bounds_us[BK_HIST_BUCKETS - 1] = {
    25,	   50,	   100,	   250,	   500,	    1000,    2500,    5000,	10000,	  25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000,
};

void bk_hist_observe(struct bk_hist *h, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned i = 0;

	while (i < BK_HIST_BUCKETS - 1 && us > bk_hist_bounds_us[i])
		i++;
	__atomic_fetch_add(&h->counts[i], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->sum_us, us, __ATOMIC_RELAXED);
}

void bk_hist_load(const struct bk_hist *h, struct bk_hist *ret)
{
	for (unsigned i = 0; i < BK_HIST_BUCKETS; i++)
		ret->counts[i] = __atomic_load_n(&h->counts[i], __ATOMIC_RELAXED);
	ret->sum_us = __atomic_load_n(&h->sum_us, __ATOMIC_RELAXED);
}
