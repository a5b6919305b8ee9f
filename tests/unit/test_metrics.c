/*
 * test_metrics.c - unit tests for fs/metrics.c: the table's rows (valid, unique Prometheus
 * names, counters ending in _total, a help line each), the writer's text (every row's family
 * with its # HELP and # TYPE, every sample line well formed and under its own family), known
 * values printed as they should be (seconds from nanoseconds, negative tokens, a cumulative
 * histogram), a tier of the chain's own rows (a test tier: its families after the table, its
 * series inside the families it shares), its lines in `tierfs status` and its residency
 * listing (the proof that a tier needs no line of fs/ to be shown), the families and
 * series a mount without that tier leaves out, and a sink's error stopping the writer.
 *
 * No mount: the snapshots are filled by hand, as fs_metrics_snap would from the modules.
 */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "disk.h"
#include "fleet.h"
#include "metrics.h"
#include "trace.h"
#include "tiertypes.h"

/* A growing string: the test's sink. */
struct buf {
	char *s;
	size_t len, cap;
	int fail_at; /* > 0: the fail_at'th write returns -EPIPE */
	int writes;
};

static int buf_write(void *arg, const char *s, size_t n)
{
	struct buf *b = arg;

	if (b->fail_at && ++b->writes == b->fail_at)
		return -EPIPE;
	if (b->len + n + 1 > b->cap) {
		b->cap = 2 * (b->len + n + 1);
		b->s = realloc(b->s, b->cap);
		assert_non_null(b->s);
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
	return 0;
}

/* The text of @s. The caller frees it. */
static char *text_of(const struct fs_metrics_snap *s)
{
	struct buf b = {0};
	struct fs_metrics_sink k = {.write = buf_write, .arg = &b};

	assert_int_equal(fs_metrics_write(s, &k), 0);
	assert_non_null(b.s);
	return b.s;
}

/* Every place on, every tier limited, and a value in every field: no family may be missing. */
static void full_snap(struct fs_metrics_snap *s)
{
	memset(s, 0, sizeof(*s));
	s->nchain = 1;
	s->chain[0].name = "store";
	for (int t = 0; t < CACHE_NTIERS; t++) {
		s->cache.tier[t].limited = true;
		s->cache.tier[t].rate = 1;
	}
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

static void assert_line(const char *text, const char *line)
{
	if (!has_line(text, line))
		fail_msg("no line '%s' in:\n%s", line, text);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]*, Prometheus's metric name rule. */
static bool valid_name(const char *s)
{
	if (!*s || isdigit((unsigned char)*s))
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != ':')
			return false;
	return true;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);

	return n >= m && !strcmp(s + n - m, tail);
}

static void test_names(void **state)
{
	(void)state;
	assert_true(fs_metrics_n > 50);
	for (size_t i = 0; i < fs_metrics_n; i++) {
		const struct fs_metric *r = &fs_metrics[i];

		assert_true(valid_name(r->name));
		assert_true(!strncmp(r->name, "tierfs_", 7));
		/* a counter's name ends in _total, and nothing else's does (no exception today) */
		if (ends_with(r->name, "_total") != (r->type == FS_METRIC_COUNTER))
			fail_msg("%s: a %s", r->name, fs_metric_type_name(r->type));
		/* a histogram's own series take these suffixes */
		assert_false(ends_with(r->name, "_bucket") || ends_with(r->name, "_sum") ||
			     ends_with(r->name, "_count"));
		/* HELP is one line, and Prometheus would read a backslash as an escape */
		assert_true(r->help[0] && !strchr(r->help, '\n') && !strchr(r->help, '\\'));
		assert_non_null(r->get);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(r->name, fs_metrics[j].name))
				fail_msg("%s twice in the table", r->name);
	}
}

/* The family name a sample line's metric belongs to: a histogram's _bucket, _sum and _count
 * belong to the histogram. */
static bool of_family(const char *metric, size_t n, const struct fs_metric *fam)
{
	size_t f = strlen(fam->name);
	static const char *const sfx[] = {"_bucket", "_sum", "_count"};

	if (n == f && !strncmp(metric, fam->name, n))
		return true;
	if (fam->type != FS_METRIC_HISTOGRAM || n < f || strncmp(metric, fam->name, f))
		return false;
	for (size_t i = 0; i < 3; i++)
		if (n - f == strlen(sfx[i]) && !strncmp(metric + f, sfx[i], n - f))
			return true;
	return false;
}

static const struct fs_metric *row_named(const char *name, size_t n)
{
	for (size_t i = 0; i < fs_metrics_n; i++)
		if (strlen(fs_metrics[i].name) == n && !strncmp(fs_metrics[i].name, name, n))
			return &fs_metrics[i];
	return NULL;
}

/* One sample line: NAME[{tier="T"|op="O"[,le="B"]}] VALUE, under the family declared last. */
static void check_sample(const char *line, const struct fs_metric *fam)
{
	size_t n = strcspn(line, "{ ");
	const char *rest = line + n, *v;
	char *end;

	if (!fam || !of_family(line, n, fam))
		fail_msg("sample outside its family: %s", line);
	if (*rest == '{') {
		const char *close = strchr(rest, '}');

		assert_non_null(close);
		if (strncmp(rest, "{tier=\"", 7) && strncmp(rest, "{le=\"", 5) &&
		    strncmp(rest, "{op=\"", 5))
			fail_msg("labels: %s", line);
		rest = close + 1;
	}
	assert_int_equal(*rest, ' ');
	v = rest + 1;
	if (strcmp(v, "+Inf") && strcmp(v, "-Inf")) {
		(void)strtod(v, &end);
		if (end == v || *end)
			fail_msg("value: %s", line);
	}
}

/* Every row is in the text, with HELP then TYPE, and every line is a comment of a family or a
 * sample of the family declared last; no family is declared twice. */
static void test_every_row_exported(void **state)
{
	struct fs_metrics_snap s;
	const struct fs_metric *fam = NULL;
	char *text, *line, *save = NULL, want[512];

	(void)state;
	full_snap(&s);
	text = text_of(&s);
	for (size_t i = 0; i < fs_metrics_n; i++) {
		const struct fs_metric *r = &fs_metrics[i];

		snprintf(want, sizeof(want), "# HELP %s %s\n# TYPE %s %s\n", r->name, r->help,
			 r->name, fs_metric_type_name(r->type));
		if (!strstr(text, want))
			fail_msg("no HELP and TYPE for %s", r->name);
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "# HELP ", 7)) {
			const char *name = line + 7;
			const struct fs_metric *r = row_named(name, strcspn(name, " "));

			assert_non_null(r);
			assert_true(r != fam && (!fam || r > fam)); /* once, in table order */
			fam = r;
		} else if (!strncmp(line, "# TYPE ", 7)) {
			assert_non_null(fam);
			assert_true(!strncmp(line + 7, fam->name, strlen(fam->name)));
		} else {
			check_sample(line, fam);
		}
	}
	free(text);
}

/* A tier of the chain as a test writes one: a few rows, one of a family the memory tiers
 * share, two of its own, a histogram. */
static const uint64_t test_bounds_us[2] = {1000, 10000};

static void test_tier_metrics(void *self, void (*fn)(void *arg, const struct tier_metric *m),
			      void *arg)
{
	const uint64_t *n = self;
	uint64_t counts[3] = {2, 3, 1};
	const struct tier_metric rows[] = {
	    {"cache_hits_total", TIER_COUNTER, "Block lookups answered by the tier.", n[0], 0,
	     NULL, NULL, 0},
	    {"cache_misses_total", TIER_COUNTER, "Blocks a reader wanted that were fetched into "
	     "the tier.", 0, 0, NULL, NULL, 0},
	    {"testtier_widgets_total", TIER_COUNTER, "Widgets the test tier made.", n[1], 0, NULL,
	     NULL, 0},
	    {"testtier_ready", TIER_GAUGE, "1 while the test tier is ready.", 1, 0, NULL, NULL, 0},
	    {"testtier_get_seconds", TIER_HISTOGRAM, "Test tier gets.", 0, 3, counts,
	     test_bounds_us, 2500},
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fn(arg, &rows[i]);
}

static const struct tier_status test_tier_lines = {
    .hits = "cache_hits_total",
    .misses = "cache_misses_total",
    .line = {{"widgets", "testtier_widgets_total", TIER_ST_RATE, NULL, NULL},
	     {"", "testtier_ready", TIER_ST_FLAG, "ready", "NOT READY"}},
};

/* It holds blocks 5, 0, 1 and 2 of every object (listed in no order). */
static void test_tier_each(void *self, struct cache_oid oid, void (*fn)(void *arg, uint64_t blk),
			   void *arg)
{
	static const uint64_t blks[] = {5, 0, 1, 2};

	(void)self;
	(void)oid;
	for (size_t i = 0; i < sizeof(blks) / sizeof(blks[0]); i++)
		fn(arg, blks[i]);
}

static const struct tier_ops test_tier_ops = {
    .name = "testtier",
    .each = test_tier_each,
    .metrics = test_tier_metrics,
    .status = &test_tier_lines,
};

/* A snapshot with the test tier above the store, its counters @n. */
static void test_tier_snap(struct fs_metrics_snap *s, uint64_t *n)
{
	struct tier tr = {.ops = &test_tier_ops, .self = n};

	memset(s, 0, sizeof(*s));
	fs_metrics_snap_tier(&tr, &s->chain[0]);
	s->chain[1].name = "store";
	s->nchain = 2;
}

static void test_known_values(void **state)
{
	struct fs_metrics_snap s;
	uint64_t n[2] = {13, 0};
	char *text;

	(void)state;
	test_tier_snap(&s, n);
	s.cache.tier[CACHE_HOT].hits = 11;
	s.cache.tier[CACHE_LAG].hits = 12;
	s.cache.tier[CACHE_LAG].throttled_ns = 1500000000;
	s.cache.tier[CACHE_HOT].limited = false;
	s.cache.tier[CACHE_LAG].limited = true;
	s.cache.tier[CACHE_LAG].rate = 10485760;
	s.cache.tier[CACHE_LAG].tokens = -4096.0;
	s.cache.bounce_peak = 77;
	s.backend.window = 16;
	s.mount.read_bytes = UINT64_MAX;
	s.mount.read_lat[CACHE_HOT].counts[0] = 7; /* within 25 us */
	s.mount.read_lat[CACHE_NTIERS + 1].counts[5] = 2; /* the store: over 500 us, within 1 ms */
	s.mount.read_lat[CACHE_NTIERS + 1].counts[BK_HIST_BUCKETS - 1] = 1;
	s.mount.read_lat[CACHE_NTIERS + 1].sum_us = 31001800;
	s.backend.lat[BK_OP_HEAD].counts[3] = 4;
	s.backend.lat[BK_OP_HEAD].sum_us = 800;
	s.mount.memory_bound = 1207959552;
	text = text_of(&s);

	assert_line(text, "tierfs_cache_hits_total{tier=\"hot\"} 11");
	assert_line(text, "tierfs_cache_hits_total{tier=\"lagging\"} 12");
	assert_line(text, "tierfs_cache_hits_total{tier=\"testtier\"} 13");
	assert_line(text, "tierfs_throttled_seconds_total{tier=\"lagging\"} 1.500000");
	assert_line(text, "tierfs_throttled_seconds_total{tier=\"hot\"} 0.000000");
	assert_line(text, "tierfs_limiter_tokens{tier=\"lagging\"} -4096");
	assert_line(text, "tierfs_limiter_rate_bytes{tier=\"lagging\"} 10485760");
	assert_null(strstr(text, "tierfs_limiter_rate_bytes{tier=\"hot\"}")); /* no limiter */
	assert_line(text, "tierfs_cache_bounce_peak_bytes 77");
	assert_line(text, "tierfs_read_bytes_total 18446744073709551615");
	assert_line(text, "tierfs_read_seconds_bucket{tier=\"hot\",le=\"2.5e-05\"} 7");
	assert_line(text, "tierfs_read_seconds_count{tier=\"store\"} 3");
	assert_line(text, "tierfs_read_seconds_sum{tier=\"store\"} 31.001800");
	assert_line(text, "tierfs_read_seconds_count{tier=\"testtier\"} 0");
	assert_line(text, "tierfs_backend_request_seconds_count{op=\"head\"} 4");
	assert_line(text, "tierfs_memory_bound_bytes 1207959552");
	free(text);
}

/* The test tier's own families follow the table, each once with its HELP and TYPE, its
 * series labelled with its name; the family it shares with the memory tiers has its series
 * under the table's family. A histogram's buckets are cumulative. */
static void test_tier_families(void **state)
{
	struct fs_metrics_snap s;
	uint64_t n[2] = {13, 5};
	char *text, *p;

	(void)state;
	test_tier_snap(&s, n);
	text = text_of(&s);
	assert_line(text, "# HELP tierfs_testtier_widgets_total Widgets the test tier made.");
	assert_line(text, "# TYPE tierfs_testtier_widgets_total counter");
	assert_line(text, "tierfs_testtier_widgets_total{tier=\"testtier\"} 5");
	assert_line(text, "# TYPE tierfs_testtier_ready gauge");
	assert_line(text, "tierfs_testtier_ready{tier=\"testtier\"} 1");
	assert_line(text, "# TYPE tierfs_testtier_get_seconds histogram");
	assert_line(text, "tierfs_testtier_get_seconds_bucket{tier=\"testtier\",le=\"0.001\"} 2");
	assert_line(text, "tierfs_testtier_get_seconds_bucket{tier=\"testtier\",le=\"0.01\"} 5");
	assert_line(text, "tierfs_testtier_get_seconds_bucket{tier=\"testtier\",le=\"+Inf\"} 6");
	assert_line(text, "tierfs_testtier_get_seconds_sum{tier=\"testtier\"} 0.002500");
	/* one family of cache_hits_total, the tier's series inside it, before the next family */
	p = strstr(text, "# TYPE tierfs_cache_hits_total counter\n");
	assert_non_null(p);
	assert_null(strstr(p + 1, "# TYPE tierfs_cache_hits_total"));
	assert_true(strstr(p, "tierfs_cache_hits_total{tier=\"testtier\"} 13") <
		    strstr(p, "# HELP tierfs_cache_misses_total"));
	/* the tier's families once each */
	p = strstr(text, "# HELP tierfs_testtier_widgets_total");
	assert_null(strstr(p + 1, "# HELP tierfs_testtier_widgets_total"));
	free(text);
}

/* Without a tier in the chain its families are left out, and so are its series of the
 * families the memory tiers share; the limiter gauges keep their HELP without a sample. */
static void test_optional_tiers(void **state)
{
	struct fs_metrics_snap s;
	uint64_t n[2] = {0, 0};
	char *text;

	(void)state;
	memset(&s, 0, sizeof(s));
	s.nchain = 1;
	s.chain[0].name = "store";
	text = text_of(&s);
	assert_null(strstr(text, "tierfs_testtier_"));
	assert_null(strstr(text, "tier=\"testtier\""));
	assert_line(text, "tierfs_cache_hits_total{tier=\"hot\"} 0");
	assert_line(text, "tierfs_cache_hits_total{tier=\"lagging\"} 0");
	assert_line(text, "# TYPE tierfs_limiter_tokens gauge");
	assert_null(strstr(text, "tierfs_limiter_tokens{"));
	/* reads served by memory and the store, none by tiers the mount lacks */
	assert_line(text, "tierfs_read_seconds_count{tier=\"lagging\"} 0");
	assert_line(text, "tierfs_read_seconds_count{tier=\"store\"} 0");
	free(text);

	test_tier_snap(&s, n);
	text = text_of(&s);
	assert_line(text, "tierfs_cache_hits_total{tier=\"testtier\"} 0");
	assert_line(text, "tierfs_testtier_widgets_total{tier=\"testtier\"} 0");
	free(text);
}

/* `tierfs status` draws the test tier from its status data alone: a row in the tiers' table
 * and a line of its own, from two readings of the stats text. */
static void test_tier_status(void **state)
{
	const struct tier_ops *types[] = {&test_tier_ops};
	struct fs_metrics_snap s;
	uint64_t n[2] = {10, 0};
	char *a, *b, *out = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	test_tier_snap(&s, n);
	a = text_of(&s);
	n[0] = 30;
	n[1] = 40;
	test_tier_snap(&s, n);
	b = text_of(&s);
	f = open_memstream(&out, &len);
	assert_non_null(f);
	assert_int_equal(fs_status_print(f, "/mnt", a, b, 2.0, types, 1), 0);
	fclose(f);
	/* hits 10 -> 30 over 2 s: 10/s; no misses: 100% */
	if (!strstr(out, "\ntesttier  100.0%  100.0%     10.0 "))
		fail_msg("no row of the test tier in:\n%s", out);
	if (!strstr(out, "\ntesttier  widgets 20.0/s  ready\n"))
		fail_msg("no line of the test tier in:\n%s", out);
	free(out);
	/* a tier of no known type: neither a row nor a line */
	f = open_memstream(&out, &len);
	assert_int_equal(fs_status_print(f, "/mnt", a, b, 2.0, types, 0), 0);
	fclose(f);
	assert_null(strstr(out, "testtier"));
	free(out);
	free(a);
	free(b);
}

/* The residency listing (user.tierfs.cached, after the memory tiers) shows the test tier's
 * blocks as ranges under its name; a tier that lists nothing (the store) adds nothing. */
static void test_tier_residency(void **state)
{
	static const struct tier_ops store_ops = {.name = "store"};
	uint64_t n[2] = {0, 0};
	struct tier chain[] = {{.ops = &test_tier_ops, .self = n}, {.ops = &store_ops}};
	struct cache_oid oid = {0};
	char *text;

	(void)state;
	assert_int_equal(fs_tier_residency(chain, 2, oid, &text), 0);
	assert_string_equal(text, "testtier=0-2,5");
	free(text);
	assert_int_equal(fs_tier_residency(&chain[1], 1, oid, &text), 0);
	assert_string_equal(text, "");
	free(text);
}

/* The read trace records a read's tier by code, from the served tier's name (fs/trace.c:
 * trace_tier_code(cache_served.from)): every tier the mount may open has its code, or its
 * reads would be recorded as served by none. */
static void test_trace_codes(void **state)
{
	(void)state;
	assert_int_equal(trace_tier_code(disk_tier_ops.name), TRACE_DISK);
	assert_int_equal(trace_tier_code(fleet_tier_ops.name), TRACE_FLEET);
	assert_int_equal(trace_tier_code("store"), TRACE_STORE);
}

/* A sink's error ends the text there, and is the writer's answer. */
static void test_sink_error(void **state)
{
	struct fs_metrics_snap s;
	struct buf b = {.fail_at = 3};
	struct fs_metrics_sink k = {.write = buf_write, .arg = &b};

	(void)state;
	full_snap(&s);
	assert_int_equal(fs_metrics_write(&s, &k), -EPIPE);
	assert_int_equal(b.writes, 3);
	free(b.s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),	 cmocka_unit_test(test_every_row_exported),
	    cmocka_unit_test(test_known_values), cmocka_unit_test(test_tier_families),
	    cmocka_unit_test(test_optional_tiers), cmocka_unit_test(test_tier_status),
	    cmocka_unit_test(test_tier_residency), cmocka_unit_test(test_trace_codes),
	    cmocka_unit_test(test_sink_error),
	};

	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
