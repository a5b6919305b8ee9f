/*
 * disk.c - the disk tier: a segmented ring of files under cache_dir, rebuilt by a scan at open,
 * every record checked by CRC-32C when it is read.
 *
 * The design is ring.c's, on disk. cache_dir holds nseg segment files of at most seg_size bytes
 * each, used as a ring: records are appended to the current segment; when it is full the next
 * one in ring order is truncated and reused, which evicts everything it held at once, with no
 * per-block file, no LRU list and no walk of its index. A lock file keeps a second tier (this
 * process or another) out of the directory.
 *
 *   cache_dir/                   ours alone: our uid, no write bit for group or others
 *   cache_dir/tierfs.lock        flock(LOCK_EX) for the life of the tier
 *   cache_dir/seg-0000.tfs ...   one per segment, nseg of them; regular, ours, mode 0600
 *
 *   segment file (seg_size bytes at most; grows as records are appended, not preallocated)
 *   +----------------+-----------------+-------------+------+-----------------+--- ... --+
 *   | header (4 KiB) | rec hdr (4 KiB) | data (len)  | pad  | rec hdr (4 KiB) | data ... |
 *   +----------------+-----------------+-------------+------+-----------------+--- ... --+
 *    magic "TIERFSD\0", format version, block_size, seg_size, nseg, segment index, gen, CRC
 *                     rec hdr (64 bytes, then zeros to its page): magic, len, gen, key
 *                     (oid hi, lo, blk), CRC-32C of key + data, CRC-32C of the header;
 *                     records and their data start at 4 KiB boundaries
 *
 * Generations. Every rotation gives the segment it reuses a new generation, one more than any
 * segment has: the segment with the highest generation is the current one, and ring order
 * from it backwards is newest to oldest, so scan order is recoverable from the headers alone.
 * A record carries its segment's generation: bytes left behind by an older use of the segment
 * never pass for records of this one.
 *
 * Recovery (disk_open): read each segment header, then each record header in turn, indexing
 * records until the first one that is not a whole record of this generation (bad magic or
 * header CRC, other generation, or running past the end of the file: a torn write). The data
 * is not read: it is checked when it is served. Appending resumes after the last good record
 * of the current segment. A header of another format version, block_size or geometry wipes
 * every segment (one log line); a segment whose own header is unreadable is reset alone.
 *
 * Trust. cache_dir is storage other local users may reach, so nothing in it is used on the
 * strength of its name. disk_open opens the directory itself (O_PATH | O_NOFOLLOW: a symbolic
 * link is refused, not followed; trailing slashes, which would make the kernel follow one, are
 * cut; a missing directory is created 0700 first, then opened and checked like any other) and
 * refuses it, -EPERM with the reason and the fix in one line, unless it belongs to the user
 * tierfs runs as and neither group nor others may write it. From then on every access is
 * relative to that descriptor (openat, fstatat, unlinkat, a readdir of a dup of it): renaming
 * cache_dir, or a directory above it, changes nothing for this tier.
 *
 * Once the directory passed, only its owner (us) and root can add, remove or rename entries
 * in it. A file in it may still be someone else's, planted while the directory was open to
 * them and perhaps still held open by them. So each file (the lock and every segment) is
 * created O_EXCL | O_NOFOLLOW at mode 0600, or, if one is there, used only if it is a regular
 * file of ours with one name and no permission bits for group or others (checked with
 * fstatat before opening, and on the descriptor after). Anything else is removed unread and
 * created anew. Anew rather than chmod-ed and truncated: permissions are checked at open(),
 * so a descriptor another user opened while the file was theirs, or 0666, would go on reading
 * and writing every block put in it; a new inode leaves that descriptor on a file nothing uses.
 * Likewise a flock held through a planted tierfs.lock no longer keeps the tier out. Removing
 * is safe because nobody else can put a file back under that name, and a good lock file is
 * never removed (a live tier, which made it, may hold it). A link or a directory under a
 * segment's name is removed too, never followed (a non-empty directory: disk_open fails).
 *
 * A segment file that passed is ours, but its bytes are still input: a crash, a bad disk or
 * an older tierfs may have left anything in it. Every length and offset read from it is
 * bounded by the geometry before it is used (a record's length by block_size, its end by
 * seg_size and by the file's size, the count by the index's room, a generation by GEN_LIMIT),
 * and a record's bytes are checked by CRC when they are served. tests/fuzz/fuzz_disk.c feeds
 * whole hostile segment files, CRCs right or wrong, to the scan and the read.
 *
 * Crash safety. Writes are ordered: a rotation truncates the segment and writes its new
 * header before any record; a record goes into the index only after its pwrite returned.
 * After kill -9, everything written is in the page cache and survives; what the queue held is
 * lost. After a power loss (there is no fsync) any tail of a segment may be missing or torn:
 * the scan stops at it, or the CRC rejects it at read time. A record that fails its check is
 * dropped from the index and counted, never served; the reader gets -EBADMSG and the cache
 * fetches the block from the store again.
 *
 * Index: per segment, an open-addressing table (linear probing, at most half full) of
 * key -> (offset, length), as ring.c: a slot is live while its table generation equals the
 * segment's, so clearing a segment's index is one increment. A lookup probes the segments
 * newest to oldest.
 *
 * Threads and locking. One mutex, d->lock, guards the index, the segments' state, the queue
 * and the counters. It is never held for I/O. Readers (disk_get) find a record under the lock,
 * pread it without the lock, and take the lock again to check that the segment's generation
 * did not change meanwhile (a seqlock): a record is never rewritten within a generation, so an
 * unchanged generation means the bytes read are the record's. The cache reads through
 * disk_get_async: a block the index lacks is a miss answered at once; a resident one is queued
 * (FIFO) for a small pool of reader threads (cfg.readers, 4 by default, started by the first
 * read for the writer's reason below) that run disk_get and call the cache back. So the
 * thread that asks, a FUSE worker or the backend's I/O thread (which must never wait for a
 * disk), only queues, and the blocks of a readahead window are read in parallel (a virtio or
 * NVMe disk serves several 4 MiB reads at once faster than one after another). The queue is
 * not bounded: the cache asks for at most its flights, which its memory bounds.
 * disk_stop_reads lets the readers finish the queue (every callback runs) and stops them, so
 * the mount can stop them before freeing the cache. One writer thread, started by
 * the first disk_put (so that a tier opened before a fork works in the child), owns all
 * writes: disk_put copies the block into a bounded FIFO (drops when full, never waits) and the
 * writer appends it. The first write error (ENOSPC, EIO, EROFS...) turns writes off for the
 * life of the tier, with one log line; reads go on from what is there. A read error drops the
 * record and is served as a miss.
 *
 * Reads bypass the page cache where the file system allows (O_DIRECT): a record's data
 * starts at a page boundary, and so does every block of a page or more in a memory ring, so
 * one direct read puts the data's whole pages straight into the ring; only the header's page
 * and a last partial page land in the reader thread's own aligned buffer (block_size +
 * 4 KiB, which takes the whole record when the destination is not page aligned). The memory
 * tiers are the cache of what is read again; the page cache would only hold a second copy
 * and cost its upkeep on every hit. Writes stay buffered (the writer is off the reader's
 * path; its pages are left clean and reclaimable).
 *
 * Workload: a read of a block the memory tiers lost does one index lookup and one read of
 * 4 KiB + block_size (rounded to a page when direct), on a reader thread; each block
 * fetched from the store is written once, in the background. The format is the host's byte
 * order (a cache moved between machines of another order reads as another format and is
 * wiped).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "disk.h"

#define DISK_VERSION 2  /* 2: a record's data starts a page after its header */
#define SEG_HDR_SIZE 4096u  /* the header's page; records start after it */
#define REC_ALIGN 4096u     /* records start at page boundaries */
#define REC_DATA 4096u      /* and their data one page after (so it can be read O_DIRECT) */
#define DIO_ALIGN 4096u     /* direct reads: buffer alignment (any device's logical block) */
#define REC_MAGIC 0x42524654u /* "TFRB" */
#define MIN_SEG 4
#define DEF_READERS 4
#define MAX_SEG 64
/* A generation above it is a bad header: one rotation adds one, so no tier gets near it, and
 * the next generation given out can never wrap to 0 (which means "holds nothing"). */
#define GEN_LIMIT (1ull << 62)

static const char seg_magic[8] = "TIERFSD";

/* Segment header, at offset 0 of each segment file. */
struct seg_hdr {
	char magic[8];       /* seg_magic */
	uint32_t version;    /* DISK_VERSION */
	uint32_t block_size;
	uint64_t seg_size;
	uint32_t nseg;
	uint32_t index;      /* which segment of the ring this file is */
	uint64_t gen;        /* generation of this use of the segment; > 0 */
	uint32_t pad;
	uint32_t hcrc;       /* CRC-32C of the bytes before it */
};

/* Record header, at a REC_ALIGN boundary; its data, len bytes, starts REC_DATA after it. */
struct rec_hdr {
	uint32_t magic;      /* REC_MAGIC */
	uint32_t len;        /* data bytes, 1..block_size */
	uint64_t gen;        /* its segment's generation when written */
	uint64_t hi, lo, blk; /* the key */
	uint32_t crc;        /* CRC-32C of hi, lo, blk (as stored here) and the data */
	uint32_t hcrc;       /* CRC-32C of the bytes before it */
	uint64_t pad[2];
};
_Static_assert(sizeof(struct rec_hdr) == 64, "record header is 64 bytes");

enum { SLOT_LIVE = 1, SLOT_DEAD };

/* Index slot: empty unless tgen equals its segment's tgen. */
struct dslot {
	uint64_t hi, lo, blk;
	uint64_t off;   /* record header offset in the segment file */
	uint32_t len;
	uint32_t tgen;
	uint32_t state;
};

/* One segment file. Every field under d->lock; fd is constant after open. */
struct dseg {
	int fd;
	int dfd;            /* the same file opened O_DIRECT for reads, -1 if the fs refuses */
	uint64_t gen;       /* on-disk generation, 0: holds nothing (never used, or reset) */
	uint32_t tgen;      /* table generation: slots with another are empty */
	uint64_t cursor;    /* where the next record goes */
	uint32_t used;      /* slots taken this table generation (live or dead) */
	uint64_t live;      /* live records */
	uint64_t bytes;     /* their data bytes */
	struct dslot *table;
};

/* A read for disk_get_async, waiting for a reader thread. */
struct rreq {
	struct rreq *next;
	struct cache_key key;
	void *dst;
	uint32_t len;
	void (*done)(void *arg, int err);
	void *arg;
};

/* A block waiting to be written. */
struct witem {
	struct witem *next;
	struct cache_key key;
	uint32_t len;
	unsigned char data[];
};

struct disk {
	struct disk_cfg cfg;
	int dirfd;
	int lockfd;                /* holds the flock */
	uint32_t nseg;
	uint64_t seg_size;
	uint32_t tsize;            /* slots per segment table, power of two */
	uint32_t max_entries;      /* records per segment: tsize / 2 */

	pthread_mutex_t lock;
	pthread_cond_t wake;       /* the writer waits for work */
	pthread_cond_t idle;       /* disk_flush waits for done_seq */
	struct dseg *seg;          /* nseg of them */
	uint32_t cur;              /* current segment; d->lock */
	uint64_t gen_max;          /* highest generation given out; d->lock */
	struct witem *qhead, *qtail; /* write queue; d->lock */
	uint64_t qbytes;           /* its bytes; d->lock */
	uint64_t put_seq, done_seq; /* items queued / written or dropped by the writer; d->lock */
	bool writable;             /* writes on; d->lock */
	bool stop;                 /* disk_close: finish the queue and exit; d->lock */
	bool held;                 /* disk_hold_writer: the writer waits; d->lock */
	pthread_t writer;
	bool started;              /* the writer runs (from the first put); d->lock */
	struct rreq *rhead, *rtail; /* read queue; d->lock */
	pthread_cond_t rwake;      /* readers wait for work */
	uint32_t nreaders;         /* reader threads running; d->lock */
	bool rstop;                /* disk_stop_reads: finish the queue and exit; d->lock */
	pthread_t *readers;        /* cfg.readers of them, started by the first async read */
	struct disk_stats st;      /* counters; d->lock */
};

static void logf_(struct disk *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct disk *d, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!d->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	d->cfg.log(d->cfg.log_arg, 1, buf);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t rec_size(uint32_t len)
{
	return REC_DATA + ((uint64_t)len + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
}

/* The geometry of a tier of @size bytes: @return 0 and the segments, or -EINVAL. */
static int geometry(uint64_t size, uint32_t block_size, uint32_t *ret_nseg, uint64_t *ret_seg_size)
{
	uint64_t nseg, seg;

	if (!block_size || (block_size & (block_size - 1)))
		return -EINVAL;
	nseg = size / block_size / 16; /* segments of about 16 blocks... */
	if (nseg < MIN_SEG)
		nseg = MIN_SEG;
	if (nseg > MAX_SEG)
		nseg = MAX_SEG; /* ...but few enough that a lookup probing each stays cheap */
	seg = size / nseg / REC_ALIGN * REC_ALIGN;
	if (seg < SEG_HDR_SIZE + 2 * rec_size(block_size))
		return -EINVAL;
	*ret_nseg = (uint32_t)nseg;
	*ret_seg_size = seg;
	return 0;
}

int disk_geometry(uint64_t size, uint32_t block_size)
{
	uint32_t n;
	uint64_t seg;

	return geometry(size, block_size, &n, &seg);
}

uint64_t disk_min_size(uint32_t block_size)
{
	return MIN_SEG * (SEG_HDR_SIZE + 2 * rec_size(block_size));
}

static uint32_t hash(uint64_t hi, uint64_t lo, uint64_t blk)
{
	uint64_t h = (lo ^ hi) * 0x9e3779b97f4a7c15ULL ^ (blk + 0x632be59bd9b4e019ULL);

	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	return (uint32_t)h;
}

static bool slot_is(const struct dslot *sl, struct cache_key k)
{
	return sl->hi == k.oid.hi && sl->lo == k.oid.lo && sl->blk == k.blk;
}

/* The live slot of @k in segment @s, or NULL (d->lock held). */
static struct dslot *seg_find(struct disk *d, struct dseg *s, struct cache_key k)
{
	uint32_t mask = d->tsize - 1;

	if (!s->gen)
		return NULL;
	for (uint32_t i = hash(k.oid.hi, k.oid.lo, k.blk) & mask;; i = (i + 1) & mask) {
		struct dslot *sl = &s->table[i];

		if (sl->tgen != s->tgen)
			return NULL;
		if (sl->state == SLOT_LIVE && slot_is(sl, k))
			return sl;
	}
}

/* The newest live slot of @k, and its segment (d->lock held). */
static struct dslot *find(struct disk *d, struct cache_key k, uint32_t *ret_seg)
{
	for (uint32_t n = 0; n < d->nseg; n++) {
		uint32_t i = (d->cur + d->nseg - n) % d->nseg;
		struct dslot *sl = seg_find(d, &d->seg[i], k);

		if (sl) {
			*ret_seg = i;
			return sl;
		}
	}
	return NULL;
}

/* Index a record of segment @s (d->lock held; s->used < max_entries). A live older record
 * of the same key in this segment dies: the newer wins. */
static void seg_insert(struct disk *d, struct dseg *s, struct cache_key k, uint64_t off,
		       uint32_t len)
{
	uint32_t mask = d->tsize - 1;
	struct dslot *sl;

	for (uint32_t i = hash(k.oid.hi, k.oid.lo, k.blk) & mask;; i = (i + 1) & mask) {
		sl = &s->table[i];
		if (sl->tgen != s->tgen)
			break;
		if (sl->state == SLOT_LIVE && slot_is(sl, k)) {
			sl->state = SLOT_DEAD;
			s->live--;
			s->bytes -= sl->len;
		}
	}
	*sl = (struct dslot){k.oid.hi, k.oid.lo, k.blk, off, len, s->tgen, SLOT_LIVE};
	s->used++;
	s->live++;
	s->bytes += len;
}

static void slot_kill(struct dseg *s, struct dslot *sl)
{
	sl->state = SLOT_DEAD;
	s->live--;
	s->bytes -= sl->len;
}

/* Forget everything segment @s indexes (d->lock held): one generation bump. */
static void seg_clear(struct disk *d, struct dseg *s)
{
	if (++s->tgen == 0) {
		memset(s->table, 0, (size_t)d->tsize * sizeof(*s->table));
		s->tgen = 1;
	}
	s->gen = 0;
	s->used = 0;
	s->live = 0;
	s->bytes = 0;
	s->cursor = SEG_HDR_SIZE;
}

static uint32_t hdr_crc(const void *h, size_t upto)
{
	return crc32c(0, h, upto);
}

static uint32_t key_crc(struct cache_key k)
{
	uint64_t kb[3] = {k.oid.hi, k.oid.lo, k.blk};

	return crc32c(0, kb, sizeof(kb));
}

static void seg_name(uint32_t i, char buf[32])
{
	snprintf(buf, 32, "seg-%04u.tfs", i);
}

/* ---------------------------------------------------------------------------------------------
 * Recovery
 * ------------------------------------------------------------------------------------------ */

enum hdr_verdict { HDR_EMPTY, HDR_OK, HDR_BAD, HDR_FOREIGN };

static enum hdr_verdict read_seg_hdr(struct disk *d, uint32_t i, uint64_t *ret_gen,
				     const char **ret_why)
{
	struct seg_hdr h;
	ssize_t n = pread(d->seg[i].fd, &h, sizeof(h), 0);

	if (n == 0)
		return HDR_EMPTY;
	if (n != (ssize_t)sizeof(h) || memcmp(h.magic, seg_magic, sizeof(seg_magic)) ||
	    h.hcrc != hdr_crc(&h, offsetof(struct seg_hdr, hcrc)))
		return HDR_BAD;
	if (h.version != DISK_VERSION) {
		*ret_why = "another format version";
		return HDR_FOREIGN;
	}
	if (h.block_size != d->cfg.block_size) {
		*ret_why = "another block_size";
		return HDR_FOREIGN;
	}
	if (h.seg_size != d->seg_size || h.nseg != d->nseg || h.index != i) {
		*ret_why = "another disk_size";
		return HDR_FOREIGN;
	}
	if (!h.gen || h.gen > GEN_LIMIT)
		return HDR_BAD;
	*ret_gen = h.gen;
	return HDR_OK;
}

/* Index the records of segment @i (generation @gen) up to the first that is not whole. */
static void scan_records(struct disk *d, uint32_t i, uint64_t gen)
{
	struct dseg *s = &d->seg[i];
	struct stat stb;
	uint64_t off = SEG_HDR_SIZE, fsize;

	s->gen = gen;
	s->cursor = SEG_HDR_SIZE;
	if (fstat(s->fd, &stb) < 0)
		return;
	fsize = (uint64_t)stb.st_size;
	while (off + sizeof(struct rec_hdr) <= fsize && s->used < d->max_entries) {
		struct rec_hdr h;

		if (pread(s->fd, &h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h))
			break;
		if (h.magic != REC_MAGIC || h.hcrc != hdr_crc(&h, offsetof(struct rec_hdr, hcrc)) ||
		    h.gen != gen || !h.len || h.len > d->cfg.block_size ||
		    off + rec_size(h.len) > d->seg_size ||
		    off + REC_DATA + h.len > fsize)
			break;
		seg_insert(d, s, (struct cache_key){{h.hi, h.lo}, h.blk}, off, h.len);
		d->st.recovered_blocks++;
		off += rec_size(h.len);
	}
	s->cursor = off;
}

/* Remove segment files this geometry does not use (a larger nseg before). */
static void unlink_extra(struct disk *d)
{
	int fd = dup(d->dirfd);
	DIR *dir = fd < 0 ? NULL : fdopendir(fd);
	struct dirent *e;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(dir))) {
		unsigned idx;
		char tail[8];

		if (sscanf(e->d_name, "seg-%u.%3s", &idx, tail) == 2 && !strcmp(tail, "tfs") &&
		    idx >= d->nseg)
			unlinkat(d->dirfd, e->d_name, 0);
	}
	closedir(dir);
}

static int recover(struct disk *d)
{
	uint64_t t0 = mono_ms();
	const char *why = NULL;
	uint32_t bad = 0;
	uint64_t *gens = calloc(d->nseg, sizeof(*gens));
	enum hdr_verdict *v = calloc(d->nseg, sizeof(*v));
	int r = 0;

	if (!gens || !v) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < d->nseg; i++) {
		v[i] = read_seg_hdr(d, i, &gens[i], &why);
		if (v[i] == HDR_FOREIGN)
			break;
	}
	for (uint32_t i = 0; i < d->nseg; i++) {
		if (why) { /* one foreign header: the whole cache is another format's */
			if (ftruncate(d->seg[i].fd, 0) < 0) {
				r = -errno;
				goto out;
			}
			continue;
		}
		if (v[i] == HDR_OK)
			scan_records(d, i, gens[i]);
		else if (v[i] == HDR_BAD) {
			bad++;
			if (ftruncate(d->seg[i].fd, 0) < 0) {
				r = -errno;
				goto out;
			}
		}
	}
	unlink_extra(d);
	if (why)
		logf_(d, "disk tier %s: wiped a cache of %s (format %u, block_size %u, %u segments)",
		      d->cfg.dir, why, DISK_VERSION, d->cfg.block_size, d->nseg);
	else if (bad)
		logf_(d, "disk tier %s: reset %u segment(s) with an unreadable header", d->cfg.dir,
		      bad);
	/* the current segment is the newest; an empty cache starts before segment 0 */
	d->cur = d->nseg - 1;
	for (uint32_t i = 0; i < d->nseg; i++) {
		if (d->seg[i].gen > d->gen_max) {
			d->gen_max = d->seg[i].gen;
			d->cur = i;
		}
	}
	d->st.recovery_ms = mono_ms() - t0;
out:
	free(gens);
	free(v);
	return r;
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------ */

/* Turn writes off after an error (d->lock not held). */
static void write_failed(struct disk *d, const char *what, int err)
{
	bool was;

	pthread_mutex_lock(&d->lock);
	d->st.write_errors++;
	was = d->writable;
	d->writable = false;
	pthread_mutex_unlock(&d->lock);
	if (was)
		logf_(d, "disk tier %s: %s failed (%s): writes off, reads go on", d->cfg.dir, what,
		      strerror(err));
}

static int pwrite_all(int fd, const struct iovec *iov, int n, off_t off, size_t total)
{
	ssize_t w = pwritev(fd, iov, n, off);

	if (w < 0)
		return -errno;
	if ((size_t)w != total)
		return -ENOSPC; /* a short write: the file system is full */
	return 0;
}

static void write_item(struct disk *d, struct witem *it)
{
	uint32_t crc = crc32c(key_crc(it->key), it->data, it->len);
	uint64_t need = rec_size(it->len), off, gen;
	bool rotate;
	struct dseg *s;
	uint32_t si;
	int r;

	pthread_mutex_lock(&d->lock);
	s = &d->seg[d->cur];
	rotate = !s->gen || s->cursor + need > d->seg_size || s->used >= d->max_entries;
	if (rotate) {
		d->cur = (d->cur + 1) % d->nseg;
		s = &d->seg[d->cur];
		if (s->gen)
			d->st.rotations++;
		seg_clear(d, s);
		s->gen = ++d->gen_max;
	}
	si = d->cur;
	gen = s->gen;
	off = s->cursor;
	s->cursor += need;
	pthread_mutex_unlock(&d->lock);

	if (rotate) {
		struct seg_hdr h = {.version = DISK_VERSION,
				    .block_size = d->cfg.block_size,
				    .seg_size = d->seg_size,
				    .nseg = d->nseg,
				    .index = si,
				    .gen = gen};
		struct iovec iov = {&h, sizeof(h)};

		memcpy(h.magic, seg_magic, sizeof(h.magic));
		h.hcrc = hdr_crc(&h, offsetof(struct seg_hdr, hcrc));
		/* old records go first: a crash between the two leaves an empty segment */
		if (ftruncate(s->fd, 0) < 0) {
			write_failed(d, "truncating a segment", errno);
			return;
		}
		r = pwrite_all(s->fd, &iov, 1, 0, sizeof(h));
		if (r < 0) {
			write_failed(d, "writing a segment header", -r);
			return;
		}
	}

	struct rec_hdr h = {.magic = REC_MAGIC,
			    .len = it->len,
			    .gen = gen,
			    .hi = it->key.oid.hi,
			    .lo = it->key.oid.lo,
			    .blk = it->key.blk,
			    .crc = crc};
	static const unsigned char zeros[REC_DATA - sizeof(struct rec_hdr)];
	struct iovec iov[3] = {{&h, sizeof(h)}, {(void *)zeros, sizeof(zeros)}, {it->data, it->len}};

	h.hcrc = hdr_crc(&h, offsetof(struct rec_hdr, hcrc));
	r = pwrite_all(s->fd, iov, 3, (off_t)off, REC_DATA + it->len);
	if (r < 0) {
		write_failed(d, "writing a block", -r);
		return;
	}
	pthread_mutex_lock(&d->lock);
	if (s->gen == gen) { /* only this thread rotates, but stay honest */
		seg_insert(d, s, it->key, off, it->len);
		d->st.writes++;
		d->st.bytes_written += it->len;
	}
	pthread_mutex_unlock(&d->lock);
}

static void *writer_main(void *arg)
{
	struct disk *d = arg;

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct witem *it = d->qhead;
		bool on;

		if (!it || (d->held && !d->stop)) {
			if (!it && d->stop)
				break;
			pthread_cond_wait(&d->wake, &d->lock);
			continue;
		}
		on = d->writable;
		pthread_mutex_unlock(&d->lock);
		if (on)
			write_item(d, it);
		pthread_mutex_lock(&d->lock);
		/* dequeued only now, so that disk_put sees the key as queued until indexed */
		d->qhead = it->next;
		if (!d->qhead)
			d->qtail = NULL;
		d->qbytes -= it->len;
		if (!on)
			d->st.write_drops++;
		d->done_seq++;
		pthread_cond_broadcast(&d->idle);
		free(it);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Interface
 * ------------------------------------------------------------------------------------------ */

/*
 * Open segment @i (@name, already open as d->seg[i].fd) again with O_DIRECT, for the reader
 * threads: a disk hit then goes from the device into the reader's bounce buffer, without
 * passing through the page cache. Through the page cache it cost a copy into cached pages
 * plus their upkeep (adding, marking, reclaiming: a third of tierfs's time in a profile of a
 * disk-hit read), for a second copy of blocks the memory tiers already hold. @return the fd,
 * or -1 where the file system refuses O_DIRECT (tmpfs: EINVAL), or the name no longer is the
 * file we hold: the buffered fd serves then.
 */
static int open_direct(struct disk *d, uint32_t i, const char *name)
{
	struct stat a, b;
	int fd = openat(d->dirfd, name, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -1;
	if (fstat(fd, &a) < 0 || fstat(d->seg[i].fd, &b) < 0 || a.st_ino != b.st_ino ||
	    a.st_dev != b.st_dev) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A burst is bytes of readahead (a batch is up to 16 MiB, several streams at once), not a
 * count of blocks: 16 blocks of 64 KiB (1 MiB) dropped most of one batch of small blocks. */
uint64_t disk_default_queue_bytes(uint32_t block_size)
{
	uint64_t blocks = 16 * (uint64_t)block_size;

	return blocks > DISK_QUEUE_MIN ? blocks : DISK_QUEUE_MIN;
}

/* ---------------------------------------------------------------------------------------------
 * Opening: cache_dir and its files, checked before anything in them is used ("Trust")
 * ------------------------------------------------------------------------------------------ */

/* A cache_dir that is not ours alone: say why and how to fix it in @why. @return -EPERM. */
static int refuse(char *why, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, n, fmt, ap);
	va_end(ap);
	return -EPERM;
}

/* Is the directory @st (cache_dir, named @dir) ours alone: owned by the user we run as, and
 * writable by nobody else? @return 0, or -EPERM with the reason in @why. */
static int check_dir(const char *dir, const struct stat *st, char *why, size_t n)
{
	unsigned me = (unsigned)geteuid();
	mode_t w = st->st_mode & (S_IWGRP | S_IWOTH);
	const char *who = w == S_IWGRP ? "its group" : w == S_IWOTH ? "others" : "group and others";

	if (st->st_uid != me)
		return refuse(why, n,
			      "%s: owned by uid %u, not %u (the user tierfs runs as): another user "
			      "could plant blocks in it or read them; use a directory of uid %u "
			      "that only it can write (mode 0700), e.g. systemd's CacheDirectory=",
			      dir, (unsigned)st->st_uid, me, me);
	if (w)
		return refuse(why, n,
			      "%s: mode %04o lets %s write it: another user could plant blocks in "
			      "it or read them; chmod go-w it (0700 is best) or use a directory "
			      "only uid %u can write",
			      dir, (unsigned)(st->st_mode & 07777), who, me);
	return 0;
}

/*
 * Open cache_dir as d->dirfd, creating it (mode 0700) if it is missing, and check it: the
 * directory itself, never a symbolic link (cut of trailing slashes, which would make the
 * kernel follow one), owned by us and writable by nobody else. @return 0; -EPERM with the
 * reason in @why; -ENOTDIR; or the -errno of mkdir or open.
 */
static int open_dir(struct disk *d, char *why, size_t n)
{
	char *path = strdup(d->cfg.dir);
	size_t len = path ? strlen(path) : 0;
	struct stat st;
	int pfd = -1, r;

	if (!path)
		return -ENOMEM;
	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		goto out;
	}
	/* O_PATH | O_NOFOLLOW opens a final symbolic link itself, so fstat can name it */
	pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0 || fstat(pfd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {
		r = refuse(why, n,
			   "%s: is a symbolic link: name the directory itself (whoever can change "
			   "the link could point tierfs at files it would truncate and remove)",
			   d->cfg.dir);
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		r = -ENOTDIR;
		goto out;
	}
	d->dirfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->dirfd < 0 || fstat(d->dirfd, &st) < 0) {
		r = -errno;
		goto out;
	}
	r = check_dir(d->cfg.dir, &st, why, n);
out:
	if (pfd >= 0)
		close(pfd);
	free(path);
	return r;
}

/* Why a file found in cache_dir is not the tier's own, or NULL: it must be a regular file of
 * the user we run as, with one name and no permission bits for group or others. */
static const char *file_flaw(const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if (st->st_uid != geteuid())
		return "another user's";
	if (st->st_mode & (S_ISUID | S_ISGID | S_ISVTX | S_IRWXG | S_IRWXO))
		return "open to group or others";
	if (st->st_nlink != 1)
		return "linked under another name";
	return NULL;
}

/* Files open_own removed, for one log line. */
struct replaced {
	unsigned n;
	char first[32];    /* the first one's name */
	const char *flaw;  /* and what was wrong with it */
};

/*
 * Open @name in cache_dir, read-write, as the tier's own: created (O_EXCL, mode 0600), or the
 * file there if file_flaw finds nothing wrong with it, checked again on the open descriptor.
 * A flawed one is removed without being opened and created anew ("Trust"), and counted in
 * @rp. @return the descriptor, or -errno.
 */
static int open_own(struct disk *d, const char *name, struct replaced *rp)
{
	const int excl = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;

	for (int tries = 0; tries < 3; tries++) {
		const char *flaw;
		struct stat st;
		int fd = openat(d->dirfd, name, excl, 0600);

		if (fd >= 0) {
			fchmod(fd, 0600); /* what the umask took; it cannot have added any */
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
		if (fstatat(d->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		flaw = file_flaw(&st);
		if (!flaw) {
			fd = openat(d->dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0 || fstat(fd, &st) < 0) {
				int r = -errno;

				if (fd >= 0)
					close(fd);
				return r;
			}
			flaw = file_flaw(&st);
			if (!flaw)
				return fd;
			close(fd);
		}
		if (unlinkat(d->dirfd, name, 0) < 0)
			return -errno;
		if (!rp->n++) {
			snprintf(rp->first, sizeof(rp->first), "%s", name);
			rp->flaw = flaw;
		}
	}
	return -EEXIST;
}

/* Open and lock tierfs.lock, then open every segment file (open_own). @return 0, -EBUSY
 * (another tier holds the directory), or -errno. */
static int open_files(struct disk *d)
{
	struct replaced rp = {0};
	int r = 0;

	d->lockfd = open_own(d, "tierfs.lock", &rp);
	if (d->lockfd < 0)
		return d->lockfd;
	if (flock(d->lockfd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	for (uint32_t i = 0; i < d->nseg; i++) {
		char name[32];

		seg_name(i, name);
		d->seg[i].fd = open_own(d, name, &rp);
		if (d->seg[i].fd < 0) {
			r = d->seg[i].fd;
			break;
		}
		d->seg[i].dfd = open_direct(d, i, name);
	}
	if (rp.n)
		logf_(d, "disk tier %s: %s was %s: removed unread and made anew (%u file%s so)",
		      d->cfg.dir, rp.first, rp.flaw, rp.n, rp.n == 1 ? "" : "s");
	return r;
}

/* The tier, its geometry and empty indexes, no file opened yet. @return 0 or -errno. */
static int new_disk(const struct disk_cfg *cfg, struct disk **ret)
{
	struct disk *d;
	uint32_t nseg;
	uint64_t seg_size;
	int r;

	r = geometry(cfg->size, cfg->block_size, &nseg, &seg_size);
	if (r < 0)
		return r;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->dirfd = d->lockfd = -1;
	d->nseg = nseg;
	d->seg_size = seg_size;
	/* room for twice the full-size blocks a segment holds (short last blocks), half full */
	d->max_entries = 16;
	while (d->max_entries < 2 * (seg_size / cfg->block_size))
		d->max_entries *= 2;
	d->tsize = 2 * d->max_entries;
	if (!d->cfg.queue_bytes)
		d->cfg.queue_bytes = disk_default_queue_bytes(cfg->block_size);
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->wake, NULL);
	pthread_cond_init(&d->idle, NULL);
	pthread_cond_init(&d->rwake, NULL);
	if (!d->cfg.readers)
		d->cfg.readers = DEF_READERS;
	d->writable = true;
	*ret = d; /* disk_close frees it from here on */
	d->seg = calloc(nseg, sizeof(*d->seg));
	if (!d->seg)
		return -ENOMEM;
	for (uint32_t i = 0; i < nseg; i++) {
		d->seg[i].fd = d->seg[i].dfd = -1;
		d->seg[i].table = calloc(d->tsize, sizeof(struct dslot));
		if (!d->seg[i].table)
			return -ENOMEM;
		d->seg[i].tgen = 1;
		d->seg[i].cursor = SEG_HDR_SIZE;
	}
	return 0;
}

int disk_open(const struct disk_cfg *cfg, struct disk **ret, char *err, size_t errlen)
{
	char why[512] = "";
	struct disk *d = NULL;
	int r = new_disk(cfg, &d);

	if (r == 0)
		r = open_dir(d, why, sizeof(why));
	if (r == 0)
		r = open_files(d);
	if (r == 0)
		r = recover(d);
	if (r < 0) {
		disk_close(d);
		/* -EPERM says "refused as unsafe" and nothing else: a system call's EPERM (an
		 * immutable file) is a file we cannot open, as EACCES is */
		if (r == -EPERM && !why[0])
			r = -EACCES;
		if (r == -EPERM && err && errlen)
			snprintf(err, errlen, "%s", why);
		return r;
	}
	*ret = d;
	return 0;
}

void disk_close(struct disk *d)
{
	if (!d)
		return;
	disk_stop_reads(d);
	pthread_mutex_lock(&d->lock);
	bool started = d->started;

	d->stop = true;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
	if (started)
		pthread_join(d->writer, NULL);
	for (uint32_t i = 0; d->seg && i < d->nseg; i++) {
		if (d->seg[i].fd >= 0)
			close(d->seg[i].fd);
		if (d->seg[i].dfd >= 0)
			close(d->seg[i].dfd);
		free(d->seg[i].table);
	}
	free(d->seg);
	if (d->lockfd >= 0)
		close(d->lockfd); /* drops the flock */
	if (d->dirfd >= 0)
		close(d->dirfd);
	pthread_cond_destroy(&d->wake);
	pthread_cond_destroy(&d->idle);
	pthread_cond_destroy(&d->rwake);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/*
 * Read the record of @key at @off of segment @si: its header into @h, its data into @dst.
 * With a @bounce buffer (a reader thread's: DIO_ALIGN aligned, rec_size(block_size) bytes)
 * and an O_DIRECT fd, one direct read: when @dst is page aligned (the ring puts every block
 * of a page or more at a page boundary), the data's whole pages go straight into @dst and
 * only the header's page and the data's last partial page into the bounce; otherwise the
 * whole record (page aligned and padded to a page) into the bounce, its data copied out.
 * Without, one buffered preadv. @return sizeof(*h) + len when both were read whole, 0 when
 * the file ended first, or -1 with errno.
 */
static ssize_t read_record(struct disk *d, uint32_t si, uint64_t off, struct rec_hdr *h,
			   void *dst, uint32_t len, unsigned char *bounce, bool *ret_direct)
{
	int dfd = d->seg[si].dfd;
	uint32_t body = len & ~(DIO_ALIGN - 1), tail = len - body;
	ssize_t n, whole = (ssize_t)(REC_DATA + len);

	*ret_direct = false;
	if (bounce && dfd >= 0) {
		bool straight = body && (uintptr_t)dst % DIO_ALIGN == 0;
		struct iovec iov[3] = {{bounce, REC_DATA}, {dst, body}, {bounce + REC_DATA, DIO_ALIGN}};

		if (straight)
			n = preadv(dfd, iov, tail ? 3 : 2, (off_t)off);
		else
			n = pread(dfd, bounce, rec_size(len), (off_t)off);
		if (n >= 0 || errno != EINVAL) { /* EINVAL: not for O_DIRECT after all */
			*ret_direct = true;
			if (n < whole) /* a read past the end of the file stops there */
				return n < 0 ? n : 0;
			memcpy(h, bounce, sizeof(*h));
			if (!straight)
				memcpy(dst, bounce + REC_DATA, len);
			else if (tail)
				memcpy((unsigned char *)dst + body, bounce + REC_DATA, tail);
			return (ssize_t)(sizeof(*h) + len);
		}
	}
	unsigned char pad[REC_DATA - sizeof(*h)]; /* the rest of the header's page */
	struct iovec iov[3] = {{h, sizeof(*h)}, {pad, sizeof(pad)}, {dst, len}};

	n = preadv(d->seg[si].fd, iov, 3, (off_t)off);
	if (n < whole)
		return n < 0 ? n : 0;
	return (ssize_t)(sizeof(*h) + len);
}

/* disk_get, with a reader thread's @bounce buffer for direct reads (NULL: buffered). */
static int get(struct disk *d, struct cache_key key, void *dst, uint32_t len,
	       unsigned char *bounce)
{
	struct rec_hdr h;
	struct dslot *sl;
	uint32_t si;
	uint64_t off, gen;
	ssize_t n;
	bool good, direct;

	pthread_mutex_lock(&d->lock);
	sl = find(d, key, &si);
	if (!sl || sl->len != len) {
		d->st.misses++;
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	gen = d->seg[si].gen;
	off = sl->off;
	pthread_mutex_unlock(&d->lock);

	n = read_record(d, si, off, &h, dst, len, bounce, &direct);
	int err = n < 0 ? errno : 0;

	good = n == (ssize_t)(sizeof(h) + len) && h.magic == REC_MAGIC && h.len == len &&
	       h.gen == gen && h.hi == key.oid.hi && h.lo == key.oid.lo && h.blk == key.blk &&
	       h.hcrc == hdr_crc(&h, offsetof(struct rec_hdr, hcrc)) &&
	       h.crc == crc32c(key_crc(key), dst, len);

	pthread_mutex_lock(&d->lock);
	if (d->seg[si].gen != gen) { /* rotated while we read: not a bad record, just gone */
		d->st.misses++;
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	if (!good) {
		struct dslot *again = seg_find(d, &d->seg[si], key);

		if (again && again->off == off)
			slot_kill(&d->seg[si], again);
		d->st.misses++;
		if (err)
			d->st.read_errors++;
		else
			d->st.crc_failures++;
		pthread_mutex_unlock(&d->lock);
		return err ? -err : -EBADMSG;
	}
	d->st.hits++;
	d->st.bytes_served += len;
	if (direct)
		d->st.direct_reads++;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

int disk_get(struct disk *d, struct cache_key key, void *dst, uint32_t len)
{
	return get(d, key, dst, len, NULL);
}

static void *reader_main(void *arg)
{
	struct disk *d = arg;
	/* this thread's buffer for direct reads; without one, its reads are buffered */
	unsigned char *bounce = aligned_alloc(DIO_ALIGN, rec_size(d->cfg.block_size));

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct rreq *q = d->rhead;
		int r;

		if (!q) {
			if (d->rstop)
				break;
			pthread_cond_wait(&d->rwake, &d->lock);
			continue;
		}
		d->rhead = q->next;
		if (!d->rhead)
			d->rtail = NULL;
		pthread_mutex_unlock(&d->lock);
		r = get(d, q->key, q->dst, q->len, bounce);
		q->done(q->arg, r);
		free(q);
		pthread_mutex_lock(&d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	free(bounce);
	return NULL;
}

/* Start the readers if none runs yet (d->lock held). @return how many run. */
static uint32_t start_readers(struct disk *d)
{
	if (d->nreaders || d->readers || d->rstop)
		return d->nreaders;
	d->readers = calloc(d->cfg.readers, sizeof(*d->readers));
	for (uint32_t i = 0; d->readers && i < d->cfg.readers; i++) {
		if (pthread_create(&d->readers[i], NULL, reader_main, d))
			break; /* fewer readers, still correct */
		d->nreaders++;
	}
	return d->nreaders;
}

int disk_get_async(struct disk *d, struct cache_key key, void *dst, uint32_t len,
		   void (*done)(void *arg, int err), void *arg)
{
	struct dslot *sl;
	struct rreq *q;
	uint32_t si;

	pthread_mutex_lock(&d->lock);
	if (d->rstop) {
		pthread_mutex_unlock(&d->lock);
		return -ESHUTDOWN;
	}
	sl = find(d, key, &si);
	if (!sl || sl->len != len) { /* a miss costs no thread hop */
		d->st.misses++;
		pthread_mutex_unlock(&d->lock);
		return -ENOENT;
	}
	/* started here, not in disk_open, for the writer's reason (a fork after open) */
	if (!start_readers(d)) {
		pthread_mutex_unlock(&d->lock);
		return -EAGAIN;
	}
	pthread_mutex_unlock(&d->lock);
	q = malloc(sizeof(*q));
	if (!q)
		return -ENOMEM;
	*q = (struct rreq){NULL, key, dst, len, done, arg};
	pthread_mutex_lock(&d->lock);
	if (d->rstop) {
		pthread_mutex_unlock(&d->lock);
		free(q);
		return -ESHUTDOWN;
	}
	if (d->rtail)
		d->rtail->next = q;
	else
		d->rhead = q;
	d->rtail = q;
	pthread_cond_signal(&d->rwake);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

void disk_stop_reads(struct disk *d)
{
	uint32_t n;

	pthread_mutex_lock(&d->lock);
	d->rstop = true;
	pthread_cond_broadcast(&d->rwake);
	n = d->nreaders;
	d->nreaders = 0;
	pthread_mutex_unlock(&d->lock);
	for (uint32_t i = 0; i < n; i++)
		pthread_join(d->readers[i], NULL);
	free(d->readers);
	d->readers = NULL;
}

bool disk_has(struct disk *d, struct cache_key key)
{
	uint32_t si;
	bool r;

	pthread_mutex_lock(&d->lock);
	r = find(d, key, &si) != NULL;
	pthread_mutex_unlock(&d->lock);
	return r;
}

void disk_put(struct disk *d, struct cache_key key, const void *src, uint32_t len)
{
	struct witem *it;
	uint32_t si;

	if (!len || len > d->cfg.block_size)
		return;
	pthread_mutex_lock(&d->lock);
	if (find(d, key, &si)) {
		pthread_mutex_unlock(&d->lock);
		return;
	}
	for (it = d->qhead; it; it = it->next) {
		if (cache_key_eq(it->key, key)) {
			pthread_mutex_unlock(&d->lock);
			return;
		}
	}
	if (!d->started && d->writable && !d->stop) {
		/* started here, not in disk_open: a tier opened before a fork (fuse_daemonize)
		 * gets its thread in the child */
		int r = pthread_create(&d->writer, NULL, writer_main, d);

		if (r == 0)
			d->started = true;
		else
			d->writable = false;
	}
	if (!d->writable || d->stop || d->qbytes + len > d->cfg.queue_bytes) {
		d->st.write_drops++;
		pthread_mutex_unlock(&d->lock);
		return;
	}
	d->qbytes += len; /* room taken now; the copy is made without the lock */
	pthread_mutex_unlock(&d->lock);

	it = malloc(sizeof(*it) + len);
	if (it) {
		it->next = NULL;
		it->key = key;
		it->len = len;
		memcpy(it->data, src, len);
	}
	pthread_mutex_lock(&d->lock);
	if (!it) {
		d->qbytes -= len;
		d->st.write_drops++;
	} else {
		if (d->qtail)
			d->qtail->next = it;
		else
			d->qhead = it;
		d->qtail = it;
		d->put_seq++;
		pthread_cond_signal(&d->wake);
	}
	pthread_mutex_unlock(&d->lock);
}

void disk_flush(struct disk *d)
{
	pthread_mutex_lock(&d->lock);
	uint64_t want = d->put_seq;

	while (d->done_seq < want)
		pthread_cond_wait(&d->idle, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

void disk_get_stats(struct disk *d, struct disk_stats *ret)
{
	pthread_mutex_lock(&d->lock);
	*ret = d->st;
	ret->blocks = 0;
	ret->bytes = 0;
	for (uint32_t i = 0; i < d->nseg; i++) {
		if (!d->seg[i].gen)
			continue;
		ret->blocks += d->seg[i].live;
		ret->bytes += d->seg[i].bytes;
	}
	ret->size = (uint64_t)d->nseg * d->seg_size;
	ret->queued_bytes = d->qbytes;
	ret->writable = d->writable;
	pthread_mutex_unlock(&d->lock);
}

void disk_hold_writer(struct disk *d, bool hold)
{
	pthread_mutex_lock(&d->lock);
	d->held = hold;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->lock);
}

void disk_each_block(struct disk *d, struct cache_oid obj, void (*fn)(void *arg, uint64_t blk),
		     void *arg)
{
	pthread_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < d->nseg; i++) {
		struct dseg *s = &d->seg[i];

		if (!s->gen)
			continue;
		for (uint32_t j = 0; j < d->tsize; j++) {
			struct dslot *sl = &s->table[j];

			if (sl->tgen == s->tgen && sl->state == SLOT_LIVE && sl->hi == obj.hi &&
			    sl->lo == obj.lo)
				fn(arg, sl->blk);
		}
	}
	pthread_mutex_unlock(&d->lock);
}

/* ---- the disk tier in the cache's chain ---------------------------------------------------- */

static void tier_got(void *arg, int err)
{
	tier_answer(arg, err);
}

static int tier_get(void *self, struct tier_io *io)
{
	return disk_get_async(self, io->key, io->dst, io->len, tier_got, io);
}

static bool tier_has(void *self, struct cache_key key)
{
	return disk_has(self, key);
}

/* Hot and written blocks are kept; lagging ones only with cfg.lagging (docs/caching.md,
 * "Disk tier"). */
static void tier_put(void *self, const struct tier_io *io, int err)
{
	struct disk *d = self;

	if (!err && (!io->lagging || d->cfg.lagging))
		disk_put(d, io->key, io->dst, io->len);
}

/* What the write queue can take now (a written object's blocks are offered at this pace,
 * cache_publish); a tier that writes nothing keeps nothing, so it never holds them back. */
static uint64_t tier_room(void *self)
{
	struct disk *d = self;
	uint64_t room = UINT64_MAX;

	pthread_mutex_lock(&d->lock);
	if (d->writable && !d->stop)
		room = d->qbytes < d->cfg.queue_bytes ? d->cfg.queue_bytes - d->qbytes : 0;
	pthread_mutex_unlock(&d->lock);
	return room;
}

static void tier_each(void *self, struct cache_oid oid, void (*fn)(void *arg, uint64_t blk),
		      void *arg)
{
	disk_each_block(self, oid, fn, arg);
}

/* The disk tier's rows of /metrics (tier="disk"): the cache's families it shares with the
 * memory tiers (hits, residency, size), then its own. */
static void tier_metrics(void *self, void (*fn)(void *arg, const struct tier_metric *m), void *arg)
{
	struct disk_stats st;

	disk_get_stats(self, &st);
	/* clang-format off */
	const struct tier_metric rows[] = {
#define ROW(name, type, v, help) {name, TIER_##type, help, v, 0, NULL, NULL, 0}
	ROW("cache_hits_total", COUNTER, st.hits, "Block lookups answered by the tier."),
	ROW("cache_misses_total", COUNTER, st.misses,
	    "Blocks a reader wanted that were fetched into the tier."),
	ROW("cache_served_bytes_total", COUNTER, st.bytes_served,
	    "Bytes answered to readers from the tier."),
	ROW("cache_evictions_total", COUNTER, st.rotations,
	    "Segment rotations (each evicts one segment)."),
	ROW("cache_resident_blocks", GAUGE, st.blocks, "Blocks resident in the tier."),
	ROW("cache_resident_bytes", GAUGE, st.bytes, "Bytes resident in the tier."),
	ROW("cache_size_bytes", GAUGE, st.size, "Configured size of the tier."),
	ROW("disk_writes_total", COUNTER, st.writes, "Blocks written to the disk tier."),
	ROW("disk_written_bytes_total", COUNTER, st.bytes_written,
	    "Bytes written to the disk tier."),
	ROW("disk_write_errors_total", COUNTER, st.write_errors,
	    "Writes to the disk tier that failed (the first turns writes off)."),
	ROW("disk_write_drops_total", COUNTER, st.write_drops,
	    "Blocks not written to the disk tier: its queue was full, or writes are off."),
	ROW("disk_writable", GAUGE, st.writable, "1 while the disk tier takes writes."),
	ROW("disk_queued_bytes", GAUGE, st.queued_bytes, "Bytes waiting to be written to disk."),
	ROW("disk_crc_failures_total", COUNTER, st.crc_failures,
	    "Disk records whose CRC-32C did not match: dropped and fetched again."),
	ROW("disk_read_errors_total", COUNTER, st.read_errors,
	    "Disk reads that failed (EIO...): served from the store."),
	ROW("disk_direct_reads_total", COUNTER, st.direct_reads,
	    "Disk hits read with O_DIRECT, past the page cache (the rest: buffered)."),
	ROW("disk_recovered_blocks", GAUGE, st.recovered_blocks,
	    "Blocks the disk tier found by its scan at mount."),
	ROW("disk_recovery_ms", GAUGE, st.recovery_ms, "How long that scan took, ms."),
#undef ROW
	};
	/* clang-format on */

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fn(arg, &rows[i]);
}

/* `tierfs status`: a row in the tiers' table, and a line of its own. */
static const struct tier_status disk_status = {
	.hits = "cache_hits_total",
	.misses = "cache_misses_total",
	.served = "cache_served_bytes_total",
	.line = {
		{"writes", "disk_writes_total", TIER_ST_RATE, NULL, NULL},
		{"drops", "disk_write_drops_total", TIER_ST_VALUE, NULL, NULL},
		{"crc failures", "disk_crc_failures_total", TIER_ST_VALUE, NULL, NULL},
		{"read errors", "disk_read_errors_total", TIER_ST_VALUE, NULL, NULL},
		{"", "disk_writable", TIER_ST_FLAG, "writable", "WRITES OFF"},
	},
};

static void tier_stop(void *self)
{
	disk_stop_reads(self);
}

static void tier_close(void *self)
{
	disk_close(self);
}

const struct tier_ops disk_tier_ops = {
	.name = "disk",
	.get = tier_get,
	.has = tier_has,
	.put = tier_put,
	.room = tier_room,
	.each = tier_each,
	.metrics = tier_metrics,
	.status = &disk_status,
	.stop = tier_stop,
	.close = tier_close,
};

struct tier disk_tier(struct disk *d)
{
	return (struct tier){.ops = &disk_tier_ops, .self = d};
}
