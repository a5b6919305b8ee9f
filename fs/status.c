/*
 * status.c - `tierfs status [-w] [-n SECS] [-C NAME] MOUNTPOINT`: one screen about a running
 * mount, for a person at a terminal.
 *
 *   MOUNTPOINT/.tierfs/stats ──read──► sample a ──(SECS later)──► sample b
 *                                         │                          │
 *                                         └──── rows[] ◄─────────────┘   each row prints one
 *                                               line from b (levels) and b - a (rates)
 *
 *   tierfs status /mnt/segments
 *   tier      hit now  hit all    hits/s  served/s fetched/s  resident/size     p99
 *   hot        99.0%    97.1%      1234    123.4M      1.2M     812M/1.0G    0.1ms
 *   ...
 *
 * The tiers are data: the memory rings by the cache's names (cache_tier_name), the chain's
 * tiers by the tier="NAME" labels the stats show, each drawn from its type's tier_ops.status
 * (a row in the table, a line of its own) as the program knows them (fs_tier_types).
 *
 * The stats file is the whole interface: Prometheus text, parsed here into (name, tier or op
 * label, le bound, value) series, so this is a client like any other and needs no access but
 * read permission. Rates come from two samples SECS apart; quantiles from the difference of
 * two histograms, as Prometheus's histogram_quantile does (linear within the bucket).
 * With -w the screen is redrawn every SECS in place (cursor home, clear) until q, Ctrl-C or
 * SIGTERM; the terminal is put in non-canonical mode for the q and put back on the way out.
 *
 * Locking: none; one thread. Workload: a read of a few hundred lines per refresh.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "tiertypes.h"

#define STATUS_USAGE "usage: tierfs status [-w] [-n SECS] [-C NAME] MOUNTPOINT"

/* One series of the stats file. The command is one thread: no lock anywhere here. */
struct series {
	char name[80]; /* "tierfs_cache_hits_total", "tierfs_read_seconds_bucket" */
	char key[24];  /* its tier= or op= label's value, "" without */
	double le;     /* a bucket's bound (INFINITY for +Inf), NAN for none */
	double v;
};

/* A reading of the whole file. */
struct sample {
	struct series *s;
	size_t n, cap;
	double t; /* CLOCK_MONOTONIC seconds, when it was read */
};

/* ---- reading ----------------------------------------------------------------------------------
 */

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The value of label @lab in "{a="x",le="y"}" at @l (up to @end), into @buf. */
static bool label(const char *l, const char *end, const char *lab, char *buf, size_t len)
{
	size_t n = strlen(lab);

	for (const char *p = l; p && p < end; p = strchr(p + 1, ',')) {
		const char *q = p + 1, *close;

		if (strncmp(q, lab, n) || q[n] != '=' || q[n + 1] != '"')
			continue;
		close = strchr(q + n + 2, '"');
		if (!close || close > end)
			return false;
		snprintf(buf, len, "%.*s", (int)(close - q - n - 2), q + n + 2);
		return true;
	}
	return false;
}

/* One sample line into @se. @return false for a comment or a line it cannot read. */
static bool parse_line(const char *line, struct series *se)
{
	size_t n = strcspn(line, "{ ");
	const char *v = line + n, *close = NULL;
	char le[32], *end;

	if (line[0] == '#' || !n || n >= sizeof(se->name))
		return false;
	memset(se, 0, sizeof(*se));
	memcpy(se->name, line, n);
	se->le = NAN;
	if (*v == '{') {
		close = strchr(v, '}');
		if (!close)
			return false;
		if (!label(v, close, "tier", se->key, sizeof(se->key)))
			label(v, close, "op", se->key, sizeof(se->key));
		if (label(v, close, "le", le, sizeof(le)))
			se->le = strcmp(le, "+Inf") ? strtod(le, NULL) : INFINITY;
		v = close + 1;
	}
	se->v = strtod(v, &end);
	return end != v;
}

static int sample_add(struct sample *sm, const struct series *se)
{
	if (sm->n == sm->cap) {
		size_t cap = sm->cap ? 2 * sm->cap : 512;
		struct series *s = realloc(sm->s, cap * sizeof(*s));

		if (!s)
			return -ENOMEM;
		sm->s = s;
		sm->cap = cap;
	}
	sm->s[sm->n++] = *se;
	return 0;
}

/* Read the stats text from @f into *sm (emptied first). @return 0 or -errno. */
static int sample_file(FILE *f, struct sample *sm)
{
	char line[1024];
	struct series se;
	int r = 0;

	sm->n = 0;
	sm->t = mono_s();
	while (r == 0 && fgets(line, sizeof(line), f))
		if (parse_line(line, &se))
			r = sample_add(sm, &se);
	if (r == 0 && ferror(f))
		r = -EIO;
	return r;
}

/* Read @path into *sm (emptied first). @return 0 or -errno. */
static int sample_read(const char *path, struct sample *sm)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f)
		return -errno;
	r = sample_file(f, sm);
	fclose(f);
	return r;
}

/* Read the stats text @text into *sm, as read at @t seconds. @return 0 or -errno. */
static int sample_text(const char *text, double t, struct sample *sm)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int r;

	if (!f)
		return -errno;
	r = sample_file(f, sm);
	sm->t = t;
	fclose(f);
	return r;
}

/* ---- values -----------------------------------------------------------------------------------
 */

/* The value of tierfs_@name with label value @key ("" for none), NAN if the mount has none. */
static double get(const struct sample *sm, const char *name, const char *key)
{
	for (size_t i = 0; i < sm->n; i++)
		if (!strncmp(sm->s[i].name, "tierfs_", 7) && !strcmp(sm->s[i].name + 7, name) &&
		    !strcmp(sm->s[i].key, key) && isnan(sm->s[i].le))
			return sm->s[i].v;
	return NAN;
}

/* Per second, between the samples. */
static double rate(const struct sample *a, const struct sample *b, const char *name,
		   const char *key)
{
	double dt = b->t - a->t;

	return dt > 0 ? (get(b, name, key) - get(a, name, key)) / dt : NAN;
}

/* A row of the tiers' table: a tier's name and the families that count its hits and misses. */
struct tier_row {
	const char *tier, *hits, *misses, *served, *joins; /* served, joins: NULL for none */
};

/* The memory tiers' rows (the cache's own families, one per ring). */
static struct tier_row memory_row(enum cache_tier t)
{
	return (struct tier_row){cache_tier_name(t), "cache_hits_total", "cache_misses_total",
				 "cache_served_bytes_total", "cache_singleflight_joins_total"};
}

/* What the screen knows of the mount's tiers: the tier types it can render (their
 * tier_ops.status), and the chain's tiers found in the stats (every chain tier has a
 * read_seconds series). The command is one thread: no lock. */
struct screen {
	const struct tier_ops *const *types;
	size_t ntypes;
	const char *chain[TIER_CHAIN_MAX]; /* names, pointing into sample b */
	unsigned nchain;
};

/* The status of tier type @name, or NULL (a tier the screen does not know). */
static const struct tier_status *status_of(const struct screen *sc, const char *name)
{
	for (size_t i = 0; i < sc->ntypes; i++)
		if (!strcmp(sc->types[i]->name, name))
			return sc->types[i]->status;
	return NULL;
}

static bool is_memory(const char *name)
{
	for (int t = 0; t < CACHE_NTIERS; t++)
		if (!strcmp(cache_tier_name((enum cache_tier)t), name))
			return true;
	return false;
}

/* The chain's tiers in @b, in the order the stats show them. */
static void find_chain(struct screen *sc, const struct sample *b)
{
	sc->nchain = 0;
	for (size_t i = 0; i < b->n && sc->nchain < TIER_CHAIN_MAX; i++) {
		const struct series *se = &b->s[i];
		bool seen = false;

		if (strcmp(se->name, "tierfs_read_seconds_count") || is_memory(se->key))
			continue;
		for (unsigned j = 0; j < sc->nchain; j++)
			seen = seen || !strcmp(sc->chain[j], se->key);
		if (!seen)
			sc->chain[sc->nchain++] = se->key;
	}
}

/* The hit ratio of tier @t between the samples (@a NULL: since the mount): (hits + joins) /
 * (hits + joins + misses). A read that joins a fetch under way (readahead's, another
 * reader's) started no fetch of its own: a hit, whether the fetch had ended when it came or
 * not; tierfs-sim counts the same (docs/sizing.md). */
static double hit_ratio(const struct sample *a, const struct sample *b, const struct tier_row *t)
{
	double h = get(b, t->hits, t->tier), m = get(b, t->misses, t->tier);
	double j = t->joins ? get(b, t->joins, t->tier) : 0;

	if (a) {
		h -= get(a, t->hits, t->tier);
		m -= get(a, t->misses, t->tier);
		j -= t->joins ? get(a, t->joins, t->tier) : 0;
	}
	if (!isnan(j))
		h += j;
	return h + m > 0 ? h / (h + m) : NAN;
}

/* The @q quantile of histogram tierfs_@name{@key} between the samples: the bucket where the
 * cumulative count crosses q x total, linear within it (Prometheus's histogram_quantile). */
static double quantile(const struct sample *a, const struct sample *b, const char *name,
		       const char *key, double q)
{
	char bucket[96];
	double total = NAN, prev_le = 0, prev_c = 0;

	snprintf(bucket, sizeof(bucket), "tierfs_%s_bucket", name);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < b->n; i++) {
			const struct series *s = &b->s[i];
			double c = s->v;

			if (strcmp(s->name, bucket) || strcmp(s->key, key) || isnan(s->le))
				continue;
			for (size_t j = 0; j < a->n; j++)
				if (!strcmp(a->s[j].name, bucket) && !strcmp(a->s[j].key, key) &&
				    a->s[j].le == s->le)
					c -= a->s[j].v;
			if (pass == 0 && isinf(s->le))
				total = c;
			if (pass == 1 && c >= q * total)
				return isinf(s->le)
					   ? prev_le
					   : prev_le + (s->le - prev_le) * (q * total - prev_c) /
							   (c - prev_c > 0 ? c - prev_c : 1);
			if (pass == 1) {
				prev_le = s->le;
				prev_c = c;
			}
		}
		if (pass == 0 && !(total > 0))
			return NAN;
	}
	return NAN;
}

/* ---- the screen --------------------------------------------------------------------------------
 */

/* 1536 -> "1.5K" in @buf (@v NAN: "-"). */
static const char *human(double v, char *buf, size_t len)
{
	static const char units[] = " KMGT";
	int u = 0;

	if (isnan(v))
		return "-";
	while (fabs(v) >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f%c" : "%.0f", v, units[u]);
	return buf;
}

static const char *percent(double v, char *buf, size_t len)
{
	if (isnan(v))
		return "-";
	snprintf(buf, len, "%.1f%%", 100 * v);
	return buf;
}

static const char *seconds(double v, char *buf, size_t len)
{
	if (isnan(v))
		return "-";
	if (v < 0.001)
		snprintf(buf, len, "%.0fus", v * 1e6);
	else if (v < 0.01)
		snprintf(buf, len, "%.1fms", v * 1000);
	else if (v < 1)
		snprintf(buf, len, "%.0fms", v * 1000);
	else
		snprintf(buf, len, "%.2fs", v);
	return buf;
}

/* One line of the tiers' table, if the mount has tier @t. */
static void print_tier(FILE *out, const struct sample *a, const struct sample *b,
		       const struct tier_row *t)
{
	char h1[16], h2[16], s[16], f[16], r[16], z[16], p[16], rs[40];

	if (isnan(get(b, t->hits, t->tier)))
		return; /* the mount has no such tier */
	snprintf(rs, sizeof(rs), "%s/%s", human(get(b, "cache_resident_bytes", t->tier), r, 16),
		 human(get(b, "cache_size_bytes", t->tier), z, 16));
	fprintf(out, "%-8s %7s %7s %8.1f %9s %9s %15s %8s\n", t->tier,
		percent(hit_ratio(a, b, t), h1, 16), percent(hit_ratio(NULL, b, t), h2, 16),
		rate(a, b, t->hits, t->tier),
		t->served ? human(rate(a, b, t->served, t->tier), s, 16) : "-",
		human(rate(a, b, "cache_fetched_bytes_total", t->tier), f, 16),
		strcmp(rs, "-/-") ? rs : "-",
		seconds(quantile(a, b, "read_seconds", t->tier, 0.99), p, 16));
}

/* One line per tier the mount has: the memory tiers, then the chain's that have a row. */
static void print_tiers(FILE *out, const struct screen *sc, const struct sample *a,
			const struct sample *b)
{
	fprintf(out, "%-8s %7s %7s %8s %9s %9s %15s %8s\n", "tier", "hit now", "hit all", "hits/s",
		"served/s", "fetched/s", "resident/size", "p99 read");
	for (int i = 0; i < CACHE_NTIERS; i++) {
		struct tier_row t = memory_row((enum cache_tier)i);

		print_tier(out, a, b, &t);
	}
	for (unsigned i = 0; i < sc->nchain; i++) {
		const struct tier_status *st = status_of(sc, sc->chain[i]);
		struct tier_row t;

		if (!st || !st->hits || !st->misses)
			continue;
		t = (struct tier_row){sc->chain[i], st->hits, st->misses, st->served, NULL};
		print_tier(out, a, b, &t);
	}
}

static void print_reads(FILE *out, const struct sample *a, const struct sample *b)
{
	char s[16];

	fprintf(out,
		"reads    %.1f/s  %sB/s  errors %.1f/s   (%.0f reads, %.0f errors since mount)\n",
		rate(a, b, "reads_total", ""), human(rate(a, b, "read_bytes_total", ""), s, 16),
		rate(a, b, "read_errors_total", ""), get(b, "reads_total", ""),
		get(b, "read_errors_total", ""));
}

/* A line for each memory tier with a rate limiter. */
static void print_limiter(FILE *out, const struct sample *a, const struct sample *b)
{
	char r[16], t[16];

	for (int i = 0; i < CACHE_NTIERS; i++) {
		const char *tier = cache_tier_name((enum cache_tier)i);

		if (isnan(get(b, "limiter_rate_bytes", tier)))
			continue;
		fprintf(out,
			"limiter  rate %sB/s  tokens %s  throttled %.2f s/s  waits %.1f/s  queued "
			"%.0f\n",
			human(get(b, "limiter_rate_bytes", tier), r, 16),
			human(get(b, "limiter_tokens", tier), t, 16),
			rate(a, b, "throttled_seconds_total", tier),
			rate(a, b, "throttle_waits_total", tier),
			get(b, "throttle_queued_fetches", tier));
	}
}

static void print_store(FILE *out, const struct sample *a, const struct sample *b)
{
	char g[16], h[16], l[16], r[16], by[16];

	fprintf(out, "store    %.1f req/s  %sB/s  errors %.1f/s  retries %.1f/s  slowdowns %.0f\n",
		rate(a, b, "backend_requests_total", ""),
		human(rate(a, b, "backend_received_bytes_total", ""), by, 16),
		rate(a, b, "backend_errors_total", ""), rate(a, b, "backend_retries_total", ""),
		get(b, "backend_slowdowns_total", ""));
	fprintf(out,
		"         active %.0f  queued %.0f  window %.0f   p99 read %s get %s head %s "
		"list %s\n",
		get(b, "backend_active_requests", ""), get(b, "backend_queued_requests", ""),
		get(b, "backend_request_window", ""),
		seconds(quantile(a, b, "read_seconds", "store", 0.99), r, 16),
		seconds(quantile(a, b, "backend_request_seconds", "get", 0.99), g, 16),
		seconds(quantile(a, b, "backend_request_seconds", "head", 0.99), h, 16),
		seconds(quantile(a, b, "backend_request_seconds", "list", 0.99), l, 16));
}

/* One field of a tier's line, with the space before it. */
static void print_field(FILE *out, const struct sample *a, const struct sample *b,
			const char *tier, const struct tier_status_field *f)
{
	double v = get(b, f->metric, tier);

	fprintf(out, "  %s%s", f->label, f->label[0] ? " " : "");
	switch (f->kind) {
	case TIER_ST_RATE:
		fprintf(out, "%.1f/s", rate(a, b, f->metric, tier));
		break;
	case TIER_ST_FLAG:
		fputs(isnan(v) ? "-" : v > 0 ? f->on : f->off, out);
		break;
	default:
		fprintf(out, "%.0f", v);
		break;
	}
}

/* The line of each chain tier that has one (tier_status.line), if the mount shows its first
 * field. */
static void print_lower(FILE *out, const struct screen *sc, const struct sample *a,
			const struct sample *b)
{
	for (unsigned i = 0; i < sc->nchain; i++) {
		const struct tier_status *st = status_of(sc, sc->chain[i]);

		if (!st || !st->line[0].metric || isnan(get(b, st->line[0].metric, sc->chain[i])))
			continue;
		fprintf(out, "%-7s", sc->chain[i]);
		for (int j = 0; j < TIER_STATUS_FIELDS && st->line[j].metric; j++)
			print_field(out, a, b, sc->chain[i], &st->line[j]);
		fputc('\n', out);
	}
}

static void print_screen(FILE *out, const struct screen *sc, const char *mnt,
			 const struct sample *a, const struct sample *b)
{
	char when[32], bb[16], bl[16];
	time_t now = time(NULL);

	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&now));
	fprintf(out, "tierfs status %s   %s   rates over %.1f s\n\n", mnt, when, b->t - a->t);
	print_tiers(out, sc, a, b);
	fputc('\n', out);
	print_reads(out, a, b);
	print_limiter(out, a, b);
	print_store(out, a, b);
	print_lower(out, sc, a, b);
	fprintf(out, "memory   bounce %s of %s   log lines held back %.0f\n",
		human(get(b, "cache_bounce_bytes", ""), bb, 16),
		human(get(b, "cache_bounce_limit_bytes", ""), bl, 16),
		get(b, "log_suppressed_total", ""));
}

/* The screen from two samples, with the tier types the mount's program knows. */
static void render(FILE *out, const char *mnt, const struct sample *a, const struct sample *b)
{
	const struct tier_ops *types[TIER_CHAIN_MAX];
	struct screen sc = {.types = types};

	while (sc.ntypes < TIER_CHAIN_MAX && (types[sc.ntypes] = fs_tier_type(sc.ntypes)))
		sc.ntypes++;
	find_chain(&sc, b);
	print_screen(out, &sc, mnt, a, b);
}

int fs_status_print(FILE *out, const char *mnt, const char *text_a, const char *text_b,
		    double secs, const struct tier_ops *const *types, size_t ntypes)
{
	struct sample a = {0}, b = {0};
	struct screen sc = {.types = types, .ntypes = ntypes};
	int r = sample_text(text_a, 0, &a);

	if (r == 0)
		r = sample_text(text_b, secs, &b);
	if (r == 0) {
		find_chain(&sc, &b);
		print_screen(out, &sc, mnt, &a, &b);
	}
	free(a.s);
	free(b.s);
	return r;
}

/* ---- the command --------------------------------------------------------------------------------
 */

struct status_opts {
	bool watch;
	double interval; /* seconds between the samples */
	const char *ctl; /* the control directory's name */
	const char *mnt;
};

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
	stop_asked = 1;
}

/* Parse argv (after "status"). @return 0, 1 (help printed) or -EINVAL (message printed). */
static int status_args(int argc, char **argv, struct status_opts *o)
{
	*o = (struct status_opts){.interval = 1.0, .ctl = ".tierfs"};
	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "-w")) {
			o->watch = true;
		} else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
			o->interval = strtod(argv[++i], &end);
			if (*end || !(o->interval >= 0.1 && o->interval <= 3600))
				goto bad;
		} else if (!strcmp(argv[i], "-C") && i + 1 < argc) {
			o->ctl = argv[++i];
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf(
			    "%s\n  -w       refresh in place until q or Ctrl-C\n  -n SECS  seconds"
			    " between samples (default 1, 0.1..3600)\n  -C NAME  the control "
			    "directory (control_dir=, default .tierfs)\n",
			    STATUS_USAGE);
			return 1;
		} else if (argv[i][0] != '-' && !o->mnt) {
			o->mnt = argv[i];
		} else {
			goto bad;
		}
	}
	if (o->mnt)
		return 0;
bad:
	fprintf(stderr, "%s\n", STATUS_USAGE);
	return -EINVAL;
}

/* Wait @secs for a key; @return true if q (or Ctrl-C, SIGTERM, end of input) ends it. */
static bool wait_key(double secs, bool *tty_in)
{
	struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
	double until = mono_s() + secs;
	char c;

	while (!stop_asked && mono_s() < until) {
		int ms = (int)((until - mono_s()) * 1000) + 1;

		if (!*tty_in) {
			poll(NULL, 0, ms);
			continue;
		}
		if (poll(&p, 1, ms) > 0) {
			ssize_t n = read(STDIN_FILENO, &c, 1);

			if (n == 1 && (c == 'q' || c == 'Q' || c == 3))
				return true;
			if (n == 0)
				*tty_in = false; /* no more input: keep refreshing */
		}
	}
	return stop_asked;
}

/* -w: redraw every interval until asked to stop. @return the exit status. */
static int watch(const struct status_opts *o, const char *path, struct sample *a, struct sample *b)
{
	struct termios saved, raw;
	bool tty = tcgetattr(STDIN_FILENO, &saved) == 0;
	int r = 0;

	if (tty) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		tcsetattr(STDIN_FILENO, TCSANOW, &raw);
	}
	while (!wait_key(o->interval, &tty)) {
		struct sample t;

		if ((r = sample_read(path, b)) < 0)
			break;
		fputs("\033[H\033[2J", stdout);
		render(stdout, o->mnt, a, b);
		fputs("\n(q to quit)", stdout);
		fflush(stdout);
		t = *a;
		*a = *b;
		*b = t;
	}
	if (tty)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	fputc('\n', stdout);
	if (r < 0)
		fprintf(stderr, "tierfs status: %s: %s\n", path, strerror(-r));
	return r < 0 ? 1 : 0;
}

int fs_status_main(int argc, char **argv)
{
	struct status_opts o;
	struct sample a = {0}, b = {0};
	char path[4096];
	int r = status_args(argc, argv, &o);

	if (r)
		return r > 0 ? 0 : 2;
	snprintf(path, sizeof(path), "%s/%s/stats", o.mnt, o.ctl);
	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	r = sample_read(path, &a);
	if (r < 0) {
		fprintf(stderr, "tierfs status: %s: %s%s\n", path, strerror(-r),
			r == -ENOENT	 ? " (is a tierfs mounted there?)"
			: r == -ENOTCONN ? " (a dead mount: fusermount3 -u it)"
					 : "");
		return 1;
	}
	if (o.watch) {
		r = watch(&o, path, &a, &b);
	} else {
		poll(NULL, 0, (int)(o.interval * 1000));
		r = sample_read(path, &b);
		if (r == 0)
			render(stdout, o.mnt, &a, &b);
		else
			fprintf(stderr, "tierfs status: %s: %s\n", path, strerror(-r));
		r = r < 0 ? 1 : 0;
	}
	free(a.s);
	free(b.s);
	return r;
}
