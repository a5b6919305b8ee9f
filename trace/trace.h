/*
 * trace.h - the read trace: one compact binary record per read request a mount answers, in
 * files of a documented, versioned format (docs/trace-format.md), and the reader that
 * tierfs-sim replays them with.
 *
 *   mount (fs/trace.c) ──trace_push──► ring ──flusher thread──► FILE, FILE.1, FILE.2 ...
 *                                                                    │
 *   tierfs-sim (sim/) ◄──trace_reader_next── one struct trace_read ◄─┘
 *
 * Names never reach the file: an object is the salted hash of its key, its version the salted
 * hash of its version's id, and the file a read went through the salted hash of its handle.
 * The salt is random per trace (or given, so that the traces of a fleet's mounts name one
 * object alike) and kept in the header: whoever holds the file and guesses a key can check
 * the guess, nobody can read a key back.
 *
 * No FUSE, no curl: plain files, a thread, and time passed in.
 */
#ifndef TIERFS_TRACE_H
#define TIERFS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_MAGIC	   "TIERFSTR" /* the first 8 bytes of every file */
#define TRACE_VERSION	   1
#define TRACE_HDR_LEN	   64	/* bytes of the header */
#define TRACE_HDR_FLAGS	   56	/* the header's flags byte: */
#define TRACE_HDR_COMPLETE 0x01 /* the writer finished the file: no more records will come */
#define TRACE_OBJ_LEN	   32	/* bytes of an object record */
#define TRACE_READ_LEN	   40	/* bytes of a read record */
#define TRACE_SALT_LEN	   16
#define TRACE_LAT_MAX	   UINT32_MAX /* lat_us and fetched saturate here */

/* Which tier served a read: the deepest source of its blocks (cache.h, cache_served). */
enum trace_tier {
	TRACE_HOT = 0,
	TRACE_LAGGING = 1,
	TRACE_DISK = 2,
	TRACE_FLEET = 3,
	TRACE_STORE = 4,
	TRACE_NTIERS = 5,
	TRACE_NONE = 255, /* no data: an error, or end of object */
};

/* A read record's flags. */
#define TRACE_F_ERROR 0x01 /* answered with an error */
#define TRACE_F_OPEN  0x02 /* the first read through its handle: its stream starts here */

/* "hot", "lagging", "disk", "fleet", "store"; "none" for TRACE_NONE; NULL past those. */
const char *trace_tier_name(unsigned t);
/* The code of tier @name (cache_served.from); TRACE_NONE for NULL or an unknown name. */
uint8_t trace_tier_code(const char *name);

/* A file's header. */
struct trace_hdr {
	uint64_t id;		/* the trace: random, the same in every file of one mount's run */
	uint32_t part;		/* 0 for its first file, then 1, 2 ... in the order written */
	uint32_t block_size;	/* the mount's block_size, for the replay's default */
	uint64_t start_wall_ns; /* CLOCK_REALTIME at the trace's start; t_ns counts from it */
	uint8_t salt[TRACE_SALT_LEN];
	bool complete; /* the writer finished the file (closed it, or filled it and went on) */
};

/* One read request, as the mount answered it. */
struct trace_read {
	uint64_t t_ns;	  /* when it came, ns since the trace's start */
	uint64_t obj;	  /* salted hash of the object's key */
	uint32_t ver;	  /* salted hash of the object version's id */
	uint32_t stream;  /* salted hash of the open file it was read through */
	uint64_t off;	  /* byte offset asked */
	uint32_t len;	  /* bytes asked */
	uint32_t lat_us;  /* from the request to its answer, µs (saturates) */
	uint64_t size;	  /* the object's size */
	int64_t mtime;	  /* the object's mtime, seconds since the epoch */
	uint32_t fetched; /* bytes fetched from below memory for it (saturates) */
	uint8_t tier;	  /* enum trace_tier */
	uint8_t flags;	  /* TRACE_F_* */
};

/* SipHash-2-4 of @len bytes at @data under @salt. */
uint64_t trace_hash(const uint8_t salt[TRACE_SALT_LEN], const void *data, size_t len);

/* ---------------------------------------------------------------------------------------------
 * Writing (tracewr.c)
 * ------------------------------------------------------------------------------------------ */

struct trace_wcfg {
	const char *path;	/* the file; rotated files are path.1 (newest) .. path.keep */
	uint64_t max_size;	/* bytes per file, at least TRACE_HDR_LEN + a few records */
	unsigned keep;		/* rotated files kept (0: the full file is deleted) */
	uint32_t block_size;	/* for the header */
	const uint8_t *salt;	/* TRACE_SALT_LEN bytes, or NULL: a random one */
	uint64_t start_wall_ns; /* the trace's start, CLOCK_REALTIME */
	unsigned ring;		/* entries of the ring, a power of two; 0: 16384 */
	unsigned flush_ms;	/* how often the thread drains the ring; 0: 50 */
};

struct trace_wstats {
	uint64_t records;   /* reads written */
	uint64_t dropped;   /* reads not written: the ring was full, or writing failed */
	uint64_t bytes;	    /* bytes written, headers included */
	uint64_t rotations; /* files closed because they were full */
	int error;	    /* the write error that stopped the trace, 0 if none */
};

struct trace_writer;

/*
 * Create the trace file @cfg->path (0600; a trace already there is rotated away first, as if
 * it were full) and write its header. A path that is a symbolic link, or a file there that is
 * not a trace, is refused. No thread yet. @return 0 and *ret; -EEXIST (something not a trace
 * is there, a link included), -EINVAL (a max_size too small, a ring not a power of two), the
 * errno of creating or writing, or -ENOMEM.
 */
int trace_writer_open(const struct trace_wcfg *cfg, struct trace_writer **ret);

/* Start the thread that drains the ring into the file. After a fork, never before (a fork
 * keeps only the calling thread). @return 0 or -errno. */
int trace_writer_start(struct trace_writer *w);

/* Hand one read to the writer: a copy goes into the ring, no lock, no system call. @return
 * false when the ring was full (the read is dropped and counted). Any thread. */
bool trace_push(struct trace_writer *w, const struct trace_read *r);

/* Drain the ring into the file now, on this thread. @return 0 or the write's -errno. */
int trace_writer_flush(struct trace_writer *w);

/* The salt every hash of this trace uses (TRACE_SALT_LEN bytes). */
const uint8_t *trace_writer_salt(const struct trace_writer *w);

void trace_writer_stats(struct trace_writer *w, struct trace_wstats *ret);

/* Stop the thread, write what the ring holds, close. Accepts NULL. */
void trace_writer_close(struct trace_writer *w);

/* ---------------------------------------------------------------------------------------------
 * Reading (tracerd.c)
 * ------------------------------------------------------------------------------------------ */

struct trace_reader;

/* Open a trace file and read its header. @return 0 and *ret; -EBADMSG with a line in @err (not
 * a trace, another version, a header cut short); the errno of opening; -ENOMEM. */
int trace_reader_open(const char *path, struct trace_reader **ret, char *err, size_t errlen);

const struct trace_hdr *trace_reader_hdr(const struct trace_reader *r);

/* The next read of the file into *ret. @return 1; 0 at its end (a last record cut short by a
 * crash is the end); -EBADMSG (an unknown record, an object referenced before it was
 * described) with a line in @err; the errno of reading. */
int trace_reader_next(struct trace_reader *r, struct trace_read *ret, char *err, size_t errlen);

/* Bytes left unread at the end because the last record was cut short. */
uint64_t trace_reader_cut(const struct trace_reader *r);

void trace_reader_close(struct trace_reader *r);

#endif
