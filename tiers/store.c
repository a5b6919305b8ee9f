/*
 * store.c - the object store as the last tier of the cache's chain (tier.h).
 *
 *     cache ─► [disk] ─► [fleet] ─► store: backend_read(path, ETag, off, len) ─► tier_answer
 *
 * It always answers: with the bytes, or with the store's error, which is the read's. A
 * lagging block is read at background priority, so that a replay never takes the connection
 * slots the tail's reads need (the backend keeps some for urgent reads). Nothing is kept:
 * the store holds everything already, and a written object reaches it by the write path.
 *
 * No state of its own, no locking: the backend's I/O thread answers. What the object is (its
 * path and ETag) the mount says (store_tier.object): the tier does not know fs/'s objects.
 */
#include "store.h"

static void store_answered(void *arg, int err)
{
	tier_answer(arg, err);
}

static int store_get(void *self, struct tier_io *io)
{
	const struct store_tier *st = self;
	const char *path, *etag;

	st->object(io->ctx, &path, &etag);
	return backend_read(st->b, path, etag, io->off, io->len, io->dst,
			    io->lagging ? BK_BACKGROUND : BK_URGENT, store_answered, io);
}

static const struct tier_ops store_ops = {
	.name = "store",
	.get = store_get,
};

struct tier store_tier(struct store_tier *st)
{
	return (struct tier){.ops = &store_ops, .self = st};
}
