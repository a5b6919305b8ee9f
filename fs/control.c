/*
 * control.c - seeing into the cache and steering it from a shell.
 *
 *   MNT/.tierfs/stats    Prometheus text exposition: per-tier cache counters, limiter,
 *                        backend totals, printed by metrics.c from its table (a snapshot,
 *                        then the text). `cat` it, or point a node exporter textfile at it.
 *   MNT/.tierfs/config   the effective settings, one name=value per line.
 *   getfattr -n user.tierfs.tier MNT/obj    also .etag, .cached (resident blocks)
 *   setfattr -n user.tierfs.lagging_rate -v 100M MNT     live change of an option with an
 *                        apply hook in opts.c's table (also lagging_burst, lagging_ops,
 *                        hot_ttl): parsed by fs_opts_set, applied by fs_opts_apply;
 *                        getfattr -n on MNT shows the values in force (sizes as 100M).
 *
 * Who may do what. Reading (the files, getxattr) is open to everyone who can reach the mount:
 * it holds no secret, and each answer's cost is bounded by the tiers' sizes, never by an
 * object's size (user.tierfs.cached walks what the tiers hold and shows at most
 * RESIDENCY_RANGES ranges). Changing a setting is for the operator only: the mount's owner
 * (the uid tierfs runs as) or a caller with CAP_SYS_ADMIN in tierfs's user namespace;
 * everyone else gets EPERM, whatever the name or value. Refusals are logged through
 * fs_log_once: one line per caller and cause per interval, printable ASCII only, bounded.
 *
 * listxattr lists nothing: the attributes are answers about the mount, not data of the
 * files, and cp -a, rsync -X and tar --xattrs copy whatever listxattr names onto their
 * copies. getxattr by name still answers.
 *
 * The control directory is not listed by readdir (so find, du and rsync do not walk it) but
 * can be looked up by name; a real object of the same name wins, and control_dir= renames it.
 * Control files are snapshots taken at open and served with direct_io, so their size is 0 and
 * readers read to EOF.
 *
 * Live settings are parsed by fs_opts_set, exactly like -o, with the same bounds; a bad value
 * changes nothing. m->opts_lock serialises changes and the readers of the settings here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fuse_log.h>

#include "fs_i.h"
#include "metrics.h"
#include "tiertypes.h"

#define XATTR_PREFIX "user.tierfs."

/* user.tierfs.cached shows at most this many ranges, then "(+N more ranges)": an answer of
 * at most about 3 KiB whatever the object. */
#define RESIDENCY_RANGES 64

#define CAP_SYS_ADMIN_BIT 21 /* linux/capability.h */

/* The control surface's attributes: owned like everything else in the mount (uid=, gid=;
 * neither is live, so no lock), read-only for everyone. */
static void fill_ctl_stat(struct mount *m, uint64_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = (uid_t)m->o->uid;
	st->st_gid = (gid_t)m->o->gid;
	if (ino == CTL_DIR_INO) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
	}
}

int ctl_lookup(struct mount *m, uint64_t parent, const char *name, struct stat *ret_st)
{
	uint64_t ino = 0;

	if (parent == 1 && strcmp(name, m->o->control_dir) == 0)
		ino = CTL_DIR_INO;
	else if (parent == CTL_DIR_INO && strcmp(name, "stats") == 0)
		ino = CTL_STATS_INO;
	else if (parent == CTL_DIR_INO && strcmp(name, "config") == 0)
		ino = CTL_CONFIG_INO;
	if (!ino)
		return -ENOENT;
	fill_ctl_stat(m, ino, ret_st);
	return 0;
}

int ctl_getattr(struct mount *m, uint64_t ino, struct stat *ret_st)
{
	if (!ctl_is(ino))
		return -ENOENT;
	fill_ctl_stat(m, ino, ret_st);
	return 0;
}

const char *ctl_dirent(size_t i, uint64_t *ret_ino)
{
	switch (i) {
	case 0:
		*ret_ino = CTL_STATS_INO;
		return "stats";
	case 1:
		*ret_ino = CTL_CONFIG_INO;
		return "config";
	default:
		return NULL;
	}
}

/* ---- text building ------------------------------------------------------------------------- */

struct text {
	char *s;
	size_t len, cap;
	bool oom;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->oom = true;
			return;
		}
		if (t->s && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
		char *s = realloc(t->s, cap);
		if (!s) {
			t->oom = true;
			return;
		}
		t->s = s;
		t->cap = cap;
	}
}

/* The stats file's sink (metrics.h): the text grows as the writer goes. */
static int text_write(void *arg, const char *s, size_t n)
{
	struct text *t = arg;

	put(t, "%.*s", (int)n, s);
	return t->oom ? -ENOMEM : 0;
}

/* A snapshot of the counters first, then the text: no lock is held while it is written. */
static int stats_text(struct mount *m, struct text *t)
{
	struct fs_metrics_snap snap;
	struct fs_metrics_sink sink = {.write = text_write, .arg = t};

	fs_metrics_snap(m, &snap);
	return fs_metrics_write(&snap, &sink);
}

int ctl_read_all(struct mount *m, uint64_t ino, char **ret, size_t *ret_len)
{
	struct text t = {0};

	if (ino == CTL_STATS_INO) {
		int r = stats_text(m, &t);

		if (r < 0 && !t.oom) {
			free(t.s);
			return r;
		}
	} else if (ino == CTL_CONFIG_INO) {
		pthread_mutex_lock(&m->opts_lock);
		size_t n = fs_opts_format(m->o, NULL, 0);
		t.s = malloc(n + 1);
		if (t.s) {
			fs_opts_format(m->o, t.s, n + 1);
			t.len = n;
		} else {
			t.oom = true;
		}
		pthread_mutex_unlock(&m->opts_lock);
	} else {
		return -EISDIR;
	}
	if (t.oom) {
		free(t.s);
		return -ENOMEM;
	}
	*ret = t.s;
	*ret_len = t.len;
	return 0;
}

/* ---- extended attributes ------------------------------------------------------------------- */

/* FUSE's size protocol: size 0 asks how long; too small is ERANGE. */
static int xattr_answer(const char *v, size_t n, char *buf, size_t size)
{
	if (n > 65536)
		return -E2BIG;
	if (size == 0)
		return (int)n;
	if (size < n)
		return -ERANGE;
	memcpy(buf, v, n);
	return (int)n;
}

struct blocks {
	uint64_t *v;
	size_t n, cap;
	bool oom;
};

static void blocks_add(void *arg, uint64_t blk)
{
	struct blocks *b = arg;

	if (b->oom)
		return;
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		uint64_t *v = realloc(b->v, cap * sizeof(*v));

		if (!v) {
			b->oom = true;
			return;
		}
		b->v = v;
		b->cap = cap;
	}
	b->v[b->n++] = blk;
}

static int cmp_blk(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* " NAME=0-15,32": the blocks of @o that tier @tr of the chain lists (tier_ops.each), as
 * ranges (the first RESIDENCY_RANGES, then a count), after what the memory tiers hold; nothing
 * when it holds none. The cost is a walk of the tier's index (bounded by the tier's size),
 * never of the object's size. */
static void tier_residency(const struct tier *tr, struct cache_oid oid, struct text *t,
			   bool first)
{
	struct blocks b = {0};
	size_t ranges = 0;

	tr->ops->each(tr->self, oid, blocks_add, &b);
	if (b.oom) {
		t->oom = true;
		goto out;
	}
	if (!b.n)
		goto out;
	qsort(b.v, b.n, sizeof(*b.v), cmp_blk);
	put(t, "%s%s=", first ? "" : " ", tr->ops->name);
	for (size_t i = 0; i < b.n;) {
		size_t j = i;

		while (j + 1 < b.n && b.v[j + 1] <= b.v[j] + 1)
			j++;
		if (ranges < RESIDENCY_RANGES) {
			if (b.v[i] == b.v[j])
				put(t, "%s%llu", ranges ? "," : "", (unsigned long long)b.v[i]);
			else
				put(t, "%s%llu-%llu", ranges ? "," : "", (unsigned long long)b.v[i],
				    (unsigned long long)b.v[j]);
		}
		ranges++;
		i = j + 1;
	}
	if (ranges > RESIDENCY_RANGES)
		put(t, " (+%zu more ranges)", ranges - RESIDENCY_RANGES);
out:
	free(b.v);
}

/* "hot=0-15,32 lagging=16-20 NAME=0-40", "none", or the first RESIDENCY_RANGES ranges and a
 * count (each chain tier's ranges counted on their own: a block in a tier of the chain is
 * often in memory too). The chain's tiers that list their blocks (tier_ops.each) follow the
 * memory tiers, in chain order. */
static void residency_text(struct mount *m, const struct fobj *o, struct text *t)
{
	struct cache_obj co = {.id = o->id, .size = o->size, .mtime = o->mtime, .ctx = (void *)o};
	char buf[4096];
	int n = cache_residency_text(m->c, &co, RESIDENCY_RANGES, buf, sizeof(buf));
	const struct tier *chain;
	unsigned nchain = cache_chain(m->c, &chain), listing = 0;
	size_t before;

	if (n < 0) {
		t->oom = true;
		return;
	}
	for (unsigned i = 0; i < nchain; i++)
		listing += chain[i].ops->each != NULL;
	if (!listing) {
		put(t, "%s", buf); /* 64 ranges of two 20-digit numbers fit: never truncated */
		return;
	}
	bool none = strcmp(buf, "none") == 0;

	if (!none)
		put(t, "%s", buf);
	before = t->len;
	for (unsigned i = 0; i < nchain && !t->oom; i++)
		if (chain[i].ops->each)
			tier_residency(&chain[i], o->id, t, none && t->len == before);
	if (none && t->len == before && !t->oom)
		put(t, "none");
}

int fs_tier_residency(const struct tier *chain, unsigned n, struct cache_oid oid, char **ret)
{
	struct text t = {0};

	for (unsigned i = 0; i < n && !t.oom; i++)
		if (chain[i].ops->each)
			tier_residency(&chain[i], oid, &t, t.len == 0);
	if (!t.oom && !t.s)
		put(&t, "%s", "");
	if (t.oom) {
		free(t.s);
		return -ENOMEM;
	}
	*ret = t.s;
	return 0;
}

int ctl_getxattr(struct mount *m, uint64_t ino, const char *name, char *buf, size_t size)
{
	struct text t = {0};
	struct fobj *o = NULL;
	int r;

	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)) != 0)
		return -ENODATA;
	name += strlen(XATTR_PREFIX);
	if (ino == 1) {
		char line[64];

		pthread_mutex_lock(&m->opts_lock);
		r = fs_opts_live_value(m->o, name, line, sizeof(line));
		pthread_mutex_unlock(&m->opts_lock);
		if (r < 0)
			return -ENODATA;
		return xattr_answer(line, strlen(line), buf, size);
	}
	if (ctl_is(ino))
		return -ENODATA;
	r = ns_peek(m->ns, ino, &o);
	if (r < 0)
		return r == -EISDIR || r == -ENODATA ? -ENODATA : r;
	if (strcmp(name, "tier") == 0) {
		struct cache_obj co = {.id = o->id, .size = o->size, .mtime = o->mtime};

		put(&t, "%s", cache_tier_name(cache_route(m->c, &co)));
	} else if (strcmp(name, "etag") == 0 && o->etag[0]) {
		put(&t, "%s", o->etag);
	} else if (strcmp(name, "cached") == 0) {
		residency_text(m, o, &t);
	} else {
		fobj_put(o);
		return -ENODATA;
	}
	fobj_put(o);
	if (t.oom) {
		free(t.s);
		return -ENOMEM;
	}
	r = xattr_answer(t.s ? t.s : "", t.len, buf, size);
	free(t.s);
	return r;
}

/*
 * May the caller of a request change settings? @uid is the request's (the caller's fsuid,
 * from the kernel, trustworthy); @pid its thread, as tierfs's pid namespace numbers it (0
 * when the caller is outside it).
 *
 * The owner check needs nothing else. The capability check reads CapEff from
 * /proc/PID/status, since the FUSE protocol carries no capabilities. Three things make that
 * trustworthy enough:
 *   - the caller is blocked in setxattr until we answer, so the thread cannot exec or exit
 *     on its own; only a fatal signal can end it early, and then its pid could be reused;
 *   - the /proc/PID directory is opened once and both files are read through it, so they
 *     describe one process; and that process's fsuid must be the request's uid, so a
 *     reused pid only passes if it belongs to the same user and holds CAP_SYS_ADMIN itself;
 *   - the process must be in tierfs's own user namespace: CapEff counts capabilities in the
 *     process's namespace, and any user gets a full set inside `unshare -Ur`.
 * The race left (kill the caller, then a process of the same uid with CAP_SYS_ADMIN takes
 * its pid, all within this call) gains nothing: that process could steer the mount itself.
 */
static bool may_steer(uid_t uid, pid_t pid)
{
	char path[64], line[256];
	unsigned long long caps = 0;
	long fsuid = -1;
	struct stat mine, theirs;
	bool have_caps = false;
	int dir, fd;
	FILE *f;

	if (uid == getuid())
		return true;
	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return false;
	if (stat("/proc/self/ns/user", &mine) < 0 || fstatat(dir, "ns/user", &theirs, 0) < 0 ||
	    mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino) {
		close(dir);
		return false;
	}
	fd = openat(dir, "status", O_RDONLY | O_CLOEXEC);
	close(dir);
	f = fd < 0 ? NULL : fdopen(fd, "re");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	while (fgets(line, sizeof(line), f)) {
		long ids[4];

		if (sscanf(line, "Uid: %ld %ld %ld %ld", &ids[0], &ids[1], &ids[2], &ids[3]) == 4)
			fsuid = ids[3];
		else if (sscanf(line, "CapEff: %llx", &caps) == 1)
			have_caps = true;
	}
	fclose(f);
	return fsuid == (long)uid && have_caps && (caps & (1ULL << CAP_SYS_ADMIN_BIT));
}

int ctl_set(struct mount *m, uid_t uid, pid_t pid, const char *how, const char *name,
	    const char *value, char *err, size_t errlen)
{
	struct fs_live live = {.c = m->c};
	struct fs_opts saved;
	char who[32];
	int r;

	snprintf(who, sizeof(who), "uid %lu", (unsigned long)uid);
	err[0] = '\0';
	if (!may_steer(uid, pid)) {
		fs_log_once(&m->log, FUSE_LOG_WARNING, who, "not the operator",
			    "%s %.64s refused: uid %lu is not the mount's owner and lacks "
			    "CAP_SYS_ADMIN", how, name, (unsigned long)uid);
		snprintf(err, errlen, "%.64s: uid %lu is not the mount's owner and lacks "
			 "CAP_SYS_ADMIN", name, (unsigned long)uid);
		return -EPERM;
	}
	if (!fs_opts_live(name)) {
		snprintf(err, errlen, "%.64s: not an option that can change on a running mount",
			 name);
		return -ENOTSUP;
	}
	pthread_mutex_lock(&m->opts_lock);
	saved = *m->o;
	r = fs_opts_set(m->o, name, value, err, errlen);
	if (r == 0)
		r = fs_opts_apply(m->o, name, &live);
	if (r < 0)
		*m->o = saved; /* numbers only: no string of the struct changes here */
	pthread_mutex_unlock(&m->opts_lock);
	if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "%.64s=%.64s: %s", name, value, strerror(-r));
		/* err echoes the value: fs_log_once keeps printable ASCII and bounds the line */
		fs_log_once(&m->log, FUSE_LOG_WARNING, who, "bad value", "%s %s refused: %.200s",
			    how, name, err);
		return r == -ENOENT ? -ENOTSUP : -EINVAL;
	}
	return 0;
}

int ctl_setxattr(struct mount *m, uid_t uid, pid_t pid, uint64_t ino, const char *name,
		 const char *value, size_t size)
{
	char val[128], err[256];

	if (ino != 1 && ino != CTL_DIR_INO)
		return m->writable ? -ENOTSUP : -EROFS; /* no attributes kept: no ACL either, and
							 * sed -i, cp -a go on without them */
	if (strncmp(name, XATTR_PREFIX, strlen(XATTR_PREFIX)) != 0)
		return may_steer(uid, pid) ? -ENOTSUP : -EPERM;
	name += strlen(XATTR_PREFIX);
	if (size >= sizeof(val))
		return may_steer(uid, pid) ? -EINVAL : -EPERM;
	memcpy(val, value, size);
	val[size] = '\0';
	while (size && (val[size - 1] == '\n' || val[size - 1] == ' '))
		val[--size] = '\0';
	return ctl_set(m, uid, pid, "setxattr", name, val, err, sizeof(err));
}
