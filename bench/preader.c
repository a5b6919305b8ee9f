/*
 * preader - the readers scripts/bench times: pread loops that print one JSON line.
 *
 *   preader seq   [opts] FILE...   read each file start to end (threads take files in turn)
 *   preader rand  [opts] FILE...   random aligned preads over the files: IOPS and latencies
 *   preader multi [opts] FILE      N readers of one file, reader i starting at i/N of it and
 *                                  reading all of it (wrapping), as consumers of one segment
 *   preader touch SIZE             map SIZE of new anonymous memory as tierfs maps a tier
 *                                  (MADV_HUGEPAGE) and write it 1 MiB at a time: the rate at
 *                                  which a process gets new memory here, which bounds a cold
 *                                  read into a cache that has not used its memory yet
 *
 * options:
 *   --bs SIZE        read size (seq, multi: 1M; rand: 4K)
 *   --direct         open with O_DIRECT (bypass the page cache; buffers are page aligned)
 *   --dontneed       posix_fadvise(DONTNEED) each file first: drop its page cache, so the
 *                    reads reach the filesystem's own cache
 *   --threads N      reader threads (seq, rand: 1; multi: 16)
 *   --duration SECS  stop after this long (rand: 5; seq: until the files end)
 *   --loop           seq: start again at the first file until --duration runs out
 *   --span SIZE      rand: only the first SIZE bytes of each file
 *   --ops N          rand: stop after N reads per thread
 *   --seed N         rand: random seed (per thread: seed + thread index)
 *   --pause-file F   seq: while F exists, wait before the next read (a pause the bench can
 *                    set without signals: a signal would interrupt a waiting FUSE read)
 *   --rate SIZE      seq, multi: each thread reads at most SIZE bytes a second (a consumer
 *                    tailing at a broker's rate): a read waits until its bytes are due
 *
 * Output: {"mode":..., "bytes":..., "seconds":..., "mbps":..., "ops":..., "iops":...,
 * "lat_us":{"p50":..,"p99":..,"p999":..,"max":..}} (latencies for every read; rand and seq).
 * Any read error or short read before EOF prints the error and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct file {
	const char *path;
	uint64_t size;
};

static struct file *files;
static int nfiles;
static uint64_t bs;
static bool direct, dontneed, loop_files;
static int threads;
static double duration = -1;
static uint64_t span, ops_limit, seed = 1;
static uint64_t t_start, t_deadline;
static uint64_t rate; /* bytes a second per thread; 0: no pacing */
static atomic_bool failed;
static const char *pause_file;

struct worker {
	pthread_t th;
	int idx;
	uint64_t bytes, ops;
	uint64_t *lat; /* ns */
	size_t nlat, cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, const char *a, int err)
{
	fprintf(stderr, "preader: ");
	fprintf(stderr, fmt, a);
	fprintf(stderr, ": %s\n", strerror(err));
	exit(1);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	switch (*end) {
	case 'K': case 'k': v *= 1024; break;
	case 'M': case 'm': v *= 1024 * 1024; break;
	case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
	default: break;
	}
	return (uint64_t)v;
}

static void record(struct worker *w, uint64_t ns)
{
	if (w->nlat == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 65536;
		w->lat = realloc(w->lat, w->cap * sizeof(*w->lat));
		if (!w->lat)
			die("%s", "out of memory", ENOMEM);
	}
	w->lat[w->nlat++] = ns;
}

static int open_file(const struct file *f)
{
	int fd = open(f->path, O_RDONLY | (direct ? O_DIRECT : 0));

	if (fd < 0)
		die("open %s", f->path, errno);
	if (dontneed)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return fd;
}

static void *alloc_buf(void)
{
	void *buf;

	if (posix_memalign(&buf, 4096, bs))
		die("%s", "posix_memalign", ENOMEM);
	memset(buf, 0, bs);
	return buf;
}

static bool out_of_time(void)
{
	return (t_deadline && now_ns() >= t_deadline) || atomic_load(&failed);
}

/* one file start to end; false when time ran out */
static bool read_through(struct worker *w, const struct file *f, void *buf, uint64_t from)
{
	int fd = open_file(f);
	uint64_t off = from, done = 0;

	while (done < f->size) {
		while (pause_file && access(pause_file, F_OK) == 0 && !out_of_time())
			usleep(5000);
		if (rate) { /* the thread's bytes so far are due at t_start + bytes / rate */
			uint64_t due = t_start + (uint64_t)((double)w->bytes * 1e9 / (double)rate);
			uint64_t now = now_ns();

			if (due > now)
				usleep((useconds_t)((due - now) / 1000));
		}
		uint64_t t0 = now_ns();
		ssize_t n = pread(fd, buf, bs, (off_t)off);

		if (n < 0)
			die("read %s", f->path, errno);
		if (n == 0 && off < f->size)
			die("short read of %s", f->path, EIO);
		record(w, now_ns() - t0);
		w->bytes += (uint64_t)n;
		w->ops++;
		done += (uint64_t)n;
		off += (uint64_t)n;
		if (off >= f->size)
			off = 0; /* multi: wrap to the start */
		if (out_of_time()) {
			close(fd);
			return false;
		}
	}
	close(fd);
	return true;
}

static void *seq_worker(void *arg)
{
	struct worker *w = arg;
	void *buf = alloc_buf();

	do {
		for (int i = w->idx; i < nfiles; i += threads)
			if (!read_through(w, &files[i], buf, 0))
				goto out;
	} while (loop_files && t_deadline && !out_of_time());
out:
	free(buf);
	return NULL;
}

static void *multi_worker(void *arg)
{
	struct worker *w = arg;
	void *buf = alloc_buf();
	uint64_t from = files[0].size / (uint64_t)threads * (uint64_t)w->idx / bs * bs;

	read_through(w, &files[0], buf, from);
	free(buf);
	return NULL;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void *rand_worker(void *arg)
{
	struct worker *w = arg;
	void *buf = alloc_buf();
	int *fds = calloc((size_t)nfiles, sizeof(int));
	uint64_t *slots = calloc((size_t)nfiles, sizeof(uint64_t)), total = 0;
	uint64_t rs = (seed + (uint64_t)w->idx) * 0x9E3779B97F4A7C15ull | 1;

	for (int i = 0; i < nfiles; i++) {
		uint64_t sz = span && span < files[i].size ? span : files[i].size;

		fds[i] = open_file(&files[i]);
		slots[i] = sz / bs;
		total += slots[i];
	}
	if (!total)
		die("%s", "files smaller than one read", EINVAL);
	while (!out_of_time() && (!ops_limit || w->ops < ops_limit)) {
		uint64_t k = xorshift(&rs) % total;
		int i = 0;

		while (k >= slots[i])
			k -= slots[i++];
		uint64_t t0 = now_ns();
		ssize_t n = pread(fds[i], buf, bs, (off_t)(k * bs));
		uint64_t dt = now_ns() - t0;

		if (n != (ssize_t)bs)
			die("random read of %s", files[i].path, n < 0 ? errno : EIO);
		record(w, dt);
		w->bytes += (uint64_t)n;
		w->ops++;
	}
	for (int i = 0; i < nfiles; i++)
		close(fds[i]);
	free(fds);
	free(slots);
	free(buf);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i] / 1000.0;
}

static int touch(uint64_t size)
{
	unsigned char *p;
	uint64_t t0;
	double secs;

	if (size == 0)
		return fprintf(stderr, "preader: touch SIZE\n"), 2;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("%s", "mmap", errno);
	madvise(p, size, MADV_HUGEPAGE);
	t0 = now_ns();
	for (uint64_t o = 0; o < size; o += 1 << 20)
		memset(p + o, 1, size - o < (1 << 20) ? size - o : 1 << 20);
	secs = (double)(now_ns() - t0) / 1e9;
	printf("{\"mode\":\"touch\",\"bytes\":%llu,\"seconds\":%.6f,\"mbps\":%.3f}\n",
	       (unsigned long long)size, secs, (double)size / secs / 1e6);
	munmap(p, size);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode;
	void *(*fn)(void *);
	int i;

	if (argc == 3 && strcmp(argv[1], "touch") == 0)
		return touch(parse_size(argv[2]));

	if (argc < 3) {
		fprintf(stderr, "usage: preader seq|rand|multi [options] FILE... | preader touch SIZE\n");
		return 2;
	}
	mode = argv[1];
	if (strcmp(mode, "seq") == 0) {
		fn = seq_worker;
		bs = 1 << 20;
		threads = 1;
	} else if (strcmp(mode, "rand") == 0) {
		fn = rand_worker;
		bs = 4096;
		threads = 1;
		duration = 5;
	} else if (strcmp(mode, "multi") == 0) {
		fn = multi_worker;
		bs = 1 << 20;
		threads = 16;
	} else {
		fprintf(stderr, "preader: unknown mode %s\n", mode);
		return 2;
	}
	for (i = 2; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";

		if (strcmp(o, "--direct") == 0) {
			direct = true;
		} else if (strcmp(o, "--dontneed") == 0) {
			dontneed = true;
		} else if (strcmp(o, "--loop") == 0) {
			loop_files = true;
		} else if (strcmp(o, "--bs") == 0) {
			bs = parse_size(v), i++;
		} else if (strcmp(o, "--threads") == 0) {
			threads = atoi(v), i++;
		} else if (strcmp(o, "--duration") == 0) {
			duration = atof(v), i++;
		} else if (strcmp(o, "--span") == 0) {
			span = parse_size(v), i++;
		} else if (strcmp(o, "--ops") == 0) {
			ops_limit = strtoull(v, NULL, 10), i++;
		} else if (strcmp(o, "--pause-file") == 0) {
			pause_file = v, i++;
		} else if (strcmp(o, "--rate") == 0) {
			rate = parse_size(v), i++;
		} else if (strcmp(o, "--seed") == 0) {
			seed = strtoull(v, NULL, 10), i++;
		} else {
			fprintf(stderr, "preader: unknown option %s\n", o);
			return 2;
		}
	}
	nfiles = argc - i;
	if (nfiles < 1 || bs == 0 || threads < 1 || threads > 1024 ||
	    (fn == multi_worker && nfiles != 1)) {
		fprintf(stderr, "preader: bad arguments\n");
		return 2;
	}
	files = calloc((size_t)nfiles, sizeof(*files));
	for (int k = 0; k < nfiles; k++) {
		struct stat st;

		files[k].path = argv[i + k];
		if (stat(files[k].path, &st) < 0)
			die("stat %s", files[k].path, errno);
		files[k].size = (uint64_t)st.st_size;
	}

	struct worker *w = calloc((size_t)threads, sizeof(*w));
	t_start = now_ns();
	if (duration > 0)
		t_deadline = t_start + (uint64_t)(duration * 1e9);
	for (int k = 0; k < threads; k++) {
		w[k].idx = k;
		if (pthread_create(&w[k].th, NULL, fn, &w[k]))
			die("%s", "pthread_create", errno);
	}
	uint64_t bytes = 0, ops = 0;
	size_t nlat = 0;
	for (int k = 0; k < threads; k++) {
		pthread_join(w[k].th, NULL);
		bytes += w[k].bytes;
		ops += w[k].ops;
		nlat += w[k].nlat;
	}
	double secs = (double)(now_ns() - t_start) / 1e9;
	uint64_t *all = malloc((nlat ? nlat : 1) * sizeof(*all));
	size_t n = 0;
	for (int k = 0; k < threads; k++) {
		memcpy(all + n, w[k].lat, w[k].nlat * sizeof(*all));
		n += w[k].nlat;
	}
	qsort(all, n, sizeof(*all), cmp_u64);
	printf("{\"mode\":\"%s\",\"bytes\":%llu,\"seconds\":%.6f,\"mbps\":%.3f,\"ops\":%llu,"
	       "\"iops\":%.1f,\"lat_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f,\"max\":%.2f}}\n",
	       mode, (unsigned long long)bytes, secs, (double)bytes / secs / 1e6,
	       (unsigned long long)ops, (double)ops / secs, pct(all, n, 0.50), pct(all, n, 0.99),
	       pct(all, n, 0.999), n ? (double)all[n - 1] / 1000.0 : 0.0);
	return 0;
}
