/*
 * fleet.h - the fleet tier (shared=): blocks shared by every mount of a fleet in Redis, and the
 * fleet's lagging budget, as a tier of the cache's chain (cache/tier.h) with a gate of its own.
 * fleet.c says how; fleet_value.h how a value is framed and checked.
 */
#ifndef TIERFS_FLEET_H
#define TIERFS_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cache.h"
#include "redis.h"
#include "tier.h"

struct fleet;

struct fleet_stats {
	uint64_t hits;            /* blocks served from Redis (value checked) */
	uint64_t hit_bytes;       /* their bytes */
	uint64_t misses;          /* Redis had no value */
	uint64_t rejected;        /* values refused by the check (wrong, truncated, foreign) */
	uint64_t mac_rejected;    /* ... of them, refused by the MAC (shared_key): forged,
				   * unsigned, or another key's */
	uint64_t unavailable;     /* Redis did not answer in time, or is down, or erred */
	uint64_t store_fetches;   /* blocks fetched from the store through the decorator */
	uint64_t lock_wins;       /* misses that took the block's fetch lock and fetched it */
	uint64_t lock_waits;      /* misses that found another mount fetching, and waited */
	uint64_t lock_wait_hits;  /* ... and were served its value */
	uint64_t lock_gave_up;    /* ... and went to the store after the bound */
	uint64_t fleet_calls;     /* grant scripts called */
	uint64_t fleet_grants;    /* chunks granted */
	uint64_t fleet_waits;     /* calls told to wait */
	uint64_t fleet_errors;    /* calls that failed (Redis down or slow) */
	uint64_t fleet_queued;    /* lagging fetches that waited for fleet tokens */
	uint64_t fleet_fallbacks; /* times the budget fell back to local limits */
	bool fleet_fallback;      /* on local limits only now */
};

/* What the fleet tier is opened with: the mount's shared= options, its backend (whose I/O
 * loop the Redis sockets join) and clock, and where its lines go. */
struct fleet_cfg {
	const char *servers;       /* shared=: redis://host:port[,...] */
	const char *password_file; /* shared_password_file=, or NULL ($TIERFS_SHARED_PASSWORD) */
	const char *key_file;      /* shared_key=, or NULL: values carry a CRC only */
	const char *prefix;        /* shared_prefix=, or NULL */
	uint64_t timeout_ms;       /* shared_timeout= */
	bool fill_lagging;         /* shared_fill_lagging= */
	uint64_t fleet_rate;       /* fleet_lagging_rate= (bytes/s, 0: none) */
	uint64_t fleet_ops;        /* fleet_lagging_ops= (/s, 0: none) */
	uint32_t block_size;
	struct backend *b;         /* must outlive the tier; not started yet */
	struct cache_env env;      /* the clock and timers (mono_ns, defer) */
	/* A line to log (@level: syslog's LOG_WARNING, LOG_INFO, as fuse_log's), about @obj
	 * (a key, or a part of the tier: the caller may hold back repeats of one (obj, cause));
	 * @obj NULL: a line at open, before the mount runs, never held back. */
	void (*log)(void *arg, int level, const char *obj, const char *cause, const char *line);
	void *log_arg;
};

/* Open the fleet tier (no network until the first fetch). @return 0 and *ret, or -errno with
 * one line in @err. */
int fleet_new(const struct fleet_cfg *cfg, struct fleet **ret, char *err, size_t errlen);
/* After the backend stopped and the cache is freed. Accepts NULL. */
void fleet_free(struct fleet *f);
/* The fleet as a tier of the cache's chain, with the fleet budget as its gate when one is set.
 * @f must outlive the cache. */
struct tier fleet_tier(struct fleet *f);
/* Its operations, its rows of /metrics and its status line (fleet_tier's ops). */
extern const struct tier_ops fleet_tier_ops;

void fleet_get_stats(struct fleet *f, struct fleet_stats *ret, struct bk_redis_stats *ret_redis);

#endif
