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
 * The tiers are a list, c->tier[] (struct tier: name, ring, size, TTL, limiter, admission
 * rule), walked in order for lookups; adding one means adding its entry in tiers_of().
 *
 * A random read of a lagging object (one that does not continue its stream), or of a hot one
 * larger than cfg.hot_parts_above, fetches parts of blocks instead: for each block it touches,
 * the 64 KiB-aligned range around what it reads, up to 256 KiB, stored in its tier's ring
 * under a key of its own (see part_of). A piece then carries the offset its bytes start at in
 * the block; everything else (single-flight, pins, cancel, the limiter's charge) works per
 * part as it does per block.
 *
 * A flight is one fetch of one block. It reserves its bytes in the ring of the tier chosen by
 * the object's age (cache_route; ring_reserve pins them; readers cannot see them until commit) and the
 * fetcher writes straight into them, so a block is copied once from the network into the ring
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
 * The lower tier. Behind the memory tiers there may be one more, the disk tier, reached only
 * through three optional env callbacks, so cache/ stays free of its policy. A flight asks
 * env->lower_get before env->fetch, into the same slot. lower_get is asynchronous like fetch:
 * it starts a read (the disk tier's reader threads do the pread, so the thread that starts
 * the flight, a FUSE worker or the backend's I/O thread, never waits for the disk, and a
 * readahead window's blocks are read in parallel) and calls lower_done once: a hit completes
 * the flight and the store sees nothing; a miss (a CRC failure, a read error, a rotation)
 * goes on to env->fetch from that thread. A miss the lower tier knows at once (not in its
 * index) is answered by lower_get's return value, with no thread hop. A flight fetched from
 * the store offers its bytes to env->lower_put in flight_done, before readers can see them
 * (the lower tier copies them into its write-behind queue; it never blocks). A lagging block
 * that env->lower_has says is there skips the token bucket: the limiter guards the store,
 * and is charged for bytes the store sends. Should lower_get then miss after all, the store
 * fetch is charged after the fact (rl_charge: it goes at once, the debt delays later lagging
 * fetches) and counted (lower_fallbacks).
 *
 *   flight_fetch ─► lower_get ─► (reader thread) lower_done ── hit ──► flight_done (no tokens)
 *         │                                        └─ miss ─► store_fetch (charged if it
 *         └─ miss known at once ─► store_fetch ─► env->fetch ─► flight_done  skipped them)
 *                                                                 └─► lower_put (copy, background)
 *
 * Hot flights start at once. Lagging flights enter a FIFO and start when the token bucket
 * says so; when it says "wait", a timer is armed through env->defer and the queue is drained
 * when it fires. No thread ever sleeps on the limiter.
 *
 * Completion (on the fetcher's thread): commit the slot, then under c->lock take the flight
 * out of the table and hand each waiter a pin on the bytes (or the error). A read whose last
 * piece arrived is answered after the lock is dropped, then its pins are released. A failed
 * fetch leaves nothing behind: the slot is aborted, the table entry removed, every waiter
 * answered with the error, so the next read retries.
 *
 * Locking: c->lock guards the flight table, the waiter lists, the throttle queue, the memory
 * queue and bounce accounting, the limiter and every read's pending count. Each ring has its
 * own lock, taken inside c->lock or alone, never the other way round; so is the lower tier's
 * (env->lower_has runs under c->lock; lower_get and lower_put with no lock, and lower_get's
 * done with none either). Replies and fetch
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
	struct flight *qnext;   /* throttle queue link; c->lock */
	struct cache *c;
	struct cache_key key;
	void *ctx;              /* the object, held with env->hold */
	uint64_t off;           /* byte offset of the block in the object */
	uint32_t len;           /* block length (short at end of object) */
	uint8_t tier;           /* index in c->tier[]: where it is stored and which queue */
	bool have_ref;          /* ref is a ring reservation */
	struct ring_ref ref;    /* the reserved slot */
	struct bounce *bounce;  /* or the bounce buffer */
	struct piece *waiters;  /* pieces of parked reads waiting on this block; c->lock */
	uint64_t queued_ns;     /* when it entered the throttle queue, 0 if it did not */
	bool queued;            /* in the throttle queue now; c->lock */
	bool running;           /* let out of the throttle queue: counted in lag_running */
	bool mwait;             /* in the memory queue now; c->lock */
	bool claimed;           /* has its memory (slot or bounce charge): in mem_running */
	bool bounce_charged;    /* claimed a bounce buffer of len bytes, not yet mapped */
	bool forced;            /* that bounce buffer is over the limit (see mem_take) */
	bool from_lower;        /* filled by env->lower_get, not fetched from the store */
	bool lower_free;        /* skipped the limiter: env->lower_has said it holds the block */
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
 * One tier of the list c->tier[], in lookup order (CACHE_HOT first). A block is looked up in
 * each tier in turn; a miss is fetched into the tier cache_route() picks: the last one, from
 * the end of the list, that is on and whose admission rule takes the object (the first tier
 * takes everything). A tier with a limiter sends its misses through the throttle queue and
 * fetches them at background priority. All fields are set in cache_new and constant after,
 * except where said.
 */
struct tier {
	const char *name;           /* "hot", "lagging": stats labels, residency text */
	bool on;                    /* configured: it has a ring */
	struct ring *ring;          /* NULL when the tier is off */
	uint64_t size;              /* bytes */
	uint64_t ttl_s;             /* block lifetime; the first tier's changes live (atomic) */
	struct rl *rl;              /* its rate limiter (guarded by c->lock), or NULL */
	uint64_t rate;              /* the limiter's rate, bytes/s, 0 = unlimited (atomic) */
	/* Does a miss of @o belong here? NULL: every object (the first tier). */
	bool (*admits)(struct cache *c, const struct cache_obj *o);
	struct cache_tier_stats st; /* counters only, updated with relaxed atomics */
};

struct cache {
	struct cache_cfg cfg;    /* as given; the live settings are kept in the tiers */
	struct cache_env env;
	uint32_t shift;          /* log2(block_size) */
	struct tier tier[CACHE_NTIERS];

	pthread_mutex_t lock;
	struct flight *table[FLIGHT_BUCKETS];   /* c->lock */
	struct pread *parked[FLIGHT_BUCKETS];   /* waiting reads with a ticket, by ticket; c->lock */
	uint64_t next_ticket;                   /* atomic */
	struct flight *qhead, *qtail;           /* lagging flights waiting for tokens; c->lock */
	struct rl rl;                           /* c->lock */
	uint64_t timer_due;      /* earliest armed drain timer, UINT64_MAX if none; c->lock */
	uint64_t lag_inflight_max; /* lagging fetches at once: half the blocks its ring holds */
	uint64_t lag_running;    /* lagging flights let out of the queue, not yet done; c->lock */
	struct flight *mhead, *mtail; /* flights waiting for memory, FIFO by qnext; c->lock */
	unsigned mwaiting;       /* flights in the memory queue; written under c->lock, read
				  * without it (seq_cst) by whoever frees memory */
	unsigned mem_running;    /* flights holding memory (slot or bounce), not done; c->lock */
	uint64_t bounce_bytes;   /* bytes of bounce buffers charged and not unmapped; c->lock */
	uint64_t bounce_peak;    /* the most bounce_bytes ever was; c->lock */
	uint64_t forced_bytes;   /* the part of bounce_bytes taken over the limit; c->lock */
};

/* Timer token: which cache and when it was meant to fire. */
struct drain_timer {
	struct cache *c;
	uint64_t due;
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
		if (p[i].pin == PIN_RING)
			STAT_ADD(c, p[i].tier, bytes_served, take);
		pos += take;
		left -= take;
	}
	reply(req, iov, (int)n, 0);
	if (iov != stack_iov)
		free(iov);
out:
	for (uint32_t i = 0; i < n; i++)
		piece_release(c, &p[i]);
}

static void flight_done(void *arg, int err);

/*
 * Find memory for flight @f (c->lock held): a slot in its ring, else a bounce buffer if the
 * cap allows it (or @force: nothing else holds memory, see the essay). Under a cap, a flight
 * nobody waits for yet (readahead) takes no bounce buffer: its bytes would be dropped unread.
 * The bounce buffer is only charged here and mapped by flight_fetch, outside the lock.
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
		 * lagging slot (lag_running) that a flight readers wait for needs.
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

static void flight_done(void *arg, int err);

/* Fetch from the store into the flight's memory. No lock held. A flight that skipped the
 * limiter because the lower tier said it held the block, which it then did not serve, is
 * charged now, after the fact: the fetch goes at once (its readers waited for the disk
 * already) and the debt makes later lagging fetches wait, so the store sees no more than the
 * rate over time. */
static void store_fetch(struct flight *f)
{
	struct cache *c = f->c;
	struct rl *rl = c->tier[f->tier].rl;
	int r;

	if (f->lower_free) {
		STAT_ADD(c, f->tier, lower_fallbacks, 1);
		pthread_mutex_lock(&c->lock);
		rl_charge(rl, f->len, now_ns(c));
		pthread_mutex_unlock(&c->lock);
	}
	STAT_ADD(c, f->tier, fetches, 1);
	r = c->env.fetch(c->env.arg, f->ctx, f->off, f->len,
			 f->have_ref ? f->ref.data : f->bounce->data, rl != NULL, flight_done, f);
	if (r < 0)
		flight_done(f, r);
}

/* env->lower_get's answer: the block is in the flight's memory, checked, or it goes to the
 * store. Any thread, no lock held. */
static void lower_done(void *arg, int err)
{
	struct flight *f = arg;

	if (err) {
		store_fetch(f);
		return;
	}
	f->from_lower = true;
	STAT_ADD(f->c, f->tier, lower_hits, 1);
	flight_done(f, 0);
}

/* Fetch into the memory claim() found: from the lower tier when there is one, else (or on
 * its miss) from the store. No lock held. */
static void flight_fetch(struct flight *f)
{
	struct cache *c = f->c;
	void *dst;

	if (f->have_ref) {
		dst = f->ref.data;
	} else {
		f->bounce = bounce_new(f->len);
		if (!f->bounce) {
			flight_done(f, -ENOMEM);
			return;
		}
		f->bounce->forced = f->forced;
		dst = f->bounce->data;
	}
	f->bounce_charged = false; /* the buffer, once mapped, carries the charge */
	if (c->env.lower_get && !is_part(f->key) &&
	    c->env.lower_get(c->env.arg, f->key, f->len, dst, lower_done, f) == 0)
		return; /* lower_done goes on, on the lower tier's thread */
	store_fetch(f);
}

/* The thread pumping the memory queue now, and whether it should look again: a fetch that
 * fails (or completes) inside env->fetch pumps again from within; that nested pump only asks
 * the outer one to repeat, so the stack does not grow with the queue. */
static _Thread_local struct cache *pumping;
static _Thread_local bool repump;

/*
 * Queue @add (if not NULL) for memory, count @finished (a flight done that held memory) out of
 * mem_running, and start every queued flight that can have memory now. No lock held.
 */
static void mem_pump(struct cache *c, struct flight *add, bool finished)
{
	struct flight *go;

	pthread_mutex_lock(&c->lock);
	if (add) {
		add->mwait = true;
		if (c->mtail)
			c->mtail->qnext = add;
		else
			c->mhead = add;
		c->mtail = add;
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
	if (add && add->mwait)
		STAT_ADD(c, add->tier, mem_waits, 1);
	pthread_mutex_unlock(&c->lock);
	if (!go)
		return;
	pumping = c;
	for (;;) {
		repump = false;
		while (go) {
			struct flight *f = go;

			go = f->qnext;
			f->qnext = NULL;
			flight_fetch(f);
		}
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

/* Start a flight: it gets its memory now or waits for it in the memory queue. No lock held. */
static void flight_start(struct flight *f)
{
	STAT_ADD(f->c, f->tier, inflight, 1); /* flight_done counts it down, on every path */
	mem_pump(f->c, f, false);
}

static void start_list(struct flight *list)
{
	while (list) {
		struct flight *next = list->qnext;

		list->qnext = NULL;
		flight_start(list);
		list = next;
	}
}

static void drain_fire(void *arg);

/* Pop every queued lagging flight the limiter lets through now; arm a timer for the rest.
 * Called with c->lock held; returns the flights to start once it is dropped. */
static struct flight *drain(struct cache *c, uint64_t now)
{
	struct flight *go = NULL, **tail = &go;

	while (c->qhead) {
		struct flight *f = c->qhead;
		uint64_t wait;

		/* no more fetches at once than the tier can hold: the rest would bounce; a
		 * completion drains again */
		if (c->lag_running >= c->lag_inflight_max)
			break;
		wait = rl_take(c->tier[f->tier].rl, f->len, now);

		if (wait) {
			uint64_t due = now + wait;
			struct drain_timer *t;

			if (due >= c->timer_due)
				break; /* an earlier timer will drain */
			t = malloc(sizeof(*t));
			if (!t)
				break; /* the next completion or read drains */
			t->c = c;
			t->due = due;
			if (c->env.defer(c->env.arg, wait, drain_fire, t) < 0) {
				free(t);
				break;
			}
			c->timer_due = due;
			break;
		}
		c->qhead = f->qnext;
		if (!c->qhead)
			c->qtail = NULL;
		f->qnext = NULL;
		f->queued = false;
		f->running = true;
		c->lag_running++;
		STAT_SUB(c, f->tier, queued, 1);
		if (f->queued_ns && now > f->queued_ns) {
			STAT_ADD(c, f->tier, throttle_waits, 1);
			STAT_ADD(c, f->tier, throttled_ns, now - f->queued_ns);
		}
		*tail = f;
		tail = &f->qnext;
	}
	return go;
}

static void drain_fire(void *arg)
{
	struct drain_timer *t = arg;
	struct cache *c = t->c;
	struct flight *go;

	pthread_mutex_lock(&c->lock);
	if (c->timer_due == t->due)
		c->timer_due = UINT64_MAX;
	go = drain(c, now_ns(c));
	pthread_mutex_unlock(&c->lock);
	free(t);
	start_list(go);
}

/*
 * Create a flight for @len bytes at @off of @o, stored under @k: a whole block, or a part of
 * one (part_of) (c->lock held). Flights of a tier without a limiter go
 * on @go to be started by the caller; the others join the throttle queue, and whatever the
 * queue lets through goes on @go as well. @return the flight, or NULL if out of memory.
 */
static struct flight *flight_new(struct cache *c, const struct cache_obj *o, struct cache_key k,
				 uint64_t off, uint32_t len, enum cache_tier tier, uint64_t now,
				 struct flight ***go_tail)
{
	struct flight *f = calloc(1, sizeof(*f));

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

	/* a block the lower tier holds costs the store nothing: no limiter */
	if (c->tier[tier].rl && c->env.lower_has && !is_part(k) && c->env.lower_has(c->env.arg, k))
		f->lower_free = true;
	if (!c->tier[tier].rl || f->lower_free) {
		**go_tail = f;
		*go_tail = &f->qnext;
		return f;
	}
	f->queued_ns = now;
	f->queued = true;
	STAT_ADD(c, tier, queued, 1);
	if (c->qtail)
		c->qtail->qnext = f;
	else
		c->qhead = f;
	c->qtail = f;
	struct flight *let = drain(c, now);
	if (let) {
		**go_tail = let;
		while (let->qnext)
			let = let->qnext;
		*go_tail = &let->qnext;
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

static void flight_done(void *arg, int err)
{
	struct flight *f = arg;
	struct cache *c = f->c;
	struct ring *ring = c->tier[f->tier].ring;
	struct pread *done = NULL;
	struct flight *go;
	bool claimed = f->claimed;

	STAT_SUB(c, f->tier, inflight, 1);
	if (err)
		STAT_ADD(c, f->tier, fetch_errors, 1);
	else if (!f->from_lower)
		STAT_ADD(c, f->tier, bytes_fetched, f->len);
	if (!err && !f->from_lower && c->env.lower_put && !is_part(f->key))
		c->env.lower_put(c->env.arg, f->key, f->have_ref ? f->ref.data : f->bounce->data,
				 f->len, c->tier[f->tier].rl != NULL);
	if (!err && f->have_ref)
		ring_commit(ring, &f->ref);

	pthread_mutex_lock(&c->lock);
	flight_unlink(c, f);
	if (f->running)
		c->lag_running--;
	if (f->bounce_charged) { /* charged, never mapped */
		c->bounce_bytes -= f->len;
		if (f->forced)
			c->forced_bytes -= f->len;
	}
	for (struct piece *p = f->waiters, *next; p; p = next) {
		struct pread *pr = p->pr;

		next = p->wnext;
		p->wait = NULL;
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
	/* a completion frees a connection slot: a good moment to let queued fetches go */
	go = c->qhead ? drain(c, now_ns(c)) : NULL;
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

	while (done) {
		struct pread *pr = done;

		done = (struct pread *)pr->p[0].wnext;
		answer(c, pr->p, pr->n, pr->first, pr->off, pr->len, pr->err, pr->reply, pr->req);
		free(pr);
	}
	start_list(go);
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
	depth = win;
	if (c->tier[tier].rl) {
		/* A throttled reader consumes a block in block_size/rate seconds; blocks fetched
		 * further ahead than about half the tier's TTL would expire unread and be paid
		 * for twice. */
		uint64_t rate = __atomic_load_n(&c->tier[tier].rate, __ATOMIC_RELAXED);
		uint64_t fit = rate ? rate * c->tier[tier].ttl_s / 2 / c->cfg.block_size : depth;

		if (depth > fit)
			depth = fit;
	}
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
	if (!c->tier[tier].rl && to + 1 < nblocks && to - from + 1 < batch)
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
		if (!flight_new(c, o, k, b << c->shift, block_len(c, o, b), tier, now, &go_tail))
			break;
		added++;
		STAT_ADD(c, tier, readaheads, 1);
	}
	pthread_mutex_unlock(&c->lock);
	start_list(go);
}

void cache_read(struct cache *c, const struct cache_obj *o, struct cache_stream *s, uint64_t off,
		size_t len, uint64_t ticket, cache_reply_fn reply, void *req)
{
	struct piece stack_p[STACK_PIECES], *p = stack_p;
	struct pread *pr = NULL;
	uint64_t first, last, now, ra_from = 1, ra_to = 0;
	uint32_t n, missing = 0;
	enum cache_tier tier;
	bool parts = false; /* a random read of an object too big for whole blocks: fetch parts */

	if (off >= o->size || len == 0) {
		reply(req, NULL, 0, 0);
		return;
	}
	if (len > o->size - off)
		len = (size_t)(o->size - off);
	first = off >> c->shift;
	last = (off + len - 1) >> c->shift;
	if (last - first >= MAX_READ_BLOCKS) {
		reply(req, NULL, 0, -EINVAL);
		return;
	}
	n = (uint32_t)(last - first + 1);
	now = now_ns(c);
	tier = cache_route(c, o);
	if (s) {
		uint64_t prev = __atomic_exchange_n(&s->next_off, off + len, __ATOMIC_RELAXED);
		/* A stream with a window stays sequential while its reads land between the
		 * block before the previous read's last block and its readahead frontier: the
		 * kernel's readahead requests reach the FUSE workers slightly out of order. */
		bool near = __atomic_load_n(&s->ra_win, __ATOMIC_RELAXED) && prev &&
			    first + 1 >= (prev - 1) >> c->shift &&
			    first <= __atomic_load_n(&s->ra_next, __ATOMIC_RELAXED);

		bool seq = off == prev || off == 0 || near;

		if (seq && c->cfg.readahead)
			readahead_plan(c, o, s, last, off == 0 && prev != 0, tier, &ra_from,
				       &ra_to);
		else if (!seq)
			__atomic_store_n(&s->ra_win, 0, __ATOMIC_RELAXED); /* a seek */
		/* whole blocks of a hot object larger than hot_parts_above would evict each
		 * other before they are read again (README, "Random reads") */
		parts = !seq && (tier == CACHE_LAG ||
				 (c->cfg.hot_parts_above && o->size > c->cfg.hot_parts_above));
	}

	if (n > STACK_PIECES) {
		pr = calloc(1, sizeof(*pr) + n * sizeof(struct piece));
		if (!pr) {
			reply(req, NULL, 0, -ENOMEM);
			return;
		}
		p = pr->p;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct part pt;

		p[i].pin = PIN_NONE;
		if (lookup(c, (struct cache_key){o->id, first + i}, now, &p[i]))
			continue;
		if (parts && part_of(c, o, first + i, off, len, &pt) && part_lookup(c, &pt, now, &p[i]))
			continue;
		missing++;
	}

	if (!missing) {
		answer(c, p, n, first, off, len, 0, reply, req);
		free(pr);
		goto readahead;
	}

	/* Slow path: park the read. The pieces move into a heap pread. */
	if (!pr) {
		pr = malloc(sizeof(*pr) + n * sizeof(struct piece));
		if (!pr) {
			answer(c, p, n, first, off, len, -ENOMEM, reply, req);
			goto readahead;
		}
		memcpy(pr->p, p, n * sizeof(struct piece));
		p = pr->p;
	}
	pr->c = c;
	pr->ticket = 0;
	pr->obj = o->id;
	pr->reply = reply;
	pr->req = req;
	pr->off = off;
	pr->len = len;
	pr->first = first;
	pr->n = n;
	pr->err = 0;
	pr->pending = 1; /* held by this function until every piece is registered */

	struct flight *go = NULL, **go_tail = &go;
	bool finished, pump = false;

	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct cache_key k = {o->id, first + i};
		struct part pt;
		bool part;
		struct flight *f;

		if (p[i].pin != PIN_NONE)
			continue;
		p[i].pr = pr;
		p[i].start = 0;
		/* the whole block when the lower tier has it: it costs the store nothing */
		part = parts && part_of(c, o, k.blk, off, len, &pt) &&
		       !(c->env.lower_has && c->env.lower_has(c->env.arg, k));
		/* a fetch of the whole block serves a part too */
		f = flight_find(c, k);
		if (!f && part && (f = flight_find(c, pt.key)))
			p[i].start = pt.start;
		if (f) {
			STAT_ADD(c, f->tier, joins, 1);
			pump |= f->mwait; /* waited, may now take a bounce buffer */
		} else if (lookup(c, k, now, &p[i]) || (part && part_lookup(c, &pt, now, &p[i]))) {
			continue; /* committed since the first look */
		} else {
			if (part) {
				p[i].start = pt.start;
				f = flight_new(c, o, pt.key, (k.blk << c->shift) + pt.start, pt.len,
					       tier, now, &go_tail);
			} else {
				f = flight_new(c, o, k, k.blk << c->shift, block_len(c, o, k.blk),
					       tier, now, &go_tail);
			}
			if (!f) {
				pr->err = -ENOMEM;
				continue;
			}
			STAT_ADD(c, tier, misses, 1);
			if (part)
				STAT_ADD(c, tier, parts, 1);
		}
		p[i].wait = f;
		p[i].wnext = f->waiters;
		f->waiters = &p[i];
		pr->pending++;
	}
	finished = --pr->pending == 0;
	if (!finished && ticket) {
		unsigned b = ticket_bucket(ticket);

		pr->ticket = ticket;
		pr->hnext = c->parked[b];
		c->parked[b] = pr;
	}
	pthread_mutex_unlock(&c->lock);

	start_list(go);
	if (pump)
		mem_pump(c, NULL, false);
	if (finished) {
		answer(c, p, n, first, off, len, pr->err, reply, req);
		free(pr);
	}
readahead:
	readahead(c, o, ra_from, ra_to, tier, now);
}

uint64_t cache_ticket(struct cache *c)
{
	return __atomic_add_fetch(&c->next_ticket, 1, __ATOMIC_RELAXED);
}

void cache_cancel(struct cache *c, uint64_t ticket)
{
	struct flight *drop = NULL, *go;
	struct pread *pr;
	bool lag_freed = false;

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
		struct piece *p = &pr->p[i], **pp;
		struct flight *f;

		if (p->pin != PIN_NONE)
			continue; /* arrived (pinned) or never registered */
		f = p->wait;
		if (!f)
			continue;
		bool mine = false;

		for (pp = &f->waiters; *pp; pp = &(*pp)->wnext) {
			if (*pp == p) {
				*pp = p->wnext;
				mine = true;
				break;
			}
		}
		if (!mine || f->waiters || (!f->queued && !f->mwait))
			continue;
		/* nobody wants it and it has not started: it never will */
		struct flight **qp = f->queued ? &c->qhead : &c->mhead, *prev = NULL;

		while (*qp != f) {
			prev = *qp;
			qp = &(*qp)->qnext;
		}
		if (f->queued) {
			*qp = f->qnext;
			if (c->qtail == f)
				c->qtail = prev;
			f->queued = false;
			STAT_SUB(c, f->tier, queued, 1);
		} else {
			mem_unlink(c, f, prev);
			STAT_SUB(c, f->tier, inflight, 1); /* flight_start counted it */
			if (f->running) {
				c->lag_running--;
				lag_freed = true;
			}
		}
		flight_unlink(c, f);
		f->qnext = drop;
		drop = f;
	}
	pr->pending = 0;
	/* a dropped lagging flight had a place among the running ones: pass it on */
	go = lag_freed && c->qhead ? drain(c, now_ns(c)) : NULL;
	pthread_mutex_unlock(&c->lock);

	answer(c, pr->p, pr->n, pr->first, pr->off, pr->len, -EINTR, pr->reply, pr->req);
	free(pr);
	while (drop) {
		struct flight *f = drop;

		drop = f->qnext;
		c->env.release(f->ctx);
		free(f);
	}
	start_list(go);
}

static void tier_done(struct tier *t)
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
 * The tier list of @cfg, in lookup order: every field but the rings and the counters. @rl is
 * the lagging tier's limiter. Adding a tier is adding its entry here (and its name above).
 */
static void tiers_of(const struct cache_cfg *cfg, struct rl *rl, struct tier *ret)
{
	ret[CACHE_HOT] = (struct tier){
		.on = true,
		.size = cfg->hot_size,
		.ttl_s = cfg->hot_ttl,
	};
	ret[CACHE_LAG] = (struct tier){
		.on = cfg->lagging,
		.size = cfg->lagging ? cfg->lagging_size : 0,
		.ttl_s = cfg->lagging_ttl,
		.rl = rl,
		.rate = cfg->lagging_rate,
		.admits = admits_old,
	};
	for (int t = 0; t < CACHE_NTIERS; t++)
		ret[t].name = tier_names[t];
}

int cache_new(const struct cache_cfg *cfg, const struct cache_env *env, struct cache **ret)
{
	struct tier tiers[CACHE_NTIERS];
	struct cache *c;
	uint64_t now;
	int r;

	if (!cfg->block_size || (cfg->block_size & (cfg->block_size - 1)))
		return -EINVAL;
	tiers_of(cfg, NULL, tiers);
	for (int t = 0; t < CACHE_NTIERS; t++) {
		r = tiers[t].on ? cache_tier_check(tiers[t].size, cfg->block_size) : 0;
		if (r < 0)
			return r;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->env = *env;
	c->shift = (uint32_t)__builtin_ctz(cfg->block_size);
	c->timer_due = UINT64_MAX;
	pthread_mutex_init(&c->lock, NULL);
	tiers_of(cfg, &c->rl, c->tier);
	for (int t = 0; t < CACHE_NTIERS; t++) {
		struct tier *tr = &c->tier[t];

		tr->st.size = tr->size;
		if (!tr->on)
			continue;
		r = tier_ring(tr->size, cfg->block_size, tr->ttl_s, cfg->prefault, &tr->ring);
		if (r < 0)
			goto fail;
	}
	now = now_ns(c);
	rl_init(&c->rl, cfg->lagging_rate, cfg->lagging_burst, cfg->lagging_ops, now);
	c->lag_inflight_max = cfg->lagging ? cfg->lagging_size / cfg->block_size / 2 : 1;
	*ret = c;
	return 0;
fail:
	cache_free(c);
	return r;
}

void cache_free(struct cache *c)
{
	if (!c)
		return;
	/* Flights still queued for the limiter never started: answer their readers. The queue
	 * is detached first so that completing one does not start the next. */
	struct flight *q = c->qhead, *m = c->mhead;

	c->qhead = c->qtail = NULL;
	c->mhead = c->mtail = NULL;
	c->mwaiting = 0;
	while (q) {
		struct flight *f = q;

		q = f->qnext;
		STAT_ADD(c, f->tier, inflight, 1); /* flight_done counts it down */
		flight_done(f, -ESHUTDOWN);
	}
	/* so are flights still waiting for memory (flight_start counted them in flight) */
	while (m) {
		struct flight *f = m;

		m = f->qnext;
		f->mwait = false;
		flight_done(f, -ESHUTDOWN);
	}
	for (int t = 0; t < CACHE_NTIERS; t++)
		tier_done(&c->tier[t]);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int cache_set_limits(struct cache *c, uint64_t rate, uint64_t burst, uint64_t ops)
{
	struct flight *go;
	uint64_t now = now_ns(c);

	pthread_mutex_lock(&c->lock);
	rl_set(&c->rl, rate, burst, ops, now);
	__atomic_store_n(&c->tier[CACHE_LAG].rate, rate, __ATOMIC_RELAXED);
	c->timer_due = UINT64_MAX; /* the armed timer may be late for the new rate */
	go = drain(c, now);
	pthread_mutex_unlock(&c->lock);
	start_list(go);
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
		s->limited = c->tier[t].rl != NULL;
		s->rate = c->tier[t].ring ? __atomic_load_n(&c->tier[t].rate, __ATOMIC_RELAXED) : 0;
	}
	pthread_mutex_lock(&c->lock);
	for (int t = 0; t < CACHE_NTIERS; t++)
		if (c->tier[t].rl)
			ret->tier[t].tokens = rl_tokens(c->tier[t].rl, now);
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
