/*
 * cache.c - the read engine: block alignment, tiers, single-flight, readahead, throttling.
 *
 * A read of [off, off+len) touches blocks first..last (block b covers [b*B, (b+1)*B), the last
 * block of an object is short). Each block is a "piece" of the read:
 *
 *     read(off, len) ──► piece[0] piece[1] ... piece[n-1]
 *                          │ hot ring lookup ── hit: pinned bytes
 *                          │ lagging ring lookup ── hit
 *                          └ miss: flight table[key] ── exists: join its waiter list
 *                                                   └─ new flight: fetch into a ring slot
 *
 * The memory tiers are a list, c->tier[] (struct mem_tier: name, ring, size, TTL, gate,
 * admission rule), walked in order for lookups; they answer with pinned references into their
 * rings, never copies. Below them is the chain (tier.h, tier.c): tiers that copy a block into
 * a flight's slot (disk, fleet), ending with the store. A new tier below memory is a file with
 * a struct tier_ops and one line in the chain the mount assembles (fs/mount.c, chain_of);
 * tests/unit/test_cache.c does it with a test tier. A new memory tier is an entry in
 * tiers_of() and its name in tier_names[].
 *
 * A random read of a lagging object (one that does not continue its stream), or of a hot one
 * larger than cfg.hot_parts_above, fetches parts of blocks instead: for each block it touches,
 * the 64 KiB-aligned range around what it reads, up to 256 KiB, stored in its tier's ring
 * under a key of its own (see part_of). A piece then carries the offset its bytes start at in
 * the block; everything else (single-flight, pins, cancel, the limiter's charge) works per
 * part as it does per block.
 *
 * A flight is one fetch of one block. It reserves its bytes in the ring of the tier chosen by
 * the object's age (cache_route; ring_reserve pins them; readers cannot see them until commit)
 * and the chain's tiers write straight into them, so a block is copied once from the network into the ring
 * and once from the ring into the kernel. When the ring cannot take it (the next segment is
 * pinned) the flight fetches into a "bounce" buffer instead: the readers are answered, nothing
 * is stored.
 *
 * Memory. The rings are allocated once; bounce buffers are the only memory that grows with
 * the number of readers, so their bytes are capped (cfg.bounce_limit, shared by the tiers).
 * A flight that finds neither a ring slot nor room under the cap waits in the memory queue,
 * holding nothing; its readers stay parked, no thread blocks. Whatever frees memory pumps the
 * queue: a ring unpin (a reply done, a fetch done), a bounce buffer unmapped, a flight done.
 * Pins are held only by running fetches (which finish) and by reads answered or waiting for
 * their other blocks; so that a queue whose blocked reads pin every segment cannot deadlock,
 * a queued flight may take a bounce buffer over the cap when no fetch holds memory at all
 * (at most one such fetch runs at a time; see mem_take). Readahead, which nobody waits for
 * yet, takes ring slots only: a read that joins it while it waits pumps the queue.
 *
 *   flight_start ─► memory queue ─► take: ring slot │ bounce ≤ cap │ over cap if none running
 *                        ▲                        └─► fetch ─► flight_done
 *                        └──── pump: ring unpin, bounce unmapped, flight done ◄┘
 *
 * The chain. A flight that has its memory walks down the chain (cfg.chain, tier.h): each
 * tier's get starts copying the block into the flight's memory and answers later (the disk
 * tier's reader threads, the fleet's Redis GET on the I/O loop) or at once; a hit completes
 * the flight, a miss goes on to the next tier, and the last one, the store, always answers.
 * Flights started together (one read's blocks, one readahead batch) walk as one batch: the
 * misses of a tier go on to the next tier together, once every flight of the batch has
 * answered there, with the backend plugged (env->plug), so consecutive blocks that missed
 * Redis still reach the store as one merged range request. A tier that will take long over
 * one block (the fleet, waiting for another host's fetch) detaches it from its batch
 * (tier_detach) and it goes on alone. A part of a block (a random read) goes straight to the
 * store: the tiers below memory keep whole blocks. Once the flight is done, every tier its
 * walk passed is told (put): with the bytes, for its admission rule to keep or not (the disk
 * tier its write-behind copy, the fleet its SET), or with the error, to release what its get
 * took (the fleet's fetch lock).
 *
 *   walk_list ──► walk: tier 0 ── hit ──► flight_done (no tokens)
 *                          │ miss (the batch together)
 *                          ▼
 *                        tier 1 ... ─► store ─► flight_done ─► put to the tiers passed
 *
 * A lagging block that some tier of the chain has (tier_ops.has) skips the lagging tier's
 * limiter: the limiter guards the store, and is charged for bytes the store sends. Should
 * the walk reach the store after all (a CRC failure, an eviction), the fetch is charged then
 * (rl_charge: it goes at once, the debt delays later lagging fetches) and counted
 * (lower_fallbacks). A chain tier may own a gate too (the fleet's budget): its lagging misses
 * pass it, one by one, before the next tier.
 *
 * Hot flights start at once. Lagging flights pass the lagging tier's gate (gate.c): a FIFO
 * let through when the token bucket says so, on a timer armed through env->defer, and no
 * more at once than half the lagging ring holds. No thread ever sleeps on the limiter.
 *
 * Completion (on the fetcher's thread): commit the slot, then under c->lock take the flight
 * out of the table and hand each waiter a pin on the bytes (or the error). A read whose last
 * piece arrived is answered after the lock is dropped, then its pins are released. A failed
 * fetch leaves nothing behind: the slot is aborted, the table entry removed, every waiter
 * answered with the error, so the next read retries.
 *
 * Locking: c->lock guards the flight table, the waiter lists, the memory queue and bounce
 * accounting, and every read's pending count. Each ring has its own lock, taken inside
 * c->lock or alone, never the other way round; so are the gates' locks (gate_enter and
 * gate_cancel run under c->lock; everything that can let a waiter go runs with no lock) and
 * the chain's tiers' (tier_ops.has runs under c->lock; get and put with no lock, and get's
 * answer comes with none either). A batch's count of answers is an atomic. Replies and fetch
 * starts happen with no lock held. A read that hits every block never takes c->lock (a pin
 * it drops only reads an atomic count of waiting flights).
 *
 * Workload: brokers read log segments sequentially in 128 KiB..1 MiB requests, many readers
 * at the tail (hot, mostly hits), a few replaying old segments (lagging, mostly misses).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "cache_i.h"
#include "tier.h"

#define FLIGHT_BUCKETS 4096 /* power of two; in-flight blocks are few (conns + queue) */
#define STACK_PIECES 32     /* a 1 MiB read with 64 KiB blocks touches 17 */
#define MAX_READ_BLOCKS 4096 /* refuse absurd reads rather than allocate for them */

/* A block fetched while every segment of its ring was pinned: mapped for the fetch and
 * unmapped when its last reader is done, so its memory goes back to the system at once
 * (freed heap memory of this size would stay in the process). */
struct bounce {
	unsigned refs; /* flight + each waiter; c->lock */
	size_t size;   /* of the mapping */
	uint32_t len;  /* bytes charged to c->bounce_bytes */
	bool forced;   /* taken over the limit: also charged to c->forced_bytes */
	char data[];
};

static struct bounce *bounce_new(uint32_t len)
{
	size_t size = sizeof(struct bounce) + len;
	struct bounce *b = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);

	if (b == MAP_FAILED)
		return NULL;
	b->refs = 1;
	b->size = size;
	b->len = len;
	return b;
}

struct piece;
struct pread;

/* One fetch of one block. Lives from miss to completion. */
struct flight {
	struct flight *hnext;   /* flight table chain; c->lock */
	struct flight *qnext;   /* memory queue, or a list to start; c->lock */
	struct cache *c;
	struct cache_key key;
	void *ctx;              /* the object, held with env->hold */
	uint64_t off;           /* byte offset of the block in the object */
	uint32_t len;           /* block length (short at end of object) */
	uint8_t tier;           /* index in c->tier[]: where it is stored, whose gate */
	bool have_ref;          /* ref is a ring reservation */
	struct ring_ref ref;    /* the reserved slot */
	struct bounce *bounce;  /* or the bounce buffer */
	struct piece *waiters;  /* pieces of parked reads waiting on this block; c->lock */
	struct gate_waiter gw;  /* in its memory tier's gate (lagging) */
	bool queued;            /* waiting in that gate now; c->lock */
	bool gated;             /* let through that gate: gate_done when it ends */
	bool mwait;             /* in the memory queue now; c->lock */
	bool mwait_new;         /* just queued: count it in mem_waits if it stays; c->lock */
	bool claimed;           /* has its memory (slot or bounce charge): in mem_running */
	bool bounce_charged;    /* claimed a bounce buffer of len bytes, not yet mapped */
	bool forced;            /* that bounce buffer is over the limit (see mem_take) */
	bool lower_free;        /* skipped the limiter: a tier of the chain said it has the block */
	struct chain_req cr;    /* its walk down the chain (tier.c), once it has its memory */
};

/* What a piece holds of its block's bytes. */
enum piece_pin {
	PIN_NONE,   /* nothing yet (waiting for a flight), or released */
	PIN_RING,   /* a pin in the ring of tier p->tier */
	PIN_BOUNCE, /* a reference on the bounce buffer p->bounce */
};

/* One block's part of a read. */
struct piece {
	struct piece *wnext; /* next waiter of the same flight; c->lock */
	struct flight *wait; /* that flight, while waiting for it; c->lock */
	struct pread *pr;    /* the read it belongs to */
	const char *data;    /* the bytes once available: the block's, or a part's */
	uint32_t start;      /* where they start in the block: 0, or a part's offset */
	uint32_t len;        /* their length */
	enum piece_pin pin;  /* what it holds */
	uint8_t tier;        /* PIN_RING: the tier whose ring it is pinned in */
	uint8_t from;        /* where the bytes were when the read came: cache_iov.from */
	uint32_t fetched;    /* bytes of the flight it waited for, 0 for a hit */
	struct ring_ref ref;
	struct bounce *bounce;
};

/* A read waiting for at least one block. */
struct pread {
	struct pread *hnext; /* parked-read table chain, while waiting; c->lock */
	uint64_t ticket;     /* 0: not cancellable, not in the table */
	struct cache_oid obj; /* object version, to find the flights of its pieces */
	struct cache *c;
	cache_reply_fn reply;
	void *req;
	uint64_t off;       /* clipped request */
	size_t len;
	uint64_t first;     /* first block */
	uint32_t n;         /* pieces */
	uint32_t pending;   /* pieces not yet arrived; c->lock */
	int err;            /* first error of any piece; c->lock */
	struct piece p[];
};

/*
 * One memory tier of the list c->tier[], in lookup order (CACHE_HOT first). A block is looked
 * up in each tier in turn; a miss is fetched into the tier cache_route() picks: the last one,
 * from the end of the list, that is on and whose admission rule takes the object (the first
 * tier takes everything). A tier with a gate sends its misses through it and fetches them at
 * background priority. All fields are set in cache_new and constant after, except where said.
 */
struct mem_tier {
	const char *name;           /* "hot", "lagging": stats labels, residency text */
	bool on;                    /* configured: it has a ring */
	struct ring *ring;          /* NULL when the tier is off */
	uint64_t size;              /* bytes */
	uint64_t ttl_s;             /* block lifetime; the first tier's changes live (atomic) */
	struct gate *gate;          /* its limiter's queue (c->lag_gate), or NULL */
	uint64_t rate;              /* the limiter's rate, bytes/s, 0 = unlimited (atomic) */
	/* Does a miss of @o belong here? NULL: every object (the first tier). */
	bool (*admits)(struct cache *c, const struct cache_obj *o);
	struct cache_tier_stats st; /* counters only, updated with relaxed atomics */
};

struct cache {
	struct cache_cfg cfg;    /* as given; the live settings are kept in the tiers */
	struct cache_env env;
	uint32_t shift;          /* log2(block_size) */
	struct mem_tier tier[CACHE_NTIERS];
	struct chain chain;      /* the tiers below memory, the store last (tier.c) */

	pthread_mutex_t lock;
	struct flight *table[FLIGHT_BUCKETS];   /* c->lock */
	struct pread *parked[FLIGHT_BUCKETS];   /* waiting reads with a ticket, by ticket; c->lock */
	uint64_t next_ticket;                   /* atomic */
	struct rl rl;            /* the lagging tier's token bucket; lag_gate's lock */
	struct gate lag_gate;    /* the lagging tier's limiter: at most half its ring at once */
	struct flight *mhead, *mtail; /* flights waiting for memory, FIFO by qnext; c->lock */
	unsigned mwaiting;       /* flights in the memory queue; written under c->lock, read
				  * without it (seq_cst) by whoever frees memory */
	unsigned mem_running;    /* flights holding memory (slot or bounce), not done; c->lock */
	uint64_t bounce_bytes;   /* bytes of bounce buffers charged and not unmapped; c->lock */
	uint64_t bounce_peak;    /* the most bounce_bytes ever was; c->lock */
	uint64_t forced_bytes;   /* the part of bounce_bytes taken over the limit; c->lock */
	struct publisher *pubs;  /* written objects being offered to the chain; c->lock */
};

#define STAT_ADD(c, t, field, v) __atomic_fetch_add(&(c)->tier[t].st.field, (v), __ATOMIC_RELAXED)
#define STAT_SUB(c, t, field, v) __atomic_fetch_sub(&(c)->tier[t].st.field, (v), __ATOMIC_RELAXED)

static uint64_t now_ns(struct cache *c)
{
	return c->env.mono_ns(c->env.arg);
}

static unsigned bucket(struct cache_key k)
{
	uint64_t h = (k.oid.lo ^ k.oid.hi) * 0x9e3779b97f4a7c15ULL ^ (k.blk + 0x632be59bd9b4e019ULL);

	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return (unsigned)h & (FLIGHT_BUCKETS - 1);
}

static struct flight *flight_find(struct cache *c, struct cache_key k)
{
	for (struct flight *f = c->table[bucket(k)]; f; f = f->hnext)
		if (cache_key_eq(f->key, k))
			return f;
	return NULL;
}

static void flight_unlink(struct cache *c, struct flight *f)
{
	struct flight **pp = &c->table[bucket(f->key)];

	while (*pp != f)
		pp = &(*pp)->hnext;
	*pp = f->hnext;
}

bool cache_is_lagging(int64_t mtime, int64_t now, uint64_t hot_ttl)
{
	if (mtime == INT64_MIN || mtime >= now)
		return false;
	/* now > mtime, so the age is exact in unsigned arithmetic (at most 2^64 - 2) */
	return (uint64_t)now - (uint64_t)mtime > hot_ttl;
}

/* The lagging tier's admission rule: objects older than the hot tier's TTL. */
static bool admits_old(struct cache *c, const struct cache_obj *o)
{
	uint64_t ttl = __atomic_load_n(&c->tier[CACHE_HOT].ttl_s, __ATOMIC_RELAXED);

	return cache_is_lagging(o->mtime, c->env.wall_s(c->env.arg), ttl);
}

enum cache_tier cache_route(struct cache *c, const struct cache_obj *o)
{
	for (int t = CACHE_NTIERS - 1; t > CACHE_HOT; t--)
		if (c->tier[t].ring && c->tier[t].admits(c, o))
			return (enum cache_tier)t;
	return CACHE_HOT;
}

static const char *const tier_names[CACHE_NTIERS] = {
	[CACHE_HOT] = "hot",
	[CACHE_LAG] = "lagging",
};

const char *cache_tier_name(enum cache_tier t)
{
	return (unsigned)t < CACHE_NTIERS ? tier_names[t] : NULL;
}

unsigned cache_chain(const struct cache *c, const struct tier **ret)
{
	*ret = c->chain.t;
	return c->chain.n;
}

const char *cache_source_name(const struct cache *c, unsigned from)
{
	if (from < CACHE_NTIERS)
		return tier_names[from];
	from -= CACHE_NTIERS;
	return from < c->chain.n ? c->chain.t[from].ops->name : NULL;
}

static uint32_t block_len(const struct cache *c, const struct cache_obj *o, uint64_t blk)
{
	uint64_t start = blk << c->shift;
	uint64_t end = start + c->cfg.block_size;

	return (uint32_t)((end > o->size ? o->size : end) - start);
}

/*
 * Parts. A random read of a lagging object (or of a hot one over cfg.hot_parts_above) fetches
 * only the aligned part of each block it touches: the CACHE_PART_UNIT-aligned range around
 * what it reads, up to CACHE_PART_MAX; a read that needs more of a block takes the whole
 * block. A part is stored in its tier's ring under a key of its own: the block index with
 * PART_TAG set, the part's first unit and its length in units, so single-flight holds per
 * part, a part is only ever served for reads it covers, and the whole block's key never finds
 * it (a sequential reader fetches the block).
 */
#define PART_TAG (1ull << 63)
#define PART_BLK_MAX (1ull << 47) /* block indexes a part key can carry */

struct part {
	struct cache_key key;
	uint32_t start; /* offset in the block */
	uint32_t len;
};

/* The part of block @blk of @o that a read of [@off, @off + @len) needs. @return false when
 * it needs the whole block (or more than CACHE_PART_MAX of it). */
static bool part_of(const struct cache *c, const struct cache_obj *o, uint64_t blk,
		    uint64_t off, size_t len, struct part *ret)
{
	const uint64_t unit = CACHE_PART_UNIT;
	uint64_t bstart = blk << c->shift, blen = block_len(c, o, blk);
	uint64_t a = off > bstart ? off - bstart : 0, b = off + len - bstart;
	uint64_t ps, pe;

	if (b > blen)
		b = blen;
	ps = a & ~(unit - 1);
	pe = (b + unit - 1) & ~(unit - 1);
	if (pe > blen)
		pe = blen;
	if (pe - ps > CACHE_PART_MAX || pe - ps >= blen || blk >= PART_BLK_MAX)
		return false;
	ret->start = (uint32_t)ps;
	ret->len = (uint32_t)(pe - ps);
	ret->key = (struct cache_key){o->id, PART_TAG | blk << 16 | (ps / unit) << 3 |
						   (pe - ps + unit - 1) / unit};
	return true;
}

/* Is @k a part's key? Parts stay in the memory tiers: the lower tiers keep whole blocks. */
static bool is_part(struct cache_key k)
{
	return (k.blk & PART_TAG) != 0;
}

/* Look key @k up in each tier in list order; its bytes start at @start in the block (0, or
 * a part's offset). Fills the piece with a pin. */
static bool lookup_at(struct cache *c, struct cache_key k, uint32_t start, uint64_t now,
		      struct piece *p)
{
	for (int t = 0; t < CACHE_NTIERS; t++) {
		if (!c->tier[t].ring)
			continue;
		if (ring_lookup(c->tier[t].ring, k, now, &p->ref) == 0) {
			p->pin = PIN_RING;
			p->tier = (uint8_t)t;
			p->from = (uint8_t)t;
			p->fetched = 0;
			p->data = p->ref.data;
			p->start = start;
			p->len = p->ref.len;
			STAT_ADD(c, t, hits, 1);
			return true;
		}
	}
	return false;
}

/* Look a block up in each tier. */
static bool lookup(struct cache *c, struct cache_key k, uint64_t now, struct piece *p)
{
	return lookup_at(c, k, 0, now, p);
}

/* Look part @pt up in each tier. */
static bool part_lookup(struct cache *c, const struct part *pt, uint64_t now, struct piece *p)
{
	return lookup_at(c, pt->key, pt->start, now, p);
}

static void mem_wake(struct cache *c);

/* Drop a reference to a bounce buffer; the last one unmaps it and gives its bytes back to
 * the cap (after the unmap, so the cap bounds what is really mapped). No lock held. */
static void bounce_put(struct cache *c, struct bounce *b)
{
	unsigned left;
	uint32_t len = b->len;
	bool forced = b->forced;

	pthread_mutex_lock(&c->lock);
	left = --b->refs;
	pthread_mutex_unlock(&c->lock);
	if (left)
		return;
	munmap(b, b->size);
	pthread_mutex_lock(&c->lock);
	c->bounce_bytes -= len;
	if (forced)
		c->forced_bytes -= len;
	pthread_mutex_unlock(&c->lock);
	mem_wake(c);
}

static void piece_release(struct cache *c, struct piece *p)
{
	if (p->pin == PIN_RING) {
		ring_unpin(c->tier[p->tier].ring, &p->ref);
		mem_wake(c);
	} else if (p->pin == PIN_BOUNCE) {
		bounce_put(c, p->bounce);
	}
	p->pin = PIN_NONE;
}

/* What served the read being answered on this thread (cache_reply_served), NULL between
 * answers. */
static _Thread_local const struct cache_served *served_now;

const struct cache_served *cache_reply_served(void)
{
	return served_now;
}

/* The deepest source of pieces @p[0..n) and the bytes fetched for them, into @ret. */
static void served_of(const struct cache *c, const struct piece *p, uint32_t n,
		      struct cache_served *ret)
{
	uint8_t deepest = 0;

	ret->fetched = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (p[i].from > deepest)
			deepest = p[i].from;
		ret->fetched += p[i].fetched;
	}
	ret->from = cache_source_name(c, deepest);
	ret->at = deepest;
}

/* Answer a read whose pieces are all present (or that failed), then drop its pins. */
static void answer(struct cache *c, struct piece *p, uint32_t n, uint64_t first, uint64_t off,
		   size_t len, int err, cache_reply_fn reply, void *req)
{
	struct cache_iov stack_iov[STACK_PIECES] = {{0}}, *iov = stack_iov;

	if (err) {
		reply(req, NULL, 0, err);
		goto out;
	}
	if (n > STACK_PIECES) {
		iov = malloc(n * sizeof(*iov));
		if (!iov) {
			reply(req, NULL, 0, -ENOMEM);
			goto out;
		}
	}
	uint64_t pos = off;
	size_t left = len;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t bstart = ((first + i) << c->shift) + p[i].start;
		size_t skip = (size_t)(pos - bstart);
		size_t take = p[i].len - skip;

		if (take > left)
			take = left;
		iov[i].base = p[i].data + skip;
		iov[i].len = take;
		iov[i].from = p[i].from;
		if (p[i].pin == PIN_RING)
			STAT_ADD(c, p[i].tier, bytes_served, take);
		pos += take;
		left -= take;
	}
	struct cache_served sv;

	served_of(c, p, n, &sv);
	served_now = &sv;
	reply(req, iov, (int)n, 0);
	served_now = NULL;
	if (iov != stack_iov)
		free(iov);
out:
	for (uint32_t i = 0; i < n; i++)
		piece_release(c, &p[i]);
}

static void flight_done(struct flight *f, int err);

/*
 * Find memory for flight @f (c->lock held): a slot in its ring, else a bounce buffer if the
 * cap allows it (or @force: nothing else holds memory, see the essay). Under a cap, a flight
 * nobody waits for yet (readahead) takes no bounce buffer: its bytes would be dropped unread.
 * The bounce buffer is only charged here and mapped by flight_ready, outside the lock.
 * @return true if @f has its memory, false if it must wait.
 */
static bool claim(struct cache *c, struct flight *f, bool force)
{
	uint64_t limit = c->cfg.bounce_limit;

	if (ring_reserve(c->tier[f->tier].ring, f->key, f->len, now_ns(c), &f->ref) == 0) {
		f->have_ref = true;
	} else if (force || !limit || (f->waiters && c->bounce_bytes + f->len <= limit)) {
		f->bounce_charged = true;
		c->bounce_bytes += f->len;
		if (force) {
			f->forced = true;
			c->forced_bytes += f->len;
		}
		if (c->bounce_bytes > c->bounce_peak)
			c->bounce_peak = c->bounce_bytes;
		STAT_ADD(c, f->tier, bounces, 1);
	} else {
		return false;
	}
	f->claimed = true;
	c->mem_running++;
	return true;
}

/* Unlink queued flight @f, whose predecessor in the memory queue is @prev (c->lock held). */
static void mem_unlink(struct cache *c, struct flight *f, struct flight *prev)
{
	if (prev)
		prev->qnext = f->qnext;
	else
		c->mhead = f->qnext;
	if (c->mtail == f)
		c->mtail = prev;
	f->qnext = NULL;
	f->mwait = false;
	__atomic_store_n(&c->mwaiting, c->mwaiting - 1, __ATOMIC_SEQ_CST);
}

/* Does read @pr hold a bounce buffer taken over the limit? (c->lock held) */
static bool holds_forced(const struct pread *pr)
{
	for (uint32_t i = 0; i < pr->n; i++)
		if (pr->p[i].pin == PIN_BOUNCE && pr->p[i].bounce->forced)
			return true;
	return false;
}

/* Take out of the memory queue (c->lock held) every flight that can have its memory now, in
 * order; if none can and no flight holds memory, force the first. @return them, linked by
 * qnext, to be fetched once the lock is dropped. */
static struct flight *mem_take(struct cache *c)
{
	struct flight *go = NULL, **tail = &go, *prev = NULL, *f, *next;

	for (f = c->mhead; f; f = next) {
		next = f->qnext;
		if (!claim(c, f, false)) {
			prev = f;
			continue;
		}
		mem_unlink(c, f, prev);
		*tail = f;
		tail = &f->qnext;
	}
	if (c->mhead && c->mem_running == 0) {
		/*
		 * Nothing runs, so nothing will free memory by itself: every slot is pinned by
		 * reads waiting for blocks queued here. Force one over the limit: the block of
		 * the read closest to being answered, so reads finish one at a time and drop
		 * their pins. While forced buffers are alive, reads holding one go first (they
		 * finish, and free them), so the excess stays about one read's blocks; others
		 * only if those wait elsewhere (the limiter). A flight nobody waits for
		 * (readahead) goes last, when nothing else is queued here: it may hold a
		 * place under the lagging gate's cap that a flight readers wait for needs.
		 */
		struct flight *pick = NULL, *pick_prev = NULL;
		uint32_t best = UINT32_MAX;
		bool any = !c->forced_bytes;

		for (int pass = 0; pass < 2 && !pick; pass++, any = true) {
			prev = NULL;
			for (f = c->mhead; f; prev = f, f = f->qnext)
				for (struct piece *p = f->waiters; p; p = p->wnext)
					if (p->pr->pending < best && (any || holds_forced(p->pr))) {
						best = p->pr->pending;
						pick = f;
						pick_prev = prev;
					}
		}
		if (!pick) {
			pick = c->mhead;
			pick_prev = NULL;
		}
		if (pick) {
			claim(c, pick, true);
			mem_unlink(c, pick, pick_prev);
			*tail = pick;
		}
	}
	return go;
}

static void flight_done(struct flight *f, int err);

static struct flight *flight_of(struct chain_req *r)
{
	return (struct flight *)((char *)r - offsetof(struct flight, cr));
}

static void charge(void *src, void *arg)
{
	const uint64_t *v = arg; /* {bytes, now} */

	rl_charge(src, v[0], v[1]);
}

/* The walk is about to ask the store. A flight that skipped the limiter because a tier of
 * the chain said it held the block, which it then did not serve, is charged now, after the
 * fact: the fetch goes at once (its readers waited for that tier already) and the debt makes
 * later lagging fetches wait, so the store sees no more than the rate over time. No lock
 * held. */
static void flight_to_store(struct chain_req *r)
{
	struct flight *f = flight_of(r);
	struct cache *c = f->c;

	if (f->lower_free) {
		uint64_t v[2] = {f->len, now_ns(c)};

		STAT_ADD(c, f->tier, lower_fallbacks, 1);
		gate_update(c->tier[f->tier].gate, charge, v);
	}
	STAT_ADD(c, f->tier, fetches, 1);
}

static void flight_answered(struct chain_req *r, int err)
{
	flight_done(flight_of(r), err);
}

/* Map the bounce buffer claim() charged, if that is the flight's memory, and set up its walk.
 * No lock held. @return false if it failed (it is done, with -ENOMEM). */
static bool flight_ready(struct flight *f)
{
	void *dst;

	if (f->have_ref) {
		dst = f->ref.data;
	} else {
		f->bounce = bounce_new(f->len);
		if (!f->bounce) {
			flight_done(f, -ENOMEM);
			return false;
		}
		f->bounce->forced = f->forced;
		dst = f->bounce->data;
	}
	f->bounce_charged = false; /* the buffer, once mapped, carries the charge */
	f->cr.io = (struct tier_io){.key = f->key, .ctx = f->ctx, .off = f->off, .len = f->len,
				    .dst = dst, .lagging = f->c->tier[f->tier].gate != NULL,
				    .part = is_part(f->key)};
	f->cr.done = flight_answered;
	f->cr.to_store = flight_to_store;
	return true;
}

#define BATCH_MAX 64 /* flights walked down the chain as one batch, at most */

/* Walk the flights of @list (linked by qnext), which have their memory, down the chain as
 * batches. No lock held. */
static void walk_list(struct cache *c, struct flight *list)
{
	struct chain_req *batch[BATCH_MAX];
	unsigned n = 0;

	while (list) {
		struct flight *f = list;

		list = f->qnext;
		f->qnext = NULL;
		if (!flight_ready(f))
			continue;
		batch[n++] = &f->cr;
		if (n == BATCH_MAX) {
			chain_start(&c->chain, batch, n);
			n = 0;
		}
	}
	if (n)
		chain_start(&c->chain, batch, n);
}

/* The thread pumping the memory queue now, and whether it should look again: a fetch that
 * fails (or completes) inside a tier's get pumps again from within; that nested pump only asks
 * the outer one to repeat, so the stack does not grow with the queue. */
static _Thread_local struct cache *pumping;
static _Thread_local bool repump;

/*
 * Queue the flights of list @add (linked by qnext; may be NULL) for memory, count @finished (a
 * flight done that held memory) out of mem_running, and start every queued flight that can
 * have memory now, as one batch down the chain. No lock held.
 */
static void mem_pump(struct cache *c, struct flight *add, bool finished)
{
	struct flight *go, *f, *next;

	pthread_mutex_lock(&c->lock);
	for (f = add; f; f = next) {
		next = f->qnext;
		f->qnext = NULL;
		f->mwait = true;
		if (c->mtail)
			c->mtail->qnext = f;
		else
			c->mhead = f;
		c->mtail = f;
		__atomic_store_n(&c->mwaiting, c->mwaiting + 1, __ATOMIC_SEQ_CST);
	}
	if (finished)
		c->mem_running--;
	if (pumping == c) {
		repump = true;
		pthread_mutex_unlock(&c->lock);
		return;
	}
	go = mem_take(c);
	for (f = add ? c->mhead : NULL; f; f = f->qnext) {
		if (f->mwait_new)
			STAT_ADD(c, f->tier, mem_waits, 1);
		f->mwait_new = false;
	}
	pthread_mutex_unlock(&c->lock);
	if (!go)
		return;
	pumping = c;
	for (;;) {
		repump = false;
		walk_list(c, go);
		if (!repump)
			break;
		pthread_mutex_lock(&c->lock);
		go = mem_take(c);
		pthread_mutex_unlock(&c->lock);
	}
	pumping = NULL;
}

/* Memory was freed (a pin dropped, a bounce buffer unmapped): let waiting flights have it.
 * The unpin (under the ring's lock) comes before this load and a queued flight's count comes
 * before its reserve attempt (under the same lock), so one of the two sees the other. */
static void mem_wake(struct cache *c)
{
	if (__atomic_load_n(&c->mwaiting, __ATOMIC_SEQ_CST))
		mem_pump(c, NULL, false);
}

/* Start the flights of @list (linked by qnext): each gets its memory now or waits for it in
 * the memory queue; those that get it walk down the chain together. No lock held. */
static void start_list(struct cache *c, struct flight *list)
{
	for (struct flight *f = list; f; f = f->qnext) {
		STAT_ADD(c, f->tier, inflight, 1); /* flight_done counts it down, on every path */
		f->mwait_new = true;
	}
	if (list)
		mem_pump(c, list, false);
}

/* A lagging flight let through its tier's gate: start it. */
static void flight_gate_go(struct gate_waiter *w)
{
	struct flight *f = (struct flight *)((char *)w - offsetof(struct flight, gw));
	struct cache *c = f->c;

	pthread_mutex_lock(&c->lock);
	f->queued = false;
	f->gated = true;
	pthread_mutex_unlock(&c->lock);
	start_list(c, f);
}

/*
 * Create a flight for @len bytes at @off of @o, stored under @k: a whole block, or a part of
 * one (part_of) (c->lock held). A flight of a tier without a gate, or that its gate lets
 * through at once, goes on @go to be started by the caller; the others wait in the gate, which
 * starts them. @return the flight, or NULL if out of memory.
 */
static struct flight *flight_new(struct cache *c, const struct cache_obj *o, struct cache_key k,
				 uint64_t off, uint32_t len, enum cache_tier tier,
				 struct flight ***go_tail)
{
	struct flight *f = calloc(1, sizeof(*f));
	struct gate *g = c->tier[tier].gate;

	if (!f)
		return NULL;
	f->c = c;
	f->key = k;
	f->ctx = o->ctx;
	c->env.hold(o->ctx);
	f->off = off;
	f->len = len;
	f->tier = (uint8_t)tier;
	unsigned b = bucket(f->key);
	f->hnext = c->table[b];
	c->table[b] = f;

	/* a block a tier of the chain holds costs the store nothing: no limiter */
	if (g && !is_part(k) && chain_has(&c->chain, k))
		f->lower_free = true;
	f->gw.go = flight_gate_go;
	if (!g || f->lower_free || (f->gated = gate_enter(g, &f->gw, len))) {
		**go_tail = f;
		*go_tail = &f->qnext;
	} else {
		f->queued = true;
	}
	return f;
}

static unsigned ticket_bucket(uint64_t t)
{
	return (unsigned)(t * 0x9e3779b97f4a7c15ULL >> 40) & (FLIGHT_BUCKETS - 1);
}

/* Take a read out of the parked table (c->lock held). */
static void unpark(struct cache *c, struct pread *pr)
{
	struct pread **pp;

	if (!pr->ticket)
		return;
	for (pp = &c->parked[ticket_bucket(pr->ticket)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == pr) {
			*pp = pr->hnext;
			break;
		}
	}
	pr->ticket = 0;
}

/* Count @f's end in its tier's stats. */
static void flight_count(struct cache *c, const struct flight *f, int err)
{
	bool from_chain = f->cr.ch && f->cr.level + 1 < c->chain.n; /* a tier above the store */

	STAT_SUB(c, f->tier, inflight, 1);
	if (err)
		STAT_ADD(c, f->tier, fetch_errors, 1);
	else if (from_chain)
		STAT_ADD(c, f->tier, lower_hits, 1);
	else
		STAT_ADD(c, f->tier, bytes_fetched, f->len);
}

/* Give @f's bytes (or @err) to each read waiting for it (c->lock held). @return the reads
 * now complete, linked through their first piece's wnext. */
static struct pread *give_waiters(struct cache *c, struct flight *f, int err)
{
	struct ring *ring = c->tier[f->tier].ring;
	struct pread *done = NULL;

	for (struct piece *p = f->waiters, *next; p; p = next) {
		struct pread *pr = p->pr;

		next = p->wnext;
		p->wait = NULL;
		p->from = (uint8_t)(CACHE_NTIERS + f->cr.level);
		p->fetched = f->len;
		if (err) {
			if (!pr->err)
				pr->err = err;
		} else if (f->have_ref) {
			ring_pin(ring, &f->ref);
			p->ref = f->ref;
			p->pin = PIN_RING;
			p->tier = f->tier;
			p->data = f->ref.data;
			p->len = f->len;
		} else {
			f->bounce->refs++;
			p->bounce = f->bounce;
			p->pin = PIN_BOUNCE;
			p->data = f->bounce->data;
			p->len = f->len;
		}
		if (--pr->pending == 0) {
			unpark(c, pr);
			/* reuse the piece's link: a finished read is on no waiter list */
			pr->p[0].wnext = (struct piece *)done;
			done = pr;
		}
	}
	return done;
}

/* Answer the reads of list @done (give_waiters) and free them. No lock held. */
static void answer_all(struct cache *c, struct pread *done)
{
	while (done) {
		struct pread *pr = done;

		done = (struct pread *)pr->p[0].wnext;
		answer(c, pr->p, pr->n, pr->first, pr->off, pr->len, pr->err, pr->reply, pr->req);
		free(pr);
	}
}

/* @f ended: its bytes are in its memory (@err 0), or it failed. The tiers its walk passed are
 * told (their admission rules copy what they keep) before the slot becomes visible; then its
 * readers are answered and what it held is given back. Any thread, no lock held. */
static void flight_done(struct flight *f, int err)
{
	struct cache *c = f->c;
	struct ring *ring = c->tier[f->tier].ring;
	struct gate *gated = f->gated ? c->tier[f->tier].gate : NULL;
	struct pread *done;
	bool claimed = f->claimed;

	flight_count(c, f, err);
	if (f->cr.ch)
		chain_put(&c->chain, &f->cr, err);
	if (!err && f->have_ref)
		ring_commit(ring, &f->ref);

	pthread_mutex_lock(&c->lock);
	flight_unlink(c, f);
	if (f->bounce_charged) { /* charged, never mapped */
		c->bounce_bytes -= f->len;
		if (f->forced)
			c->forced_bytes -= f->len;
	}
	done = give_waiters(c, f, err);
	pthread_mutex_unlock(&c->lock);

	if (f->have_ref) {
		if (err)
			ring_abort(ring, &f->ref);
		else
			ring_unpin(ring, &f->ref);
	}
	if (f->bounce)
		bounce_put(c, f->bounce);
	c->env.release(f->ctx);
	free(f);
	answer_all(c, done);
	/* a fetch of the lagging tier ended: the next may go */
	if (gated)
		gate_done(gated);
	/* last, once its pins and its readers' are dropped: the memory it held is free */
	if (claimed)
		mem_pump(c, NULL, true);
}

#define RA_BATCH (16u << 20) /* cfg.readahead_batch's default: io.c's MERGE_MAX */

/*
 * The largest readahead window of a stream reading through @tier: an eighth of the tier, so
 * that a few streams at full window fit in it with their data still unread; never below the
 * configured initial window.
 */
static uint64_t readahead_cap(const struct cache *c, enum cache_tier tier)
{
	uint64_t cap = c->tier[tier].size / 8 / c->cfg.block_size;

	return cap > c->cfg.readahead ? cap : c->cfg.readahead;
}

/* How far ahead of a reader of @tier a window of @win blocks may fetch. A throttled reader
 * consumes a block in block_size/rate seconds; blocks fetched further ahead than about half
 * the tier's TTL would expire unread and be paid for twice. */
static uint64_t throttled_depth(const struct cache *c, enum cache_tier tier, uint64_t win)
{
	uint64_t rate, fit;

	if (!c->tier[tier].gate)
		return win;
	rate = __atomic_load_n(&c->tier[tier].rate, __ATOMIC_RELAXED);
	fit = rate ? rate * c->tier[tier].ttl_s / 2 / c->cfg.block_size : win;
	return win < fit ? win : fit;
}

/*
 * Which blocks after @last to prefetch for a sequential reader: [*ret_from, *ret_to], empty
 * when *ret_from > *ret_to. Advances the stream, so it runs before the reply (after it, the
 * file and its stream may be gone). The stream is shared by the readers of one open file
 * without a lock: relaxed atomics, and a race only makes readahead less exact.
 *
 * The window is adaptive, as Linux's readahead and mountpoint-s3's prefetcher: it starts at
 * cfg.readahead blocks when a stream starts (or @restart: it began again at offset 0), and
 * doubles each time the reader has consumed a whole window since the last change, up to
 * readahead_cap(). A seek sets it back (cache_read clears ra_win). Streams of a limited tier
 * are also bounded by what its rate consumes within its TTL.
 */
static void readahead_plan(struct cache *c, const struct cache_obj *o, struct cache_stream *s,
			   uint64_t last, bool restart, enum cache_tier tier, uint64_t *ret_from,
			   uint64_t *ret_to)
{
	uint64_t nblocks = (o->size + c->cfg.block_size - 1) >> c->shift;
	uint64_t from = last + 1, to, ra_next, depth, cap = readahead_cap(c, tier);
	uint64_t win = __atomic_load_n(&s->ra_win, __ATOMIC_RELAXED);
	uint64_t grow = __atomic_load_n(&s->ra_grow, __ATOMIC_RELAXED);

	*ret_from = 1;
	*ret_to = 0;
	if (restart || !win || win > cap) {
		win = c->cfg.readahead;
		grow = last + win;
	} else if (last >= grow) {
		win = win > cap / 2 ? cap : 2 * win;
		grow = last + win;
	}
	__atomic_store_n(&s->ra_win, win, __ATOMIC_RELAXED);
	__atomic_store_n(&s->ra_grow, grow, __ATOMIC_RELAXED);
	depth = throttled_depth(c, tier, win);
	if (!depth)
		return;
	to = last + depth;
	if (to >= nblocks)
		to = nblocks - 1;
	ra_next = __atomic_load_n(&s->ra_next, __ATOMIC_RELAXED);
	if (ra_next > to + 1)
		ra_next = 0; /* the reader went back: start over */
	if (from < ra_next)
		from = ra_next;
	if (from > to)
		return;
	/* The window's far end moves a batch at a time: blocks started together can go to the
	 * store as one range request (the backend merges consecutive reads it is handed at once),
	 * and a store that pays per request (s3rver; S3's GET charges) is asked a quarter as
	 * often with 4 MiB blocks. A batch is cfg.readahead_batch bytes, or half the window while
	 * the window is smaller than two batches, so merging starts as soon as the window grows
	 * past two blocks. Reads still find the next blocks in flight: at least half the window
	 * is always ahead. Not in a limited tier: its fetches are never merged (its limiter
	 * counts requests), and batching would only shorten its window. */
	uint64_t bb = c->cfg.readahead_batch ? c->cfg.readahead_batch : RA_BATCH;
	uint64_t batch = bb >> c->shift ? bb >> c->shift : 1;

	if (batch > depth / 2)
		batch = depth / 2;
	if (!c->tier[tier].gate && to + 1 < nblocks && to - from + 1 < batch)
		return;
	__atomic_store_n(&s->ra_next, to + 1, __ATOMIC_RELAXED);
	*ret_from = from;
	*ret_to = to;
}

/* Is block @k in any tier? */
static bool resident(struct cache *c, struct cache_key k, uint64_t now)
{
	for (int t = 0; t < CACHE_NTIERS; t++)
		if (c->tier[t].ring && ring_contains(c->tier[t].ring, k, now))
			return true;
	return false;
}

/* Prefetch blocks [from, to] of @o, through the same queue and limiter as reads. Stops
 * early when a quarter of the tier is already being fetched: many streams at full window
 * would otherwise pin every segment and bounce. */
static void readahead(struct cache *c, const struct cache_obj *o, uint64_t from, uint64_t to,
		      enum cache_tier tier, uint64_t now)
{
	struct flight *go = NULL, **go_tail = &go;
	uint64_t inflight_max = c->tier[tier].size / 4 / c->cfg.block_size, added = 0;

	if (from > to)
		return;
	pthread_mutex_lock(&c->lock);
	for (uint64_t b = from; b <= to; b++) {
		struct cache_key k = {o->id, b};

		if (flight_find(c, k))
			continue;
		if (__atomic_load_n(&c->tier[tier].st.inflight, __ATOMIC_RELAXED) + added >=
		    inflight_max)
			break;
		if (resident(c, k, now))
			continue;
		if (!flight_new(c, o, k, b << c->shift, block_len(c, o, b), tier, &go_tail))
			break;
		added++;
		STAT_ADD(c, tier, readaheads, 1);
	}
	pthread_mutex_unlock(&c->lock);
	start_list(c, go);
}

/* A read being set up: the request, clipped to the object, and what cache_read decided. */
struct rq {
	const struct cache_obj *o;
	uint64_t off;        /* clipped request */
	size_t len;
	uint64_t first, last; /* its blocks */
	uint32_t n;
	uint64_t now;
	enum cache_tier tier; /* where its misses go */
	bool parts;          /* a random read of an object too big for whole blocks: parts */
	uint64_t ticket;
	cache_reply_fn reply;
	void *req;
};

/*
 * Advance stream @s past read @q: plan readahead for a sequential reader ([*ret_from,
 * *ret_to], empty when from > to), forget the window on a seek. @return true when the read
 * should fetch parts of blocks (a random read of a lagging object, or of a hot one larger than
 * cfg.hot_parts_above: whole blocks of it would evict each other before they are read again;
 * docs/caching.md, "Random reads").
 */
static bool stream_step(struct cache *c, struct cache_stream *s, const struct rq *q,
			uint64_t *ret_from, uint64_t *ret_to)
{
	uint64_t prev = __atomic_exchange_n(&s->next_off, q->off + q->len, __ATOMIC_RELAXED);
	/* A stream with a window stays sequential while its reads land between the block
	 * before the previous read's last block and its readahead frontier: the kernel's
	 * readahead requests reach the FUSE workers slightly out of order. */
	bool near = __atomic_load_n(&s->ra_win, __ATOMIC_RELAXED) && prev &&
		    q->first + 1 >= (prev - 1) >> c->shift &&
		    q->first <= __atomic_load_n(&s->ra_next, __ATOMIC_RELAXED);
	bool seq = q->off == prev || q->off == 0 || near;

	if (seq && c->cfg.readahead)
		readahead_plan(c, q->o, s, q->last, q->off == 0 && prev != 0, q->tier, ret_from,
			       ret_to);
	else if (!seq)
		__atomic_store_n(&s->ra_win, 0, __ATOMIC_RELAXED); /* a seek */
	return !seq && (q->tier == CACHE_LAG ||
			(c->cfg.hot_parts_above && q->o->size > c->cfg.hot_parts_above));
}

/* Look every block of @q up, pinning what is resident into @p. @return how many are not. */
static uint32_t look_all(struct cache *c, const struct rq *q, struct piece *p)
{
	uint32_t missing = 0;

	for (uint32_t i = 0; i < q->n; i++) {
		struct part pt;

		p[i].pin = PIN_NONE;
		p[i].wait = NULL;
		if (lookup(c, (struct cache_key){q->o->id, q->first + i}, q->now, &p[i]))
			continue;
		if (q->parts && part_of(c, q->o, q->first + i, q->off, q->len, &pt) &&
		    part_lookup(c, &pt, q->now, &p[i]))
			continue;
		missing++;
	}
	return missing;
}

/*
 * Find or start the flight piece @p (block @blk of read @q) waits for (c->lock held); new
 * flights go on @go_tail. A piece whose block was committed since the first look is pinned
 * instead. @return the flight; NULL if the piece is pinned, or out of memory (*ret_err set).
 * *ret_pump: it joined a flight that waits for memory (and may now take a bounce buffer).
 */
static struct flight *piece_flight(struct cache *c, const struct rq *q, struct piece *p,
				   uint64_t blk, struct flight ***go_tail, bool *ret_pump,
				   int *ret_err)
{
	struct cache_key k = {q->o->id, blk};
	struct part pt;
	struct flight *f;
	/* the whole block when a tier of the chain has it: it costs the store nothing */
	bool part = q->parts && part_of(c, q->o, blk, q->off, q->len, &pt) &&
		    !chain_has(&c->chain, k);

	p->start = 0;
	/* a fetch of the whole block serves a part too */
	f = flight_find(c, k);
	if (!f && part && (f = flight_find(c, pt.key)))
		p->start = pt.start;
	if (f) {
		STAT_ADD(c, f->tier, joins, 1);
		*ret_pump |= f->mwait;
		return f;
	}
	if (lookup(c, k, q->now, p) || (part && part_lookup(c, &pt, q->now, p)))
		return NULL; /* committed since the first look */
	if (part) {
		p->start = pt.start;
		f = flight_new(c, q->o, pt.key, (blk << c->shift) + pt.start, pt.len, q->tier,
			       go_tail);
	} else {
		f = flight_new(c, q->o, k, blk << c->shift, block_len(c, q->o, blk), q->tier,
			       go_tail);
	}
	if (!f) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	STAT_ADD(c, q->tier, misses, 1);
	if (part)
		STAT_ADD(c, q->tier, parts, 1);
	return f;
}

/* The slow path: read @q, whose pieces are @pr->p, waits for the blocks it misses. Each missing
 * piece joins its block's flight (started if there is none); the read is answered by the last
 * flight's completion, or here if none is left to wait for. */
static void park(struct cache *c, const struct rq *q, struct pread *pr)
{
	struct flight *go = NULL, **go_tail = &go;
	bool finished, pump = false;

	*pr = (struct pread){.c = c, .obj = q->o->id, .reply = q->reply, .req = q->req,
			     .off = q->off, .len = q->len, .first = q->first, .n = q->n,
			     .pending = 1 /* held here until every piece is registered */};
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < q->n; i++) {
		struct piece *p = &pr->p[i];
		struct flight *f;

		if (p->pin != PIN_NONE)
			continue;
		p->pr = pr;
		f = piece_flight(c, q, p, q->first + i, &go_tail, &pump, &pr->err);
		if (!f)
			continue;
		p->wait = f;
		p->wnext = f->waiters;
		f->waiters = p;
		pr->pending++;
	}
	finished = --pr->pending == 0;
	if (!finished && q->ticket) {
		unsigned b = ticket_bucket(q->ticket);

		pr->ticket = q->ticket;
		pr->hnext = c->parked[b];
		c->parked[b] = pr;
	}
	pthread_mutex_unlock(&c->lock);

	start_list(c, go);
	if (pump)
		mem_pump(c, NULL, false);
	if (finished) {
		answer(c, pr->p, pr->n, pr->first, pr->off, pr->len, pr->err, pr->reply, pr->req);
		free(pr);
	}
}

/* cache_read without the plug. */
static void read_blocks(struct cache *c, const struct cache_obj *o, struct cache_stream *s,
			uint64_t off, size_t len, uint64_t ticket, cache_reply_fn reply, void *req)
{
	struct piece stack_p[STACK_PIECES], *p = stack_p;
	struct pread *pr = NULL;
	uint64_t ra_from = 1, ra_to = 0;
	struct rq q = {.o = o, .off = off, .len = len, .ticket = ticket, .reply = reply,
		       .req = req};

	if (off >= o->size || len == 0) {
		reply(req, NULL, 0, 0);
		return;
	}
	if (q.len > o->size - off)
		q.len = (size_t)(o->size - off);
	q.first = off >> c->shift;
	q.last = (off + q.len - 1) >> c->shift;
	if (q.last - q.first >= MAX_READ_BLOCKS) {
		reply(req, NULL, 0, -EINVAL);
		return;
	}
	q.n = (uint32_t)(q.last - q.first + 1);
	q.now = now_ns(c);
	q.tier = cache_route(c, o);
	if (s)
		q.parts = stream_step(c, s, &q, &ra_from, &ra_to);
	/* the pieces: on the stack while every block may be resident, else in a heap pread */
	if (q.n > STACK_PIECES) {
		pr = malloc(sizeof(*pr) + q.n * sizeof(struct piece));
		if (!pr) {
			reply(req, NULL, 0, -ENOMEM);
			return;
		}
		p = pr->p;
	}
	if (!look_all(c, &q, p)) {
		answer(c, p, q.n, q.first, q.off, q.len, 0, reply, req);
		free(pr);
	} else if (!pr && !(pr = malloc(sizeof(*pr) + q.n * sizeof(struct piece)))) {
		answer(c, p, q.n, q.first, q.off, q.len, -ENOMEM, reply, req);
	} else {
		if (p != pr->p)
			memcpy(pr->p, p, q.n * sizeof(struct piece));
		park(c, &q, pr);
	}
	readahead(c, o, ra_from, ra_to, q.tier, q.now);
}

void cache_read(struct cache *c, const struct cache_obj *o, struct cache_stream *s, uint64_t off,
		size_t len, uint64_t ticket, cache_reply_fn reply, void *req)
{
	/* the read's blocks and its readahead reach the store together (env->plug, around the
	 * chain's own plugs): consecutive blocks can go out as one request */
	if (c->env.plug)
		c->env.plug(c->env.arg);
	read_blocks(c, o, s, off, len, ticket, reply, req);
	if (c->env.unplug)
		c->env.unplug(c->env.arg);
}

uint64_t cache_ticket(struct cache *c)
{
	return __atomic_add_fetch(&c->next_ticket, 1, __ATOMIC_RELAXED);
}

/*
 * Take piece @p of a cancelled read off its flight's waiters (c->lock held). If nobody else
 * waits for that flight and it has not started (it waits in its gate, or for memory), it
 * never will: take it out of the table too. @return that flight, or NULL.
 */
static struct flight *unwait(struct cache *c, struct piece *p)
{
	struct flight *f = p->wait, **qp, *prev = NULL;
	struct piece **pp;
	bool mine = false;

	if (p->pin != PIN_NONE || !f)
		return NULL; /* arrived (pinned) or never registered */
	for (pp = &f->waiters; *pp; pp = &(*pp)->wnext) {
		if (*pp == p) {
			*pp = p->wnext;
			mine = true;
			break;
		}
	}
	if (!mine || f->waiters)
		return NULL;
	if (f->queued) {
		/* a gate that let it through already is about to start it: leave it be */
		if (!gate_cancel(c->tier[f->tier].gate, &f->gw))
			return NULL;
		f->queued = false;
	} else if (f->mwait) {
		for (qp = &c->mhead; *qp != f; qp = &(*qp)->qnext)
			prev = *qp;
		mem_unlink(c, f, prev);
		STAT_SUB(c, f->tier, inflight, 1); /* start_list counted it */
	} else {
		return NULL;
	}
	flight_unlink(c, f);
	return f;
}

void cache_cancel(struct cache *c, uint64_t ticket)
{
	struct flight *drop = NULL;
	struct pread *pr;

	if (!ticket)
		return;
	pthread_mutex_lock(&c->lock);
	for (pr = c->parked[ticket_bucket(ticket)]; pr; pr = pr->hnext)
		if (pr->ticket == ticket)
			break;
	if (!pr) {
		pthread_mutex_unlock(&c->lock);
		return; /* answered already, or being answered */
	}
	unpark(c, pr);
	for (uint32_t i = 0; i < pr->n; i++) {
		struct flight *f = unwait(c, &pr->p[i]);

		if (f) {
			f->qnext = drop;
			drop = f;
		}
	}
	pr->pending = 0;
	pthread_mutex_unlock(&c->lock);

	answer(c, pr->p, pr->n, pr->first, pr->off, pr->len, -EINTR, pr->reply, pr->req);
	free(pr);
	while (drop) {
		struct flight *f = drop;

		drop = f->qnext;
		/* a dropped lagging flight had a place among the running ones: pass it on */
		if (f->gated)
			gate_done(c->tier[f->tier].gate);
		c->env.release(f->ctx);
		free(f);
	}
}

static void tier_done(struct mem_tier *t)
{
	ring_free(t->ring);
	t->ring = NULL;
}

/* Segments: a segment holds at least 8 blocks when the tier is big enough; 4..16 of them. */
static uint32_t tier_nseg(uint64_t size, uint32_t block)
{
	uint64_t nseg = size / block / 8;

	if (nseg < 4)
		nseg = 4;
	if (nseg > 16)
		nseg = 16;
	return (uint32_t)nseg;
}

int cache_tier_check(uint64_t size, uint32_t block_size)
{
	if (!block_size || (block_size & (block_size - 1)))
		return -EINVAL;
	return ring_geometry(size, tier_nseg(size, block_size), block_size);
}

static int tier_ring(uint64_t size, uint32_t block, uint64_t ttl_s, bool prefault,
		     struct ring **ret)
{
	int r = ring_new(size, tier_nseg(size, block), block, ttl_s * 1000000000ULL, ret);

	if (r == 0 && prefault)
		ring_prefault(*ret);
	return r;
}

/*
 * The memory tiers of @cfg, in lookup order: every field but the rings and the counters. @gate
 * is the lagging tier's. Adding a memory tier is adding its entry here (and its name above);
 * a tier below memory is a struct tier in the chain instead (tier.h).
 */
static void tiers_of(const struct cache_cfg *cfg, struct gate *gate, struct mem_tier *ret)
{
	ret[CACHE_HOT] = (struct mem_tier){
		.on = true,
		.size = cfg->hot_size,
		.ttl_s = cfg->hot_ttl,
	};
	ret[CACHE_LAG] = (struct mem_tier){
		.on = cfg->lagging,
		.size = cfg->lagging ? cfg->lagging_size : 0,
		.ttl_s = cfg->lagging_ttl,
		.gate = gate, /* used only when the tier is on (cache_route) */
		.rate = cfg->lagging_rate,
		.admits = admits_old,
	};
	for (int t = 0; t < CACHE_NTIERS; t++)
		ret[t].name = tier_names[t];
}

/* Are @cfg's sizes and chain possible? @return 0, -EINVAL or -EFBIG. */
static int cfg_check(const struct cache_cfg *cfg)
{
	struct mem_tier tiers[CACHE_NTIERS];
	int r;

	if (!cfg->block_size || (cfg->block_size & (cfg->block_size - 1)))
		return -EINVAL;
	if (!cfg->nchain || cfg->nchain > TIER_CHAIN_MAX || !cfg->chain[cfg->nchain - 1].ops->get)
		return -EINVAL; /* the store, last, must read */
	tiers_of(cfg, NULL, tiers);
	for (int t = 0; t < CACHE_NTIERS; t++) {
		r = tiers[t].on ? cache_tier_check(tiers[t].size, cfg->block_size) : 0;
		if (r < 0)
			return r;
	}
	return 0;
}

int cache_new(const struct cache_cfg *cfg, const struct cache_env *env, struct cache **ret)
{
	struct cache *c;
	int r = cfg_check(cfg);

	if (r < 0)
		return r;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->cfg.chain = NULL; /* copied into c->chain */
	c->env = *env;
	c->shift = (uint32_t)__builtin_ctz(cfg->block_size);
	pthread_mutex_init(&c->lock, NULL);
	chain_init(&c->chain, cfg->chain, cfg->nchain, env);
	rl_init(&c->rl, cfg->lagging_rate, cfg->lagging_burst, cfg->lagging_ops, now_ns(c));
	/* no more lagging fetches at once than half the blocks the lagging ring holds: the rest
	 * would bounce */
	gate_init(&c->lag_gate, &gate_rl_ops, &c->rl,
		  cfg->lagging ? cfg->lagging_size / cfg->block_size / 2 : 1, env);
	tiers_of(cfg, &c->lag_gate, c->tier);
	for (int t = 0; t < CACHE_NTIERS; t++) {
		struct mem_tier *tr = &c->tier[t];

		tr->st.size = tr->size;
		if (!tr->on)
			continue;
		r = tier_ring(tr->size, cfg->block_size, tr->ttl_s, cfg->prefault, &tr->ring);
		if (r < 0)
			goto fail;
	}
	*ret = c;
	return 0;
fail:
	cache_free(c);
	return r;
}

struct publisher;
static void pub_unlink(struct cache *c, struct publisher *p);

/* Flights that never started (in the lagging gate, or waiting for memory) when the cache goes:
 * their readers are answered -ESHUTDOWN. The queues are detached first so that completing one
 * does not start the next. */
static void fail_unstarted(struct cache *c)
{
	struct gate_waiter *q = gate_flush(&c->lag_gate);
	struct flight *m = c->mhead;

	c->mhead = c->mtail = NULL;
	c->mwaiting = 0;
	while (q) {
		struct flight *f = (struct flight *)((char *)q - offsetof(struct flight, gw));

		q = q->next;
		f->queued = false;
		STAT_ADD(c, f->tier, inflight, 1); /* flight_done counts it down */
		flight_done(f, -ESHUTDOWN);
	}
	/* start_list counted these in flight */
	while (m) {
		struct flight *f = m;

		m = f->qnext;
		f->mwait = false;
		flight_done(f, -ESHUTDOWN);
	}
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	fail_unstarted(c);
	/* the timers of publishers still at work died with the I/O loop */
	while (c->pubs)
		pub_unlink(c, c->pubs);
	for (int t = 0; t < CACHE_NTIERS; t++)
		tier_done(&c->tier[t]);
	gate_done_all(&c->lag_gate);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

struct limits {
	uint64_t rate, burst, ops, now;
};

static void set_limits(void *src, void *arg)
{
	const struct limits *l = arg;

	rl_set(src, l->rate, l->burst, l->ops, l->now);
}

int cache_set_limits(struct cache *c, uint64_t rate, uint64_t burst, uint64_t ops)
{
	struct limits l = {rate, burst, ops, now_ns(c)};

	__atomic_store_n(&c->tier[CACHE_LAG].rate, rate, __ATOMIC_RELAXED);
	gate_update(&c->lag_gate, set_limits, &l);
	return 0;
}

int cache_set_hot_ttl(struct cache *c, uint64_t hot_ttl)
{
	if (hot_ttl == 0)
		return -EINVAL;
	__atomic_store_n(&c->tier[CACHE_HOT].ttl_s, hot_ttl, __ATOMIC_RELAXED);
	ring_set_ttl(c->tier[CACHE_HOT].ring, hot_ttl * 1000000000ULL);
	return 0;
}

/*
 * Residency walks the rings' index tables for the object's blocks (ring_each_block), never the
 * object's block numbers: a sparse 4 TiB object with 64 KiB blocks has 2^26 of those, and
 * asking each ring for each one cost seconds of CPU. What it finds is at most every block the
 * rings hold, so the cost and the memory are bounded by the tiers' sizes. Each found block is
 * packed with its tier in the low TIER_BITS (the first tier sorts first), sorted, and
 * de-duplicated; a block in two tiers counts in the first, as a lookup would find it there.
 */
#define TIER_BITS 2
_Static_assert(CACHE_NTIERS <= 1 << TIER_BITS, "TIER_BITS too small for the tiers");

struct resident {
	uint64_t *v;	 /* blk << TIER_BITS | tier */
	size_t n, cap;
	unsigned tier;	 /* the tier being walked */
	bool oom;
};

static void resident_add(void *arg, uint64_t blk)
{
	struct resident *rs = arg;

	if (rs->oom || (blk & PART_TAG))
		return; /* a part is not the block */
	if (rs->n == rs->cap) {
		size_t cap = rs->cap ? 2 * rs->cap : 64;
		uint64_t *v = realloc(rs->v, cap * sizeof(*v));

		if (!v) {
			rs->oom = true;
			return;
		}
		rs->v = v;
		rs->cap = cap;
	}
	rs->v[rs->n++] = blk << TIER_BITS | rs->tier;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The resident blocks of @o, sorted by block, one entry per block (the first tier wins).
 * @return 0 and *rs, or -ENOMEM. */
static int resident_collect(struct cache *c, const struct cache_obj *o, struct resident *rs)
{
	uint64_t now = now_ns(c);
	size_t w = 0;

	memset(rs, 0, sizeof(*rs));
	for (unsigned t = 0; t < CACHE_NTIERS; t++) {
		if (!c->tier[t].ring)
			continue;
		rs->tier = t;
		ring_each_block(c->tier[t].ring, o->id, now, resident_add, rs);
	}
	if (rs->oom) {
		free(rs->v);
		rs->v = NULL;
		return -ENOMEM;
	}
	if (rs->n)
		qsort(rs->v, rs->n, sizeof(*rs->v), cmp_u64);
	for (size_t i = 0; i < rs->n; i++)
		if (w == 0 || rs->v[i] >> TIER_BITS != rs->v[w - 1] >> TIER_BITS)
			rs->v[w++] = rs->v[i];
	rs->n = w;
	return 0;
}

size_t cache_residency(struct cache *c, const struct cache_obj *o, char *buf, size_t len)
{
	uint64_t nblocks = (o->size + c->cfg.block_size - 1) >> c->shift;
	uint64_t shown = len ? (nblocks < len - 1 ? nblocks : len - 1) : 0;
	struct resident rs;

	if (!len)
		return (size_t)nblocks;
	memset(buf, '-', (size_t)shown);
	buf[shown] = '\0';
	if (resident_collect(c, o, &rs) == 0) {
		for (size_t i = 0; i < rs.n; i++)
			if (rs.v[i] >> TIER_BITS < shown)
				buf[rs.v[i] >> TIER_BITS] =
					tier_names[rs.v[i] & ((1 << TIER_BITS) - 1)][0];
		free(rs.v);
	}
	return (size_t)nblocks;
}

/* snprintf at @buf + @w, as far as @len allows. @return @w plus the length it needed. */
static size_t text_put(char *buf, size_t len, size_t w, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static size_t text_put(char *buf, size_t len, size_t w, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(w < len ? buf + w : NULL, w < len ? len - w : 0, fmt, ap);
	va_end(ap);
	return n > 0 ? w + (size_t)n : w;
}

/* A range of blocks resident in one tier. */
struct brange {
	uint64_t first, last;
	unsigned tier;
};

int cache_residency_text(struct cache *c, const struct cache_obj *o, size_t max_ranges,
			 char *buf, size_t len)
{
	struct resident rs;
	struct brange *rg;
	size_t nr = 0, w = 0;
	bool any = false;
	int r;

	r = resident_collect(c, o, &rs);
	if (r < 0)
		return r;
	rg = malloc((rs.n ? rs.n : 1) * sizeof(*rg));
	if (!rg) {
		free(rs.v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rs.n; i++) {
		uint64_t blk = rs.v[i] >> TIER_BITS;
		unsigned t = (unsigned)(rs.v[i] & ((1 << TIER_BITS) - 1));

		if (nr && rg[nr - 1].tier == t && rg[nr - 1].last + 1 == blk)
			rg[nr - 1].last = blk;
		else
			rg[nr++] = (struct brange){blk, blk, t};
	}
	free(rs.v);

	/* "hot=0-15,20 lagging=16-19 (+3 more ranges)": the first max_ranges ranges in block
	 * order, shown tier by tier */
	if (len)
		buf[0] = '\0';
	for (unsigned t = 0; t < CACHE_NTIERS; t++) {
		bool first = true;

		for (size_t i = 0; i < nr && i < max_ranges; i++) {
			if (rg[i].tier != t)
				continue;
			w = text_put(buf, len, w, "%s%s%s", first ? (any ? " " : "") : ",",
				     first ? tier_names[t] : "", first ? "=" : "");
			if (rg[i].first == rg[i].last)
				w = text_put(buf, len, w, "%llu", (unsigned long long)rg[i].first);
			else
				w = text_put(buf, len, w, "%llu-%llu",
					     (unsigned long long)rg[i].first,
					     (unsigned long long)rg[i].last);
			first = false;
			any = true;
		}
	}
	if (nr == 0)
		w = text_put(buf, len, w, "none");
	else if (nr > max_ranges)
		w = text_put(buf, len, w, "%s(+%zu more ranges)", any ? " " : "", nr - max_ranges);
	free(rg);
	return w > INT_MAX ? -E2BIG : (int)w;
}

/* ---- write-through ------------------------------------------------------------------------- */

int cache_put(struct cache *c, struct cache_key key, const void *src, uint32_t len)
{
	struct ring *ring = c->tier[CACHE_HOT].ring;
	struct ring_ref ref;
	int r;

	if (len > c->cfg.block_size)
		return -EINVAL;
	r = ring_reserve(ring, key, len, now_ns(c), &ref);
	if (r < 0)
		return r;
	memcpy(ref.data, src, len);
	ring_commit(ring, &ref);
	ring_unpin(ring, &ref);
	mem_wake(c);
	STAT_ADD(c, CACHE_HOT, written, 1);
	return 0;
}

uint64_t cache_rekey(struct cache *c, struct cache_oid from, struct cache_oid to)
{
	uint64_t n = 0;

	for (int t = 0; t < CACHE_NTIERS; t++)
		if (c->tier[t].ring)
			n += ring_rekey(c->tier[t].ring, from, to);
	return n;
}

void cache_drop(struct cache *c, struct cache_oid oid)
{
	for (int t = 0; t < CACHE_NTIERS; t++)
		if (c->tier[t].ring)
			ring_drop(c->tier[t].ring, oid);
	chain_drop(&c->chain, oid);
}

/*
 * A written object's blocks being offered to the chain's tiers: the blocks the hot tier held
 * when the store acknowledged it, one at a time, each while every tier has room for it, from a
 * timer of env->defer when one has not. A tier that stays full for PUB_PATIENCE_NS ends it:
 * what is not offered is fetched by its first reader, as any block.
 */
#define PUB_RETRY_NS    (5 * 1000000ULL)
#define PUB_PATIENCE_NS (30 * 1000000000ULL)

struct publisher {
	struct publisher *next;   /* c->pubs; c->lock */
	struct cache *c;
	struct cache_obj o;       /* id, size, mtime; ctx unused */
	uint64_t *blk;            /* the blocks to offer, in order */
	size_t n, i;              /* how many, and the next one */
	uint64_t stuck_since;     /* when it found no room, 0 while it moves */
};

static void pub_unlink(struct cache *c, struct publisher *p)
{
	struct publisher **pp;

	pthread_mutex_lock(&c->lock);
	for (pp = &c->pubs; *pp && *pp != p; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = p->next;
	pthread_mutex_unlock(&c->lock);
	free(p->blk);
	free(p);
}

/* Offer the next block of @p if the tiers have room. @return false when it must wait. */
static bool pub_one(struct publisher *p)
{
	struct cache *c = p->c;
	struct cache_key k = {p->o.id, p->blk[p->i]};
	struct ring *ring = c->tier[CACHE_HOT].ring;
	struct ring_ref ref;

	if (ring_lookup(ring, k, now_ns(c), &ref) < 0) {
		p->i++; /* evicted meanwhile */
		return true;
	}
	if (chain_room(&c->chain) < ref.len) {
		ring_unpin(ring, &ref);
		return false;
	}
	chain_put_written(&c->chain, &(struct tier_io){.key = k, .off = k.blk << c->shift,
						       .len = ref.len, .dst = ref.data,
						       .written = true});
	ring_unpin(ring, &ref);
	mem_wake(c);
	STAT_ADD(c, CACHE_HOT, published, 1);
	p->i++;
	return true;
}

static void pub_step(void *arg)
{
	struct publisher *p = arg;
	uint64_t now;

	while (p->i < p->n && pub_one(p))
		p->stuck_since = 0;
	now = now_ns(p->c);
	if (p->i < p->n && !p->stuck_since)
		p->stuck_since = now;
	if (p->i >= p->n || now - p->stuck_since > PUB_PATIENCE_NS ||
	    p->c->env.defer(p->c->env.arg, PUB_RETRY_NS, pub_step, p) < 0)
		pub_unlink(p->c, p);
}

static void pub_collect(void *arg, uint64_t blk)
{
	struct resident *rs = arg;

	rs->tier = CACHE_HOT;
	resident_add(rs, blk);
}

void cache_publish(struct cache *c, const struct cache_obj *o)
{
	struct publisher *p;
	struct resident rs = {0};

	if (c->chain.n < 2)
		return; /* the store alone: nothing to offer */
	ring_each_block(c->tier[CACHE_HOT].ring, o->id, now_ns(c), pub_collect, &rs);
	p = calloc(1, sizeof(*p));
	if (rs.oom || !rs.n || !p) {
		free(rs.v);
		free(p);
		return;
	}
	qsort(rs.v, rs.n, sizeof(*rs.v), cmp_u64);
	for (size_t i = 0; i < rs.n; i++)
		rs.v[i] >>= TIER_BITS;
	*p = (struct publisher){.c = c, .o = *o, .blk = rs.v, .n = rs.n};
	p->o.ctx = NULL;
	pthread_mutex_lock(&c->lock);
	p->next = c->pubs;
	c->pubs = p;
	pthread_mutex_unlock(&c->lock);
	pub_step(p);
}

void cache_get_stats(struct cache *c, struct cache_stats *ret)
{
	uint64_t now = now_ns(c);

	for (int t = 0; t < CACHE_NTIERS; t++) {
		struct cache_tier_stats *s = &ret->tier[t];
		struct ring_stats rs = {0};
		uint64_t *dst = (uint64_t *)s, *src = (uint64_t *)&c->tier[t].st;

		/* every field before 'tokens' is a uint64_t counter */
		for (size_t i = 0; i < offsetof(struct cache_tier_stats, tokens) / sizeof(uint64_t);
		     i++)
			dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
		if (c->tier[t].ring)
			ring_get_stats(c->tier[t].ring, now, &rs);
		s->rotations = rs.rotations;
		s->blocks = rs.blocks;
		s->bytes = rs.bytes;
		s->mem_queued = 0;
		s->tokens = 0;
		s->limited = c->tier[t].gate != NULL;
		s->rate = c->tier[t].ring ? __atomic_load_n(&c->tier[t].rate, __ATOMIC_RELAXED) : 0;
		if (c->tier[t].gate) {
			struct gate_stats gs;

			gate_get_stats(c->tier[t].gate, &gs);
			s->throttle_waits = gs.waits;
			s->throttled_ns = gs.waited_ns;
			s->queued = gs.queued;
			s->tokens = gs.tokens;
		}
	}
	pthread_mutex_lock(&c->lock);
	for (struct flight *f = c->mhead; f; f = f->qnext)
		ret->tier[f->tier].mem_queued++;
	ret->bounce_bytes = c->bounce_bytes;
	ret->bounce_peak = c->bounce_peak;
	pthread_mutex_unlock(&c->lock);
	ret->bounce_limit = c->cfg.bounce_limit;
}

uint32_t cache_block_size(const struct cache *c)
{
	return c->cfg.block_size;
}
