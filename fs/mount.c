/*
 * mount.c - a mount's life: settings to configurations, setup, the session loop, teardown.
 *
 *   fs_main, one step each:
 *   open_backend   fs_opts ──► backend_cfg ──► backend_new, backend_check (the store answers?)
 *   open_tiers             ──► tier_openers: each tier below memory from its options
 *                                              (cache_dir: the disk tier, rebuilt by a scan;
 *                                              shared=: the fleet tier, tiers/fleet.c)
 *   open_cache             ──► cache_cfg   ──► cache_new (with fs_cache_env: clocks, timers,
 *                                              references; chain_of: the tiers, the store)
 *   open_ns                ──► ns_cfg      ──► ns_new (the root's first listing starts once
 *                                              the I/O thread runs)
 *   open_session           ──► FUSE args   ──► fuse_session_new(fs_ops), signal handlers
 *   mount_session, daemonize, serve            ─► mount ─► device I/O (device.c)
 *                                              ─► daemonize ─► loop
 *   teardown                                   everything above, in the opposite order
 *
 * Around them, for operators: metrics= is bound first of all (endpoint.c: a port in use fails
 * before the store is asked, and nothing is mounted), and answers from after daemonize;
 * fs_preflight warns before mounting (a non-empty mountpoint, a Redis that does not answer);
 * serve tells systemd READY=1 once the mount answers and pings its watchdog from the I/O loop
 * (notify.c); teardown says STOPPING=1 and stops the endpoint before anything it reads goes.
 * trace= opens its file with the cache (a bad path fails the mount), starts its writer after
 * daemonize, and is closed once every reply is out (trace.c).
 *
 * Everything that can fail before mounting fails with one line on stderr and exit status 1.
 * The backend's I/O thread is stopped across fuse_daemonize (a fork keeps only the calling
 * thread) and started again in the child. Teardown runs in the opposite order: stop the I/O
 * thread (answering everything still waiting, while the device is still open), wait for the
 * helper threads that write to the device (fs_ops_quiesce), unmount (which closes the
 * device), let ops.c free what the kernel left open (fs_ops_drain), then the cache, the disk
 * tier (its queue written), the namespace and the backend.
 *
 * The FUSE operations themselves are in ops.c, the readahead tuning in tune.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include <fuse_lowlevel.h>

#include "disk.h"
#include "fleet.h"
#include "fs_fuse.h"
#include "tiertypes.h"

static void syslog_func(enum fuse_log_level level, const char *fmt, va_list ap)
{
	vsyslog((int)level, fmt, ap);
}

/* "fsname=URL" for mount(8) output, without user:password@ and with commas escaped. */
static char *fsname_opt(const char *url)
{
	const char *at = strchr(url, '@'), *sch = strstr(url, "://");
	size_t n = strlen(url);
	/* every character may gain a backslash */
	char *out = malloc(sizeof("fsname=") + 2 * n + sizeof(",subtype=tierfs")), *w;

	if (!out)
		return NULL;
	w = out + sprintf(out, "fsname=");
	for (const char *p = url; *p; p++) {
		if (sch && at && p == sch + 3 && at > p && !memchr(p, '/', (size_t)(at - p)))
			p = at + 1;
		if (*p == ',' || *p == '\\')
			*w++ = '\\';
		*w++ = *p;
	}
	strcpy(w, ",subtype=tierfs");
	return out;
}

/* The store's name in object ids: the URL without user:password@, so that ids (which a
 * shared tier will store) carry no secret and do not change with a password. */
static char *store_name(const char *url)
{
	const char *sch = strstr(url, "://"), *at, *slash;
	char *out;

	if (!sch)
		return strdup(url);
	at = strchr(sch + 3, '@');
	slash = strchr(sch + 3, '/');
	if (!at || (slash && slash < at))
		return strdup(url);
	out = malloc(strlen(url) + 1);
	if (out)
		sprintf(out, "%.*s%s", (int)(sch + 3 - url), url, at + 1);
	return out;
}

/* What the store tier reads an object by: the fobj's path and ETag. */
static void store_object(const void *ctx, const char **ret_path, const char **ret_etag)
{
	const struct fobj *o = ctx;

	*ret_path = o->path;
	*ret_etag = o->etag;
}

/*
 * The cache's chain below its memory tiers (cache/tier.h), in the order a miss asks them: the
 * tiers the options opened (m->below, in the order of tier_openers), then the store. @return
 * the number of tiers written into @ret.
 */
static unsigned chain_of(struct mount *m, struct tier *ret)
{
	unsigned n = 0;

	for (size_t i = 0; i < sizeof(m->below) / sizeof(m->below[0]); i++)
		if (m->below[i].ops)
			ret[n++] = m->below[i];
	m->store = (struct store_tier){.b = m->b, .object = store_object};
	ret[n++] = store_tier(&m->store);
	return n;
}

/* A listing that failed, once per directory until one succeeds (ns.c decides). */
static void ns_log(void *arg, const char *dir, int err, bool kept)
{
	fs_log_once(arg, FUSE_LOG_WARNING, dir[0] ? dir : "/", "listing failed",
		    "listing /%s failed: %s%s", dir, strerror(-err),
		    kept ? "; the last good listing is served meanwhile" : "");
}

/* The disk tier's state changes (wipe, writes off): one line each. */
static void disk_log(void *arg, int level, const char *line)
{
	(void)arg;
	(void)level; /* the disk tier's lines are all warnings */
	fuse_log(FUSE_LOG_WARNING, "tierfs: %s\n", line);
}

/*
 * Open the disk tier in cache_dir, before the cache and before mounting and daemonizing (its
 * lines reach the terminal, and a refusal leaves nothing mounted). Two failures refuse the
 * mount, with one line: a directory another mount holds (two mounts writing one ring would
 * destroy each other's blocks), and a directory that is not ours alone (another user's,
 * writable by group or others, or a symbolic link: whoever could write it could plant the
 * blocks readers get, or read the ones we put there; mounting without the tier would hide a
 * mistake the operator must fix). Any other failure (read-only, no permission, no such parent)
 * mounts without a disk tier, with one line: reads never depend on the disk.
 * @return 0, -EBUSY or -EPERM.
 */
static int open_disk(struct mount *m, struct tier *ret)
{
	struct disk *d;
	struct disk_cfg dc = {
		.dir = m->o->cache_dir,
		.size = m->o->disk_size,
		.block_size = (uint32_t)m->o->block_size,
		.lagging = m->o->disk_lagging,
		.log = disk_log,
	};
	struct disk_stats ds;
	char why[512];
	int r;

	if (!m->o->cache_dir)
		return 0;
	r = disk_open(&dc, &d, why, sizeof(why));

	if (r == -EPERM) {
		fprintf(stderr, "tierfs: cache_dir=%s\n", why);
		return r;
	}
	if (r == -EBUSY) {
		fprintf(stderr, "tierfs: cache_dir %s is in use by another tierfs mount (one mount "
				"per cache_dir)\n", dc.dir);
		return r;
	}
	if (r < 0) {
		fprintf(stderr, "tierfs: cache_dir %s: %s: mounting without a disk tier\n", dc.dir,
			strerror(-r));
		return 0;
	}
	*ret = disk_tier(d);
	disk_get_stats(d, &ds);
	if (ds.recovered_blocks)
		fuse_log(FUSE_LOG_INFO, "tierfs: disk tier %s: %llu blocks recovered in %llu ms\n",
			 dc.dir, (unsigned long long)ds.recovered_blocks,
			 (unsigned long long)ds.recovery_ms);
	return 0;
}

static void prime_done(void *arg, int err, struct ns_dir *d)
{
	ns_dir_put(d);
}

/* What fs_main sets up besides the struct mount, for its teardown. */
struct session {
	struct fuse_args args;      /* the FUSE options given to fuse_session_new */
	struct fuse_loop_config *lc; /* the multi-threaded loop's, or NULL */
	char *fsname;               /* "fsname=URL,subtype=tierfs" */
	char *store;                /* the store's name in object ids (store_name) */
	bool handlers;              /* the signal handlers are installed */
	bool mounted;               /* fuse_session_mount succeeded */
	char *realmp;               /* the mountpoint's real path, found before mounting */
	struct ctlsock *ctl;        /* the control socket (tierfs set), or NULL */
	struct fs_endpoint *ep;     /* metrics=, or NULL */
	struct fs_notify notify;    /* systemd's notify protocol */
};

static void mount_init(struct mount *m, struct fs_opts *o)
{
	*m = (struct mount){.o = o,
			    .writable = o->allow_write || o->allow_overwrite || o->allow_delete};
	fs_log_init(&m->log);
	pthread_mutex_init(&m->inval_lock, NULL);
	pthread_mutex_init(&m->opts_lock, NULL);
	pthread_cond_init(&m->inval_done, NULL);
	pthread_mutex_init(&m->handles_lock, NULL);
	pthread_mutex_init(&m->watch_lock, NULL);
}

static void mount_done(struct mount *m)
{
	fs_log_done(&m->log);
	pthread_mutex_destroy(&m->inval_lock);
	pthread_mutex_destroy(&m->opts_lock);
	pthread_cond_destroy(&m->inval_done);
	pthread_mutex_destroy(&m->handles_lock);
	pthread_mutex_destroy(&m->watch_lock);
}

/* "tierfs: ERR" for a step that failed before mounting. @return @r. */
static int setup_failed(int r, const char *err)
{
	fprintf(stderr, "tierfs: %s\n", err[0] ? err : strerror(-r));
	return r;
}

/* metrics=: listening before anything else, so that a port in use fails the mount before the
 * store is asked or anything mounted. @return 0 or -errno, with one line on stderr. */
static int open_endpoint(struct session *se, const char *spec)
{
	char err[512] = "";
	int r = fs_endpoint_open(spec, &se->ep, err, sizeof(err));

	return r < 0 ? setup_failed(r, err) : 0;
}

/* The fleet tier's lines: held back by the mount's log when they repeat; at open, plain. */
static void fleet_log(void *arg, int level, const char *obj, const char *cause, const char *line)
{
	if (obj)
		fs_log_once(arg, (enum fuse_log_level)level, obj, cause, "%s", line);
	else
		fuse_log((enum fuse_log_level)level, "tierfs: %s\n", line);
}

/* shared=: the fleet tier (Redis), attached to the backend's I/O loop (tiers/fleet.c). */
static int open_fleet(struct mount *m, struct tier *ret)
{
	const struct fs_opts *o = m->o;
	struct fleet_cfg fc = {
		.servers = o->shared,
		.password_file = o->shared_password_file,
		.key_file = o->shared_key,
		.prefix = o->shared_prefix,
		.timeout_ms = o->shared_timeout,
		.fill_lagging = o->shared_fill_lagging,
		.fleet_rate = o->fleet_lagging_rate,
		.fleet_ops = o->fleet_lagging_ops,
		.block_size = (uint32_t)o->block_size,
		.b = m->b,
		.env = fs_cache_env(m),
		.log = fleet_log,
		.log_arg = &m->log,
	};
	struct fleet *f;
	char err[512] = "";
	int r;

	if (!o->shared)
		return 0;
	r = fleet_new(&fc, &f, err, sizeof(err));
	if (r < 0)
		return setup_failed(r, err);
	*ret = fleet_tier(f);
	return 0;
}

/*
 * The tiers between memory and the store, in chain order: each opens its tier from the
 * mount's options into its slot of m->below, or leaves it empty (not asked for, or it could
 * not open and reads do without it), or refuses the mount (-errno, with one line on stderr).
 * A tier whose sockets join the backend's I/O loop opens before the loop starts (before_io).
 * A tier is one line here.
 */
static const struct tier_opener {
	const struct tier_ops *ops; /* what it opens */
	int (*open)(struct mount *m, struct tier *ret);
	bool before_io;
} tier_openers[] = {
    {&disk_tier_ops, open_disk, false},
    {&fleet_tier_ops, open_fleet, true},
};

const struct tier_ops *fs_tier_type(size_t i)
{
	return i < sizeof(tier_openers) / sizeof(tier_openers[0]) ? tier_openers[i].ops : NULL;
}

_Static_assert(sizeof(tier_openers) / sizeof(tier_openers[0]) <=
		   sizeof(((struct mount *)0)->below) / sizeof(((struct mount *)0)->below[0]),
	       "a slot for each tier");

/* Open the tiers of tier_openers whose before_io is @before_io. @return 0 or -errno. */
static int open_tiers(struct mount *m, bool before_io)
{
	for (size_t i = 0; i < sizeof(tier_openers) / sizeof(tier_openers[0]); i++) {
		int r;

		if (tier_openers[i].before_io != before_io)
			continue;
		r = tier_openers[i].open(m, &m->below[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * The store: set up, the shared tier attached to its I/O loop (before the loop starts: the
 * Redis sockets join it), the I/O thread started, and the store asked once at its root.
 * @return 0 or -errno, with one line on stderr.
 */
static int open_backend(struct mount *m)
{
	const struct fs_opts *o = m->o;
	struct backend_cfg bc = {
		.url = o->url,
		.endpoint = o->endpoint,
		.region = o->region,
		.path_style = o->path_style,
		.profile = o->profile,
		.credentials = o->credentials,
		.manifest = o->manifest,
		.ca_file = o->ca_file,
		.insecure = o->insecure,
		.max_conns = (unsigned)o->max_conns,
		.timeout_s = (unsigned)o->timeout,
		.retries = (unsigned)o->retries,
		.writable = m->writable,
		.log = fs_backend_log,
		.log_arg = &m->log,
	};
	char err[512] = "";
	int r = backend_new(&bc, &m->b, err, sizeof(err));

	if (r < 0)
		return setup_failed(r, err);
	if (m->writable && (r = wpool_new(o, &m->wpool)) < 0)
		return setup_failed(r, "out of memory");
	r = open_tiers(m, true);
	if (r < 0)
		return r;
	r = backend_start(m->b);
	if (r == 0)
		r = backend_check(m->b, err, sizeof(err));
	return r < 0 ? setup_failed(r, err) : 0;
}

/*
 * The memory tiers, given the mount's environment (fs_cache_env: clocks, fetches through the
 * shared tier and the store, the disk tier below). The environment is copied to *ret_env, so
 * the namespace runs on the same clock. @return 0 or -errno, with one line on stderr.
 */
static int open_cache(struct mount *m, struct cache_env *ret_env)
{
	struct cache_cfg cc;
	struct cache_env env;
	struct tier chain[TIER_CHAIN_MAX];
	int r;

	/* cachecfg.c, shared with tierfs-sim: whether the disk tier opened */
	fs_cache_cfg(m->o, m->below[0].ops != NULL, &cc);
	env = fs_cache_env(m);
	cc.chain = chain;
	cc.nchain = chain_of(m, chain);
	r = cache_new(&cc, &env, &m->c);
	if (r < 0) {
		fprintf(stderr, "tierfs: cannot allocate the cache (hot_size + lagging_size): %s\n",
			strerror(-r));
		return r;
	}
	*ret_env = env;
	return 0;
}

/* The namespace, on the cache's clock @env. @return 0 or -ENOMEM. */
static int open_ns(struct mount *m, const struct cache_env *env, struct session *se)
{
	const struct fs_opts *o = m->o;

	se->store = store_name(o->url);
	if (!se->store)
		return -ENOMEM;
	struct ns_cfg nc = {
		.backend = m->b,
		.store = se->store,
		.metadata_ttl = o->metadata_ttl,
		.negative_ttl = o->negative_ttl,
		.immutable = o->immutable,
		.uid = (uid_t)o->uid,
		.gid = (gid_t)o->gid,
		.file_mode = (mode_t)o->file_mode,
		.dir_mode = (mode_t)o->dir_mode,
		.block_size = (uint32_t)o->block_size,
		.log = ns_log,
		.log_arg = &m->log,
		.now_ns = env->mono_ns, /* one clock for the cache and the namespace */
		.clock_arg = env->arg,
		.defer = env->defer,    /* and one timer queue: the I/O loop's */
	};
	m->ns = ns_new(&nc);
	return m->ns ? 0 : -ENOMEM;
}

/*
 * The FUSE session: its options (always default_permissions: the kernel enforces uid, gid and
 * the modes, so another user of an allow_other mount gets only what the modes give, and no
 * setxattr on the root unless dir_mode lets them write it), then the session and its signal
 * handlers. @return 0 or -errno, with one line on stderr.
 */
static int open_session(struct mount *m, struct session *se)
{
	const struct fs_opts *o = m->o;
	struct fuse_args *a = &se->args;

	se->fsname = fsname_opt(o->url);
	/* the control socket's name: resolved now, as a stat of the mountpoint would wait for
	 * the session loop once it is mounted */
	se->realmp = realpath(o->mountpoint, NULL);
	if (!se->fsname || fuse_opt_add_arg(a, "tierfs") < 0 || fuse_opt_add_arg(a, "-o") < 0 ||
	    fuse_opt_add_arg(a, se->fsname) < 0 || fuse_opt_add_arg(a, "-o") < 0 ||
	    fuse_opt_add_arg(a, m->writable ? "default_permissions"
					    : "default_permissions,ro") < 0 ||
	    (o->fuse_opts &&
	     (fuse_opt_add_arg(a, "-o") < 0 || fuse_opt_add_arg(a, o->fuse_opts) < 0)) ||
	    (o->debug && fuse_opt_add_arg(a, "-d") < 0)) {
		fprintf(stderr, "tierfs: out of memory\n");
		return -ENOMEM;
	}
	m->se = fuse_session_new(a, &fs_ops, sizeof(fs_ops), m);
	if (!m->se) {
		fprintf(stderr, "tierfs: libfuse refused the FUSE options '%s'\n",
			o->fuse_opts ? o->fuse_opts : "");
		return -EINVAL;
	}
	if (fuse_set_signal_handlers(m->se) < 0) {
		fprintf(stderr, "tierfs: cannot install signal handlers\n");
		return -EIO;
	}
	se->handlers = true;
	return 0;
}

static int mount_session(struct mount *m, struct session *se)
{
	if (fuse_session_mount(m->se, m->o->mountpoint) < 0) {
		fprintf(stderr, "tierfs: cannot mount on %s (is /dev/fuse usable, fusermount3 "
				"installed, and the mountpoint not already mounted?)\n",
			m->o->mountpoint);
		return -EIO;
	}
	se->mounted = true;
	if (fs_device_attach(m) < 0) {
		fprintf(stderr, "tierfs: cannot set up the FUSE device's I/O\n");
		return -EIO;
	}
	fs_tune_readahead(m->o->mountpoint, FS_MAX_REQUEST / 1024); /* best effort */
	return 0;
}

/* Into the background (unless -f), with the I/O thread stopped across the fork, which keeps
 * only the calling thread; from here on lines go to syslog. @return 0 or -errno. */
static int daemonize(struct mount *m)
{
	int r;

	backend_stop(m->b);
	if (!m->o->foreground) {
		openlog("tierfs", LOG_PID, LOG_DAEMON);
		fuse_set_log_func(syslog_func);
	}
	if (fuse_daemonize(m->o->foreground) < 0)
		return -EIO;
	__atomic_store_n(&m->log.live, true, __ATOMIC_RELAXED);
	r = backend_start(m->b);
	if (r < 0)
		fuse_log(FUSE_LOG_ERR, "tierfs: cannot start the I/O thread: %s\n", strerror(-r));
	return r;
}

/* Serve until unmounted. @return the exit status. */
static int serve(struct mount *m, struct session *se)
{
	int r;

	/* after the fork of fuse_daemonize: the socket's thread must be the child's; before
	 * READY=1, so that a unit started after this one can steer it */
	r = se->realmp ? ctlsock_start(m, se->realmp, &se->ctl) : -ENOENT;
	if (r < 0)
		fuse_log(FUSE_LOG_WARNING, "tierfs: no control socket (%s): tierfs set cannot "
			 "reach this mount\n", strerror(-r));
	r = fs_notify_serving(&se->notify, m->b, m->o, fs_endpoint_addr(se->ep));
	if (r < 0)
		fuse_log(FUSE_LOG_ERR, "tierfs: cannot tell systemd: %s\n", strerror(-r));

	/* the root's first listing starts now, so that the first ls and the control
	 * directory's lookup find it (or find it in flight) */
	ns_opendir_async(m->ns, 1, prime_done, NULL);
	if (m->o->single_thread) {
		r = fuse_session_loop(m->se);
	} else {
		se->lc = fuse_loop_cfg_create();
		if (!se->lc)
			return 1;
		fuse_loop_cfg_set_max_threads(se->lc, 16);
		r = fuse_session_loop_mt(m->se, se->lc);
	}
	/* -ECONNABORTED: a worker took a request off the device while the unmount was tearing
	 * the connection down (the kernel disconnects the processing queue first, and a read
	 * that dequeued a request then fails with it; seen after a lazy unmount, when closing
	 * the last file queues a RELEASE as the superblock goes). libfuse reports it as a read
	 * error, but the mount ended as it does with -ENODEV. */
	return r < 0 && r != -ECONNABORTED ? 1 : 0;
}

/* Everything set up, in the opposite order; each part may be missing. */
static void teardown(struct mount *m, struct session *se)
{
	ctlsock_stop(se->ctl);
	fs_notify_stopping(&se->notify);
	fs_endpoint_free(se->ep); /* it reads everything below */
	se->ep = NULL;
	/* answer everything still waiting before the cache goes, and before the device closes:
	 * the answers and the helpers' notifications write to it */
	if (m->b)
		backend_stop(m->b);
	/* disk reads still queued complete (a miss finds the backend stopped) before the cache
	 * they answer goes */
	for (size_t i = 0; i < sizeof(m->below) / sizeof(m->below[0]); i++)
		if (m->below[i].ops && m->below[i].ops->stop)
			m->below[i].ops->stop(m->below[i].self);
	fs_ops_quiesce(m);
	if (se->mounted)
		fuse_session_unmount(m->se);
	fs_notify_done(&se->notify); /* its stat of the mountpoint has returned */
	if (se->handlers)
		fuse_remove_signal_handlers(m->se);
	fs_ops_drain(m);
	fs_trace_close(m); /* every reply is out */
	cache_free(m->c);
	/* after the cache: no put can come; their queues are written */
	for (size_t i = 0; i < sizeof(m->below) / sizeof(m->below[0]); i++)
		if (m->below[i].ops && m->below[i].ops->close)
			m->below[i].ops->close(m->below[i].self);
	ns_free(m->ns);
	wpool_free(m->wpool); /* after the handles: their buffers are back */
	backend_free(m->b);
	if (m->se)
		fuse_session_destroy(m->se);
	if (se->lc)
		fuse_loop_cfg_destroy(se->lc);
	fuse_opt_free_args(&se->args);
	free(se->fsname);
	free(se->store);
	free(se->realmp);
}

int fs_main(struct fs_opts *o)
{
	struct mount m;
	struct session se = {.args = FUSE_ARGS_INIT(0, NULL)};
	struct cache_env env;
	int status = 1;

	mount_init(&m, o);
	fs_notify_init(&se.notify, o->mountpoint);
	if (o->metrics && open_endpoint(&se, o->metrics) < 0)
		goto out;
	if (open_backend(&m) < 0)
		goto out;
	if (open_tiers(&m, false) < 0)
		goto out;
	if (open_cache(&m, &env) < 0 || (o->trace && fs_trace_open(&m) < 0))
		goto out;
	if (open_ns(&m, &env, &se) < 0) {
		fprintf(stderr, "tierfs: out of memory\n");
		goto out;
	}
	fs_preflight(o);
	if (open_session(&m, &se) < 0 || mount_session(&m, &se) < 0 || daemonize(&m) < 0 ||
	    fs_endpoint_start(se.ep, &m) < 0 || fs_trace_start(&m) < 0)
		goto out;
	m.mounted_ns = env.mono_ns(env.arg); /* the control directory's grace counts from here */
	status = serve(&m, &se);
out:
	teardown(&m, &se);
	mount_done(&m);
	return status;
}
