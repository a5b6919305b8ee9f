/*
 * cache_i.h - declarations shared only inside cache/: the segmented ring store and the token
 * bucket. Unit tests include this header; nothing outside cache/ and tests/ does.
 */
#ifndef TIERFS_CACHE_I_H
#define TIERFS_CACHE_I_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "cache.h"
#include "tier.h"

/* ---------------------------------------------------------------------------------------------
 * ring.c: one allocation cut into segments used as a ring (BookKeeper ReadCache, PIP-174).
 * ------------------------------------------------------------------------------------------ */

/* key.c: SHA-256 over the concatenation of @n byte strings, into @ret. */
struct cache_sha256_part {
	const void *data;
	size_t len;
};
void cache_sha256(const struct cache_sha256_part *parts, size_t n, unsigned char ret[32]);

/* ---------------------------------------------------------------------------------------------
 * ring.c: blocks are stored under a struct cache_key (cache.h): object version and block index.
 * Exact: two keys are equal only if all 192 bits are.
 * ------------------------------------------------------------------------------------------ */

/* A pinned reference to bytes in the ring. While a ref is held, the segment it points into is
 * never rotated, so data stays valid. Every ref obtained from ring_reserve() or ring_lookup()
 * must be given back with exactly one ring_commit()/ring_abort() (reserve) or ring_unpin()
 * (lookup, ring_pin). */
struct ring_ref {
	void *data;   /* first byte of the block */
	uint32_t len; /* its length */
	uint32_t seg; /* segment index, for unpinning */
	uint32_t slot; /* index slot inside the segment (used by commit/abort) */
};

struct ring_stats {
	uint64_t rotations;       /* segments reused (an eviction of everything in them) */
	uint64_t blocks;          /* committed, unexpired blocks now resident */
	uint64_t bytes;           /* their total length */
	uint64_t reserve_busy;    /* reservations refused because the next segment was pinned */
};

struct ring;

/*
 * Allocate a ring of @size bytes (rounded down to a whole number of segments) in @nseg
 * segments (at least 4). A segment's blocks count as gone @ttl_ns after the first insert into
 * that segment (0 = never). @max_block is the largest block ever inserted; a segment must hold
 * at least two of them, the second where it would go (ring_geometry: a block of a page or
 * more starts at a page boundary, a smaller one at a 64-byte boundary).
 * @return 0 and *ret; -EINVAL when a segment cannot hold two blocks (or nseg < 4, max_block
 * 0); -EFBIG when segments are too large for the index; -ENOMEM.
 */
int ring_new(uint64_t size, uint32_t nseg, uint32_t max_block, uint64_t ttl_ns,
	     struct ring **ret);

/* Could ring_new make a ring of these sizes? The same check, without allocating.
 * @return 0, -EINVAL or -EFBIG as ring_new. */
int ring_geometry(uint64_t size, uint32_t nseg, uint32_t max_block);
void ring_free(struct ring *r);

/* Fault the whole arena in now (prefault=on), rather than page by page as blocks are first
 * stored: the memory shows in RSS at once, and a cold reader does not pay for the faults. */
void ring_prefault(struct ring *r);

/* Change the TTL live (hot_ttl / lagging_ttl); applies to lookups from now on. */
void ring_set_ttl(struct ring *r, uint64_t ttl_ns);

/*
 * Reserve @len bytes for @key in the current segment, rotating to the next segment when the
 * current one is full or expired. The reserved bytes are pinned and invisible to lookups
 * until ring_commit(). Rotating clears the next segment's index, unless that segment is
 * pinned, in which case nothing is reserved.
 * @return 0 and *ret_ref; -EBUSY if the next segment is pinned; -EINVAL if @len is 0 or
 * larger than max_block.
 */
int ring_reserve(struct ring *r, struct cache_key key, uint32_t len, uint64_t now_ns,
		 struct ring_ref *ret_ref);

/* Make a reserved block visible to lookups. @ref stays pinned; the caller unpins it. */
void ring_commit(struct ring *r, const struct ring_ref *ref);

/* Give up a reservation (failed fetch): the block never becomes visible; the pin is dropped. */
void ring_abort(struct ring *r, const struct ring_ref *ref);

/*
 * Find the newest committed, unexpired block for @key, searching segments newest to oldest.
 * @return 0 and a pinned *ret_ref, or -ENOENT.
 */
int ring_lookup(struct ring *r, struct cache_key key, uint64_t now_ns, struct ring_ref *ret_ref);

/* Is @key resident (committed, unexpired)? Pins nothing. */
bool ring_contains(struct ring *r, struct cache_key key, uint64_t now_ns);

/*
 * Call @fn for the block index of every committed, unexpired block of object @obj, in no
 * particular order (a block committed in two segments comes twice). Walks the index tables,
 * not the object's blocks: the cost is O(nseg x table size), bounded by the ring's size.
 * @fn runs with the ring's lock held: it must not call into this ring.
 */
void ring_each_block(struct ring *r, struct cache_oid obj, uint64_t now_ns,
		     void (*fn)(void *arg, uint64_t blk), void *arg);

/* Give every committed block of object @from the key (@to, same block), in place.
 * Blocks of @from in a segment whose index is full are dropped instead. Cost: a walk of every
 * table. @return the blocks renamed. */
uint64_t ring_rekey(struct ring *r, struct cache_oid from, struct cache_oid to);

/* Forget every committed block of object @oid (pins already taken stay valid). Cost: a walk of
 * every table. @return the blocks forgotten. */
uint64_t ring_drop(struct ring *r, struct cache_oid oid);

/* Take one more pin on the segment of @ref / drop one pin. */
void ring_pin(struct ring *r, const struct ring_ref *ref);
void ring_unpin(struct ring *r, const struct ring_ref *ref);

/* Snapshot of counters; blocks/bytes count only unexpired committed blocks at @now_ns. */
void ring_get_stats(struct ring *r, uint64_t now_ns, struct ring_stats *ret);

/* Geometry, for tests and the config file. */
uint32_t ring_nseg(const struct ring *r);
uint64_t ring_seg_size(const struct ring *r);

/* ---------------------------------------------------------------------------------------------
 * ratelimit.c: token bucket in bytes, plus an optional request-rate bucket. Time is passed in.
 * Not thread-safe: the caller holds its own lock.
 * ------------------------------------------------------------------------------------------ */

struct rl {
	uint64_t rate;     /* bytes per second; 0 = unlimited */
	uint64_t burst;    /* bucket capacity in bytes */
	double tokens;     /* may be negative after an oversize charge: debt paid back by time */
	uint64_t ops;      /* requests per second; 0 = unlimited */
	double op_tokens;  /* request tokens, capacity max(1, ops) */
	uint64_t last_ns;  /* time tokens were last refilled */
	uint64_t due_ns;   /* when the oldest refused charge could pass; 0 = none owed */
};

/* How late past a refused charge's due time a caller may come back and still be credited
 * for the wait (ratelimit.c, "Late timers"): an I/O loop's timer lateness, not a stall. */
#define RL_LATE_NS 100000000ull

/* Start full. @burst 0 means 2 x @rate. */
void rl_init(struct rl *r, uint64_t rate, uint64_t burst, uint64_t ops, uint64_t now_ns);

/* Change the settings live, keeping the current tokens (clamped to the new burst). */
void rl_set(struct rl *r, uint64_t rate, uint64_t burst, uint64_t ops, uint64_t now_ns);

/*
 * Try to charge one request of @bytes. A charge larger than the bucket passes once the
 * bucket is full, leaving a debt that later charges wait out, so the long-run rate holds.
 * @return 0 if charged now; otherwise the nanoseconds to wait before it can be charged
 * (nothing was taken; call again then).
 */
uint64_t rl_take(struct rl *r, uint64_t bytes, uint64_t now_ns);

/* Charge @bytes and one request now, whatever the buckets hold: a fetch that went ahead
 * without asking (it skipped the limiter on a promise that did not hold). A debt this leaves
 * is waited out by later charges, so the long-run rate holds. */
void rl_charge(struct rl *r, uint64_t bytes, uint64_t now_ns);

/* Current byte tokens (after refilling to @now_ns), for the stats file. */
double rl_tokens(struct rl *r, uint64_t now_ns);

/* ---------------------------------------------------------------------------------------------
 * tier.c: the walk down the chain of tiers below the memory rings (tier.h).
 * ------------------------------------------------------------------------------------------ */

struct chain {
	struct tier t[TIER_CHAIN_MAX]; /* in order; the store last */
	uint8_t n;
	void (*plug)(void *arg);   /* env->plug / unplug: hold the store's reads of a batch */
	void (*unplug)(void *arg);
	void *arg;
};

struct walk;

/* One block's walk down the chain: embedded in its flight. The cache fills io, done and
 * to_store; the rest is the walk's. */
struct chain_req {
	struct tier_io io;
	/* The end: a tier above the store had the block (@err 0), or the store answered (@err 0
	 * or its failure). Once, from the answering thread, no lock held. */
	void (*done)(struct chain_req *r, int err);
	/* Just before the store is asked. */
	void (*to_store)(struct chain_req *r);
	struct chain *ch;
	uint8_t level;            /* the tier asked now; at the end, the one that answered */
	uint8_t passed;           /* a bit per tier asked that missed (parts: none) */
	struct walk *walk;        /* its batch, or NULL: alone */
	uint32_t widx;            /* its place in the batch */
	struct gate_waiter gw;    /* in a tier's gate */
	void *priv[TIER_CHAIN_MAX]; /* each tier's own slot (tier_io.priv) */
};

/* The chain of @n tiers (the store last; 1 <= n <= TIER_CHAIN_MAX) with env's plug. */
void chain_init(struct chain *ch, const struct tier *tiers, unsigned n,
		const struct cache_env *env);
/* Does a tier above the store have @key (tier_ops.has)? */
bool chain_has(const struct chain *ch, struct cache_key key);
/* Walk @n requests down the chain as one batch. */
void chain_start(struct chain *ch, struct chain_req *const *reqs, unsigned n);
/* @r ended with @err: tell every tier it passed (put). Before the bytes are released. */
void chain_put(const struct chain *ch, struct chain_req *r, int err);
/* A block written through the mount: offered to every tier above the store. */
void chain_put_written(const struct chain *ch, const struct tier_io *io);
/* The least room of the tiers above the store (tier_ops.room). */
uint64_t chain_room(const struct chain *ch);
/* Every tier forgets @oid. */
void chain_drop(const struct chain *ch, struct cache_oid oid);

#endif
