/*
 * simstore.c - the object store as one simulated mount sees it: a tier of the cache's chain
 * (the last, it always answers) with the backend's connection slots and merging, and a link.
 *
 *   get(io) ──plugged?──► batch ──unplug──► consecutive urgent reads of one object merged into
 *      │                                    one GET (<= 16 MiB), as backend/io.c merges a batch
 *      └──────────────────────────────────► urgent FIFO / background FIFO
 *                                                 │ at most max_conns GETs at once, background
 *                                                 ▼ ones at most max_conns - max_conns/4
 *                                           a GET: first byte after a lognormal latency, then
 *                                           len / store_bw, and the mount's link carries every
 *                                           GET's bytes one after the other at link_bw; each
 *                                           read of a merged GET is answered when its last
 *                                           byte is in
 *
 * Nothing is stored and no byte is written: the cache's slots keep whatever they held, which
 * is all a simulation needs (no reply is ever looked at). Every GET and every byte is counted:
 * they are what the store charges for.
 *
 * Locking: none; the world runs on one thread. Workload: one GET per miss (fewer, merged, for
 * sequential readers), a few thousand in flight at most.
 */
#include <errno.h>
#include <stdlib.h>

#include "sim_i.h"

#define MERGE_MAX (16u << 20) /* backend/io.c's */

struct sreq;

/* One read of a GET, answered on its own when its bytes are in. */
struct sio {
	struct sreq *r;
	struct tier_io *io;
};

/* One GET. */
struct sreq {
	struct sreq *next; /* its FIFO */
	struct sim_store *s;
	bool bg; /* background (lagging) */
	uint64_t len;
	unsigned n, left; /* reads it carries, and those not answered yet */
	struct sio io[];
};

struct sim_store {
	struct sim_events *q;
	const struct sim_cfg *cfg;
	uint64_t rng;
	unsigned max, reserve;		/* connection slots; kept for urgent GETs */
	unsigned active, active_bg;	/* GETs running */
	struct sreq *head[2], *tail[2]; /* [0] urgent, [1] background */
	unsigned plug;			/* plug depth */
	struct tier_io **batch;		/* reads handed over under the plug, in order */
	size_t nbatch, capbatch;
	uint64_t link_free; /* when the link has carried what it was given */
	uint64_t gets, bytes, merged;
};

struct sim_store *sim_store_new(struct sim_events *q, const struct sim_cfg *cfg, unsigned max_conns,
				uint64_t seed)
{
	struct sim_store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->q = q;
	s->cfg = cfg;
	s->rng = seed;
	s->max = max_conns ? max_conns : 1;
	s->reserve = s->max >= 4 ? s->max / 4 : s->max > 1 ? 1 : 0;
	return s;
}

void sim_store_free(struct sim_store *s)
{
	if (!s)
		return;
	for (int p = 0; p < 2; p++)
		while (s->head[p]) {
			struct sreq *r = s->head[p];

			s->head[p] = r->next;
			free(r);
		}
	free(s->batch);
	free(s);
}

static void pump(struct sim_store *s);

static void io_done(void *arg)
{
	struct sio *x = arg;
	struct sreq *r = x->r;
	struct sim_store *s = r->s;
	bool last = --r->left == 0;

	if (last) {
		s->active--;
		if (r->bg)
			s->active_bg--;
	}
	tier_answer(x->io, 0);
	if (last) {
		free(r);
		pump(s);
	}
}

/* Start GET @r now: schedule the answer of each of its reads. */
static void start(struct sim_store *s, struct sreq *r)
{
	const struct sim_cfg *c = s->cfg;
	uint64_t now = s->q->now, lat = sim_lognormal(&s->rng, c->store_lat_ns, c->store_p99_ns);
	uint64_t first = now + lat, link0 = first > s->link_free ? first : s->link_free, cum = 0;

	s->active++;
	s->active_bg += r->bg;
	s->gets++;
	s->bytes += r->len;
	s->merged += r->n - 1;
	for (unsigned i = 0; i < r->n; i++) {
		uint64_t at, viaconn, vialink;

		cum += r->io[i].io->len;
		viaconn = first + (uint64_t)((double)cum * 1e9 / (double)c->store_bw);
		vialink = link0 + (uint64_t)((double)cum * 1e9 / (double)c->link_bw);
		at = viaconn > vialink ? viaconn : vialink;
		sim_ev_at(s->q, at, io_done, &r->io[i]);
	}
	s->link_free = link0 + (uint64_t)((double)r->len * 1e9 / (double)c->link_bw);
}

static void pump(struct sim_store *s)
{
	while (s->active < s->max) {
		int p = s->head[0] ? 0 : 1;
		struct sreq *r = s->head[p];

		if (!r || (p == 1 && s->active_bg + s->reserve >= s->max))
			break;
		s->head[p] = r->next;
		if (!s->head[p])
			s->tail[p] = NULL;
		start(s, r);
	}
}

/* Queue a GET of reads @io[0..n) (consecutive bytes of one object). @return 0 or -ENOMEM. */
static int enqueue(struct sim_store *s, struct tier_io *const *io, unsigned n)
{
	struct sreq *r = malloc(sizeof(*r) + n * sizeof(r->io[0]));
	int p;

	if (!r)
		return -ENOMEM;
	*r = (struct sreq){.s = s, .bg = io[0]->lagging, .n = n, .left = n};
	for (unsigned i = 0; i < n; i++) {
		r->io[i] = (struct sio){r, io[i]};
		r->len += io[i]->len;
	}
	p = r->bg;
	if (s->tail[p])
		s->tail[p]->next = r;
	else
		s->head[p] = r;
	s->tail[p] = r;
	return 0;
}

/* May @b go out in the GET of @a, which has carried @len bytes so far? */
static bool follows(const struct tier_io *a, uint64_t len, const struct tier_io *b)
{
	return !a->lagging && !b->lagging && cache_oid_eq(a->key.oid, b->key.oid) &&
	       b->off == a->off + len && len + b->len <= MERGE_MAX;
}

/* The batch handed over under the plug: merged, queued, started. */
static void flush_batch(struct sim_store *s)
{
	size_t i = 0;

	while (i < s->nbatch) {
		size_t j = i + 1;
		uint64_t len = s->batch[i]->len;

		while (j < s->nbatch && follows(s->batch[i], len, s->batch[j]))
			len += s->batch[j++]->len;
		if (enqueue(s, &s->batch[i], (unsigned)(j - i)) < 0)
			for (size_t k = i; k < j; k++)
				tier_answer(s->batch[k], -ENOMEM);
		i = j;
	}
	s->nbatch = 0;
	pump(s);
}

static int store_get(void *self, struct tier_io *io)
{
	struct sim_store *s = self;

	if (!s->plug) {
		if (enqueue(s, &io, 1) < 0)
			return -ENOMEM;
		pump(s);
		return 0;
	}
	if (s->nbatch == s->capbatch) {
		size_t cap = s->capbatch ? 2 * s->capbatch : 64;
		struct tier_io **b = realloc(s->batch, cap * sizeof(*b));

		if (!b)
			return -ENOMEM;
		s->batch = b;
		s->capbatch = cap;
	}
	s->batch[s->nbatch++] = io;
	return 0;
}

void sim_store_plug(struct sim_store *s)
{
	s->plug++;
}

void sim_store_unplug(struct sim_store *s)
{
	if (--s->plug == 0 && s->nbatch)
		flush_batch(s);
}

static const struct tier_ops store_ops = {
    .name = "store",
    .get = store_get,
};

struct tier sim_store_tier(struct sim_store *s)
{
	return (struct tier){.ops = &store_ops, .self = s};
}

void sim_store_stats(const struct sim_store *s, uint64_t *ret_gets, uint64_t *ret_bytes,
		     uint64_t *ret_merged)
{
	*ret_gets = s->gets;
	*ret_bytes = s->bytes;
	*ret_merged = s->merged;
}
