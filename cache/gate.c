/*
 * gate.c - a limiter's queue: waiters in FIFO order, let through as a token source allows
 * (tier.h). The lagging tier's byte rate (a local token bucket) and the fleet's budget (tokens
 * granted by Redis) are both a gate over a source of their own; the queueing, the timers, the
 * cap on what runs at once and the counters are this file's, written once.
 *
 *     gate_enter(w) ──► FIFO empty, source has tokens ──► true: the caller goes on
 *          │
 *          └─► queued ─► drain: head's take() ─ 0 ────────────► let through: w->go()
 *                  ▲                          ─ wait ns ───────► timer (env->defer) ─┐
 *                  │                          ─ GATE_LATER ───► source->ask()        │
 *                  └──── gate_kick (a grant), gate_done (a place freed), timer ◄─────┘
 *
 * A waiter is let through only when the FIFO ahead of it is empty, so a small request never
 * overtakes a large one that waits for its tokens (each waits its turn, and the rate holds
 * whatever the sizes). With max_running set, no more than that many waiters let through may
 * be unfinished at once (gate_done ends one): the lagging tier's fetches are bounded by what
 * its ring can hold. Without it nothing is counted, and gate_done is not needed.
 *
 * No thread ever sleeps here: a wait is a timer armed on the caller's loop through
 * env->defer, and a source that must ask elsewhere (a Redis script) kicks the gate when its
 * answer comes. Only one timer is kept armed per gate (the earliest due); a timer that fires
 * early or late just drains again.
 *
 * Locking: g->lock guards the FIFO, running, the timer and the counters, and is held across
 * the source's take() (which must not block or call back). go(), ask() and defer() run with
 * no gate lock held; a caller of gate_done, gate_kick and gate_update must hold no lock that
 * a waiter's go() takes. gate_enter and gate_cancel never call go(), so they may be called
 * under such a lock. Workload: one enter per lagging miss, a few thousand a second at most.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache_i.h"
#include "tier.h"

/* A timer token: which gate, and when it was due. */
struct gate_timer {
	struct gate *g;
	uint64_t due;
};

static uint64_t gate_now(struct gate *g)
{
	return g->mono_ns(g->env_arg);
}

void gate_init(struct gate *g, const struct gate_src_ops *ops, void *src, uint64_t max_running,
	       const struct cache_env *env)
{
	*g = (struct gate){.ops = ops, .src = src, .max_running = max_running,
			   .timer_due = UINT64_MAX, .mono_ns = env->mono_ns, .defer = env->defer,
			   .env_arg = env->arg};
	pthread_mutex_init(&g->lock, NULL);
}

void gate_done_all(struct gate *g)
{
	pthread_mutex_destroy(&g->lock);
}

static void gate_fire(void *arg);

/* Arm a timer for @wait ns from @now unless one due no later is armed (g->lock held).
 * @return false if none could be armed (the next enter, done or kick drains). */
static bool arm(struct gate *g, uint64_t now, uint64_t wait)
{
	uint64_t due = now + wait < now ? UINT64_MAX : now + wait;
	struct gate_timer *t;

	if (due >= g->timer_due)
		return true;
	t = malloc(sizeof(*t));
	if (!t)
		return false;
	*t = (struct gate_timer){g, due};
	if (g->defer(g->env_arg, wait, gate_fire, t) < 0) {
		free(t);
		return false;
	}
	g->timer_due = due;
	return true;
}

/* Take the head's tokens if it may go (g->lock held). @return 0 (taken), else the answer of
 * the source (a wait, or GATE_LATER), or GATE_LATER for the running cap. A source that says
 * wait is holding the queue back: g->holds counts it (see drain). */
static uint64_t try_take(struct gate *g, uint64_t bytes, uint64_t now)
{
	uint64_t wait;

	if (g->max_running && g->running >= g->max_running)
		return GATE_LATER; /* gate_done drains */
	wait = g->ops->take(g->src, bytes, now);
	if (wait == 0 && g->max_running)
		g->running++;
	if (wait)
		g->holds++;
	return wait;
}

/* Let through every head the source allows now; note the wait of the first that it does not
 * (g->lock held). @return the waiters let through, linked by next; *ret_ask: call ask(). */
static struct gate_waiter *drain(struct gate *g, uint64_t now, bool *ret_ask)
{
	struct gate_waiter *go = NULL, **tail = &go;

	while (g->head) {
		struct gate_waiter *w = g->head;
		uint64_t wait = try_take(g, w->bytes, now);

		if (wait == GATE_LATER) {
			if (!(g->max_running && g->running >= g->max_running) && !g->asking) {
				g->asking = *ret_ask = true;
				g->ask_bytes = w->bytes;
			}
			break;
		}
		if (wait) {
			arm(g, now, wait);
			break;
		}
		g->head = w->next;
		if (!g->head)
			g->tail = NULL;
		w->next = NULL;
		w->queued = false;
		g->nqueued--;
		/* throttled: the source held the queue while it waited. A wait for the running
		 * cap alone (room in the ring) is not: lagging_rate=0 is never throttled. */
		if (g->holds != w->holds) {
			g->waits++;
			g->waited_ns += now > w->since_ns ? now - w->since_ns : 0;
		}
		*tail = w;
		tail = &w->next;
	}
	return go;
}

/* Drain with no lock held: let the waiters go, and have the source ask if it must. */
static void drain_now(struct gate *g)
{
	struct gate_waiter *go;
	uint64_t bytes;
	bool ask = false;

	pthread_mutex_lock(&g->lock);
	go = drain(g, gate_now(g), &ask);
	bytes = g->ask_bytes;
	pthread_mutex_unlock(&g->lock);
	while (go) {
		struct gate_waiter *w = go;

		go = w->next;
		w->next = NULL;
		w->go(w);
	}
	if (ask && g->ops->ask)
		g->ops->ask(g->src, bytes);
}

static void gate_fire(void *arg)
{
	struct gate_timer *t = arg;
	struct gate *g = t->g;

	pthread_mutex_lock(&g->lock);
	if (g->timer_due == t->due)
		g->timer_due = UINT64_MAX;
	pthread_mutex_unlock(&g->lock);
	free(t);
	drain_now(g);
}

bool gate_enter(struct gate *g, struct gate_waiter *w, uint64_t bytes)
{
	uint64_t now = gate_now(g), wait = GATE_LATER;
	bool ask = false;

	w->bytes = bytes;
	w->next = NULL;
	w->since_ns = 0;
	pthread_mutex_lock(&g->lock);
	w->holds = g->holds;
	if (!g->head) {
		wait = try_take(g, bytes, now);
		if (wait == 0) {
			pthread_mutex_unlock(&g->lock);
			return true;
		}
	}
	w->since_ns = now;
	w->queued = true;
	if (g->tail)
		g->tail->next = w;
	else
		g->head = w;
	g->tail = w;
	g->nqueued++;
	if (g->head == w) {
		if (wait != GATE_LATER)
			arm(g, now, wait);
		else if (!(g->max_running && g->running >= g->max_running) && !g->asking)
			g->asking = ask = true;
	}
	pthread_mutex_unlock(&g->lock);
	if (ask && g->ops->ask)
		g->ops->ask(g->src, bytes);
	return false;
}

bool gate_cancel(struct gate *g, struct gate_waiter *w)
{
	struct gate_waiter **pp, *prev = NULL;
	bool found = false;

	pthread_mutex_lock(&g->lock);
	for (pp = &g->head; *pp; prev = *pp, pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			if (g->tail == w)
				g->tail = prev;
			w->next = NULL;
			w->queued = false;
			g->nqueued--;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&g->lock);
	return found;
}

void gate_done(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	if (g->running)
		g->running--;
	pthread_mutex_unlock(&g->lock);
	drain_now(g);
}

void gate_kick(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->asking = false;
	pthread_mutex_unlock(&g->lock);
	drain_now(g);
}

void gate_update(struct gate *g, void (*fn)(void *src, void *arg), void *arg)
{
	pthread_mutex_lock(&g->lock);
	fn(g->src, arg);
	g->timer_due = UINT64_MAX; /* the armed timer may be late for the new settings */
	g->asking = false;
	pthread_mutex_unlock(&g->lock);
	drain_now(g);
}

struct gate_waiter *gate_flush(struct gate *g)
{
	struct gate_waiter *q;

	pthread_mutex_lock(&g->lock);
	q = g->head;
	g->head = g->tail = NULL;
	g->nqueued = 0;
	pthread_mutex_unlock(&g->lock);
	for (struct gate_waiter *w = q; w; w = w->next)
		w->queued = false;
	return q;
}

void gate_get_stats(struct gate *g, struct gate_stats *ret)
{
	pthread_mutex_lock(&g->lock);
	*ret = (struct gate_stats){.waits = g->waits, .waited_ns = g->waited_ns,
				   .queued = g->nqueued, .running = g->running,
				   .tokens = g->ops->tokens ? g->ops->tokens(g->src, gate_now(g))
							    : 0};
	pthread_mutex_unlock(&g->lock);
}

/* ---- a local token bucket as a source ------------------------------------------------------ */

static uint64_t rl_src_take(void *src, uint64_t bytes, uint64_t now_ns)
{
	uint64_t wait = rl_take(src, bytes, now_ns);

	return wait == GATE_LATER ? GATE_LATER - 1 : wait; /* a saturated wait is still a wait */
}

static double rl_src_tokens(void *src, uint64_t now_ns)
{
	return rl_tokens(src, now_ns);
}

const struct gate_src_ops gate_rl_ops = {
	.take = rl_src_take,
	.tokens = rl_src_tokens,
};
