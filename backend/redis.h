/*
 * redis.h - the client of a shared tier: Redis servers (or Valkey) that a fleet of mounts
 * reads and fills, reached from the backend's I/O thread without blocking anyone.
 *
 * Values are opaque bytes here: what a value means and whether it is right is the caller's
 * business (tiers/fleet.c frames blocks with tiers/fleet_value.h). Keys are spread over the servers by a
 * consistent-hash ring (bk_chash), so adding a server moves only its share of the keys; on a
 * Redis Cluster, found at the first call, by the cluster's own slots (cluster.h).
 * Every call returns at once; its answer comes on the I/O thread.
 */
#ifndef TIERFS_REDIS_H
#define TIERFS_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* ---- the ring: pure code, exposed for tests ----------------------------------------------- */

struct bk_chash_point {
	uint64_t h;       /* position on the ring */
	unsigned srv;     /* the server owning the arc that ends here */
};

struct bk_chash {
	struct bk_chash_point *pts; /* sorted by h */
	unsigned npts;
};

#define BK_CHASH_VNODES 160 /* points per server: shares within a few percent of even */

/* Place @n servers, named @names (their "host:port": a server's name, not its place in the
 * list, fixes its points), @vnodes points each. @return 0 or -ENOMEM/-EINVAL (n 0). */
int bk_chash_build(struct bk_chash *ch, const char *const *names, unsigned n, unsigned vnodes);
void bk_chash_done(struct bk_chash *ch);
/* The server (index into @names) that owns @key. */
unsigned bk_chash_pick(const struct bk_chash *ch, const void *key, size_t len);

/* ---- the client ----------------------------------------------------------------------------- */

struct bk_redis_cfg {
	const char *servers;     /* "host:port[,host:port...]" (a redis:// in front is skipped) */
	const char *password;    /* AUTH with it, or NULL; copied, wiped at free */
	uint64_t timeout_ns;     /* a GET not answered by then is abandoned (-ETIMEDOUT), unless
				  * the server is sending other replies (see redis.c) */
	uint64_t put_limit;      /* bytes of SETs queued at once; beyond it puts are dropped */
	uint64_t max_value;      /* the longest value a server may send: a longer reply closes
				  * the connection before it is buffered (resp.h) */
};

#define BK_REDIS_LAT_BUCKETS 12
extern const uint64_t bk_redis_lat_bounds_us[BK_REDIS_LAT_BUCKETS - 1];

struct bk_redis_stats {
	uint64_t gets;           /* GETs asked */
	uint64_t found;          /* GETs answered with a value */
	uint64_t missing;        /* GETs answered nil */
	uint64_t timeouts;       /* GETs abandoned after timeout_ns */
	uint64_t extended;       /* timeouts waited past: the server was sending other replies,
				  * or answering the ones before the call (see redis.c) */
	uint64_t errors;         /* GETs and scripts failed: server down, refused, error reply;
				  * and connections closed for a bad reply */
	uint64_t bad_replies;    /* connections closed for a reply over its bound, not RESP,
				  * unasked, or still coming long after its turn (see redis.c) */
	uint64_t bytes_in;       /* value bytes received */
	uint64_t puts;           /* SETs answered OK */
	uint64_t put_bytes;      /* value bytes of those */
	uint64_t put_drops;      /* SETs not sent: over put_limit, or the server down */
	uint64_t put_errors;     /* SETs answered with an error or lost with the connection */
	uint64_t put_queued;     /* bytes of SETs sent and not yet answered now */
	uint64_t evals;          /* scripts answered */
	uint64_t servers_down;   /* servers thought down now */
	uint64_t servers;        /* servers configured, and a cluster's masters found since */
	uint64_t redirects;      /* MOVED and ASK answers (a cluster's slot moved or moving) */
	uint64_t maps;           /* a cluster's slot maps asked for (CLUSTER NODES) */
	/* GETs' answers (a value or nil, late ones included: what the server takes, whatever
	 * the timeout) by time from written to answered: get_lat[i] counts those within
	 * bk_redis_lat_bounds_us[i] and over the bound before; the last has no bound */
	uint64_t get_lat[BK_REDIS_LAT_BUCKETS];
	uint64_t get_lat_sum_us;
};

struct bk_redis;

/* Parse @cfg and attach to @b's I/O loop (no connection yet: each server is connected on
 * first use, on the I/O thread). Call while @b's I/O thread is stopped.
 * @return 0 and *ret, or -errno with one line in @err. */
int bk_redis_new(struct backend *b, const struct bk_redis_cfg *cfg, struct bk_redis **ret,
		  char *err, size_t errlen);
/* After backend_stop, before backend_free. Accepts NULL. */
void bk_redis_free(struct bk_redis *s);

/* Answer of a GET: @err 0 and the value (valid during the call only), -ENOENT no such key,
 * -ETIMEDOUT, -ECONNREFUSED (server down), -EIO (error reply), -ESHUTDOWN. With a
 * bk_redis_into, @val is NULL when the value went there (see below). */
typedef void (*bk_redis_get_fn)(void *arg, int err, const void *val, size_t len);

/*
 * Where a GET's value goes when it has the expected size: a value of exactly hlen + dlen
 * bytes is copied by the reply parser straight from the socket's buffer, its first @hlen
 * bytes to @hdr and the rest to @data, and done gets @val NULL and that length. A value of
 * any other size is answered as usual (@val points at it). Saves a copy of every value (and
 * an allocation of its size) over copying it out of the answer.
 *
 * @data is written only before done runs, only while the GET is unanswered (never after its
 * timeout), and only with what Redis sent: the caller still checks it before trusting it.
 * Both buffers must stay valid until done has run.
 */
struct bk_redis_into {
	void *hdr;
	size_t hlen;
	void *data;
	size_t dlen;
};

/* GET @key (copied) from the server the ring picks, its value into @into if that is not NULL.
 * @done runs exactly once on the I/O thread. @return 0 or -errno (done not called). */
int bk_redis_get(struct bk_redis *s, const char *key, const struct bk_redis_into *into,
		  bk_redis_get_fn done, void *arg);

/* GET @key and, in the same round trip, SET @lock NX PX @lock_ms (the fetch lock: see
 * tiers/fleet.c), the value into @into as for bk_redis_get. @done gets 0 and the value;
 * -ENOENT no value, and the lock is the caller's now (or could not be taken: nobody holds it
 * for the caller); -EBUSY no value, and another holds the lock; other errors as for a GET. A
 * lock taken with a value found is left to expire. @return 0 or -errno (done not called). */
int bk_redis_get_lock(struct bk_redis *s, const char *key, const char *lock,
		       uint64_t lock_ms, const struct bk_redis_into *into, bk_redis_get_fn done,
		       void *arg);

/* DEL @lock, on the server of @key, in the background: after the puts queued before it if
 * @after_put (the caller's value is among them), else at once. A lock won by
 * bk_redis_get_lock is renewed until then (see renew in redis.c), so a caller that won one
 * must unlock it. @return 0 queued or -errno. */
int bk_redis_unlock(struct bk_redis *s, const char *key, const char *lock, bool after_put);

/* Bytes of SETs bk_redis_put would take now without dropping them (put_limit less what is
 * in flight). */
uint64_t bk_redis_put_room(const struct bk_redis *s);

/* SET @key to @hdr followed by @data (both copied before returning), in the background,
 * nobody waiting. @return 0 queued, -ENOBUFS dropped (put_limit), -ENOMEM. */
int bk_redis_put(struct bk_redis *s, const char *key, const void *hdr, size_t hlen,
		  const void *data, size_t len);

/* Answer of a script: @err 0 and its array of @n integers, or -errno as for a GET. */
typedef void (*bk_redis_eval_fn)(void *arg, int err, const long long *vals, int n);

/* EVAL @script (static text) with KEYS[1] = @key and ARGV = @args (at most 8, copied) on the server the
 * ring picks for @key; abandoned (-ETIMEDOUT) after @timeout_ns. @done runs exactly once on
 * the I/O thread. @return 0 or -errno (done not called). */
int bk_redis_eval(struct bk_redis *s, const char *script, const char *key,
		   const char *const *args, int nargs, uint64_t timeout_ns, bk_redis_eval_fn done,
		   void *arg);

void bk_redis_get_stats(struct bk_redis *s, struct bk_redis_stats *ret);

#endif
