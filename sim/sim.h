/*
 * sim.h - tierfs-sim: read traces replayed through tierfs's own cache engine, in simulated
 * time, against a simulated store and a simulated Redis, to size a fleet before buying it.
 *
 *   TRACE... ──► one simulated mount per trace (cache_new with the mount's own options,
 *                fs_cache_cfg) ──► chain: [shared: sim Redis, LRU, one per fleet] ─► sim store
 *                     ▲                                    │
 *                     └──── the event queue (the clock, env->defer, answers) ◄───┘
 *
 * No FUSE, no network, no threads: the whole fleet runs on one thread, a read at a time, and
 * a day of reads takes seconds. The model and its limits are in docs/sizing.md.
 */
#ifndef TIERFS_SIM_H
#define TIERFS_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cache.h"

struct fs_opts;

/* The world's settings that are not a mount's: the sim's own options (main.c's table). */
struct sim_cfg {
	uint64_t store_lat_ns; /* a GET's first byte: median */
	uint64_t store_p99_ns; /* ... and 99th percentile (a lognormal through both) */
	uint64_t store_bw;     /* bytes/s of one GET (one connection) */
	uint64_t link_bw;      /* bytes/s into one mount, all its GETs together */
	double get_price;      /* dollars per 1,000 GETs */
	double gb_price;       /* dollars per GB (1e9 bytes) sent by the store */
	uint64_t redis_mem;    /* bytes of values Redis may hold (maxmemory, allkeys-lru) */
	uint64_t redis_lat_ns; /* a Redis round trip */
	uint64_t redis_bw;     /* bytes/s of one Redis value */
	uint64_t disk_lat_ns;  /* a disk tier's read (cache_dir): before its bytes */
	uint64_t disk_bw;      /* bytes/s of one disk tier read */
	uint64_t max_queued;   /* reads waiting in one mount beyond which the run stops:
				* the settings cannot serve the trace */
	bool align_start;      /* every trace starts at time 0 (else: at its wall clock) */
	uint64_t seed;	       /* of the latency draws */
};

/* The defaults: S3 in its own region, Redis on the LAN. */
void sim_cfg_default(struct sim_cfg *ret);

/* A latency histogram: log-spaced buckets, 8 per power of two, from 1 us. */
#define SIM_LAT_BUCKETS 256
struct sim_lat {
	uint64_t n[SIM_LAT_BUCKETS];
	uint64_t count;
	uint64_t max_ns;
};
void sim_lat_add(struct sim_lat *h, uint64_t ns);
/* The @q-quantile (0..1), ns: the upper edge of its bucket (0 when empty). */
uint64_t sim_lat_quantile(const struct sim_lat *h, double q);
void sim_lat_merge(struct sim_lat *into, const struct sim_lat *h);

/* What one simulated mount (or the fleet, summed) did. */
struct sim_result {
	uint64_t reads, read_bytes, read_errors;
	uint64_t span_ns;		     /* from the first read to the last answer */
	struct cache_stats cache;	     /* its memory tiers, as the mount's stats file */
	uint64_t shared_hits, shared_misses; /* the Redis tier, asked by this mount */
	uint64_t shared_get_bytes;	     /* bytes Redis sent it */
	uint64_t shared_set_bytes;	     /* bytes it sent Redis */
	uint64_t shared_lock_waits;	     /* misses that waited for another mount's fetch */
	uint64_t disk_hits, disk_misses;     /* its disk tier (cache_dir), asked */
	uint64_t disk_used;		     /* bytes the disk tier holds at the end */
	uint64_t disk_seeded;		     /* blocks put there because the trace read them
					      * from the mount's disk (replay.c) */
	uint64_t store_gets, store_bytes;    /* GETs sent to the store, bytes received */
	uint64_t store_merged;		     /* block reads carried inside another's GET */
	uint64_t written_objects;	     /* versions found written by the mount (replay.c) */
	uint64_t redis_used, redis_peak;     /* fleet only: value bytes held now / at most */
	uint64_t redis_evictions;	     /* fleet only */
	struct sim_lat lat;		     /* request to answer of every read */
};

/* A fleet replayed: one result per mount and their sum. */
struct sim_run {
	unsigned nmounts;
	char **names;		  /* each mount's first trace file */
	struct sim_result *mount; /* nmounts */
	struct sim_result fleet;
	bool overloaded;	     /* stopped: a mount had more than max_queued reads waiting */
	uint64_t overload_at_ns;     /* when, since the start */
	uint64_t events;	     /* events the queue ran */
	unsigned incomplete;	     /* trace files their writer had not finished: a mount still
				      * running (a live trace) or killed; their reads so far count */
	const char *incomplete_path; /* the first of them (one of the caller's paths) */
	double cpu_s;		     /* CPU time the replay took */
};

/*
 * Replay trace files @paths (files of one trace, by id, are one mount, read in part order) as
 * a fleet, each mount with options @o, in the world @cfg. @return 0 and *ret (sim_run_free),
 * or -errno with one line in @err (a file that is not a trace, options the cache refuses).
 */
int sim_replay(const struct fs_opts *o, const struct sim_cfg *cfg, char *const *paths,
	       unsigned npaths, struct sim_run *ret, char *err, size_t errlen);
void sim_run_free(struct sim_run *r);

/* The results as text, one block per mount and one for the fleet; @cfg for the prices. */
void sim_report_text(FILE *f, const struct sim_run *r, const struct sim_cfg *cfg);
/* The same as one JSON object (tiers.<name>.hit_ratio, store.gets, store.bytes ...). */
void sim_report_json(FILE *f, const struct sim_run *r, const struct sim_cfg *cfg);
/* One sweep row: the figures of the fleet on one line, after @label. @header: the titles. */
void sim_report_row(FILE *f, const char *label, const struct sim_run *r, const struct sim_cfg *cfg,
		    bool header);
/* The fleet's figures as JSON members (no braces), for a sweep's rows. */
void sim_report_json_fleet(FILE *f, const struct sim_run *r, const struct sim_cfg *cfg);

/* ---------------------------------------------------------------------------------------------
 * generate.c: a synthetic broker trace.
 * ------------------------------------------------------------------------------------------ */

struct sim_gen {
	unsigned mounts;	 /* brokers, one trace file each */
	unsigned partitions;	 /* per broker */
	unsigned share;		 /* brokers that read each partition (1: its own only) */
	uint64_t segment;	 /* bytes of a segment */
	uint64_t roll_s;	 /* a new segment per partition every this many seconds */
	uint64_t duration_s;	 /* of the trace */
	unsigned consumers;	 /* per partition, reading at the tail */
	uint64_t tail_rate;	 /* bytes/s of a tail reader; 0: segment / roll (keeps pace) */
	uint64_t tail_lag_s;	 /* a tail reader starts a new segment within this, at random */
	uint64_t replay_every_s; /* one of the consumers replays, this often (0: never) */
	uint64_t replay_span_s;	 /* ... reading this far back */
	uint64_t replay_rate;	 /* ... at this many bytes/s */
	uint64_t fetch;		 /* bytes of one read */
	uint64_t index_size;	 /* bytes of a segment's index object */
	unsigned index_lookups;	 /* small reads of the index when a reader starts a segment */
	uint64_t index_read;	 /* bytes of one */
	uint64_t seed;
};

void sim_gen_default(struct sim_gen *ret);

/* Write the traces: @prefix-NNN.trace, one per broker. @return the reads written, or -errno
 * with a line in @err. */
int64_t sim_generate(const struct sim_gen *g, const char *prefix, char *err, size_t errlen);

#endif
