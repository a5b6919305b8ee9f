/*
 * fleet.c - the fleet tier (shared=): blocks shared by every mount of a fleet in Redis, and
 * the fleet's lagging budget, as a tier of the cache's chain (cache/tier.h) with a gate of its
 * own.
 *
 *   chain: [disk] ─► fleet ─► store
 *
 *   get(block) ─► GET key + SET lock NX ─► value ─► fv_check ok ─► tier_answer(0)  (a hit)
 *                   │   │                     └─ refused: counted, logged once ─┐
 *                   │   └─ nil, lock held by another: detach; re-GET on a timer ─┤ (after the
 *                   │                                                            │  bound)
 *                   └─ nil (the lock is ours), timeout, error, Redis down ───────┤
 *                                                                                ▼
 *                                    tier_answer(miss): the chain goes on (lagging: through
 *                                    this tier's gate, the fleet budget) to the store
 *   put(block, bytes) ─► SET key value in the background (if this get will fill), then DEL
 *                        the lock after it on the same connection
 *
 * The fetch lock: N mounts that miss one block at the same instant would all fetch it (three
 * mounts reading the same new objects at full speed: 2.25x the objects at the store). So a
 * GET of a fetch that will fill Redis carries "SET <prefix>lock:{<key>} 1 NX PX bound" in the
 * same round trip (backend/redis.c pipelines them). The winner misses, the store is read, and
 * put SETs the value, then DELs the lock after the SET on the same connection (at once if it
 * has no value to write, or the read failed); meanwhile backend/redis.c renews the lock's PX,
 * so a value that waits behind the mount's earlier SETs keeps its lock, and only a holder
 * that died lets it expire. A loser detaches from its batch (tier_detach: the rest of the
 * batch goes on to the store together) and re-GETs (with the lock again, so that a lock
 * deleted without a value is taken over) on the I/O loop's timer, 2 ms doubling to 16 ms,
 * until it gets the value or the bound passes (wait_ns: 10 x shared_timeout, also the lock's
 * PX), then misses. A dead holder costs at most that. A fetch that does not fill (lagging,
 * shared_fill_lagging off) neither takes nor waits for a lock.
 *
 * A value of the block's size is parsed straight into the block (backend/redis.h,
 * bk_redis_into: header to the fetch, data to the ring) and checked there; the ring does not
 * serve the block before the hit is answered, and a value refused is overwritten by the
 * store's bytes.
 *
 * The key is the block's (cache/fleet_value.h: prefix, oid, block index, block size), so two
 * block sizes never mix and two fleets with two prefixes never meet. A value is served only
 * when its framing names this very block and its MAC checks under the fleet's key
 * (shared_key: whoever can write to Redis cannot make one; backend/mac.c), or, without a key,
 * its CRC-32C matches (which stops accidents only: the mount says so at start). Anything else
 * is counted as "rejected" and the block comes from the store (and the right value is
 * written over it). The key file must be its owner's alone (load_key).
 * Redis is asked only from the I/O thread (backend/redis.c): the FUSE worker that misses has
 * already returned, and a Redis that is slow costs a read at most shared_timeout before the
 * store is asked (default 50 ms: see the option's comment in opts.c). SETs go on their own
 * connection (backend/redis.c), so a GET never waits for a SET's bytes. A block read from the
 * store is offered to Redis if hot (or written through the mount); a lagging one only with
 * shared_fill_lagging, because a replay reads every old block once and would wash out the
 * blocks the fleet's tail readers share (and the fleet budget exists so that replays do not
 * cost the store much: their blocks are not worth Redis memory by default).
 *
 * Fleet budget (fleet_lagging_rate, fleet_lagging_ops): the source of this tier's gate. A
 * lagging block that missed here passes the gate, taking len bytes and one op from this
 * host's tokens before going to the store (the local limiter, lagging_rate, has passed it
 * already). Tokens come from one token bucket in Redis, held by FLEET_SCRIPT, which every
 * host calls atomically: it refills the bucket by elapsed time (Redis's own clock, so hosts'
 * clocks do not matter) and grants the asked chunk whole, now or from a time it names (lent
 * ahead, so a host waiting for tokens does not ask again), or says how long to wait. A host
 * asks for a chunk of at least rate/8 bytes, so the whole fleet calls Redis a few times a
 * second, and only one call per host is in flight; fetches that find no tokens wait in the
 * gate's FIFO, on nobody's thread. If Redis cannot answer, the host falls back to its local
 * limits at once (one log line), and tries Redis again after a second; a grant then logs that
 * the fleet budget is back.
 *
 * Locking: the budget's state (tokens, fallback) is the gate's: read and written only under
 * its lock (in take, and in the functions gate_update runs). sh->asking (one grant call at a
 * time) and the stats are atomics. A block's state (struct sfetch) is touched by one thread
 * at a time: the I/O thread while Redis answers, then whoever calls put. Every get is
 * answered exactly once, from the I/O thread or, if nothing could be started, from the
 * caller's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "fleet.h"
#include "fleet_value.h"
#include "mac.h"
#include "redis.h"

_Static_assert(BK_MAC_SALT_LEN == FV_SALT_LEN && BK_MAC_TAG_LEN == FV_TAG_LEN,
	       "backend/mac.h makes the salts and tags fleet_value.h frames");

#define PUT_LIMIT      (64u << 20)             /* bytes of SETs queued at once */
#define FLEET_RETRY_NS (1000 * 1000000ULL)     /* Redis failed: local limits this long */
#define FLEET_WAIT_MAX (1000 * 1000000ULL)     /* longest wait before asking again */
#define FLEET_EVAL_TIMEOUT_NS (200 * 1000000ULL) /* a grant is not on a reader's tail path */
#define WAIT_FACTOR    10                      /* the fetch lock's bound: shared_timeout x this */
#define POLL_FIRST_NS  (2 * 1000000ULL)        /* a lock loser's first re-GET, then doubled */
#define POLL_MAX_NS    (16 * 1000000ULL)       /* ... up to this */

/*
 * KEYS[1]: the bucket (a hash: tok, ops, ts). ARGV: rate (bytes/s), burst (bytes), bytes
 * wanted, ops rate (/s, 0 none), ops burst, ops wanted. Returns {granted 1/0, wait in µs}:
 * {1, 0} the chunk is the caller's now; {1, w} it is the caller's, to use after w µs (the
 * bucket lends it ahead: its tokens go below zero, and refill pays them back); {0, w} the
 * bucket already owes a second's worth, ask again after w µs (so a lent chunk is due within
 * FLEET_WAIT_MAX, and each host holds at most one: up to about 8 hosts are never refused).
 * Lending ahead makes every call a grant while the fleet is at its rate: answering "wait"
 * instead had hosts that wanted the same tokens ask again and again (three replaying mounts
 * at 30M: 241 calls for 66 grants; lending: 66 for 66).
 * Idle buckets expire after a minute.
 */
static const char FLEET_SCRIPT[] =
	"local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
	"local orate, oburst, owant = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"local v = redis.call('HMGET', KEYS[1], 'tok', 'ops', 'ts')\n"
	"local tok, ops, ts = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])\n"
	"if not ts then tok, ops, ts = burst, oburst, now end\n"
	"local dt = math.max(0, now - ts)\n"
	"if rate > 0 then tok = math.min(burst, tok + dt * rate / 1e6) end\n"
	"if orate > 0 then ops = math.min(oburst, ops + dt * orate / 1e6) end\n"
	"local wait = 0\n"
	"if rate > 0 and tok < want then wait = (want - tok) * 1e6 / rate end\n"
	"if orate > 0 and ops < owant then wait = math.max(wait, (owant - ops) * 1e6 / orate) end\n"
	"local ok = 1\n"
	"if wait > 1000000 then\n"
	"  ok = 0\n"
	"else\n"
	"  if rate > 0 then tok = tok - want end\n"
	"  if orate > 0 then ops = ops - owant end\n"
	"end\n"
	"redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'ops', tostring(ops), 'ts', now)\n"
	"redis.call('PEXPIRE', KEYS[1], 60000)\n"
	"return {ok, math.ceil(wait)}\n";

/* One block asked of Redis: from get until put (or a hit). */
struct sfetch {
	struct fleet *sh;
	struct tier_io *io;       /* the cache's request; NULL once answered */
	bool put;                 /* offer the store's bytes to Redis */
	bool locked;              /* this fetch holds the block's fetch lock: DEL it when done */
	bool waited;              /* it lost the lock and waited for the holder's value */
	bool answered;            /* Redis answered it once (a miss is counted once) */
	uint64_t deadline;        /* a loser misses after this (now_ns) */
	uint64_t poll_ns;         /* its next re-GET's delay */
	struct bk_redis_into into; /* a value of the block's size: header to hdr, data to dst */
	unsigned char hdr[FV_HDR_LEN];
	char key[FV_KEY_MAX];
	char lock[FV_PREFIX_MAX + FV_KEY_MAX + 8]; /* "<prefix>lock:{<key>}": the key is its hash
						    * tag, so on a Redis Cluster the lock is in
						    * the value's slot (backend/cluster.h) */
};

struct fleet {
	struct backend *b;
	struct cache_env env;     /* the mount's clock (mono_ns) */
	void (*log)(void *arg, int level, const char *obj, const char *cause, const char *line);
	void *log_arg;
	struct bk_redis *bs;
	struct bk_mac *mac;       /* the fleet's key (shared_key), or NULL: values carry a CRC */
	struct fv_mac fvm;        /* mac, as fleet_value.c calls it */
	uint32_t block_size;
	char prefix[FV_PREFIX_MAX + 1];
	bool fill_lagging;
	uint64_t wait_ns;         /* the fetch lock's bound (and its PX) */
	uint64_t fleet_rate, fleet_ops; /* 0: no budget of that kind */
	char fleet_key[FV_PREFIX_MAX + 32];

	struct gate gate;         /* the budget's queue; lagging misses pass it */
	double tok, ops;          /* tokens this host holds; gate.lock */
	bool fallback;            /* Redis failed: local limits only; gate.lock, read relaxed */
	uint64_t fallback_until;  /* when to ask Redis again; gate.lock */
	bool asking;              /* a grant call, its retry timer or a lent chunk's timer is
				   * pending (atomic) */
	uint64_t pending_bytes, pending_ops; /* asked in the call in flight, then lent until its
					      * timer; written by ask, read after its answer */

	struct fleet_stats st; /* relaxed atomics */
};

/* The mount's monotonic clock. */
static uint64_t now_ns(const struct fleet *sh)
{
	return sh->env.mono_ns(sh->env.arg);
}

/* One line about @obj (held back by the mount when it repeats: see fleet_cfg.log). */
__attribute__((format(printf, 5, 6))) static void say(const struct fleet *sh, int level,
						     const char *obj, const char *cause,
						     const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!sh->log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	sh->log(sh->log_arg, level, obj, cause, line);
}

#define STAT_ADD(sh, f, v) __atomic_fetch_add(&(sh)->st.f, (v), __ATOMIC_RELAXED)
#define MAC(sh)            ((sh)->mac ? &(sh)->fvm : NULL)

/* ---- the fleet budget: the gate's source ------------------------------------------------------- */

/* Take @bytes and one op from this host's tokens (the gate's lock held). In fallback, every
 * fetch passes until the pause is over; then the next one waits for Redis's answer: the
 * probe. */
static uint64_t budget_take(void *src, uint64_t bytes, uint64_t now_ns)
{
	struct fleet *sh = src;

	if (sh->fallback)
		return now_ns < sh->fallback_until ? 0 : GATE_LATER;
	if ((sh->fleet_rate && sh->tok < (double)bytes) || (sh->fleet_ops && sh->ops < 1))
		return GATE_LATER;
	if (sh->fleet_rate)
		sh->tok -= (double)bytes;
	if (sh->fleet_ops)
		sh->ops -= 1;
	return 0;
}

static double budget_tokens(void *src, uint64_t now_ns)
{
	return ((struct fleet *)src)->tok;
}

/* What a grant call's answer does to the budget, under the gate's lock (gate_update). */
struct grant {
	int err;            /* the call failed: fall back */
	bool add;           /* the pending chunk is ours now */
	bool log_down, log_back; /* out: what to log */
};

static void grant_apply(void *src, void *arg)
{
	struct fleet *sh = src;
	struct grant *g = arg;

	if (g->err < 0) {
		g->log_down = !sh->fallback;
		__atomic_store_n(&sh->fallback, true, __ATOMIC_RELAXED);
		sh->fallback_until = now_ns(sh) + FLEET_RETRY_NS;
		return;
	}
	g->log_back = sh->fallback;
	__atomic_store_n(&sh->fallback, false, __ATOMIC_RELAXED);
	if (g->add) {
		sh->tok += (double)sh->pending_bytes;
		sh->ops += (double)sh->pending_ops;
	}
}

/* The budget changed (@g): let the gate drain, and ask again if it must. */
static void budget_update(struct fleet *sh, struct grant *g)
{
	__atomic_store_n(&sh->asking, false, __ATOMIC_RELEASE);
	gate_update(&sh->gate, grant_apply, g);
	if (g->log_down) {
		STAT_ADD(sh, fleet_fallbacks, 1);
		say(sh, LOG_WARNING, "shared", "fleet budget",
			    "fleet lagging budget: Redis cannot grant (%s): local lagging limits "
			    "only until it answers", strerror(g->err < 0 ? -g->err : EPROTO));
	}
	if (g->log_back)
		say(sh, LOG_INFO, "shared", "fleet budget back",
			    "fleet lagging budget: Redis grants again");
}

/* A chunk lent ahead is due: it is this host's now. */
static void lent_due(void *arg)
{
	struct grant g = {.add = true};

	budget_update(arg, &g);
}

/* A refusal's wait is over: the gate may ask again. */
static void ask_later(void *arg)
{
	struct grant g = {0};

	budget_update(arg, &g);
}

/* After @wait_ns: a chunk lent ahead becomes ours (@lent), or the gate may ask again. sh->asking
 * stays set until then: one chunk lent to a host at a time. No timer (stopping): now. */
static void budget_update_later(struct fleet *sh, bool lent, uint64_t wait_ns)
{
	void (*fn)(void *) = lent ? lent_due : ask_later;

	if (backend_defer(sh->b, wait_ns, fn, sh) < 0)
		fn(sh);
}

static void granted(void *arg, int err, const long long *vals, int n)
{
	struct fleet *sh = arg;
	struct grant g = {.err = err < 0 ? err : n < 2 ? -EPROTO : 0};
	uint64_t wait_ns = 0;

	if (g.err < 0) {
		STAT_ADD(sh, fleet_errors, 1);
		budget_update(sh, &g);
		return;
	}
	wait_ns = (uint64_t)vals[1] * 1000;
	if (wait_ns > FLEET_WAIT_MAX)
		wait_ns = FLEET_WAIT_MAX;
	if (vals[0] == 1)
		STAT_ADD(sh, fleet_grants, 1);
	if (wait_ns)
		STAT_ADD(sh, fleet_waits, 1);
	if (vals[0] == 1 && wait_ns == 0) {
		g.add = true;
		budget_update(sh, &g);
		return;
	}
	/* lent ahead (one chunk at a time: asking stays set until it is due), or refused: ask
	 * again after the wait; if no timer can be set (stopping), now */
	if (vals[0] != 1 && wait_ns < 1000000)
		wait_ns = 1000000;
	budget_update_later(sh, vals[0] == 1, wait_ns);
}

/* The gate found no tokens for a waiter of @bytes: ask Redis for a chunk big enough. */
static void budget_ask(void *src, uint64_t bytes)
{
	struct fleet *sh = src;
	char a[6][24];
	const char *args[6] = {a[0], a[1], a[2], a[3], a[4], a[5]};
	uint64_t want = 0, owant = 0, burst, oburst;
	int e;

	if (__atomic_exchange_n(&sh->asking, true, __ATOMIC_ACQ_REL))
		return; /* one call at a time: its answer drains the gate */
	if (sh->fleet_rate)
		want = sh->fleet_rate / 8 > bytes ? sh->fleet_rate / 8 : bytes;
	if (sh->fleet_ops)
		owant = sh->fleet_ops / 8 ? sh->fleet_ops / 8 : 1;
	sh->pending_bytes = want;
	sh->pending_ops = owant;
	/* the bucket holds half a second, and always one chunk of any host */
	burst = sh->fleet_rate / 2 > 2ULL * sh->block_size ? sh->fleet_rate / 2 : 2ULL * sh->block_size;
	oburst = sh->fleet_ops / 2 > 2 ? sh->fleet_ops / 2 : 2;
	snprintf(a[0], sizeof(a[0]), "%" PRIu64, sh->fleet_rate);
	snprintf(a[1], sizeof(a[1]), "%" PRIu64, burst);
	snprintf(a[2], sizeof(a[2]), "%" PRIu64, want);
	snprintf(a[3], sizeof(a[3]), "%" PRIu64, sh->fleet_ops);
	snprintf(a[4], sizeof(a[4]), "%" PRIu64, oburst);
	snprintf(a[5], sizeof(a[5]), "%" PRIu64, owant);
	STAT_ADD(sh, fleet_calls, 1);
	e = bk_redis_eval(sh->bs, FLEET_SCRIPT, sh->fleet_key, args, 6, FLEET_EVAL_TIMEOUT_NS,
			  granted, sh);
	if (e < 0)
		granted(sh, e, NULL, 0);
}

static const struct gate_src_ops budget_ops = {
	.take = budget_take,
	.ask = budget_ask,
	.tokens = budget_tokens,
};

/* ---- the fleet tier ------------------------------------------------------------------------------ */

static void ask_value(struct sfetch *f);

/* Answer the cache: a hit (@err 0), or a miss; a miss keeps @f for put (a hit frees it). */
static void answer(struct sfetch *f, int err)
{
	struct tier_io *io = f->io;

	f->io = NULL;
	if (err == 0) {
		*io->priv = NULL;
		free(f);
	}
	tier_answer(io, err);
}

/* A miss: the store is read next, and its bytes are offered to Redis if @redis_ok and the
 * block is one the fleet keeps. */
static void miss(struct sfetch *f, bool redis_ok)
{
	f->put = redis_ok && (!f->io->lagging || f->sh->fill_lagging);
	answer(f, -ENOENT);
}

static void poll_again(void *arg)
{
	ask_value(arg);
}

/* Another mount holds the block's fetch lock: wait for its value, up to the bound. */
static void lost_lock(struct sfetch *f)
{
	struct fleet *sh = f->sh;
	uint64_t now = now_ns(sh), d = f->poll_ns;

	if (!f->waited) {
		f->waited = true;
		f->deadline = now + sh->wait_ns;
		STAT_ADD(sh, lock_waits, 1);
		tier_detach(f->io); /* the rest of its batch goes on without it */
	}
	if (now >= f->deadline) {
		/* the holder is slow or dead: what waiting saved is lost, not more */
		STAT_ADD(sh, lock_gave_up, 1);
		miss(f, true);
		return;
	}
	if (d > f->deadline - now)
		d = f->deadline - now;
	f->poll_ns = f->poll_ns * 2 < POLL_MAX_NS ? f->poll_ns * 2 : POLL_MAX_NS;
	/* the re-GET on the I/O loop's timer: no thread waits; stopping, now */
	if (backend_defer(sh->b, d, poll_again, f) < 0)
		miss(f, false);
}

/* What fv_check's @r says of a value, for the log. */
static const char *refusal(int r)
{
	switch (r) {
	case -EBADMSG:
		return "checksum or length mismatch";
	case -ESTALE:
		return "another block's value";
	case -ENOKEY:
		return "no MAC: not written with shared_key";
	case -EKEYREJECTED:
		return "MAC mismatch: forged, or another key's";
	case -EPROTO:
		return "not a tierfs value of this format";
	default:
		return "cannot be checked";
	}
}

/* A value came: check it in place (val NULL: it was of the block's size and went to f->hdr
 * and the block), or copy it in. */
static void got_value(struct sfetch *f, const void *val, size_t vlen)
{
	struct fleet *sh = f->sh;
	const struct tier_io *io = f->io;
	const void *data;
	int r;

	r = val ? fv_check(val, vlen, io->key, sh->block_size, io->len, MAC(sh), &data)
		: fv_check_parts(f->hdr, io->dst, vlen, io->key, sh->block_size, io->len, MAC(sh));
	if (r < 0) {
		STAT_ADD(sh, rejected, 1);
		if (r == -ENOKEY || r == -EKEYREJECTED)
			STAT_ADD(sh, mac_rejected, 1);
		say(sh, LOG_WARNING, f->key, "shared value rejected",
			    "shared tier: the value of %s was refused (%s): read from the store",
			    f->key, refusal(r));
		miss(f, true);
		return;
	}
	if (val)
		memcpy(io->dst, data, io->len);
	STAT_ADD(sh, hits, 1);
	STAT_ADD(sh, hit_bytes, io->len);
	if (f->waited)
		STAT_ADD(sh, lock_wait_hits, 1);
	answer(f, 0);
}

static void got(void *arg, int err, const void *val, size_t vlen)
{
	struct sfetch *f = arg;
	struct fleet *sh = f->sh;
	bool first = !f->answered;

	f->answered = true;
	if ((err == -ENOENT || err == -EBUSY) && first)
		STAT_ADD(sh, misses, 1);
	if (err == -ENOENT) {
		/* the lock is ours (or there is none: a lagging fetch that does not fill) */
		f->locked = f->lock[0] != 0;
		if (f->locked)
			STAT_ADD(sh, lock_wins, 1);
		miss(f, true);
	} else if (err == -EBUSY) {
		lost_lock(f);
	} else if (err == -ETIMEDOUT && f->lock[0]) {
		/* slow, not down: the lock may be ours, and the value is worth putting (the put
		 * queue bounds what a slow Redis costs) */
		STAT_ADD(sh, unavailable, 1);
		f->locked = true;
		miss(f, true);
	} else if (err < 0) {
		STAT_ADD(sh, unavailable, 1);
		miss(f, false);
	} else {
		got_value(f, val, vlen);
	}
}

/* Ask Redis for @f's block: with the fetch lock when this fetch would fill the shared tier
 * (f->lock set), else a plain GET. */
static void ask_value(struct sfetch *f)
{
	struct fleet *sh = f->sh;
	int e;

	if (f->lock[0])
		e = bk_redis_get_lock(sh->bs, f->key, f->lock, sh->wait_ns / 1000000, &f->into,
				      got, f);
	else
		e = bk_redis_get(sh->bs, f->key, &f->into, got, f);
	if (e < 0) {
		STAT_ADD(sh, unavailable, 1);
		miss(f, false);
	}
}

static int fleet_get(void *self, struct tier_io *io)
{
	struct fleet *sh = self;
	struct sfetch *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	*f = (struct sfetch){.sh = sh, .io = io, .poll_ns = POLL_FIRST_NS};
	*io->priv = f;
	fv_key(f->key, sizeof(f->key), sh->prefix, io->key, sh->block_size);
	/* only a fetch that will fill the shared tier takes the lock: others would wait for a
	 * value that a lagging holder (shared_fill_lagging off) never writes */
	if (!io->lagging || sh->fill_lagging)
		snprintf(f->lock, sizeof(f->lock), "%slock:{%s}", sh->prefix, f->key);
	f->into = (struct bk_redis_into){.hdr = f->hdr, .hlen = FV_HDR_LEN, .data = io->dst,
					 .dlen = io->len};
	ask_value(f);
	return 0;
}

/* SET @io's bytes under @key, framed and, with a key, MACed under a fresh salt; @return true
 * if queued. */
static bool set_value(struct fleet *sh, const char *key, const struct tier_io *io)
{
	unsigned char hdr[FV_HDR_LEN], salt[FV_SALT_LEN] = {0};

	if ((sh->mac && bk_mac_salt(sh->mac, salt) < 0) ||
	    fv_header(hdr, io->key, sh->block_size, io->dst, io->len, MAC(sh), salt) < 0)
		return false;
	return bk_redis_put(sh->bs, key, hdr, sizeof(hdr), io->dst, io->len) == 0;
}

/* The block this tier missed was read from below (@err 0) or not: put it (if it is one the
 * fleet keeps and Redis answered), then let go of the fetch lock after the SET on the same
 * connection: a loser that polls after the DEL finds the value; if the SET was dropped (or the
 * read failed), the DEL goes at once, and the loser takes the lock and reads. A block written
 * through the mount (no get before) is put as it is. */
static void fleet_put(void *self, const struct tier_io *io, int err)
{
	struct fleet *sh = self;
	struct sfetch *f = *io->priv;
	char key[FV_KEY_MAX];
	bool queued = false;

	if (!f) {
		if (!err && io->written) {
			fv_key(key, sizeof(key), sh->prefix, io->key, sh->block_size);
			set_value(sh, key, io);
		}
		return;
	}
	*io->priv = NULL;
	STAT_ADD(sh, store_fetches, 1);
	if (err == 0 && f->put)
		queued = set_value(sh, f->key, io);
	if (f->locked)
		bk_redis_unlock(sh->bs, f->key, f->lock, queued);
	free(f);
}

/* Block bytes the SETs in flight leave room for (put_limit, less a value's header): a written
 * object's blocks are offered at this pace (cache_publish), not dropped past the limit. */
static uint64_t fleet_room(void *self)
{
	struct fleet *sh = self;
	uint64_t room = bk_redis_put_room(sh->bs);

	return room > FV_HDR_LEN ? room - FV_HDR_LEN : 0;
}

/* The fleet tier's rows of /metrics (tier="fleet"): its lookups, its Redis client's calls,
 * the fetch locks, and the fleet budget. */
static void fleet_metrics(void *self, void (*fn)(void *arg, const struct tier_metric *m),
			  void *arg)
{
	struct fleet_stats f;
	struct bk_redis_stats r;

	fleet_get_stats(self, &f, &r);
	_Static_assert(BK_REDIS_LAT_BUCKETS <= TIER_HIST_MAX, "a histogram too long");
	/* clang-format off */
	const struct tier_metric rows[] = {
#define ROW(name, type, v, help) {name, TIER_##type, help, v, 0, NULL, NULL, 0}
	ROW("fleet_hits_total", COUNTER, f.hits,
	    "Blocks served from the fleet tier, their value checked."),
	ROW("fleet_served_bytes_total", COUNTER, f.hit_bytes,
	    "Bytes of blocks served from the fleet tier."),
	ROW("fleet_misses_total", COUNTER, f.misses, "Blocks the fleet tier did not hold."),
	ROW("fleet_rejected_total", COUNTER, f.rejected,
	    "Values refused by the check (wrong bytes, truncated, another block's, foreign): read "
	    "from the store instead."),
	ROW("fleet_mac_rejected_total", COUNTER, f.mac_rejected,
	    "Values of those refused by their MAC (shared_key): forged, written without the key, "
	    "or with another key."),
	ROW("fleet_unavailable_total", COUNTER, f.unavailable,
	    "Lookups Redis did not answer in time, or answered with an error, or could not take "
	    "(down)."),
	ROW("fleet_timeouts_total", COUNTER, r.timeouts,
	    "Redis calls abandoned after shared_timeout."),
	ROW("fleet_timeouts_extended_total", COUNTER, r.extended,
	    "Timeouts a call waited past because the server was sending other replies, or "
	    "answering the ones written before it."),
	ROW("fleet_errors_total", COUNTER, r.errors,
	    "Redis calls failed: server down, connection lost, error reply."),
	ROW("fleet_bad_replies_total", COUNTER, r.bad_replies,
	    "Connections closed for a reply tierfs does not take: longer than a value, an array "
	    "too long or too deep, not RESP, not asked for, or still coming long after its turn."),
	ROW("fleet_received_bytes_total", COUNTER, r.bytes_in, "Value bytes received from Redis."),
	ROW("fleet_puts_total", COUNTER, r.puts, "Blocks written to Redis."),
	ROW("fleet_put_bytes_total", COUNTER, r.put_bytes, "Value bytes written to Redis."),
	ROW("fleet_put_drops_total", COUNTER, r.put_drops,
	    "Blocks not written: too many bytes queued, or the server down."),
	ROW("fleet_put_errors_total", COUNTER, r.put_errors,
	    "Writes refused by Redis or lost with the connection."),
	ROW("fleet_put_queued_bytes", GAUGE, r.put_queued,
	    "Bytes of writes sent to Redis and not answered yet."),
	ROW("fleet_store_fetches_total", COUNTER, f.store_fetches,
	    "Blocks fetched from the store after the fleet tier."),
	ROW("fleet_lock_wins_total", COUNTER, f.lock_wins,
	    "Misses that took the block's fetch lock and fetched it from the store."),
	ROW("fleet_lock_waits_total", COUNTER, f.lock_waits,
	    "Misses that found another mount fetching the block, and waited for it."),
	ROW("fleet_lock_wait_hits_total", COUNTER, f.lock_wait_hits,
	    "Waits served the other mount's value."),
	ROW("fleet_lock_gave_up_total", COUNTER, f.lock_gave_up,
	    "Waits that went to the store after the bound (10 x shared_timeout)."),
	{"fleet_get_seconds", TIER_HISTOGRAM,
	 "Time from a GET written to Redis to its answer (a value or none), late answers "
	 "included: compare with shared_timeout.",
	 0, BK_REDIS_LAT_BUCKETS, r.get_lat, bk_redis_lat_bounds_us, r.get_lat_sum_us},
	ROW("fleet_servers", GAUGE, r.servers,
	    "Redis servers configured, and a cluster's masters found since."),
	ROW("fleet_servers_down", GAUGE, r.servers_down, "Redis servers thought down now."),
	ROW("fleet_redirects_total", COUNTER, r.redirects,
	    "MOVED and ASK answers from a Redis Cluster: a slot moved, or moving."),
	ROW("fleet_slot_maps_total", COUNTER, r.maps,
	    "Slot maps asked of a Redis Cluster (CLUSTER NODES)."),
	ROW("fleet_budget_calls_total", COUNTER, f.fleet_calls,
	    "Fleet budget grant scripts called."),
	ROW("fleet_budget_grants_total", COUNTER, f.fleet_grants, "Fleet budget chunks granted."),
	ROW("fleet_budget_waits_total", COUNTER, f.fleet_waits,
	    "Fleet budget calls told to wait (a chunk lent ahead, or refused): the fleet is at its "
	    "rate."),
	ROW("fleet_budget_errors_total", COUNTER, f.fleet_errors,
	    "Fleet budget calls that failed."),
	ROW("fleet_budget_queued_fetches_total", COUNTER, f.fleet_queued,
	    "Lagging fetches that waited for fleet tokens."),
	ROW("fleet_budget_fallbacks_total", COUNTER, f.fleet_fallbacks,
	    "Times the fleet budget fell back to local limits (Redis failed)."),
	ROW("fleet_budget_fallback", GAUGE, f.fleet_fallback,
	    "1 while the fleet budget is on local limits only."),
#undef ROW
	};
	/* clang-format on */

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fn(arg, &rows[i]);
}

/* `tierfs status`: a row in the tiers' table, and a line of its own. */
static const struct tier_status fleet_status = {
	.hits = "fleet_hits_total",
	.misses = "fleet_misses_total",
	.served = "fleet_served_bytes_total",
	.line = {
		{"servers", "fleet_servers", TIER_ST_VALUE, NULL, NULL},
		{"down", "fleet_servers_down", TIER_ST_VALUE, NULL, NULL},
		{"timeouts", "fleet_timeouts_total", TIER_ST_RATE, NULL, NULL},
		{"errors", "fleet_errors_total", TIER_ST_RATE, NULL, NULL},
		{"budget", "fleet_budget_fallback", TIER_ST_FLAG, "ON LOCAL LIMITS", "ok"},
	},
};

static void fleet_close(void *self)
{
	fleet_free(self);
}

const struct tier_ops fleet_tier_ops = {
	.name = "fleet",
	.get = fleet_get,
	.put = fleet_put,
	.room = fleet_room,
	.metrics = fleet_metrics,
	.status = &fleet_status,
	.close = fleet_close,
};

struct tier fleet_tier(struct fleet *sh)
{
	bool budget = sh->fleet_rate || sh->fleet_ops;

	return (struct tier){.ops = &fleet_tier_ops, .self = sh, .gate = budget ? &sh->gate : NULL};
}

/* ---- setup ------------------------------------------------------------------------------------- */

/* The password: $TIERFS_SHARED_PASSWORD, else the first line of @file, read with read(2)
 * into a buffer zeroed after (stdio's buffer was freed with the password in it).
 * @return 0 and a malloc'd *ret (NULL: none), or -errno. */
static int password(const char *file, char **ret)
{
	const char *env = getenv("TIERFS_SHARED_PASSWORD");
	char line[512];
	ssize_t n;
	int fd;

	*ret = NULL;
	if (env && *env)
		return (*ret = strdup(env)) ? 0 : -ENOMEM;
	if (!file)
		return 0;
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	n = read(fd, line, sizeof(line) - 1);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n < 0)
		return (int)n;
	line[n] = 0;
	line[strcspn(line, "\r\n")] = 0;
	*ret = line[0] ? strdup(line) : NULL;
	explicit_bzero(line, sizeof(line));
	return 0;
}

static int mac_tag(void *arg, const unsigned char *salt, const void *a, size_t alen,
		   const void *b, size_t blen, unsigned char *ret_tag)
{
	return bk_mac_tag(arg, salt, a, alen, b, blen, ret_tag);
}

/* Read the key file @fd (@file) into @buf (BK_MAC_KEY_MAX + 1 bytes). @return its length,
 * or -errno with one line in @err. */
static ssize_t key_bytes(int fd, const char *file, unsigned char *buf, char *err, size_t errlen)
{
	struct stat st;
	size_t n = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "shared_key=%s: not a regular file", file);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen, "shared_key=%s: group or others may read or write it (mode "
			 "%04o): chmod 600 it", file, (unsigned)(st.st_mode & 07777));
		return -EACCES;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(err, errlen,
			 "shared_key=%s: owned by uid %u, not by tierfs's user or root", file,
			 (unsigned)st.st_uid);
		return -EACCES;
	}
	while (n <= BK_MAC_KEY_MAX) {
		ssize_t r = read(fd, buf + n, BK_MAC_KEY_MAX + 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "shared_key=%s: %s", file, strerror(errno));
			return -errno;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n < BK_MAC_KEY_MIN || n > BK_MAC_KEY_MAX) {
		snprintf(err, errlen,
			 "shared_key=%s: %s%zu bytes; a key is %u to %u bytes (head -c 32 "
			 "/dev/urandom > FILE)", file, n > BK_MAC_KEY_MAX ? "more than " : "",
			 n > BK_MAC_KEY_MAX ? (size_t)BK_MAC_KEY_MAX : n, BK_MAC_KEY_MIN,
			 BK_MAC_KEY_MAX);
		return -EINVAL;
	}
	return (ssize_t)n;
}

/*
 * The fleet's key, from shared_key=@file: all of the file's bytes. As ssh does with a
 * private key, a file that others may read is refused (a key others can read is a key a
 * forger may have), as is one owned by another user but root. Read with read(2) into a
 * buffer zeroed after, so no stdio buffer keeps a copy; only what backend/mac.c derives from
 * it stays. @return 0 and *ret_mac, or -errno with one line in @err.
 */
static int load_key(const char *file, struct bk_mac **ret_mac, char *err, size_t errlen)
{
	unsigned char buf[BK_MAC_KEY_MAX + 1];
	int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	ssize_t n;
	int e;

	if (fd < 0) {
		e = -errno;
		snprintf(err, errlen, "shared_key=%s: %s", file, strerror(-e));
		return e;
	}
	n = key_bytes(fd, file, buf, err, errlen);
	close(fd);
	e = n < 0 ? (int)n : bk_mac_new(buf, (size_t)n, ret_mac);
	explicit_bzero(buf, sizeof(buf));
	if (n >= 0 && e < 0)
		snprintf(err, errlen, "shared_key: no MAC from OpenSSL: %s", strerror(-e));
	return e;
}

/* The Redis client, with the password from shared_password_file or the environment. */
static int connect_redis(struct fleet *sh, const struct fleet_cfg *cfg, char *err,
			 size_t errlen)
{
	char *pw = NULL;
	int e = password(cfg->password_file, &pw);

	if (e < 0) {
		snprintf(err, errlen, "shared_password_file=%s: %s", cfg->password_file,
			 strerror(-e));
		return e;
	}
	struct bk_redis_cfg c = {
		.servers = cfg->servers,
		.password = pw,
		.timeout_ns = cfg->timeout_ms * 1000000ULL,
		.put_limit = PUT_LIMIT,
		.max_value = FV_HDR_LEN + cfg->block_size, /* a value, and nothing longer */
	};
	e = bk_redis_new(cfg->b, &c, &sh->bs, err, errlen);
	if (pw) {
		explicit_bzero(pw, strlen(pw));
		free(pw);
	}
	return e;
}

int fleet_new(const struct fleet_cfg *cfg, struct fleet **ret, char *err, size_t errlen)
{
	struct fleet *sh = calloc(1, sizeof(*sh));
	int e;

	if (!sh)
		return -ENOMEM;
	sh->log = cfg->log;
	sh->log_arg = cfg->log_arg;
	sh->env = cfg->env;
	e = cfg->key_file ? load_key(cfg->key_file, &sh->mac, err, errlen) : 0;
	if (e == 0)
		e = connect_redis(sh, cfg, err, errlen);
	if (e < 0) {
		bk_mac_free(sh->mac);
		free(sh);
		return e;
	}
	if (!sh->mac)
		say(sh, LOG_WARNING, NULL, NULL,
		    "shared tier without shared_key: Redis must be trusted as much as the store");
	sh->fvm = (struct fv_mac){.fn = mac_tag, .arg = sh->mac};
	/* Every block through Redis passes through block-sized buffers (the value, hiredis's
	 * command and output buffer, its reply). glibc gives each its own mmap and unmaps it
	 * when freed, so every block paid a page fault per 4 KiB, three times over. Keep such
	 * buffers in the heap for reuse instead (put_limit bounds how many exist at once). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	sh->b = cfg->b;
	sh->block_size = cfg->block_size;
	snprintf(sh->prefix, sizeof(sh->prefix), "%s", cfg->prefix ? cfg->prefix : "");
	snprintf(sh->fleet_key, sizeof(sh->fleet_key), "%sfleet:lagging", sh->prefix);
	sh->fill_lagging = cfg->fill_lagging;
	sh->wait_ns = WAIT_FACTOR * cfg->timeout_ms * 1000000ULL;
	sh->fleet_rate = cfg->fleet_rate;
	sh->fleet_ops = cfg->fleet_ops;
	gate_init(&sh->gate, &budget_ops, sh, 0, &sh->env); /* the I/O loop's timers */
	*ret = sh;
	return 0;
}

void fleet_free(struct fleet *sh)
{
	if (!sh)
		return;
	bk_redis_free(sh->bs);
	bk_mac_free(sh->mac);
	gate_done_all(&sh->gate);
	free(sh);
}

void fleet_get_stats(struct fleet *sh, struct fleet_stats *ret, struct bk_redis_stats *ret_redis)
{
	struct fleet_stats *s = &sh->st;

	ret->hits = __atomic_load_n(&s->hits, __ATOMIC_RELAXED);
	ret->hit_bytes = __atomic_load_n(&s->hit_bytes, __ATOMIC_RELAXED);
	ret->misses = __atomic_load_n(&s->misses, __ATOMIC_RELAXED);
	ret->rejected = __atomic_load_n(&s->rejected, __ATOMIC_RELAXED);
	ret->mac_rejected = __atomic_load_n(&s->mac_rejected, __ATOMIC_RELAXED);
	ret->unavailable = __atomic_load_n(&s->unavailable, __ATOMIC_RELAXED);
	ret->store_fetches = __atomic_load_n(&s->store_fetches, __ATOMIC_RELAXED);
	ret->lock_wins = __atomic_load_n(&s->lock_wins, __ATOMIC_RELAXED);
	ret->lock_waits = __atomic_load_n(&s->lock_waits, __ATOMIC_RELAXED);
	ret->lock_wait_hits = __atomic_load_n(&s->lock_wait_hits, __ATOMIC_RELAXED);
	ret->lock_gave_up = __atomic_load_n(&s->lock_gave_up, __ATOMIC_RELAXED);
	ret->fleet_calls = __atomic_load_n(&s->fleet_calls, __ATOMIC_RELAXED);
	ret->fleet_grants = __atomic_load_n(&s->fleet_grants, __ATOMIC_RELAXED);
	ret->fleet_waits = __atomic_load_n(&s->fleet_waits, __ATOMIC_RELAXED);
	ret->fleet_errors = __atomic_load_n(&s->fleet_errors, __ATOMIC_RELAXED);
	ret->fleet_fallbacks = __atomic_load_n(&s->fleet_fallbacks, __ATOMIC_RELAXED);
	ret->fleet_fallback = __atomic_load_n(&sh->fallback, __ATOMIC_RELAXED);
	struct gate_stats gs;
	gate_get_stats(&sh->gate, &gs);
	ret->fleet_queued = gs.waits + gs.queued;
	bk_redis_get_stats(sh->bs, ret_redis);
}
