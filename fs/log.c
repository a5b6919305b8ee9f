/*
 * log.c - the mount's log lines (log.h).
 *
 * Errors are logged once per (object, cause) per FS_LOG_INTERVAL_S, whatever the number of
 * readers, blocks and retries behind them, and all lines together are held to a bucket of
 * FS_LOG_BURST per interval, so neither a flapping store nor a local user can flood syslog.
 * What is held back is counted (tierfs_log_suppressed_total); a key's next line says how many
 * of its own were.
 *
 *   fs_log_once(obj, cause) ─► key = FNV-1a(obj, cause) ─► log_admit: slot of the key seen
 *                              within the interval, or no token left ─► held (counted)
 *                                                       └─ else ─► fuse_log, cleaned, cut
 *
 * Locking: l->lock guards the slots and the bucket; suppressed and live are relaxed atomics.
 * Workload: a handful of lines a minute; a store that fails every block of every read may ask
 * for thousands a second, and they must cost a hash and a lock each.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fs_i.h" /* fs_now_ns */
#include "log.h"

static uint64_t log_hash(uint64_t h, const char *s, bool skip_digits)
{
	/* FNV-1a */
	for (; s && *s; s++) {
		if (skip_digits && *s >= '0' && *s <= '9')
			continue;
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	}
	return h;
}

static uint64_t log_key(const char *obj, const char *cause, bool skip_digits)
{
	uint64_t h = log_hash(0xcbf29ce484222325ULL, obj, false);

	h = log_hash(h * 0x100000001b3ULL, cause, skip_digits);
	return h ? h : 1;
}

/* Decide under log_lock whether the line of @key goes out. @return the count of its lines
 * held back since its last one (to say so), or -1 to hold this one back too. */
static int64_t log_admit(struct fs_log *l, uint64_t key)
{
	const uint64_t interval = (uint64_t)FS_LOG_INTERVAL_S * 1000000000ULL;
	uint64_t now = fs_now_ns();
	struct fs_log_slot *slot = NULL, *oldest = &l->seen[0];
	int64_t held = -1;

	pthread_mutex_lock(&l->lock);
	l->tokens += (double)(now - l->refill_ns) * FS_LOG_BURST / (double)interval;
	if (l->tokens > FS_LOG_BURST)
		l->tokens = FS_LOG_BURST;
	l->refill_ns = now;
	for (size_t i = 0; i < FS_LOG_SLOTS && !slot; i++) {
		if (l->seen[i].key == key)
			slot = &l->seen[i];
		else if (l->seen[i].last_ns < oldest->last_ns)
			oldest = &l->seen[i];
	}
	if (slot && now - slot->last_ns < interval) {
		slot->held++;
	} else if (l->tokens < 1) {
		if (slot)
			slot->held++;
	} else {
		if (!slot) {
			slot = oldest; /* forgets the key seen longest ago */
			*slot = (struct fs_log_slot){.key = key};
		}
		held = (int64_t)slot->held;
		slot->held = 0;
		slot->last_ns = now;
		l->tokens -= 1;
	}
	pthread_mutex_unlock(&l->lock);
	if (held < 0)
		__atomic_fetch_add(&l->suppressed, 1, __ATOMIC_RELAXED);
	return held;
}

void fs_log_init(struct fs_log *l)
{
	*l = (struct fs_log){.tokens = FS_LOG_BURST, .refill_ns = fs_now_ns()};
	pthread_mutex_init(&l->lock, NULL);
}

void fs_log_done(struct fs_log *l)
{
	pthread_mutex_destroy(&l->lock);
}

/* Keep printable ASCII, cut at FS_LOG_LINE_MAX with "...". */
static void log_clean(char *line, size_t need)
{
	for (char *p = line; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	if (need >= FS_LOG_LINE_MAX)
		memcpy(line + FS_LOG_LINE_MAX - 4, "...", 4);
}

static bool log_keyed(struct fs_log *l, enum fuse_log_level level, uint64_t key, const char *fmt,
		      va_list ap)
{
	char line[FS_LOG_LINE_MAX], more[64] = "";
	int64_t held = log_admit(l, key);
	int n;

	if (held < 0)
		return false;
	n = vsnprintf(line, sizeof(line), fmt, ap);
	if (n < 0)
		return false;
	log_clean(line, (size_t)n);
	if (held > 0)
		snprintf(more, sizeof(more), " (and %lld more like it)", (long long)held);
	fuse_log(level, "tierfs: %s%s\n", line, more);
	return true;
}

bool fs_log_once(struct fs_log *l, enum fuse_log_level level, const char *obj, const char *cause,
		 const char *fmt, ...)
{
	va_list ap;
	bool r;

	va_start(ap, fmt);
	r = log_keyed(l, level, log_key(obj, cause, false), fmt, ap);
	va_end(ap);
	return r;
}

static bool log_fmt(struct fs_log *l, enum fuse_log_level level, uint64_t key, const char *fmt,
		    ...) __attribute__((format(printf, 4, 5)));
static bool log_fmt(struct fs_log *l, enum fuse_log_level level, uint64_t key, const char *fmt,
		    ...)
{
	va_list ap;
	bool r;

	va_start(ap, fmt);
	r = log_keyed(l, level, key, fmt, ap);
	va_end(ap);
	return r;
}

/*
 * A line from the backend: "GET URL (range): why" or "read PATH: why". Its object is the text
 * before the first ": ", its cause the rest without digits, so the failures of every block of
 * one object ("short body: 17 of 65536 bytes", "Content-Range 0-9, asked 65536-131071") count
 * as one cause.
 */
void fs_backend_log(void *arg, int level, const char *line)
{
	static const enum fuse_log_level map[] = {FUSE_LOG_ERR, FUSE_LOG_WARNING, FUSE_LOG_INFO,
						  FUSE_LOG_DEBUG};
	struct fs_log *l = arg;
	const char *sep = strstr(line, ": ");
	char obj[FS_LOG_LINE_MAX];

	/* before the mount exists, failures reach the user as fs_main's one line */
	if (!__atomic_load_n(&l->live, __ATOMIC_RELAXED))
		return;
	snprintf(obj, sizeof(obj), "%.*s", sep ? (int)(sep - line) : (int)strlen(line), line);
	log_fmt(l, map[level < 0 ? 0 : level > 3 ? 3 : level],
		log_key(obj, sep ? sep + 2 : "", true), "%s", line);
}

