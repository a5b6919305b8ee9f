/*
 * tiertypes.h - the kinds of tier a mount may put in its cache's chain below memory, as the
 * program knows them (mount.c's table), and `tierfs status`'s screen drawn from them
 * (status.c). No FUSE here: the status command is a client of the stats file.
 */
#ifndef TIERFS_TIERTYPES_H
#define TIERFS_TIERTYPES_H

#include <stddef.h>
#include <stdio.h>

#include "cache.h"
#include "tier.h"

/* The @i'th tier type a mount may open (its tier_ops: name, status), in chain order; NULL past
 * the last. */
const struct tier_ops *fs_tier_type(size_t i);

/* `tierfs status`'s screen for mount @mnt into @out, from two readings of its stats file (the
 * text @text_a, then @text_b @secs later), drawing the chain's tiers the stats show with the
 * status of their type in @types[0..@ntypes) (by tier_ops.name; a tier of no known type shows
 * no row and no line). @return 0 or -errno (-ENOMEM). */
int fs_status_print(FILE *out, const char *mnt, const char *text_a, const char *text_b,
		    double secs, const struct tier_ops *const *types, size_t ntypes);

/* The residency listing of @chain[0..@n) for object @oid, as user.tierfs.cached shows it after
 * the memory tiers: "NAME=0-15,32 NAME2=7" for each tier that lists blocks (tier_ops.each)
 * and holds some of @oid, "" when none does (control.c). @return 0 and *ret (the caller frees
 * it), or -ENOMEM. */
int fs_tier_residency(const struct tier *chain, unsigned n, struct cache_oid oid, char **ret);

#endif
