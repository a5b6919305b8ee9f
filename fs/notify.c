/*
 * notify.c - telling systemd how the mount is doing (sd_notify(3)'s protocol, spoken here).
 *
 * Under a unit of Type=notify, systemd passes $NOTIFY_SOCKET (a datagram socket, a path or
 * "@abstract") and, with WatchdogSec=, $WATCHDOG_USEC (and $WATCHDOG_PID). Each message is
 * one datagram of "KEY=VALUE" lines:
 *
 *   serve ─► fs_notify_serving ─► ready thread: stat(mountpoint) ─► answered by the mount
 *            (mount.c, the session           (st_dev not its parent's)  ─► READY=1, STATUS=...
 *             loop about to run)
 *                              └─► watchdog timer on the I/O loop, every WATCHDOG_USEC / 2:
 *                                  WATCHDOG=1 ─► re-armed from the loop itself
 *   teardown ─► fs_notify_stopping ─► STOPPING=1, STATUS=unmounting; the timer stops
 *
 * READY=1 means "the mount answers": a unit ordered After= it (a broker reading its segments)
 * must not start on an empty directory. So it is sent by a thread of its own once a stat of
 * the mountpoint, which the kernel sends to the session loop, has come back from the mount;
 * the loop's thread cannot send it, since it is the one that must answer. That thread never
 * gives up at the first "no": a stat that fails, or that still sees the parent's device, is
 * tried again (every 10 ms at first, backing off to a second) until the mount answers, the
 * mount stops, or READY_BOUND_NS has passed, and a datagram systemd's queue cannot take yet
 * (EAGAIN: the receiver's queue holds max_dgram_qlen datagrams, 10 by default) is sent
 * again rather than dropped. A READY=1 lost once costs the unit its TimeoutStartSec and a
 * restart; the first "not yet" and the final "given up" are logged (stderr with -f). The
 * watchdog's pings come from a timer of the backend's I/O loop, the thread everything waits
 * on: a loop that stops turning (a callback that blocks, a deadlock) stops the pings, and
 * systemd kills and restarts the mount (Restart=on-failure). They are sent only when
 * $WATCHDOG_PID is unset or names this process (a daemonized child is not the one systemd
 * watches), and a ping the queue cannot take is dropped: the next one follows.
 *
 * The protocol is one sendto(): tierfs speaks it itself rather than link libsystemd for it,
 * so that the same binary runs where there is no systemd. The sends are non-blocking: only
 * the ready thread waits (between its tries, on n->wake, which teardown signals), never the
 * I/O loop or the session loop.
 *
 * Locking: n->stopping is set under n->lock (the ready thread waits on n->wake for it) and
 * read with a relaxed atomic load by the timer; the rest is set before the ready thread and
 * the timer start, and read-only after. Workload: three messages per mount, and a ping every
 * few seconds with a watchdog.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"

/* Where $NOTIFY_SOCKET points. @return 0, or -ENOENT when it is unset or unusable. */
static int notify_addr(struct fs_notify *n)
{
	const char *p = getenv("NOTIFY_SOCKET");
	size_t len = p ? strlen(p) : 0;

	if (!len || len >= sizeof(n->addr.sun_path) || (p[0] != '/' && p[0] != '@'))
		return -ENOENT;
	memset(&n->addr, 0, sizeof(n->addr));
	n->addr.sun_family = AF_UNIX;
	memcpy(n->addr.sun_path, p, len);
	if (p[0] == '@')
		n->addr.sun_path[0] = '\0'; /* the abstract namespace: no NUL at the end */
	n->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (p[0] == '/'));
	return 0;
}

/* $WATCHDOG_USEC, if the watchdog is this process's. @return microseconds, 0 for none. */
static uint64_t watchdog_usec(void)
{
	const char *u = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v;

	if (!u || !*u)
		return 0;
	if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
		return 0;
	v = strtoull(u, &end, 10);
	return *end ? 0 : v;
}

void fs_notify_init(struct fs_notify *n, const char *mountpoint)
{
	pthread_condattr_t ca;

	*n = (struct fs_notify){.fd = -1, .mountpoint = mountpoint};
	pthread_mutex_init(&n->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->wake, &ca);
	pthread_condattr_destroy(&ca);
}

/* How long the ready thread tries: past any TimeoutStartSec a unit would sensibly have. */
#define READY_BOUND_NS (600ULL * 1000000000ULL)
#define TRY_FIRST_NS (10ULL * 1000000) /* the first pause between tries */
#define TRY_MAX_NS (1000ULL * 1000000) /* pauses double up to this */
#define STOPPING_TRIES 20              /* STOPPING=1: 20 tries 10 ms apart, then dropped */

/* Send @msg (one datagram), without waiting. @return 0, or -errno (-EAGAIN: the receiver's
 * queue is full now). */
static int send_msg(const struct fs_notify *n, const char *msg)
{
	if (n->fd < 0)
		return 0;
	if (sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (const struct sockaddr *)&n->addr, n->addrlen) < 0)
		return -errno;
	return 0;
}

/* Has the mount answered a stat of its mountpoint? The stat reaches the session loop (the
 * root's attributes are asked of the mount); a device other than the parent's is the mount.
 * @return 0 if so, -EXDEV while the mountpoint is still the parent's directory, or the
 * -errno of a stat that failed. */
static int mount_answers(const char *mountpoint)
{
	char *copy = strdup(mountpoint);
	struct stat st, parent;
	int r = 0;

	if (!copy)
		return -ENOMEM;
	if (stat(mountpoint, &st) < 0 || stat(dirname(copy), &parent) < 0)
		r = -errno;
	else if (st.st_dev == parent.st_dev)
		r = -EXDEV;
	free(copy);
	return r;
}

/* Pause @ns, or until teardown says stop. @return true when the mount is stopping. */
static bool nap(struct fs_notify *n, uint64_t ns)
{
	struct timespec ts;
	bool stop;

	clock_gettime(CLOCK_MONOTONIC, &ts); /* n->wake waits on CLOCK_MONOTONIC */
	ns += (uint64_t)ts.tv_nsec;
	ts.tv_sec += (time_t)(ns / 1000000000ULL);
	ts.tv_nsec = (long)(ns % 1000000000ULL);
	pthread_mutex_lock(&n->lock);
	while (!n->stopping && pthread_cond_timedwait(&n->wake, &n->lock, &ts) == 0)
		;
	stop = n->stopping;
	pthread_mutex_unlock(&n->lock);
	return stop;
}

/* Say what holds READY=1 back: @r is mount_answers()'s (@answered false) or the send's. */
static void say_waiting(const struct fs_notify *n, bool answered, int r)
{
	if (!answered && r == -EXDEV)
		fuse_log(FUSE_LOG_WARNING, "tierfs: %s is not the mount yet: READY=1 waits for it\n",
			 n->mountpoint);
	else if (!answered)
		fuse_log(FUSE_LOG_WARNING,
			 "tierfs: %s does not answer yet (%s): READY=1 waits for it\n",
			 n->mountpoint, strerror(-r));
	else
		fuse_log(FUSE_LOG_WARNING,
			 "tierfs: $NOTIFY_SOCKET does not take READY=1 yet (%s): sending it again\n",
			 strerror(-r));
}

/* READY=1 once the mount answers, tried until it is sent, the mount stops, or the bound. */
static void *ready_main(void *arg)
{
	struct fs_notify *n = arg;
	uint64_t t0 = fs_now_ns(), pause = TRY_FIRST_NS;
	bool answered = false, waited = false;
	int r, last = 0;

	for (;;) {
		r = answered ? 0 : mount_answers(n->mountpoint);
		answered = r == 0;
		if (answered)
			r = send_msg(n, n->ready_msg);
		if (r == 0)
			break;
		if (r != last) /* each new cause once, not every try */
			say_waiting(n, answered, r);
		last = r;
		waited = true;
		if (fs_now_ns() - t0 >= READY_BOUND_NS) {
			fuse_log(FUSE_LOG_ERR, "tierfs: READY=1 not sent in %llu s: %s\n",
				 (unsigned long long)(READY_BOUND_NS / 1000000000ULL),
				 answered ? "$NOTIFY_SOCKET did not take it"
					  : "the mount did not answer");
			return NULL;
		}
		if (nap(n, pause))
			return NULL;
		pause = pause * 2 < TRY_MAX_NS ? pause * 2 : TRY_MAX_NS;
	}
	if (waited)
		fuse_log(FUSE_LOG_NOTICE, "tierfs: READY=1 sent after %llu ms\n",
			 (unsigned long long)((fs_now_ns() - t0) / 1000000));
	return NULL;
}

static void ping(void *arg)
{
	struct fs_notify *n = arg;

	if (__atomic_load_n(&n->stopping, __ATOMIC_RELAXED))
		return;
	send_msg(n, "WATCHDOG=1");
	/* from the loop itself: a loop that stops turning stops the pings */
	if (backend_defer(n->b, n->watchdog_ns / 2, ping, n) < 0)
		fuse_log(FUSE_LOG_ERR, "tierfs: cannot arm the watchdog timer\n");
}

/* STATUS=: what is mounted where, with which tiers: "file:///srv on /mnt: hot 1024M,
 * lagging 128M, disk /var/cache/tierfs, metrics 127.0.0.1:9100". */
static void summary(const struct fs_opts *o, const char *metrics, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s on %s: hot %lluM", o->url, o->mountpoint,
			 (unsigned long long)(o->hot_size >> 20));

	if (n >= 0 && (size_t)n < len && o->lagging)
		n += snprintf(buf + n, len - (size_t)n, ", lagging %lluM",
			      (unsigned long long)(o->lagging_size >> 20));
	if (n >= 0 && (size_t)n < len && o->cache_dir)
		n += snprintf(buf + n, len - (size_t)n, ", disk %s", o->cache_dir);
	if (n >= 0 && (size_t)n < len && o->shared)
		n += snprintf(buf + n, len - (size_t)n, ", shared %s", o->shared);
	if (n >= 0 && (size_t)n < len && metrics)
		snprintf(buf + n, len - (size_t)n, ", metrics %s", metrics);
	for (char *p = buf; *p; p++) /* one line */
		if (*p == '\n')
			*p = ' ';
}

/* READY=1 with STATUS= the summary; daemonized (no -f), MAINPID= too: this process, the
 * child, is the one that serves (systemd accepts it with NotifyAccess=all). */
static void ready_msg(struct fs_notify *n, const struct fs_opts *o, const char *metrics)
{
	char status[sizeof(n->ready_msg) - 64];
	int len = snprintf(n->ready_msg, sizeof(n->ready_msg), "READY=1\n");

	if (!o->foreground)
		len += snprintf(n->ready_msg + len, sizeof(n->ready_msg) - (size_t)len,
				"MAINPID=%ld\n", (long)getpid());
	summary(o, metrics, status, sizeof(status));
	snprintf(n->ready_msg + len, sizeof(n->ready_msg) - (size_t)len, "STATUS=%s", status);
}

int fs_notify_serving(struct fs_notify *n, struct backend *b, const struct fs_opts *o,
		      const char *metrics)
{
	int r;

	if (notify_addr(n) < 0)
		return 0;
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (n->fd < 0)
		return -errno;
	n->b = b;
	n->watchdog_ns = watchdog_usec() * 1000;
	ready_msg(n, o, metrics);
	r = -pthread_create(&n->ready, NULL, ready_main, n);
	if (r < 0)
		return r;
	n->ready_started = true;
	if (n->watchdog_ns)
		ping(n);
	return 0;
}

void fs_notify_stopping(struct fs_notify *n)
{
	bool was;

	pthread_mutex_lock(&n->lock);
	was = __atomic_exchange_n(&n->stopping, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&n->wake); /* the ready thread stops trying */
	pthread_mutex_unlock(&n->lock);
	if (n->fd < 0 || was)
		return;
	for (int i = 0; i < STOPPING_TRIES; i++) {
		struct timespec pause = {0, 10 * 1000000};

		if (send_msg(n, "STOPPING=1\nSTATUS=unmounting") != -EAGAIN)
			return;
		nanosleep(&pause, NULL); /* teardown's own thread; bounded to 200 ms */
	}
}

void fs_notify_done(struct fs_notify *n)
{
	if (n->ready_started)
		pthread_join(n->ready, NULL);
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
	n->ready_started = false;
	pthread_cond_destroy(&n->wake);
	pthread_mutex_destroy(&n->lock);
}
