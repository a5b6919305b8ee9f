/*
 * main.c - tierfs-sim's command line.
 *
 *   tierfs-sim [--json] [--plot=PNG] [-o OPTS]... [--SIMOPT=V]... TRACE...    replay
 *   tierfs-sim --generate=PREFIX [--GENOPT=V]...                             a synthetic trace
 *
 * -o takes the mount's own options, parsed by the mount's own table (fs/opts.c, linked from
 * libtierfs_fs: fs_opts_parse with a placeholder store and mount point, so the cross checks
 * of hot_size against block_size and the like are the mount's too). One of them may be a
 * sweep, LO:HI:xF (LO, LO x F, ... up to HI) or LO:HI:+S: the fleet is replayed once per
 * value, one row each, and --plot draws the rows with gnuplot.
 *
 * The sim's own settings (the store's latency, bandwidth and prices, Redis's memory) and the
 * generator's are rows of sim_opts[] below: parsing, --help and the check of each value come
 * from the rows. Any mistake is one line on stderr and exit status 2.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "sim.h"

#define USAGE                                                                                      \
	"usage: tierfs-sim [--json] [--plot=PNG] [-o OPTIONS]... [--OPTION=VALUE]... TRACE...\n"   \
	"       tierfs-sim --generate=PREFIX [--OPTION=VALUE]..."
#define MAX_ROWS 64

enum sopt_kind {
	SO_SIZE,  /* bytes (or bytes/s): 4M, 1G */
	SO_TIME,  /* a duration: 30ms, 0.3ms, 2s, 5m, 1h, 1d; a bare number is seconds */
	SO_PRICE, /* dollars, a decimal number */
	SO_COUNT, /* a whole number */
	SO_FLAG,  /* no value */
};

enum sopt_for { FOR_SIM, FOR_GEN };

/* One --name=value. All fields are constant. */
struct sopt {
	const char *name;
	enum sopt_kind kind;
	enum sopt_for of;
	size_t off;	 /* in struct sim_cfg or struct sim_gen */
	size_t width;	 /* of the field: 8 (uint64_t, double) or 4 (unsigned), 1 (bool) */
	bool in_seconds; /* SO_TIME stored in seconds, not ns */
	const char *help;
};

#define SIM(f) FOR_SIM, offsetof(struct sim_cfg, f), sizeof(((struct sim_cfg *)0)->f)
#define GEN(f) FOR_GEN, offsetof(struct sim_gen, f), sizeof(((struct sim_gen *)0)->f)

/* clang-format off */
static const struct sopt sim_opts[] = {
	{"store-latency", SO_TIME, SIM(store_lat_ns), false, "a GET's first byte, median"},
	{"store-p99", SO_TIME, SIM(store_p99_ns), false, "... its 99th percentile"},
	{"store-bandwidth", SO_SIZE, SIM(store_bw), false, "bytes/s of one GET"},
	{"link", SO_SIZE, SIM(link_bw), false, "bytes/s into one mount"},
	{"get-price", SO_PRICE, SIM(get_price), false, "dollars per 1,000 GETs"},
	{"gb-price", SO_PRICE, SIM(gb_price), false, "dollars per GB the store sends"},
	{"redis-memory", SO_SIZE, SIM(redis_mem), false, "Redis maxmemory (LRU), with shared="},
	{"redis-latency", SO_TIME, SIM(redis_lat_ns), false, "a Redis round trip"},
	{"redis-bandwidth", SO_SIZE, SIM(redis_bw), false, "bytes/s of one Redis value"},
	{"disk-latency", SO_TIME, SIM(disk_lat_ns), false, "a disk tier read, with cache_dir="},
	{"disk-bandwidth", SO_SIZE, SIM(disk_bw), false, "bytes/s of one disk tier read"},
	{"max-queued", SO_COUNT, SIM(max_queued), false, "reads waiting in a mount: overload"},
	{"align-start", SO_FLAG, SIM(align_start), false, "start every trace at 0, not its clock"},
	{"seed", SO_COUNT, SIM(seed), false, "of the latency draws"},
	{"mounts", SO_COUNT, GEN(mounts), false, "brokers, a trace each"},
	{"partitions", SO_COUNT, GEN(partitions), false, "partitions per broker"},
	{"share", SO_COUNT, GEN(share), false, "brokers reading each partition"},
	{"segment", SO_SIZE, GEN(segment), false, "segment size"},
	{"roll", SO_TIME, GEN(roll_s), true, "a new segment per partition this often"},
	{"duration", SO_TIME, GEN(duration_s), true, "of the trace"},
	{"consumers", SO_COUNT, GEN(consumers), false, "per partition, at the tail"},
	{"tail-rate", SO_SIZE, GEN(tail_rate), false, "bytes/s of a tail reader (0: keeps pace)"},
	{"tail-lag", SO_TIME, GEN(tail_lag_s), true, "a tail reader starts a segment within"},
	{"replay-every", SO_TIME, GEN(replay_every_s), true, "a replay this often (0: never)"},
	{"replay-span", SO_TIME, GEN(replay_span_s), true, "... reading this far back"},
	{"replay-rate", SO_SIZE, GEN(replay_rate), false, "... at this many bytes/s"},
	{"fetch", SO_SIZE, GEN(fetch), false, "bytes of one read"},
	{"index-size", SO_SIZE, GEN(index_size), false, "bytes of a segment's index"},
	{"index-lookups", SO_COUNT, GEN(index_lookups), false, "index reads when a segment starts"},
	{"index-read", SO_SIZE, GEN(index_read), false, "bytes of one index read"},
	{"gen-seed", SO_COUNT, GEN(seed), false, "of the generator"},
};
/* clang-format on */

#define N_SIM_OPTS (sizeof(sim_opts) / sizeof(sim_opts[0]))

/* What the command line asked for. */
struct cli {
	struct sim_cfg cfg;
	struct sim_gen gen;
	char *mount_opts; /* every -o, joined with commas; malloc'd */
	bool json;
	const char *plot;     /* PNG to draw a sweep into */
	const char *generate; /* the prefix of the traces to write */
	char **traces;
	unsigned ntraces;
	bool help;
};

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tierfs-sim: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

/* ---- values --------------------------------------------------------------------------------- */

/* "30ms" -> 30000000. @return 0 or -EINVAL. */
static int parse_time(const char *s, uint64_t *ret_ns)
{
	static const struct {
		const char *suffix;
		double ns;
	} units[] = {{"ns", 1},	  {"us", 1e3},	 {"ms", 1e6},	 {"s", 1e9},
		     {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}, {"", 1e9}};
	char *end;
	double v = strtod(s, &end);

	if (end == s || !(v >= 0) || s[0] == '-' || s[0] == '+')
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) == 0 && v * units[i].ns < 1.8e19) {
			*ret_ns = (uint64_t)llround(v * units[i].ns);
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_price(const char *s, double *ret)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v >= 0) || s[0] == '-')
		return -EINVAL;
	*ret = v;
	return 0;
}

static void store_uint(void *at, size_t width, uint64_t v)
{
	if (width == sizeof(uint64_t))
		*(uint64_t *)at = v;
	else
		*(unsigned *)at = (unsigned)v;
}

/* Set sim option @d from @value. Exits 2 on a bad value. */
static void set_sim_opt(struct cli *c, const struct sopt *d, const char *value)
{
	void *at = (char *)(d->of == FOR_SIM ? (void *)&c->cfg : (void *)&c->gen) + d->off;
	uint64_t v = 0;
	int r = 0;

	if (d->kind == SO_FLAG) {
		if (value)
			usage_error("--%s takes no value", d->name);
		*(bool *)at = true;
		return;
	}
	if (!value || !*value)
		usage_error("--%s needs a value", d->name);
	switch (d->kind) {
	case SO_SIZE:
	case SO_COUNT:
		r = fs_parse_size(value, &v);
		break;
	case SO_TIME:
		r = parse_time(value, &v);
		v = d->in_seconds ? v / 1000000000ULL : v;
		break;
	default:
		if (parse_price(value, at) < 0)
			usage_error("--%s=%s: not a price (dollars, e.g. 0.0004)", d->name, value);
		return;
	}
	if (r < 0 || (d->width < sizeof(uint64_t) && v > UINT32_MAX))
		usage_error("--%s=%s: not a %s", d->name, value,
			    d->kind == SO_TIME	 ? "duration (30ms, 2s, 5m, 1h)"
			    : d->kind == SO_SIZE ? "size (4M, 1G)"
						 : "whole number");
	store_uint(at, d->width, v);
}

/* ---- the command line ----------------------------------------------------------------------- */

static void help(void)
{
	printf("%s\n\nReplays tierfs read traces (trace=FILE) through tierfs's cache, with the\n"
	       "mount options of -o, against a simulated store and Redis, in simulated time.\n\n"
	       "    -o OPTIONS              the mount's options (tierfs --help); one may be a\n"
	       "                            sweep: hot_size=256M:4G:x2, lagging_rate=0:100M:+25M\n"
	       "    --json                  the results as one JSON object\n"
	       "    --plot=PNG              draw a sweep (gnuplot)\n"
	       "    --generate=PREFIX       write a synthetic broker trace, PREFIX-NNN.trace\n",
	       USAGE);
	for (size_t i = 0; i < N_SIM_OPTS; i++) {
		char left[40];

		if (i == 0 || sim_opts[i].of != sim_opts[i - 1].of)
			printf("\n%s\n",
			       sim_opts[i].of == FOR_SIM ? "the simulated world:" : "--generate:");
		snprintf(left, sizeof(left), "--%s%s", sim_opts[i].name,
			 sim_opts[i].kind == SO_FLAG ? "" : "=V");
		printf("    %-24s%s\n", left, sim_opts[i].help);
	}
}

/* -o @v: appended to the mount's options. */
static void add_mount_opts(struct cli *c, const char *v)
{
	size_t old = c->mount_opts ? strlen(c->mount_opts) : 0;
	char *s = realloc(c->mount_opts, old + strlen(v) + 2);

	if (!s)
		usage_error("out of memory");
	if (old)
		s[old++] = ',';
	strcpy(s + old, v);
	c->mount_opts = s;
}

/* A "--name[=value]" of ours. Exits 2 if it is not. */
static void long_opt(struct cli *c, const char *a)
{
	const char *eq = strchr(a, '=');
	size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
	const char *v = eq ? eq + 1 : NULL;

	if (!strcmp(a, "--json"))
		c->json = true;
	else if (!strcmp(a, "--help"))
		c->help = true;
	else if (!strncmp(a, "--plot=", 7) && a[7])
		c->plot = a + 7;
	else if (!strncmp(a, "--generate=", 11) && a[11])
		c->generate = a + 11;
	else {
		for (size_t i = 0; i < N_SIM_OPTS; i++) {
			if (strlen(sim_opts[i].name) == n && !strncmp(a + 2, sim_opts[i].name, n)) {
				set_sim_opt(c, &sim_opts[i], v);
				return;
			}
		}
		usage_error("unknown option '%s' (tierfs-sim --help lists them)", a);
	}
}

static void parse_cli(struct cli *c, int argc, char **argv)
{
	sim_cfg_default(&c->cfg);
	sim_gen_default(&c->gen);
	c->traces = calloc((size_t)argc, sizeof(*c->traces));
	if (!c->traces)
		usage_error("out of memory");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-o")) {
			if (++i >= argc)
				usage_error("-o needs options");
			add_mount_opts(c, argv[i]);
		} else if (!strncmp(a, "-o", 2)) {
			add_mount_opts(c, a + 2);
		} else if (!strcmp(a, "-h")) {
			c->help = true;
		} else if (!strncmp(a, "--", 2)) {
			long_opt(c, a);
		} else if (a[0] == '-' && a[1]) {
			usage_error("unknown option '%s' (tierfs-sim --help lists them)", a);
		} else {
			c->traces[c->ntraces++] = argv[i];
		}
	}
	if (!c->help && !c->generate && !c->ntraces)
		usage_error("no trace to replay\n%s", USAGE);
	if (c->generate && c->ntraces)
		usage_error("--generate writes traces: it replays none");
}

/* The mount's options @opts, parsed by the mount's own table. Exits 2 if they are wrong. */
static void mount_options(const char *opts, struct fs_opts *ret)
{
	char *argv[] = {"tierfs-sim", "file:///", "/", "-o", (char *)(opts ? opts : ""), NULL};
	char err[512];

	if (fs_opts_parse(opts ? 5 : 3, argv, ret, err, sizeof(err)) < 0)
		usage_error("-o %s", err);
}

/* ---- sweeps --------------------------------------------------------------------------------- */

struct sweep {
	char *name;	      /* the swept option; NULL: no sweep */
	char *before, *after; /* the other options, before and after it */
	uint64_t v[MAX_ROWS];
	unsigned n;
	bool geometric;
};

/* Is @value LO:HI:xF or LO:HI:+S? Fills @sw's values. Exits 2 if it is one but wrong. */
static bool sweep_values(const char *name, const char *value, struct sweep *sw)
{
	char lo[64], hi[64], step[64];
	uint64_t a, b, s = 0;
	double f = 0;

	if (sscanf(value, "%63[0-9A-Za-z]:%63[0-9A-Za-z]:%63s", lo, hi, step) != 3 ||
	    (step[0] != 'x' && step[0] != '+'))
		return false;
	if (fs_parse_size(lo, &a) < 0 || fs_parse_size(hi, &b) < 0 || b < a)
		usage_error("-o %s=%s: a sweep is LO:HI:xF or LO:HI:+STEP with LO <= HI", name,
			    value);
	sw->geometric = step[0] == 'x';
	if (sw->geometric ? !((f = strtod(step + 1, NULL)) > 1.0)
			  : fs_parse_size(step + 1, &s) < 0 || !s)
		usage_error("-o %s=%s: the step must be x(more than 1) or +(more than 0)", name,
			    value);
	if (sw->geometric && a == 0) /* 0 times anything stays 0 */
		usage_error("-o %s=%s: a sweep by xF starts above 0", name, value);
	for (double v = (double)a; v <= (double)b * (1 + 1e-9);
	     v = sw->geometric ? v * f : v + (double)s) {
		if (sw->n == MAX_ROWS)
			usage_error("-o %s=%s: more than %d values", name, value, MAX_ROWS);
		sw->v[sw->n++] = (uint64_t)llround(v);
	}
	return true;
}

/* Find a sweep among the items of @opts (split on commas not escaped by a backslash). */
static void find_sweep(const char *opts, struct sweep *sw)
{
	size_t n;

	if (!opts)
		return;
	n = strlen(opts);
	for (size_t i = 0, start = 0; i <= n; i++) {
		if (i < n && (opts[i] != ',' || (i && opts[i - 1] == '\\')))
			continue;
		const char *item = opts + start, *eq = memchr(item, '=', i - start);
		char value[128];

		if (eq && (size_t)(opts + i - eq - 1) < sizeof(value)) {
			snprintf(value, sizeof(value), "%.*s", (int)(opts + i - eq - 1), eq + 1);
			char *name = strndup(item, (size_t)(eq - item));

			if (name && sweep_values(name, value, sw)) {
				if (sw->name)
					usage_error("-o: only one option may be swept");
				sw->name = name;
				sw->before = strndup(opts, start);
				sw->after = strdup(opts + i);
			} else {
				free(name);
			}
		}
		start = i + 1;
	}
}

/* The options with the swept one at value @v. */
static char *sweep_opts(const struct sweep *sw, uint64_t v)
{
	char *s;

	if (asprintf(&s, "%s%s=%llu%s", sw->before, sw->name, (unsigned long long)v, sw->after) < 0)
		usage_error("out of memory");
	return s;
}

/* The value of series @col (0 hot, 1 lagging, 2 shared hit ratios, 3 dollars a day) of row @x;
 * NAN when the tier was never asked. */
static double series(const struct sim_result *x, int col, const struct sim_cfg *cfg)
{
	double d = x->span_ns ? 86400e9 / (double)x->span_ns : 0;
	uint64_t h = col == 2 ? x->shared_hits : col < 2 ? x->cache.tier[col].hits : 0;
	uint64_t m = col == 2 ? x->shared_misses : col < 2 ? x->cache.tier[col].misses : 0;

	if (col == 3)
		return ((double)x->store_gets / 1000.0 * cfg->get_price +
			(double)x->store_bytes / 1e9 * cfg->gb_price) *
		       d;
	return h + m ? (double)h / (double)(h + m) : NAN;
}

/* Draw the rows into @png: hit ratios on the left axis, dollars a day on the right, one tick
 * per value. @return 0 or -errno. */
static int plot(const char *png, const struct sweep *sw, struct sim_run *runs,
		const struct sim_cfg *cfg)
{
	static const char *const title[] = {"hot", "lagging", "shared", "store $/day"};
	FILE *g = popen("gnuplot", "w");
	char label[32];
	bool first = true;

	if (!g)
		return -errno;
	fprintf(g,
		"set terminal pngcairo size 900,540 noenhanced\nset output '%s'\n"
		"set title 'tierfs-sim: %s sweep'\nset xlabel '%s'\nset ylabel 'hit ratio'\n"
		"set yrange [0:1.05]\nset y2label 'store dollars per day'\nset y2tics\n"
		"set ytics nomirror\nset key bottom right\nset grid\nset offsets graph 0.04, graph "
		"0.04, 0, 0\n%sset xtics (",
		png, sw->name, sw->name, sw->geometric ? "set logscale x 2\n" : "");
	for (unsigned i = 0; i < sw->n; i++) {
		fs_human(sw->v[i], label, sizeof(label));
		fprintf(g, "%s'%s' %llu", i ? ", " : "", label, (unsigned long long)sw->v[i]);
	}
	fprintf(g, ")\nplot");
	for (int col = 0; col < 4; col++)
		if (!isnan(series(&runs[0].fleet, col, cfg))) {
			fprintf(g, "%s '-' u 1:2 %sw lp t '%s'", first ? "" : ",",
				col == 3 ? "axes x1y2 " : "", title[col]);
			first = false;
		}
	fprintf(g, "\n");
	for (int col = 0; col < 4; col++) {
		if (isnan(series(&runs[0].fleet, col, cfg)))
			continue;
		for (unsigned i = 0; i < sw->n; i++)
			if (!isnan(series(&runs[i].fleet, col, cfg)))
				fprintf(g, "%llu %g\n", (unsigned long long)sw->v[i],
					series(&runs[i].fleet, col, cfg));
		fprintf(g, "e\n");
	}
	return pclose(g) == 0 ? 0 : -EIO;
}

/* ---- running -------------------------------------------------------------------------------- */

/* Replay the traces with mount options @opts into *ret. Exits on an error: 2 for options, 1
 * for traces that cannot be read. */
static void replay_once(const struct cli *c, const char *opts, struct sim_run *ret)
{
	static bool warned;
	struct fs_opts o;
	char err[512];
	int r;

	mount_options(opts, &o);
	r = sim_replay(&o, &c->cfg, c->traces, c->ntraces, ret, err, sizeof(err));
	fs_opts_done(&o);
	if (r < 0) {
		fprintf(stderr, "tierfs-sim: %s\n", err);
		exit(r == -EINVAL || r == -EFBIG ? 2 : 1);
	}
	if (ret->incomplete && !warned) { /* once, not once per sweep row */
		warned = true;
		fprintf(stderr,
			"tierfs-sim: warning: %s%s is incomplete (its mount is still writing it, "
			"or died): only the reads it holds so far are replayed\n",
			ret->incomplete_path, ret->incomplete > 1 ? " and other trace files" : "");
	}
}

static int run_sweep(struct cli *c, struct sweep *sw)
{
	struct sim_run *runs = calloc(sw->n, sizeof(*runs));
	char label[32];

	if (!runs)
		usage_error("out of memory");
	if (c->json)
		printf("{\"sweep\":{\"option\":\"%s\",\"rows\":[", sw->name);
	for (unsigned i = 0; i < sw->n; i++) {
		char *opts = sweep_opts(sw, sw->v[i]);

		replay_once(c, opts, &runs[i]);
		free(opts);
		if (c->json) {
			printf("%s{\"value\":%llu,", i ? "," : "", (unsigned long long)sw->v[i]);
			sim_report_json_fleet(stdout, &runs[i], &c->cfg);
			printf("}");
		} else {
			fs_human(sw->v[i], label, sizeof(label));
			sim_report_row(stdout, label, &runs[i], &c->cfg, i == 0);
		}
		fflush(stdout);
	}
	if (c->json)
		printf("]}}\n");
	int r = c->plot ? plot(c->plot, sw, runs, &c->cfg) : 0;
	if (r < 0)
		fprintf(stderr, "tierfs-sim: --plot=%s: gnuplot failed (is it installed?)\n",
			c->plot);
	for (unsigned i = 0; i < sw->n; i++)
		sim_run_free(&runs[i]);
	free(runs);
	return r < 0 ? 1 : 0;
}

static int run_replay(struct cli *c)
{
	struct sweep sw = {0};
	struct sim_run run;
	int status;

	find_sweep(c->mount_opts, &sw);
	if (c->plot && !sw.name)
		usage_error("--plot draws a sweep: give one option as LO:HI:xF or LO:HI:+STEP");
	if (sw.name) {
		status = run_sweep(c, &sw);
	} else {
		replay_once(c, c->mount_opts, &run);
		if (c->json)
			sim_report_json(stdout, &run, &c->cfg);
		else
			sim_report_text(stdout, &run, &c->cfg);
		sim_run_free(&run);
		status = 0;
	}
	free(sw.name);
	free(sw.before);
	free(sw.after);
	return status;
}

static int run_generate(const struct cli *c)
{
	char err[512];
	int64_t n = sim_generate(&c->gen, c->generate, err, sizeof(err));

	if (n < 0) {
		fprintf(stderr, "tierfs-sim: %s\n", err);
		return n == -EINVAL ? 2 : 1;
	}
	if (c->json)
		printf("{\"reads\":%lld,\"files\":%u}\n", (long long)n, c->gen.mounts);
	else
		printf("%lld reads written to %s-000.trace .. %s-%03u.trace\n", (long long)n,
		       c->generate, c->generate, c->gen.mounts - 1);
	return 0;
}

int main(int argc, char **argv)
{
	struct cli c = {0};
	int status;

	parse_cli(&c, argc, argv);
	if (c.help) {
		help();
		status = 0;
	} else if (c.generate) {
		status = run_generate(&c);
	} else {
		status = run_replay(&c);
	}
	free(c.mount_opts);
	free(c.traces);
	return status;
}
