/*
 * replay.c - a fleet replayed: its traces read in time order, each read handed to the cache
 * of its simulated mount at the time it came, the event queue run in between.
 *
 *   files ─► grouped by trace id (the parts of one mount's trace, in part order) ─► mounts
 *
 *   mount i:  reader(part k) ─► reorder heap (by request time; a record is written when its
 *             read is answered, so the file is in answer order: the heap holds what was
 *             asked within the longest latency seen, plus a margin) ─► next read at T_i
 *   fleet:    heap of mounts by T_i ─► the earliest: run the events due by T_i, then
 *             cache_read(mount i), which plugs its store (env.plug) as it does a mount's
 *
 *   mount:  struct sim_mount { clock (env arg) | cache | chain: [port of the fleet's Redis]
 *           ─► its store | streams (one cache_stream per traced file handle) | results }
 *
 * A read's record holds the object's size and mtime, so its version is a struct cache_obj
 * at once (interned, one per version, shared by the mounts: the oid is the trace's salted
 * (key, version) hashes, so traces salted alike share blocks in Redis). Its stream is the
 * hash of the file handle it was read through: a handle that reads another object, or whose
 * read is flagged as its first (TRACE_F_OPEN: handles' addresses are reused), is a new open,
 * and its stream starts over. The reply records the read's latency and bytes.
 *
 * Alignment: each trace's times count from its start (its header's wall clock); mounts are
 * aligned on those wall clocks, or all start at 0 (align_start). Each mount's wall clock,
 * which decides what is hot, is its own trace's.
 *
 * A mount with more than max_queued reads waiting stops the run: settings that cannot serve
 * the trace (a limiter far below the reads' rate) would otherwise grow queues without bound.
 *
 * Locking: none; the whole world runs on this thread (the cache takes its own locks,
 * uncontended). Workload: millions of reads a second; a hit costs a heap step, a record's
 * decoding and the cache's hit path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs.h"
#include "sim_i.h"
#include "trace.h"

#define MONO0 (1000ULL * 1000000000ULL) /* the cache's clock at time 0 */
#define REORDER_NS                                                                                 \
	(100ULL * 1000000ULL) /* margin of the reorder window over the longest                     \
			       * latency seen (see fill) */

/* One version of one object, as every mount sees it (the cache's ctx). */
struct sim_obj {
	struct sim_obj *hnext;
	struct cache_obj co; /* co.ctx is the sim_obj itself */
	uint8_t *seen;	     /* a bit per mount: it has read this version (NULL: none has) */
};

/* An open file of the traced mount, by the hash of its handle. */
struct sim_stream {
	uint32_t id;
	bool used;
	struct sim_obj *o; /* what it reads now */
	struct cache_stream s;
};

struct world;

struct sim_mount {
	struct sim_clock clk; /* first: the env's arg */
	struct world *w;
	unsigned idx;
	struct cache *c;
	struct sim_store *store;
	struct sim_redis_port *port;
	struct sim_disk *disk; /* with cache_dir: its disk tier, first in the chain; else NULL */
	struct sim_stream *streams; /* open addressing */
	uint32_t smask, nstreams;
	char **parts; /* its files, in part order */
	unsigned nparts, part;
	struct trace_reader *rd; /* the part being read, NULL at the end */
	struct trace_read *pend; /* reorder heap by t_ns */
	size_t npend, cappend;
	uint64_t last_answer_t;	  /* the latest answer time read from the file (t + lat) */
	uint64_t max_lat;	  /* the longest latency read from the file */
	uint64_t offset;	  /* world time of the trace's start */
	uint64_t outstanding;	  /* reads waiting */
	uint64_t first_t, last_t; /* world times of its first read and last answer */
	struct sim_result res;
};

/* A read waiting for its answer (the reply's req). */
struct sim_req {
	struct sim_req *next; /* the free list */
	struct sim_mount *m;
	uint64_t t0;
};

struct world {
	const struct sim_cfg *cfg;
	struct sim_events q;
	struct sim_redis *redis;
	struct sim_mount *m;
	unsigned nm;
	unsigned *heap; /* mounts by next read time */
	unsigned nheap;
	struct sim_obj **objs; /* interned versions */
	uint64_t omask, nobjs;
	struct sim_req *free_reqs;
	char *err;
	size_t errlen;
	int error;
	uint64_t block_size;	     /* the mounts' (one set of options for all) */
	void *zeros;		     /* block_size zeros: the bytes of written blocks */
	unsigned incomplete;	     /* files whose header does not say complete */
	const char *incomplete_path; /* the first */
};

/* ---- objects and streams -------------------------------------------------------------------- */

static uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ULL)) * 0xbf58476d1ce4e5b9ULL;

	return h ^ (h >> 29);
}

static int objs_grow(struct world *w)
{
	uint64_t cap = w->omask ? 2 * (w->omask + 1) : 4096;
	struct sim_obj **t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint64_t i = 0; w->omask && i <= w->omask; i++)
		for (struct sim_obj *o = w->objs[i], *next; o; o = next) {
			next = o->hnext;
			o->hnext = t[mix(o->co.id.hi, o->co.id.lo) & (cap - 1)];
			t[mix(o->co.id.hi, o->co.id.lo) & (cap - 1)] = o;
		}
	free(w->objs);
	w->objs = t;
	w->omask = cap - 1;
	return 0;
}

/* The version a read names. @return NULL only for out-of-memory. */
static struct sim_obj *intern(struct world *w, const struct trace_read *r)
{
	struct cache_oid id = {r->obj, r->ver};
	struct sim_obj **pp, *o;

	if (w->nobjs >= w->omask && objs_grow(w) < 0)
		return NULL;
	for (pp = &w->objs[mix(id.hi, id.lo) & w->omask]; (o = *pp); pp = &o->hnext)
		if (cache_oid_eq(o->co.id, id))
			return o;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->co = (struct cache_obj){.id = id, .size = r->size, .mtime = r->mtime, .ctx = o};
	*pp = o;
	w->nobjs++;
	return o;
}

static int streams_grow(struct sim_mount *m)
{
	uint32_t cap = m->smask ? 2 * (m->smask + 1) : 256;
	struct sim_stream *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; m->smask && i <= m->smask; i++) {
		uint32_t s;

		if (!m->streams[i].used)
			continue;
		for (s = (uint32_t)mix(m->streams[i].id, 1) & (cap - 1); t[s].used;
		     s = (s + 1) & (cap - 1))
			;
		t[s] = m->streams[i];
	}
	free(m->streams);
	m->streams = t;
	m->smask = cap - 1;
	return 0;
}

/* The stream of the handle read @r came through, reading @r's version (interned here unless
 * the stream read it last: a sequential reader asks the object table once per open). A
 * handle seen reading another version starts over. @return NULL only for out-of-memory. */
static struct sim_stream *stream_of(struct sim_mount *m, const struct trace_read *r)
{
	struct sim_stream *st;
	uint32_t s;

	if ((m->nstreams + 1) * 2 > m->smask + 1 && streams_grow(m) < 0)
		return NULL;
	for (s = (uint32_t)mix(r->stream, 1) & m->smask; m->streams[s].used; s = (s + 1) & m->smask)
		if (m->streams[s].id == r->stream)
			break;
	st = &m->streams[s];
	if (st->used && st->o->co.id.hi == r->obj && st->o->co.id.lo == r->ver) {
		if (r->flags & TRACE_F_OPEN)
			memset(&st->s, 0, sizeof(st->s)); /* a new open at the same address */
		return st;
	}
	struct sim_obj *o = intern(m->w, r);

	if (!o)
		return NULL;
	if (!st->used)
		m->nstreams++;
	*st = (struct sim_stream){.id = r->stream, .used = true, .o = o};
	return st;
}

/* ---- reading the traces --------------------------------------------------------------------- */

static void pend_push(struct sim_mount *m, const struct trace_read *r)
{
	size_t i = m->npend++;

	while (i > 0 && m->pend[(i - 1) / 2].t_ns > r->t_ns) {
		m->pend[i] = m->pend[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	m->pend[i] = *r;
}

static struct trace_read pend_pop(struct sim_mount *m)
{
	struct trace_read top = m->pend[0], last = m->pend[--m->npend];
	size_t i = 0;

	for (size_t c; (c = 2 * i + 1) < m->npend; i = c) {
		if (c + 1 < m->npend && m->pend[c + 1].t_ns < m->pend[c].t_ns)
			c++;
		if (m->pend[c].t_ns >= last.t_ns)
			break;
		m->pend[i] = m->pend[c];
	}
	if (m->npend)
		m->pend[i] = last;
	return top;
}

/* The next record of @m's files into *ret. @return 1, 0 at the end of the last, -errno. */
static int next_record(struct sim_mount *m, struct trace_read *ret)
{
	struct world *w = m->w;

	while (m->rd) {
		int r = trace_reader_next(m->rd, ret, w->err, w->errlen);

		if (r != 0)
			return r;
		trace_reader_close(m->rd);
		m->rd = NULL;
		if (++m->part < m->nparts &&
		    (r = trace_reader_open(m->parts[m->part], &m->rd, w->err, w->errlen)) < 0)
			return r;
	}
	return 0;
}

/* Read ahead until the earliest pending read can no longer be preceded by one still in the
 * file. @return 1 when one is ready, 0 when the mount has no more, -errno. */
static int fill(struct sim_mount *m)
{
	while (m->rd &&
	       (!m->npend || m->last_answer_t < m->pend[0].t_ns + m->max_lat + REORDER_NS)) {
		struct trace_read r;
		int e = next_record(m, &r);

		if (e <= 0) {
			if (e < 0)
				return e;
			break;
		}
		if (m->npend == m->cappend) {
			size_t cap = m->cappend ? 2 * m->cappend : 1024;
			struct trace_read *p = realloc(m->pend, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			m->pend = p;
			m->cappend = cap;
		}
		pend_push(m, &r);
		if ((uint64_t)r.lat_us * 1000 > m->max_lat)
			m->max_lat = (uint64_t)r.lat_us * 1000;
		if (r.t_ns + (uint64_t)r.lat_us * 1000 > m->last_answer_t)
			m->last_answer_t = r.t_ns + (uint64_t)r.lat_us * 1000;
	}
	return m->npend ? 1 : 0;
}

/* ---- the fleet's order ---------------------------------------------------------------------- */

static uint64_t next_t(const struct world *w, unsigned i)
{
	return w->m[i].offset + w->m[i].pend[0].t_ns;
}

static void heap_down(struct world *w, unsigned i)
{
	unsigned x = w->heap[i];

	for (unsigned c; (c = 2 * i + 1) < w->nheap; i = c) {
		if (c + 1 < w->nheap && next_t(w, w->heap[c + 1]) < next_t(w, w->heap[c]))
			c++;
		if (next_t(w, w->heap[c]) >= next_t(w, x))
			break;
		w->heap[i] = w->heap[c];
	}
	w->heap[i] = x;
}

static void heap_build(struct world *w)
{
	for (unsigned i = w->nheap / 2; i-- > 0;)
		heap_down(w, i);
}

/* ---- reads ---------------------------------------------------------------------------------- */

static void replied(void *req, const struct cache_iov *iov, int n, int err)
{
	struct sim_req *q = req;
	struct sim_mount *m = q->m;
	uint64_t now = m->w->q.now, bytes = 0;

	for (int i = 0; i < n; i++)
		bytes += iov[i].len;
	m->res.reads++;
	m->res.read_bytes += bytes;
	m->res.read_errors += err != 0;
	sim_lat_add(&m->res.lat, now - q->t0);
	m->outstanding--;
	if (now > m->last_t)
		m->last_t = now;
	q->next = m->w->free_reqs;
	m->w->free_reqs = q;
}

/* Writes are not in a trace. A version whose first read on a mount was answered from the hot
 * tier with nothing fetched was put there by what the trace does not show: the mount's own
 * write of it (or reads before the trace began). Put it there too, every block, and offer it
 * to the chain's tiers, as a write does (cache_put, then cache_publish once the store has
 * it). Without this, a broker's tail reads of what it wrote replay as misses, and its Redis
 * holds nothing for the other mounts. @return 0 or -ENOMEM. */
static int written_before(struct sim_mount *m, struct sim_obj *o, const struct trace_read *r)
{
	struct world *w = m->w;
	uint64_t nblk;

	if (!o->seen && !(o->seen = calloc((w->nm + 7) / 8, 1)))
		return -ENOMEM;
	if (o->seen[m->idx / 8] & (1u << (m->idx % 8)))
		return 0;
	o->seen[m->idx / 8] |= (uint8_t)(1u << (m->idx % 8));
	if (r->tier != TRACE_HOT || r->fetched || (r->flags & TRACE_F_ERROR) || !w->zeros)
		return 0;
	nblk = (o->co.size + w->block_size - 1) / w->block_size;
	for (uint64_t b = 0; b < nblk; b++) {
		uint64_t len = o->co.size - b * w->block_size;

		cache_put(m->c, (struct cache_key){o->co.id, b}, w->zeros,
			  (uint32_t)(len < w->block_size ? len : w->block_size));
	}
	m->res.written_objects++;
	cache_publish(m->c, &o->co);
	return 0;
}

/* A disk tier's contents are not in a trace either: a mount remounted on its cache_dir starts
 * with what its last life left there. A read the mount answered from its disk (and from no
 * deeper tier) of a block this mount's simulated disk lacks says the disk held it before: put
 * the whole version there (its tail readers kept every block of what they read hot), as the
 * mount found it. */
static void on_disk_before(struct sim_mount *m, struct sim_obj *o, const struct trace_read *r)
{
	uint64_t bs = m->w->block_size, first, last, nblk;
	bool lacks = false;

	if (!m->disk || r->tier != TRACE_DISK || (r->flags & TRACE_F_ERROR) || !r->len ||
	    r->off >= o->co.size || !bs)
		return;
	first = r->off / bs;
	last = (r->off + r->len - 1) / bs;
	nblk = (o->co.size + bs - 1) / bs;
	if (last >= nblk)
		last = nblk - 1;
	for (uint64_t b = first; b <= last && !lacks; b++)
		lacks = !sim_disk_holds(m->disk, (struct cache_key){o->co.id, b});
	if (!lacks)
		return;
	for (uint64_t b = 0; b < nblk; b++) {
		struct cache_key k = {o->co.id, b};
		uint64_t len = o->co.size - b * bs;

		if (!sim_disk_holds(m->disk, k))
			sim_disk_seed(m->disk, k, len < bs ? len : bs);
	}
}

/* Hand read @r to @m's cache now. @return 0 or -ENOMEM. */
static int issue(struct sim_mount *m, const struct trace_read *r)
{
	struct world *w = m->w;
	struct sim_stream *st = stream_of(m, r);
	struct sim_req *q = w->free_reqs;

	if (!st || written_before(m, st->o, r) < 0 || (!q && !(q = malloc(sizeof(*q)))))
		return -ENOMEM;
	if (q == w->free_reqs)
		w->free_reqs = q->next;
	on_disk_before(m, st->o, r);
	q->m = m;
	q->t0 = w->q.now;
	if (!m->res.reads && !m->outstanding)
		m->first_t = w->q.now;
	m->outstanding++;
	cache_read(m->c, &st->o->co, &st->s, r->off, r->len, 0, replied, q);
	return 0;
}

/* Run the fleet's reads in time order. @return 0 or -errno. */
static int run(struct world *w, struct sim_run *ret)
{
	while (w->nheap) {
		unsigned i = w->heap[0];
		struct sim_mount *m = &w->m[i];
		uint64_t t = next_t(w, i);
		struct trace_read r = pend_pop(m);
		int e;

		sim_ev_run_until(&w->q, t);
		if ((e = issue(m, &r)) < 0)
			return e;
		if (m->outstanding > w->cfg->max_queued) {
			ret->overloaded = true;
			ret->overload_at_ns = t;
			return 0;
		}
		if ((e = fill(m)) < 0)
			return e;
		if (e == 0)
			w->heap[0] = w->heap[--w->nheap];
		if (w->nheap)
			heap_down(w, 0);
	}
	return 0;
}

/* ---- the mounts ----------------------------------------------------------------------------- */

static void env_plug(void *arg)
{
	sim_store_plug(((struct sim_mount *)arg)->store);
}

static void env_unplug(void *arg)
{
	sim_store_unplug(((struct sim_mount *)arg)->store);
}

/* @m's tiers and cache, for options @o. @return 0 or -errno with a line. */
static int mount_open(struct world *w, struct sim_mount *m, const struct fs_opts *o)
{
	struct cache_cfg cc;
	struct cache_env env = sim_env(&m->clk);
	struct tier chain[3];
	unsigned n = 0;
	int r;

	/* the disk tier, as fs/mount.c assembles the chain: disk, shared, store */
	if (o->cache_dir) {
		m->disk = sim_disk_new(&w->q, w->cfg, o->disk_size, o->disk_lagging);
		if (!m->disk)
			return -ENOMEM;
		chain[n++] = sim_disk_tier(m->disk);
	}

	m->store = sim_store_new(&w->q, w->cfg, (unsigned)o->max_conns,
				 w->cfg->seed * 0x9e3779b97f4a7c15ULL + m->idx);
	if (!m->store)
		return -ENOMEM;
	if (w->redis) {
		m->port = sim_redis_port_new(w->redis, o->shared_fill_lagging,
					     10 * o->shared_timeout * 1000000ULL);
		if (!m->port)
			return -ENOMEM;
		chain[n++] = sim_redis_tier(m->port);
	}
	chain[n++] = sim_store_tier(m->store);
	if (!w->zeros) {
		w->block_size = o->block_size;
		if (!(w->zeros = calloc(1, o->block_size)))
			return -ENOMEM;
	}
	fs_cache_cfg(o, false, &cc);
	cc.prefault = false;
	cc.chain = chain;
	cc.nchain = n;
	env.plug = env_plug;
	env.unplug = env_unplug;
	r = cache_new(&cc, &env, &m->c);
	if (r < 0)
		snprintf(w->err, w->errlen, "the cache refuses these sizes: %s", strerror(-r));
	return r;
}

/* A file of the fleet: its trace, and where it goes. */
struct file {
	char *path;
	uint64_t id, start;
	uint32_t part;
	unsigned order; /* the index of the first file of its trace on the command line */
};

static int file_cmp(const void *a, const void *b)
{
	const struct file *x = a, *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return x->part < y->part ? -1 : x->part > y->part;
}

/* Read the header of each of @paths and group them: one mount per trace id, in the order
 * their first file comes, its files in part order. @return 0 or -errno with a line. */
static int group(struct world *w, char *const *paths, unsigned n)
{
	struct file *f = calloc(n ? n : 1, sizeof(*f));
	int r = 0;

	w->m = calloc(n ? n : 1, sizeof(*w->m));
	if (!f || !w->m) {
		free(f);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n && r == 0; i++) {
		struct trace_reader *rd;

		r = trace_reader_open(paths[i], &rd, w->err, w->errlen);
		if (r < 0)
			break;
		const struct trace_hdr *h = trace_reader_hdr(rd);
		f[i] = (struct file){paths[i], h->id, h->start_wall_ns, h->part, i};
		if (!h->complete && !w->incomplete++)
			w->incomplete_path = paths[i];
		for (unsigned k = 0; k < i; k++)
			if (f[k].id == h->id)
				f[i].order = f[k].order;
		trace_reader_close(rd);
	}
	if (r == 0)
		qsort(f, n, sizeof(*f), file_cmp);
	for (unsigned i = 0; i < n && r == 0; i++) {
		struct sim_mount *m = &w->m[w->nm];

		if (i == 0 || f[i].id != f[i - 1].id) {
			*m = (struct sim_mount){.w = w, .idx = w->nm++, .clk.wall0_ns = f[i].start};
			m->parts = calloc(n, sizeof(char *));
			if (!m->parts)
				r = -ENOMEM;
		} else {
			m = &w->m[w->nm - 1];
		}
		if (m->parts)
			m->parts[m->nparts++] = f[i].path;
	}
	free(f);
	return r;
}

/* Each mount's place in time, its clock, its first file open and its first read ready.
 * @return 0 or -errno with a line. */
static int place(struct world *w)
{
	uint64_t wall0 = UINT64_MAX;
	int r;

	for (unsigned i = 0; i < w->nm; i++)
		if (w->m[i].clk.wall0_ns < wall0)
			wall0 = w->m[i].clk.wall0_ns;
	w->heap = calloc(w->nm ? w->nm : 1, sizeof(*w->heap));
	if (!w->heap)
		return -ENOMEM;
	for (unsigned i = 0; i < w->nm; i++) {
		struct sim_mount *m = &w->m[i];

		m->offset = w->cfg->align_start ? 0 : m->clk.wall0_ns - wall0;
		m->clk.wall0_ns -= m->offset; /* its wall clock at world time 0 */
		m->clk.q = &w->q;
		m->clk.mono0 = MONO0;
		r = trace_reader_open(m->parts[0], &m->rd, w->err, w->errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Mounts [@first, @first + @n) into the fleet's order, each with its first read ready.
 * @return 0 or -errno with a line. */
static int start(struct world *w, unsigned first, unsigned n)
{
	w->nheap = 0;
	for (unsigned i = first; i < first + n; i++) {
		int r = fill(&w->m[i]);

		if (r < 0)
			return r;
		if (r == 1)
			w->heap[w->nheap++] = i;
	}
	heap_build(w);
	return 0;
}

/* ---- results -------------------------------------------------------------------------------- */

void sim_lat_add(struct sim_lat *h, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = 0;

	if (us > 0) {
		unsigned lg = 63 - (unsigned)__builtin_clzll(us);
		unsigned frac =
		    lg >= 3 ? (unsigned)((us >> (lg - 3)) & 7) : (unsigned)((us << (3 - lg)) & 7);

		b = 1 + 8 * lg + frac;
	}
	h->n[b < SIM_LAT_BUCKETS ? b : SIM_LAT_BUCKETS - 1]++;
	h->count++;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

/* The upper edge of bucket @b, ns. */
static uint64_t bucket_top(unsigned b)
{
	unsigned lg = (b - 1) / 8, frac = (b - 1) % 8;

	if (b == 0)
		return 1000;
	return (uint64_t)((double)(1ULL << lg) * (1.0 + (frac + 1) / 8.0) * 1000.0);
}

uint64_t sim_lat_quantile(const struct sim_lat *h, double q)
{
	uint64_t want = (uint64_t)(q * (double)h->count), seen = 0;

	if (!h->count)
		return 0;
	for (unsigned b = 0; b < SIM_LAT_BUCKETS; b++) {
		seen += h->n[b];
		if (seen > want) {
			uint64_t top = bucket_top(b);

			return top < h->max_ns ? top : h->max_ns;
		}
	}
	return h->max_ns;
}

void sim_lat_merge(struct sim_lat *into, const struct sim_lat *h)
{
	for (unsigned b = 0; b < SIM_LAT_BUCKETS; b++)
		into->n[b] += h->n[b];
	into->count += h->count;
	if (h->max_ns > into->max_ns)
		into->max_ns = h->max_ns;
}

/* Add @r's counters to @into (the fleet). */
static void add_result(struct sim_result *into, const struct sim_result *r)
{
	for (int t = 0; t < CACHE_NTIERS; t++) {
		uint64_t *dst = (uint64_t *)&into->cache.tier[t];
		const uint64_t *src = (const uint64_t *)&r->cache.tier[t];

		/* every field before 'tokens' is a uint64_t counter (as cache_get_stats copies) */
		for (size_t i = 0; i < offsetof(struct cache_tier_stats, tokens) / sizeof(uint64_t);
		     i++)
			dst[i] += src[i];
		into->cache.tier[t].limited |= r->cache.tier[t].limited;
	}
	into->reads += r->reads;
	into->read_bytes += r->read_bytes;
	into->read_errors += r->read_errors;
	into->shared_hits += r->shared_hits;
	into->shared_misses += r->shared_misses;
	into->shared_get_bytes += r->shared_get_bytes;
	into->shared_set_bytes += r->shared_set_bytes;
	into->shared_lock_waits += r->shared_lock_waits;
	into->disk_hits += r->disk_hits;
	into->disk_misses += r->disk_misses;
	into->disk_used += r->disk_used;
	into->disk_seeded += r->disk_seeded;
	into->store_gets += r->store_gets;
	into->store_bytes += r->store_bytes;
	into->store_merged += r->store_merged;
	into->written_objects += r->written_objects;
	sim_lat_merge(&into->lat, &r->lat);
}

/* Mount @i's figures into ret->mount[i], and added to the fleet's. */
static void collect_mount(struct world *w, unsigned i, struct sim_run *ret)
{
	struct sim_mount *m = &w->m[i];
	struct sim_result *r = &ret->mount[i];

	*r = m->res;
	r->span_ns = m->last_t > m->first_t ? m->last_t - m->first_t : 0;
	cache_get_stats(m->c, &r->cache);
	sim_store_stats(m->store, &r->store_gets, &r->store_bytes, &r->store_merged);
	if (m->port)
		sim_redis_port_stats(m->port, r);
	if (m->disk)
		sim_disk_stats(m->disk, r);
	add_result(&ret->fleet, r);
	ret->names[i] = strdup(m->parts[0]);
}

static void collect_fleet(struct world *w, struct sim_run *ret)
{
	uint64_t first = UINT64_MAX, last = 0;

	for (unsigned i = 0; i < w->nm; i++) {
		struct sim_mount *m = &w->m[i];

		if (m->res.reads && m->first_t < first)
			first = m->first_t;
		if (m->last_t > last)
			last = m->last_t;
	}
	ret->fleet.span_ns = last > first ? last - first : 0;
	if (w->redis)
		sim_redis_stats(w->redis, &ret->fleet);
	ret->events = w->q.ran;
}

static void world_free(struct world *w)
{
	for (unsigned i = 0; w->m && i < w->nm; i++) {
		struct sim_mount *m = &w->m[i];

		cache_free(m->c);
		sim_store_free(m->store);
		sim_redis_port_free(m->port);
		sim_disk_free(m->disk);
		trace_reader_close(m->rd);
		free(m->parts);
		free(m->pend);
		free(m->streams);
	}
	sim_redis_free(w->redis);
	free(w->zeros);
	for (uint64_t i = 0; w->objs && i <= w->omask; i++)
		while (w->objs[i]) {
			struct sim_obj *o = w->objs[i];

			w->objs[i] = o->hnext;
			free(o->seen);
			free(o);
		}
	while (w->free_reqs) {
		struct sim_req *q = w->free_reqs;

		w->free_reqs = q->next;
		free(q);
	}
	free(w->objs);
	free(w->heap);
	free(w->m);
	sim_ev_done(&w->q);
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The fleet on one clock: mounts that share Redis meet there, so their reads are replayed
 * in the order they came, whichever mount. @return 0 or -errno. */
static int replay_together(struct world *w, const struct fs_opts *o, struct sim_run *ret)
{
	int r = 0;

	for (unsigned i = 0; r == 0 && i < w->nm; i++)
		r = mount_open(w, &w->m[i], o);
	if (r == 0)
		r = start(w, 0, w->nm);
	if (r == 0)
		r = run(w, ret);
	sim_ev_run_all(&w->q); /* every read still waiting is answered */
	for (unsigned i = 0; r == 0 && i < w->nm; i++)
		collect_mount(w, i, ret);
	return r;
}

/* Mounts that share nothing (no shared=) meet nowhere: each is replayed alone, one after the
 * other, each from time 0 again, which gives the same figures as the fleet together, and keeps
 * one mount's state in the processor's caches at a time rather than the fleet's. Each cache
 * is freed once its figures are taken. @return 0 or -errno. */
static int replay_apart(struct world *w, const struct fs_opts *o, struct sim_run *ret)
{
	int r = 0;

	for (unsigned i = 0; r == 0 && i < w->nm && !ret->overloaded; i++) {
		struct sim_mount *m = &w->m[i];

		w->q.now = 0; /* the queue is empty: the clock may start over */
		r = mount_open(w, m, o);
		if (r == 0)
			r = start(w, i, 1);
		if (r == 0)
			r = run(w, ret);
		sim_ev_run_all(&w->q);
		if (r == 0)
			collect_mount(w, i, ret);
		cache_free(m->c);
		m->c = NULL;
		if (ret->overloaded) /* the mounts after it were never replayed: not reported */
			ret->nmounts = i + 1;
	}
	return r;
}

/* Group, place and open the fleet, then run it to its end. @return 0 or -errno. */
static int replay(struct world *w, const struct fs_opts *o, char *const *paths, unsigned n,
		  struct sim_run *ret)
{
	int r = group(w, paths, n);

	ret->incomplete = w->incomplete;
	ret->incomplete_path = w->incomplete_path;
	if (r == 0 && o->shared && !(w->redis = sim_redis_new(&w->q, w->cfg)))
		r = -ENOMEM;
	if (r == 0)
		r = place(w);
	if (r < 0)
		return r;
	ret->mount = calloc(w->nm ? w->nm : 1, sizeof(*ret->mount));
	ret->names = calloc(w->nm ? w->nm : 1, sizeof(*ret->names));
	if (!ret->mount || !ret->names)
		return -ENOMEM;
	ret->nmounts = w->nm;
	r = w->redis ? replay_together(w, o, ret) : replay_apart(w, o, ret);
	if (r == 0)
		collect_fleet(w, ret);
	return r;
}

int sim_replay(const struct fs_opts *o, const struct sim_cfg *cfg, char *const *paths,
	       unsigned npaths, struct sim_run *ret, char *err, size_t errlen)
{
	struct world w = {.cfg = cfg, .err = err, .errlen = errlen};
	double t0 = cpu_now();
	int r;

	memset(ret, 0, sizeof(*ret));
	if (errlen)
		err[0] = '\0';
	sim_ev_init(&w.q, 0);
	r = replay(&w, o, paths, npaths, ret);
	if (r < 0 && errlen && !err[0])
		snprintf(err, errlen, "%s", strerror(-r));
	world_free(&w);
	ret->cpu_s = cpu_now() - t0;
	if (r < 0)
		sim_run_free(ret);
	return r;
}

void sim_run_free(struct sim_run *r)
{
	for (unsigned i = 0; r->names && i < r->nmounts; i++)
		free(r->names[i]);
	free(r->names);
	free(r->mount);
	r->names = NULL;
	r->mount = NULL;
	r->nmounts = 0;
}

void sim_cfg_default(struct sim_cfg *ret)
{
	*ret = (struct sim_cfg){
	    .store_lat_ns = 30 * 1000000ULL,
	    .store_p99_ns = 150 * 1000000ULL,
	    .store_bw = 90ULL << 20,
	    .link_bw = 1250000000ULL,
	    .get_price = 0.0004,
	    .gb_price = 0.0,
	    .redis_mem = 4ULL << 30,
	    .redis_lat_ns = 300 * 1000ULL,
	    .redis_bw = 1000000000ULL,
	    .disk_lat_ns = 100 * 1000ULL,
	    .disk_bw = 2000000000ULL,
	    .max_queued = 100000,
	    .seed = 1,
	};
}
