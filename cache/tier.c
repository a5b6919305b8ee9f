/*
 * tier.c - the walk of a block down the chain of tiers below the memory rings (tier.h).
 *
 * The cache hands the chain a batch of requests (struct chain_req, one per flight that has
 * its memory: a read's misses, a readahead window). Each request asks the chain's tiers in
 * order until one has the block; the last tier, the store, always answers. A batch walks as
 * one, so that what a lower tier does with a batch (the backend merges consecutive range
 * reads handed to it together) happens whatever tier missed before it:
 *
 *     level 0:  r0 r1 r2 r3   each asked (get); hits leave (done), misses stay
 *                   │            ...once every request of the batch has answered here:
 *     level 1:  r0    r2 r3   the misses move on together
 *                   │
 *     store:    r0    r2      handed to the store at once, between env->plug and unplug
 *
 * A batch's count of answers still awaited at its level (w->pending) is an atomic; the thread
 * that brings it to zero moves the batch on. The thread that asks a level holds one count
 * itself while it asks, so answers given inside get (a miss known at once, a hit read
 * synchronously) never move the batch under its feet. A request whose tier detaches it
 * (tier_detach: its answer will be long in coming) leaves the batch and walks alone from
 * there, as does one whose tier owns a gate (the fleet's budget): a lagging request missed by
 * such a tier passes the gate alone before the next tier. Requests alone carry walk NULL.
 *
 * When a request ends, chain_put tells every tier it passed (asked and missed) how it went:
 * the bytes, for its admission rule, or the error, so it releases what its get took.
 *
 * Parts of blocks (random reads) skip every tier but the store: the tiers below memory keep
 * whole blocks.
 *
 * Locking: none of its own. A request is touched by one thread at a time (the one its tier
 * answers on); a batch's slots are written by the answer of their own request before it
 * counts down (release), and read by the thread that counts to zero (acquire). Nothing here
 * blocks. Workload: one walk per batch of misses; a chain of two to four tiers.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "cache_i.h"
#include "tier.h"

/* A batch at one level of the chain. */
struct walk {
	struct chain *ch;
	unsigned pending;          /* answers awaited at this level, + 1 while asking; atomic */
	uint8_t level;             /* the tier asked */
	uint32_t n;                /* requests */
	struct chain_req *r[];     /* NULL once it left (a hit, detached, gated) */
};

static struct chain_req *req_of(struct tier_io *io)
{
	return (struct chain_req *)((char *)io - offsetof(struct chain_req, io));
}

static bool last(const struct chain *ch, uint8_t level)
{
	return level == ch->n - 1;
}

void chain_init(struct chain *ch, const struct tier *tiers, unsigned n,
		const struct cache_env *env)
{
	*ch = (struct chain){.n = (uint8_t)n, .plug = env->plug, .unplug = env->unplug,
			     .arg = env->arg};
	for (unsigned i = 0; i < n; i++)
		ch->t[i] = tiers[i];
}

bool chain_has(const struct chain *ch, struct cache_key key)
{
	for (uint8_t i = 0; i + 1 < ch->n; i++)
		if (ch->t[i].ops->has && ch->t[i].ops->has(ch->t[i].self, key))
			return true;
	return false;
}

static void walk_next(struct walk *w);

static void walk_release(struct walk *w)
{
	if (__atomic_sub_fetch(&w->pending, 1, __ATOMIC_ACQ_REL) == 0)
		walk_next(w);
}

static void go_on(struct chain_req *r);

/* Ask @r's tier (r->level) for its block. */
static void ask(struct chain_req *r)
{
	const struct tier *t = &r->ch->t[r->level];
	int e = -ENOENT;

	r->io.priv = &r->priv[r->level];
	if (last(r->ch, r->level)) {
		r->to_store(r);
		e = t->ops->get(t->self, &r->io);
		if (e < 0)
			r->done(r, e);
		return;
	}
	if (!r->io.part && t->ops->get)
		e = t->ops->get(t->self, &r->io);
	if (e < 0)
		tier_answer(&r->io, e);
}

void tier_answer(struct tier_io *io, int err)
{
	struct chain_req *r = req_of(io);
	struct walk *w = r->walk;

	if (last(r->ch, r->level)) {
		r->done(r, err);
		return;
	}
	if (err == 0) {
		if (w) {
			w->r[r->widx] = NULL;
			r->walk = NULL;
			walk_release(w);
		}
		r->done(r, 0);
		return;
	}
	if (!r->io.part)
		r->passed |= (uint8_t)(1u << r->level);
	if (w)
		walk_release(w); /* the batch moves on together */
	else
		go_on(r);
}

void tier_detach(struct tier_io *io)
{
	struct chain_req *r = req_of(io);
	struct walk *w = r->walk;

	if (!w)
		return;
	w->r[r->widx] = NULL;
	r->walk = NULL;
	walk_release(w);
}

static void gate_passed(struct gate_waiter *gw)
{
	ask((struct chain_req *)((char *)gw - offsetof(struct chain_req, gw)));
}

/* @r, alone, missed at r->level: through that tier's gate (a lagging request), then to the
 * next tier. */
static void go_on(struct chain_req *r)
{
	struct gate *g = r->ch->t[r->level].gate;

	r->level++;
	if (g && r->io.lagging) {
		r->gw.go = gate_passed;
		if (!gate_enter(g, &r->gw, r->io.len))
			return; /* gate_passed asks, later */
	}
	ask(r);
}

/* Ask every request of @w at its level (w->n >= 2, none NULL, none at the store). */
static void walk_level(struct walk *w)
{
	__atomic_store_n(&w->pending, w->n + 1, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < w->n; i++) {
		struct chain_req *r = w->r[i];

		r->level = w->level;
		r->walk = w;
		r->widx = i;
		ask(r);
	}
	walk_release(w);
}

/* Hand what is left of @w to the store, at once, plugged: consecutive blocks can go out as
 * one request. */
static void walk_store(struct walk *w)
{
	struct chain *ch = w->ch;

	if (ch->plug)
		ch->plug(ch->arg);
	for (uint32_t i = 0; i < w->n; i++) {
		w->r[i]->walk = NULL;
		w->r[i]->level = w->level;
		ask(w->r[i]);
	}
	if (ch->unplug)
		ch->unplug(ch->arg);
	free(w);
}

/* Every request of @w has answered at w->level: the misses move on, a lagging one through
 * that tier's gate alone. */
static void walk_next(struct walk *w)
{
	const struct tier *t = &w->ch->t[w->level];
	uint32_t k = 0;

	for (uint32_t i = 0; i < w->n; i++) {
		struct chain_req *r = w->r[i];

		if (!r)
			continue;
		if (t->gate && r->io.lagging) {
			r->walk = NULL;
			go_on(r);
		} else {
			w->r[k++] = r;
		}
	}
	w->n = k;
	w->level++;
	if (k >= 2 && !last(w->ch, w->level)) {
		walk_level(w);
	} else if (k >= 2) {
		walk_store(w);
	} else {
		if (k == 1) {
			w->r[0]->walk = NULL;
			w->r[0]->level = w->level;
			ask(w->r[0]);
		}
		free(w);
	}
}

void chain_start(struct chain *ch, struct chain_req *const *reqs, unsigned n)
{
	struct walk *w = n >= 2 ? malloc(sizeof(*w) + n * sizeof(w->r[0])) : NULL;

	for (unsigned i = 0; i < n; i++) {
		reqs[i]->ch = ch;
		reqs[i]->passed = 0;
		reqs[i]->walk = NULL;
	}
	if (!w) {
		/* one request, or no memory for a batch: each walks alone */
		for (unsigned i = 0; i < n; i++) {
			reqs[i]->level = 0;
			ask(reqs[i]);
		}
		return;
	}
	w->ch = ch;
	w->level = 0;
	w->n = n;
	for (unsigned i = 0; i < n; i++)
		w->r[i] = reqs[i];
	if (last(ch, 0))
		walk_store(w);
	else
		walk_level(w);
}

void chain_put(const struct chain *ch, struct chain_req *r, int err)
{
	for (uint8_t i = 0; i + 1 < ch->n; i++) {
		if (!(r->passed & (1u << i)) || !ch->t[i].ops->put)
			continue;
		r->io.priv = &r->priv[i];
		ch->t[i].ops->put(ch->t[i].self, &r->io, err);
	}
}

void chain_put_written(const struct chain *ch, const struct tier_io *io)
{
	void *none = NULL;
	struct tier_io w = *io;

	w.written = true;
	for (uint8_t i = 0; i + 1 < ch->n; i++) {
		if (!ch->t[i].ops->put)
			continue;
		none = NULL;
		w.priv = &none;
		ch->t[i].ops->put(ch->t[i].self, &w, 0);
	}
}

uint64_t chain_room(const struct chain *ch)
{
	uint64_t room = UINT64_MAX;

	for (uint8_t i = 0; i + 1 < ch->n; i++) {
		uint64_t r = ch->t[i].ops->room ? ch->t[i].ops->room(ch->t[i].self) : UINT64_MAX;

		if (r < room)
			room = r;
	}
	return room;
}

void chain_drop(const struct chain *ch, struct cache_oid oid)
{
	for (uint8_t i = 0; i < ch->n; i++)
		if (ch->t[i].ops->drop)
			ch->t[i].ops->drop(ch->t[i].self, oid);
}
