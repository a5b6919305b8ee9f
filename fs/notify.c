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
 * the loop's thread cannot send it, since it is the one that must answer. The watchdog's
 * pings come from a timer of the backend's I/O loop, the thread everything waits on: a loop
 * that stops turning (a callback that blocks, a deadlock) stops the pings, and systemd kills
 * and restarts the mount (Restart=on-failure). They are sent only when $WATCHDOG_PID is unset
 * or names this process (a daemonized child is not the one systemd watches).
 *
 * The protocol is one sendto(): tierfs speaks it itself rather than link libsystemd for it,
 * so that the same binary runs where there is no systemd, and nothing here can block (the
 * sends are non-blocking; a message systemd cannot take now is dropped, as sd_notify's are).
 *
 * Locking: n->stopping is a relaxed atomic (set by teardown, read by the timer); the rest is
 * set before the ready thread and the timer start, and read-only after. Workload: three
 * messages per mount, and a ping every few seconds with a watchdog.
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
	*n = (struct fs_notify){.fd = -1, .mountpoint = mountpoint};
}

/* Send @msg (one datagram); dropped when systemd cannot take it now. */
static void send_msg(const struct fs_notify *n, const char *msg)
{
	if (n->fd >= 0)
		(void)sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
			     (const struct sockaddr *)&n->addr, n->addrlen);
}

/* Has the mount answered a stat of its mountpoint? The stat reaches the session loop (the
 * root's attributes are asked of the mount); a device other than the parent's is the mount. */
static bool mount_answers(const char *mountpoint)
{
	char *copy = strdup(mountpoint);
	struct stat st, parent;
	bool yes;

	if (!copy)
		return false;
	yes = stat(mountpoint, &st) == 0 && stat(dirname(copy), &parent) == 0 &&
	      st.st_dev != parent.st_dev;
	free(copy);
	return yes;
}

static void *ready_main(void *arg)
{
	struct fs_notify *n = arg;
	char msg[sizeof(n->status) + 32];

	if (!mount_answers(n->mountpoint)) {
		fuse_log(FUSE_LOG_WARNING, "tierfs: %s does not answer: READY=1 not sent\n",
			 n->mountpoint);
		return NULL;
	}
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", n->status);
	send_msg(n, msg);
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
	summary(o, metrics, n->status, sizeof(n->status));
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
	if (n->fd < 0 || __atomic_exchange_n(&n->stopping, true, __ATOMIC_RELAXED))
		return;
	send_msg(n, "STOPPING=1\nSTATUS=unmounting");
}

void fs_notify_done(struct fs_notify *n)
{
	if (n->ready_started)
		pthread_join(n->ready, NULL);
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
	n->ready_started = false;
}
