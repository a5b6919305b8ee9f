/*
 * report.c - what a replay found, for people (text), for programs (JSON) and for a sweep (one
 * row per value).
 *
 *   struct sim_run ──► per mount, then the fleet:   reads, bytes, span
 *                                                   tiers: hot, lagging (the mount's stats
 *                                                   file's hits and misses), shared (Redis)
 *                                                   store: GETs, bytes, dollars (and per day)
 *                                                   Redis: memory used, peak, evictions
 *                                                   latency of reads: p50, p99, p99.9, max
 *
 * A memory tier's hit ratio is (hits + joins) / (hits + joins + misses) of the cache's own
 * counters, as `tierfs status` computes it from the mount's: a read that joins a fetch under
 * way started no fetch of its own. Counted apart, the figure would hang on timing the trace
 * does not fix: with a store slower than the recorded one, readahead is still in flight when
 * the reader comes (a join) where the mount had it resident (a hit). So a replay and the
 * mount it was recorded on can be compared figure for figure. Per-day figures scale the trace's
 * span to 24 hours.
 *
 * No state, no locking.
 */
#include <inttypes.h>
#include <stdio.h>

#include "sim.h"

#define MIB (1024.0 * 1024.0)

static double ratio(uint64_t hits, uint64_t misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : -1.0;
}

/* A memory tier's hit ratio: joins are hits (above). */
static double tier_ratio(const struct cache_tier_stats *s)
{
	return ratio(s->hits + s->joins, s->misses);
}

static double per_day(const struct sim_result *r)
{
	return r->span_ns ? 86400e9 / (double)r->span_ns : 0.0;
}

static double cost_gets(const struct sim_result *r, const struct sim_cfg *c)
{
	return (double)r->store_gets / 1000.0 * c->get_price;
}

static double cost_bytes(const struct sim_result *r, const struct sim_cfg *c)
{
	return (double)r->store_bytes / 1e9 * c->gb_price;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* "0.982" or "-" for a tier nobody asked. */
static const char *ratio_text(double v, char *buf, size_t len)
{
	if (v < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.3f", v);
	return buf;
}

/* ---- text ----------------------------------------------------------------------------------- */

static void text_tiers(FILE *f, const struct sim_result *r, bool shared)
{
	char b[16];

	for (int t = 0; t < CACHE_NTIERS; t++) {
		const struct cache_tier_stats *s = &r->cache.tier[t];

		fprintf(f,
			"  %-8s hit ratio %s (hits %" PRIu64 ", misses %" PRIu64 ", joins %" PRIu64
			"), fetched %.1f MiB",
			cache_tier_name(t), ratio_text(tier_ratio(s), b, sizeof(b)), s->hits,
			s->misses, s->joins, (double)s->bytes_fetched / MIB);
		if (s->limited)
			fprintf(f, ", throttled %.1f s over %" PRIu64 " fetches",
				(double)s->throttled_ns / 1e9, s->throttle_waits);
		fprintf(f, "\n");
	}
	if (shared)
		fprintf(f,
			"  %-8s hit ratio %s (hits %" PRIu64 ", misses %" PRIu64
			", lock waits %" PRIu64 "), GET %.1f MiB, SET %.1f MiB\n",
			"shared", ratio_text(ratio(r->shared_hits, r->shared_misses), b, sizeof(b)),
			r->shared_hits, r->shared_misses, r->shared_lock_waits,
			(double)r->shared_get_bytes / MIB, (double)r->shared_set_bytes / MIB);
	if (r->disk_hits + r->disk_misses)
		fprintf(f,
			"  %-8s hit ratio %s (hits %" PRIu64 ", misses %" PRIu64
			"), %.1f MiB held, %" PRIu64 " blocks there before their trace\n",
			"disk", ratio_text(ratio(r->disk_hits, r->disk_misses), b, sizeof(b)),
			r->disk_hits, r->disk_misses, (double)r->disk_used / MIB, r->disk_seeded);
}

static void text_result(FILE *f, const char *title, const struct sim_result *r,
			const struct sim_cfg *c, bool shared)
{
	double cg = cost_gets(r, c), cb = cost_bytes(r, c), d = per_day(r);

	fprintf(f, "%s: %" PRIu64 " reads, %.1f MiB in %.1f s%s\n", title, r->reads,
		(double)r->read_bytes / MIB, (double)r->span_ns / 1e9,
		r->read_errors ? " (with errors)" : "");
	text_tiers(f, r, shared);
	fprintf(f,
		"  %-8s %" PRIu64 " GETs (%" PRIu64 " block reads merged into them), %.1f MiB: "
		"$%.4f + $%.4f = $%.4f; per day %.0f GETs, %.1f GiB, $%.2f\n",
		"store", r->store_gets, r->store_merged, (double)r->store_bytes / MIB, cg, cb,
		cg + cb, (double)r->store_gets * d, (double)r->store_bytes * d / (MIB * 1024),
		(cg + cb) * d);
	fprintf(f, "  %-8s p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms\n", "latency",
		ms(sim_lat_quantile(&r->lat, 0.5)), ms(sim_lat_quantile(&r->lat, 0.99)),
		ms(sim_lat_quantile(&r->lat, 0.999)), ms(r->lat.max_ns));
}

/* What a trace cannot show, so no prediction includes it (docs/sizing.md, "The model"): a
 * mount's figures differ from the sim's by whatever of these happened during its trace. */
static const char *const excludes[] = {
    "Redis outages and restarts (a Redis that came back empty)",
    "store outages, retries, slow-downs and cut transfers",
    "a disk tier's contents the trace never read from it (a remount on a cache_dir), a full disk",
    "the fleet budget (fleet_lagging_rate)",
};

void sim_report_text(FILE *f, const struct sim_run *r, const struct sim_cfg *c)
{
	bool shared = r->fleet.shared_hits + r->fleet.shared_misses > 0 || r->fleet.redis_peak;
	char title[4200];

	for (unsigned i = 0; i < r->nmounts; i++) {
		snprintf(title, sizeof(title), "mount %u (%s)", i + 1, r->names[i]);
		text_result(f, title, &r->mount[i], c, shared);
	}
	text_result(f, "fleet", &r->fleet, c, shared);
	if (shared)
		fprintf(
		    f, "  %-8s %.1f MiB used, peak %.1f MiB of %.1f MiB, %" PRIu64 " evictions\n",
		    "redis", (double)r->fleet.redis_used / MIB, (double)r->fleet.redis_peak / MIB,
		    (double)c->redis_mem / MIB, r->fleet.redis_evictions);
	if (r->overloaded)
		fprintf(f,
			"OVERLOADED: a mount had more than %" PRIu64 " reads waiting %.1f s in: "
			"these settings cannot serve this trace\n",
			c->max_queued, (double)r->overload_at_ns / 1e9);
	fprintf(f, "not in the prediction (a trace does not show them):");
	for (size_t i = 0; i < sizeof(excludes) / sizeof(excludes[0]); i++)
		fprintf(f, "%s %s", i ? ";" : "", excludes[i]);
	fprintf(f, "\n");
	fprintf(f, "replayed in %.2f s of CPU (%.0f reads/s, %" PRIu64 " events)\n", r->cpu_s,
		r->cpu_s > 0 ? (double)r->fleet.reads / r->cpu_s : 0.0, r->events);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void json_ratio(FILE *f, double v)
{
	if (v < 0)
		fprintf(f, "null");
	else
		fprintf(f, "%.6f", v);
}

static void json_tiers(FILE *f, const struct sim_result *r)
{
	fprintf(f, "\"tiers\":{");
	for (int t = 0; t < CACHE_NTIERS; t++) {
		const struct cache_tier_stats *s = &r->cache.tier[t];

		fprintf(f, "\"%s\":{\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"hit_ratio\":",
			cache_tier_name(t), s->hits, s->misses);
		json_ratio(f, tier_ratio(s));
		fprintf(f,
			",\"joins\":%" PRIu64 ",\"bytes_served\":%" PRIu64
			",\"bytes_fetched\":%" PRIu64 ",\"throttled_s\":%.6f,"
			"\"throttle_waits\":%" PRIu64 "},",
			s->joins, s->bytes_served, s->bytes_fetched, (double)s->throttled_ns / 1e9,
			s->throttle_waits);
	}
	fprintf(f, "\"shared\":{\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"hit_ratio\":",
		r->shared_hits, r->shared_misses);
	json_ratio(f, ratio(r->shared_hits, r->shared_misses));
	fprintf(f,
		",\"get_bytes\":%" PRIu64 ",\"set_bytes\":%" PRIu64 ",\"lock_waits\":%" PRIu64 "}",
		r->shared_get_bytes, r->shared_set_bytes, r->shared_lock_waits);
	fprintf(f, ",\"disk\":{\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"hit_ratio\":",
		r->disk_hits, r->disk_misses);
	json_ratio(f, ratio(r->disk_hits, r->disk_misses));
	fprintf(f, ",\"used_bytes\":%" PRIu64 ",\"seeded_blocks\":%" PRIu64 "}}", r->disk_used,
		r->disk_seeded);
}

static void json_result(FILE *f, const struct sim_result *r, const struct sim_cfg *c)
{
	double cg = cost_gets(r, c), cb = cost_bytes(r, c), d = per_day(r);

	fprintf(f,
		"\"reads\":%" PRIu64 ",\"read_bytes\":%" PRIu64 ",\"read_errors\":%" PRIu64
		",\"span_s\":%.6f,\"written_objects\":%" PRIu64 ",",
		r->reads, r->read_bytes, r->read_errors, (double)r->span_ns / 1e9,
		r->written_objects);
	json_tiers(f, r);
	fprintf(f,
		",\"store\":{\"gets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"merged\":%" PRIu64
		",\"cost_gets\":%.6f,\"cost_bytes\":%.6f,\"cost\":%.6f,\"gets_per_day\":%.0f,"
		"\"bytes_per_day\":%.0f,\"cost_per_day\":%.4f}",
		r->store_gets, r->store_bytes, r->store_merged, cg, cb, cg + cb,
		(double)r->store_gets * d, (double)r->store_bytes * d, (cg + cb) * d);
	fprintf(f, ",\"latency_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}",
		ms(sim_lat_quantile(&r->lat, 0.5)), ms(sim_lat_quantile(&r->lat, 0.99)),
		ms(sim_lat_quantile(&r->lat, 0.999)), ms(r->lat.max_ns));
}

/* A JSON string: the path as it is, with quotes, backslashes and control bytes escaped. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void sim_report_json_fleet(FILE *f, const struct sim_run *r, const struct sim_cfg *c)
{
	json_result(f, &r->fleet, c);
	fprintf(f,
		",\"redis\":{\"used\":%" PRIu64 ",\"peak\":%" PRIu64 ",\"limit\":%" PRIu64
		",\"evictions\":%" PRIu64 "},\"overloaded\":%s,\"overload_at_s\":%.3f,"
		"\"cpu_s\":%.3f,\"events\":%" PRIu64 ",\"incomplete_files\":%u",
		r->fleet.redis_used, r->fleet.redis_peak, c->redis_mem, r->fleet.redis_evictions,
		r->overloaded ? "true" : "false", (double)r->overload_at_ns / 1e9, r->cpu_s,
		r->events, r->incomplete);
	fprintf(f, ",\"excludes\":[");
	for (size_t i = 0; i < sizeof(excludes) / sizeof(excludes[0]); i++) {
		fprintf(f, "%s", i ? "," : "");
		json_string(f, excludes[i]);
	}
	fprintf(f, "]");
}

void sim_report_json(FILE *f, const struct sim_run *r, const struct sim_cfg *c)
{
	fprintf(f, "{");
	sim_report_json_fleet(f, r, c);
	fprintf(f, ",\"mounts\":[");
	for (unsigned i = 0; i < r->nmounts; i++) {
		fprintf(f, "%s{\"name\":", i ? "," : "");
		json_string(f, r->names[i]);
		fprintf(f, ",");
		json_result(f, &r->mount[i], c);
		fprintf(f, "}");
	}
	fprintf(f, "]}\n");
}

/* ---- a sweep's row -------------------------------------------------------------------------- */

void sim_report_row(FILE *f, const char *label, const struct sim_run *r, const struct sim_cfg *c,
		    bool header)
{
	const struct sim_result *x = &r->fleet;
	char h[16], l[16], s[16];

	if (header)
		fprintf(f, "%-14s %7s %7s %7s %12s %10s %10s %10s %10s %9s\n", "value", "hot",
			"lagging", "shared", "store GETs", "store GiB", "$/day", "redis MiB",
			"throttle s", "p99 ms");
	fprintf(f, "%-14s %7s %7s %7s %12" PRIu64 " %10.2f %10.2f %10.1f %10.1f %9.2f%s\n", label,
		ratio_text(tier_ratio(&x->cache.tier[CACHE_HOT]), h, sizeof(h)),
		ratio_text(tier_ratio(&x->cache.tier[CACHE_LAG]), l, sizeof(l)),
		ratio_text(ratio(x->shared_hits, x->shared_misses), s, sizeof(s)), x->store_gets,
		(double)x->store_bytes / (MIB * 1024),
		(cost_gets(x, c) + cost_bytes(x, c)) * per_day(x), (double)x->redis_peak / MIB,
		(double)x->cache.tier[CACHE_LAG].throttled_ns / 1e9,
		ms(sim_lat_quantile(&x->lat, 0.99)), r->overloaded ? "  OVERLOADED" : "");
}
