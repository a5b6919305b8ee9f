/*
 * cache.h - the read path between the filesystem and the object store.
 *
 * A read is split into blocks aligned to block_size. Each block is looked up in the hot tier,
 * then the lagging tier; a block in neither is fetched exactly once however many readers want
 * it (single-flight), into the tier its object's age chooses, from the chain of tiers below
 * memory (tier.h: disk, fleet, the store last). Lagging fetches pass a token bucket first and
 * wait for it on a timer, never in a sleeping thread.
 *
 * This module knows nothing of FUSE or curl: the caller passes an environment (clocks,
 * timers), the chain's tiers and a reply callback, so every policy runs under a fake clock in
 * the unit tests.
 */
#ifndef TIERFS_CACHE_H
#define TIERFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tier;

/* The tiers, in lookup order: indexes into cache_stats.tier[] and the cache's tier list. */
enum cache_tier {
	CACHE_HOT = 0,
	CACHE_LAG = 1,
	CACHE_NTIERS = 2,
};

/* The name of tier @t ("hot", "lagging"), as stats labels and residency text show it; NULL
 * past the last. */
const char *cache_tier_name(enum cache_tier t);

struct cache_cfg {
	uint32_t block_size;     /* power of two */
	uint64_t hot_size;       /* bytes */
	uint64_t hot_ttl;        /* seconds: objects older than this are read as lagging; also the
				  * hot tier's block lifetime */
	bool lagging;            /* false: everything goes through the hot tier */
	uint64_t lagging_size;   /* bytes */
	uint64_t lagging_ttl;    /* seconds */
	uint64_t lagging_rate;   /* bytes/s, 0 = unlimited */
	uint64_t lagging_burst;  /* bytes, 0 = 2 x rate */
	uint64_t lagging_ops;    /* requests/s, 0 = unlimited */
	uint32_t readahead;      /* initial readahead window in blocks (0 = no readahead): it
				  * doubles while a reader stays sequential, up to an eighth of
				  * its tier, and falls back to this on a seek */
	uint64_t readahead_batch; /* bytes; readahead starts this much at a time, or half the
				   * window when that is less (the backend merges each batch into
				   * one request); 0: 16 MiB */
	uint64_t hot_parts_above; /* bytes: a random read of a hot object larger than this
				   * fetches parts of blocks, as one of a lagging object does
				   * (whole blocks of it would evict each other); 0: whole blocks */
	bool prefault;           /* fault the tiers' memory in at cache_new, not on first use */
	uint64_t bounce_limit;   /* bytes of bounce buffers at once, both tiers; 0 = unlimited */
	/* The tiers below the memory rings, in order, the store last (tier.h): copied by
	 * cache_new; their selves must outlive the cache. 1..TIER_CHAIN_MAX of them. */
	const struct tier *chain;
	unsigned nchain;
};

/* The bounce limit a mount uses: with the rest of the process (~30 MiB), peak memory stays
 * under hot_size + lagging_size + 64 MiB for block_size up to 16M. */
#define CACHE_BOUNCE_LIMIT (16u << 20)

/*
 * The name of one version of one object: 128 bits of SHA-256 over (store, path, version), see
 * key.c. Stable across processes and restarts, so every tier (memory, disk, shared) can use it;
 * never an inode number, a pointer or a counter.
 */
struct cache_oid {
	uint64_t hi, lo;
};

/* The name of one cached block: which object version, which block of it. */
struct cache_key {
	struct cache_oid oid;
	uint64_t blk; /* block index: bytes [blk * block_size, (blk + 1) * block_size) */
};

static inline bool cache_oid_eq(struct cache_oid a, struct cache_oid b)
{
	return a.hi == b.hi && a.lo == b.lo;
}

static inline bool cache_key_eq(struct cache_key a, struct cache_key b)
{
	return cache_oid_eq(a.oid, b.oid) && a.blk == b.blk;
}

/*
 * The oid of @version of the object at @path in @store. @store names the store without
 * secrets (so that two stores never share names); @version is the ETag as the store sends it,
 * or for file:// "dev-ino-size-mtime_ns", or "size-mtime" when a store gives no ETag. None may
 * contain a NUL (they are C strings). @return the oid.
 */
struct cache_oid cache_oid_make(const char *store, const char *path, const char *version);

/* One version of one object, as the cache sees it. Passed by value; ctx is the caller's handle
 * for fetching it, kept alive with env->hold / env->release while a fetch may use it. */
struct cache_obj {
	struct cache_oid id; /* which version of which object (cache_oid_make) */
	uint64_t size;  /* bytes */
	int64_t mtime;  /* seconds since epoch; INT64_MIN if unknown (counts as hot) */
	void *ctx;
};

typedef void (*cache_done_fn)(void *arg, int err);

/* What the cache needs from the world, besides its tiers (cache_cfg.chain). All callbacks may
 * be called from any thread. */
struct cache_env {
	void *arg;
	uint64_t (*mono_ns)(void *arg);  /* monotonic clock */
	int64_t (*wall_s)(void *arg);    /* wall clock, to compare with object mtimes */
	/* Call cb(cb_arg) once, after @delay_ns. @return 0 or -errno. */
	int (*defer)(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg);
	void (*hold)(void *ctx);
	void (*release)(void *ctx);
	/* Optional: hold this thread's store reads until unplug and hand them over together, so
	 * that consecutive ones can go as one request (backend_plug). Nests. */
	void (*plug)(void *arg);
	void (*unplug)(void *arg);
};

/* A piece of a reply. Valid only during the reply callback. */
struct cache_iov {
	const void *base;
	size_t len;
	/* Where its bytes were when the read asked: a memory tier (enum cache_tier), when they
	 * were resident; else CACHE_NTIERS + i, the chain's tier i (cfg.chain[i]) that answered
	 * the fetch the read waited for (its own, or one it joined). cache_source_name names
	 * it. */
	uint8_t from;
};


/* Called exactly once per cache_read: with the data (n pieces, in order, together the whole
 * answer, possibly short at end of object) and err 0, or with n 0 and err -errno. */
typedef void (*cache_reply_fn)(void *req, const struct cache_iov *iov, int n, int err);

/* What served a read: its deepest source, and the bytes fetched for it from below memory. */
struct cache_served {
	const char *from;  /* "hot", "lagging" (a memory hit), or the name of the chain's tier
			    * that answered a block it waited for (tier_ops.name): the deepest
			    * of its blocks' sources, in chain order */
	unsigned at;       /* the same as a number (cache_iov.from): a memory tier, or
			    * CACHE_NTIERS + i for the chain's tier i */
	uint64_t fetched;  /* bytes of the fetches it waited for, whichever tier answered them (a
			    * fetch two reads waited for counts in both; readahead it did not
			    * wait for, in none) */
};

/* Inside a reply callback, on its thread: what served the read being answered. NULL outside
 * one, and for answers with no data (an error, end of object). Costs nothing to the reads of a
 * mount that does not ask. */
const struct cache_served *cache_reply_served(void);

/* Per open file: where the last read ended, to detect sequential readers, and its adaptive
 * readahead window. Zero it at open. Unlocked (relaxed atomics): concurrent readers of one
 * handle only make readahead less exact. */
struct cache_stream {
	uint64_t next_off; /* end of the previous read */
	uint64_t ra_next;  /* first block not yet considered for readahead */
	uint64_t ra_win;   /* readahead window in blocks; 0: not sequential yet (or after a seek) */
	uint64_t ra_grow;  /* the window doubles when a read reaches this block */
};

/* Random reads of lagging objects (and of hot ones over cfg.hot_parts_above) fetch parts of
 * blocks: the aligned CACHE_PART_UNIT ranges around what they read, up to CACHE_PART_MAX;
 * beyond that, the whole block (cache.c). */
#define CACHE_PART_UNIT (64u * 1024)
#define CACHE_PART_MAX  (256u * 1024)

struct cache_tier_stats {
	uint64_t hits;            /* block lookups answered from this tier */
	uint64_t misses;          /* blocks fetched into this tier because a reader wanted them */
	uint64_t bytes_served;    /* reply bytes taken from this tier */
	uint64_t bytes_fetched;   /* bytes fetched from the store into this tier */
	uint64_t fetches;         /* fetches from the store started (readahead included) */
	uint64_t fetch_errors;    /* fetches that failed */
	uint64_t readaheads;      /* fetches started by readahead */
	uint64_t parts;           /* fetches of part of a block (random reads, cache.c) */
	uint64_t joins;           /* block waits that joined a fetch already under way */
	uint64_t inflight;        /* fetches running now */
	uint64_t throttle_waits;  /* fetches that had to wait for the limiter (its gate's) */
	uint64_t throttled_ns;    /* total time fetches waited for the limiter */
	uint64_t queued;          /* fetches waiting for the limiter now */
	uint64_t rotations;       /* segment rotations (evictions) */
	uint64_t blocks;          /* resident blocks */
	uint64_t bytes;           /* resident bytes */
	uint64_t size;            /* configured bytes */
	uint64_t bounces;         /* fetches served but not stored: every segment was pinned */
	uint64_t mem_waits;       /* fetches that waited for memory (ring slot or bounce room) */
	uint64_t mem_queued;      /* fetches waiting for memory now */
	uint64_t lower_hits;      /* misses answered by a tier of the chain above the store */
	uint64_t lower_fallbacks; /* blocks a tier of the chain said it held (tier_ops.has) that
				   * it then missed (CRC, read error, eviction): fetched from the
				   * store, and charged to the limiter after the fact */
	uint64_t written;         /* blocks written through the mount stored here (cache_put) */
	uint64_t published;       /* written blocks offered to the chain's tiers (cache_publish) */
	double tokens;            /* limiter tokens now (a tier with a limiter only) */
	bool limited;             /* the tier has a rate limiter */
	uint64_t rate;            /* its rate now, bytes/s; 0: unlimited, or the tier is off */
};

struct cache_stats {
	struct cache_tier_stats tier[CACHE_NTIERS];
	uint64_t bounce_bytes;    /* bounce buffers mapped (or about to be) now */
	uint64_t bounce_peak;     /* the most bounce_bytes has been */
	uint64_t bounce_limit;    /* cfg.bounce_limit */
};

struct cache;

/* Can a tier of @size bytes hold blocks of @block_size? The rule is the ring's (ring_new): at
 * least 4 segments of two blocks each, so at least 8 x block_size; and not so large that the
 * ring's index cannot address it. @return 0, -EINVAL (too small, or @block_size not a power of
 * two), or -EFBIG (too large). */
int cache_tier_check(uint64_t size, uint32_t block_size);

/* @return 0 and *ret, -EINVAL or -EFBIG for impossible sizes (cache_tier_check of each tier
 * that is on), -ENOMEM. */
int cache_new(const struct cache_cfg *cfg, const struct cache_env *env, struct cache **ret);

/* Free everything. No read may be in flight (stop the fetcher first); reads still waiting for
 * the limiter are answered -ESHUTDOWN. */
void cache_free(struct cache *c);

/*
 * Read @len bytes at @off of @o. @reply runs exactly once: before cache_read returns when
 * every block is resident (or on an immediate error), else later from the thread that
 * completes the last fetch, or from cache_cancel. @s may be NULL (no readahead). @ticket (from
 * cache_ticket, or 0) names the read for cache_cancel while it waits. @o and its ctx must stay
 * valid until cache_read returns, even when the reply came first; @s is not touched after the
 * reply. The store's reads it starts (the read's blocks and their readahead) are handed over
 * together, between env->plug and unplug: the caller need not plug.
 */
void cache_read(struct cache *c, const struct cache_obj *o, struct cache_stream *s, uint64_t off,
		size_t len, uint64_t ticket, cache_reply_fn reply, void *req);

/* A fresh, non-zero ticket for cache_read, so the read can be cancelled by number. */
uint64_t cache_ticket(struct cache *c);

/*
 * Cancel the read made with @ticket if it is still waiting: it is answered now with -EINTR,
 * its pins are dropped, and a fetch that nobody waits for any more and that has not started
 * (queued behind the limiter) is dropped too. A read already answered, or answering, is left
 * alone; a ticket of 0, or unknown, is ignored. Never call it from the reply callback.
 */
void cache_cancel(struct cache *c, uint64_t ticket);

/* The tier a miss of @o would go to now: CACHE_LAG when lagging is on and the object is older
 * than hot_ttl, else CACHE_HOT. */
enum cache_tier cache_route(struct cache *c, const struct cache_obj *o);

/* Pure routing rule, exposed for tests: is an object of @mtime lagging at @now? */
bool cache_is_lagging(int64_t mtime, int64_t now, uint64_t hot_ttl);

/* The burst a limiter of @rate bytes/s uses when asked for @burst: @burst, or 2 x rate when
 * @burst is 0 (ratelimit.c; the one home of that default). */
uint64_t rl_burst(uint64_t rate, uint64_t burst);

/* Live settings. @return 0 or -EINVAL. */
int cache_set_limits(struct cache *c, uint64_t rate, uint64_t burst, uint64_t ops);
int cache_set_hot_ttl(struct cache *c, uint64_t hot_ttl);

/* Which blocks of @o are resident: one character per block, 'h' hot, 'l' lagging, '-' none,
 * written into @buf (NUL-terminated, truncated to fit). Costs O(@len) plus a walk of the
 * tiers' indexes, whatever the object's size. @return the number of blocks. */
size_t cache_residency(struct cache *c, const struct cache_obj *o, char *buf, size_t len);

/*
 * The resident blocks of @o as ranges, "hot=0-15,20 lagging=16-19", "none" when nothing is
 * resident, and at most @max_ranges ranges (the first in block order, a block in both tiers
 * counted as hot) followed by " (+N more ranges)". Written into @buf like snprintf
 * (NUL-terminated, truncated to fit). The cost is a walk of the tiers' index tables and a
 * sort of what they hold of @o: bounded by hot_size + lagging_size, never by the object's
 * size. @return the length it needs (without the NUL), or -ENOMEM.
 */
int cache_residency_text(struct cache *c, const struct cache_obj *o, size_t max_ranges,
			 char *buf, size_t len);

/*
 * Write-through: a file written through the mount fills the tiers as it goes.
 *
 *   write ─► cache_put(provisional oid, blk)   each block, into the hot tier, as it completes
 *   store acknowledges the object ─► cache_rekey(provisional, real oid) ─► cache_publish(o):
 *                                    its blocks offered to the disk and fleet tiers, paced
 *
 * The provisional oid names the bytes until the store names the object's version (its ETag);
 * nothing can read them under it. Written blocks are never charged to a limiter.
 */

/* Copy @len bytes at @src into the hot tier as block @key. @return 0, -EBUSY (every segment
 * pinned: not stored, which costs a later reader a fetch, nothing more), -EINVAL (@len 0 or
 * over block_size). */
int cache_put(struct cache *c, struct cache_key key, const void *src, uint32_t len);

/* The blocks of @from in the memory tiers become @to's (cache_rekey's ring_rekey). @return how
 * many. */
uint64_t cache_rekey(struct cache *c, struct cache_oid from, struct cache_oid to);

/* Offer the blocks of @o held in the memory tiers to the chain's tiers as written blocks, in
 * the background, no faster than their room allows (tier_ops.room); blocks evicted meanwhile
 * are skipped. The object is not held: only its id, size and mtime are used. */
void cache_publish(struct cache *c, const struct cache_obj *o);

/* Forget object @oid in every tier (it was deleted): memory, and the chain's tiers' drop. */
void cache_drop(struct cache *c, struct cache_oid oid);

void cache_get_stats(struct cache *c, struct cache_stats *ret);

/* The name of @from (cache_iov.from): "hot", "lagging", or the chain tier's (tier_ops.name).
 * NULL past the chain's end. */
const char *cache_source_name(const struct cache *c, unsigned from);

uint32_t cache_block_size(const struct cache *c);

/* The chain below the memory tiers, in order (the store last): its tiers into *@ret (valid as
 * long as @c), their number returned. For what loops over the tiers (the residency listing). */
unsigned cache_chain(const struct cache *c, const struct tier **ret);

#endif
