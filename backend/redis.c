/*
 * redis.c - the shared tier's Redis client: hiredis's asynchronous API on the backend's I/O
 * thread, a consistent-hash ring over the servers, and timeouts that no reader waits past.
 *
 *   any thread                          I/O thread (io.c's loop)
 *   bk_redis_get ─► req ─io_defer(0)─► start: ring picks a server ─► redisAsyncCommandArgv
 *   bk_redis_put ─► req (value copied)     │  (connect on first use)       │
 *   bk_redis_eval                          └─ io_defer(timeout) ─► on_timeout ─┐
 *                                     curl_multi_poll(extra fds) ─► on_reply ───┴─► done, once
 *
 * hiredis runs with an event adapter of our own (the ev hooks only record whether a
 * connection's socket wants reading or writing); io.c's poller hook hands those sockets to the
 * same curl_multi_poll that waits for curl's; when a socket is ready, read_all reads it and
 * hands hiredis what passed the bounds below, and write_out lets hiredis write. So there is no
 * second thread or event loop, and every hiredis call is made on the I/O thread: requests from
 * other threads hop there by io_defer.
 *
 * What a server may send is bounded, whoever answers on its address (the audit's server
 * declared a 4 GB value and streamed 1.5 GiB into hiredis's buffer): every byte read is scanned
 * (resp.c) before hiredis may parse it, and hiredis never reads a socket of ours itself once
 * it is connected. A bulk string longer than max_value (a value's header and block_size), a
 * reply longer than that and a line, an array of more than 16 elements or nested more than
 * twice, a line over 4 KiB, anything hiredis would not parse, and a reply nobody asked for
 * (hiredis asserts on one) close both of the server's connections, count as an error (and in
 * bad_replies), and leave the server alone for RETRY_NS (refuse). A connection's read buffer
 * thus holds at most one reply in progress and one read.
 *
 * Each server gets two connections: one for GETs and EVALs (a reader or a grant waits on
 * them), one for SETs (nobody waits). On one connection Redis answers in order, and a GET
 * written after a SET of a 4 MiB block waits for the whole SET to cross the socket and be read
 * (bench/shared_latency.py measures it: several times a GET alone behind one SET, far more
 * behind four; docs/performance.md has the figures). On its own connection a GET
 * waits only for Redis's loop: Redis is one thread, so SETs still cost a GET their turns of
 * its loop, but no longer their bytes.
 *
 * A request is answered exactly once: by its reply, or by its timer when the reply is late
 * (then the reply, if it ever comes, is dropped). It is freed when all have let go of it
 * (refs). A timer that finds the server sent bytes within the last timeout (its socket is
 * checked too: the I/O thread may have been busy) waits one more timeout, three times at most:
 * a server streaming 4 MiB replies to mounts at full speed is busy, not hung, and abandoning
 * its GETs sent blocks the fleet held to the store. And a request behind others on its
 * connection waits one more timeout each time a reply before it came within the last one:
 * Redis answers in order, so its turn is coming (at most as many times as replies were owed
 * before it). A server that misses three requests in a row without sending anything, each
 * sent after the previous one timed out (a hung process: SIGSTOP, a swap storm), is
 * disconnected; one that refuses connections is down; either way requests to it fail at once
 * for RETRY_NS, then a new connection is tried. A reader therefore pays at most timeout_ns for
 * a server that hangs (after what it waited in turn while the server still answered), a few
 * times per RETRY_NS, and nothing for one that is down. Going down and coming back are logged
 * once each.
 *
 * Bytes that keep coming do not keep anything alive for ever. No call waits more than CALL_MAX
 * timeouts from when it was asked, whatever the server sends (wait_until). And a reply whose
 * turn has lasted 1 + MAX_EXTENDS timeouts while bytes kept coming on its connection (a value's
 * length, then a byte now and then) closes the connection like a reply over its bound (stuck):
 * before, such a server held its GET places for ever and every later GET waited out four
 * timeouts behind them, while the server, sending, never earned a strike.
 *
 * At most GET_DEPTH GETs are in flight on a server's GET connection; the others wait in its
 * getq (see pump): Redis runs all it has read from a client before it writes a reply.
 *
 * A GET with the fetch lock (bk_redis_get_lock) is two commands written together, GET and
 * SET NX PX: the GET's value is answered at once; a nil waits for the SET's reply, which says
 * whose the lock is.
 *
 * Puts are fire and forget. They are formatted here (one copy of the value) and handed to
 * hiredis one at a time, in slices of PUT_SLICE written out as the socket takes them (see
 * feed()); the rest wait in the server's queue. Their bytes are counted from submission to
 * Redis's answer, and a put that would take more than put_limit in flight is dropped: a slow
 * Redis costs memory up to put_limit, never more. Puts to a server thought down are dropped
 * too.
 *
 * The ring: BK_CHASH_VNODES points per server, at hashes of "host:port#i"; a key belongs to
 * the first point at or after its own hash. A server added takes the arcs its points cut off,
 * about 1/(n+1) of the keys, and no key moves between the old servers.
 *
 * On a Redis Cluster the ring gives way to the cluster's slot map: each key goes to its hash
 * slot's master, MOVED and ASK are followed, and a failover is found by asking for the map
 * again: see the section "the cluster" below.
 *
 * The password (AUTH) is formatted here, written by write_secret and wiped, never left in
 * hiredis's buffers: see the section of that name below.
 *
 * Locking: the ring, the names of the servers named in the option (nring) and the
 * configuration are read-only after bk_redis_new; everything else (connections, requests,
 * server state, the cluster's masters added to srv[] and its slot map) is the I/O thread's.
 * Stats are relaxed atomics.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "cluster.h"
#include "io.h"
#include "redis.h"
#include "resp.h"
#include "scheme.h"

/* hiredis 0.14's async.c defines and exports it, but async.h does not declare it: the step
 * of redisAsyncHandleRead after its read(2), which read_all takes over (see there) */
void redisProcessCallbacks(redisAsyncContext *ac);

#define RETRY_NS   (1000 * 1000000ULL) /* a server down is tried again after this */
#define MAX_STRIKES 3                  /* timeouts in a row that disconnect a server */
#define READ_BURST (8u << 20)          /* bytes read from one connection per poll, at most */
#define READ_CHUNK (1u << 20)          /* bytes read at a time (see read_all) */
#define PUT_SLICE  (256u << 10)        /* a SET goes to hiredis's output buffer this at a time */
#define WRITE_BURST (8u << 20)         /* bytes feed() writes to one connection per call
					* ($TIERFS_REDIS_WRITE_BURST lowers it, for tests) */
#define HOLD_MAX_PX 60                 /* a fetch lock is renewed for this many PX at most */
#define MAX_EXTENDS 3                  /* timeouts a streaming server may have a call wait */
#define GET_DEPTH  2                   /* GETs in flight on a server's GET connection (getq) */
#define MAX_SERVERS 16                 /* io.c polls at most 32 extra sockets, two a server */
#define CALL_MAX   16                  /* timeouts a call may wait, from when it was asked */
#define OBUF_ROOM  (PUT_SLICE + (64u << 10)) /* a new connection's output buffer (see
					       * send_auth) */
#define MAX_REDIRECTS 5                /* MOVED or ASK a call follows, at most */
#define MAP_EVERY_NS (200 * 1000000ULL) /* a cluster's slot map is asked at most this often */

/*
 * A fetch lock's value is its holder's token (random, per mount), and a mount renews and
 * deletes only a lock that holds its own: a fetch whose GET timed out takes the lock for its
 * own (tiers/fleet.c) without knowing whether its SET NX won, and its DEL, plain, deleted the
 * lock of the mount really fetching the block, whose waiters then took it and fetched again
 * (test_timed_out_fetch_leaves_anothers_lock).
 */
#define UNLOCK_LUA "if redis.call('get',KEYS[1])==ARGV[1] then " \
		   "return redis.call('del',KEYS[1]) end return 0"
#define RENEW_LUA "if redis.call('get',KEYS[1])==ARGV[1] then " \
		  "return redis.call('pexpire',KEYS[1],ARGV[2]) end return 0"

const uint64_t bk_redis_lat_bounds_us[BK_REDIS_LAT_BUCKETS - 1] = {
	1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000};

#define STAT_ADD(s, f, v) __atomic_fetch_add(&(s)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(s, f, v) __atomic_fetch_sub(&(s)->st.f, (v), __ATOMIC_RELAXED)

/* ---- the ring ------------------------------------------------------------------------------ */

/* FNV-1a, then splitmix64's finaliser: FNV alone clusters short, similar strings. */
static uint64_t hash64(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	return h ^ (h >> 31);
}

static int point_cmp(const void *a, const void *b)
{
	const struct bk_chash_point *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return x->srv < y->srv ? -1 : x->srv > y->srv; /* a collision resolves the same everywhere */
}

int bk_chash_build(struct bk_chash *ch, const char *const *names, unsigned n, unsigned vnodes)
{
	char buf[300];

	if (n == 0 || vnodes == 0)
		return -EINVAL;
	ch->pts = calloc((size_t)n * vnodes, sizeof(*ch->pts));
	if (!ch->pts)
		return -ENOMEM;
	ch->npts = n * vnodes;
	for (unsigned s = 0; s < n; s++) {
		for (unsigned i = 0; i < vnodes; i++) {
			int l = snprintf(buf, sizeof(buf), "%s#%u", names[s], i);

			ch->pts[s * vnodes + i] = (struct bk_chash_point){
				.h = hash64(buf, l > 0 && (size_t)l < sizeof(buf) ? (size_t)l : 0),
				.srv = s,
			};
		}
	}
	qsort(ch->pts, ch->npts, sizeof(*ch->pts), point_cmp);
	return 0;
}

void bk_chash_done(struct bk_chash *ch)
{
	free(ch->pts);
	ch->pts = NULL;
	ch->npts = 0;
}

unsigned bk_chash_pick(const struct bk_chash *ch, const void *key, size_t len)
{
	uint64_t h = hash64(key, len);
	unsigned lo = 0, hi = ch->npts;

	while (lo < hi) { /* first point with h >= key's */
		unsigned mid = lo + (hi - lo) / 2;

		if (ch->pts[mid].h < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return ch->pts[lo == ch->npts ? 0 : lo].srv;
}

/* ---- the client ------------------------------------------------------------------------------ */

struct bk_redis;

enum { CONN_GET, CONN_PUT, NCONN }; /* the connection a request goes on: see the essay */

/* One connection to a server. I/O thread only. */
struct sconn {
	struct srv *v;
	redisAsyncContext *ac;   /* NULL: not connected */
	bool rd, wr;             /* hiredis wants to read / write its socket */
	unsigned gen;            /* connections made so far: which one ac is */
	uint64_t replies;        /* replies read, over all its connections (never reset) */
	struct bk_resp scan;     /* where ac's replies are (resp.h): what passes it is parsed */
	uint64_t rx_ns;          /* when ac last had bytes to read */
	uint64_t turn_ns;        /* when the reply ac owes first began its turn: the last reply
				  * read, or the write of a command to a connection that owed
				  * nothing (see stuck) */
	size_t secret;           /* bytes at the front of ac's output buffer that are the AUTH
				  * command: written and wiped by write_secret, never by hiredis */
};

/* A FIFO of requests, linked through qnext (see reqq_push, reqq_pop, reqq_remove). */
struct reqq {
	struct req *head, *tail;
};

/* One server. I/O thread only, but for name, host, port. */
struct srv {
	struct bk_redis *s;
	char name[280];          /* "host:port" */
	char host[256];
	int port;
	struct sconn c[NCONN];
	bool down;               /* thought down (logged once when it went) */
	bool auth_logged;        /* an AUTH refusal was logged */
	uint64_t retry_ns;       /* not connected: no new connection before this */
	unsigned strikes;        /* timeouts in a row, the server silent meanwhile */
	uint64_t strike_ns;      /* when the last strike was counted */
	struct reqq putq;        /* SETs not yet given to hiredis (see feed) */
	struct req *feeding;     /* the SET going to hiredis a slice at a time, or NULL */
	size_t fed;              /* how much of feeding->value hiredis has */
	uint64_t rx_ns;          /* when one of its connections last had bytes to read */
	struct hold *holds;      /* fetch locks this mount holds on it (see renew) */
	bool renewing;           /* renew()'s timer is pending */
	struct req *late;        /* OP_GETLOCKs answered by their timer, their lock's reply
				  * still owed (see late_lock) */
	struct reqq getq;        /* GETs waiting for one of GET_DEPTH places (see pump) */
	unsigned getting;        /* GETs written whose reply is still owed */
};

/* A fetch lock won, renewed until its DEL leaves (see renew). */
struct hold {
	struct hold *next;
	uint64_t px_ns;
	uint64_t until_ns;       /* renewed no longer than this */
	char px[24];
	char lock[];
};

struct bk_redis {
	struct backend *b;
	struct io *io;
	struct srv *srv;
	unsigned nsrv;
	struct bk_chash ring;
	unsigned nring;          /* servers named in the option, the ring's (read-only); srv[]
				  * beyond them are a cluster's masters found since (I/O thread) */
	/* a Redis Cluster (see "the cluster" below); I/O thread */
	bool cluster;            /* a node said so: keys go by slot */
	bool probed;             /* a server said whether it is a cluster node */
	bool mapped;             /* a slot map was taken (and logged) */
	bool map_asked;          /* a CLUSTER NODES is out (sent at map_sent_ns) */
	bool map_pending;        /* map_ask's timer is set */
	bool map_logged;         /* a refused map was logged */
	bool full_logged;        /* a node past MAX_SERVERS was logged */
	unsigned map_seq;        /* which CLUSTER NODES the answer must be (see on_map) */
	unsigned map_next;       /* the server asked next: they take turns */
	uint64_t map_ns, map_sent_ns; /* when the last map was asked for */
	uint8_t slot[BK_CLUSTER_SLOTS]; /* each slot's master (index in srv), or BK_CLUSTER_NONE:
					  * then the ring's server, which redirects */
	char *password;
	char token[33];          /* this mount's fetch locks' value: who holds a lock */
	uint64_t timeout_ns, put_limit;
	size_t write_burst;      /* WRITE_BURST, or less: see there */
	uint64_t max_value;      /* longest bulk string a server may send (resp.h) */
	redisReplyObjectFunctions fns; /* hiredis's, but for createString (see into_string) and
					* createArray (bk_resp_functions) */
	void *(*dflt_string)(const redisReadTask *, char *, size_t);
	bool stopped;            /* the loop stopped (io's poller stop); I/O thread */
	struct sconn *polled[MAX_SERVERS * NCONN]; /* which connection each polled fd is; I/O
						       * thread */
	struct bk_redis_stats st;
};

enum op { OP_GET, OP_GETLOCK, OP_PUT, OP_EVAL };

/* One command. Freed when refs reaches 0; I/O thread only once started. */
struct req {
	struct bk_redis *s;
	struct srv *v;           /* its server: the ring's; in a cluster, set by start (route) */
	enum op op;              /* OP_PUT goes on v->c[CONN_PUT], the others on CONN_GET */
	unsigned slot;           /* its key's cluster slot */
	unsigned redirects;      /* MOVED and ASK it followed */
	struct srv *redir_to;    /* OP_GETLOCK: the GET was redirected here (see on_reply) */
	bool redir_ask;          /* ... by an ASK */
	bool ask;                /* its commands go after ASKING (an ASK redirect) */
	unsigned refs;           /* the reply callbacks' and the timer's */
	bool answered;
	uint64_t timeout_ns;
	uint64_t asked_ns;       /* when start() took it: no answer waits past CALL_MAX timeouts
				  * from this */
	uint64_t sent_ns;        /* when it was written to hiredis (queued: asked; see pump) */
	unsigned extends;        /* timeouts it waited past, the server sending meanwhile */
	unsigned gen;            /* the connection it went out on (sconn.gen) */
	uint64_t replies_seen;   /* that connection's replies when it was asked, went out, or last
				  * waited */
	bk_redis_get_fn get_done;
	const struct bk_redis_into *into; /* OP_GET(LOCK): where a value of its size goes */
	bk_redis_eval_fn eval_done;
	void *arg;
	size_t put_len;          /* OP_PUT: bytes counted in st.put_queued */
	char *value;             /* OP_PUT: the whole command, formatted (see format_cmd), freed
				  * once hiredis has copied all of it (see feed) */
	size_t value_len;
	bool unlock;             /* OP_PUT: a DEL of a fetch lock, not a value */
	const char *lock;        /* ... that lock: its hold ends with this request */
	bool now;                /* ... sent at once on the GET connection, not after the SETs */
	struct req *qnext;       /* OP_PUT: srv's putq; OP_GET(LOCK): srv's getq, then (OP_GETLOCK)
				  * srv's late */
	bool queued;             /* OP_GET(LOCK): in srv's getq, not written yet; its timer runs */
	bool inflight;           /* ... written, counted in srv's getting until its reply */
	bool timed;              /* ... its timer started when it was queued */
	bool late;               /* OP_GETLOCK: on srv's late list */
	bool released;           /* ... and its lock's DEL is done: a late win is not held */
	int argc;                /* OP_GETLOCK: the GET's; argv[argc..] is the SET NX's */
	const char *argv[12];
	size_t argvlen[12];
	char buf[];              /* the arguments' bytes */
};

static void reqq_push(struct reqq *l, struct req *q)
{
	q->qnext = NULL;
	if (l->tail)
		l->tail->qnext = q;
	else
		l->head = q;
	l->tail = q;
}

static struct req *reqq_pop(struct reqq *l)
{
	struct req *q = l->head;

	if (q) {
		l->head = q->qnext;
		if (!l->head)
			l->tail = NULL;
		q->qnext = NULL;
	}
	return q;
}

static void reqq_remove(struct reqq *l, struct req *q)
{
	struct req *prev = NULL;

	for (struct req **pp = &l->head; *pp; prev = *pp, pp = &(*pp)->qnext) {
		if (*pp == q) {
			*pp = q->qnext;
			if (l->tail == q)
				l->tail = prev;
			q->qnext = NULL;
			return;
		}
	}
}

static void logf_(struct bk_redis *s, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void logf_(struct bk_redis *s, int level, const char *fmt, ...)
{
	char line[400];
	va_list ap;

	if (!s->b->log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->b->log(s->b->log_arg, level, line);
}

static void map_want(struct bk_redis *s);

static void mark_down(struct srv *v, const char *why)
{
	v->retry_ns = io_now_ns(v->s->io) + RETRY_NS;
	if (v->s->cluster)
		map_want(v->s); /* a failover: the slots' new master is in the next map */
	if (v->down)
		return;
	v->down = true;
	STAT_ADD(v->s, servers_down, 1);
	logf_(v->s, 1, "shared tier: redis %s is unavailable (%s): its blocks are read from the "
		       "store until it answers again", v->name, why);
}

static void mark_up(struct srv *v)
{
	v->strikes = 0;
	if (!v->down)
		return;
	v->down = false;
	STAT_SUB(v->s, servers_down, 1);
	logf_(v->s, 2, "shared tier: redis %s answers again", v->name);
}

/* The event adapter: hiredis says what it waits for; the poller passes it to curl_multi_poll. */
static void ev_add_read(void *p) { ((struct sconn *)p)->rd = true; }
static void ev_del_read(void *p) { ((struct sconn *)p)->rd = false; }
static void ev_add_write(void *p) { ((struct sconn *)p)->wr = true; }
static void ev_del_write(void *p) { ((struct sconn *)p)->wr = false; }
static void ev_cleanup(void *p)
{
	struct sconn *c = p;

	c->rd = c->wr = false;
}

static void drop_putq(struct srv *v);
static void drop_getq(struct srv *v, int err);

/* ---- the password: AUTH without copies left behind ---------------------------------------- */

/*
 * hiredis formats a command given as text into a buffer it frees without zeroing, copies it
 * into the connection's output buffer, and frees (or, after a partial write, moves with
 * sdsrange) what it has written without zeroing either: every connection left the password
 * in freed memory twice. So the AUTH command is formatted here (send_auth), handed over
 * formatted, and our buffer zeroed; hiredis's copy is the first thing in the new connection's
 * output buffer, and it is written out by write_secret, never by hiredis, which zeroes the
 * bytes it moves past. That buffer is given OBUF_ROOM first, more than what is appended to a
 * connection before it is up (a slice of a SET, a few small commands), so no append moves it
 * away with the password in it. A connection that goes before the command is out has it
 * zeroed (wipe_secret). What is left: bk_redis's own copy, kept for reconnects and zeroed at
 * bk_redis_free, and $TIERFS_SHARED_PASSWORD in the environment when it came from there.
 */
static void wipe_secret(struct sconn *c, const redisAsyncContext *ac)
{
	if (!ac || c->ac != ac || !c->secret)
		return;
	explicit_bzero(ac->c.obuf, c->secret < sdslen(ac->c.obuf) ? c->secret
								 : sdslen(ac->c.obuf));
	c->secret = 0;
}

/* Write what is left of the AUTH command. @return the bytes still to write (the socket is
 * full, or still connecting); 0 when done, or on an error (the command wiped: hiredis then
 * finds the error itself). */
static size_t write_secret(struct sconn *c, redisAsyncContext *ac)
{
	while (c->secret) {
		sds ob = ac->c.obuf;
		size_t len = sdslen(ob);
		ssize_t n = send(ac->c.fd, ob, c->secret, MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return c->secret;
		if (n <= 0) {
			wipe_secret(c, ac);
			return 0;
		}
		sdsrange(ob, (int)n, -1);
		explicit_bzero(ob + len - (size_t)n, (size_t)n); /* what the move left behind */
		c->secret -= (size_t)n;
	}
	return 0;
}

/* Whether @fd's connect succeeded (getpeername leaves the error for hiredis to read). */
static bool connected(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return getpeername(fd, (struct sockaddr *)&ss, &len) == 0;
}

/* @c's socket is writable (or its connect ended): the AUTH command first, then hiredis's
 * write, which also finishes a connect (but never reads: see read_all). A connect that failed
 * has its AUTH wiped unsent, and hiredis says why. */
static void write_out(struct sconn *c, redisAsyncContext *ac)
{
	if (c->secret && !(ac->c.flags & REDIS_CONNECTED) && !connected(ac->c.fd))
		wipe_secret(c, ac);
	if (c->secret && write_secret(c, ac) > 0)
		return;
	redisAsyncHandleWrite(ac);
}

/* A command goes to @ac: if it owed nothing, the reply's turn starts now (see stuck). */
static void turn_start(redisAsyncContext *ac)
{
	struct sconn *c = ac->data;

	if (!ac->replies.head)
		c->turn_ns = io_now_ns(c->v->s->io);
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv);
static char *format_cmd(const char *const *argv, int n, const void *hdr, size_t hlen,
			const void *data, size_t dlen, bool tail, size_t *len);

/* AUTH on the new connection @ac (nothing else written to it yet). @return 0 or -errno. */
static int send_auth(struct sconn *c, redisAsyncContext *ac)
{
	const char *argv[2] = {"AUTH", c->v->s->password};
	sds ob = sdsMakeRoomFor(ac->c.obuf, OBUF_ROOM);
	size_t len = 0;
	char *cmd;
	int r;

	if (!ob)
		return -ENOMEM;
	ac->c.obuf = ob;
	cmd = format_cmd(argv, 2, NULL, 0, NULL, 0, false, &len);
	if (!cmd)
		return -ENOMEM;
	turn_start(ac);
	r = redisAsyncFormattedCommand(ac, on_auth, NULL, cmd, len);
	explicit_bzero(cmd, len);
	free(cmd);
	if (r != REDIS_OK)
		return -EIO;
	c->secret = len;
	return 0;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct sconn *c = ac->data;

	if (status == REDIS_OK)
		return; /* up once something is answered */
	if (c->ac == ac) {
		wipe_secret(c, ac);
		c->ac = NULL; /* hiredis frees it after this callback */
		if (c == &c->v->c[CONN_PUT])
			drop_putq(c->v);
		else
			drop_getq(c->v, -ECONNREFUSED);
	}
	mark_down(c->v, ac->errstr[0] ? ac->errstr : "cannot connect");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct sconn *c = ac->data;

	if (c->ac != ac)
		return; /* an older connection, closed already */
	wipe_secret(c, ac);
	c->ac = NULL;
	if (c == &c->v->c[CONN_PUT])
		drop_putq(c->v);
	else
		drop_getq(c->v, c->v->s->stopped ? -ESHUTDOWN : -ECONNRESET);
	if (status != REDIS_OK)
		mark_down(c->v, ac->errstr[0] ? ac->errstr : "connection lost");
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	struct sconn *c = ac->data;
	struct srv *v = c->v;

	/* once per server, not per connection or per reconnect: the commands that follow fail
	 * (NOAUTH) and are counted as errors, and their reads go to the store */
	if (reply && reply->type == REDIS_REPLY_ERROR && !v->auth_logged) {
		v->auth_logged = true;
		logf_(v->s, 0, "shared tier: redis %s refused AUTH (%.200s): check "
			       "shared_password_file or $TIERFS_SHARED_PASSWORD; reads go to the store",
		      v->name, reply->str);
	}
}

/*
 * A fetch lock (tiers/fleet.c) says "the value is coming", and its PX was sized for the
 * holder's fetch. But the fetch may wait behind the mount's readahead, and the SET behind the
 * mount's earlier SETs, in putq or in the socket's buffers: with three mounts at full speed on
 * two cores, 2-20 of a run's 64 locks expired before their value was in Redis, and a mount
 * that came after the PX took the lock and fetched the block again. So a lock won is held:
 * its PX renewed every quarter PX, on the GET connection (the PUT one is behind the values),
 * from the win until its DEL leaves, which the holder sends after its SET on the same
 * connection, or at once when it has no value to write. A quarter, not a half: a renewal
 * reaches Redis when Redis gets to it, behind the SETs it is taking in (through a test's
 * relay on two busy cores, Redis once saw two renewals 218 ms apart, past the PX, while
 * their timers ran 100-104 ms apart). A lock whose GET timed out is held too, once its SET
 * NX's late reply says it is ours (late_lock). A holder that dies renews nothing, and its
 * locks expire one PX later, as before; a hold whose DEL never comes (a bug) ends after
 * HOLD_MAX_PX. Waiters still give up after their own bound (tiers/fleet.c). The
 * renewals' replies are not wanted (NULL callbacks: not counted, not timed).
 */
static void renew(void *arg)
{
	struct srv *v = arg;
	redisAsyncContext *ac = v->c[CONN_GET].ac;
	uint64_t now = io_now_ns(v->s->io), period = UINT64_MAX;

	for (struct hold **pp = &v->holds; *pp;) {
		struct hold *h = *pp;

		if (now >= h->until_ns) {
			*pp = h->next;
			free(h);
			continue;
		}
		if (ac) {
			turn_start(ac);
			redisAsyncCommand(ac, NULL, NULL, "EVAL %s 1 %s %s %s", RENEW_LUA, h->lock,
					  v->s->token, h->px);
		}
		if (h->px_ns / 4 < period)
			period = h->px_ns / 4;
		pp = &h->next;
	}
	v->renewing = v->holds && io_defer(v->s->io, period, renew, v) == 0;
}

/* @lock (PX @px ms) was won on @v: hold it. Out of memory, it is left to expire. */
static void hold_start(struct srv *v, const char *lock, const char *px)
{
	size_t ll = strlen(lock) + 1;
	struct hold *h = malloc(sizeof(*h) + ll);

	if (!h)
		return;
	h->px_ns = strtoull(px, NULL, 10) * 1000000ULL;
	h->until_ns = io_now_ns(v->s->io) + HOLD_MAX_PX * h->px_ns;
	snprintf(h->px, sizeof(h->px), "%s", px);
	memcpy(h->lock, lock, ll);
	h->next = v->holds;
	v->holds = h;
	if (!v->renewing)
		v->renewing = io_defer(v->s->io, h->px_ns / 4, renew, v) == 0;
}

/* @lock's DEL has left (answered, or dropped with its connection): it is no longer held. A
 * lock whose GET timed out is DELed by its fetch all the same (the fetch takes it for its
 * own); if its SET NX has not answered yet, a win that comes after this is not held: the
 * DEL may have run before it, and nobody would end the hold. */
static void hold_end(struct srv *v, const char *lock)
{
	for (struct hold **pp = &v->holds; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->lock, lock) == 0) {
			struct hold *h = *pp;

			*pp = h->next;
			free(h);
			return;
		}
	}
	for (struct req *q = v->late; q; q = q->qnext)
		if (strcmp(q->argv[q->argc + 1], lock) == 0)
			q->released = true;
}

/* @q (OP_GETLOCK) was answered by its timer; its fetch takes the lock for its own and will
 * DEL it. If the SET NX's reply then says the lock is ours, it is held like one won in time
 * (on_reply): a late answer, on a busy machine, is when the fetch's value is likeliest to
 * wait behind others, past the lock's PX. */
static void late_lock(struct req *q)
{
	q->late = true;
	q->qnext = q->v->late;
	q->v->late = q;
}

static void late_unlink(struct req *q)
{
	for (struct req **pp = &q->v->late; *pp; pp = &(*pp)->qnext) {
		if (*pp == q) {
			*pp = q->qnext;
			break;
		}
	}
	q->late = false;
}

static void req_put(struct req *q);

/* The SETs @v's queue still holds are dropped (the connection went). */
static void drop_putq(struct srv *v)
{
	struct req *q;

	while ((q = reqq_pop(&v->putq))) {
		if (!q->unlock) {
			STAT_SUB(v->s, put_queued, q->put_len);
			STAT_ADD(v->s, put_drops, 1);
		}
		req_put(q);
	}
}

static void answer(struct req *q, int err, const redisReply *reply);

/* The GETs waiting in @v's getq are answered @err, unwritten (the connection went). */
static void drop_getq(struct srv *v, int err)
{
	struct req *q;

	while ((q = reqq_pop(&v->getq))) {
		q->queued = false;
		answer(q, err, NULL);
		req_put(q);
	}
}

/* Close both connections of @v; what they still owed is answered NULL (on_reply). */
static void close_all(struct srv *v)
{
	drop_putq(v);
	drop_getq(v, v->s->stopped ? -ESHUTDOWN : -ECONNRESET);
	for (int i = 0; i < NCONN; i++) {
		redisAsyncContext *ac = v->c[i].ac;

		wipe_secret(&v->c[i], ac);
		v->c[i].ac = NULL;
		if (ac)
			redisAsyncFree(ac);
	}
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv);
static void on_getlock_value(redisAsyncContext *ac, void *r, void *priv);
static struct srv *note_redirect(struct req *q, const redisReply *reply, bool *ret_ask);
static bool resend(struct req *q, struct srv *to, bool ask);

/*
 * hiredis's createString, for every string its parser completes on our connections: a GET's
 * value of the size its bk_redis_into expects is copied from the read buffer straight to
 * where the caller wants it, and the reply carries only its length (str NULL); anything else
 * is hiredis's own reply. The reply being parsed is the one owed to the first callback on the
 * connection's list (hiredis takes it off only after the reply is complete), and everything
 * runs on the I/O thread, so a GET already answered by its timer (whose caller has moved on
 * to the store, which writes the same buffer) is seen as answered here, and left alone.
 */
static void *into_string(const redisReadTask *task, char *str, size_t len)
{
	const redisReadTask *root = task;
	redisAsyncContext *ac;
	redisCallback *cb;
	struct req *q;
	redisReply *r;

	while (root->parent)
		root = root->parent;
	ac = root->privdata; /* set by conn() before the connection's first read */
	cb = ac->replies.head;
	q = cb ? cb->privdata : NULL;
	if (task->parent || task->type != REDIS_REPLY_STRING || !q ||
	    !(cb->fn == on_getlock_value || (cb->fn == on_reply && q->op == OP_GET)) ||
	    !q->into || q->answered || len != q->into->hlen + q->into->dlen)
		return ((struct sconn *)ac->data)->v->s->dflt_string(task, str, len);
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL; /* hiredis's out-of-memory error, as its own would be */
	memcpy(q->into->hdr, str, q->into->hlen);
	memcpy(q->into->data, str + q->into->hlen, q->into->dlen);
	r->type = REDIS_REPLY_STRING;
	r->len = len;
	return r;
}

/* Connection @which to @v, made now if there is none and @v is not in its retry pause. */
static redisAsyncContext *conn(struct srv *v, int which)
{
	struct sconn *c = &v->c[which];
	redisAsyncContext *ac;

	if (c->ac)
		return c->ac;
	if (io_now_ns(v->s->io) < v->retry_ns)
		return NULL;
	ac = redisAsyncConnect(v->host, v->port);
	if (!ac)
		return NULL;
	if (ac->err) {
		mark_down(v, ac->errstr);
		redisAsyncFree(ac);
		return NULL;
	}
	c->v = v;
	ac->data = c;
	ac->ev.data = c;
	ac->ev.addRead = ev_add_read;
	ac->ev.delRead = ev_del_read;
	ac->ev.addWrite = ev_add_write;
	ac->ev.delWrite = ev_del_write;
	ac->ev.cleanup = ev_cleanup;
	/* hiredis frees its read buffer whenever it is empty and its spare room is over maxbuf
	 * (16 KiB by default), so every value was read into a buffer grown again from nothing,
	 * each growth a realloc copying what it held (see read_all). maxbuf bounds nothing else:
	 * not a reply's length, nor the buffer while a reply is coming. With the bound on replies
	 * (resp.h) the buffer holds at most one value and a read: keep that much. */
	ac->c.reader->maxbuf = v->s->max_value + 2 * READ_CHUNK;
	ac->c.reader->fn = &v->s->fns;
	ac->c.reader->privdata = ac;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	c->ac = ac;
	c->gen++;
	c->secret = 0;
	c->rx_ns = c->turn_ns = io_now_ns(v->s->io);
	bk_resp_init(&c->scan, v->s->max_value);
	if (v->s->password && send_auth(c, ac) < 0) {
		wipe_secret(c, ac);
		c->ac = NULL;
		redisAsyncFree(ac); /* not connected: no disconnect callback */
		return NULL;
	}
	return ac;
}

static void req_put(struct req *q)
{
	if (--q->refs == 0) {
		if (q->unlock)
			hold_end(q->v, q->lock);
		if (q->late)
			late_unlink(q);
		free(q->value);
		free(q);
	}
}

/* The one answer of a GET or EVAL (puts have nobody to answer). */
static void answer(struct req *q, int err, const redisReply *reply)
{
	long long vals[8];
	int n = 0;

	if (q->answered)
		return;
	q->answered = true;
	if (q->op == OP_GET || q->op == OP_GETLOCK) {
		if (err == 0 && reply->type == REDIS_REPLY_STRING) {
			STAT_ADD(q->s, found, 1);
			STAT_ADD(q->s, bytes_in, (uint64_t)reply->len);
			/* str is NULL when into_string put the value in q->into */
			q->get_done(q->arg, 0, reply->str, (size_t)reply->len);
			return;
		}
		if (err == 0 && reply->type == REDIS_REPLY_NIL) {
			STAT_ADD(q->s, missing, 1);
			err = -ENOENT;
		} else if (err == -ENOENT || err == -EBUSY) {
			STAT_ADD(q->s, missing, 1); /* OP_GETLOCK's nil, told with the lock's answer */
		} else if (err == 0) {
			err = -EIO;
		}
		if (err != -ENOENT && err != -EBUSY && err != -ETIMEDOUT)
			STAT_ADD(q->s, errors, 1);
		q->get_done(q->arg, err, NULL, 0);
	} else if (q->op == OP_EVAL) {
		if (err == 0 && reply->type == REDIS_REPLY_ARRAY) {
			for (size_t i = 0; i < reply->elements && n < 8; i++) {
				if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
					err = -EIO;
					break;
				}
				vals[n++] = reply->element[i]->integer;
			}
		} else if (err == 0) {
			err = -EIO;
		}
		if (err == 0)
			STAT_ADD(q->s, evals, 1);
		else if (err != -ETIMEDOUT)
			STAT_ADD(q->s, errors, 1);
		q->eval_done(q->arg, err, err ? NULL : vals, err ? 0 : n);
	}
}

/* A reply callback's first step: a reply (NULL: the connection went) counts for its
 * connection and says the server is up. @return the errno for a NULL reply. */
static int replied(redisAsyncContext *ac, struct req *q, const redisReply *reply)
{
	if (reply) {
		((struct sconn *)ac->data)->replies++;
		mark_up(q->v);
	}
	return q->s->stopped ? -ESHUTDOWN : -ECONNRESET;
}

/* A GET's reply came (@q's answer, or late): the time it took, in the histogram. */
static void get_latency(struct req *q)
{
	uint64_t us = (io_now_ns(q->s->io) - q->sent_ns) / 1000;
	int i = 0;

	while (i < BK_REDIS_LAT_BUCKETS - 1 && us > bk_redis_lat_bounds_us[i])
		i++;
	STAT_ADD(q->s, get_lat[i], 1);
	STAT_ADD(q->s, get_lat_sum_us, us);
}

/* OP_GETLOCK's first reply (the GET): a value is answered now; a nil waits for the lock's. */
static void on_getlock_value(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	struct req *q = priv;
	int lost = replied(ac, q, reply);

	if (reply && !q->answered && (q->redir_to = note_redirect(q, reply, &q->redir_ask))) {
		req_put(q); /* sent again once the SET NX's reply is in (on_reply) */
		return;
	}
	if (reply && reply->type != REDIS_REPLY_ERROR)
		get_latency(q);
	if (!reply)
		answer(q, lost, NULL);
	else if (reply->type == REDIS_REPLY_ERROR)
		answer(q, -EIO, NULL);
	else if (reply->type != REDIS_REPLY_NIL)
		answer(q, 0, reply);
	req_put(q);
}

static void pump(struct srv *v);

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	struct req *q = priv;
	int lost = replied(ac, q, reply);
	struct srv *to = q->redir_to, *t;
	bool ask = q->redir_ask, a = false;

	if (q->v->feeding == q) {
		/* the connection went with the SET half written (reply NULL), or Redis answered
		 * before it had all of it: the rest would be read as commands, so close it */
		q->v->feeding = NULL;
		if (reply)
			redisAsyncDisconnect(ac);
	}
	/* a MOVED or ASK (an OP_GETLOCK's GET's, or this reply's): the call goes to the node
	 * named, with this callback's reference; a SET's value is gone (hiredis has it), so a
	 * redirected SET only teaches the map, and is counted as a put error */
	q->redir_to = NULL;
	if (!to && (t = note_redirect(q, reply, &a))) { /* (an OP_GETLOCK's SET NX is redirected
							 * where its GET was: counted once) */
		to = t;
		ask = a;
	}
	if (to && q->op != OP_PUT) {
		if (resend(q, to, ask))
			return;
		answer(q, -EIO, NULL);
	}
	if (q->op == OP_GETLOCK) {
		/* the SET NX's reply, after the GET's nil (or after a value already answered:
		 * the lock taken on a hit is left to expire) */
		if (!reply) {
			answer(q, lost, NULL);
		} else if (reply->type == REDIS_REPLY_STATUS) {
			/* the lock is ours: held if this is the answer, or if the GET timed out
			 * and its fetch has not DELed it yet (late_lock); one taken on a hit is
			 * left to expire */
			if (!q->answered || (q->late && !q->released))
				hold_start(q->v, q->argv[q->argc + 1], q->argv[q->argc + 5]);
			answer(q, -ENOENT, NULL);
		} else if (reply->type == REDIS_REPLY_NIL) {
			answer(q, -EBUSY, NULL);
		} else {
			answer(q, -ENOENT, NULL); /* the lock refused: fetch, nobody waits for us */
		}
	} else if (q->op == OP_PUT && q->unlock) {
		/* nothing to count: a lock not deleted expires */
	} else if (q->op == OP_PUT) {
		STAT_SUB(q->s, put_queued, q->put_len);
		if (reply && reply->type == REDIS_REPLY_STATUS) {
			STAT_ADD(q->s, puts, 1);
			STAT_ADD(q->s, put_bytes, q->put_len);
		} else {
			STAT_ADD(q->s, put_errors, 1);
		}
	} else if (!reply) {
		answer(q, lost, NULL);
	} else if (reply->type == REDIS_REPLY_ERROR) {
		answer(q, -EIO, NULL);
	} else {
		if (q->op == OP_GET)
			get_latency(q);
		answer(q, 0, reply);
	}
	if (q->inflight) { /* its place is free: the next GET waiting for one goes out */
		q->inflight = false;
		q->v->getting--;
		pump(q->v);
	}
	req_put(q);
}

/* @q leaves @q->v's getq unwritten (its timer answered it); the queue's reference goes. */
static void getq_unlink(struct req *q)
{
	reqq_remove(&q->v->getq, q);
	q->queued = false;
	req_put(q);
}

static void on_timeout(void *p);

/* Wait one more timeout (at most up to CALL_MAX timeouts from its ask), or less to reach
 * @at. @return true if the timer is set (it keeps its reference). */
static bool wait_until(struct req *q, uint64_t now, uint64_t at)
{
	uint64_t cap = q->asked_ns + CALL_MAX * q->timeout_ns;

	if (at > cap)
		at = cap;
	return at > now && io_defer(q->s->io, at - now, on_timeout, q) == 0;
}

/* The I/O thread may have been busy past several timers (copying blocks, faulting their
 * memory in): bytes waiting in a socket say the server is alive, whatever poll_ready has seen
 * yet. Either connection: Redis runs one thread, so a GET waits behind the 4 MiB SETs the
 * server is still taking in, and their answers on the SET connection are its sign of life
 * (three mounts at full speed on two cores: GETs took 35-50 ms p50, 145-205 ms p99, with
 * nothing on the GET connection meanwhile). */
static void look_for_bytes(struct srv *v, uint64_t now)
{
	for (int i = 0; v->c[CONN_GET].ac && i < NCONN; i++) {
		struct pollfd pf = {.fd = v->c[i].ac ? v->c[i].ac->c.fd : -1, .events = POLLIN};

		if (pf.fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN))
			v->rx_ns = v->c[i].rx_ns = now;
	}
}

/* Whether unanswered @q waits on past a timeout. @return true if its timer is set again. */
static bool wait_more(struct req *q)
{
	struct srv *v = q->v;
	struct sconn *c = &v->c[CONN_GET];
	uint64_t now = io_now_ns(q->s->io);

	if (q->timed && !q->queued && now < q->sent_ns + q->timeout_ns)
		/* started in getq, written since: it gets its timeout from the write */
		return wait_until(q, now, q->sent_ns + q->timeout_ns);
	look_for_bytes(v, now);
	if (c->ac && c->gen == q->gen && !q->s->stopped && c->replies > q->replies_seen) {
		/* a reply written before this one was read within the last timeout: Redis answers
		 * in order, a readahead window's 4 MiB values one after another, and this one's
		 * turn is coming; Redis has not yet made it wait. Wait one more timeout: there are
		 * only as many of these as replies were owed before it when it went out. Timed
		 * from when it was written instead, the seventh of twelve GETs written together
		 * passed its timeout and three extensions while each value before it took less
		 * than one (test_values_queued_behind_others_are_waited_for) */
		q->replies_seen = c->replies;
		STAT_ADD(q->s, extended, 1);
		return wait_until(q, now, now + q->timeout_ns);
	}
	if (c->ac && !q->s->stopped && q->extends < MAX_EXTENDS &&
	    v->rx_ns + q->timeout_ns > now) {
		/* the server sent bytes within the last timeout: it is streaming the replies
		 * queued before this one (4 MiB values to mounts reading at full speed), not hung.
		 * Abandoning the call would send a block the fleet holds to the store; wait one
		 * more timeout, at most MAX_EXTENDS times */
		q->extends++;
		STAT_ADD(q->s, extended, 1);
		return wait_until(q, now, now + q->timeout_ns);
	}
	return false;
}

/*
 * Whether the reply @c owes first has had its turn for 1 + MAX_EXTENDS timeouts of @q's
 * while bytes kept coming on @c. A call waits that long at most for a server that sends: past
 * it the call is answered -ETIMEDOUT, but its reply is still owed, and the connection with
 * it: a server that sent a reply's first bytes and then a byte now and then (or a value at a
 * few bytes a second) held its GET connection's places (GET_DEPTH) for ever, every later GET
 * waited out its timeout and three more behind them, and the server, sending, never earned a
 * strike. Such a connection is closed instead. An honest server slower than that for one
 * value (4 MiB in 200 ms at the default timeout) costs the same: its calls go to the store.
 */
static bool stuck(const struct sconn *c, const struct req *q, uint64_t now)
{
	return c->ac && c->gen == q->gen && c->ac->replies.head &&
	       now - c->turn_ns >= (1 + MAX_EXTENDS) * q->timeout_ns &&
	       c->rx_ns + q->timeout_ns > now;
}

/* Unanswered @q waits no more: -ETIMEDOUT, and what its silence says of the server. */
static void timed_out(struct req *q)
{
	struct srv *v = q->v;
	struct sconn *c = &v->c[CONN_GET];
	uint64_t now = io_now_ns(q->s->io);
	bool written = !q->queued;

	STAT_ADD(q->s, timeouts, 1);
	answer(q, -ETIMEDOUT, NULL);
	if (q->s->cluster) /* a master that hangs: has a replica taken over? */
		map_want(q->s);
	if (!written) /* never written: no lock taken, no reply owed */
		getq_unlink(q);
	else if (q->op == OP_GETLOCK)
		late_lock(q);
	if (written && stuck(c, q, now)) {
		STAT_ADD(q->s, bad_replies, 1);
		STAT_ADD(q->s, errors, 1);
		mark_down(v, "a reply that does not end");
		close_all(v);
		return;
	}
	/* a strike only if the server said nothing since the request went out (or, one never
	 * written, since it was asked): one that is sending replies (4 MiB values, to three
	 * mounts reading at full speed) is busy, not hung, and pausing it sent every read to
	 * the store for a second. And one strike per silence: requests sent before the last
	 * strike (a readahead window's GETs) time out together, and counted one each, one pause
	 * of a timeout (a busy machine, three mounts and Redis on two cores) took the server
	 * down for a second; a hung one still goes down, after three timeouts */
	if (v->rx_ns < q->sent_ns && q->sent_ns >= v->strike_ns) {
		v->strike_ns = now;
		if (++v->strikes >= MAX_STRIKES && c->ac) {
			/* a server that stopped answering: drop its queues (the replies still owed
			 * come back NULL, to requests already answered) and pause it */
			mark_down(v, "not answering");
			close_all(v);
		}
	}
}

static void on_timeout(void *p)
{
	struct req *q = p;

	if (!q->answered && wait_more(q))
		return; /* the timer keeps its reference */
	if (!q->answered)
		timed_out(q);
	req_put(q);
}

static void send_req(struct req *q, redisAsyncContext *ac);
static struct srv *route(const struct req *q);

/*
 * Write queued SETs to the PUT connection, a slice at a time, while its socket takes them.
 * hiredis appends a command to one output buffer (a realloc that copies all it holds when it
 * grows) and, after each partial write to the socket, moves what is left to the front: a
 * 4 MiB SET handed over whole was copied several times over on the I/O thread (a profile of
 * one mount reading at full speed: memmove 25% and the socket's copy 23% of its samples,
 * bench/shared_single.py --perf). Here the buffer holds one slice, which a write takes whole,
 * and the next goes in once it is out: each value is copied into the buffer once. Only one
 * SET is ever in slices (v->feeding); the others, and the lock DELs, wait for it in putq, so
 * no command lands inside another.
 */
static void feed(struct srv *v)
{
	struct sconn *c = &v->c[CONN_PUT];
	redisAsyncContext *ac;
	size_t burst = 0;

	while ((ac = c->ac) && burst < v->s->write_burst) {
		size_t before;

		if (sdslen(ac->c.obuf) < PUT_SLICE && v->feeding) {
			struct req *q = v->feeding;
			size_t n = q->value_len - v->fed < PUT_SLICE ? q->value_len - v->fed
								     : PUT_SLICE;
			sds ob = sdscatlen(ac->c.obuf, q->value + v->fed, n);

			if (!ob) { /* out of memory: the command cannot be finished */
				redisAsyncDisconnect(ac);
				return;
			}
			ac->c.obuf = ob;
			ev_add_write(c);
			v->fed += n;
			if (v->fed == q->value_len) {
				v->feeding = NULL;
				free(q->value);
				q->value = NULL;
			}
		} else if (sdslen(ac->c.obuf) < PUT_SLICE && v->putq.head) {
			send_req(reqq_pop(&v->putq), ac);
			continue;
		}
		before = sdslen(ac->c.obuf);
		if (before == 0 || !(ac->c.flags & REDIS_CONNECTED))
			return; /* nothing to write, or poll says when it can be */
		write_out(c, ac);
		if (c->ac != ac || sdslen(ac->c.obuf) > 0)
			return; /* the connection went, or the socket is full: poll says when */
		burst += before;
	}
	/* The burst is over with a SET half sent or more waiting: go on when poll next says the
	 * socket is writable (at once, after the loop's other work). Without asking, nothing
	 * would: the output buffer is empty, so hiredis asks for nothing, and a SET cut here
	 * stalled until some other request came. */
	if (c->ac && (v->feeding || v->putq.head))
		ev_add_write(c);
}

/* On the I/O thread: send @q to its server. */
static void start(void *p)
{
	struct req *q = p;
	struct bk_redis *s = q->s;
	bool put_conn = q->op == OP_PUT && !q->now;

	q->asked_ns = io_now_ns(s->io);
	if (!s->stopped) {
		if (!s->probed) /* the first call: is it a cluster? (see map_ask) */
			map_want(s);
		q->v = route(q);
		if (s->cluster && q->v->down) /* its master failed: a replica may have taken over */
			map_want(s);
	}
	redisAsyncContext *ac = s->stopped ? NULL : conn(q->v, put_conn ? CONN_PUT : CONN_GET);

	if (!ac) {
		if (q->op == OP_PUT && !q->unlock) {
			STAT_SUB(s, put_queued, q->put_len);
			STAT_ADD(s, put_drops, 1);
		}
		answer(q, s->stopped ? -ESHUTDOWN : -ECONNREFUSED, NULL);
		req_put(q);
		return;
	}
	if (put_conn) { /* in turn, after the SETs before it (see feed) */
		reqq_push(&q->v->putq, q);
		feed(q->v);
		return;
	}
	if ((q->op == OP_GET || q->op == OP_GETLOCK) &&
	    (q->v->getting >= GET_DEPTH || q->v->getq.head)) {
		/* in turn, after the GETs before it (see pump); timed from now */
		struct sconn *c = &q->v->c[CONN_GET];

		q->queued = q->timed = true;
		q->sent_ns = io_now_ns(s->io);
		q->gen = c->gen;
		q->replies_seen = c->replies;
		reqq_push(&q->v->getq, q);
		q->refs++;
		if (io_defer(s->io, q->timeout_ns, on_timeout, q) < 0)
			q->refs--; /* stopping: the stop hook answers it */
		return;
	}
	send_req(q, ac);
}

/*
 * Write the GETs waiting in @v's getq while fewer than GET_DEPTH are in flight. Redis runs
 * every command it has read from a client before it writes any reply, and it copies each
 * value into the client's reply buffers as it runs the GET: a readahead window's six GETs
 * written together were all run, 8-28 ms each on the loaded 2-core VM (Redis's SLOWLOG),
 * before the first byte of the first value left, past the 50 ms timeout of all six, which
 * then went to the store together: the paced three-mount bench row's 12-29 timeouts a run,
 * in sixes. Two in flight keep the connection busy (one value crosses while Redis runs the
 * next), and a GET's time is Redis's for it, not for the window before it. A GET waiting
 * here is timed from when it was asked, by the same rules as one written (on_timeout): it
 * waits on while replies before it keep coming, and times out when the server says nothing
 * for a timeout (no lock taken, no reply owed: it was never written). Once written, it gets
 * a whole timeout from the write: counted from when it was asked, GETs written from the
 * queue timed out 36 us to 13 ms after their write in the full-speed bench row.
 */
static void pump(struct srv *v)
{
	redisAsyncContext *ac = v->c[CONN_GET].ac;

	while (v->getq.head && v->getting < GET_DEPTH) {
		struct req *q;

		if (!ac || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING))) {
			drop_getq(v, v->s->stopped ? -ESHUTDOWN : -ECONNRESET);
			return;
		}
		q = reqq_pop(&v->getq);
		q->queued = false;
		send_req(q, ac);
	}
}

static void send_req(struct req *q, redisAsyncContext *ac)
{
	struct bk_redis *s = q->s;

	turn_start(ac);
	if (q->ask) /* an ASK redirect: each command of the call after its own ASKING */
		redisAsyncCommand(ac, NULL, NULL, "ASKING");
	if (q->op == OP_GETLOCK) {
		/* the GET and the SET NX go out together: one round trip */
		q->refs++;
		if (redisAsyncCommandArgv(ac, on_getlock_value, q, q->argc, q->argv,
					  q->argvlen) != REDIS_OK) {
			q->refs--;
			answer(q, -EIO, NULL);
			req_put(q);
			return;
		}
		if (q->ask)
			redisAsyncCommand(ac, NULL, NULL, "ASKING");
	}
	if ((q->op == OP_PUT ? redisAsyncFormattedCommand(ac, on_reply, q, q->value,
							   q->value_len < PUT_SLICE ? q->value_len
										    : PUT_SLICE)
	     : q->op == OP_GETLOCK ? redisAsyncCommandArgv(ac, on_reply, q, 6, q->argv + q->argc,
							    q->argvlen + q->argc)
	     : redisAsyncCommandArgv(ac, on_reply, q, q->argc, q->argv, q->argvlen)) != REDIS_OK) {
		if (q->op == OP_PUT && !q->unlock) {
			STAT_SUB(s, put_queued, q->put_len);
			STAT_ADD(s, put_errors, 1);
		}
		answer(q, -EIO, NULL);
		req_put(q);
		return;
	}
	if (q->op == OP_PUT && q->value_len > PUT_SLICE) { /* the rest in slices (feed) */
		q->v->feeding = q;
		q->v->fed = PUT_SLICE;
		return;
	}
	if (q->op == OP_PUT) { /* hiredis copied it into its output buffer */
		free(q->value);
		q->value = NULL;
		return;
	}
	if (q->op == OP_GET || q->op == OP_GETLOCK) {
		q->inflight = true;
		q->v->getting++;
	}
	q->sent_ns = io_now_ns(s->io);
	q->gen = ((struct sconn *)ac->data)->gen;
	q->replies_seen = ((struct sconn *)ac->data)->replies;
	if (q->timed) { /* it waited in getq: its timer runs, and counts its waits from here */
		q->extends = 0;
		return;
	}
	q->refs++;
	if (io_defer(s->io, q->timeout_ns, on_timeout, q) < 0)
		q->refs--; /* stopping: the stop hook answers it */
}

static struct req *req_new(struct bk_redis *s, enum op op, const char *route, size_t extra)
{
	struct req *q = calloc(1, sizeof(*q) + extra);

	if (!q)
		return NULL;
	q->s = s;
	q->op = op;
	q->refs = 1;
	q->timeout_ns = s->timeout_ns;
	q->v = &s->srv[s->nring == 1 ? 0 : bk_chash_pick(&s->ring, route, strlen(route))];
	q->slot = bk_cluster_slot(route, strlen(route));
	return q;
}

static int submit(struct req *q)
{
	int e = io_defer(q->s->io, 0, start, q);

	if (e < 0) {
		if (q->op == OP_PUT)
			STAT_SUB(q->s, put_queued, q->put_len);
		free(q->value);
		free(q);
	}
	return e;
}

int bk_redis_get(struct bk_redis *s, const char *key, const struct bk_redis_into *into,
		  bk_redis_get_fn done, void *arg)
{
	size_t kl = strlen(key);
	struct req *q = req_new(s, OP_GET, key, kl + 1);

	if (!q)
		return -ENOMEM;
	memcpy(q->buf, key, kl + 1);
	q->get_done = done;
	q->into = into;
	q->arg = arg;
	q->argc = 2;
	q->argv[0] = "GET";
	q->argvlen[0] = 3;
	q->argv[1] = q->buf;
	q->argvlen[1] = kl;
	STAT_ADD(s, gets, 1);
	return submit(q);
}

/* The RESP of a command whose arguments are @argv (@n of them) and, when @tail, one more made
 * of @hdr (@hlen bytes) and @data (@dlen), in one malloc'd buffer: the value is copied once
 * here, and once more by hiredis into its output buffer (see feed). Formatting with
 * redisAsyncCommandArgv copied it three times (our buffer, hiredis's formatted command, its
 * output buffer), all on the I/O thread. @return the buffer and *len, or NULL. */
static char *format_cmd(const char *const *argv, int n, const void *hdr, size_t hlen,
			const void *data, size_t dlen, bool tail, size_t *len)
{
	size_t need = 32 + hlen + dlen, off = 0;
	char *buf;

	for (int i = 0; i < n; i++)
		need += 32 + strlen(argv[i]);
	buf = malloc(need);
	if (!buf)
		return NULL;
	off += (size_t)snprintf(buf + off, need - off, "*%d\r\n", n + (tail ? 1 : 0));
	for (int i = 0; i < n; i++)
		off += (size_t)snprintf(buf + off, need - off, "$%zu\r\n%s\r\n", strlen(argv[i]),
					argv[i]);
	if (tail) {
		off += (size_t)snprintf(buf + off, need - off, "$%zu\r\n", hlen + dlen);
		memcpy(buf + off, hdr, hlen);
		memcpy(buf + off + hlen, data, dlen);
		off += hlen + dlen;
		memcpy(buf + off, "\r\n", 2);
		off += 2;
	}
	*len = off;
	return buf;
}

uint64_t bk_redis_put_room(const struct bk_redis *s)
{
	uint64_t q = __atomic_load_n(&s->st.put_queued, __ATOMIC_RELAXED);

	return q < s->put_limit ? s->put_limit - q : 0;
}

int bk_redis_put(struct bk_redis *s, const char *key, const void *hdr, size_t hlen,
		  const void *data, size_t len)
{
	size_t vl = hlen + len;
	const char *argv[2] = {"SET", key};
	struct req *q;

	if (__atomic_add_fetch(&s->st.put_queued, vl, __ATOMIC_RELAXED) > s->put_limit) {
		STAT_SUB(s, put_queued, vl);
		STAT_ADD(s, put_drops, 1);
		return -ENOBUFS;
	}
	q = req_new(s, OP_PUT, key, 0);
	if (q)
		q->value = format_cmd(argv, 2, hdr, hlen, data, len, true, &q->value_len);
	if (!q || !q->value) {
		STAT_SUB(s, put_queued, vl);
		free(q);
		return -ENOMEM;
	}
	q->put_len = vl;
	q->answered = true; /* nobody to answer */
	return submit(q);
}

int bk_redis_unlock(struct bk_redis *s, const char *key, const char *lock, bool after_put)
{
	const char *argv[5] = {"EVAL", UNLOCK_LUA, "1", lock, s->token};
	size_t ll = strlen(lock) + 1;
	struct req *q = req_new(s, OP_PUT, key, ll);

	if (q)
		q->value = format_cmd(argv, 5, NULL, 0, NULL, 0, false, &q->value_len);
	if (!q || !q->value) {
		free(q);
		return -ENOMEM;
	}
	memcpy(q->buf, lock, ll);
	q->lock = q->buf;
	q->now = !after_put;
	q->unlock = true;
	q->answered = true;
	return submit(q);
}

int bk_redis_get_lock(struct bk_redis *s, const char *key, const char *lock,
		       uint64_t lock_ms, const struct bk_redis_into *into, bk_redis_get_fn done,
		       void *arg)
{
	size_t kl = strlen(key), ll = strlen(lock);
	struct req *q = req_new(s, OP_GETLOCK, key, kl + 1 + ll + 1 + 24);
	char *ms;

	if (!q)
		return -ENOMEM;
	memcpy(q->buf, key, kl + 1);
	memcpy(q->buf + kl + 1, lock, ll + 1);
	ms = q->buf + kl + 1 + ll + 1;
	snprintf(ms, 24, "%llu", (unsigned long long)(lock_ms ? lock_ms : 1));
	q->get_done = done;
	q->into = into;
	q->arg = arg;
	q->argc = 2;
	q->argv[0] = "GET";
	q->argv[1] = q->buf;
	q->argv[2] = "SET"; /* SET lock token NX PX ms */
	q->argv[3] = q->buf + kl + 1;
	q->argv[4] = s->token;
	q->argv[5] = "NX";
	q->argv[6] = "PX";
	q->argv[7] = ms;
	for (int i = 0; i < 8; i++)
		q->argvlen[i] = strlen(q->argv[i]);
	STAT_ADD(s, gets, 1);
	return submit(q);
}

int bk_redis_eval(struct bk_redis *s, const char *script, const char *key,
		   const char *const *args, int nargs, uint64_t timeout_ns, bk_redis_eval_fn done,
		   void *arg)
{
	size_t need = strlen(key) + 1;
	struct req *q;
	char *w;

	if (nargs < 0 || nargs > 8)
		return -EINVAL;
	for (int i = 0; i < nargs; i++)
		need += strlen(args[i]) + 1;
	q = req_new(s, OP_EVAL, key, need);
	if (!q)
		return -ENOMEM;
	q->eval_done = done;
	q->arg = arg;
	q->timeout_ns = timeout_ns;
	q->argv[0] = "EVAL";
	q->argv[1] = script;
	q->argv[2] = "1";
	w = q->buf;
	for (int i = -1; i < nargs; i++) {
		const char *a = i < 0 ? key : args[i];
		size_t l = strlen(a);

		memcpy(w, a, l + 1);
		q->argv[4 + i] = w;
		w += l + 1;
	}
	q->argc = 4 + nargs;
	for (int i = 0; i < q->argc; i++)
		q->argvlen[i] = strlen(q->argv[i]);
	return submit(q);
}

/* ---- the cluster -------------------------------------------------------------------------- */

/*
 * A Redis Cluster spreads the keys itself: each key's hash slot (cluster.h) belongs to one
 * master, which a replica replaces when it fails, and slots move between masters (resharding).
 * So on a cluster the ring is not used: each call goes to its slot's master (route), and the
 * masters are servers like the ones named in the option, two connections each, found in the
 * map (srv_at adds them to srv[], MAX_SERVERS in all).
 *
 *   start ─► route: slot[q->slot] ─► that master (unknown: the ring's server, which redirects)
 *   reply -MOVED s h:p ─► slot[s] = h:p, map_want ─► the call again on h:p       (resend)
 *   reply -ASK s h:p ───► the call again on h:p after ASKING; the map unchanged (resend)
 *   map_want ─► map_ask (at most every MAP_EVERY_NS) ─► CLUSTER NODES ─► on_map ─► slot[]
 *
 * Whether the servers are a cluster is asked by the first call (on the I/O thread, so no
 * FUSE thread waits for it): a CLUSTER NODES to one of them, on its GET connection, before
 * that call. A map says it is; an error ("cluster support disabled", or an ACL that refuses
 * CLUSTER) says it is not, and the ring stays. A MOVED from any server says it is too, and
 * is followed even without a map. A slot's map is asked for again after a MOVED, and while
 * calls find their master down: killed, its connections are refused at once (the calls go to
 * the store), and the map that names its replica as master comes once the cluster has
 * promoted it (cluster-node-timeout and an election). A call follows MAX_REDIRECTS at most,
 * within its own timeouts (wait_until's cap); one that cannot is answered -EIO, and its block
 * read from the store. A SET redirected is not sent again (hiredis has its value): the map
 * learns from it, and the block is not shared until it is read again.
 */

/* The server at @host:@port, added to srv[] if new. @return it, or NULL (MAX_SERVERS). */
static struct srv *srv_at(struct bk_redis *s, const char *host, int port)
{
	struct srv *v;

	for (unsigned i = 0; i < s->nsrv; i++)
		if (s->srv[i].port == port && strcmp(s->srv[i].host, host) == 0)
			return &s->srv[i];
	if (s->nsrv == MAX_SERVERS || strlen(host) >= sizeof(v->host)) {
		if (!s->full_logged)
			logf_(s, 0, "shared tier: redis cluster node %.100s:%d is one too many "
				    "(at most %d servers): its slots are read from the store",
			      host, port, MAX_SERVERS);
		s->full_logged = true;
		return NULL;
	}
	v = &s->srv[s->nsrv];
	snprintf(v->host, sizeof(v->host), "%s", host);
	v->port = port;
	snprintf(v->name, sizeof(v->name), "%s:%d", host, port);
	v->s = s;
	s->nsrv++;
	__atomic_store_n(&s->st.servers, s->nsrv, __ATOMIC_RELAXED);
	return v;
}

static struct srv *route(const struct req *q)
{
	uint8_t i = q->s->slot[q->slot];

	return i == BK_CLUSTER_NONE ? q->v : &q->s->srv[i];
}

static void map_ask(void *arg);

/* A new slot map is wanted: asked now, or once MAP_EVERY_NS has passed since the last. */
static void map_want(struct bk_redis *s)
{
	uint64_t now = io_now_ns(s->io), at = s->map_ns + MAP_EVERY_NS;

	if (s->map_pending || s->stopped ||
	    (s->map_asked && now < s->map_sent_ns + CALL_MAX * s->timeout_ns))
		return; /* one asked at a time (one that is never answered, for a while) */
	s->map_pending = io_defer(s->io, at > now ? at - now : 0, map_ask, s) == 0;
}

/* A map from @from (@len bytes of CLUSTER NODES) replaces the slots: all of it, or nothing
 * (a map that does not parse is logged once, and the slots stay as they were). */
static void take_map(struct bk_redis *s, struct srv *from, const char *text, size_t len)
{
	struct bk_cluster_map *m = malloc(sizeof(*m));
	uint8_t idx[BK_CLUSTER_MASTERS];
	int e = m ? bk_cluster_parse_nodes(text, len, from->host, m) : -ENOMEM;

	if (e < 0) {
		if (!s->map_logged)
			logf_(s, 0, "shared tier: redis %s sent a cluster map tierfs does not take "
				    "(%s): keys follow MOVED and ASK only", from->name,
			      e == -E2BIG ? "more masters than it serves" : "not CLUSTER NODES");
		s->map_logged = true;
		if (e != -ENOMEM) {
			STAT_ADD(s, bad_replies, 1);
			s->probed = true; /* not asked again at every call: on MOVED, or a master
					   * down, as on a cluster */
		}
		free(m);
		return;
	}
	for (unsigned i = 0; i < m->nmasters; i++) {
		struct srv *v = srv_at(s, m->master[i].host, m->master[i].port);

		idx[i] = v ? (uint8_t)(v - s->srv) : BK_CLUSTER_NONE;
	}
	for (unsigned i = 0; i < BK_CLUSTER_SLOTS; i++)
		s->slot[i] = m->slot[i] == BK_CLUSTER_NONE ? BK_CLUSTER_NONE : idx[m->slot[i]];
	for (unsigned i = s->nring; i < s->nsrv; i++) {
		/* a master found before and no longer in the map (failed over): not "down" in
		 * the gauge for ever; if it comes back as a master, it is used again */
		struct srv *v = &s->srv[i];
		bool mapped = false;

		for (unsigned j = 0; j < m->nmasters && !mapped; j++)
			mapped = idx[j] == i;
		if (!mapped && v->down) {
			v->down = false;
			STAT_SUB(s, servers_down, 1);
		}
	}
	if (!s->mapped)
		logf_(s, 2, "shared tier: redis %s is a cluster node (%u masters serve its slots): "
			    "keys go to their hash slot's master", from->name, m->nmasters);
	s->cluster = s->probed = s->mapped = true;
	free(m);
}

static void on_map(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;
	struct sconn *c = ac->data;
	struct srv *v = c->v;
	struct bk_redis *s = v->s;

	if (reply) {
		c->replies++;
		mark_up(v);
	}
	if ((unsigned)(uintptr_t)priv != s->map_seq)
		return; /* an older one, given up on */
	s->map_asked = false;
	if (!reply)
		return;
	if (reply->type == REDIS_REPLY_STRING && reply->str) {
		take_map(s, v, reply->str, reply->len);
	} else if (!s->cluster) {
		s->probed = true; /* a plain server (or one that will not say): the ring */
	} else if (!s->map_logged) {
		s->map_logged = true;
		logf_(s, 1, "shared tier: redis %s did not answer CLUSTER NODES (%.200s): keys "
			    "follow MOVED and ASK only", v->name,
		      reply->type == REDIS_REPLY_ERROR && reply->str ? reply->str : "not a map");
	}
}

/* Ask one server for the map, the servers taking turns; one in its retry pause is passed. */
static void map_ask(void *arg)
{
	struct bk_redis *s = arg;
	uint64_t now = io_now_ns(s->io);

	s->map_pending = false;
	s->map_ns = now;
	for (unsigned k = 0; !s->stopped && k < s->nsrv; k++) {
		struct srv *v = &s->srv[(s->map_next + k) % s->nsrv];
		redisAsyncContext *ac = conn(v, CONN_GET);

		if (!ac)
			continue;
		turn_start(ac);
		if (redisAsyncCommand(ac, on_map, (void *)(uintptr_t)++s->map_seq,
				      "CLUSTER NODES") != REDIS_OK)
			continue;
		s->map_next = (unsigned)(v - s->srv) + 1;
		s->map_asked = true;
		s->map_sent_ns = now;
		STAT_ADD(s, maps, 1);
		return;
	}
}

/* @reply, to @q from q->v, may be a redirection: a MOVED updates the slot's master and asks
 * for the whole map, an ASK is for this call only. @return the node named (*ret_ask set), or
 * NULL: no redirection (or a malformed one: an error), or no room for the node. */
static struct srv *note_redirect(struct req *q, const redisReply *reply, bool *ret_ask)
{
	struct bk_redis *s = q->s;
	struct bk_cluster_redirect rd;
	struct srv *to;

	if (!reply || reply->type != REDIS_REPLY_ERROR || !reply->str ||
	    bk_cluster_parse_redirect(reply->str, reply->len, &rd) < 0)
		return NULL;
	STAT_ADD(s, redirects, 1);
	to = srv_at(s, rd.host[0] ? rd.host : q->v->host, rd.port);
	if (!rd.ask) {
		s->slot[rd.slot] = to ? (uint8_t)(to - s->srv) : BK_CLUSTER_NONE;
		s->cluster = s->probed = true;
		map_want(s);
	}
	*ret_ask = rd.ask;
	return to;
}

/* Send unanswered @q again, to @to (after ASKING if @ask), with the reference of the reply
 * callback that calls this; its timer runs on (see send_req). @return true if it went, or
 * failed and was answered; false if it cannot go (the caller answers it). */
static bool resend(struct req *q, struct srv *to, bool ask)
{
	struct srv *from = q->v;
	redisAsyncContext *ac;

	if (q->answered || q->s->stopped || ++q->redirects > MAX_REDIRECTS ||
	    !(ac = conn(to, CONN_GET)))
		return false;
	if (q->inflight) { /* its place on the old connection is free */
		q->inflight = false;
		from->getting--;
	}
	q->v = to;
	q->ask = ask;
	q->timed = true;
	send_req(q, ac);
	pump(from);
	return true;
}

/* ---- the poller (io.c) ------------------------------------------------------------------------ */

static unsigned poll_fds(void *arg, struct curl_waitfd *fds, unsigned max)
{
	struct bk_redis *s = arg;
	unsigned n = 0;

	s->stopped = false; /* called only by the running loop: after a restart, serve again */
	for (unsigned i = 0; i < s->nsrv && n < max; i++) {
		for (int j = 0; j < NCONN && n < max; j++) {
			struct sconn *c = &s->srv[i].c[j];

			if (!c->ac || !(c->rd || c->wr))
				continue;
			fds[n] = (struct curl_waitfd){
				.fd = c->ac->c.fd,
				.events = (short)((c->rd ? CURL_WAIT_POLLIN : 0) |
						  (c->wr ? CURL_WAIT_POLLOUT : 0)),
			};
			s->polled[n++] = c;
		}
	}
	return n;
}

/* The replies @ac owes: one per callback waiting (a NULL one too). */
static unsigned owed(const redisAsyncContext *ac)
{
	unsigned n = 0;

	for (const redisCallback *cb = ac->replies.head; cb; cb = cb->next)
		n++;
	return n;
}

/*
 * @c's server sent what tierfs does not take (resp.h): a reply over its bound, one hiredis
 * would not parse, or one nobody asked for; or its reply could not be given room (@err
 * -ENOMEM). Its stream can no longer be trusted to be in step: close both of its connections
 * (what they owed is answered -ECONNRESET, and read from the store) and leave it alone for
 * RETRY_NS, like a server that stopped answering. Counted as an error, and in bad_replies.
 */
static void refuse(struct sconn *c, int err)
{
	struct srv *v = c->v;

	STAT_ADD(v->s, bad_replies, 1);
	STAT_ADD(v->s, errors, 1);
	mark_down(v, err == -EMSGSIZE ? "a reply longer than a value, or a line too long"
		     : err == -E2BIG ? "an array too long or too deep"
		     : err == -ENOMEM ? "no memory for its reply"
				     : "a reply that is not RESP, or not asked for");
	close_all(v);
}

/*
 * Read what @c's socket holds, up to READ_BURST, READ_CHUNK at a time straight into hiredis's
 * read buffer; each read is scanned (resp.h) before hiredis may parse it, then hiredis answers
 * what is whole (redisProcessCallbacks). hiredis alone reads 16 KiB per call into its stack
 * and appends that to the buffer: one call per poll made a 4 MiB value take 256 turns of the
 * I/O loop, each behind the curl transfers of that turn (with three mounts reading at full
 * speed, GETs of values Redis had sent timed out in the mount's own socket buffer), and a
 * loop of such calls spent a read, an ioctl and a copy per 16 KiB (a mount reading values
 * from Redis: hiredis's append 7% of its samples). And what hiredis reads itself is not
 * scanned: so once connected, it reads nothing (redisAsyncHandleRead is called only when our
 * read found the end of the stream or an error, which hiredis then finds too and handles).
 * Any read short of READ_CHUNK ends the loop: the socket is empty.
 */
static void read_all(struct sconn *c, redisAsyncContext *ac)
{
	size_t done = 0;

	while (done < READ_BURST) {
		redisReader *r = ac->c.reader;
		ssize_t n;
		sds b;
		int k;

		if (!(b = sdsMakeRoomFor(r->buf, READ_CHUNK))) {
			refuse(c, -ENOMEM);
			return;
		}
		r->buf = b;
		n = read(ac->c.fd, b + sdslen(b), READ_CHUNK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			redisAsyncHandleRead(ac); /* the end or an error: hiredis closes */
			return;
		}
		k = bk_resp_feed(&c->scan, r, (size_t)n, owed(ac));
		if (k < 0) {
			refuse(c, k);
			return;
		}
		if (k > 0)
			c->turn_ns = io_now_ns(c->v->s->io);
		done += (size_t)n;
		redisProcessCallbacks(ac); /* may free ac: then c->ac is no longer it */
		if ((size_t)n < READ_CHUNK || c->ac != ac)
			return;
	}
}

static void poll_ready(void *arg, const struct curl_waitfd *fds, unsigned n)
{
	struct bk_redis *s = arg;

	for (unsigned i = 0; i < n; i++) {
		struct sconn *c = s->polled[i];
		redisAsyncContext *ac = c->ac;

		/* the context may have gone while an earlier one was handled */
		if (!ac || ac->c.fd != fds[i].fd)
			continue;
		if (!(ac->c.flags & REDIS_CONNECTED)) {
			/* its connect ended: finished by the write path, which reads nothing */
			if (fds[i].revents)
				write_out(c, ac);
			if (c->ac == ac && c == &c->v->c[CONN_PUT])
				feed(c->v); /* the rest of a SET hiredis had a slice of */
			continue;
		}
		if (fds[i].revents & CURL_WAIT_POLLIN) {
			c->v->rx_ns = c->rx_ns = io_now_ns(s->io);
			read_all(c, ac);
		}
		if (c->ac == ac && (fds[i].revents & CURL_WAIT_POLLOUT)) {
			write_out(c, ac);
			if (c == &c->v->c[CONN_PUT])
				feed(c->v);
		}
	}
}

/* The loop stops: close every connection; what was waiting is answered -ESHUTDOWN. */
static void poll_stop(void *arg)
{
	struct bk_redis *s = arg;

	s->stopped = true;
	s->map_asked = s->map_pending = false; /* the loop drops its timers */
	for (unsigned i = 0; i < s->nsrv; i++) {
		struct srv *v = &s->srv[i];

		close_all(v);
		while (v->holds) { /* the loop drops its timers: renewing ends here */
			struct hold *h = v->holds;

			v->holds = h->next;
			free(h);
		}
		v->renewing = false;
	}
}

/* ---- setup ------------------------------------------------------------------------------------- */

/* This mount's fetch locks' value: 16 random bytes in hex. @return 0 or -errno with @err. */
static int make_token(struct bk_redis *s, char *err, size_t errlen)
{
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		snprintf(err, errlen, "shared tier: no random bytes for the lock token: %s",
			 strerror(errno));
		return errno ? -errno : -EIO;
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
	return 0;
}

/* The servers of "[redis://]host:port[,host:port...]" @p into s->srv, their names into
 * @names. @return 0 or -EINVAL with one line in @err. */
static int parse_servers(struct bk_redis *s, const char *p, const char **names, char *err,
			 size_t errlen)
{
	if (strncmp(p, "redis://", 8) == 0)
		p += 8;
	while (*p) {
		const char *end = strchr(p, ','), *colon;
		size_t l = end ? (size_t)(end - p) : strlen(p);
		int shown = (int)(l > 100 ? 100 : l);
		struct srv *v;
		char *tail;
		long port;

		if (s->nsrv == MAX_SERVERS) {
			snprintf(err, errlen, "shared: at most %d servers", MAX_SERVERS);
			return -EINVAL;
		}
		v = &s->srv[s->nsrv];
		colon = memrchr(p, ':', l);
		if (!colon || colon == p || (size_t)(colon - p) >= sizeof(v->host)) {
			snprintf(err, errlen, "shared: '%.*s' is not host:port", shown, p);
			return -EINVAL;
		}
		port = strtol(colon + 1, &tail, 10);
		if (tail != p + l || port < 1 || port > 65535) {
			snprintf(err, errlen, "shared: bad port in '%.*s'", shown, p);
			return -EINVAL;
		}
		memcpy(v->host, p, (size_t)(colon - p));
		v->port = (int)port;
		snprintf(v->name, sizeof(v->name), "%s:%d", v->host, v->port);
		v->s = s;
		names[s->nsrv++] = v->name;
		p += l;
		if (*p == ',')
			p++;
	}
	if (s->nsrv == 0) {
		snprintf(err, errlen, "shared: no server named");
		return -EINVAL;
	}
	return 0;
}

int bk_redis_new(struct backend *b, const struct bk_redis_cfg *cfg, struct bk_redis **ret,
		  char *err, size_t errlen)
{
	struct bk_redis *s;
	const char *names[MAX_SERVERS], *wb;
	int e = -ENOMEM;

	if (!b->io) {
		snprintf(err, errlen, "shared tier: this store has no I/O loop");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->b = b;
	s->io = b->io;
	s->timeout_ns = cfg->timeout_ns;
	s->put_limit = cfg->put_limit;
	s->max_value = cfg->max_value;
	wb = getenv("TIERFS_REDIS_WRITE_BURST");
	s->write_burst = wb ? (size_t)strtoull(wb, NULL, 10) : 0;
	if (s->write_burst == 0 || s->write_burst > WRITE_BURST)
		s->write_burst = WRITE_BURST;
	if (bk_resp_functions(&s->fns) < 0)
		goto fail;
	s->dflt_string = s->fns.createString;
	s->fns.createString = into_string;
	s->srv = calloc(MAX_SERVERS, sizeof(*s->srv));
	if (!s->srv)
		goto fail;
	e = make_token(s, err, errlen);
	if (e == 0)
		e = parse_servers(s, cfg->servers, names, err, errlen);
	if (e == 0)
		e = bk_chash_build(&s->ring, names, s->nsrv, BK_CHASH_VNODES);
	if (e == 0 && cfg->password && !(s->password = strdup(cfg->password)))
		e = -ENOMEM;
	if (e < 0)
		goto fail;
	s->nring = s->nsrv;
	memset(s->slot, BK_CLUSTER_NONE, sizeof(s->slot));
	s->st.servers = s->nsrv;
	io_set_poller(s->io, &(struct io_poller){.fds = poll_fds, .ready = poll_ready,
						 .stop = poll_stop, .arg = s});
	*ret = s;
	return 0;
fail:
	bk_redis_free(s);
	return e;
}

void bk_redis_free(struct bk_redis *s)
{
	if (!s)
		return;
	if (s->srv) {
		poll_stop(s);
		if (s->nsrv)
			io_set_poller(s->io, NULL);
	}
	bk_chash_done(&s->ring);
	if (s->password) {
		explicit_bzero(s->password, strlen(s->password));
		free(s->password);
	}
	free(s->srv);
	free(s);
}

void bk_redis_get_stats(struct bk_redis *s, struct bk_redis_stats *ret)
{
	struct bk_redis_stats *st = &s->st;

	ret->gets = __atomic_load_n(&st->gets, __ATOMIC_RELAXED);
	ret->found = __atomic_load_n(&st->found, __ATOMIC_RELAXED);
	ret->missing = __atomic_load_n(&st->missing, __ATOMIC_RELAXED);
	ret->timeouts = __atomic_load_n(&st->timeouts, __ATOMIC_RELAXED);
	ret->extended = __atomic_load_n(&st->extended, __ATOMIC_RELAXED);
	ret->errors = __atomic_load_n(&st->errors, __ATOMIC_RELAXED);
	ret->bad_replies = __atomic_load_n(&st->bad_replies, __ATOMIC_RELAXED);
	ret->bytes_in = __atomic_load_n(&st->bytes_in, __ATOMIC_RELAXED);
	ret->puts = __atomic_load_n(&st->puts, __ATOMIC_RELAXED);
	ret->put_bytes = __atomic_load_n(&st->put_bytes, __ATOMIC_RELAXED);
	ret->put_drops = __atomic_load_n(&st->put_drops, __ATOMIC_RELAXED);
	ret->put_errors = __atomic_load_n(&st->put_errors, __ATOMIC_RELAXED);
	ret->put_queued = __atomic_load_n(&st->put_queued, __ATOMIC_RELAXED);
	ret->evals = __atomic_load_n(&st->evals, __ATOMIC_RELAXED);
	ret->servers_down = __atomic_load_n(&st->servers_down, __ATOMIC_RELAXED);
	ret->servers = __atomic_load_n(&st->servers, __ATOMIC_RELAXED);
	ret->redirects = __atomic_load_n(&st->redirects, __ATOMIC_RELAXED);
	ret->maps = __atomic_load_n(&st->maps, __ATOMIC_RELAXED);
	for (int i = 0; i < BK_REDIS_LAT_BUCKETS; i++)
		ret->get_lat[i] = __atomic_load_n(&st->get_lat[i], __ATOMIC_RELAXED);
	ret->get_lat_sum_us = __atomic_load_n(&st->get_lat_sum_us, __ATOMIC_RELAXED);
}
