/*
 * control.c - seeing into the cache and steering it from a shell.
 *
 *   MNT/.tierfs/stats    Prometheus text exposition: per-tier cache counters, limiter,
 *                        backend totals. `cat` it, or point a node exporter textfile at it.
 *   MNT/.tierfs/config   the effective settings, one name=value per line.
 *   getfattr -n user.tierfs.tier MNT/obj    also .etag, .cached (resident blocks)
 *   setfattr -n user.tierfs.lagging_rate -v 100M MNT     live change of an option marked
 *                        .live in opts.c's table (also lagging_burst, lagging_ops, hot_ttl);
 *                        getfattr -n on MNT shows the current values.
 *
 * Who may do what. Reading (the files, getxattr) is open to everyone who can reach the mount:
 * it holds no secret, and each answer's cost is bounded by the tiers' sizes, never by an
 * object's size (user.tierfs.cached walks what the tiers hold and shows at most
 * RESIDENCY_RANGES ranges). Changing a setting is for the operator only: the mount's owner
 * (the uid tierfs runs as) or a caller with CAP_SYS_ADMIN in tierfs's user namespace;
 * everyone else gets EPERM, whatever the name or value. Refusals are logged through
 * fs_log_once: one line per caller and cause per interval, printable ASCII only, bounded.
 *
 * listxattr lists nothing: the attributes are answers about the mount, not data of the
 * files, and cp -a, rsync -X and tar --xattrs copy whatever listxattr names onto their
 * copies. getxattr by name still answers.
 *
 * The control directory is not listed by readdir (so find, du and rsync do not walk it) but
 * can be looked up by name; a real object of the same name wins, and control_dir= renames it.
 * Control files are snapshots taken at open and served with direct_io, so their size is 0 and
 * readers read to EOF.
 *
 * Live settings are parsed by fs_opts_set, exactly like -o, with the same bounds; a bad value
 * changes nothing. m->opts_lock serialises changes and the readers of the settings here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fuse_log.h>

#include "fs_i.h"
#include "redis.h"

#define XATTR_PREFIX "user.tierfs."

/* user.tierfs.cached shows at most this many ranges, then "(+N more ranges)": an answer of
 * at most about 3 KiB whatever the object. */
#define RESIDENCY_RANGES 64

#define CAP_SYS_ADMIN_BIT 21 /* linux/capability.h */

/* The control surface's attributes: owned like everything else in the mount (uid=, gid=;
 * neither is live, so no lock), read-only for everyone. */
static void fill_ctl_stat(struct mount *m, uint64_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = (uid_t)m->o->uid;
	st->st_gid = (gid_t)m->o->gid;
	if (ino == CTL_DIR_INO) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
	}
}

int ctl_lookup(struct mount *m, uint64_t parent, const char *name, struct stat *ret_st)
{
	uint64_t ino = 0;

	if (parent == 1 && strcmp(name, m->o->control_dir) == 0)
		ino = CTL_DIR_INO;
	else if (parent == CTL_DIR_INO && strcmp(name, "stats") == 0)
		ino = CTL_STATS_INO;
	else if (parent == CTL_DIR_INO && strcmp(name, "config") == 0)
		ino = CTL_CONFIG_INO;
	if (!ino)
		return -ENOENT;
	fill_ctl_stat(m, ino, ret_st);
	return 0;
}

int ctl_getattr(struct mount *m, uint64_t ino, struct stat *ret_st)
{
	if (!ctl_is(ino))
		return -ENOENT;
	fill_ctl_stat(m, ino, ret_st);
	return 0;
}

const char *ctl_dirent(size_t i, uint64_t *ret_ino)
{
	switch (i) {
	case 0:
		*ret_ino = CTL_STATS_INO;
		return "stats";
	case 1:
		*ret_ino = CTL_CONFIG_INO;
		return "config";
	default:
		return NULL;
	}
}

/* ---- text building ------------------------------------------------------------------------- */

struct text {
	char *s;
	size_t len, cap;
	bool oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if (t->s && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
		char *s = realloc(t->s, cap);
		if (!s) {
			t->oom = true;
			return;
		}
		t->s = s;
		t->cap = cap;
	}
}

/* One metric family with a value per tier. */
static void tier_metric(struct text *t, const struct cache_stats *cs, const char *name,
			const char *type, const char *help, size_t field)
{
	put(t, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\n", name, help, name, type);
	for (int i = 0; i < CACHE_NTIERS; i++) {
		const uint64_t *v = (const uint64_t *)((const char *)&cs->tier[i] + field);

		put(t, "tierfs_%s{tier=\"%s\"} %llu\n", name, cache_tier_name(i),
		    (unsigned long long)*v);
	}
}

static void mount_metric(struct text *t, const char *name, const char *type, const char *help,
			 uint64_t v)
{
	put(t, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\ntierfs_%s %llu\n", name, help, name, type,
	    name, (unsigned long long)v);
}

/* One metric family of the shared tier, labelled like the memory tiers' ones. */
static void shared_metric(struct text *t, const char *name, const char *type, const char *help,
			  uint64_t v)
{
	put(t, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\ntierfs_%s{tier=\"shared\"} %llu\n", name,
	    help, name, type, name, (unsigned long long)v);
}

static void shared_text(struct mount *m, struct text *t)
{
	struct fs_fleet_stats s;
	struct bk_redis_stats r;
	uint64_t cum = 0;

	fs_fleet_get_stats(m->fleet, &s, &r);
	shared_metric(t, "shared_hits_total", "counter",
		      "Blocks served from the shared tier, their value checked.", s.hits);
	shared_metric(t, "shared_served_bytes_total", "counter",
		      "Bytes of blocks served from the shared tier.", s.hit_bytes);
	shared_metric(t, "shared_misses_total", "counter", "Blocks the shared tier did not hold.",
		      s.misses);
	shared_metric(t, "shared_rejected_total", "counter",
		      "Values refused by the check (wrong bytes, truncated, another block's, "
		      "foreign): read from the store instead.", s.rejected);
	shared_metric(t, "shared_unavailable_total", "counter",
		      "Lookups Redis did not answer in time, or answered with an error, or "
		      "could not take (down).", s.unavailable);
	shared_metric(t, "shared_timeouts_total", "counter",
		      "Redis calls abandoned after shared_timeout.", r.timeouts);
	shared_metric(t, "shared_timeouts_extended_total", "counter",
		      "Timeouts a call waited past because the server was sending other replies, "
		      "or answering the ones written before it.", r.extended);
	shared_metric(t, "shared_errors_total", "counter",
		      "Redis calls failed: server down, connection lost, error reply.", r.errors);
	shared_metric(t, "shared_received_bytes_total", "counter",
		      "Value bytes received from Redis.", r.bytes_in);
	shared_metric(t, "shared_puts_total", "counter", "Blocks written to Redis.", r.puts);
	shared_metric(t, "shared_put_bytes_total", "counter", "Value bytes written to Redis.",
		      r.put_bytes);
	shared_metric(t, "shared_put_drops_total", "counter",
		      "Blocks not written: too many bytes queued, or the server down.", r.put_drops);
	shared_metric(t, "shared_put_errors_total", "counter",
		      "Writes refused by Redis or lost with the connection.", r.put_errors);
	shared_metric(t, "shared_put_queued_bytes", "gauge",
		      "Bytes of writes sent to Redis and not answered yet.", r.put_queued);
	shared_metric(t, "shared_store_fetches_total", "counter",
		      "Blocks fetched from the store after the shared tier.", s.store_fetches);
	shared_metric(t, "shared_lock_wins_total", "counter",
		      "Misses that took the block's fetch lock and fetched it from the store.",
		      s.lock_wins);
	shared_metric(t, "shared_lock_waits_total", "counter",
		      "Misses that found another mount fetching the block, and waited for it.",
		      s.lock_waits);
	shared_metric(t, "shared_lock_wait_hits_total", "counter",
		      "Waits served the other mount's value.", s.lock_wait_hits);
	shared_metric(t, "shared_lock_gave_up_total", "counter",
		      "Waits that went to the store after the bound (10 x shared_timeout).",
		      s.lock_gave_up);
	put(t, "# HELP tierfs_fleet_get_seconds Time from a GET written to Redis to its answer (a "
	       "value or none), late answers included: compare with shared_timeout.\n"
	       "# TYPE tierfs_fleet_get_seconds histogram\n");
	for (int i = 0; i < BK_REDIS_LAT_BUCKETS; i++) {
		cum += r.get_lat[i];
		if (i < BK_REDIS_LAT_BUCKETS - 1)
			put(t, "tierfs_fleet_get_seconds_bucket{tier=\"shared\",le=\"%g\"} %llu\n",
			    (double)bk_redis_lat_bounds_us[i] / 1e6, (unsigned long long)cum);
		else
			put(t, "tierfs_fleet_get_seconds_bucket{tier=\"shared\",le=\"+Inf\"} %llu\n",
			    (unsigned long long)cum);
	}
	put(t, "tierfs_fleet_get_seconds_sum{tier=\"shared\"} %.6f\n"
	       "tierfs_fleet_get_seconds_count{tier=\"shared\"} %llu\n",
	    (double)r.get_lat_sum_us / 1e6, (unsigned long long)cum);
	shared_metric(t, "shared_servers", "gauge", "Redis servers configured.", r.servers);
	shared_metric(t, "shared_servers_down", "gauge", "Redis servers thought down now.",
		      r.servers_down);
	shared_metric(t, "fleet_calls_total", "counter", "Fleet budget grant scripts called.",
		      s.fleet_calls);
	shared_metric(t, "fleet_grants_total", "counter", "Fleet budget chunks granted.",
		      s.fleet_grants);
	shared_metric(t, "fleet_waits_total", "counter",
		      "Fleet budget calls told to wait (a chunk lent ahead, or refused): the "
		      "fleet is at its rate.", s.fleet_waits);
	shared_metric(t, "fleet_errors_total", "counter", "Fleet budget calls that failed.",
		      s.fleet_errors);
	shared_metric(t, "fleet_queued_fetches_total", "counter",
		      "Lagging fetches that waited for fleet tokens.", s.fleet_queued);
	shared_metric(t, "fleet_fallbacks_total", "counter",
		      "Times the fleet budget fell back to local limits (Redis failed).",
		      s.fleet_fallbacks);
	shared_metric(t, "fleet_fallback", "gauge",
		      "1 while the fleet budget is on local limits only.", s.fleet_fallback);
}

#define F(field) offsetof(struct cache_tier_stats, field)

/* The disk tier's line of the family just printed, when there is a disk tier. */
static void disk_line(struct text *t, const struct disk_stats *ds, const char *name, uint64_t v)
{
	if (ds)
		put(t, "tierfs_%s{tier=\"disk\"} %llu\n", name, (unsigned long long)v);
}

/* A family only the disk tier has. */
static void disk_metric(struct text *t, const struct disk_stats *ds, const char *name,
			const char *type, const char *help, uint64_t v)
{
	if (!ds)
		return;
	put(t, "# HELP tierfs_%s %s\n# TYPE tierfs_%s %s\n", name, help, name, type);
	disk_line(t, ds, name, v);
}

static void stats_text(struct mount *m, struct text *t)
{
	struct cache_stats cs;
	struct bk_stats bs;
	struct disk_stats dstat, *ds = NULL;

	cache_get_stats(m->c, &cs);
	backend_get_stats(m->b, &bs);
	if (m->disk) {
		disk_get_stats(m->disk, &dstat);
		ds = &dstat;
	}
	/* the disk tier answers misses of the memory tiers: its hits and misses are blocks
	 * asked of it, its served bytes what it read back (checked) */
	tier_metric(t, &cs, "cache_hits_total", "counter", "Block lookups answered by the tier.",
		    F(hits));
	disk_line(t, ds, "cache_hits_total", ds ? ds->hits : 0);
	tier_metric(t, &cs, "cache_misses_total", "counter",
		    "Blocks a reader wanted that were fetched into the tier.", F(misses));
	disk_line(t, ds, "cache_misses_total", ds ? ds->misses : 0);
	tier_metric(t, &cs, "cache_served_bytes_total", "counter",
		    "Bytes answered to readers from the tier.", F(bytes_served));
	disk_line(t, ds, "cache_served_bytes_total", ds ? ds->bytes_served : 0);
	disk_metric(t, ds, "disk_writes_total", "counter", "Blocks written to the disk tier.",
		    ds ? ds->writes : 0);
	disk_metric(t, ds, "disk_written_bytes_total", "counter",
		    "Bytes written to the disk tier.", ds ? ds->bytes_written : 0);
	disk_metric(t, ds, "disk_write_errors_total", "counter",
		    "Writes to the disk tier that failed (the first turns writes off).",
		    ds ? ds->write_errors : 0);
	disk_metric(t, ds, "disk_write_drops_total", "counter",
		    "Blocks not written to the disk tier: its queue was full, or writes are off.",
		    ds ? ds->write_drops : 0);
	disk_metric(t, ds, "disk_writable", "gauge", "1 while the disk tier takes writes.",
		    ds ? ds->writable : 0);
	disk_metric(t, ds, "disk_queued_bytes", "gauge", "Bytes waiting to be written to disk.",
		    ds ? ds->queued_bytes : 0);
	disk_metric(t, ds, "disk_crc_failures_total", "counter",
		    "Disk records whose CRC-32C did not match: dropped and fetched again.",
		    ds ? ds->crc_failures : 0);
	disk_metric(t, ds, "disk_read_errors_total", "counter",
		    "Disk reads that failed (EIO...): served from the store.",
		    ds ? ds->read_errors : 0);
	disk_metric(t, ds, "disk_direct_reads_total", "counter",
		    "Disk hits read with O_DIRECT, past the page cache (the rest: buffered).",
		    ds ? ds->direct_reads : 0);
	disk_metric(t, ds, "disk_recovered_blocks", "gauge",
		    "Blocks the disk tier found by its scan at mount.",
		    ds ? ds->recovered_blocks : 0);
	disk_metric(t, ds, "disk_recovery_ms", "gauge", "How long that scan took, ms.",
		    ds ? ds->recovery_ms : 0);
	tier_metric(t, &cs, "cache_fetched_bytes_total", "counter",
		    "Bytes fetched from the store into the tier.", F(bytes_fetched));
	tier_metric(t, &cs, "cache_fetches_total", "counter",
		    "Block fetches started for the tier, readahead included.", F(fetches));
	tier_metric(t, &cs, "cache_fetch_errors_total", "counter", "Block fetches that failed.",
		    F(fetch_errors));
	tier_metric(t, &cs, "cache_readaheads_total", "counter",
		    "Block fetches started by readahead.", F(readaheads));
	tier_metric(t, &cs, "cache_part_fetches_total", "counter",
		    "Fetches of part of a block (64-256 KiB), for random reads of lagging "
		    "objects and of hot ones larger than the tiers.",
		    F(parts));
	tier_metric(t, &cs, "cache_singleflight_joins_total", "counter",
		    "Block waits that joined a fetch already under way.", F(joins));
	tier_metric(t, &cs, "cache_evictions_total", "counter",
		    "Segment rotations (each evicts one segment).", F(rotations));
	disk_line(t, ds, "cache_evictions_total", ds ? ds->rotations : 0);
	tier_metric(t, &cs, "cache_bounces_total", "counter",
		    "Fetches answered but not stored: every segment was pinned.", F(bounces));
	tier_metric(t, &cs, "cache_lower_fallbacks_total", "counter",
		    "Blocks the disk tier listed but did not serve (CRC, read error): fetched from "
		    "the store, charged to the limiter.", F(lower_fallbacks));
	tier_metric(t, &cs, "cache_memory_waits_total", "counter",
		    "Fetches that waited for memory (a ring slot or bounce room).", F(mem_waits));
	tier_metric(t, &cs, "cache_memory_queued_fetches", "gauge",
		    "Fetches waiting for memory now.", F(mem_queued));
	mount_metric(t, "cache_bounce_bytes", "gauge", "Bounce buffers mapped now, both tiers.",
		     cs.bounce_bytes);
	mount_metric(t, "cache_bounce_peak_bytes", "gauge",
		     "The most bounce buffer bytes mapped at once since the mount.", cs.bounce_peak);
	mount_metric(t, "cache_bounce_limit_bytes", "gauge",
		     "Bounce buffer bytes allowed at once (one more block only when nothing else "
		     "holds memory).", cs.bounce_limit);
	tier_metric(t, &cs, "cache_resident_blocks", "gauge", "Blocks resident in the tier.",
		    F(blocks));
	disk_line(t, ds, "cache_resident_blocks", ds ? ds->blocks : 0);
	tier_metric(t, &cs, "cache_resident_bytes", "gauge", "Bytes resident in the tier.",
		    F(bytes));
	disk_line(t, ds, "cache_resident_bytes", ds ? ds->bytes : 0);
	tier_metric(t, &cs, "cache_size_bytes", "gauge", "Configured size of the tier.", F(size));
	disk_line(t, ds, "cache_size_bytes", ds ? ds->size : 0);
	tier_metric(t, &cs, "cache_inflight_fetches", "gauge", "Fetches running now.",
		    F(inflight));
	tier_metric(t, &cs, "throttle_waits_total", "counter",
		    "Fetches that waited for the rate limiter.", F(throttle_waits));
	put(t, "# HELP tierfs_throttled_seconds_total Time fetches waited for the rate limiter.\n"
	       "# TYPE tierfs_throttled_seconds_total counter\n");
	for (int i = 0; i < CACHE_NTIERS; i++)
		put(t, "tierfs_throttled_seconds_total{tier=\"%s\"} %.6f\n", cache_tier_name(i),
		    (double)cs.tier[i].throttled_ns / 1e9);
	tier_metric(t, &cs, "throttle_queued_fetches", "gauge",
		    "Fetches waiting for the rate limiter now.", F(queued));
	put(t, "# HELP tierfs_limiter_tokens Rate limiter tokens (bytes) now; negative is debt.\n"
	       "# TYPE tierfs_limiter_tokens gauge\n");
	for (int i = 0; i < CACHE_NTIERS; i++)
		if (cs.tier[i].limited)
			put(t, "tierfs_limiter_tokens{tier=\"%s\"} %.0f\n", cache_tier_name(i),
			    cs.tier[i].rate ? cs.tier[i].tokens : 0.0);
	put(t, "# HELP tierfs_limiter_rate_bytes Rate limit in bytes per second (0: unlimited).\n"
	       "# TYPE tierfs_limiter_rate_bytes gauge\n");
	for (int i = 0; i < CACHE_NTIERS; i++)
		if (cs.tier[i].limited)
			put(t, "tierfs_limiter_rate_bytes{tier=\"%s\"} %llu\n", cache_tier_name(i),
			    (unsigned long long)cs.tier[i].rate);
	mount_metric(t, "log_suppressed_total", "counter",
		     "Log lines held back: repeats of an (object, cause) within a minute, or "
		     "beyond the mount's line budget.",
		     __atomic_load_n(&m->log.suppressed, __ATOMIC_RELAXED));
	mount_metric(t, "reads_total", "counter", "Read requests answered.",
		     __atomic_load_n(&m->reads, __ATOMIC_RELAXED));
	mount_metric(t, "read_errors_total", "counter", "Read requests answered with an error.",
		     __atomic_load_n(&m->read_errors, __ATOMIC_RELAXED));
	mount_metric(t, "read_bytes_total", "counter", "Bytes answered to readers, all tiers.",
		     __atomic_load_n(&m->read_bytes, __ATOMIC_RELAXED));
	mount_metric(t, "interrupted_reads_watched", "gauge",
		     "Interrupted reads still waiting, watched until answered or their reader dies.",
		     __atomic_load_n(&m->nwatch, __ATOMIC_RELAXED));
	mount_metric(t, "backend_requests_total", "counter",
		     "Requests sent to the store, retries included.", bs.requests);
	mount_metric(t, "backend_retries_total", "counter", "Requests tried again.", bs.retries);
	mount_metric(t, "backend_errors_total", "counter", "Requests that failed after retries.",
		     bs.errors);
	mount_metric(t, "backend_received_bytes_total", "counter",
		     "Bytes of range reads received from the store.", bs.bytes);
	mount_metric(t, "backend_active_requests", "gauge", "Requests running now.", bs.active);
	mount_metric(t, "backend_queued_requests", "gauge", "Requests waiting for a connection.",
		     bs.queued);
	mount_metric(t, "backend_merged_reads_total", "counter",
		     "Range reads sent inside the request of the read before them (readahead of "
		     "consecutive blocks, merged up to 16 MiB).", bs.merged);
	mount_metric(t, "backend_slowdowns_total", "counter",
		     "503 SlowDown and 429 answers: each halves the request window.", bs.slowdowns);
	mount_metric(t, "backend_request_window", "gauge",
		     "Requests allowed at once now (AIMD; max_conns when the store is happy).",
		     bs.window);
	if (m->fleet)
		shared_text(m, t);
}

int ctl_read_all(struct mount *m, uint64_t ino, char **ret, size_t *ret_len)
{
	struct text t = {0};

	if (ino == CTL_STATS_INO) {
		stats_text(m, &t);
	} else if (ino == CTL_CONFIG_INO) {
		pthread_mutex_lock(&m->opts_lock);
		size_t n = fs_opts_format(m->o, NULL, 0);
		t.s = malloc(n + 1);
		if (t.s) {
			fs_opts_format(m->o, t.s, n + 1);
			t.len = n;
		} else {
			t.oom = true;
		}
		pthread_mutex_unlock(&m->opts_lock);
	} else {
		return -EISDIR;
	}
	if (t.oom) {
		free(t.s);
		return -ENOMEM;
	}
	*ret = t.s;
	*ret_len = t.len;
	return 0;
}

/* ---- extended attributes ------------------------------------------------------------------- */

/* FUSE's size protocol: size 0 asks how long; too small is ERANGE. */
static int xattr_answer(const char *v, size_t n, char *buf, size_t size)
{
	if (n > 65536)
		return -E2BIG;
	if (size == 0)
		return (int)n;
	if (size < n)
		return -ERANGE;
	memcpy(buf, v, n);
	return (int)n;
}

struct blocks {
	uint64_t *v;
	size_t n, cap;
	bool oom;
};

static void blocks_add(void *arg, uint64_t blk)
{
	struct blocks *b = arg;

	if (b->oom)
		return;
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		uint64_t *v = realloc(b->v, cap * sizeof(*v));

		if (!v) {
			b->oom = true;
			return;
		}
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = blk;
}

static int cmp_blk(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* " disk=0-15,32": the disk tier's blocks of @o as ranges (the first RESIDENCY_RANGES, then a
 * count), after what the memory tiers hold; nothing when it holds none. The cost is a walk
 * of the disk tier's index, bounded by disk_size, never by the object's size. */
static void disk_residency(struct mount *m, const struct fobj *o, struct text *t, bool first)
{
	struct blocks b = {0};
	size_t ranges = 0;

	disk_each_block(m->disk, o->id, blocks_add, &b);
	if (b.oom) {
		t->oom = true;
		goto out;
	}
	if (!b.n)
		goto out;
	qsort(b.v, b.n, sizeof(*b.v), cmp_blk);
	put(t, "%sdisk=", first ? "" : " ");
	for (size_t i = 0; i < b.n;) {
		size_t j = i;

		while (j + 1 < b.n && b.v[j + 1] <= b.v[j] + 1)
			j++;
		if (ranges < RESIDENCY_RANGES) {
			if (b.v[i] == b.v[j])
				put(t, "%s%llu", ranges ? "," : "", (unsigned long long)b.v[i]);
			else
				put(t, "%s%llu-%llu", ranges ? "," : "", (unsigned long long)b.v[i],
				    (unsigned long long)b.v[j]);
		}
		ranges++;
		i = j + 1;
	}
	if (ranges > RESIDENCY_RANGES)
		put(t, " (+%zu more ranges)", ranges - RESIDENCY_RANGES);
out:
	free(b.v);
}

/* "hot=0-15,32 lagging=16-20 disk=0-40", "none", or the first RESIDENCY_RANGES ranges and a
 * count (the disk tier's ranges counted on their own: a block on disk is often in memory too). */
static void residency_text(struct mount *m, const struct fobj *o, struct text *t)
{
	struct cache_obj co = {.id = o->id, .size = o->size, .mtime = o->mtime, .ctx = (void *)o};
	char buf[4096];
	int n = cache_residency_text(m->c, &co, RESIDENCY_RANGES, buf, sizeof(buf));
	size_t before;

	if (n < 0) {
		t->oom = true;
		return;
	}
	if (!m->disk) {
		put(t, "%s", buf); /* 64 ranges of two 20-digit numbers fit: never truncated */
		return;
	}
	bool none = strcmp(buf, "none") == 0;

	if (!none)
		put(t, "%s", buf);
	before = t->len;
	disk_residency(m, o, t, none);
	if (none && t->len == before && !t->oom)
		put(t, "none");
}

int ctl_getxattr(struct mount *m, uint64_t ino, const char *name, char *buf, size_t size)
{
	struct text t = {0};
	struct fobj *o = NULL;
	int r;

	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)) != 0)
		return -ENODATA;
	name += strlen(XATTR_PREFIX);
	if (ino == 1) {
		char line[64] = "";

		if (!fs_opts_live(name))
			return -ENODATA;
		pthread_mutex_lock(&m->opts_lock);
		if (strcmp(name, "lagging_burst") == 0 && !m->o->lagging_burst)
			/* the burst in force, not the 0 that asks for the default */
			snprintf(line, sizeof(line), "%llu",
				 (unsigned long long)rl_burst(m->o->lagging_rate, 0));
		else if (fs_opts_value(m->o, name, line, sizeof(line)) < 0)
			line[0] = '\0';
		pthread_mutex_unlock(&m->opts_lock);
		if (!line[0])
			return -ENODATA;
		return xattr_answer(line, strlen(line), buf, size);
	}
	if (ctl_is(ino))
		return -ENODATA;
	r = ns_peek(m->ns, ino, &o);
	if (r < 0)
		return r == -EISDIR || r == -ENODATA ? -ENODATA : r;
	if (strcmp(name, "tier") == 0) {
		struct cache_obj co = {.id = o->id, .size = o->size, .mtime = o->mtime};

		put(&t, "%s", cache_tier_name(cache_route(m->c, &co)));
	} else if (strcmp(name, "etag") == 0 && o->etag[0]) {
		put(&t, "%s", o->etag);
	} else if (strcmp(name, "cached") == 0) {
		residency_text(m, o, &t);
	} else {
		fobj_put(o);
		return -ENODATA;
	}
	fobj_put(o);
	if (t.oom) {
		free(t.s);
		return -ENOMEM;
	}
	r = xattr_answer(t.s ? t.s : "", t.len, buf, size);
	free(t.s);
	return r;
}

/*
 * May the caller of a request change settings? @uid is the request's (the caller's fsuid,
 * from the kernel, trustworthy); @pid its thread, as tierfs's pid namespace numbers it (0
 * when the caller is outside it).
 *
 * The owner check needs nothing else. The capability check reads CapEff from
 * /proc/PID/status, since the FUSE protocol carries no capabilities. Three things make that
 * trustworthy enough:
 *   - the caller is blocked in setxattr until we answer, so the thread cannot exec or exit
 *     on its own; only a fatal signal can end it early, and then its pid could be reused;
 *   - the /proc/PID directory is opened once and both files are read through it, so they
 *     describe one process; and that process's fsuid must be the request's uid, so a
 *     reused pid only passes if it belongs to the same user and holds CAP_SYS_ADMIN itself;
 *   - the process must be in tierfs's own user namespace: CapEff counts capabilities in the
 *     process's namespace, and any user gets a full set inside `unshare -Ur`.
 * The race left (kill the caller, then a process of the same uid with CAP_SYS_ADMIN takes
 * its pid, all within this call) gains nothing: that process could steer the mount itself.
 */
static bool may_steer(uid_t uid, pid_t pid)
{
	char path[64], line[256];
	unsigned long long caps = 0;
	long fsuid = -1;
	struct stat mine, theirs;
	bool have_caps = false;
	int dir, fd;
	FILE *f;

	if (uid == getuid())
		return true;
	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return false;
	if (stat("/proc/self/ns/user", &mine) < 0 || fstatat(dir, "ns/user", &theirs, 0) < 0 ||
	    mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino) {
		close(dir);
		return false;
	}
	fd = openat(dir, "status", O_RDONLY | O_CLOEXEC);
	close(dir);
	f = fd < 0 ? NULL : fdopen(fd, "re");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	while (fgets(line, sizeof(line), f)) {
		long ids[4];

		if (sscanf(line, "Uid: %ld %ld %ld %ld", &ids[0], &ids[1], &ids[2], &ids[3]) == 4)
			fsuid = ids[3];
		else if (sscanf(line, "CapEff: %llx", &caps) == 1)
			have_caps = true;
	}
	fclose(f);
	return fsuid == (long)uid && have_caps && (caps & (1ULL << CAP_SYS_ADMIN_BIT));
}

int ctl_setxattr(struct mount *m, uid_t uid, pid_t pid, uint64_t ino, const char *name,
		 const char *value, size_t size)
{
	char val[128], err[256], who[32];
	struct fs_opts saved;
	int r;

	if (ino != 1 && ino != CTL_DIR_INO)
		return -EROFS;
	if (!may_steer(uid, pid)) {
		snprintf(who, sizeof(who), "uid %lu", (unsigned long)uid);
		fs_log_once(&m->log, FUSE_LOG_WARNING, who, "not the operator",
			    "setxattr %.64s refused: uid %lu is not the mount's owner and lacks "
			    "CAP_SYS_ADMIN",
			    name, (unsigned long)uid);
		return -EPERM;
	}
	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)) != 0)
		return -ENOTSUP;
	name += strlen(XATTR_PREFIX);
	if (!fs_opts_live(name))
		return -ENOTSUP;
	if (size >= sizeof(val))
		return -EINVAL;
	memcpy(val, value, size);
	val[size] = '\0';
	while (size && (val[size - 1] == '\n' || val[size - 1] == ' '))
		val[--size] = '\0';

	err[0] = '\0';
	pthread_mutex_lock(&m->opts_lock);
	saved = *m->o;
	r = fs_opts_set(m->o, name, val, err, sizeof(err));
	if (r == 0 && strcmp(name, "hot_ttl") == 0)
		r = cache_set_hot_ttl(m->c, m->o->hot_ttl);
	else if (r == 0)
		r = cache_set_limits(m->c, m->o->lagging_rate, m->o->lagging_burst,
				     m->o->lagging_ops);
	if (r < 0)
		*m->o = saved; /* numbers only: no string of the struct changes here */
	pthread_mutex_unlock(&m->opts_lock);
	if (r < 0) {
		/* err echoes the value: fs_log_once keeps printable ASCII and bounds the line */
		snprintf(who, sizeof(who), "uid %lu", (unsigned long)uid);
		fs_log_once(&m->log, FUSE_LOG_WARNING, who, "bad value", "setxattr %s refused: %.200s", name,
			    err[0] ? err : strerror(-r));
		return r == -ENOENT ? -ENOTSUP : -EINVAL;
	}
	return 0;
}
