/*
 * fuzz_disk.c - whole segment files through tiers/disk.c: the scan at disk_open and the
 * record reads after it (issue 28: a segment file may be corrupt, so every length and offset
 * in it is input).
 *
 * The tier is only reachable through a directory, so LLVMFuzzerInitialize() makes a private
 * one (mkdtemp: ours, 0700, as disk_open wants it), and each input is written into it as
 * segment files of a small tier (block_size 4 KiB, 256 KiB: 4 segments of 64 KiB, at most 7
 * records each), opened, read, closed and removed again.
 *
 * Input layout: byte 0 is a set of flags, the rest is cut at every "SEG\xff" into at most 4
 * pieces, each the whole content of one segment file:
 *
 *     bits 0-1   the first piece is segment (flags & 3); the next ones follow, modulo 4
 *     bit 2      make the CRCs right: the segment header's, and for each record the scan
 *                would reach, its header's and its data's (so the fuzzer gets past them,
 *                as a forged or an unlucky file would)
 *     bit 3      also write seg-0009.tfs, a segment beyond the ring (removed at open)
 *     bit 4      the first piece's file is mode 0644 (not the tier's own: removed unread)
 *     bit 5      after the open, put 8 blocks (a rotation at least), each read back
 *     bit 6      read the first block served again through disk_get_async (the reader
 *                thread's direct read and bounce buffer)
 *
 * The format (seg_hdr, rec_hdr) is disk.c's, mirrored here and in tests/fuzz/mkcorpus_disk.py
 * (which made the seeds in tests/fuzz/corpus/disk/). Checked beyond "no crash, no leak, no UB":
 *
 *   - disk_open succeeds (a bad segment is reset or wiped, never a failure);
 *   - the records found fit the geometry (at most 7 a segment), their bytes are at most
 *     block_size each; a lone piece whose file was 0644 yields none;
 *   - disk_get of any key answers 0, -ENOENT or -EBADMSG, and a 0 comes with bytes that are
 *     exactly the data of a record of that key and length in some piece (nothing else is
 *     ever served), whose CRC matches;
 *   - blocks put after the scan (whatever cursor and generations it left) are read back whole.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "disk.h"
#include "fuzz.h"

#define BS	  4096u
#define SIZE	  (256u << 10)
#define NSEG	  4
#define SEG_SIZE  (64u << 10)
#define HDR	  4096u /* a segment's header page; records start after it */
#define REC_DATA  4096u /* a record's data starts a page after its header */
#define REC_MAGIC 0x42524654u
#define MAX_RECS  (NSEG * ((SEG_SIZE - HDR) / (REC_DATA + BS)))
#define MAX_PIECE (2 * SEG_SIZE)

static const char sep[4] = {'S', 'E', 'G', '\xff'};
static char dir[64];

struct piece {
	unsigned char *b; /* the file's bytes (a copy: bit 2 rewrites CRCs) */
	size_t len;
	unsigned seg;     /* which segment file */
};

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t rec_size(uint32_t len)
{
	return REC_DATA + ((uint64_t)len + 4095) / 4096 * 4096;
}

static uint32_t key_crc(const unsigned char *rec)
{
	return crc32c(0, rec + 16, 24); /* hi, lo, blk as stored */
}

static void cleanup(void)
{
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	snprintf(dir, sizeof(dir), "/tmp/tierfs-fuzz-disk-XXXXXX");
	FUZZ_CHECK(mkdtemp(dir));
	atexit(cleanup);
	return 0;
}

/* Record @i of piece @p, walking as the scan does (a length of 1..BS, wholly inside the
 * piece's first SEG_SIZE bytes): its offset, or 0 when there is no such record. */
static size_t nth_record(const struct piece *p, unsigned i)
{
	size_t off = HDR;

	for (;;) {
		uint32_t len;

		if (off + 64 > p->len || off + 64 > SEG_SIZE)
			return 0;
		len = rd32(p->b + off + 4);
		if (!len || len > BS || off + rec_size(len) > SEG_SIZE)
			return 0;
		if (!i--)
			return off;
		off += rec_size(len);
	}
}

/* Bit 2: make the header's CRC and each record's CRCs right. */
static void fix_crcs(struct piece *p)
{
	size_t off;

	if (p->len >= 48) {
		uint32_t c = crc32c(0, p->b, 44);

		memcpy(p->b + 44, &c, 4);
	}
	for (unsigned i = 0; (off = nth_record(p, i)); i++) {
		uint32_t len = rd32(p->b + off + 4), c;
		size_t have = p->len > off + REC_DATA ? p->len - off - REC_DATA : 0;

		c = crc32c(key_crc(p->b + off), p->b + off + REC_DATA, have < len ? have : len);
		memcpy(p->b + off + 40, &c, 4);
		c = crc32c(0, p->b + off, 44);
		memcpy(p->b + off + 44, &c, 4);
	}
}

/* Cut @data at each separator into at most NSEG pieces. @return how many. */
static unsigned cut(const uint8_t *data, size_t size, unsigned first, struct piece *ret)
{
	unsigned n = 0;

	while (n < NSEG) {
		const uint8_t *end = memmem(data, size, sep, sizeof(sep));
		size_t len = end ? (size_t)(end - data) : size;

		if (len > MAX_PIECE)
			len = MAX_PIECE;
		ret[n].b = malloc(len + 1);
		FUZZ_CHECK(ret[n].b);
		memcpy(ret[n].b, data, len);
		ret[n].len = len;
		ret[n].seg = (first + n) % NSEG;
		n++;
		if (!end)
			break;
		size -= (size_t)(end - data) + sizeof(sep);
		data = end + sizeof(sep);
	}
	return n;
}

static void write_file(const char *name, const unsigned char *b, size_t len, mode_t mode)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(fchmod(fd, mode) == 0);
	FUZZ_CHECK(len == 0 || write(fd, b, len) == (ssize_t)len);
	close(fd);
}

/* Remove everything in the directory. */
static void empty_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	FUZZ_CHECK(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

/* Is @buf (@len bytes) the data of a record of @key in some piece from @k0 on? */
static bool served_from_a_record(const struct piece *ps, unsigned k0, unsigned n,
				 struct cache_key key, const unsigned char *buf, uint32_t len)
{
	for (unsigned k = k0; k < n; k++) {
		size_t off;

		for (unsigned i = 0; (off = nth_record(&ps[k], i)); i++) {
			const unsigned char *r = ps[k].b + off;

			if (rd32(r + 4) != len || rd64(r + 16) != key.oid.hi ||
			    rd64(r + 24) != key.oid.lo || rd64(r + 32) != key.blk ||
			    off + REC_DATA + len > ps[k].len)
				continue;
			if (!memcmp(r + REC_DATA, buf, len) &&
			    crc32c(key_crc(r), buf, len) == rd32(r + 40))
				return true;
		}
	}
	return false;
}

/* disk_get_async's answer, for the fuzzer's thread to wait on. */
struct wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int err;
};

static void async_done(void *arg, int err)
{
	struct wait *w = arg;

	pthread_mutex_lock(&w->lock);
	w->done = true;
	w->err = err;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Bit 6: read @key (@len bytes, served as @want a moment ago) again on a reader thread, into
 * a page-aligned buffer (the direct read's straight path). */
static void read_async(struct disk *d, struct cache_key key, const unsigned char *want,
		       uint32_t len)
{
	struct wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
	unsigned char *buf = aligned_alloc(4096, BS);
	int r;

	FUZZ_CHECK(buf);
	r = disk_get_async(d, key, buf, len, async_done, &w);
	FUZZ_CHECK(r == 0);
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	FUZZ_CHECK(w.err == 0 && !memcmp(buf, want, len));
	free(buf);
}

/* Ask for every key any piece holds a record of, at its length: only a record's own bytes
 * come back, and never one of the first piece's when its file was replaced (@skip_first). */
static void read_all(struct disk *d, const struct piece *ps, unsigned n, bool skip_first,
		     bool async)
{
	for (unsigned k = 0; k < n; k++) {
		size_t off;

		for (unsigned i = 0; (off = nth_record(&ps[k], i)); i++) {
			const unsigned char *r = ps[k].b + off;
			struct cache_key key = {{rd64(r + 16), rd64(r + 24)}, rd64(r + 32)};
			uint32_t len = rd32(r + 4);
			unsigned char *buf = malloc(len); /* exactly: a byte past it is caught */
			int g;

			FUZZ_CHECK(buf);
			g = disk_get(d, key, buf, len);
			FUZZ_CHECK(g == 0 || g == -ENOENT || g == -EBADMSG);
			if (g == 0) {
				FUZZ_CHECK(served_from_a_record(ps, skip_first, n, key, buf, len));
				if (async) {
					read_async(d, key, buf, len);
					async = false;
				}
			}
			free(buf);
		}
	}
}

/* Bit 5: blocks put now are written after whatever the scan left (8 of them: one segment
 * holds 7, so at least one rotation, which gives out the next generation), and read back
 * whole. */
static void put_and_read(struct disk *d)
{
	static unsigned char in[BS], out[BS];
	struct disk_stats st;

	for (uint64_t b = 0; b < 8; b++) {
		struct cache_key key = {{0xf0f0, 0x0f0f}, 77 + b};

		if (disk_has(d, key))
			continue; /* a piece holds this key already: a put would be ignored */
		memset(in, (int)b + 1, BS);
		disk_put(d, key, in, BS);
		disk_flush(d);
		disk_get_stats(d, &st);
		FUZZ_CHECK(st.writable && st.write_errors == 0);
		FUZZ_CHECK(disk_get(d, key, out, BS) == 0);
		FUZZ_CHECK(!memcmp(in, out, BS));
	}
}

static void no_log(void *arg, int level, const char *msg)
{
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct disk_cfg cfg = {.dir = dir, .size = SIZE, .block_size = BS, .readers = 1,
			       .log = no_log};
	struct piece ps[NSEG];
	struct disk_stats st;
	struct disk *d = NULL;
	unsigned n, flags;

	if (size < 1)
		return 0;
	flags = data[0];
	n = cut(data + 1, size - 1, flags & 3, ps);
	for (unsigned k = 0; k < n; k++) {
		char name[32];

		if (flags & 4)
			fix_crcs(&ps[k]);
		snprintf(name, sizeof(name), "seg-%04u.tfs", ps[k].seg);
		write_file(name, ps[k].b, ps[k].len, k == 0 && (flags & 16) ? 0644 : 0600);
	}
	if (flags & 8)
		write_file("seg-0009.tfs", ps[0].b, ps[0].len, 0600);

	FUZZ_CHECK(disk_open(&cfg, &d, NULL, 0) == 0);
	disk_get_stats(d, &st);
	FUZZ_CHECK(st.recovered_blocks <= MAX_RECS);
	FUZZ_CHECK(st.blocks <= st.recovered_blocks);
	FUZZ_CHECK(st.bytes <= st.blocks * BS);
	if ((flags & 16) && n == 1)
		FUZZ_CHECK(st.recovered_blocks == 0);
	read_all(d, ps, n, flags & 16, flags & 64);
	if (flags & 32)
		put_and_read(d);
	disk_close(d);

	empty_dir();
	for (unsigned k = 0; k < n; k++)
		free(ps[k].b);
	return 0;
}
