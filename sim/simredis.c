/*
 * simredis.c - the fleet's Redis, simulated: one LRU of block values under a memory limit,
 * shared by every simulated mount, each of which sees it as the shared tier of its chain
 * (tiers/fleet.c is the real one).
 *
 *   mount A's chain: ... ─► port A ─┐                      values: hash (key) ─► node
 *   mount B's chain: ... ─► port B ─┼─► struct sim_redis     LRU: head (newest) ... tail
 *                                   │                        used <= redis_mem: evict at tail
 *                                   └─ locks: hash (key) ─► the port fetching it, waiters
 *
 *   get: value there ─► a hit after a round trip and len / redis_bw (moved to the LRU's head)
 *        none, and this fetch will fill: the block's lock is free ─► take it, miss after a
 *                                        round trip (the store is asked, put SETs the value)
 *                                        held by another mount ─► detach and wait for its SET
 *                                        (a hit then), or miss after the bound (wait_ns)
 *        none, and it will not fill (lagging without shared_fill_lagging): miss
 *   put: with the bytes, a fetch that fills SETs them (used += len + overhead rounded up to
 *        the allocator's size class, evicting the least recently used values while over the
 *        limit) and wakes the lock's waiters; with an error, the waiters miss
 *
 * What is simplified: the lock's waiters are woken by the SET rather than polling for it (a
 * poll every 2-16 ms, fleet.c), the lock never expires under a live holder, and Redis itself
 * is never slow, down or full of other keys. The fleet budget (fleet_lagging_rate) is not
 * simulated.
 *
 * Locking: none; the world runs on one thread. Workload: one call per block a mount misses
 * in memory; values a few hundred thousand at most.
 */
#include <errno.h>
#include <stdlib.h>

#include "sim_i.h"

#define VALUE_OVERHEAD 128  /* bytes Redis spends per value beyond its bytes: key, header */
#define LOCK_BUCKETS   4096 /* locks are few: the blocks being fetched */

/*
 * What a value of @len bytes costs Redis's maxmemory: its bytes and overhead, rounded up to
 * the allocator's size class. Redis counts what jemalloc gives (zmalloc_size), and jemalloc's
 * classes are four per doubling: 2^k x 1.25, 1.5, 1.75, 2. A 1 MiB block with its frame takes
 * 1.25 MiB, so a Redis holds a fifth fewer blocks than their bytes say (measured: 20 SETs of
 * 1 MiB + 64 bytes raised used_memory by 1.252 MiB each). Charging len + 128 alone, the sim's
 * Redis held 25% more of a soak's blocks than the real one and under-counted the store's bytes.
 */
static uint64_t charge(uint64_t len)
{
	uint64_t n = len + VALUE_OVERHEAD, step;
	unsigned k = 0;

	while (k < 63 && (1ULL << (k + 1)) < n)
		k++; /* 2^k < n <= 2^(k+1) */
	step = k >= 2 ? 1ULL << (k - 2) : 1;
	return (n + step - 1) / step * step;
}

struct rnode {
	struct rnode *hnext;	   /* hash chain */
	struct rnode *prev, *next; /* LRU, head newest */
	struct cache_key key;
	uint64_t len; /* bytes charged: the value and its overhead */
};

struct rwait;

/* A block being fetched by the mount that holds its lock. */
struct rlock {
	struct rlock *hnext;
	struct cache_key key;
	struct rwait *waiters;
};

/* A get waiting for another mount's SET. Freed once answered and its bound has fired. */
struct rwait {
	struct rwait *next;
	struct tier_io *io;
	struct sim_redis_port *p;
	struct sim_redis *r;
	unsigned refs; /* the lock's list (until woken) and the bound's event */
	bool answered;
};

struct sim_redis {
	struct sim_events *q;
	const struct sim_cfg *cfg;
	struct rnode **tab;   /* values, by key */
	struct rlock **locks; /* locks, by key */
	uint64_t mask;	      /* table size - 1 */
	struct rnode *head, *tail;
	uint64_t nvalues, used, peak, evictions;
};

struct sim_redis_port {
	struct sim_redis *r;
	bool fill_lagging;
	uint64_t wait_ns;
	uint64_t hits, misses, get_bytes, set_bytes, lock_waits;
};

/* What a port's get leaves in its slot (tier_io.priv) for put: the fetch holds the lock. */
#define HOLDS_LOCK ((void *)1)

static uint64_t khash(struct cache_key k)
{
	uint64_t h = (k.oid.hi ^ k.oid.lo * 0x9e3779b97f4a7c15ULL) + k.blk * 0xbf58476d1ce4e5b9ULL;

	return h ^ (h >> 31);
}

struct sim_redis *sim_redis_new(struct sim_events *q, const struct sim_cfg *cfg)
{
	struct sim_redis *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->q = q;
	r->cfg = cfg;
	r->mask = (1u << 16) - 1;
	r->tab = calloc(r->mask + 1, sizeof(*r->tab));
	r->locks = calloc(LOCK_BUCKETS, sizeof(*r->locks));
	if (!r->tab || !r->locks) {
		sim_redis_free(r);
		return NULL;
	}
	return r;
}

void sim_redis_free(struct sim_redis *r)
{
	if (!r)
		return;
	while (r->head) {
		struct rnode *n = r->head;

		r->head = n->next;
		free(n);
	}
	for (uint64_t i = 0; r->locks && i < LOCK_BUCKETS; i++)
		while (r->locks[i]) {
			struct rlock *l = r->locks[i];

			r->locks[i] = l->hnext;
			free(l);
		}
	free(r->tab);
	free(r->locks);
	free(r);
}

/* ---- values: hash and LRU ------------------------------------------------------------------- */

static struct rnode **vslot(struct sim_redis *r, struct cache_key k)
{
	struct rnode **pp = &r->tab[khash(k) & r->mask];

	while (*pp && !cache_key_eq((*pp)->key, k))
		pp = &(*pp)->hnext;
	return pp;
}

static void lru_unlink(struct sim_redis *r, struct rnode *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		r->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		r->tail = n->prev;
	n->prev = n->next = NULL;
}

static void lru_front(struct sim_redis *r, struct rnode *n)
{
	n->next = r->head;
	if (r->head)
		r->head->prev = n;
	r->head = n;
	if (!r->tail)
		r->tail = n;
}

/* Double the value table when it holds as many values as slots. */
static void vgrow(struct sim_redis *r)
{
	uint64_t cap = 2 * (r->mask + 1);
	struct rnode **t = calloc(cap, sizeof(*t));

	if (!t)
		return; /* longer chains, nothing worse */
	for (uint64_t i = 0; i <= r->mask; i++)
		for (struct rnode *n = r->tab[i], *next; n; n = next) {
			next = n->hnext;
			n->hnext = t[khash(n->key) & (cap - 1)];
			t[khash(n->key) & (cap - 1)] = n;
		}
	free(r->tab);
	r->tab = t;
	r->mask = cap - 1;
}

static void evict_one(struct sim_redis *r)
{
	struct rnode *n = r->tail;

	lru_unlink(r, n);
	*vslot(r, n->key) = n->hnext;
	r->used -= n->len;
	r->nvalues--;
	r->evictions++;
	free(n);
}

/* SET @k (@len bytes of value). */
static void vset(struct sim_redis *r, struct cache_key k, uint64_t len)
{
	struct rnode **pp = vslot(r, k), *n = *pp;

	if (n) {
		lru_unlink(r, n);
		lru_front(r, n);
		return;
	}
	if (len > r->cfg->redis_mem || !(n = calloc(1, sizeof(*n))))
		return;
	n->key = k;
	n->len = len;
	n->hnext = NULL;
	*pp = n;
	lru_front(r, n);
	r->used += len;
	r->nvalues++;
	while (r->used > r->cfg->redis_mem)
		evict_one(r);
	if (r->used > r->peak)
		r->peak = r->used;
	if (r->nvalues > r->mask)
		vgrow(r);
}

/* ---- locks ---------------------------------------------------------------------------------- */

static struct rlock **lslot(struct sim_redis *r, struct cache_key k)
{
	struct rlock **pp = &r->locks[khash(k) & (LOCK_BUCKETS - 1)];

	while (*pp && !cache_key_eq((*pp)->key, k))
		pp = &(*pp)->hnext;
	return pp;
}

static void wait_put(struct rwait *w)
{
	if (--w->refs == 0)
		free(w);
}

/* @w's answer, once: a hit (@hit) after moving the value, else a miss. */
static void wait_answer(struct rwait *w, bool hit)
{
	if (w->answered)
		return;
	w->answered = true;
	if (hit) {
		w->p->hits++;
		w->p->get_bytes += w->io->len;
	} else {
		w->p->misses++;
	}
	tier_answer(w->io, hit ? 0 : -ENOENT);
}

static void wait_bound(void *arg)
{
	struct rwait *w = arg;

	wait_answer(w, false);
	wait_put(w);
}

/* Release @k's lock: its waiters get the value (@stored) or miss. */
static void unlock(struct sim_redis *r, struct cache_key k, bool stored)
{
	struct rlock **pp = lslot(r, k), *l = *pp;

	if (!l)
		return;
	*pp = l->hnext;
	while (l->waiters) {
		struct rwait *w = l->waiters;

		l->waiters = w->next;
		wait_answer(w, stored);
		wait_put(w);
	}
	free(l);
}

/* ---- the tier ------------------------------------------------------------------------------- */

struct answer {
	struct tier_io *io;
	int err;
};

static void answer_later(void *arg)
{
	struct answer *a = arg;
	struct tier_io *io = a->io;
	int err = a->err;

	free(a);
	tier_answer(io, err);
}

/* Answer @io with @err after @delay. @return 0 or -ENOMEM. */
static int later(struct sim_redis *r, struct tier_io *io, int err, uint64_t delay)
{
	struct answer *a = malloc(sizeof(*a));

	if (!a)
		return -ENOMEM;
	*a = (struct answer){io, err};
	return sim_ev_at(r->q, r->q->now + delay, answer_later, a);
}

static bool fills(const struct sim_redis_port *p, const struct tier_io *io)
{
	return io->written || !io->lagging || p->fill_lagging;
}

/* The block is being fetched by another mount: wait for its SET, up to the bound. */
static int wait_for(struct sim_redis_port *p, struct rlock *l, struct tier_io *io)
{
	struct sim_redis *r = p->r;
	struct rwait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	*w = (struct rwait){.next = l->waiters, .io = io, .p = p, .r = r, .refs = 2};
	if (sim_ev_at(r->q, r->q->now + p->wait_ns, wait_bound, w) < 0) {
		free(w);
		return -ENOMEM;
	}
	l->waiters = w;
	p->lock_waits++;
	tier_detach(io);
	return 0;
}

static int redis_get(void *self, struct tier_io *io)
{
	struct sim_redis_port *p = self;
	struct sim_redis *r = p->r;
	const struct sim_cfg *c = r->cfg;
	struct rnode *n = *vslot(r, io->key);
	struct rlock **lp, *l;

	if (n) {
		lru_unlink(r, n);
		lru_front(r, n);
		p->hits++;
		p->get_bytes += io->len;
		return later(r, io, 0,
			     c->redis_lat_ns +
				 (uint64_t)((double)io->len * 1e9 / (double)c->redis_bw));
	}
	if (!fills(p, io)) {
		p->misses++;
		return later(r, io, -ENOENT, c->redis_lat_ns);
	}
	lp = lslot(r, io->key);
	if (*lp)
		return wait_for(p, *lp, io);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->key = io->key;
	*lp = l;
	*io->priv = HOLDS_LOCK;
	p->misses++;
	return later(r, io, -ENOENT, c->redis_lat_ns);
}

static void redis_put(void *self, const struct tier_io *io, int err)
{
	struct sim_redis_port *p = self;
	struct sim_redis *r = p->r;
	bool held = *io->priv == HOLDS_LOCK,
	     store = !err && (held || (io->written && fills(p, io)));

	*io->priv = NULL;
	if (store) {
		vset(r, io->key, charge(io->len));
		p->set_bytes += io->len;
	}
	if (held)
		unlock(r, io->key, store);
}

static const struct tier_ops redis_ops = {
    .name = "shared",
    .get = redis_get,
    .put = redis_put,
};

struct sim_redis_port *sim_redis_port_new(struct sim_redis *r, bool fill_lagging, uint64_t wait_ns)
{
	struct sim_redis_port *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->r = r;
	p->fill_lagging = fill_lagging;
	p->wait_ns = wait_ns;
	return p;
}

void sim_redis_port_free(struct sim_redis_port *p)
{
	free(p);
}

struct tier sim_redis_tier(struct sim_redis_port *p)
{
	return (struct tier){.ops = &redis_ops, .self = p};
}

void sim_redis_port_stats(const struct sim_redis_port *p, struct sim_result *ret)
{
	ret->shared_hits = p->hits;
	ret->shared_misses = p->misses;
	ret->shared_get_bytes = p->get_bytes;
	ret->shared_set_bytes = p->set_bytes;
	ret->shared_lock_waits = p->lock_waits;
}

void sim_redis_stats(const struct sim_redis *r, struct sim_result *ret)
{
	ret->redis_used = r->used;
	ret->redis_peak = r->peak;
	ret->redis_evictions = r->evictions;
}
