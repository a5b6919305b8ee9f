/*
 * metrics.h - what a mount counts, as one table (metrics.c), one snapshot and one writer.
 *
 * A reader of the metrics takes a snapshot first (fs_metrics_snap: each module's counters
 * under that module's own lock, one after the other), then hands it to the writer
 * (fs_metrics_write), which holds no lock of the mount and knows nothing of FUSE. The stats
 * file (control.c) is one such reader; an HTTP /metrics endpoint is another, with the same
 * writer and its own sink.
 */
#ifndef TIERFS_METRICS_H
#define TIERFS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cache.h"
#include "fs_i.h"
#include "tier.h"

/* The mount's own counters (ops.c, log.c), read with relaxed atomics. */
struct fs_mount_stats {
	uint64_t log_suppressed; /* log lines held back (struct fs_log) */
	uint64_t reads;		 /* read requests answered */
	uint64_t read_errors;	 /* ... with an error */
	uint64_t read_bytes;	 /* bytes answered */
	uint64_t watched;	 /* interrupted reads watched now */
	/* reads answered with data, by the tier of their slowest block (FS_FROM_N: the memory
	 * tiers, then the chain's, cache_iov.from) */
	struct bk_hist read_lat[FS_FROM_N];
	uint64_t memory_bound; /* hot_size + lagging_size (+ write_buffer when writable) + 64 MiB:
				 * what RSS should stay under */
	uint64_t trace_records;	 /* reads recorded in the trace (trace=) */
	uint64_t trace_dropped;	 /* reads the trace dropped (its ring full, or writing failed) */
};

/* The rows a tier of the chain showed (tier_ops.metrics), copied: its name and what it
 * counted at the snapshot's moment. */
#define FS_TIER_ROWS 64
#define FS_TIER_HISTS 4
struct fs_tier_snap {
	const char *name;                   /* tier_ops.name: the label tier="NAME" */
	unsigned nrows;
	struct tier_metric rows[FS_TIER_ROWS]; /* a histogram's counts point into hist[] */
	unsigned nhist;
	uint64_t hist[FS_TIER_HISTS][TIER_HIST_MAX];
};

/* Every value the metrics show, taken at one moment. Plain values with no pointer into the
 * mount (only into static data and the snapshot itself): a writer needs no lock, and a test
 * fills one by hand. */
struct fs_metrics_snap {
	struct cache_stats cache; /* cache_get_stats: the memory tiers */
	struct bk_stats backend;  /* backend_get_stats */
	struct fs_mount_stats mount;
	struct wpool_stats writes; /* wpool_get_stats; zero on a read-only mount */
	unsigned nchain;           /* the cache's chain below memory, the store last */
	struct fs_tier_snap chain[TIER_CHAIN_MAX];
};

/* Copy the rows tier @tr shows now into @ret (fs_metrics_snap does, for each tier of the
 * chain; a test, for its own tier). Rows past FS_TIER_ROWS, or histograms past FS_TIER_HISTS,
 * are left out. */
void fs_metrics_snap_tier(const struct tier *tr, struct fs_tier_snap *ret);

/* Fill *ret from the running mount @m. Takes each module's lock in turn, never two at once,
 * and no lock of the mount's own (opts_lock, handles_lock...). */
void fs_metrics_snap(struct mount *m, struct fs_metrics_snap *ret);


/* Inside the cache's reply to a read of @m answered with data, that came at @start_ns: its
 * latency, in the histogram of where its slowest piece came from (cache_reply_served). */
void fs_metrics_read(struct mount *m, uint64_t start_ns);

/* Where the writer's text goes. @write gets the text in order, a piece at a time (@s is not
 * NUL-terminated), and returns 0 or a -errno that stops the writer. */
struct fs_metrics_sink {
	int (*write)(void *arg, const char *s, size_t n);
	void *arg;
};

/*
 * Write @s in the Prometheus text exposition format (version 0.0.4): for each row of the
 * table, then each family the chain's tiers show that the table has not, its "# HELP" and
 * "# TYPE" lines, then one sample per series. Holds no lock and
 * makes no FUSE call. @return 0, the sink's -errno, or -EOVERFLOW (a line over 1 KiB: a help
 * text too long; the unit test prints every row).
 */
int fs_metrics_write(const struct fs_metrics_snap *s, const struct fs_metrics_sink *sink);

/* The standard process_* families (CPU seconds, open and allowed fds, virtual and resident
 * memory, start time) from /proc, in the same format, for the /metrics endpoint (process.c).
 * A value /proc does not give leaves its family out. @return 0 or the sink's -errno. */
int fs_process_metrics_write(const struct fs_metrics_sink *sink);

enum fs_metric_type {
	FS_METRIC_COUNTER,
	FS_METRIC_GAUGE,
	FS_METRIC_HISTOGRAM,
};

/* Where a series comes from, and so its label: none, tier="hot"/"lagging" (one series per
 * memory tier, cache_tier_name), tier="NAME" (one per tier of the cache's chain, tier_ops.name,
 * the store last), op="get"/"head"/"list" (one series per kind of store request,
 * bk_op_name). */
enum fs_metric_at {
	FS_AT_MOUNT,
	FS_AT_TIER,
	FS_AT_CHAIN,
	FS_AT_OP,
	FS_AT_N,
};

/* What a row's getter answers for one series. */
enum fs_metric_got {
	FS_GOT_NONE,  /* the row has no series there */
	FS_GOT_SKIP,  /* it has, but no sample now (a tier without a limiter) */
	FS_GOT_VALUE, /* *ret holds the sample */
};

/* One sample's value, and how it is printed. */
struct fs_metric_value {
	enum {
		FS_VALUE_WHOLE,	  /* n, as an integer */
		FS_VALUE_NS,	  /* n nanoseconds, printed as seconds (6 decimals) */
		FS_VALUE_REAL,	  /* x, rounded to an integer (may be negative) */
		FS_VALUE_BUCKETS, /* a histogram: counts[], its bounds and sum in microseconds */
	} kind;
	uint64_t n;
	double x;
	const uint64_t *counts;	   /* nbuckets counts, each of its own bucket (not cumulative) */
	const uint64_t *bounds_us; /* nbuckets - 1 upper bounds; the last bucket has none */
	unsigned nbuckets;
	uint64_t sum_us;
};

/* One row of the table. */
struct fs_metric {
	const char *name; /* "tierfs_cache_hits_total" */
	enum fs_metric_type type;
	const char *help;
	/* The value of the series at @at (series @tier of FS_AT_TIER, FS_AT_CHAIN or FS_AT_OP)
	 * in @s. */
	enum fs_metric_got (*get)(const struct fs_metrics_snap *s, enum fs_metric_at at,
				  unsigned tier, struct fs_metric_value *ret);
};

/* The table, in the order the writer prints it. */
extern const struct fs_metric fs_metrics[];
extern const size_t fs_metrics_n;

/* "counter", "gauge", "histogram". */
const char *fs_metric_type_name(enum fs_metric_type t);

#endif
