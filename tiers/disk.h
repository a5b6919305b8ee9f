/*
 * disk.h - the disk tier: blocks kept in a segmented ring of files under cache_dir, found
 * again after a restart or a crash, every byte checked by CRC-32C before it is served.
 *
 * It sits behind the memory tiers, first in the cache's chain (disk_tier, tier.h): a read
 * is a pread into the caller's buffer, on one of a few reader threads of the tier's own
 * (disk_get_async), so that no thread of the cache or the backend ever waits for the disk and
 * a readahead window's blocks are read in parallel; a write is a copy into a bounded queue
 * that one writer thread drains, so a reader never waits for a write. See disk.c for the
 * layout.
 */
#ifndef TIERFS_DISK_H
#define TIERFS_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "tier.h"

struct disk_cfg {
	const char *dir;      /* cache_dir: created 0700 if missing; must be ours alone */
	uint64_t size;        /* bytes of segment files, at most (disk_size) */
	uint32_t block_size;  /* the mount's block_size (part of the format: a change wipes) */
	uint64_t queue_bytes; /* write-behind queue, bytes; 0 = disk_default_queue_bytes() */
	uint32_t readers;     /* reader threads for disk_get_async; 0 = 4 */
	bool lagging;         /* as a tier (disk_tier): lagging blocks are kept too (disk_lagging);
			       * off, only hot and written ones are, so that a replay does not
			       * wash the tail's blocks out */
	/* One line about a state change (wipe, write errors, ...), no newline. May be NULL.
	 * Called from any thread, never with a lock of the tier held. The backend's shape
	 * (backend_cfg.log): level 0 error, 1 warning, 2 info, 3 debug; the tier's are warnings. */
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
};

struct disk_stats {
	uint64_t hits;             /* disk_get answered with checked bytes */
	uint64_t misses;           /* disk_get found nothing (or a bad record) */
	uint64_t bytes_served;     /* bytes of those hits */
	uint64_t blocks;           /* resident records */
	uint64_t bytes;            /* their bytes */
	uint64_t size;             /* configured bytes (nseg x seg_size) */
	uint64_t writes;           /* records written */
	uint64_t bytes_written;    /* their bytes */
	uint64_t write_errors;     /* writes that failed (the first one turns writes off) */
	uint64_t write_drops;      /* disk_put calls dropped: queue full, or writes off */
	uint64_t crc_failures;     /* records whose CRC or header did not match: dropped */
	uint64_t read_errors;      /* preads that failed (EIO...): served as misses */
	uint64_t direct_reads;     /* hits read with O_DIRECT (bypassing the page cache) */
	uint64_t rotations;        /* segments reused (everything in them evicted) */
	uint64_t recovered_blocks; /* records found by the scan at disk_open */
	uint64_t recovery_ms;      /* how long that scan took */
	uint64_t queued_bytes;     /* bytes waiting for the writer now */
	bool writable;             /* writes are on */
};

struct disk;

/*
 * Open (creating it and its files if needed) the disk tier in cfg->dir and rebuild its index
 * by scanning the segment headers. The directory must be ours alone: the directory itself
 * (not a symbolic link), owned by the user we run as (geteuid), and writable by neither group
 * nor others; otherwise nothing in it is touched and the tier is refused. A file in it that
 * is not a regular file of ours with one name and no group or other permission bits is
 * removed unread and created anew, with one log line. A cache of another format, block_size
 * or geometry is wiped (its segment files only) with one log line. The directory is locked
 * (flock) for the life of the tier: a second tier on the same directory, in this process or
 * another, is refused.
 * @return 0 and *ret; -EPERM (the directory is not ours alone: @err, if not NULL, gets one
 * line of @errlen bytes at most saying why and how to fix it; -EPERM means nothing else);
 * -EBUSY (another tier holds the directory); -EINVAL (size cannot make 4 segments of two
 * blocks each, or block_size is not a power of two); -ENOMEM; or the -errno of creating or
 * opening it or its files (-EROFS, -EACCES, -ENOENT, -ENOTDIR, ...). @err is written only
 * for -EPERM.
 */
int disk_open(const struct disk_cfg *cfg, struct disk **ret, char *err, size_t errlen);

/* The write queue's size when disk_cfg.queue_bytes is 0: 16 blocks, and at least
 * DISK_QUEUE_MIN, so that small blocks absorb the same burst in bytes as 4 MiB ones. */
#define DISK_QUEUE_MIN (64u << 20)
uint64_t disk_default_queue_bytes(uint32_t block_size);

/* Finish writing the queue, stop the writer, close the files and drop the lock. NULL ok. */
void disk_close(struct disk *d);

/*
 * Read the block @key of @len bytes into @dst and check it. A record whose CRC or header does
 * not match is dropped and counted (crc_failures), never served.
 * @return 0; -ENOENT (not resident, or a different length); -EBADMSG (bad record, dropped);
 * -EIO or another -errno of pread (counted in read_errors). @dst is written in every case.
 */
int disk_get(struct disk *d, struct cache_key key, void *dst, uint32_t len);

/*
 * Start reading block @key (@len bytes) into @dst on a reader thread, as disk_get, and call
 * done(arg, disk_get's result) there, exactly once. @dst must stay valid until then. A block
 * the index does not hold (or holds with another length) is a miss known at once: no thread
 * hop. @return 0 (started: done will be called), or -ENOENT (not resident), -ESHUTDOWN (after
 * disk_stop_reads), -EAGAIN (no reader thread could be started) or -ENOMEM; done is then not
 * called.
 */
int disk_get_async(struct disk *d, struct cache_key key, void *dst, uint32_t len,
		   void (*done)(void *arg, int err), void *arg);

/* Finish the reads queued (their done callbacks run) and stop the reader threads; later
 * disk_get_async calls return -ESHUTDOWN. Call it before freeing what the callbacks use (the
 * cache). disk_close calls it too. */
void disk_stop_reads(struct disk *d);

/* Is @key resident? Index only, no I/O (the bytes are checked when read). */
bool disk_has(struct disk *d, struct cache_key key);

/*
 * Queue @len bytes of @src to be written as block @key; @src is copied, the caller keeps it.
 * Never blocks and never fails the caller: a put that finds the queue full or writes off is
 * dropped (write_drops); a key already resident or queued is ignored.
 */
void disk_put(struct disk *d, struct cache_key key, const void *src, uint32_t len);

/* Wait until the writer has written (or dropped) everything queued before this call. For
 * tests and the control surface; the read path never calls it. */
void disk_flush(struct disk *d);

void disk_get_stats(struct disk *d, struct disk_stats *ret);

/* For tests: while @hold, the writer takes nothing from the queue (so a test can fill it
 * without racing the writer). */
void disk_hold_writer(struct disk *d, bool hold);

/* Call @fn for each resident block of @obj (any order). @fn runs under the tier's lock: it
 * must not call into the tier. Cost: a walk of every segment's index. */
void disk_each_block(struct disk *d, struct cache_oid obj, void (*fn)(void *arg, uint64_t blk),
		     void *arg);

/* Can a disk tier of @size bytes hold blocks of @block_size: 4 segments of a header and two
 * records each? @return 0 or -EINVAL (too small, or @block_size not a power of two). */
int disk_geometry(uint64_t size, uint32_t block_size);

/* The smallest size disk_geometry accepts for @block_size (about 8 x block_size + 36K). */
uint64_t disk_min_size(uint32_t block_size);

/* The disk tier as a tier of the cache's chain (tier.h): get = disk_get_async, has = disk_has,
 * put = disk_put of what cfg.lagging admits. @d must outlive the cache. */
struct tier disk_tier(struct disk *d);

/* Its operations, its rows of /metrics and its status line (disk_tier's ops). */
extern const struct tier_ops disk_tier_ops;

#endif
