/*
 * generate.c - a synthetic broker trace: what the tierfs mounts of a fleet of brokers would
 * record, for sizing before any broker exists.
 *
 *   partition g (brokers x partitions of them), segment k: an object of `segment` bytes born
 *   at T(g, k) = phase(g) + k x roll (k < 0: the history a replay reads), with an index
 *   object of `index_size` bytes beside it
 *
 *   on each broker reading g (its own, and `share - 1` others):
 *     tail readers   `consumers` of them: each new segment, within tail_lag of its birth,
 *                    index lookups (small reads of its index), then fetch-sized reads through
 *                    it at tail_rate
 *     a replay       every replay_every (at a random phase), consumer 0 goes back
 *                    replay_span and reads forward at replay_rate, segment after segment
 *                    (index lookups at each), until it reaches the newest; meanwhile it reads
 *                    no tail
 *
 * It runs on the simulator's own event queue: each reader is an event that writes one read
 * and schedules its next, so every broker's reads come out in time order, into one trace per
 * broker (trace/'s writer, drained on this thread). Ids are salted hashes of (partition,
 * segment) under one salt made from the seed: the brokers' traces name a segment alike, and
 * a replay of them shares it in the simulated Redis.
 *
 * Locking: none. Workload: a fleet-hour of reads in seconds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_i.h"
#include "trace.h"

#define NS	 1000000000ULL
#define WALL0_NS (1700000000ULL * NS) /* the traces' wall clock at their start */

struct gen_world;

/* One reader: a tail pass over one segment, or a replay over many. */
struct reader {
	struct reader *all; /* every reader made, freed at the end */
	struct gen_world *gw;
	unsigned broker, part; /* where it reads: broker's trace, global partition */
	int64_t seg;	       /* segment being read */
	uint64_t off;	       /* next byte */
	uint64_t rate;	       /* bytes/s */
	uint32_t stream;       /* the open file: one per segment */
	bool replay;
	bool done;
	bool fresh; /* its next read is the first of its open */
};

/* A partition's clock (its births), or one reading broker's replays of it. */
struct tick {
	struct gen_world *gw;
	unsigned broker, part;
	int64_t seg; /* births: the next segment */
};

struct gen_world {
	const struct sim_gen *g;
	struct sim_events q;
	struct trace_writer **w; /* one per broker */
	uint8_t salt[TRACE_SALT_LEN];
	uint64_t rng;
	unsigned nparts;      /* brokers x partitions */
	uint64_t *phase;      /* per partition: birth of its segment 0, ns */
	bool *replaying;      /* per (reading broker, partition) */
	struct tick *births;  /* per partition */
	struct tick *replays; /* per (reading broker, partition) */
	struct reader *all;
	uint64_t reads;
	uint32_t next_stream;
	int error;
};

static int64_t birth(const struct gen_world *gw, unsigned part, int64_t seg)
{
	return (int64_t)gw->phase[part] + seg * (int64_t)(gw->g->roll_s * NS);
}

/* The newest segment of @part born by now. */
static int64_t newest(const struct gen_world *gw, unsigned part)
{
	int64_t now = (int64_t)gw->q.now, ph = (int64_t)gw->phase[part];

	return now >= ph ? (now - ph) / (int64_t)(gw->g->roll_s * NS) : -1;
}

static uint64_t seg_id(const struct gen_world *gw, unsigned part, int64_t seg, bool index)
{
	uint64_t v[3] = {part, (uint64_t)seg, index};

	return trace_hash(gw->salt, v, sizeof(v));
}

/* Write one read of @len bytes at @off of (@part, @seg), now, into @broker's trace. */
static void emit(struct gen_world *gw, unsigned broker, unsigned part, int64_t seg, bool index,
		 uint64_t off, uint64_t len, uint32_t stream, bool first)
{
	const struct sim_gen *g = gw->g;
	uint64_t size = index ? g->index_size : g->segment;
	struct trace_read r = {
	    .t_ns = gw->q.now,
	    .obj = seg_id(gw, part, seg, index),
	    .ver = 1,
	    .stream = stream,
	    .off = off,
	    .len = (uint32_t)(off + len > size ? size - off : len),
	    .size = size,
	    .mtime = ((int64_t)WALL0_NS + birth(gw, part, seg)) / (int64_t)NS,
	    .tier = TRACE_NONE,
	    .flags = first ? TRACE_F_OPEN : 0,
	};

	while (!gw->error && !trace_push(gw->w[broker], &r))
		gw->error = trace_writer_flush(gw->w[broker]);
	gw->reads++;
}

/* Small reads of the reader's segment's index, as a consumer starting it looks an offset up. */
static void lookups(struct gen_world *gw, const struct reader *rd)
{
	const struct sim_gen *g = gw->g;
	uint64_t units = g->index_read ? g->index_size / g->index_read : 0;

	for (unsigned i = 0; i < g->index_lookups && units; i++)
		emit(gw, rd->broker, rd->part, rd->seg, true,
		     sim_rand(&gw->rng) % units * g->index_read, g->index_read, rd->stream, i == 0);
}

static void read_step(void *arg);

/* @rd opens segment @seg now: a new stream, its index looked up, its first read. */
static void open_seg(struct reader *rd, int64_t seg)
{
	struct gen_world *gw = rd->gw;

	rd->seg = seg;
	rd->off = 0;
	rd->stream = ++gw->next_stream;
	rd->fresh = true;
	lookups(gw, rd);
	sim_ev_at(&gw->q, gw->q.now, read_step, rd);
}

static bool *replaying(struct gen_world *gw, unsigned broker, unsigned part)
{
	return &gw->replaying[(size_t)broker * gw->nparts + part];
}

static void read_step(void *arg)
{
	struct reader *rd = arg;
	struct gen_world *gw = rd->gw;
	const struct sim_gen *g = gw->g;

	emit(gw, rd->broker, rd->part, rd->seg, false, rd->off, g->fetch, rd->stream, rd->fresh);
	rd->fresh = false;
	rd->off += g->fetch;
	if (rd->off < g->segment) {
		sim_ev_at(&gw->q, gw->q.now + g->fetch * NS / rd->rate, read_step, rd);
	} else if (rd->replay && newest(gw, rd->part) > rd->seg) {
		open_seg(rd, rd->seg + 1);
	} else {
		if (rd->replay)
			*replaying(gw, rd->broker, rd->part) = false;
		rd->done = true;
	}
}

/* A new reader of @part on @broker. @return NULL only for out-of-memory. */
static struct reader *reader_new(struct gen_world *gw, unsigned broker, unsigned part, bool replay)
{
	struct reader *rd = calloc(1, sizeof(*rd));

	if (!rd) {
		gw->error = -ENOMEM;
		return NULL;
	}
	*rd = (struct reader){
	    .all = gw->all, .gw = gw, .broker = broker, .part = part, .replay = replay};
	rd->rate = replay	      ? gw->g->replay_rate
		   : gw->g->tail_rate ? gw->g->tail_rate
				      : gw->g->segment / gw->g->roll_s;
	if (!rd->rate)
		rd->rate = 1;
	gw->all = rd;
	return rd;
}

static void tail_start(void *arg)
{
	struct reader *rd = arg;

	open_seg(rd, rd->seg);
}

/* Segment t->seg of partition t->part is born: its tail readers come within tail_lag. */
static void born(void *arg)
{
	struct tick *t = arg;
	struct gen_world *gw = t->gw;
	const struct sim_gen *g = gw->g;

	for (unsigned j = 0; j < g->share; j++) {
		unsigned b = (t->part / g->partitions + j) % g->mounts;

		for (unsigned c = 0; c < g->consumers; c++) {
			struct reader *rd;

			if (c == 0 && *replaying(gw, b, t->part))
				continue; /* consumer 0 is replaying */
			if (!(rd = reader_new(gw, b, t->part, false)))
				return;
			rd->seg = t->seg;
			sim_ev_at(&gw->q,
				  gw->q.now + (g->tail_lag_s
						   ? sim_rand(&gw->rng) % (g->tail_lag_s * NS)
						   : 0),
				  tail_start, rd);
		}
	}
	t->seg++;
	sim_ev_at(&gw->q, (uint64_t)birth(gw, t->part, t->seg), born, t);
}

/* Consumer 0 of (t->broker, t->part) goes back replay_span and reads forward. */
static void replay_start(void *arg)
{
	struct tick *t = arg;
	struct gen_world *gw = t->gw;
	const struct sim_gen *g = gw->g;
	int64_t back = (int64_t)(g->replay_span_s / g->roll_s);
	struct reader *rd;

	if (!*replaying(gw, t->broker, t->part) &&
	    (rd = reader_new(gw, t->broker, t->part, true))) {
		*replaying(gw, t->broker, t->part) = true;
		open_seg(rd, newest(gw, t->part) - back);
	}
	sim_ev_at(&gw->q, gw->q.now + g->replay_every_s * NS, replay_start, t);
}

/* ---- the fleet ------------------------------------------------------------------------------ */

void sim_gen_default(struct sim_gen *ret)
{
	*ret = (struct sim_gen){
	    .mounts = 1,
	    .partitions = 50,
	    .share = 1,
	    .segment = 64ULL << 20,
	    .roll_s = 300,
	    .duration_s = 3600,
	    .consumers = 3,
	    .tail_lag_s = 10,
	    .replay_every_s = 3600,
	    .replay_span_s = 86400,
	    .replay_rate = 16ULL << 20,
	    .fetch = 1ULL << 20,
	    .index_size = 10ULL << 20,
	    .index_lookups = 2,
	    .index_read = 4096,
	    .seed = 1,
	};
}

static int check_gen(const struct sim_gen *g, char *err, size_t errlen)
{
	const char *bad = !g->mounts			      ? "--mounts must be at least 1"
			  : !g->partitions		      ? "--partitions must be at least 1"
			  : !g->share || g->share > g->mounts ? "--share must be 1..--mounts"
			  : !g->segment || !g->fetch ? "--segment and --fetch must be more than 0"
			  : !g->roll_s		     ? "--roll must be at least 1s"
			  : !g->duration_s	     ? "--duration must be at least 1s"
			  : g->replay_every_s && !g->replay_rate
			      ? "--replay-rate must be more than 0"
			  : g->index_lookups && (!g->index_read || g->index_read > g->index_size)
			      ? "--index-read must be 1..--index-size"
			      : NULL;

	if (bad)
		snprintf(err, errlen, "%s", bad);
	return bad ? -EINVAL : 0;
}

/* Every broker's trace file, opened. @return 0 or -errno with a line. */
static int open_writers(struct gen_world *gw, const char *prefix, char *err, size_t errlen)
{
	const struct sim_gen *g = gw->g;
	size_t n = strlen(prefix) + 32;
	char path[n];

	gw->w = calloc(g->mounts, sizeof(*gw->w));
	if (!gw->w)
		return -ENOMEM;
	for (unsigned b = 0; b < g->mounts; b++) {
		struct trace_wcfg wc = {.path = path,
					.max_size = UINT64_MAX / 4,
					.salt = gw->salt,
					.start_wall_ns = WALL0_NS,
					.ring = 1u << 16};
		int r;

		snprintf(path, n, "%s-%03u.trace", prefix, b);
		r = trace_writer_open(&wc, &gw->w[b]);
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", path,
				 r == -EEXIST ? "something that is not a tierfs trace is there"
					      : strerror(-r));
			return r;
		}
	}
	return 0;
}

/* The partitions' clocks and the replays, scheduled. @return 0 or -ENOMEM. */
static int schedule(struct gen_world *gw)
{
	const struct sim_gen *g = gw->g;

	gw->phase = calloc(gw->nparts, sizeof(*gw->phase));
	gw->replaying = calloc((size_t)gw->nparts * g->mounts, sizeof(*gw->replaying));
	gw->births = calloc(gw->nparts, sizeof(*gw->births));
	gw->replays = calloc((size_t)gw->nparts * g->share, sizeof(*gw->replays));
	if (!gw->phase || !gw->replaying || !gw->births || !gw->replays)
		return -ENOMEM;
	for (unsigned p = 0; p < gw->nparts; p++) {
		gw->phase[p] = sim_rand(&gw->rng) % (g->roll_s * NS);
		gw->births[p] = (struct tick){.gw = gw, .part = p, .seg = 0};
		sim_ev_at(&gw->q, (uint64_t)birth(gw, p, 0), born, &gw->births[p]);
		for (unsigned j = 0; g->replay_every_s && j < g->share; j++) {
			struct tick *t = &gw->replays[(size_t)p * g->share + j];

			*t = (struct tick){
			    .gw = gw, .broker = (p / g->partitions + j) % g->mounts, .part = p};
			sim_ev_at(&gw->q, sim_rand(&gw->rng) % (g->replay_every_s * NS),
				  replay_start, t);
		}
	}
	return 0;
}

static void gen_free(struct gen_world *gw)
{
	for (unsigned b = 0; gw->w && b < gw->g->mounts; b++) {
		if (gw->w[b] && !gw->error)
			gw->error = trace_writer_flush(gw->w[b]);
		trace_writer_close(gw->w[b]);
	}
	while (gw->all) {
		struct reader *rd = gw->all;

		gw->all = rd->all;
		free(rd);
	}
	free(gw->w);
	free(gw->phase);
	free(gw->replaying);
	free(gw->births);
	free(gw->replays);
	sim_ev_done(&gw->q);
}

int64_t sim_generate(const struct sim_gen *g, const char *prefix, char *err, size_t errlen)
{
	struct gen_world gw = {.g = g, .rng = g->seed};
	int r = check_gen(g, err, errlen);

	if (r < 0)
		return r;
	gw.nparts = g->mounts * g->partitions;
	for (int i = 0; i < TRACE_SALT_LEN; i++)
		gw.salt[i] = (uint8_t)sim_rand(&gw.rng);
	sim_ev_init(&gw.q, 0);
	r = open_writers(&gw, prefix, err, errlen);
	if (r == 0)
		r = schedule(&gw);
	if (r == 0)
		sim_ev_run_until(&gw.q, g->duration_s * NS);
	gen_free(&gw);
	if (r == 0 && gw.error)
		r = gw.error;
	if (r < 0 && errlen && !err[0])
		snprintf(err, errlen, "%s", strerror(-r));
	return r < 0 ? r : (int64_t)gw.reads;
}
