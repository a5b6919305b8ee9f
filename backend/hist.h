/*
 * hist.h - a latency histogram: counts in fixed buckets and their sum, as relaxed atomics, so
 * the thread that times something adds to it without a lock and the metrics read it at any
 * time. The metrics print it as a Prometheus histogram (cumulative `le` buckets, fs/metrics.c).
 *
 * One set of bounds for every latency the mount shows, from a hit in memory (tens of
 * microseconds) to a store request that ran into its timeout (tens of seconds), so that the
 * dashboards compare the tiers bucket for bucket.
 */
#ifndef TIERFS_HIST_H
#define TIERFS_HIST_H

#include <stdint.h>

#define BK_HIST_BUCKETS 20

/* The buckets' upper bounds in microseconds, rising; the last bucket has none (+Inf). */
extern const uint64_t bk_hist_bounds_us[BK_HIST_BUCKETS - 1];

struct bk_hist {
	/* counts[i]: observations within bk_hist_bounds_us[i] and over the bound before it (not
	 * cumulative); the last: over the last bound. Relaxed atomics. */
	uint64_t counts[BK_HIST_BUCKETS];
	uint64_t sum_us; /* the observations' sum, microseconds; relaxed atomic */
};

/* Count one observation of @ns nanoseconds. Any thread, no lock. */
void bk_hist_observe(struct bk_hist *h, uint64_t ns);

/* Copy @h, field by field, into *ret (each field as it is at its load). */
void bk_hist_load(const struct bk_hist *h, struct bk_hist *ret);

#endif
