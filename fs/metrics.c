/*
 * metrics.c - every metric of a mount, defined once, and the one writer that prints them.
 *
 * A counter is counted in its module (cache/, backend/, fs/, a tier of the chain), copied out by
 * that module's *_get_stats (a tier: its tier_ops.metrics rows) into a snapshot, and printed
 * from a row of METRICS below or from the tier's own rows:
 *
 *   cache_get_stats   ─┐
 *   backend_get_stats  ┤                            METRICS rows, then
 *   tier_ops.metrics  ─┼─► struct fs_metrics_snap ──► the tiers' rows ──► sink: the stats file
 *     (each tier of    │   (fs_metrics_snap)          fs_metrics_write      (control.c), an
 *      the chain)      │                              (one family per       HTTP endpoint, a
 *   the mount's own   ─┘                               name)                test
 *
 * Each row becomes a getter function (GETTER below expands the row's sources into the cases of
 * a switch on the series' place) and an entry of fs_metrics[]. A new metric is one row: its
 * field in the module's stats struct, and the row that prints it. Values are read by field
 * name, so a stats struct may change its layout freely; a field that goes away breaks the
 * build here, not the output. A tier's metrics are the tier's own (tier_ops.metrics): this
 * file names no tier of the chain, and a new tier's rows are printed with no line here.
 *
 * Series. A family has up to four places (enum fs_metric_at), printed in this order: the mount
 * (no label), the memory tiers (tier="hot", tier="lagging", cache_tier_name), the tiers of the
 * cache's chain (tier="NAME", tier_ops.name, in chain order, the store last), and the kinds of
 * store request (op="get", "head", "list", "put", "post", "delete": bk_op_name). A chain
 * tier's series of a family come from the table's row (the read histogram) or from the tier's
 * own rows of that name; a family of the tiers' rows that the table lacks is printed after the
 * table, once, with every tier's series. A family none of whose places the mount has is left
 * out whole; a place that is there but has no value now (a limiter gauge of a tier without a
 * limiter) prints no sample under the family's HELP and TYPE. A histogram's series add the le
 * label to their place's (bk_hist's bounds, in seconds).
 *
 * Locking: none. fs_metrics_snap takes each module's own lock in turn through its
 * *_get_stats, never two at once; the writer reads only the snapshot. Workload: a `cat` of the
 * stats file, or a scrape, every few seconds at most; a snapshot is a few hundred loads.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "metrics.h"

/* ---- sources: where a row's series read their values ---------------------------------------- */

static enum fs_metric_got whole(struct fs_metric_value *ret, uint64_t n)
{
	*ret = (struct fs_metric_value){.kind = FS_VALUE_WHOLE, .n = n};
	return FS_GOT_VALUE;
}

static enum fs_metric_got nanoseconds(struct fs_metric_value *ret, uint64_t ns)
{
	*ret = (struct fs_metric_value){.kind = FS_VALUE_NS, .n = ns};
	return FS_GOT_VALUE;
}

/* A limiter's tokens: 0 while its rate is unlimited, when the bucket means nothing. */
static enum fs_metric_got tokens(struct fs_metric_value *ret, const struct cache_tier_stats *ts)
{
	*ret = (struct fs_metric_value){.kind = FS_VALUE_REAL, .x = ts->rate ? ts->tokens : 0.0};
	return FS_GOT_VALUE;
}

static enum fs_metric_got buckets(struct fs_metric_value *ret, const uint64_t *counts, unsigned n,
				  const uint64_t *bounds_us, uint64_t sum_us)
{
	*ret = (struct fs_metric_value){.kind = FS_VALUE_BUCKETS,
					.counts = counts,
					.bounds_us = bounds_us,
					.nbuckets = n,
					.sum_us = sum_us};
	return FS_GOT_VALUE;
}

/* clang-format off */
#define TS (s->cache.tier[t])
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

#define MOUNT(f)   case FS_AT_MOUNT: return whole(ret, s->mount.f);
#define CACHE(f)   case FS_AT_MOUNT: return whole(ret, s->cache.f);
#define BACKEND(f) case FS_AT_MOUNT: return whole(ret, s->backend.f);
#define WRITES(f)  case FS_AT_MOUNT: return whole(ret, s->writes.f);
#define TIER(f)    case FS_AT_TIER: return whole(ret, TS.f);
#define TIER_NS(f) case FS_AT_TIER: return nanoseconds(ret, TS.f);
#define LIMITER(f) case FS_AT_TIER: return TS.limited ? whole(ret, TS.f) : FS_GOT_SKIP;
#define LIMITER_TOKENS() case FS_AT_TIER: return TS.limited ? tokens(ret, &TS) : FS_GOT_SKIP;
#define HIST(h) buckets(ret, (h).counts, BK_HIST_BUCKETS, bk_hist_bounds_us, (h).sum_us)
#define BACKEND_HIST(f) case FS_AT_OP: return HIST(s->backend.f[t]);
#define READ_HIST(f)                                                                               \
	case FS_AT_TIER: return HIST(s->mount.f[t]);                                               \
	case FS_AT_CHAIN: return HIST(s->mount.f[CACHE_NTIERS + t]);
/* clang-format on */

/* ---- the table ------------------------------------------------------------------------------ */

/*
 * One row per family:  X(name without "tierfs_", COUNTER | GAUGE | HISTOGRAM, sources, help)
 *
 *   sources               series (label)                  value
 *   MOUNT(f) CACHE(f)     one, no label                   snap.mount.f, .cache.f, .backend.f,
 *     BACKEND(f) WRITES(f)                                .writes.f
 *   TIER(f)               tier="hot", tier="lagging"      snap.cache.tier[t].f
 *   TIER_NS(f)            the same                        .f nanoseconds, printed as seconds
 *   LIMITER(f)            the memory tiers that have a    snap.cache.tier[t].f
 *   LIMITER_TOKENS()        rate limiter                  its tokens (0 while unlimited)
 *   READ_HIST(f)          tier="hot", "lagging", then     snap.mount.f[], a struct bk_hist per
 *                           each tier of the chain          source (cache_iov.from)
 *   BACKEND_HIST(f)       op="get", "head", "list", ...  snap.backend.f[], one per enum bk_op
 *
 * Two sources of one row may not share a place (the switch would have a duplicate case).
 * Counters end in _total. The help is one line without a backslash.
 */
/* clang-format off */
#define METRICS(X)                                                                                 \
	X(cache_hits_total, COUNTER, TIER(hits),                                                   \
	  "Block lookups answered by the tier.")                                                   \
	X(cache_misses_total, COUNTER, TIER(misses),                                               \
	  "Blocks a reader wanted that were fetched into the tier.")                               \
	X(cache_served_bytes_total, COUNTER, TIER(bytes_served),                                   \
	  "Bytes answered to readers from the tier.")                                              \
	X(cache_fetched_bytes_total, COUNTER, TIER(bytes_fetched),                                 \
	  "Bytes fetched from the store into the tier.")                                           \
	X(cache_fetches_total, COUNTER, TIER(fetches),                                             \
	  "Block fetches started for the tier, readahead included.")                               \
	X(cache_fetch_errors_total, COUNTER, TIER(fetch_errors),                                   \
	  "Block fetches that failed.")                                                            \
	X(cache_readaheads_total, COUNTER, TIER(readaheads),                                       \
	  "Block fetches started by readahead.")                                                   \
	X(cache_part_fetches_total, COUNTER, TIER(parts),                                          \
	  "Fetches of part of a block (64-256 KiB), for random reads of lagging objects and of "   \
	  "hot ones larger than the tiers.")                                                       \
	X(cache_singleflight_joins_total, COUNTER, TIER(joins),                                    \
	  "Block waits that joined a fetch already under way.")                                    \
	X(cache_evictions_total, COUNTER, TIER(rotations),                                         \
	  "Segment rotations (each evicts one segment).")                                          \
	X(cache_bounces_total, COUNTER, TIER(bounces),                                             \
	  "Fetches answered but not stored: every segment was pinned.")                            \
	X(cache_lower_hits_total, COUNTER, TIER(lower_hits),                                       \
	  "Misses of the tier answered by a tier of the chain below it, not the store.")           \
	X(cache_lower_fallbacks_total, COUNTER, TIER(lower_fallbacks),                             \
	  "Blocks a tier of the chain listed but did not serve (CRC, read error): fetched from "   \
	  "the store, charged to the limiter.")                                                    \
	X(cache_written_blocks_total, COUNTER, TIER(written),                                      \
	  "Blocks written through the mount and stored in the tier as they were written.")         \
	X(cache_published_blocks_total, COUNTER, TIER(published),                                  \
	  "Written blocks offered to the chain's tiers once the store had the object.")            \
	X(cache_memory_waits_total, COUNTER, TIER(mem_waits),                                      \
	  "Fetches that waited for memory (a ring slot or bounce room).")                          \
	X(cache_memory_queued_fetches, GAUGE, TIER(mem_queued),                                    \
	  "Fetches waiting for memory now.")                                                       \
	X(cache_bounce_bytes, GAUGE, CACHE(bounce_bytes),                                          \
	  "Bounce buffers mapped now, both tiers.")                                                \
	X(cache_bounce_peak_bytes, GAUGE, CACHE(bounce_peak),                                      \
	  "The most bounce buffer bytes mapped at once since the mount.")                          \
	X(cache_bounce_limit_bytes, GAUGE, CACHE(bounce_limit),                                    \
	  "Bounce buffer bytes allowed at once (one more block only when nothing else holds "      \
	  "memory).")                                                                              \
	X(cache_resident_blocks, GAUGE, TIER(blocks),                                              \
	  "Blocks resident in the tier.")                                                          \
	X(cache_resident_bytes, GAUGE, TIER(bytes),                                                \
	  "Bytes resident in the tier.")                                                           \
	X(cache_size_bytes, GAUGE, TIER(size),                                                     \
	  "Configured size of the tier.")                                                          \
	X(cache_inflight_fetches, GAUGE, TIER(inflight),                                           \
	  "Fetches running now.")                                                                  \
	X(throttle_waits_total, COUNTER, TIER(throttle_waits),                                     \
	  "Fetches that waited for the rate limiter.")                                             \
	X(throttled_seconds_total, COUNTER, TIER_NS(throttled_ns),                                 \
	  "Time fetches waited for the rate limiter.")                                             \
	X(throttle_queued_fetches, GAUGE, TIER(queued),                                            \
	  "Fetches waiting for the rate limiter now.")                                             \
	X(limiter_tokens, GAUGE, LIMITER_TOKENS(),                                                 \
	  "Rate limiter tokens (bytes) now; negative is debt.")                                    \
	X(limiter_rate_bytes, GAUGE, LIMITER(rate),                                                \
	  "Rate limit in bytes per second (0: unlimited).")                                        \
	X(log_suppressed_total, COUNTER, MOUNT(log_suppressed),                                    \
	  "Log lines held back: repeats of an (object, cause) within a minute, or beyond the "     \
	  "mount's line budget.")                                                                  \
	X(reads_total, COUNTER, MOUNT(reads),                                                      \
	  "Read requests answered.")                                                               \
	X(read_seconds, HISTOGRAM, READ_HIST(read_lat),                                            \
	  "Time from a read request to its answer with data, by the tier of the slowest block it " \
	  "waited for: hot or lagging (in memory, at once), or a tier of the chain (the store "    \
	  "last).")                                                                                \
	X(read_errors_total, COUNTER, MOUNT(read_errors),                                          \
	  "Read requests answered with an error.")                                                 \
	X(read_bytes_total, COUNTER, MOUNT(read_bytes),                                            \
	  "Bytes answered to readers, all tiers.")                                                 \
	X(interrupted_reads_watched, GAUGE, MOUNT(watched),                                        \
	  "Interrupted reads still waiting, watched until answered or their reader dies.")         \
	X(memory_bound_bytes, GAUGE, MOUNT(memory_bound),                                          \
	  "What the process should stay under: hot_size + lagging_size + 64 MiB, + write_buffer "  \
	  "on a writable mount (compare process_resident_memory_bytes on the metrics endpoint).")  \
	X(trace_records_total, COUNTER, MOUNT(trace_records),                                      \
	  "Reads recorded in the read trace (trace=; 0 without).")                                 \
	X(trace_dropped_total, COUNTER, MOUNT(trace_dropped),                                      \
	  "Reads the trace did not record: its ring was full, or writing the file failed.")        \
	X(backend_requests_total, COUNTER, BACKEND(requests),                                      \
	  "Requests sent to the store, retries included.")                                         \
	X(backend_retries_total, COUNTER, BACKEND(retries),                                        \
	  "Requests tried again.")                                                                 \
	X(backend_errors_total, COUNTER, BACKEND(errors),                                          \
	  "Requests that failed after retries.")                                                   \
	X(backend_absent_total, COUNTER, BACKEND(absent),                                          \
	  "HEADs answered 404 (a new name checked before it is written): not errors.")             \
	X(backend_received_bytes_total, COUNTER, BACKEND(bytes),                                   \
	  "Bytes of range reads received from the store.")                                         \
	X(backend_active_requests, GAUGE, BACKEND(active),                                         \
	  "Requests running now.")                                                                 \
	X(backend_queued_requests, GAUGE, BACKEND(queued),                                         \
	  "Requests waiting for a connection.")                                                    \
	X(backend_merged_reads_total, COUNTER, BACKEND(merged),                                    \
	  "Range reads sent inside the request of the read before them (readahead of "             \
	  "consecutive blocks, merged up to 16 MiB).")                                             \
	X(backend_slowdowns_total, COUNTER, BACKEND(slowdowns),                                    \
	  "503 SlowDown and 429 answers: each halves the request window.")                         \
	X(backend_request_window, GAUGE, BACKEND(window),                                          \
	  "Requests allowed at once now (AIMD; max_conns when the store is happy).")               \
	X(write_objects_total, COUNTER, WRITES(completed),                                         \
	  "Files written through the mount that the store took whole.")                            \
	X(write_failures_total, COUNTER, WRITES(failed),                                           \
	  "Files written through the mount that the store did not take: nothing left.")            \
	X(write_buffer_waits_total, COUNTER, WRITES(write_waits),                                  \
	  "Times a file's writes waited for a write buffer (write_buffer full).")                  \
	X(write_flushes_kept_total, COUNTER, WRITES(flushes_kept),                                 \
	  "Closes of a file being written that did not commit it: a process other than its "       \
	  "writer (a forked child), or a dup while the writer holds another descriptor.")          \
	X(write_release_commits_total, COUNTER, WRITES(release_commits),                           \
	  "Files committed at their last close by a process other than their writer: no "          \
	  "close() waited for the store.")                                                         \
	X(write_release_failures_total, COUNTER, WRITES(release_failed),                           \
	  "Of those, files the store did not take: logged, no close() returned the error.")        \
	X(write_buffer_bytes, GAUGE, WRITES(buffer_bytes),                                         \
	  "Write buffer bytes taken now, all files together.")                                     \
	X(write_buffer_limit_bytes, GAUGE, WRITES(buffer_limit),                                   \
	  "Write buffer bytes allowed (write_buffer; 0 on a read-only mount).")                    \
	X(backend_uploads_started_total, COUNTER, BACKEND(uploads_started),                        \
	  "Uploads of new objects begun.")                                                         \
	X(backend_uploads_completed_total, COUNTER, BACKEND(uploads_completed),                    \
	  "Uploads the store acknowledged: the object is there.")                                  \
	X(backend_uploads_failed_total, COUNTER, BACKEND(uploads_failed),                          \
	  "Uploads that ended in an error: the object is not there.")                              \
	X(backend_uploads_aborted_total, COUNTER, BACKEND(uploads_aborted),                        \
	  "Uploads undone (S3: AbortMultipartUpload answered; file: the temporary file gone).")    \
	X(backend_upload_abort_errors_total, COUNTER, BACKEND(abort_errors),                       \
	  "S3 aborts refused or unanswered: parts left for the bucket's lifecycle rule.")          \
	X(backend_upload_parts_total, COUNTER, BACKEND(parts),                                     \
	  "Parts the store acknowledged (a PutObject counts one).")                                \
	X(backend_uploaded_bytes_total, COUNTER, BACKEND(bytes_up),                                \
	  "Body bytes of the parts the store acknowledged.")                                       \
	X(backend_upload_retries_total, COUNTER, BACKEND(upload_retries),                          \
	  "Write requests sent again (parts, PutObject, Complete...).")                            \
	X(backend_tmp_files_removed_total, COUNTER, BACKEND(tmp_removed),                          \
	  "file://: temporary files left by a killed mount, removed at start.")                    \
	X(backend_request_seconds, HISTOGRAM, BACKEND_HIST(lat),                                   \
	  "Time from a request sent to the store to its answer, each attempt on its own, by what " \
	  "it asks: get (a range), head, list (file://: a read), put, post, delete (writes).")
/* clang-format on */

/* clang-format off */
/* Each row's getter: its sources as the cases of a switch on the place. */
#define GETTER(name, type, sources, help)                                                          \
	static enum fs_metric_got get_##name(const struct fs_metrics_snap *s,                      \
					     enum fs_metric_at at, unsigned t,                     \
					     struct fs_metric_value *ret)                          \
	{                                                                                          \
		switch (at) {                                                                      \
			sources                                                                    \
		default:                                                                           \
			return FS_GOT_NONE;                                                        \
		}                                                                                  \
	}
METRICS(GETTER)

#define ROW(name, type, sources, help) {"tierfs_" #name, FS_METRIC_##type, help, get_##name},
const struct fs_metric fs_metrics[] = {METRICS(ROW)};
/* clang-format on */
const size_t fs_metrics_n = N_OF(fs_metrics);

/* ---- the snapshot --------------------------------------------------------------------------- */

static void fs_metrics_snap_chain(struct mount *m, struct fs_metrics_snap *ret);

void fs_metrics_snap(struct mount *m, struct fs_metrics_snap *ret)
{
	memset(ret, 0, sizeof(*ret));
	cache_get_stats(m->c, &ret->cache);
	backend_get_stats(m->b, &ret->backend);
	ret->mount.log_suppressed = __atomic_load_n(&m->log.suppressed, __ATOMIC_RELAXED);
	ret->mount.reads = __atomic_load_n(&m->reads, __ATOMIC_RELAXED);
	ret->mount.read_errors = __atomic_load_n(&m->read_errors, __ATOMIC_RELAXED);
	ret->mount.read_bytes = __atomic_load_n(&m->read_bytes, __ATOMIC_RELAXED);
	ret->mount.watched = __atomic_load_n(&m->nwatch, __ATOMIC_RELAXED);
	if (m->wpool)
		wpool_get_stats(m->wpool, &ret->writes);
	for (int i = 0; i < FS_FROM_N; i++)
		bk_hist_load(&m->read_lat[i], &ret->mount.read_lat[i]);
	ret->mount.memory_bound = m->o->hot_size + (m->o->lagging ? m->o->lagging_size : 0) +
				  (m->wpool ? m->o->write_buffer : 0) + FS_MEMORY_SLACK;
	fs_trace_stats(m, &ret->mount.trace_records, &ret->mount.trace_dropped);
	fs_metrics_snap_chain(m, ret);
}

/* One row of a tier into its snapshot (tier_ops.metrics's callback). */
static void snap_row(void *arg, const struct tier_metric *row)
{
	struct fs_tier_snap *ts = arg;
	struct tier_metric *r;

	if (ts->nrows == FS_TIER_ROWS)
		return;
	if (row->type == TIER_HISTOGRAM &&
	    (ts->nhist == FS_TIER_HISTS || row->nbuckets < 1 || row->nbuckets > TIER_HIST_MAX))
		return;
	r = &ts->rows[ts->nrows++];
	*r = *row;
	if (row->type == TIER_HISTOGRAM) {
		memcpy(ts->hist[ts->nhist], row->counts, row->nbuckets * sizeof(row->counts[0]));
		r->counts = ts->hist[ts->nhist++];
	}
}

void fs_metrics_snap_tier(const struct tier *tr, struct fs_tier_snap *ret)
{
	ret->name = tr->ops->name;
	ret->nrows = 0;
	ret->nhist = 0;
	if (tr->ops->metrics)
		tr->ops->metrics(tr->self, snap_row, ret);
}

/* Each tier of the cache's chain, in order: its name and rows. */
static void fs_metrics_snap_chain(struct mount *m, struct fs_metrics_snap *ret)
{
	const struct tier *chain;
	unsigned n = cache_chain(m->c, &chain);

	for (unsigned i = 0; i < n && i < TIER_CHAIN_MAX; i++)
		fs_metrics_snap_tier(&chain[i], &ret->chain[ret->nchain++]);
}

/* ---- the mount's own histograms --------------------------------------------------------------- */

void fs_metrics_read(struct mount *m, uint64_t start_ns)
{
	/* the cache says what served the read (its deepest source), as it does for the trace */
	const struct cache_served *sv = cache_reply_served();

	if (sv && sv->at < FS_FROM_N)
		bk_hist_observe(&m->read_lat[sv->at], fs_now_ns() - start_ns);
}

/* ---- the writer ----------------------------------------------------------------------------- */

/* The places of a family's series, in the order they are printed. */
static const struct place {
	const char *label; /* the label's name, NULL for none */
	unsigned series;   /* how many: one per memory tier, one per op, else one; the chain's
			    * tiers: fs_metrics_snap.nchain */
} places[FS_AT_N] = {
    [FS_AT_MOUNT] = {NULL, 1},
    [FS_AT_TIER] = {"tier", CACHE_NTIERS},
    [FS_AT_CHAIN] = {"tier", 0},
    [FS_AT_OP] = {"op", BK_OP_N},
};

static unsigned place_series(const struct fs_metrics_snap *s, enum fs_metric_at at)
{
	return at == FS_AT_CHAIN ? s->nchain : places[at].series;
}

/* The label value of series @t of place @at: a memory tier's name, a chain tier's, an op's. */
static const char *place_value(const struct fs_metrics_snap *s, enum fs_metric_at at, unsigned t)
{
	if (at == FS_AT_TIER)
		return cache_tier_name((enum cache_tier)t);
	if (at == FS_AT_CHAIN)
		return s->chain[t].name;
	if (at == FS_AT_OP)
		return bk_op_name((enum bk_op)t);
	return NULL;
}

const char *fs_metric_type_name(enum fs_metric_type t)
{
	static const char *const names[] = {
	    [FS_METRIC_COUNTER] = "counter",
	    [FS_METRIC_GAUGE] = "gauge",
	    [FS_METRIC_HISTOGRAM] = "histogram",
	};

	return names[t];
}

/* One line (or a few) into the sink, formatted in a bounded buffer. */
__attribute__((format(printf, 2, 3))) static int emit(const struct fs_metrics_sink *k,
						      const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EOVERFLOW;
	return k->write(k->arg, line, (size_t)n);
}

/* A series' place: its label's name and value (both NULL: none). */
struct series {
	const char *label, *value;
};

/* "{tier="hot",le="0.001"}", "{op="get"}", "{le="1"}" or "" into @buf. */
static void labels(char *buf, size_t len, const struct series *at, const char *le)
{
	if (at->label && le)
		snprintf(buf, len, "{%s=\"%s\",le=\"%s\"}", at->label, at->value, le);
	else if (at->label || le)
		snprintf(buf, len, "{%s=\"%s\"}", at->label ? at->label : "le",
			 at->label ? at->value : le);
	else
		buf[0] = '\0';
}

/* A histogram's series: cumulative _bucket lines, the last le="+Inf", then _sum and _count. */
static int write_buckets(const struct fs_metrics_sink *k, const char *name,
			 const struct series *at, const struct fs_metric_value *v)
{
	char lab[96], le[32];
	uint64_t cum = 0;
	int r = 0;

	for (unsigned i = 0; i < v->nbuckets && r == 0; i++) {
		cum += v->counts[i];
		if (i + 1 < v->nbuckets)
			snprintf(le, sizeof(le), "%g", (double)v->bounds_us[i] / 1e6);
		else
			snprintf(le, sizeof(le), "+Inf");
		labels(lab, sizeof(lab), at, le);
		r = emit(k, "%s_bucket%s %llu\n", name, lab, (unsigned long long)cum);
	}
	labels(lab, sizeof(lab), at, NULL);
	if (r == 0)
		r = emit(k, "%s_sum%s %.6f\n%s_count%s %llu\n", name, lab, (double)v->sum_us / 1e6,
			 name, lab, (unsigned long long)cum);
	return r;
}

static int write_sample(const struct fs_metrics_sink *k, const char *name,
			const struct series *at, const struct fs_metric_value *v)
{
	char lab[64];

	labels(lab, sizeof(lab), at, NULL);
	switch (v->kind) {
	case FS_VALUE_NS:
		return emit(k, "%s%s %.6f\n", name, lab, (double)v->n / 1e9);
	case FS_VALUE_REAL:
		return emit(k, "%s%s %.0f\n", name, lab, v->x);
	case FS_VALUE_BUCKETS:
		return write_buckets(k, name, at, v);
	default:
		return emit(k, "%s%s %llu\n", name, lab, (unsigned long long)v->n);
	}
}

/* The row @name (without "tierfs_") a chain tier showed, or NULL. */
static const struct tier_metric *tier_row(const struct fs_tier_snap *ts, const char *name)
{
	for (unsigned i = 0; i < ts->nrows; i++)
		if (!strcmp(ts->rows[i].name, name))
			return &ts->rows[i];
	return NULL;
}

/* Series @t of place @at of family tierfs_@name: from its table row @row (NULL: none), else,
 * for a chain tier, from that tier's own row of the name. */
static enum fs_metric_got series_get(const struct fs_metric *row, const char *name,
				     const struct fs_metrics_snap *s, enum fs_metric_at at,
				     unsigned t, struct fs_metric_value *ret)
{
	enum fs_metric_got g = row ? row->get(s, at, t, ret) : FS_GOT_NONE;
	const struct tier_metric *tr;

	if (g != FS_GOT_NONE || at != FS_AT_CHAIN || t >= s->nchain)
		return g;
	tr = tier_row(&s->chain[t], name);
	if (!tr)
		return FS_GOT_NONE;
	if (tr->type == TIER_HISTOGRAM)
		return buckets(ret, tr->counts, tr->nbuckets, tr->bounds_us, tr->sum_us);
	return whole(ret, tr->value);
}

/* Has the mount any series of family tierfs_@name (with or without a value now)? */
static bool family_on(const struct fs_metric *row, const char *name,
		      const struct fs_metrics_snap *s)
{
	struct fs_metric_value v;

	for (int at = 0; at < FS_AT_N; at++)
		for (unsigned t = 0; t < place_series(s, at); t++)
			if (series_get(row, name, s, at, t, &v) != FS_GOT_NONE)
				return true;
	return false;
}

/* Family tierfs_@name: its HELP and TYPE lines, then every series that has a value. */
static int write_family(const struct fs_metric *row, const char *name, const char *help,
			enum fs_metric_type type, const struct fs_metrics_snap *s,
			const struct fs_metrics_sink *k)
{
	struct fs_metric_value v;
	char full[128];
	int r;

	snprintf(full, sizeof(full), "tierfs_%s", name);
	r = emit(k, "# HELP %s %s\n# TYPE %s %s\n", full, help, full, fs_metric_type_name(type));
	for (int at = 0; at < FS_AT_N && r == 0; at++) {
		for (unsigned t = 0; t < place_series(s, at) && r == 0; t++) {
			struct series se = {places[at].label, place_value(s, at, t)};

			if (series_get(row, name, s, at, t, &v) == FS_GOT_VALUE)
				r = write_sample(k, full, &se, &v);
		}
	}
	return r;
}

/* Is tierfs_@name a row of the table? */
static bool in_table(const char *name)
{
	for (size_t i = 0; i < fs_metrics_n; i++)
		if (!strcmp(fs_metrics[i].name + 7, name))
			return true;
	return false;
}

/* Was row @i of chain tier @t's family printed before it: a row of the table, or shown by a
 * tier before it (or by itself, earlier)? */
static bool printed_before(const struct fs_metrics_snap *s, unsigned t, unsigned i)
{
	const char *name = s->chain[t].rows[i].name;

	if (in_table(name))
		return true;
	for (unsigned u = 0; u < t; u++)
		if (tier_row(&s->chain[u], name))
			return true;
	return tier_row(&s->chain[t], name) != &s->chain[t].rows[i];
}

static enum fs_metric_type type_of(enum tier_metric_type t)
{
	return t == TIER_HISTOGRAM ? FS_METRIC_HISTOGRAM
	       : t == TIER_GAUGE   ? FS_METRIC_GAUGE
				   : FS_METRIC_COUNTER;
}

int fs_metrics_write(const struct fs_metrics_snap *s, const struct fs_metrics_sink *sink)
{
	int r = 0;

	for (size_t i = 0; i < fs_metrics_n && r == 0; i++) {
		const struct fs_metric *row = &fs_metrics[i];

		if (family_on(row, row->name + 7, s))
			r = write_family(row, row->name + 7, row->help, row->type, s, sink);
	}
	/* the families only the chain's tiers show, in the order the first to show each does */
	for (unsigned t = 0; t < s->nchain && r == 0; t++) {
		for (unsigned i = 0; i < s->chain[t].nrows && r == 0; i++) {
			const struct tier_metric *tr = &s->chain[t].rows[i];

			if (!printed_before(s, t, i))
				r = write_family(NULL, tr->name, tr->help, type_of(tr->type), s,
						 sink);
		}
	}
	return r;
}
