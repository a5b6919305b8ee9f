/*
 * ring.c - the segmented ring store: one per cache tier (BookKeeper ReadCache, Pulsar PIP-174).
 *
 * One allocation (the arena) is cut into nseg equal segments used as a ring. Blocks are
 * appended into the current segment; when it is full (bytes or index entries) or expired, the
 * next segment in ring order becomes current and its index is cleared. That is the whole
 * eviction policy: rotating one segment forgets everything in it, in O(1), with no per-block
 * allocation and no LRU list. Nothing is allocated after ring_new(), which refuses (-EINVAL) a
 * size that cannot make segments of two blocks each: the tiers' geometry rule lives here.
 *
 *   arena (mmap, page aligned, nseg * seg_size bytes; seg_size is a multiple of 64, and of
 *   4096 when blocks can be that large)
 *   +---------------------+---------------------+---------------------+---------------------+
 *   | seg 0               | seg 1               | seg 2  (current)    | seg 3               |
 *   | [blk][blk][blk]...  | [blk][blk]...       | [blk][blk]  ^cursor |  (oldest, next to   |
 *   |                     |                     |                     |   be reused)        |
 *   +---------------------+---------------------+---------------------+---------------------+
 *     a block of 4 KiB or more starts at a page boundary, a smaller one at a 64-byte
 *     boundary; the gap before a block is padding. Page-aligned blocks can be the target of
 *     a direct read (the disk tier reads O_DIRECT straight into them).
 *
 *   per segment: struct seg { cursor, t0, nentries, pins, gen, table }
 *   table: open addressing, linear probing, tsize = next pow2 >= 2 * max_entries slots
 *     +------------------------------------------+
 *     | slot: oid blk off/64 len gen state       |  gen != seg.gen   -> empty
 *     | ...                                      |  state RESERVED   -> invisible, pinned
 *     +------------------------------------------+  state COMMITTED  -> visible
 *                                                    state DEAD       -> tombstone
 *
 * Clearing a segment's index is a generation bump: a slot is live only while its gen equals
 * the segment's gen, so rotation never walks the table (when the 32-bit counter wraps, the
 * table is zeroed once and gen restarts at 1).
 *
 * Ordering and duplicates. Slots never become empty within a generation (an aborted or
 * superseded entry turns into a tombstone, whose space is wasted until the segment is
 * reused), and an insert takes the first empty slot of its probe sequence. So along the probe
 * sequence of a key, its entries appear in reservation order. When an entry is committed, the
 * probe sequence is walked and only the entry reserved last among the committed ones for that
 * key stays committed; the others become tombstones. A segment therefore holds at most one
 * committed entry per key, and a lookup stops at the first committed match. Across segments,
 * the newer segment wins: lookup walks from the current segment backwards. Together:
 * a lookup returns the committed entry whose ring_reserve() came last. A commit that comes
 * after a newer entry for the same key was already committed leaves the older one invisible
 * (the caller's pin on it stays valid).
 *
 * Expiry. A segment's t0 is the time of the first insert after it became current. With a TTL
 * of ttl_ns != 0, its blocks are visible while now - t0 < ttl_ns and gone once
 * now - t0 >= ttl_ns (a clock reading before t0 counts as age 0). Expiry is evaluated at each
 * lookup against the TTL of that moment, so ring_set_ttl() takes effect at once in both
 * directions: raising the TTL makes blocks of a not-yet-reused segment visible again. A
 * reserve into an expired current segment rotates first.
 *
 * Pins. Each segment counts its pins: one per outstanding reservation, lookup ref or
 * ring_pin(). Rotation into a pinned segment is refused (-EBUSY, counted in reserve_busy), so
 * bytes behind a ref never change while the ref is held.
 *
 * Locking: one mutex per ring (struct ring.lock) guards every field of the ring, its
 * segments and tables, pins included. It is held only for index work, never while bytes are
 * copied: the caller fills a reservation and reads a lookup's bytes outside the lock, the pin
 * keeping them in place. Lookup costs one hash and one short probe per unexpired, non-empty
 * segment (load factor at most 1/2).
 *
 * Renaming and forgetting. ring_rekey() gives every committed block of one object version a
 * new key, the bytes staying where they are (a block written through the mount is stored
 * before the store names its version: under a provisional one, renamed once the store has
 * answered); ring_drop() forgets them all (the object was deleted). Both walk every table, as
 * ring_each_block() does, and a segment whose index is full keeps nothing of the renamed.
 *
 * Workload: a FUSE read of a cached block does one ring_lookup() and one ring_unpin(); a miss
 * does one ring_reserve(), fills block_size bytes from the network, ring_commit() and
 * ring_unpin(). nseg is small (4 to a few dozen); segments hold from a few to thousands of
 * blocks. ring_get_stats() and ring_each_block() (user.tierfs.cached) walk every table: their
 * cost follows the ring's size, never an object's.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_i.h"

/* State of a live index slot (one whose gen matches its segment's). */
enum {
	SLOT_RESERVED = 1, /* bytes being filled; invisible; holds a pin */
	SLOT_COMMITTED,	   /* visible to lookups */
	SLOT_DEAD,	   /* aborted or superseded; invisible; space wasted until rotation */
};

#define NO_SLOT UINT32_MAX

/* One index entry; 40 bytes. Guarded by ring.lock. */
struct slot {
	struct cache_key key; /* object version and block index */
	uint32_t off64; /* byte offset of the block inside its segment, divided by 64 */
	uint32_t len;	/* block length in bytes */
	uint32_t gen;	/* live only while equal to seg.gen; 0 (zeroed table) is never live */
	uint32_t state; /* SLOT_RESERVED, SLOT_COMMITTED or SLOT_DEAD */
};

/* One segment of the ring. Every field guarded by ring.lock. */
struct seg {
	uint64_t cursor; /* end of the last block, where place() puts the next one */
	uint64_t t0;	 /* time of the first insert since it became current (valid if nentries) */
	uint32_t nentries;  /* live slots of any state; at most ring.max_entries */
	uint32_t pins;	    /* outstanding refs into this segment; > 0 forbids reuse */
	uint32_t gen;	    /* current generation of the table; never 0 */
	struct slot *table; /* ring.tsize slots, inside ring.slots */
};

struct ring {
	pthread_mutex_t lock;  /* guards everything below that is not marked constant */
	unsigned char *arena;  /* nseg * seg_size bytes, mmap'ed; constant */
	uint64_t arena_size;   /* mapped length; constant */
	uint64_t seg_size;     /* bytes per segment, a multiple of seg_align(); constant */
	uint64_t ttl_ns;       /* blocks gone this long after their segment's t0; 0 = never */
	uint32_t nseg;	       /* number of segments, >= 4; constant */
	uint32_t max_block;    /* largest block accepted; constant */
	uint32_t max_entries;  /* index entries per segment before rotation; constant */
	uint32_t mask;	       /* tsize - 1 (tsize a power of two >= 2 * max_entries); constant */
	uint32_t cur;	       /* index of the current segment (the one appended to) */
	uint64_t rotations;    /* segments with entries that were reused */
	uint64_t reserve_busy; /* reserves refused because the next segment was pinned */
	struct seg *segs;      /* nseg segments; the array itself is constant */
	struct slot *slots;    /* nseg * tsize slots, the tables of all segments; constant */
};

static uint64_t mix64(uint64_t x)
{
	/* splitmix64 finalizer */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t key_hash(struct cache_key k)
{
	/* the oid is already a uniform hash: fold it and mix in the block */
	return mix64(k.oid.lo ^ mix64(k.oid.hi ^ mix64(k.blk + 0x9e3779b97f4a7c15ULL)));
}

#define RING_PAGE 4096u

/* Where a block of @len bytes goes in a segment whose last block ends at @cursor: a block
 * of a page or more at a page boundary, a smaller one at a 64-byte boundary. */
static uint64_t place(uint64_t cursor, uint32_t len)
{
	uint64_t a = len >= RING_PAGE ? RING_PAGE : 64;

	return (cursor + a - 1) & ~(a - 1);
}

/* What seg_size is a multiple of, so that every segment starts where place() may put a
 * block (the arena is page aligned). */
static uint64_t seg_align(uint32_t max_block)
{
	return max_block >= RING_PAGE ? RING_PAGE : 64;
}

static bool seg_expired(const struct ring *r, const struct seg *s, uint64_t now_ns)
{
	return r->ttl_ns != 0 && now_ns >= s->t0 && now_ns - s->t0 >= r->ttl_ns;
}

/* Does segment @s hold blocks a lookup at @now_ns may see? */
static bool seg_visible(const struct ring *r, const struct seg *s, uint64_t now_ns)
{
	return s->nentries > 0 && !seg_expired(r, s, now_ns);
}

static bool slot_is(const struct slot *e, struct cache_key k)
{
	return cache_key_eq(e->key, k);
}

/* @return the slot of the committed entry for @k in @s (at most one exists), or NO_SLOT. */
static uint32_t seg_find(const struct ring *r, const struct seg *s, struct cache_key k, uint64_t h)
{
	for (uint32_t i = (uint32_t)h & r->mask;; i = (i + 1) & r->mask) {
		const struct slot *e = &s->table[i];

		if (e->gen != s->gen)
			return NO_SLOT;
		if (e->state == SLOT_COMMITTED && slot_is(e, k))
			return i;
	}
}

/* Forget everything in @s: a generation bump, a real wipe only when the counter wraps. */
static void seg_clear(struct ring *r, struct seg *s)
{
	if (++s->gen == 0) {
		memset(s->table, 0, ((size_t)r->mask + 1) * sizeof(*s->table));
		s->gen = 1;
	}
	s->cursor = 0;
	s->t0 = 0;
	s->nentries = 0;
}

/*
 * Slot @idx of @s was just committed. Keep committed only the entry for its key reserved
 * last: entries before @idx on the probe sequence are older and die; if a committed one comes
 * after @idx, it is newer and @idx dies instead.
 */
static void supersede(struct ring *r, struct seg *s, uint32_t idx)
{
	struct slot *self = &s->table[idx];
	struct cache_key k = self->key;
	bool past_self = false;

	for (uint32_t i = (uint32_t)key_hash(k) & r->mask;; i = (i + 1) & r->mask) {
		struct slot *e = &s->table[i];

		if (e->gen != s->gen)
			return;
		if (i == idx) {
			past_self = true;
		} else if (e->state == SLOT_COMMITTED && slot_is(e, k)) {
			if (past_self) {
				self->state = SLOT_DEAD;
				return;
			}
			e->state = SLOT_DEAD;
		}
	}
}

static void fill_ref(const struct ring *r, uint32_t seg, uint32_t idx, struct ring_ref *ret)
{
	const struct slot *e = &r->segs[seg].table[idx];

	ret->data = r->arena + (uint64_t)seg * r->seg_size + (uint64_t)e->off64 * 64;
	ret->len = e->len;
	ret->seg = seg;
	ret->slot = idx;
}

/* The shape of a ring of @size bytes in @nseg segments: 0 and *ret_seg_size, *ret_max_entries
 * and *ret_tsize; -EINVAL when a segment cannot hold two blocks; -EFBIG when the segments are
 * too large for the index. The one home of the geometry rule (ring_geometry, ring_new). */
static int geometry(uint64_t size, uint32_t nseg, uint32_t max_block, uint64_t *ret_seg_size,
		    uint64_t *ret_max_entries, uint64_t *ret_tsize)
{
	uint64_t seg_size, max_entries, tsize;

	if (nseg < 4 || max_block == 0)
		return -EINVAL;
	seg_size = (size / nseg) & ~(seg_align(max_block) - 1);
	/* two max_block blocks, the second where place() puts it */
	if (seg_size < place(max_block, max_block) + max_block)
		return -EINVAL;
	/* offsets are stored divided by 64 in 32 bits: segments up to 256 GiB */
	if (seg_size / 64 > UINT32_MAX)
		return -EFBIG;
	max_entries = seg_size / 65536;
	if (max_entries < 64)
		max_entries = 64;
	for (tsize = 1; tsize < 2 * max_entries; tsize <<= 1)
		;
	if (tsize > (uint64_t)1 << 31 || tsize > SIZE_MAX / sizeof(struct slot) / nseg)
		return -EFBIG;
	*ret_seg_size = seg_size;
	*ret_max_entries = max_entries;
	*ret_tsize = tsize;
	return 0;
}

int ring_geometry(uint64_t size, uint32_t nseg, uint32_t max_block)
{
	uint64_t seg_size, max_entries, tsize;

	return geometry(size, nseg, max_block, &seg_size, &max_entries, &tsize);
}

int ring_new(uint64_t size, uint32_t nseg, uint32_t max_block, uint64_t ttl_ns,
	     struct ring **ret)
{
	struct ring *r = NULL;
	uint64_t seg_size, max_entries, tsize;
	void *arena;
	int err;

	err = geometry(size, nseg, max_block, &seg_size, &max_entries, &tsize);
	if (err < 0)
		return err;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->segs = calloc(nseg, sizeof(*r->segs));
	r->slots = calloc((size_t)nseg * tsize, sizeof(*r->slots));
	if (!r->segs || !r->slots)
		goto fail;
	r->arena_size = seg_size * nseg;
	arena =
	    mmap(NULL, r->arena_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED)
		goto fail;
	r->arena = arena;
	/* Huge pages where the kernel allows: a first touch then faults in 2 MiB at once. A hint;
	 * ring_prefault() faults the whole arena in now instead. */
	madvise(arena, r->arena_size, MADV_HUGEPAGE);
	if (pthread_mutex_init(&r->lock, NULL) != 0)
		goto fail;

	r->seg_size = seg_size;
	r->ttl_ns = ttl_ns;
	r->nseg = nseg;
	r->max_block = max_block;
	r->max_entries = (uint32_t)max_entries;
	r->mask = (uint32_t)(tsize - 1);
	r->cur = 0;
	for (uint32_t i = 0; i < nseg; i++) {
		r->segs[i].gen = 1;
		r->segs[i].table = r->slots + (size_t)i * tsize;
	}
	*ret = r;
	return 0;

fail:
	if (r->arena)
		munmap(r->arena, r->arena_size);
	free(r->slots);
	free(r->segs);
	free(r);
	return -ENOMEM;
}

void ring_prefault(struct ring *r)
{
	/* A hint: a kernel without MADV_POPULATE_WRITE (before 5.14) faults pages in lazily. */
#ifdef MADV_POPULATE_WRITE
	madvise(r->arena, r->arena_size, MADV_POPULATE_WRITE);
#else
	(void)r;
#endif
}

void ring_free(struct ring *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	munmap(r->arena, r->arena_size);
	free(r->slots);
	free(r->segs);
	free(r);
}

void ring_set_ttl(struct ring *r, uint64_t ttl_ns)
{
	pthread_mutex_lock(&r->lock);
	r->ttl_ns = ttl_ns;
	pthread_mutex_unlock(&r->lock);
}

int ring_reserve(struct ring *r, struct cache_key key, uint32_t len, uint64_t now_ns,
		 struct ring_ref *ret_ref)
{
	uint64_t h = key_hash(key);
	struct seg *s;
	uint64_t off;
	uint32_t i;

	if (len == 0 || len > r->max_block)
		return -EINVAL;

	pthread_mutex_lock(&r->lock);
	s = &r->segs[r->cur];
	off = place(s->cursor, len);
	/* an empty segment always takes one block: seg_size >= 2 * max_block */
	if (s->nentries > 0 && (s->nentries >= r->max_entries || off + len > r->seg_size ||
				seg_expired(r, s, now_ns))) {
		uint32_t next = r->cur + 1 == r->nseg ? 0 : r->cur + 1;
		struct seg *n = &r->segs[next];

		if (n->pins > 0) {
			r->reserve_busy++;
			pthread_mutex_unlock(&r->lock);
			return -EBUSY;
		}
		if (n->nentries > 0)
			r->rotations++;
		seg_clear(r, n);
		r->cur = next;
		s = n;
		off = 0;
	}
	if (s->nentries == 0)
		s->t0 = now_ns;

	for (i = (uint32_t)h & r->mask; s->table[i].gen == s->gen; i = (i + 1) & r->mask)
		;
	s->table[i] = (struct slot){
	    .key = key,
	    .off64 = (uint32_t)(off / 64),
	    .len = len,
	    .gen = s->gen,
	    .state = SLOT_RESERVED,
	};
	s->nentries++;
	s->cursor = off + len;
	s->pins++;
	fill_ref(r, r->cur, i, ret_ref);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void ring_commit(struct ring *r, const struct ring_ref *ref)
{
	struct seg *s = &r->segs[ref->seg];

	pthread_mutex_lock(&r->lock);
	assert(s->table[ref->slot].gen == s->gen && s->table[ref->slot].state == SLOT_RESERVED);
	s->table[ref->slot].state = SLOT_COMMITTED;
	supersede(r, s, ref->slot);
	pthread_mutex_unlock(&r->lock);
}

void ring_abort(struct ring *r, const struct ring_ref *ref)
{
	struct seg *s = &r->segs[ref->seg];

	pthread_mutex_lock(&r->lock);
	assert(s->table[ref->slot].gen == s->gen && s->table[ref->slot].state == SLOT_RESERVED);
	assert(s->pins > 0);
	s->table[ref->slot].state = SLOT_DEAD;
	s->pins--;
	pthread_mutex_unlock(&r->lock);
}

int ring_lookup(struct ring *r, struct cache_key key, uint64_t now_ns, struct ring_ref *ret_ref)
{
	uint64_t h = key_hash(key);
	uint32_t si;

	pthread_mutex_lock(&r->lock);
	si = r->cur;
	for (uint32_t n = 0; n < r->nseg; n++, si = si ? si - 1 : r->nseg - 1) {
		struct seg *s = &r->segs[si];
		uint32_t i;

		if (!seg_visible(r, s, now_ns))
			continue;
		i = seg_find(r, s, key, h);
		if (i != NO_SLOT) {
			s->pins++;
			fill_ref(r, si, i, ret_ref);
			pthread_mutex_unlock(&r->lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return -ENOENT;
}

bool ring_contains(struct ring *r, struct cache_key key, uint64_t now_ns)
{
	uint64_t h = key_hash(key);
	bool found = false;

	pthread_mutex_lock(&r->lock);
	for (uint32_t si = 0; si < r->nseg && !found; si++) {
		const struct seg *s = &r->segs[si];

		found = seg_visible(r, s, now_ns) && seg_find(r, s, key, h) != NO_SLOT;
	}
	pthread_mutex_unlock(&r->lock);
	return found;
}

/* Commit a copy of slot @e of @s (in segment @si) under @key, the bytes staying where they are
 * (r->lock held). @return false if the segment's index is full. */
static bool seg_alias(struct ring *r, struct seg *s, const struct slot *e, struct cache_key key)
{
	uint32_t i;

	if (s->nentries >= r->max_entries)
		return false;
	for (i = (uint32_t)key_hash(key) & r->mask; s->table[i].gen == s->gen; i = (i + 1) & r->mask)
		;
	s->table[i] = (struct slot){.key = key, .off64 = e->off64, .len = e->len, .gen = s->gen,
				    .state = SLOT_COMMITTED};
	s->nentries++;
	supersede(r, s, i);
	return true;
}

uint64_t ring_rekey(struct ring *r, struct cache_oid from, struct cache_oid to)
{
	uint64_t n = 0;

	pthread_mutex_lock(&r->lock);
	for (uint32_t si = 0; si < r->nseg; si++) {
		struct seg *s = &r->segs[si];

		for (uint32_t i = 0; s->nentries && i <= r->mask; i++) {
			struct slot *e = &s->table[i];

			if (e->gen != s->gen || e->state != SLOT_COMMITTED ||
			    !cache_oid_eq(e->key.oid, from))
				continue;
			if (seg_alias(r, s, e, (struct cache_key){to, e->key.blk}))
				n++;
			e->state = SLOT_DEAD;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

uint64_t ring_drop(struct ring *r, struct cache_oid oid)
{
	uint64_t n = 0;

	pthread_mutex_lock(&r->lock);
	for (uint32_t si = 0; si < r->nseg; si++) {
		struct seg *s = &r->segs[si];

		for (uint32_t i = 0; s->nentries && i <= r->mask; i++) {
			struct slot *e = &s->table[i];

			if (e->gen == s->gen && e->state == SLOT_COMMITTED &&
			    cache_oid_eq(e->key.oid, oid)) {
				e->state = SLOT_DEAD;
				n++;
			}
		}
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

void ring_each_block(struct ring *r, struct cache_oid obj, uint64_t now_ns,
		     void (*fn)(void *arg, uint64_t blk), void *arg)
{
	/* Every slot of every visible table: O(nseg x tsize), whatever the object's size. A
	 * key committed in two segments is reported twice; the caller de-duplicates. */
	pthread_mutex_lock(&r->lock);
	for (uint32_t si = 0; si < r->nseg; si++) {
		const struct seg *s = &r->segs[si];

		if (!seg_visible(r, s, now_ns))
			continue;
		for (uint32_t i = 0; i <= r->mask; i++) {
			const struct slot *e = &s->table[i];

			if (e->gen == s->gen && e->state == SLOT_COMMITTED &&
			    cache_oid_eq(e->key.oid, obj))
				fn(arg, e->key.blk);
		}
	}
	pthread_mutex_unlock(&r->lock);
}

void ring_pin(struct ring *r, const struct ring_ref *ref)
{
	pthread_mutex_lock(&r->lock);
	assert(r->segs[ref->seg].pins > 0);
	r->segs[ref->seg].pins++;
	pthread_mutex_unlock(&r->lock);
}

void ring_unpin(struct ring *r, const struct ring_ref *ref)
{
	pthread_mutex_lock(&r->lock);
	assert(r->segs[ref->seg].pins > 0);
	r->segs[ref->seg].pins--;
	pthread_mutex_unlock(&r->lock);
}

/* Is @k committed in a visible segment newer than @si (up to and including the current)? */
static bool shadowed(const struct ring *r, uint32_t si, struct cache_key k, uint64_t now_ns)
{
	uint64_t h = key_hash(k);

	for (uint32_t n = r->cur; n != si; n = n ? n - 1 : r->nseg - 1) {
		const struct seg *s = &r->segs[n];

		if (seg_visible(r, s, now_ns) && seg_find(r, s, k, h) != NO_SLOT)
			return true;
	}
	return false;
}

void ring_get_stats(struct ring *r, uint64_t now_ns, struct ring_stats *ret)
{
	struct ring_stats st = {0};

	/*
	 * blocks/bytes count what lookups can see: a key committed in several segments counts
	 * once, for its newest copy. Walks every table; not on the read path.
	 */
	pthread_mutex_lock(&r->lock);
	st.rotations = r->rotations;
	st.reserve_busy = r->reserve_busy;
	for (uint32_t si = 0; si < r->nseg; si++) {
		const struct seg *s = &r->segs[si];

		if (!seg_visible(r, s, now_ns))
			continue;
		for (uint32_t i = 0; i <= r->mask; i++) {
			const struct slot *e = &s->table[i];
			struct cache_key k = e->key;

			if (e->gen != s->gen || e->state != SLOT_COMMITTED)
				continue;
			if (shadowed(r, si, k, now_ns))
				continue;
			st.blocks++;
			st.bytes += e->len;
		}
	}
	pthread_mutex_unlock(&r->lock);
	*ret = st;
}

uint32_t ring_nseg(const struct ring *r)
{
	return r->nseg;
}

uint64_t ring_seg_size(const struct ring *r)
{
	return r->seg_size;
}
