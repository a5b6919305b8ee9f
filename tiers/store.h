/*
 * store.h - the object store as the last tier of the cache's chain (store.c): what is not in a
 * tier above is read from the store, through the backend.
 */
#ifndef TIERFS_STORE_H
#define TIERFS_STORE_H

#include "backend.h"
#include "tier.h"

/* The store tier's state: the backend, and how to name an object the cache hands over. */
struct store_tier {
	struct backend *b;
	/* The object @ctx (cache_obj.ctx, tier_io.ctx) as the store knows it: its key, and the
	 * ETag to read it by ("" if none). The mount's objects are fs/'s; the tier only reads. */
	void (*object)(const void *ctx, const char **ret_path, const char **ret_etag);
};

/* The chain's entry for @st, which must outlive the chain. */
struct tier store_tier(struct store_tier *st);

#endif
