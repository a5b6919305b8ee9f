/*
 * fs_i.h - declarations shared only inside fs/: the mount's state (ops.c, control.c, mount.c)
 * and what mount.c asks of ops.c. The namespace has its own header
 * (ns.h), and so has logging (log.h). No FUSE request types here: what speaks FUSE (the
 * operations' table and the operations that change the store) is in fs_fuse.h, so
 * <fuse_lowlevel.h> reaches only the files that answer requests.
 */
#ifndef TIERFS_FS_I_H
#define TIERFS_FS_I_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <fuse_log.h>

#include "backend.h"
#include "cache.h"
#include "tier.h"
#include "store.h"
#include "fs.h"
#include "log.h"
#include "ns.h"
#include "write.h"

/* ---------------------------------------------------------------------------------------------
 * ops.c / control.c / mount.c: the mount.
 * ------------------------------------------------------------------------------------------ */

#define FS_MAX_REQUEST (1u << 20) /* largest read the kernel may send: 1 MiB */

/* The INIT exchange as device.c watches it (atomics: read by every worker's dev_read). */
struct fs_device {
	uint64_t init_unique;     /* the kernel's FUSE_INIT request, 0 before it came */
	bool offered;             /* it offered FUSE_PARALLEL_DIROPS */
	bool done;                /* a request other than INIT came: nothing left to watch */
};

/* What the process may take besides its memory tiers (cache.h's CACHE_BOUNCE_LIMIT: bounce
 * buffers, threads, the rest): the metrics' memory bound is hot_size + lagging_size + this. */
#define FS_MEMORY_SLACK (64ull << 20)

/* Where a read's slowest block came from: its latency histogram (struct mount.read_lat), one
 * per source as cache_iov.from numbers them: the memory tiers (enum cache_tier), then the
 * chain's tiers in order (CACHE_NTIERS + i). */
#define FS_FROM_N (CACHE_NTIERS + TIER_CHAIN_MAX)


struct mount {
	struct fs_opts *o;        /* settings; the live-changeable ones under opts_lock */
	pthread_mutex_t opts_lock;
	struct backend *b;
	struct cache *c;
	/* the tiers between memory and the store, one slot per row of mount.c's table of
	 * tiers, ops NULL where the options ask for none (or it could not open); set before the
	 * cache, closed after it (tier_ops.stop, .close) */
	struct tier below[TIER_CHAIN_MAX - 1];
	struct store_tier store;  /* the chain's last tier: the backend */
	struct ns *ns;
	struct wpool *wpool;      /* write buffers (write.c), or NULL on a read-only mount */
	bool writable;            /* allow_write, allow_overwrite or allow_delete */
	struct fuse_session *se;
	struct fs_log log;        /* its lines; log.live once mounted and serving */
	pthread_mutex_t inval_lock; /* guards invals and the handles' drop-behind ranges */
	uint64_t reads;           /* read requests answered (relaxed atomics) */
	uint64_t read_errors;     /* read requests answered with an error */
	uint64_t read_bytes;      /* bytes answered */
	struct bk_hist read_lat[FS_FROM_N]; /* reads answered with data, by where their slowest
					     * block came from (relaxed atomics) */
	pthread_mutex_t handles_lock;
	struct hlink *fhs;        /* open files: freed at exit if the kernel never releases them */
	struct hlink *dirs;       /* open directories, likewise */
	unsigned invals;          /* helper threads running (moves); inval_lock, signals
				   * inval_done */
	pthread_cond_t inval_done;
	pthread_mutex_t watch_lock;
	struct read_watch *watches; /* interrupted reads whose reader was not dying; watch_lock */
	unsigned nwatch;          /* their number; watch_lock (read without it, relaxed) */
	bool watch_armed;         /* the watch timer is pending; watch_lock */
	struct fs_device dev;     /* device.c's watch of the INIT exchange (atomics) */
	uint64_t mounted_ns;      /* CLOCK_MONOTONIC when the root's first listing started;
				   * set before the session loop, read-only after */
	struct fs_trace *trace;   /* the read trace (trace=), or NULL; set before mounting */
};

/* An open file: an object version and its reader's position, or a control file's text. */
struct fh {
	struct hlink link;        /* first: the mount's open files; handles_lock */
	uint64_t ino;             /* 0 for a control file */
	pthread_mutex_t lock;     /* guards obj (after open), moving, serves0 */
	pthread_cond_t moved;     /* signalled when moving turns false */
	struct fobj *obj;         /* NULL for a control file; the version served; lock */
	bool movable;             /* opened with the page cache dropped (keep_cache off) */
	bool moving;              /* a helper is asking the store for the new version; lock */
	uint64_t serves0;         /* obj->serves when obj became this file's; lock */
	struct cache_stream s;
	uint32_t trace_stream;    /* the trace's hash of this handle (fs/trace.c), made at its first
				   * traced read; atomic, 0 until then */
	bool lagging;             /* opened as lagging */
	bool drop_behind;         /* lagging without lagging_page_cache: pages dropped behind */
	uint64_t seen_lo, seen_hi; /* drop_behind: range read and not yet dropped; m->inval_lock */
	char *text;               /* control file contents, snapshot at open */
	size_t text_len;
	struct wfile *w;          /* a file opened for writing (write.c), else NULL; its ino is
				   * the wfile's (no ns_open was counted) */
};

/* Inodes of the control surface: far above anything ns.c hands out. */
#define CTL_DIR_INO    (UINT64_MAX - 16)
#define CTL_STATS_INO  (CTL_DIR_INO + 1)
#define CTL_CONFIG_INO (CTL_DIR_INO + 2)

static inline bool ctl_is(uint64_t ino)
{
	return ino >= CTL_DIR_INO && ino <= CTL_CONFIG_INO;
}

/* lookup in the control directory, or of the control directory itself (parent root).
 * @return 0 and *ret_st, or -ENOENT. */
int ctl_lookup(struct mount *m, uint64_t parent, const char *name, struct stat *ret_st);
int ctl_getattr(struct mount *m, uint64_t ino, struct stat *ret_st);
/* Snapshot the text of a control file. @return 0 and malloc'd *ret (caller frees). */
int ctl_read_all(struct mount *m, uint64_t ino, char **ret, size_t *ret_len);
/* Entries of the control directory: name of entry @i, or NULL past the end. */
const char *ctl_dirent(size_t i, uint64_t *ret_ino);

/* Extended attributes: the user.tierfs.* of objects, and live settings on the root; none is
 * listed (listxattr answers an empty list). getxattr follows the FUSE size protocol: @size 0
 * asks for the length. @return the length, or -errno. */
int ctl_getxattr(struct mount *m, uint64_t ino, const char *name, char *buf, size_t size);
/* Change a live setting as the caller @uid (thread @pid, 0 if unknown) of a request.
 * @return 0 or -errno (EPERM not the operator, EINVAL bad value, ENOTSUP unknown name,
 * EROFS elsewhere than the root and the control directory). */
int ctl_setxattr(struct mount *m, uid_t uid, pid_t pid, uint64_t ino, const char *name,
		 const char *value, size_t size);
/* Set live option @name to @value as caller @uid (@pid, 0 if unknown), asked through @how
 * ("setxattr", "tierfs set"): the rules of ctl_setxattr, with the reason in @err.
 * @return 0 or -errno (EPERM, ENOTSUP, EINVAL). */
int ctl_set(struct mount *m, uid_t uid, pid_t pid, const char *how, const char *name,
	    const char *value, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * ctlsock.c: the control socket, how the operator steers a read-only mount (tierfs set).
 * ------------------------------------------------------------------------------------------ */

struct ctlsock;

/* Listen on the control socket of the mount at @mountpoint (absolute, symlinks resolved).
 * @return 0 and *ret; or -errno (-EADDRINUSE: another mount on the same path has it). */
int ctlsock_start(struct mount *m, const char *mountpoint, struct ctlsock **ret);
/* Stop listening; waits for a request being answered. NULL is accepted. */
void ctlsock_stop(struct ctlsock *cs);

/* ---------------------------------------------------------------------------------------------
 * device.c for mount.c: reads and writes of /dev/fuse.
 * ------------------------------------------------------------------------------------------ */

/* After fuse_session_mount: read and write the device through device.c, whose INIT reply
 * asks for parallel lookups and readdir (libfuse 3.14.0 leaves the flag out).
 * @return 0 or -errno. */
int fs_device_attach(struct mount *m);

/* ---------------------------------------------------------------------------------------------
 * endpoint.c: metrics=, the counters over HTTP; notify.c: systemd's notify protocol.
 * ------------------------------------------------------------------------------------------ */

struct fs_endpoint;

/* Bind and listen on @spec ([HOST:]PORT), before mounting. @return 0 and *ret, or -errno with
 * one line in @err (a port in use: EADDRINUSE). */
int fs_endpoint_open(const char *spec, struct fs_endpoint **ret, char *err, size_t errlen);
/* Answer GET /metrics about @m from a thread of its own; after daemonizing. Accepts NULL.
 * @return 0 or -EIO (logged). */
int fs_endpoint_start(struct fs_endpoint *e, struct mount *m);
/* "127.0.0.1:9100", or NULL for NULL. */
const char *fs_endpoint_addr(const struct fs_endpoint *e);
/* Stop answering (in-flight answers finish) and close. Accepts NULL. */
void fs_endpoint_free(struct fs_endpoint *e);

/* preflight.c: warnings before mounting (a non-empty mountpoint, a shared= server that does
 * not answer), one line each on stderr; nothing fails. */
void fs_preflight(const struct fs_opts *o);

/* systemd's notify protocol (notify.c): READY=1 once the mount answers, STOPPING=1 at the
 * end, WATCHDOG=1 from the I/O loop. Embedded in mount.c's session. No lock: every field but
 * stopping is written by fs_main's thread before the ready thread and the timer start (or
 * after they end), and only read by them. */
struct fs_notify {
	int fd;                 /* datagram socket for $NOTIFY_SOCKET; -1: none (not asked) */
	struct sockaddr_un addr; /* $NOTIFY_SOCKET */
	socklen_t addrlen;
	const char *mountpoint; /* what the ready thread stats (the mount's fs_opts) */
	struct backend *b;      /* the I/O loop that pings */
	uint64_t watchdog_ns;   /* $WATCHDOG_USEC, ns; 0: no watchdog (or not this process's) */
	char ready_msg[640];    /* READY=1 [MAINPID=] STATUS=, made before the ready thread */
	pthread_t ready;        /* waits for the mount to answer, then says READY=1 */
	bool ready_started;
	pthread_mutex_t lock;   /* guards stopping's changes, for wake */
	pthread_cond_t wake;    /* signalled (CLOCK_MONOTONIC) when stopping is set */
	bool stopping;          /* STOPPING=1 sent: the pings stop, the ready thread stops
				   trying; set under lock, read as a relaxed atomic */
};

/* Nothing sent yet, no socket. */
void fs_notify_init(struct fs_notify *n, const char *mountpoint);
/* The session loop is about to run: when $NOTIFY_SOCKET is set, start the thread that says
 * READY=1 (with a STATUS= summary of @o, and the metrics address @metrics or NULL) once a stat
 * of the mountpoint is answered by the mount, and, with $WATCHDOG_USEC, the pings from @b's
 * I/O loop every half of it. @return 0 or -errno (nothing will be sent). */
int fs_notify_serving(struct fs_notify *n, struct backend *b, const struct fs_opts *o,
		      const char *metrics);
/* STOPPING=1 (once), and the pings and the ready thread's tries stop. */
void fs_notify_stopping(struct fs_notify *n);
/* After the unmount (the ready thread may wait on the mount until then): join, close. */
void fs_notify_done(struct fs_notify *n);

/* ---------------------------------------------------------------------------------------------
 * trace.c: the read trace (trace=FILE), one record per read answered.
 * ------------------------------------------------------------------------------------------ */

struct fs_trace;

/* Create the trace file (before mounting). @return 0 or -errno, with one line on stderr. */
int fs_trace_open(struct mount *m);
/* Start its writer's thread (after daemonizing). Nothing without trace=. @return 0 or -errno. */
int fs_trace_start(struct mount *m);
/* The trace's name of handle @fh, made at its first call and kept in it. Only while @fh is
 * sure to be open (before the read's reply: the kernel may release it after), and only with
 * m->trace set. */
uint32_t fs_trace_stream(struct mount *m, struct fh *fh);
/* Record the read of [@off, @off + @len) of @o through the handle named @stream
 * (fs_trace_stream) that came at @t0 (fs_now_ns; @first: the handle's first) and is
 * answered now (@err: its error). Only inside the cache's reply callback, and only with
 * m->trace set. */
void fs_trace_read(struct mount *m, struct fobj *o, uint32_t stream, uint64_t off, size_t len,
		   uint64_t t0, bool first, int err);
/* Reads recorded and dropped so far (0, 0 without trace=). */
void fs_trace_stats(struct mount *m, uint64_t *ret_records, uint64_t *ret_dropped);
/* Write the rest and close (after every reply). Nothing without trace=. */
void fs_trace_close(struct mount *m);

/* ---------------------------------------------------------------------------------------------
 * ops.c for mount.c: the operations and what the mount's setup and teardown ask of them.
 * ------------------------------------------------------------------------------------------ */

/* env.c: what the cache is given (cache_new) besides its chain: the clocks, the I/O loop's
 * timers and plug, references on the fobjs. */
struct cache_env fs_cache_env(struct mount *m);
/* env.c: CLOCK_MONOTONIC in ns, the one clock of fs/'s timings (read latencies, the trace). */
uint64_t fs_now_ns(void);

/* After the session loop and the I/O thread stopped, before fuse_session_unmount: wait for
 * the helper threads, the last writers of the FUSE device besides them. Unmounting closes the
 * device's fd, and a number closed under a writer may be reused by an unrelated file. */
void fs_ops_quiesce(struct mount *m);

/* After fs_ops_quiesce and the unmount: free the watches and the handles the kernel never
 * released. Before cache_free. */
void fs_ops_drain(struct mount *m);

/* What change.c shares with ops.c: open handles, the kernel's timeouts, replies' errnos. */
/* handles.c: a new file handle (not listed yet); list it in @m (open); unlist it, drop its
 * version, its namespace reference and its write, and free it; or free one never listed. The
 * same for directories. */
struct fh *fs_fh_new(void);
void fs_fh_track(struct mount *m, struct fh *fh);
void fs_fh_free(struct mount *m, struct fh *fh);
void fs_fh_free_untracked(struct fh *fh);
void fs_dir_track(struct mount *m, struct ns_dir *d);
void fs_dir_free(struct mount *m, struct ns_dir *d);

/* How long the kernel may keep attributes and names: metadata_ttl. */
static inline double fs_ttl(const struct mount *m)
{
	return (double)m->o->metadata_ttl;
}

/* The errno a FUSE reply carries for @r (< 0). Requests still waiting when the mount ends are
 * answered -ESHUTDOWN by the stopping I/O thread (backend_stop) while the device is still
 * open: they get what the kernel gives requests of a connection that goes away. */
static inline int fs_reply_errno(int r)
{
	return r == -ESHUTDOWN ? ECONNABORTED : -r;
}

/* procfd.c: who closes a file being written (/proc). The thread group of thread @pid (a FUSE
 * request's caller). @return it, or -errno (-ESRCH for pid 0: outside tierfs's pid namespace). */
pid_t fs_proc_tgid(pid_t pid);
/* Does process @tgid hold a descriptor of inode @ino, open for writing, whose path ends with
 * "/@path"? @return 1, 0, -E2BIG when it has more than FS_PROC_SCAN_MAX descriptors open (not
 * read past them), or -errno when its descriptors cannot be read. */
#define FS_PROC_SCAN_MAX 4096
int fs_proc_holds(pid_t tgid, uint64_t ino, const char *path);
/* The same for the children of @tgid (each of its threads' children). @return 1, 0 or -errno. */
int fs_proc_children_hold(pid_t tgid, uint64_t ino, const char *path);

#endif
