/*
 * env.c - the mount's environment as cache/ and ns.c see it (struct cache_env): the clocks,
 * the I/O loop's timers, the plug around a batch of reads, and the references that keep an
 * object version alive while the cache works on it. One clock for everything in fs/ that times
 * (fs_now_ns: latencies, the trace, the namespace).
 *
 * A leaf of fs/: it calls into backend/ and the namespace's fobj references, and nothing else
 * of fs/ calls back into it, so the tiers (fleet.c), the operations (ops.c) and the mount's
 * setup (mount.c) can all take it without a circle.
 */
#include <stdint.h>
#include <time.h>

#include "fs_i.h"

uint64_t fs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t env_mono(void *arg)
{
	(void)arg;
	return fs_now_ns();
}

static int64_t env_wall(void *arg)
{
	return (int64_t)time(NULL);
}

static int env_defer(void *arg, uint64_t delay_ns, void (*cb)(void *), void *cb_arg)
{
	return backend_defer(((struct mount *)arg)->b, delay_ns, cb, cb_arg);
}

static void env_plug(void *arg)
{
	backend_plug(((struct mount *)arg)->b);
}

static void env_unplug(void *arg)
{
	backend_unplug(((struct mount *)arg)->b);
}

static void env_hold(void *ctx)
{
	fobj_get(ctx);
}

static void env_release(void *ctx)
{
	fobj_put(ctx);
}

struct cache_env fs_cache_env(struct mount *m)
{
	return (struct cache_env){
		.arg = m,
		.mono_ns = env_mono,
		.wall_s = env_wall,
		.defer = env_defer,
		.hold = env_hold,
		.release = env_release,
		.plug = env_plug,
		.unplug = env_unplug,
	};
}
