/*
 * simdisk.c - a mount's disk tier (cache_dir), simulated: the first tier of its chain, as
 * tiers/disk.c is in a mount's. Nothing is written anywhere: an index of the block keys it
 * holds, in the order they came, under disk_size bytes.
 *
 *   put(io, 0) ─► admitted (not lagging, or disk_lagging) ─► appended at the tail: FIFO
 *                 used += len; over disk_size: the oldest (head) go
 *   has(key)   ─► in the index: the cache skips the lagging limiter for it, as a mount does
 *   get(io)    ─► in the index: a hit after disk_lat + len / disk_bw; else a miss at once
 *   drop(oid)  ─► that version's blocks go
 *
 *   index: hash (key) ─► node ─── FIFO: head (oldest) ... tail (newest)
 *
 * Why it matters: a mount whose lagging reads find their blocks on its disk (blocks its tail
 * readers fetched while they were hot) gets them without passing the lagging limiter, in well
 * under a millisecond; without this tier the sim sent those reads through the limiter, where
 * a replaying reader's next blocks queued and its reads joined them (issue 38).
 *
 * What is simplified: the real tier evicts a segment file at a time (this one a block at a
 * time, the same order); its write queue never fills here; a block is readable as soon as it
 * is put (the real one after its pwrite, a few hundred microseconds later). A disk tier that
 * outlived a mount (a remount on the same cache_dir) starts empty here; what it held shows in
 * the trace only as reads the mount answered from its disk, and replay.c seeds their versions
 * (sim_disk_seed) when this tier lacks their blocks (docs/sizing.md).
 *
 * Locking: none; the world runs on one thread. Workload: one get per memory miss, one put per
 * block fetched from below or written.
 */
#include <errno.h>
#include <stdlib.h>

#include "sim_i.h"

struct dnode {
	struct dnode *hnext;	   /* hash chain */
	struct dnode *prev, *next; /* FIFO, head oldest */
	struct cache_key key;
	uint64_t len;
};

struct sim_disk {
	struct sim_events *q;
	const struct sim_cfg *cfg;
	uint64_t size; /* disk_size */
	bool lagging;  /* disk_lagging */
	struct dnode **tab;
	uint64_t mask, n, used;
	struct dnode *head, *tail;
	uint64_t hits, misses, puts, evictions;
	uint64_t seeded; /* blocks put by sim_disk_seed: there before the trace said so */
};

static uint64_t khash(struct cache_key k)
{
	uint64_t h = (k.oid.hi ^ k.oid.lo * 0x9e3779b97f4a7c15ULL) + k.blk * 0xbf58476d1ce4e5b9ULL;

	return h ^ (h >> 31);
}

struct sim_disk *sim_disk_new(struct sim_events *q, const struct sim_cfg *cfg, uint64_t size,
			      bool lagging)
{
	struct sim_disk *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	*d = (struct sim_disk){
	    .q = q, .cfg = cfg, .size = size, .lagging = lagging, .mask = (1u << 12) - 1};
	d->tab = calloc(d->mask + 1, sizeof(*d->tab));
	if (!d->tab) {
		free(d);
		return NULL;
	}
	return d;
}

void sim_disk_free(struct sim_disk *d)
{
	if (!d)
		return;
	while (d->head) {
		struct dnode *n = d->head;

		d->head = n->next;
		free(n);
	}
	free(d->tab);
	free(d);
}

static struct dnode **slot(struct sim_disk *d, struct cache_key k)
{
	struct dnode **pp = &d->tab[khash(k) & d->mask];

	while (*pp && !cache_key_eq((*pp)->key, k))
		pp = &(*pp)->hnext;
	return pp;
}

/* Take @n out of the index and the FIFO, and free it. */
static void unlink_node(struct sim_disk *d, struct dnode *n)
{
	struct dnode **pp = slot(d, n->key);

	*pp = n->hnext;
	if (n->prev)
		n->prev->next = n->next;
	else
		d->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		d->tail = n->prev;
	d->used -= n->len;
	d->n--;
	free(n);
}

static void grow(struct sim_disk *d)
{
	uint64_t cap = 2 * (d->mask + 1);
	struct dnode **t = calloc(cap, sizeof(*t));

	if (!t)
		return; /* longer chains, nothing worse */
	for (uint64_t i = 0; i <= d->mask; i++)
		for (struct dnode *n = d->tab[i], *next; n; n = next) {
			next = n->hnext;
			n->hnext = t[khash(n->key) & (cap - 1)];
			t[khash(n->key) & (cap - 1)] = n;
		}
	free(d->tab);
	d->tab = t;
	d->mask = cap - 1;
}

/* Keep @k (@len bytes) as the newest, evicting the oldest beyond the size. */
static void keep(struct sim_disk *d, struct cache_key k, uint64_t len)
{
	struct dnode **pp = slot(d, k), *n;

	if (*pp)
		unlink_node(d, *pp); /* written again: it moves to the tail, as a new record */
	if (len > d->size || !(n = calloc(1, sizeof(*n))))
		return;
	n->key = k;
	n->len = len;
	pp = slot(d, k);
	n->hnext = *pp;
	*pp = n;
	n->prev = d->tail;
	if (d->tail)
		d->tail->next = n;
	else
		d->head = n;
	d->tail = n;
	d->used += len;
	d->puts++;
	while (d->used > d->size && d->head) {
		unlink_node(d, d->head);
		d->evictions++;
	}
	if (++d->n > 2 * (d->mask + 1))
		grow(d);
}

bool sim_disk_holds(struct sim_disk *d, struct cache_key key)
{
	return *slot(d, key) != NULL;
}

void sim_disk_seed(struct sim_disk *d, struct cache_key key, uint64_t len)
{
	keep(d, key, len);
	d->seeded++;
}

/* ---- the tier ------------------------------------------------------------------------------- */

static void answer_hit(void *arg)
{
	tier_answer(arg, 0);
}

static int disk_get(void *self, struct tier_io *io)
{
	struct sim_disk *d = self;
	uint64_t delay;

	if (io->part || !*slot(d, io->key)) {
		d->misses++;
		return -ENOENT;
	}
	d->hits++;
	delay =
	    d->cfg->disk_lat_ns + (d->cfg->disk_bw ? io->len * 1000000000ULL / d->cfg->disk_bw : 0);
	if (sim_ev_at(d->q, d->q->now + delay, answer_hit, io) < 0)
		return -ENOMEM; /* a miss: the next tier reads it */
	return 0;
}

static bool disk_has(void *self, struct cache_key key)
{
	return *slot(self, key) != NULL;
}

static void disk_put(void *self, const struct tier_io *io, int err)
{
	struct sim_disk *d = self;

	if (!err && !io->part && (!io->lagging || d->lagging))
		keep(d, io->key, io->len);
}

static void disk_drop(void *self, struct cache_oid oid)
{
	struct sim_disk *d = self;

	for (struct dnode *n = d->head, *next; n; n = next) {
		next = n->next;
		if (cache_oid_eq(n->key.oid, oid))
			unlink_node(d, n);
	}
}

static const struct tier_ops disk_ops = {
    .name = "disk",
    .get = disk_get,
    .has = disk_has,
    .put = disk_put,
    .drop = disk_drop,
};

struct tier sim_disk_tier(struct sim_disk *d)
{
	return (struct tier){.ops = &disk_ops, .self = d};
}

void sim_disk_stats(const struct sim_disk *d, struct sim_result *ret)
{
	ret->disk_hits = d->hits;
	ret->disk_misses = d->misses;
	ret->disk_used = d->used;
	ret->disk_seeded = d->seeded;
}
