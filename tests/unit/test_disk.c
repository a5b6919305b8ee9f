/*
 * test_disk.c - tiers/disk.c in a fresh directory under /tmp: round trip, restart, torn and
 * flipped records caught, a cache of another format or block_size wiped, rotation evicting the
 * oldest segment whole, a full queue dropping instead of blocking, a write error turning
 * writes off while reads go on, a second tier on the same directory refused, and reads on the
 * tier's reader threads (disk_get_async). And the trust checks of issue 28: a cache_dir that
 * is a symbolic link, another user's, or writable by group or others is refused (-EPERM, one
 * line) with nothing in it touched; a missing one is made 0700; segment and lock files that
 * are not the tier's own (another user's, group or other bits, a second name, a link) are
 * removed unread and made anew, so a descriptor or a flock held on the old one counts for
 * nothing; a generation near 2^64 is a bad header. Those that chown need root.
 *
 * The writer thread is real; tests wait for it with disk_flush, never with a sleep.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "crc32c.h"
#include "disk.h"

#define BS (64u << 10)

static char dir[64];
static int logs;
static char last_log[512];

static void log_cb(void *arg, int level, const char *msg)
{
	(void)level;
	logs++;
	snprintf(last_log, sizeof(last_log), "%s", msg);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/tierfs-disk-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	logs = 0;
	last_log[0] = '\0';
	return 0;
}

static int teardown(void **state)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static struct disk *open_sized(uint64_t size, uint32_t bs)
{
	/* a queue that holds every put of a test: a test that wants drops says so */
	struct disk_cfg cfg = {.dir = dir, .size = size, .block_size = bs,
			       .queue_bytes = 64u << 20, .log = log_cb};
	struct disk *d = NULL;

	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	return d;
}

/* 64 MiB of 64 KiB blocks: 64 segments */
static struct disk *open_dir(void)
{
	return open_sized(64u << 20, BS);
}

static struct cache_key key(uint64_t blk)
{
	return (struct cache_key){{0x1234, 0x5678}, blk};
}

static void fill(unsigned char *b, uint32_t len, uint64_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

static void put_block(struct disk *d, uint64_t blk, uint32_t len)
{
	static unsigned char b[BS];

	fill(b, len, blk);
	disk_put(d, key(blk), b, len);
}

static void expect_block(struct disk *d, uint64_t blk, uint32_t len)
{
	static unsigned char want[BS], got[BS];

	fill(want, len, blk);
	assert_int_equal(disk_get(d, key(blk), got, len), 0);
	assert_memory_equal(got, want, len);
}

static void round_trip(void **state)
{
	struct disk *d = open_dir();
	struct disk_stats st;
	unsigned char buf[BS];

	put_block(d, 0, BS);
	put_block(d, 1, 1000); /* a short last block */
	disk_flush(d);
	assert_true(disk_has(d, key(0)));
	assert_true(disk_has(d, key(1)));
	assert_false(disk_has(d, key(2)));
	expect_block(d, 0, BS);
	expect_block(d, 1, 1000);
	assert_int_equal(disk_get(d, key(2), buf, BS), -ENOENT);
	assert_int_equal(disk_get(d, key(1), buf, BS), -ENOENT); /* another length */
	/* a second put of a resident block writes nothing */
	put_block(d, 0, BS);
	disk_flush(d);
	disk_get_stats(d, &st);
	assert_int_equal(st.writes, 2);
	assert_int_equal(st.blocks, 2);
	assert_int_equal(st.bytes, BS + 1000);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.misses, 2);
	assert_int_equal(st.crc_failures, 0);
	disk_close(d);
	assert_int_equal(logs, 0);
}

static void restart_keeps_blocks(void **state)
{
	struct disk *d = open_dir();
	struct disk_stats st;

	for (uint64_t b = 0; b < 40; b++)
		put_block(d, b, BS);
	disk_flush(d);
	disk_close(d); /* clean: the queue is written */

	d = open_dir();
	disk_get_stats(d, &st);
	assert_int_equal(st.recovered_blocks, 40);
	assert_int_equal(st.blocks, 40);
	for (uint64_t b = 0; b < 40; b++)
		expect_block(d, b, BS);
	/* appending resumes after the last record: new blocks and old ones survive another
	 * restart */
	put_block(d, 40, 100);
	disk_close(d);
	d = open_dir();
	expect_block(d, 0, BS);
	expect_block(d, 40, 100);
	disk_close(d);
	assert_int_equal(logs, 0);
}

/* Segment file of @idx, opened for writing. */
static int seg_fd(unsigned idx)
{
	char p[128];
	int fd;

	snprintf(p, sizeof(p), "%s/seg-%04u.tfs", dir, idx);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	return fd;
}

/* Records start at 4 KiB after a 4 KiB header, their data a page after that: a 64 KiB block
 * takes 68 KiB. */
#define REC0 4096
#define REC1 (4096 + 69632)
#define DATA 4096

static void torn_write_dropped(void **state)
{
	struct disk *d = open_sized(1u << 20, BS); /* 4 segments: both blocks in segment 0 */
	struct disk_stats st;
	unsigned char buf[BS];
	int fd;

	put_block(d, 0, BS);
	put_block(d, 1, BS);
	disk_flush(d);
	disk_close(d);
	fd = seg_fd(0);
	assert_int_equal(ftruncate(fd, REC1 + DATA + BS / 2), 0); /* half of block 1's data */
	close(fd);

	d = open_sized(1u << 20, BS);
	disk_get_stats(d, &st);
	assert_int_equal(st.recovered_blocks, 1);
	expect_block(d, 0, BS);
	assert_int_equal(disk_get(d, key(1), buf, BS), -ENOENT);
	/* the torn tail is overwritten by the next record */
	put_block(d, 2, BS);
	disk_flush(d);
	disk_close(d);
	d = open_sized(1u << 20, BS);
	expect_block(d, 0, BS);
	expect_block(d, 2, BS);
	disk_close(d);
}

static void flip(unsigned idx, off_t off)
{
	int fd = seg_fd(idx);
	unsigned char c;

	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x10;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static void flipped_byte_caught(void **state)
{
	struct disk *d = open_sized(1u << 20, BS);
	struct disk_stats st;
	unsigned char buf[BS];

	put_block(d, 0, BS);
	put_block(d, 1, BS);
	disk_flush(d);
	disk_close(d);
	flip(0, REC0 + DATA + 12345); /* in block 0's data, while closed */

	d = open_sized(1u << 20, BS);
	disk_get_stats(d, &st);
	assert_int_equal(st.recovered_blocks, 2); /* the scan reads headers only */
	assert_int_equal(disk_get(d, key(0), buf, BS), -EBADMSG);
	assert_false(disk_has(d, key(0))); /* dropped, never served */
	assert_int_equal(disk_get(d, key(0), buf, BS), -ENOENT);
	expect_block(d, 1, BS);

	flip(0, REC1 + DATA + BS - 1); /* block 1's last byte, while open */
	assert_int_equal(disk_get(d, key(1), buf, BS), -EBADMSG);
	flip(0, REC1 + DATA + BS - 1);
	assert_int_equal(disk_get(d, key(1), buf, BS), -ENOENT);

	/* a refetched block is written again and served */
	put_block(d, 0, BS);
	disk_flush(d);
	expect_block(d, 0, BS);
	disk_get_stats(d, &st);
	assert_int_equal(st.crc_failures, 2);
	disk_close(d);
}

/* disk_get_async: what its callbacks saw, for the test thread to wait on. */
static struct areads {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;          /* callbacks run */
	int err[16];       /* their results, by request */
	bool other_thread; /* every callback ran on a thread other than the test's */
	pthread_t test;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void a_done(void *arg, int err)
{
	pthread_mutex_lock(&A.lock);
	A.err[(intptr_t)arg] = err;
	if (pthread_equal(pthread_self(), A.test))
		A.other_thread = false;
	A.done++;
	pthread_cond_broadcast(&A.cond);
	pthread_mutex_unlock(&A.lock);
}

/* Wait (condition variable, 10 s deadline) until @n callbacks ran. */
static void a_wait(int n)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	pthread_mutex_lock(&A.lock);
	while (A.done < n)
		if (pthread_cond_timedwait(&A.cond, &A.lock, &dl))
			break;
	pthread_mutex_unlock(&A.lock);
	assert_int_equal(A.done, n);
}

static void a_reset(void)
{
	A.done = 0;
	A.other_thread = true;
	A.test = pthread_self();
	memset(A.err, 0x7f, sizeof(A.err));
}

/* Asynchronous reads: a resident block is read on a reader thread and checked there (a hit,
 * or -EBADMSG for a flipped byte, counted and dropped); a block not in the index is a miss
 * answered at once, with no callback; many reads queued at once all complete; after
 * disk_stop_reads nothing starts. */
static void async_reads(void **state)
{
	struct disk *d = open_sized(4u << 20, BS);
	static unsigned char want[BS], got[12][BS];
	struct disk_stats st;

	a_reset();
	for (uint64_t b = 0; b < 12; b++)
		put_block(d, b, BS);
	disk_flush(d);
	assert_int_equal(disk_get_async(d, key(99), got[0], BS, a_done, (void *)0), -ENOENT);
	assert_int_equal(disk_get_async(d, key(1), got[0], 1000, a_done, (void *)0), -ENOENT);
	flip(0, REC1 + DATA + 7); /* block 1's data */
	for (intptr_t b = 0; b < 12; b++)
		assert_int_equal(disk_get_async(d, key((uint64_t)b), got[b], BS, a_done, (void *)b),
				 0);
	a_wait(12);
	assert_true(A.other_thread);
	assert_int_equal(A.err[1], -EBADMSG);
	for (uint64_t b = 0; b < 12; b++) {
		if (b == 1)
			continue;
		assert_int_equal(A.err[b], 0);
		fill(want, BS, b);
		assert_memory_equal(got[b], want, BS);
	}
	disk_get_stats(d, &st);
	assert_int_equal(st.hits, 11);
	assert_int_equal(st.crc_failures, 1);
	assert_false(disk_has(d, key(1)));

	disk_stop_reads(d);
	assert_int_equal(disk_get_async(d, key(0), got[0], BS, a_done, (void *)0), -ESHUTDOWN);
	assert_int_equal(A.done, 12);
	disk_close(d);
}

/* Can this directory's file system do O_DIRECT? (tmpfs cannot: the tier reads buffered.) */
static bool dir_takes_direct(void)
{
	char path[96];
	int fd;

	snprintf(path, sizeof(path), "%s/seg-0000.tfs", dir);
	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* The reader threads read past the page cache (O_DIRECT) where the file system allows it:
 * records of odd lengths, the last one ending the file unpadded, come back whole, into page
 * aligned buffers (whole pages straight from the disk, the rest through the thread's own
 * buffer) and into one that is not; not a byte past a block's length is written; a flipped
 * byte is still caught. */
static void direct_reads(void **state)
{
	static const uint32_t lens[] = {1, 1000, 4096, 4097, BS - 1, BS, 777, 8193};
	enum { N = sizeof(lens) / sizeof(lens[0]), ROW = BS + 4096 };
	struct disk *d = open_sized(4u << 20, BS);
	/* rows of whole pages: got[b] is page aligned; got[N] + 64 is not */
	static _Alignas(4096) unsigned char got[N + 1][ROW];
	static unsigned char want[BS];
	struct disk_stats st;

	a_reset();
	memset(got, 0xee, sizeof(got));
	for (uint64_t b = 0; b < N; b++)
		put_block(d, b, lens[b]);
	disk_flush(d);
	flip(0, REC0 + DATA + 0); /* block 0's only byte */
	for (intptr_t b = 0; b < N; b++)
		assert_int_equal(disk_get_async(d, key((uint64_t)b), got[b], lens[b], a_done,
						(void *)b), 0);
	assert_int_equal(disk_get_async(d, key(5), got[N] + 64, BS, a_done, (void *)N), 0);
	a_wait(N + 1);
	assert_int_equal(A.err[0], -EBADMSG);
	for (uint64_t b = 1; b <= N; b++) {
		uint32_t len = b < N ? lens[b] : BS, at = b < N ? 0 : 64;

		assert_int_equal(A.err[b], 0);
		fill(want, len, b < N ? b : 5);
		assert_memory_equal(got[b] + at, want, len);
		for (uint32_t i = at + len; i < ROW; i++)
			assert_int_equal(got[b][i], 0xee);
	}
	disk_get_stats(d, &st);
	assert_int_equal(st.hits, N);
	assert_int_equal(st.crc_failures, 1);
	if (dir_takes_direct())
		assert_int_equal(st.direct_reads, N);
	else
		print_message("# %s: no O_DIRECT here, the reads were buffered\n", dir);
	disk_close(d);
}

/* Reads queued when the readers stop are finished, not dropped: every callback runs once. */
static void async_stop_finishes(void **state)
{
	struct disk *d = open_sized(4u << 20, BS);
	static unsigned char got[8][BS];

	a_reset();
	for (uint64_t b = 0; b < 8; b++)
		put_block(d, b, BS);
	disk_flush(d);
	for (intptr_t b = 0; b < 8; b++)
		assert_int_equal(disk_get_async(d, key((uint64_t)b), got[b], BS, a_done, (void *)b),
				 0);
	disk_close(d); /* stops the readers first */
	assert_int_equal(A.done, 8);
	for (int b = 0; b < 8; b++)
		assert_int_equal(A.err[b], 0);
}

static void other_block_size_wiped(void **state)
{
	struct disk *d = open_dir();
	struct disk_stats st;

	put_block(d, 0, BS);
	disk_close(d);
	d = open_sized(64u << 20, BS * 2);
	disk_get_stats(d, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "block_size"));
	disk_close(d);
	/* wiped for good: back at the first block size, nothing is there either */
	d = open_dir();
	disk_get_stats(d, &st);
	assert_int_equal(st.blocks, 0);
	disk_close(d);
}

static void other_format_wiped(void **state)
{
	struct disk *d = open_dir();
	struct disk_stats st;
	unsigned char h[48];
	uint32_t v = 99, c;
	int fd;

	put_block(d, 0, BS);
	disk_close(d);
	/* a header of format 99 with a good CRC: a later tierfs's cache */
	fd = seg_fd(0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	memcpy(h + 8, &v, 4);
	c = crc32c(0, h, 44);
	memcpy(h + 44, &c, 4);
	assert_int_equal(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);

	d = open_dir();
	disk_get_stats(d, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "format"));
	put_block(d, 1, BS);
	disk_flush(d);
	expect_block(d, 1, BS);
	disk_close(d);
}

static void rotation_evicts_oldest_segment(void **state)
{
	struct disk *d = open_sized(1u << 20, BS); /* 4 segments of 3 blocks */
	struct disk_stats st;

	for (uint64_t b = 0; b < 12; b++)
		put_block(d, b, BS);
	disk_flush(d);
	disk_get_stats(d, &st);
	assert_int_equal(st.blocks, 12);
	assert_int_equal(st.rotations, 0);
	put_block(d, 12, BS);
	disk_flush(d);
	disk_get_stats(d, &st);
	assert_int_equal(st.rotations, 1);
	assert_int_equal(st.blocks, 10);
	for (uint64_t b = 0; b < 3; b++)
		assert_false(disk_has(d, key(b)));
	for (uint64_t b = 3; b < 13; b++)
		expect_block(d, b, BS);
	disk_close(d);
	/* after a restart the newest segment is found again: the next rotation evicts blocks
	 * 3..5, not 12 */
	d = open_sized(1u << 20, BS);
	put_block(d, 13, BS);
	put_block(d, 14, BS);
	put_block(d, 15, BS);
	disk_flush(d);
	assert_false(disk_has(d, key(3)));
	expect_block(d, 12, BS);
	expect_block(d, 15, BS);
	disk_close(d);
}

static void full_queue_drops(void **state)
{
	struct disk_cfg cfg = {.dir = dir, .size = 64u << 20, .block_size = BS,
			       .queue_bytes = 2 * BS, .log = log_cb};
	struct disk *d = NULL;
	struct disk_stats st;

	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	disk_hold_writer(d, true);
	for (uint64_t b = 0; b < 10; b++)
		put_block(d, b, BS); /* returns at once: 2 queued, 8 dropped */
	disk_get_stats(d, &st);
	assert_int_equal(st.write_drops, 8);
	assert_int_equal(st.queued_bytes, 2 * BS);
	disk_hold_writer(d, false);
	disk_flush(d);
	expect_block(d, 0, BS);
	expect_block(d, 1, BS);
	assert_false(disk_has(d, key(2)));
	disk_close(d);
}

/* The default queue holds 64 MiB of small blocks: a burst of 64 KiB blocks (readahead
 * batches of 16 MiB) is not cut to 16 of them. */
static void default_queue_is_bytes(void **state)
{
	struct disk_cfg cfg = {.dir = dir, .size = 64u << 20, .block_size = BS, .log = log_cb};
	struct disk *d = NULL;
	struct disk_stats st;
	uint64_t n = DISK_QUEUE_MIN / BS;

	assert_int_equal(disk_default_queue_bytes(BS), DISK_QUEUE_MIN);
	assert_int_equal(disk_default_queue_bytes(8u << 20), 16 * (8ull << 20));
	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	disk_hold_writer(d, true);
	for (uint64_t b = 0; b <= n; b++)
		put_block(d, b, BS); /* the last one finds the queue full */
	disk_get_stats(d, &st);
	assert_int_equal(st.write_drops, 1);
	assert_int_equal(st.queued_bytes, n * BS);
	disk_hold_writer(d, false);
	disk_flush(d);
	expect_block(d, n - 1, BS);
	assert_false(disk_has(d, key(n)));
	disk_close(d);
}

static void write_error_turns_writes_off(void **state)
{
	struct disk *d = open_dir();
	struct disk_stats st;
	struct rlimit old, lim;

	put_block(d, 0, BS);
	disk_flush(d);
	/* the next block ends past 4 KiB into its segment: EFBIG, as ENOSPC would */
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 4096;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	put_block(d, 1, BS);
	disk_flush(d);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	put_block(d, 2, BS); /* writes are off: dropped */
	disk_flush(d);
	disk_get_stats(d, &st);
	assert_int_equal(st.write_errors, 1);
	assert_false(st.writable);
	assert_int_equal(st.write_drops, 1);
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "writes off"));
	expect_block(d, 0, BS); /* reads go on */
	assert_false(disk_has(d, key(1)));
	disk_close(d);
}

static void second_tier_refused(void **state)
{
	struct disk_cfg cfg = {.dir = dir, .size = 64u << 20, .block_size = BS};
	struct disk *d = open_dir(), *d2 = NULL;

	assert_int_equal(disk_open(&cfg, &d2, NULL, 0), -EBUSY);
	disk_close(d);
	assert_int_equal(disk_open(&cfg, &d2, NULL, 0), 0);
	disk_close(d2);
}

static void geometry(void **state)
{
	assert_int_equal(disk_geometry(10ull << 30, 4u << 20), 0);
	assert_int_equal(disk_geometry(1u << 20, BS), 0);
	assert_int_equal(disk_geometry(disk_min_size(BS), BS), 0);
	assert_int_equal(disk_geometry(disk_min_size(BS) - 4096, BS), -EINVAL);
	assert_int_equal(disk_geometry(256u << 10, BS), -EINVAL);
	assert_int_equal(disk_geometry(1u << 20, 3000), -EINVAL);
}

/* How long the scan takes for N blocks (a TAP comment: the figure, not a bound). */
static void recovery_time(void **state)
{
	static unsigned char b[4096];
	struct disk_cfg cfg = {.dir = dir, .size = 1u << 30, .block_size = 4096,
			       .queue_bytes = 64u << 20};
	struct disk *d = NULL;
	struct disk_stats st;
	const uint64_t n = 20000;

	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	for (uint64_t i = 0; i < n; i++) {
		disk_put(d, key(i), b, sizeof(b));
		if (i % 4000 == 3999)
			disk_flush(d);
	}
	disk_close(d);
	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	disk_get_stats(d, &st);
	printf("# disk recovery: %llu blocks scanned in %llu ms\n",
	       (unsigned long long)st.recovered_blocks, (unsigned long long)st.recovery_ms);
	assert_true(st.recovered_blocks > n / 2);
	disk_close(d);
}

/* ---- cache_dir is ours alone: the directory and file checks (issue 28) --------------------- */

#define NOBODY 65534

/* @dir/@name into @buf (128 bytes). */
static const char *at(char buf[128], const char *name)
{
	snprintf(buf, 128, "%s/%s", dir, name);
	return buf;
}

/* The checks of another owner need root (chown); anyone can run the rest. */
static bool need_root(void)
{
	if (geteuid() == 0)
		return true;
	print_message("# not root: cannot chown, skipped\n");
	return false;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* A whole file's bytes and times, to show it was not touched. */
struct snap {
	char bytes[64];
	ssize_t len;
	struct stat st;
};

static void snap(const char *path, struct snap *ret)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW);

	assert_true(fd >= 0);
	ret->len = read(fd, ret->bytes, sizeof(ret->bytes));
	assert_int_equal(fstat(fd, &ret->st), 0);
	close(fd);
}

static void same(const char *path, const struct snap *before)
{
	struct snap now;

	snap(path, &now);
	assert_int_equal(now.len, before->len);
	assert_memory_equal(now.bytes, before->bytes, (size_t)now.len);
	assert_int_equal(now.st.st_ino, before->st.st_ino);
	assert_int_equal(now.st.st_size, before->st.st_size);
	assert_int_equal(now.st.st_mtim.tv_sec, before->st.st_mtim.tv_sec);
	assert_int_equal(now.st.st_mtim.tv_nsec, before->st.st_mtim.tv_nsec);
}

/* Open a tier on @path; expect -EPERM and a reason holding @words. Nothing is created. */
static void expect_refused(const char *path, const char *words)
{
	struct disk_cfg cfg = {.dir = path, .size = 1u << 20, .block_size = BS, .log = log_cb};
	struct disk *d = NULL;
	char why[512] = "";

	assert_int_equal(disk_open(&cfg, &d, why, sizeof(why)), -EPERM);
	assert_null(d);
	if (!strstr(why, words))
		fail_msg("refusal '%s' does not say '%s'", why, words);
	assert_null(strchr(why, '\n')); /* one line */
	assert_int_equal(logs, 0);
}

/* A segment file name that is a link is never followed: the link is removed (what it points
 * at is untouched), a file of the tier's own takes its place, and the tier works. */
static void links_not_followed(void **state)
{
	char victim[128], link[128];
	struct snap before;
	struct stat st;
	struct disk *d;

	write_file(at(victim, "victim"), "precious", 0600);
	snap(victim, &before);
	assert_int_equal(symlink(victim, at(link, "seg-0000.tfs")), 0);
	d = open_dir();
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "seg-0000.tfs was not a regular file"));
	put_block(d, 0, BS); /* goes to segment 0 */
	disk_flush(d);
	expect_block(d, 0, BS);
	disk_close(d);
	same(victim, &before);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISREG(st.st_mode));
}

/* cache_dir a symbolic link (with or without a trailing slash): refused, and nothing in the
 * directory it points at is touched, not even a segment a tier would truncate (bad header)
 * or remove (beyond the geometry). */
static void dir_link_refused(void **state)
{
	char target[128], link[128], slash[130], seg5[160], seg100[160];
	struct snap s5, s100;

	assert_int_equal(mkdir(at(target, "real"), 0700), 0);
	snprintf(seg5, sizeof(seg5), "%s/seg-0005.tfs", target);
	snprintf(seg100, sizeof(seg100), "%s/seg-0100.tfs", target);
	write_file(seg5, "not a header", 0600);
	write_file(seg100, "beyond the ring", 0600);
	snap(seg5, &s5);
	snap(seg100, &s100);
	assert_int_equal(symlink(target, at(link, "link")), 0);
	expect_refused(link, "is a symbolic link");
	snprintf(slash, sizeof(slash), "%s/", link);
	expect_refused(slash, "is a symbolic link");
	same(seg5, &s5);
	same(seg100, &s100);
	assert_int_equal(access(at(target, "real/tierfs.lock"), F_OK), -1);
}

/* Another user's cache_dir, with a segment in it: refused, the reason names the owner, the
 * segment is not read, changed or locked. */
static void dir_of_another_user_refused(void **state)
{
	char sub[128], want[64];
	struct snap before;
	struct disk *d;

	if (!need_root())
		return;
	d = open_dir();
	put_block(d, 0, BS);
	disk_close(d);
	snap(at(sub, "seg-0000.tfs"), &before);
	assert_int_equal(chown(dir, NOBODY, NOBODY), 0);
	snprintf(want, sizeof(want), "owned by uid %u, not 0", NOBODY);
	expect_refused(dir, want);
	same(sub, &before);
	/* its owner may also have left it writable to us: still refused */
	assert_int_equal(chmod(dir, 0777), 0);
	expect_refused(dir, want);
}

/* A directory of ours that group or others can write is refused (a sticky bit does not help:
 * they could still add files); one they can only read and search is ours alone. */
static void dir_writable_by_others_refused(void **state)
{
	static const struct {
		mode_t mode;
		const char *words;
	} bad[] = {
		{01777, "mode 1777 lets group and others write it"},
		{0770, "mode 0770 lets its group write it"},
		{0702, "mode 0702 lets others write it"},
	};
	struct disk *d;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(chmod(dir, bad[i].mode), 0);
		expect_refused(dir, bad[i].words);
		assert_int_equal(access(at((char[128]){0}, "tierfs.lock"), F_OK), -1);
	}
	assert_int_equal(chmod(dir, 0755), 0);
	d = open_dir();
	disk_close(d);
}

/* A missing cache_dir is created 0700 (whatever the umask), and every file in it is 0600. */
static void missing_dir_created_private(void **state)
{
	struct disk_cfg cfg = {.size = 1u << 20, .block_size = BS, .log = log_cb};
	char sub[128], path[160];
	mode_t old = umask(0);
	struct disk *d = NULL;
	struct stat st;

	cfg.dir = at(sub, "new");
	assert_int_equal(disk_open(&cfg, &d, NULL, 0), 0);
	umask(old);
	disk_close(d);
	assert_int_equal(lstat(sub, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(st.st_uid, geteuid());
	for (int i = -1; i < 4; i++) {
		if (i < 0)
			snprintf(path, sizeof(path), "%s/tierfs.lock", sub);
		else
			snprintf(path, sizeof(path), "%s/seg-%04d.tfs", sub, i);
		assert_int_equal(lstat(path, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 07777, 0600);
	}
}

/* Segment files that are not the tier's own (another user's, open to group or others, with a
 * second name) are removed unread and made anew: their blocks are not recovered, each is a
 * new regular 0600 file of ours, and a descriptor opened on the old one sees none of the
 * blocks written after. Good segments keep theirs. One log line. */
static void bad_segment_files_replaced(void **state)
{
	char p[4][128], other[128];
	struct stat old[4], st;
	struct disk_stats ds;
	struct disk *d = open_sized(1u << 20, BS); /* 4 segments of 3 blocks */
	int held[4];

	if (!need_root()) {
		disk_close(d);
		return;
	}
	for (uint64_t b = 0; b < 12; b++) /* blocks 3s..3s+2 in segment s */
		put_block(d, b, BS);
	disk_close(d);
	for (int i = 0; i < 4; i++) {
		snprintf(p[i], sizeof(p[i]), "%s/seg-%04d.tfs", dir, i);
		/* as another user would hold it (and so that no inode number is reused) */
		held[i] = open(p[i], O_RDONLY);
		assert_true(held[i] >= 0);
		assert_int_equal(fstat(held[i], &old[i]), 0);
	}
	assert_int_equal(fchown(held[0], NOBODY, NOBODY), 0);
	assert_int_equal(fchmod(held[0], 0666), 0);
	assert_int_equal(fchmod(held[1], 0640), 0);
	assert_int_equal(link(p[2], at(other, "elsewhere")), 0);

	d = open_sized(1u << 20, BS);
	disk_get_stats(d, &ds);
	assert_int_equal(ds.recovered_blocks, 3);
	for (uint64_t b = 0; b < 9; b++)
		assert_false(disk_has(d, key(b)));
	for (uint64_t b = 9; b < 12; b++)
		expect_block(d, b, BS);
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "seg-0000.tfs was another user's"));
	assert_non_null(strstr(last_log, "(3 files so)"));
	for (int i = 0; i < 4; i++) {
		assert_int_equal(stat(p[i], &st), 0);
		assert_int_equal(st.st_uid, 0);
		assert_int_equal(st.st_mode & 07777, 0600);
		assert_int_equal(st.st_nlink, 1);
		if (i < 3)
			assert_int_not_equal(st.st_ino, old[i].st_ino);
		else
			assert_int_equal(st.st_ino, old[i].st_ino);
	}
	for (uint64_t b = 12; b < 24; b++) /* a full turn of the ring: every segment used */
		put_block(d, b, BS);
	disk_flush(d);
	expect_block(d, 12, BS);
	for (int i = 0; i < 3; i++) { /* the old inodes got nothing */
		assert_int_equal(fstat(held[i], &st), 0);
		assert_int_equal(st.st_size, old[i].st_size);
		assert_int_equal(st.st_mtim.tv_nsec, old[i].st_mtim.tv_nsec);
	}
	for (int i = 0; i < 4; i++)
		close(held[i]);
	disk_close(d);
}

/* A lock file that is not the tier's own (another user's, or mode 0666), held with flock
 * through a descriptor of its own, does not keep the tier out: it is replaced, and the new
 * one still keeps a second tier out. */
static void planted_lock_does_not_block(void **state)
{
	struct disk_cfg cfg = {.dir = dir, .size = 1u << 20, .block_size = BS};
	char lock[128];
	struct disk *d, *d2 = NULL;
	int held;

	for (int round = 0; round < 2; round++) {
		if (round == 0 && geteuid() != 0)
			continue;
		write_file(at(lock, "tierfs.lock"), "", 0666);
		if (round == 0)
			assert_int_equal(chown(lock, NOBODY, NOBODY), 0);
		held = open(lock, O_RDONLY);
		assert_true(held >= 0);
		assert_int_equal(flock(held, LOCK_EX | LOCK_NB), 0);
		logs = 0;
		d = open_sized(1u << 20, BS);
		assert_int_equal(logs, 1);
		assert_non_null(strstr(last_log, "tierfs.lock was"));
		assert_int_equal(disk_open(&cfg, &d2, NULL, 0), -EBUSY);
		disk_close(d);
		close(held);
	}
}

/* A directory under a segment's name (only we or root could have made it) cannot be
 * replaced: the tier fails to open, and says which errno; it is not a refusal (-EPERM). */
static void directory_as_segment_fails(void **state)
{
	struct disk_cfg cfg = {.dir = dir, .size = 1u << 20, .block_size = BS};
	char seg[128], inside[160];
	struct disk *d = NULL;

	assert_int_equal(mkdir(at(seg, "seg-0001.tfs"), 0700), 0);
	snprintf(inside, sizeof(inside), "%s/x", seg);
	write_file(inside, "x", 0600);
	assert_int_equal(disk_open(&cfg, &d, NULL, 0), -EISDIR);
	assert_null(d);
}

/* A segment header whose generation is near 2^64 (its CRC right) is a bad header: the
 * segment is reset, and the tier goes on writing and serving (the next generation given out
 * must not wrap to 0, which means "holds nothing"). */
static void huge_generation_reset(void **state)
{
	struct disk *d = open_sized(1u << 20, BS);
	unsigned char h[48];
	uint64_t g = UINT64_MAX;
	uint32_t c;
	int fd;

	put_block(d, 0, BS);
	disk_close(d);
	fd = seg_fd(0);
	assert_int_equal(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	memcpy(h + 32, &g, 8);
	c = crc32c(0, h, 44);
	memcpy(h + 44, &c, 4);
	assert_int_equal(pwrite(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);

	d = open_sized(1u << 20, BS);
	assert_false(disk_has(d, key(0)));
	assert_int_equal(logs, 1);
	assert_non_null(strstr(last_log, "unreadable header"));
	for (uint64_t b = 1; b < 8; b++)
		put_block(d, b, BS);
	disk_flush(d);
	for (uint64_t b = 1; b < 8; b++)
		expect_block(d, b, BS);
	disk_close(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(links_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(dir_link_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(dir_of_another_user_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(dir_writable_by_others_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(missing_dir_created_private, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_segment_files_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(planted_lock_does_not_block, setup, teardown),
		cmocka_unit_test_setup_teardown(directory_as_segment_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(huge_generation_reset, setup, teardown),
		cmocka_unit_test_setup_teardown(restart_keeps_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(torn_write_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(flipped_byte_caught, setup, teardown),
		cmocka_unit_test_setup_teardown(async_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(async_stop_finishes, setup, teardown),
		cmocka_unit_test_setup_teardown(direct_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(other_block_size_wiped, setup, teardown),
		cmocka_unit_test_setup_teardown(other_format_wiped, setup, teardown),
		cmocka_unit_test_setup_teardown(rotation_evicts_oldest_segment, setup, teardown),
		cmocka_unit_test_setup_teardown(full_queue_drops, setup, teardown),
		cmocka_unit_test_setup_teardown(default_queue_is_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(write_error_turns_writes_off, setup, teardown),
		cmocka_unit_test_setup_teardown(second_tier_refused, setup, teardown),
		cmocka_unit_test(geometry),
		cmocka_unit_test_setup_teardown(recovery_time, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
