/*
 * log.h - the mount's log lines: once per (object, cause) per interval, within a budget.
 *
 * Every line a mount writes after it is up goes through fs_log_once (or, for the backend's
 * lines, fs_backend_log), so neither a flapping store nor a local user can flood syslog, and
 * what is held back is counted for the stats.
 */
#ifndef TIERFS_LOG_H
#define TIERFS_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <fuse_log.h>

#define FS_LOG_INTERVAL_S 60  /* a key logs at most one line per interval */
#define FS_LOG_BURST	  20  /* lines all keys together may log per interval */
#define FS_LOG_LINE_MAX	  400 /* longer lines are cut, with "..." */
#define FS_LOG_SLOTS	  64  /* keys remembered */

/* One (object, cause) key fs_log_once saw lately. */
struct fs_log_slot {
	uint64_t key;     /* hash of object and cause; 0 = free */
	uint64_t last_ns; /* CLOCK_MONOTONIC of the line last logged for it */
	uint64_t held;    /* lines suppressed since then */
};

/* A mount's log state. Embedded in the mount; fs_log_init before use, fs_log_done after. */
struct fs_log {
	pthread_mutex_t lock;
	struct fs_log_slot seen[FS_LOG_SLOTS]; /* recent (object, cause) keys; lock */
	double tokens;                         /* lines any key may still log now; lock */
	uint64_t refill_ns;                    /* when tokens was last refilled; lock */
	uint64_t suppressed; /* lines not logged (relaxed atomic): the stats show it */
	bool live;           /* the mount serves: backend lines go out (relaxed atomic) */
};

/* A full bucket, nothing seen, not live. */
void fs_log_init(struct fs_log *l);
void fs_log_done(struct fs_log *l);

/*
 * Log one line, unless a line with the same (@obj, @cause) was logged less than
 * FS_LOG_INTERVAL_S ago, or the mount has logged too much lately (a bucket of FS_LOG_BURST
 * lines, refilled at that many per interval); what is held back is counted in l->suppressed,
 * and the next line of the key says how many. The line is cut at FS_LOG_LINE_MAX and anything
 * but printable ASCII becomes '?', so neither a caller nor the store's names can forge or
 * flood log lines. @return true if it was logged.
 */
bool fs_log_once(struct fs_log *l, enum fuse_log_level level, const char *obj, const char *cause,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The backend's log callback (backend_cfg.log); @arg is the struct fs_log. Silent until
 * l->live: before that, failures reach the user as fs_main's one line. */
void fs_backend_log(void *arg, int level, const char *line);

#endif
