/*
 * ctlsock.c - the control socket: how the operator changes a live setting of a mount that the
 * kernel holds read-only (`tierfs set MOUNTPOINT lagging_rate=10M`).
 *
 * A mount without allow_write, allow_overwrite or allow_delete is read-only in the kernel, so
 * setxattr on its root never reaches tierfs (EROFS). The socket is the other way in:
 *
 *   tierfs set MNT name=value ─► connect("\0tierfs-ctl:<hash of MNT's real path>")
 *                                 "set name value\n" ─► peer's uid and pid (SO_PEERCRED)
 *                                 ─► ctl_set: the same rules as setxattr ─► "ok\n" | "error
 *                                    <errno> <why>\n"
 *
 * The socket is in the abstract namespace: no file to create, own or clean up, gone with the
 * process. Anyone on the host may connect; what decides is the peer's credentials, which the
 * kernel gives and the peer cannot forge: the mount's owner, or a caller with CAP_SYS_ADMIN in
 * tierfs's user namespace (control.c's may_steer), exactly as for setxattr. A request is one
 * line of at most CTL_LINE_MAX bytes, read within CTL_TIMEOUT_MS; anything else is closed
 * unanswered. One request per connection, one connection at a time: an operator's command,
 * not a service.
 *
 * The name is the hash of the mountpoint's real path (symlinks resolved), which the client
 * computes from the path it is given. A second mount on the same path (mounted over the
 * first) cannot have it: it mounts without one, with a warning.
 *
 * Threads: one thread of its own polls the socket and a pipe that ctlsock_stop writes to; the
 * FUSE workers and the I/O thread never see it. Workload: a few commands a day.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs_i.h"

#define CTL_LINE_MAX   512
#define CTL_TIMEOUT_MS 1000

struct ctlsock {
	struct mount *m;
	int fd;          /* the listening socket */
	int stop[2];     /* ctlsock_stop writes to stop[1] */
	pthread_t thread;
};

/* The abstract address of the mount at @path: "\0tierfs-ctl:" and 16 hex digits of FNV-1a. */
static socklen_t ctl_addr(const char *path, struct sockaddr_un *ret)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	int n;

	for (const char *p = path; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	memset(ret, 0, sizeof(*ret));
	ret->sun_family = AF_UNIX;
	n = snprintf(ret->sun_path + 1, sizeof(ret->sun_path) - 1, "tierfs-ctl:%016llx",
		     (unsigned long long)h);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Read one line from @fd within the timeout into @buf (NUL-terminated, newline cut).
 * @return 0, or -1 (too long, too slow, closed). */
static int read_line(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len - 1) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (poll(&p, 1, CTL_TIMEOUT_MS) <= 0)
			return -1;
		n = read(fd, buf + got, len - 1 - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
		buf[got] = '\0';
		if (strchr(buf, '\n')) {
			*strchr(buf, '\n') = '\0';
			return 0;
		}
	}
	return -1;
}

/* Answer one connection: "set NAME VALUE". */
static void serve(struct ctlsock *cs, int fd)
{
	char line[CTL_LINE_MAX], err[256], out[320], *name, *value;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int r = -EINVAL;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || read_line(fd, line,
										  sizeof(line)) < 0)
		return;
	snprintf(err, sizeof(err), "the request is \"set NAME VALUE\"");
	if (strncmp(line, "set ", 4) == 0 && (name = line + 4, value = strchr(name, ' '))) {
		*value++ = '\0';
		r = ctl_set(cs->m, cred.uid, cred.pid, "tierfs set", name, value, err,
			    sizeof(err));
	}
	if (r == 0)
		snprintf(out, sizeof(out), "ok\n");
	else
		snprintf(out, sizeof(out), "error %d %s\n", -r, err);
	if (write(fd, out, strlen(out)) < 0)
		return; /* the client went away: nothing to tell it */
}

static void *ctl_thread(void *arg)
{
	struct ctlsock *cs = arg;

	for (;;) {
		struct pollfd p[2] = {{.fd = cs->fd, .events = POLLIN},
				      {.fd = cs->stop[0], .events = POLLIN}};
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(cs->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(cs, fd);
		close(fd);
	}
	return NULL;
}

int ctlsock_start(struct mount *m, const char *mountpoint, struct ctlsock **ret)
{
	struct ctlsock *cs = calloc(1, sizeof(*cs));
	struct sockaddr_un sa;
	socklen_t sl = ctl_addr(mountpoint, &sa);
	int r;

	if (!cs)
		return -ENOMEM;
	cs->m = m;
	cs->stop[0] = cs->stop[1] = -1;
	cs->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs->fd < 0 || bind(cs->fd, (struct sockaddr *)&sa, sl) < 0 || listen(cs->fd, 4) < 0 ||
	    pipe2(cs->stop, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	r = -pthread_create(&cs->thread, NULL, ctl_thread, cs);
	if (r < 0)
		goto fail;
	*ret = cs;
	return 0;
fail:
	if (cs->fd >= 0)
		close(cs->fd);
	if (cs->stop[0] >= 0) {
		close(cs->stop[0]);
		close(cs->stop[1]);
	}
	free(cs);
	return r;
}

void ctlsock_stop(struct ctlsock *cs)
{
	if (!cs)
		return;
	/* a write that fails (a full pipe) means the thread has been told already */
	(void)!write(cs->stop[1], "x", 1);
	pthread_join(cs->thread, NULL);
	close(cs->fd);
	close(cs->stop[0]);
	close(cs->stop[1]);
	free(cs);
}

/* ---- the client: tierfs set ------------------------------------------------------------------- */

int fs_ctl_set(const char *mountpoint, const char *name, const char *value, char *err,
	       size_t errlen)
{
	char real[PATH_MAX], req[CTL_LINE_MAX], reply[320];
	struct sockaddr_un sa;
	socklen_t sl;
	int fd, r, code;

	if (!realpath(mountpoint, real)) {
		snprintf(err, errlen, "%s: %s", mountpoint, strerror(errno));
		return -errno;
	}
	sl = ctl_addr(real, &sa);
	if ((size_t)snprintf(req, sizeof(req), "set %s %s\n", name, value) >= sizeof(req)) {
		snprintf(err, errlen, "%s=%.32s...: too long", name, value);
		return -EINVAL;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: no tierfs mount answers there (%s)", real,
			 strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	r = write(fd, req, strlen(req)) < 0 || read_line(fd, reply, sizeof(reply)) < 0 ? -EIO : 0;
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "%s: the mount did not answer", real);
		return r;
	}
	if (strcmp(reply, "ok") == 0)
		return 0;
	if (sscanf(reply, "error %d", &code) != 1 || code <= 0)
		code = EPROTO;
	/* the mount's reason names the setting itself */
	snprintf(err, errlen, "%s", strchr(reply + 6, ' ') ? strchr(reply + 6, ' ') + 1
							   : strerror(code));
	return -code;
}
