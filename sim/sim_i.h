/*
 * sim_i.h - declarations shared only inside sim/: the event queue (events.c), the simulated
 * store (simstore.c) and Redis (simredis.c), as tiers of the cache's chain. Unit tests include
 * it too.
 */
#ifndef TIERFS_SIM_I_H
#define TIERFS_SIM_I_H

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "sim.h"
#include "tier.h"

/* ---------------------------------------------------------------------------------------------
 * events.c: the simulated clock and its queue.
 * ------------------------------------------------------------------------------------------ */

struct sim_ev {
	uint64_t t;   /* when, ns of simulated time */
	uint64_t seq; /* order of scheduling: events at one time run first come, first served */
	void (*fn)(void *arg);
	void *arg;
};

struct sim_events {
	uint64_t now;	     /* simulated time, ns; only moves forward */
	struct sim_ev *heap; /* a binary min-heap on (t, seq) */
	size_t n, cap;
	uint64_t seq;
	uint64_t ran; /* events run so far */
};

void sim_ev_init(struct sim_events *q, uint64_t now);
void sim_ev_done(struct sim_events *q);
/* Run @fn(@arg) at @t (at now if @t is in the past). @return 0 or -ENOMEM. */
int sim_ev_at(struct sim_events *q, uint64_t t, void (*fn)(void *), void *arg);
/* Run, in order, every event due at or before @t, then set now to @t (if later). Events may
 * schedule more. @return the events run. */
uint64_t sim_ev_run_until(struct sim_events *q, uint64_t t);
/* Run everything queued, and everything that schedules, until the queue is empty. */
uint64_t sim_ev_run_all(struct sim_events *q);

/* A cache_env over the queue: mono_ns is q->now + @mono0, wall_s the wall clock @wall0_ns
 * plus q->now, defer schedules, hold and release do nothing. */
struct sim_clock {
	struct sim_events *q;
	uint64_t mono0; /* added to now: the cache takes 0 for "never" in places */
	uint64_t wall0_ns;
};
struct cache_env sim_env(struct sim_clock *clk);

/* ---------------------------------------------------------------------------------------------
 * A small random generator (splitmix64) and the lognormal latency draw.
 * ------------------------------------------------------------------------------------------ */

uint64_t sim_rand(uint64_t *state);
/* A lognormal draw with median @p50 and 99th percentile @p99 (ns). */
uint64_t sim_lognormal(uint64_t *state, uint64_t p50, uint64_t p99);

/* ---------------------------------------------------------------------------------------------
 * simstore.c: the object store, seen from one mount: its connections and its link.
 * ------------------------------------------------------------------------------------------ */

struct sim_store;

/* A store for one mount with @max_conns connections (the mount's option), on queue @q.
 * @return NULL only for out-of-memory. */
struct sim_store *sim_store_new(struct sim_events *q, const struct sim_cfg *cfg, unsigned max_conns,
				uint64_t seed);
void sim_store_free(struct sim_store *s);
/* The store as the last tier of a cache's chain. */
struct tier sim_store_tier(struct sim_store *s);
/* The plug and unplug of the cache's env (cache.h): reads handed over in between go out
 * together, consecutive urgent ones as one GET of up to 16 MiB. */
void sim_store_plug(struct sim_store *s);
void sim_store_unplug(struct sim_store *s);
void sim_store_stats(const struct sim_store *s, uint64_t *ret_gets, uint64_t *ret_bytes,
		     uint64_t *ret_merged);

/* ---------------------------------------------------------------------------------------------
 * simredis.c: the fleet's Redis (one), and each mount's view of it as a tier.
 * ------------------------------------------------------------------------------------------ */

struct sim_redis;
struct sim_redis_port;

struct sim_redis *sim_redis_new(struct sim_events *q, const struct sim_cfg *cfg);
void sim_redis_free(struct sim_redis *r);
/* A mount's tier over @r: @fill_lagging as shared_fill_lagging, @wait_ns the fetch lock's
 * bound (10 x shared_timeout). */
struct sim_redis_port *sim_redis_port_new(struct sim_redis *r, bool fill_lagging, uint64_t wait_ns);
void sim_redis_port_free(struct sim_redis_port *p);
struct tier sim_redis_tier(struct sim_redis_port *p);
/* Into @ret: this mount's shared_* figures; the fleet's redis_used/peak/evictions. */
void sim_redis_port_stats(const struct sim_redis_port *p, struct sim_result *ret);
void sim_redis_stats(const struct sim_redis *r, struct sim_result *ret);

/* ---------------------------------------------------------------------------------------------
 * simdisk.c: a mount's disk tier (cache_dir): a FIFO of block keys under disk_size.
 * ------------------------------------------------------------------------------------------ */

struct sim_disk;

/* A disk tier of @size bytes; @lagging as disk_lagging. @return NULL only for out-of-memory. */
struct sim_disk *sim_disk_new(struct sim_events *q, const struct sim_cfg *cfg, uint64_t size,
			      bool lagging);
void sim_disk_free(struct sim_disk *d);
/* The disk as the first tier of a cache's chain. */
struct tier sim_disk_tier(struct sim_disk *d);
/* Does it hold @key? */
bool sim_disk_holds(struct sim_disk *d, struct cache_key key);
/* Put @key (@len bytes) as its newest block, counted as seeded: what the trace showed on the
 * mount's disk before the sim put it there. */
void sim_disk_seed(struct sim_disk *d, struct cache_key key, uint64_t len);
/* Into @ret: disk_hits, disk_misses, disk_used, disk_seeded. */
void sim_disk_stats(const struct sim_disk *d, struct sim_result *ret);

#endif
