/*
 * cachecfg.c - a mount's options as the cache's configuration: the one place that says which
 * option becomes which field of struct cache_cfg, shared by the mount (mount.c's open_cache)
 * and by tierfs-sim, which replays traces through the same cache with the same options.
 *
 *   struct fs_opts ──fs_cache_cfg──► struct cache_cfg (all but the chain, which each program
 *                                    assembles from its own tiers)
 *
 * No state, no locking. Workload: once per mount, once per simulated mount.
 */
#include <stdint.h>

#include "cache.h"
#include "fs.h"

void fs_cache_cfg(const struct fs_opts *o, bool disk, struct cache_cfg *ret)
{
	*ret = (struct cache_cfg){
	    .block_size = (uint32_t)o->block_size,
	    .hot_size = o->hot_size,
	    .hot_ttl = o->hot_ttl,
	    .lagging = o->lagging,
	    .lagging_size = o->lagging_size,
	    .lagging_ttl = o->lagging_ttl,
	    .lagging_rate = o->lagging_rate,
	    .lagging_burst = o->lagging_burst,
	    .lagging_ops = o->lagging_ops,
	    .readahead = (uint32_t)o->readahead,
	    .prefault = o->prefault,
	    .bounce_limit = CACHE_BOUNCE_LIMIT,
	};
	/* random reads of a hot object that the local tiers cannot hold as whole blocks fetch
	 * parts (the disk tier counts if it opened); with shared=, whole blocks also serve the
	 * fleet: keep them */
	if (!o->shared) {
		uint64_t d = disk ? o->disk_size : 0;

		ret->hot_parts_above = o->hot_size > UINT64_MAX - d ? UINT64_MAX : o->hot_size + d;
	}
}
