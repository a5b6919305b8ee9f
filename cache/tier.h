/*
 * tier.h - the tiers below the memory rings, one table of operations each, and the gate (a
 * limiter's queue) that any tier may own.
 *
 * A read walks down the chain, the way curl's connection filters are chained:
 *
 *     hot ─► lagging ─► [ tier 0 ─► tier 1 ─► ... ─► store ]      the chain (cache_cfg.chain)
 *     (memory rings,      each a struct tier: ops + self, e.g. disk, fleet (Redis), store
 *      cache.c)
 *
 * A block that both memory rings miss is reserved in the ring of its tier (a "flight") and
 * asked of the chain's tiers in order, into that slot; the last tier, the store, always
 * answers (its failure is the read's). A block filled from tier k is then offered, with put,
 * to every tier above k that wants it (each has its own admission rule), and so is a block
 * written through the mount. Adding a tier is one file with a struct tier_ops and one line in
 * the chain (fs/mount.c's assembly; tests/unit/test_cache.c proves it with a test tier).
 *
 * A tier with a limiter owns a gate: its lagging misses pass the gate before going to the
 * next tier. The gate is the one queue of every limiter (the lagging tier's byte rate, the
 * fleet's budget, a write limit): a FIFO of waiters, let through when the gate's token source
 * says so, on a timer or when the source kicks it. No thread ever waits in a gate.
 *
 * No FUSE, no curl: fs/ and the tests implement tiers; the cache walks them.
 */
#ifndef TIERFS_TIER_H
#define TIERFS_TIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"

/* ---------------------------------------------------------------------------------------------
 * A tier of the chain.
 * ------------------------------------------------------------------------------------------ */

/* One block (or part of one) asked of a tier, or offered to one. Owned by the cache; valid
 * from get until the tier answers, and during put. */
struct tier_io {
	struct cache_key key;
	void *ctx;          /* the object (cache_obj.ctx): what the store reads with */
	uint64_t off;       /* byte offset of these bytes in the object */
	uint32_t len;       /* their length */
	void *dst;          /* get: where the bytes go; put: where they are */
	bool lagging;       /* for the lagging tier (background priority, fill rules) */
	bool part;          /* part of a block (a random read): only the store reads parts */
	bool written;       /* put: written through the mount, not fetched */
	void **priv;        /* the asked tier's own slot for this block, NULL at first: what its
			     * get leaves there, its put finds (and clears) */
};

/* ---------------------------------------------------------------------------------------------
 * What a tier shows: its metric rows and its line in `tierfs status`. fs/ prints them for
 * every tier of the chain, labelled tier="NAME" (tier_ops.name), and names no tier itself.
 * ------------------------------------------------------------------------------------------ */

enum tier_metric_type {
	TIER_COUNTER,
	TIER_GAUGE,
	TIER_HISTOGRAM,
};

/* A histogram's buckets, at most. */
#define TIER_HIST_MAX 24

/* One sample of a tier, a row of /metrics: tierfs_NAME{tier="TIER"}. Rows of one name from
 * several tiers (and from the memory tiers' own table) form one family. */
struct tier_metric {
	const char *name;          /* without "tierfs_": "cache_hits_total"; static */
	enum tier_metric_type type;
	const char *help;          /* one line without a backslash; static */
	uint64_t value;            /* a counter's or a gauge's value */
	unsigned nbuckets;         /* a histogram: its buckets (<= TIER_HIST_MAX), */
	const uint64_t *counts;    /* each its own count (not cumulative); valid during the call */
	const uint64_t *bounds_us; /* nbuckets - 1 upper bounds in microseconds; static */
	uint64_t sum_us;           /* the sum of what it counted, microseconds */
};

/* One field of a tier's status line: LABEL then the value of tierfs_METRIC{tier="TIER"}. */
enum tier_status_kind {
	TIER_ST_RATE,  /* per second between the two samples: "writes 1.5/s" */
	TIER_ST_VALUE, /* its value now: "drops 0" */
	TIER_ST_FLAG,  /* on (> 0) or off text: "writable" / "WRITES OFF" */
};

struct tier_status_field {
	const char *label;  /* "writes", "" for a flag */
	const char *metric; /* the family, without "tierfs_"; NULL ends the line */
	enum tier_status_kind kind;
	const char *on, *off; /* TIER_ST_FLAG: the text for > 0, and for 0 */
};

#define TIER_STATUS_FIELDS 8

/* A tier's part of `tierfs status`, as data: fs/status.c renders it from /metrics text for
 * every tier label it finds, in the client process. */
struct tier_status {
	/* its row in the tiers' table (hit ratios, rates): the families of its hits, misses
	 * and bytes served (NULL: the tier has no row; served NULL: shown as "-") */
	const char *hits, *misses, *served;
	/* its own line, fields in order, up to the first with metric NULL (none: no line) */
	struct tier_status_field line[TIER_STATUS_FIELDS];
};

struct tier_ops {
	const char *name;   /* the tier's one name: the tier="NAME" label, the residency
			     * listing's "NAME=ranges", cache_served.from */
	/*
	 * Start reading @io into io->dst. Answer exactly once with tier_answer(io, 0) when dst
	 * holds the checked bytes (a hit), or tier_answer(io, < 0) (a miss, or for the store a
	 * failure), from any thread, later or before returning. A tier that will take long to
	 * answer one block of a batch (it waits for another host) calls tier_detach(io) first,
	 * so the rest of the batch goes on without it. @return 0 if started; < 0 a miss known at
	 * once (no answer follows). NULL: the tier reads nothing (a write-only tier).
	 */
	int (*get)(void *self, struct tier_io *io);
	/* Does the tier hold @key? From an index only: no I/O, no waiting; may run under the
	 * cache's lock, so it must not call into the cache. NULL: never known. */
	bool (*has)(void *self, struct cache_key key);
	/*
	 * After get missed: the block was read from below (@err 0, io->dst holds io->len bytes)
	 * or could not be (@err < 0: release what get took). Also, with io->written, a block
	 * written through the mount (no get before). The tier copies what its admission rule
	 * takes and never blocks. NULL: it keeps nothing.
	 */
	void (*put)(void *self, const struct tier_io *io, int err);
	/* Forget every block of @oid (the object was deleted or replaced). NULL: nothing. */
	void (*drop)(void *self, struct cache_oid oid);
	/* Bytes put may take now without dropping them for lack of room (its write queue's free
	 * space); UINT64_MAX when it never lacks room, or would not keep them anyway. Blocks
	 * written through the mount are offered at this pace (cache_publish). NULL: UINT64_MAX. */
	uint64_t (*room)(void *self);
	/* Call @fn for each block of @oid the tier holds (any order): the residency listing
	 * (user.tierfs.cached, the control directory), one " NAME=ranges" per tier that lists.
	 * From its index only; @fn may run under the tier's lock and must not call into it.
	 * NULL: the tier lists nothing. */
	void (*each)(void *self, struct cache_oid oid, void (*fn)(void *arg, uint64_t blk),
		     void *arg);
	/* Call @fn once per row the tier shows now (struct tier_metric), from its counters
	 * (relaxed loads or its own lock, never the cache's). NULL: no rows. */
	void (*metrics)(void *self, void (*fn)(void *arg, const struct tier_metric *m), void *arg);
	/* Its status line and table row (static data); NULL: none. */
	const struct tier_status *status;
	/* The cache is going away: end reads still queued (they answer as misses). NULL:
	 * nothing to do. */
	void (*stop)(void *self);
	/* Free the tier, after the cache (its queued writes written). NULL: nothing to free. */
	void (*close)(void *self);
};

struct gate;

/* A tier in the chain: its operations, its state, and its limiter (NULL: none). */
struct tier {
	const struct tier_ops *ops;
	void *self;
	struct gate *gate; /* its lagging misses pass it before the next tier */
};

#define TIER_CHAIN_MAX 6

/* A tier's answer to get (see tier_ops.get). */
void tier_answer(struct tier_io *io, int err);

/* The answer to @io will be long in coming: let its batch go on without it. At most once, and
 * before tier_answer. */
void tier_detach(struct tier_io *io);

/* ---------------------------------------------------------------------------------------------
 * The gate: a limiter's FIFO, fed by a token source.
 * ------------------------------------------------------------------------------------------ */

/* gate_src_ops.take's answer when the source cannot tell the wait: it will gate_kick(). */
#define GATE_LATER UINT64_MAX

/* Where a gate's tokens come from: a local token bucket (gate_rl_ops), or a budget granted
 * from elsewhere (the fleet's, tiers/fleet.c). */
struct gate_src_ops {
	/* Take @bytes and one request now: @return 0 (taken); the nanoseconds after which to
	 * ask again (nothing taken); or GATE_LATER (nothing taken; the source will gate_kick
	 * when it may have them). Called under the gate's lock: no I/O, no callbacks. */
	uint64_t (*take)(void *src, uint64_t bytes, uint64_t now_ns);
	/* take said GATE_LATER to a waiter wanting @bytes: go and get more now (no gate lock
	 * held), then gate_kick or gate_update. NULL: nothing to do. */
	void (*ask)(void *src, uint64_t bytes);
	/* Tokens now, for the stats (negative: debt). NULL: 0. */
	double (*tokens)(void *src, uint64_t now_ns);
};

/* A waiter: embedded in whatever waits (a flight). */
struct gate_waiter {
	struct gate_waiter *next; /* the FIFO; the gate's lock */
	uint64_t bytes;           /* what it takes */
	uint64_t since_ns;        /* when it queued (0: it did not) */
	uint64_t holds;           /* the gate's holds when it came: throttled if they grew */
	bool queued;              /* in the FIFO now; the gate's lock */
	/* Let through: called once, with no lock held, from the thread that drains the gate
	 * (a timer, a kick, a gate_done), never from gate_enter. */
	void (*go)(struct gate_waiter *w);
};

struct gate_stats {
	uint64_t waits;       /* waiters throttled: queued while the source held the queue */
	uint64_t waited_ns;   /* their total time queued */
	uint64_t queued;      /* waiting now */
	uint64_t running;     /* let through and not done (with a cap) */
	double tokens;        /* the source's tokens now */
};

struct gate {
	pthread_mutex_t lock;
	const struct gate_src_ops *ops;
	void *src;
	uint64_t max_running;     /* let-through waiters not yet done, at most; 0: no cap */
	uint64_t running;         /* lock */
	struct gate_waiter *head, *tail; /* lock */
	uint64_t timer_due;       /* earliest armed drain timer, UINT64_MAX if none; lock */
	bool asking;              /* the source was told to ask (kick pending); lock */
	uint64_t ask_bytes;       /* what the head wanted then; lock */
	uint64_t (*mono_ns)(void *arg);
	int (*defer)(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg);
	void *env_arg;
	uint64_t waits, waited_ns, nqueued; /* stats; lock */
	uint64_t holds;           /* times the source said wait (try_take); lock */
};

/* Set up @g over token source @ops/@src, with the clock and timers of @env (mono_ns, defer,
 * arg). @max_running caps waiters let through and not yet gate_done (0: no cap). */
void gate_init(struct gate *g, const struct gate_src_ops *ops, void *src, uint64_t max_running,
	       const struct cache_env *env);
/* Answers nothing: call with no waiter queued (timers may still fire: keep @g alive until
 * the timer source has stopped). */
void gate_done_all(struct gate *g);

/* Let @w (wanting @bytes) through now if the FIFO is empty and the source has the tokens:
 * @return true (with max_running, counted running: call gate_done when it ends). Else queue
 * it: false, and w->go runs later. It never calls a go() itself, but may call the source's
 * ask(): under a lock that ask() may need, enter only gates whose source asks no one. */
bool gate_enter(struct gate *g, struct gate_waiter *w, uint64_t bytes);
/* Take @w out of the FIFO if it is still there. @return true if it was (go will not run). */
bool gate_cancel(struct gate *g, struct gate_waiter *w);
/* A waiter let through has ended (it frees a place under max_running): drain. */
void gate_done(struct gate *g);
/* The source may have tokens now (a grant came): drain. */
void gate_kick(struct gate *g);
/* Run @fn(@src, @arg) under the gate's lock (a live change of the source's settings, or
 * tokens it was granted), then drain with what it has now, as gate_kick. */
void gate_update(struct gate *g, void (*fn)(void *src, void *arg), void *arg);
void gate_get_stats(struct gate *g, struct gate_stats *ret);
/* Take every waiter out of the FIFO (shutdown): @return them, linked by next; go will not run
 * for them. */
struct gate_waiter *gate_flush(struct gate *g);

/* A local token bucket as a gate's source (cache_i.h's struct rl; ratelimit.c). */
extern const struct gate_src_ops gate_rl_ops;

#endif
