/*
 * test_ns.c - the namespace (fs/ns.c) against a fake store and a fake clock.
 *
 * The store is a table of objects in memory behind a struct backend with our own ops; it counts
 * the stats (HEAD) and listings it is asked for. The clock only moves when a test moves it (or
 * when the fake listing does, to play a slow listing). Nothing here sleeps or mounts.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheme.h"
#include "ns.h"

#define SEC 1000000000ULL
#define MAXOBJ 96

static struct {
	uint64_t now;
	struct {
		char path[128];
		struct bk_meta m;
		bool present;
		bool no_meta; /* listed without metadata (an index that names files only) */
	} o[MAXOBJ];
	int stats, lists;
	int stat_err;        /* nonzero: stat fails with it */
	int list_err;        /* nonzero: listings fail with it */
	uint64_t list_takes; /* a listing advances the clock this much */
	bool hold;           /* asynchronous calls wait in `held` until the test releases them */
	struct held {
		bool list;
		char path[128];
		bk_list_fn fn;
		bk_done_fn list_done;
		bk_stat_done_fn stat_done;
		void *arg;
	} held[64];
	int nheld;
	int logs;            /* failed listings reported */
	bool log_kept;       /* ... the last with the last good listing kept */
	struct timer {       /* cfg.defer's timers (mk_timed), run by fire_due */
		uint64_t due;
		void (*cb)(void *);
		void *arg;
	} timers[16];
	int ntimers;
} S;

static uint64_t fake_now(void *arg)
{
	(void)arg;
	return S.now;
}

static void put(const char *path, uint64_t size, const char *etag)
{
	int i;

	for (i = 0; i < MAXOBJ && S.o[i].present && strcmp(S.o[i].path, path); i++)
		;
	if (i == MAXOBJ || !S.o[i].present)
		for (i = 0; i < MAXOBJ && S.o[i].present; i++)
			;
	assert_true(i < MAXOBJ);
	snprintf(S.o[i].path, sizeof(S.o[i].path), "%s", path);
	S.o[i].m.size = size;
	S.o[i].m.mtime = 1000;
	snprintf(S.o[i].m.etag, sizeof(S.o[i].m.etag), "%s", etag);
	S.o[i].present = true;
}

static int f_stat(struct backend *b, const char *path, struct bk_meta *ret)
{
	(void)b;
	S.stats++;
	if (S.stat_err)
		return S.stat_err;
	for (int i = 0; i < MAXOBJ; i++) {
		if (S.o[i].present && strcmp(S.o[i].path, path) == 0) {
			*ret = S.o[i].m;
			return 0;
		}
	}
	return -ENOENT;
}

/* Direct children of @dir ("" = root): files, and the first segment of deeper paths. */
static int f_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	size_t dl = strlen(dir);

	(void)b;
	S.lists++;
	S.now += S.list_takes;
	for (int i = 0; i < MAXOBJ; i++) {
		const char *p = S.o[i].path, *rest, *slash;
		char name[128];
		int e;

		if (!S.o[i].present)
			continue;
		if (dl && (strncmp(p, dir, dl) != 0 || p[dl] != '/'))
			continue;
		rest = dl ? p + dl + 1 : p;
		slash = strchr(rest, '/');
		if (slash) {
			snprintf(name, sizeof(name), "%.*s", (int)(slash - rest), rest);
			e = fn(arg, name, true, NULL);
		} else {
			e = fn(arg, rest, false, S.o[i].no_meta ? NULL : &S.o[i].m);
		}
		if (e < 0)
			return e;
	}
	return 0;
}

static int f_list_now(const char *dir, bk_list_fn fn, void *arg)
{
	if (S.list_err) {
		S.lists++;
		return S.list_err;
	}
	return f_list(NULL, dir, fn, arg);
}

/* Asynchronous forms: answered before returning (as a quick store on another thread could),
 * or, with S.hold, kept until release() answers them in order. */
static int f_stat_async(struct backend *b, const char *path, bk_stat_done_fn done, void *arg)
{
	struct bk_meta m = {0};
	int e;

	if (S.hold) {
		assert_true(S.nheld < 64);
		S.held[S.nheld++] = (struct held){.stat_done = done, .arg = arg};
		snprintf(S.held[S.nheld - 1].path, 128, "%s", path);
		return 0;
	}
	e = f_stat(b, path, &m);
	done(arg, e, e == 0 ? &m : NULL);
	return 0;
}

static int f_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			void *arg)
{
	(void)b;
	if (S.hold) {
		assert_true(S.nheld < 64);
		S.held[S.nheld++] =
		    (struct held){.list = true, .fn = fn, .list_done = done, .arg = arg};
		snprintf(S.held[S.nheld - 1].path, 128, "%s", dir);
		return 0;
	}
	done(arg, f_list_now(dir, fn, arg));
	return 0;
}

/* Answer every held call (and those they make meanwhile, which are held too if S.hold). */
static void release(void)
{
	while (S.nheld) {
		struct held h = S.held[0];
		struct bk_meta m = {0};
		int e;

		memmove(&S.held[0], &S.held[1], (size_t)--S.nheld * sizeof(S.held[0]));
		if (h.list) {
			h.list_done(h.arg, f_list_now(h.path, h.fn, h.arg));
		} else {
			e = f_stat(NULL, h.path, &m);
			h.stat_done(h.arg, e, e == 0 ? &m : NULL);
		}
	}
}

static void f_log(void *arg, const char *dir, int err, bool kept)
{
	(void)arg;
	(void)dir;
	(void)err;
	S.logs++;
	S.log_kept = kept;
}

static int f_defer(void *clock_arg, uint64_t delay_ns, void (*cb)(void *), void *arg)
{
	(void)clock_arg;
	assert_true(S.ntimers < 16);
	S.timers[S.ntimers++] = (struct timer){.due = S.now + delay_ns, .cb = cb, .arg = arg};
	return 0;
}

/* Run the timers due by now, in order. */
static void fire_due(void)
{
	for (int i = 0; i < S.ntimers;) {
		struct timer t = S.timers[i];

		if (t.due > S.now) {
			i++;
			continue;
		}
		memmove(&S.timers[i], &S.timers[i + 1], (size_t)(--S.ntimers - i) * sizeof(t));
		t.cb(t.arg);
	}
}

static const struct bk_ops fake_ops = {
    .stat = f_stat, .list = f_list, .stat_async = f_stat_async, .list_async = f_list_async};
static struct backend fake_backend = {.ops = &fake_ops, .scheme = "fake"};

static struct ns *mk_cfg(uint64_t metadata_ttl, uint64_t negative_ttl, bool timed)
{
	struct ns_cfg cfg = {
	    .backend = &fake_backend,
	    .store = "fake://store",
	    .metadata_ttl = metadata_ttl,
	    .negative_ttl = negative_ttl,
	    .block_size = 65536,
	    .now_ns = fake_now,
	    .log = f_log,
	    .defer = timed ? f_defer : NULL,
	};
	struct ns *ns;

	memset(&S, 0, sizeof(S));
	S.now = 1 * SEC; /* well below any TTL: "uptime" shorter than metadata_ttl */
	ns = ns_new(&cfg);
	assert_non_null(ns);
	return ns;
}

/* A namespace without timers: an open waits for its revalidation however long it takes. */
static struct ns *mk(uint64_t metadata_ttl, uint64_t negative_ttl)
{
	return mk_cfg(metadata_ttl, negative_ttl, false);
}

static uint64_t lookup_ok(struct ns *ns, uint64_t parent, const char *name, struct stat *st)
{
	struct stat tmp;

	assert_int_equal(ns_lookup(ns, parent, name, st ? st : &tmp), 0);
	return (st ? st : &tmp)->st_ino;
}

static struct cache_oid oid_of(struct ns *ns, uint64_t ino)
{
	struct fobj *o;
	struct cache_oid id;

	assert_int_equal(ns_peek(ns, ino, &o), 0);
	id = o->id;
	fobj_put(o);
	return id;
}

/* Forgetting an inode loses nothing: the name's next node has the same object id. */
static void test_identity_survives_forget(void **state)
{
	struct ns *ns = mk(60, 1);
	uint64_t a, b;
	struct cache_oid ida, idb;

	(void)state;
	put("seg/0001.log", 100, "\"e1\"");
	uint64_t seg = lookup_ok(ns, 1, "seg", NULL);
	a = lookup_ok(ns, seg, "0001.log", NULL);
	ida = oid_of(ns, a);
	ns_forget(ns, a, 1);
	assert_int_equal(ns_peek(ns, a, &(struct fobj *){NULL}), -ENOENT);
	b = lookup_ok(ns, seg, "0001.log", NULL);
	assert_true(b != a);
	idb = oid_of(ns, b);
	assert_true(cache_oid_eq(ida, idb));
	assert_true(cache_oid_eq(ida, cache_oid_make("fake://store", "seg/0001.log", "\"e1\" size=100")));
	ns_free(ns);
}

/* The same ETag with another size is another version (a store that acknowledged an upload
 * before its bytes were all there listed the final ETag with a partial size): blocks cached
 * for the short one must not be keyed like the whole one's. */
static void test_size_is_part_of_the_version(void **state)
{
	struct ns *ns = mk(10, 1);
	uint64_t a;
	struct cache_oid short_id;

	(void)state;
	put("s", 100, "\"same\"");
	a = lookup_ok(ns, 1, "s", NULL);
	short_id = oid_of(ns, a);
	put("s", 300, "\"same\"");
	S.now += 11 * SEC;
	lookup_ok(ns, 1, "s", NULL);
	assert_false(cache_oid_eq(oid_of(ns, lookup_ok(ns, 1, "s", NULL)), short_id));
	ns_free(ns);
}

/* A name missing from a fresh listing is asked of the store once per negative_ttl, and a new
 * object is found without relisting. */
static void test_negative_lookup(void **state)
{
	struct ns *ns = mk(60, 1);
	struct stat st;
	struct ns_dir *d;

	(void)state;
	put("seg-001.log", 10, "\"a\"");
	lookup_ok(ns, 1, "seg-001.log", NULL);
	assert_int_equal(S.lists, 1);
	assert_int_equal(ns_lookup(ns, 1, "seg-002.log", &st), -ENOENT);
	assert_int_equal(S.stats, 1);
	S.now += SEC / 2;
	assert_int_equal(ns_lookup(ns, 1, "seg-002.log", &st), -ENOENT);
	assert_int_equal(S.stats, 1); /* believed for negative_ttl */
	put("seg-002.log", 20, "\"b\"");
	S.now += SEC / 2 + 1;
	lookup_ok(ns, 1, "seg-002.log", &st);
	assert_int_equal(st.st_size, 20);
	assert_int_equal(S.stats, 2);
	assert_int_equal(S.lists, 1); /* no relisting */
	/* it joined the listing: readdir shows it, and the next lookup asks nothing */
	assert_int_equal(ns_opendir(ns, 1, &d), 0);
	bool is_dir;
	assert_int_equal(ns_dir_count(d), 2);
	assert_string_equal(ns_dir_name(d, 1, &is_dir), "seg-002.log");
	ns_dir_put(d);
	lookup_ok(ns, 1, "seg-002.log", NULL);
	assert_int_equal(S.stats, 2);

	/* negative_ttl=0: every lookup of a missing name asks */
	ns_free(ns);
	ns = mk(60, 0);
	put("x", 1, "\"x\"");
	assert_int_equal(ns_lookup(ns, 1, "y", &st), -ENOENT);
	assert_int_equal(S.stats, 1);
	assert_int_equal(ns_lookup(ns, 1, "y", &st), -ENOENT);
	assert_int_equal(S.stats, 2); /* README: "0 = ask every time" */
	put("y", 2, "\"y\"");
	lookup_ok(ns, 1, "y", &st); /* at once, without relisting */
	assert_int_equal(st.st_size, 2);
	assert_int_equal(S.lists, 1);
	ns_free(ns);
}

/* A process polls 200 missing names in one directory: each costs one HEAD per negative_ttl,
 * not one per lookup (64 were remembered, and 200 pushed each other out). The entries go
 * when they expire; beyond NEG_MAX (1024) fresh ones, the oldest go. */
static void test_many_missing_names(void **state)
{
	struct ns *ns = mk(600, 10);
	struct stat st;
	char name[32];
	uint64_t polled, swept, keys;

	(void)state;
	put("seg-0000.log", 1, "\"a\"");
	lookup_ok(ns, 1, "seg-0000.log", NULL);
	for (int round = 0; round < 3; round++) {
		for (int i = 1; i <= 200; i++) {
			snprintf(name, sizeof(name), "seg-%04d.log", i);
			assert_int_equal(ns_lookup(ns, 1, name, &st), -ENOENT);
		}
		S.now += SEC;
	}
	assert_int_equal(S.stats, 200);
	ns_mem(ns, &polled, &keys);
	/* expired: asked again, and the 200 old entries are swept out */
	S.now += 10 * SEC;
	assert_int_equal(ns_lookup(ns, 1, "seg-0001.log", &st), -ENOENT);
	assert_int_equal(S.stats, 201);
	ns_mem(ns, &swept, &keys);
	assert_true(swept + 199 * 13 < polled);
	/* a name that appears is found once its entry expires, and leaves the cache */
	put("seg-0001.log", 5, "\"b\"");
	S.now += 10 * SEC;
	lookup_ok(ns, 1, "seg-0001.log", &st);
	assert_int_equal(st.st_size, 5);
	/* bounded: of 1100 fresh names the oldest 76 are forgotten, the newest 1024 are not */
	S.stats = 0;
	for (int i = 0; i < 1100; i++) {
		snprintf(name, sizeof(name), "x-%04d", i);
		assert_int_equal(ns_lookup(ns, 1, name, &st), -ENOENT);
	}
	assert_int_equal(S.stats, 1100);
	for (int i = 1099; i >= 76; i--) {
		snprintf(name, sizeof(name), "x-%04d", i);
		assert_int_equal(ns_lookup(ns, 1, name, &st), -ENOENT);
	}
	assert_int_equal(S.stats, 1100);
	assert_int_equal(ns_lookup(ns, 1, "x-0000", &st), -ENOENT);
	assert_int_equal(S.stats, 1101);
	ns_free(ns);
}

/* A listing is as old as its start: one that took 5 s is 11 s old 6 s after it ended. */
static void test_listing_stamped_at_start(void **state)
{
	struct ns *ns = mk(10, 1);

	(void)state;
	put("a", 1, "\"a\"");
	S.list_takes = 5 * SEC;
	lookup_ok(ns, 1, "a", NULL);
	assert_int_equal(S.lists, 1);
	S.list_takes = 0;
	S.now += 6 * SEC;
	lookup_ok(ns, 1, "a", NULL);
	assert_int_equal(S.lists, 2);
	ns_free(ns);
}

/* ns_stale forces a relist even while the clock reads less than metadata_ttl. */
static void test_stale_marker_early(void **state)
{
	struct ns *ns = mk(60, 1);
	struct fobj *o;
	bool same, changed;
	uint64_t a;

	(void)state;
	put("a", 1, "\"a\"");
	a = lookup_ok(ns, 1, "a", NULL);
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
	ns_stale(ns, a, o->id);
	fobj_put(o);
	ns_release(ns, a);
	assert_int_equal(S.lists, 1);
	lookup_ok(ns, 1, "a", NULL);
	assert_int_equal(S.lists, 2);
	ns_free(ns);
}

/* A node made by a lookup that then failed is freed. */
static void test_failed_lookup_frees_node(void **state)
{
	struct ns *ns = mk(60, 1);
	struct stat st;
	uint64_t a;

	(void)state;
	put("a", 1, "\"a\"");
	put("b", 1, "\"b\"");
	S.o[1].no_meta = true; /* b must be stat'ed at lookup */
	a = lookup_ok(ns, 1, "a", NULL);
	S.stat_err = -EIO;
	assert_int_equal(ns_lookup(ns, 1, "b", &st), -EIO);
	/* inodes are handed out in order: b's would have been a + 1 */
	assert_int_equal(ns_getattr(ns, a + 1, &st), -ENOENT);
	S.stat_err = 0;
	/* no node is made before the store answered (a node made then would be freed) */
	uint64_t b = lookup_ok(ns, 1, "b", NULL);
	assert_true(b > a);
	assert_int_equal(ns_getattr(ns, b, &st), 0);
	ns_free(ns);
}

/* Versions and inodes: no open file, in place; open files keep the old inode and version. */
static void test_new_version_new_inode(void **state)
{
	struct ns *ns = mk(1, 1);
	struct fobj *o, *o2;
	struct stat st;
	bool same, changed;
	uint64_t a, b;

	(void)state;
	put("f", 100, "\"v1\"");
	a = lookup_ok(ns, 1, "f", NULL);
	struct cache_oid v1 = oid_of(ns, a);

	/* nothing open: the same inode takes the new version; past metadata_ttl a lookup
	 * answers with what is held and the refresh goes out behind it, so the next one sees
	 * the new version (stale-while-revalidate) */
	put("f", 200, "\"v2\"");
	S.now += 2 * SEC;
	assert_int_equal(lookup_ok(ns, 1, "f", &st), a);
	assert_int_equal(st.st_size, 100);
	assert_int_equal(lookup_ok(ns, 1, "f", &st), a);
	assert_int_equal(st.st_size, 200);
	assert_false(cache_oid_eq(v1, oid_of(ns, a)));

	/* open on v2; v3 appears: a lookup gives a new inode, the old one keeps v2 */
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
	assert_false(changed);
	put("f", 300, "\"v3\"");
	S.now += 2 * SEC;
	assert_int_equal(lookup_ok(ns, 1, "f", &st), a);
	b = lookup_ok(ns, 1, "f", &st);
	assert_true(b != a);
	assert_int_equal(st.st_size, 300);
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(st.st_size, 200);
	/* an open of the old inode that sees the change: ESTALE (the kernel looks up again) */
	assert_int_equal(ns_open(ns, a, &o2, &same, &changed), -ESTALE);
	fobj_put(o);
	ns_release(ns, a);
	ns_free(ns);
}

/* The entry of name @want in open directory @d: its index. */
static size_t dir_index(const struct ns_dir *d, const char *want)
{
	bool is_dir;

	for (size_t i = 0; i < ns_dir_count(d); i++)
		if (strcmp(ns_dir_name(d, i, &is_dir), want) == 0)
			return i;
	fail_msg("%s not in the listing", want);
	return 0;
}

/* readdirplus entries (ns_dir_lookup) answer as a lookup would, from memory, and count as
 * lookups: the same inode, the same attributes, one forget per entry sent; a name the
 * directory's listing no longer has, or has no metadata for, is left to a real lookup. */
static void test_readdirplus_entries(void **state)
{
	struct ns *ns = mk(60, 1);
	struct ns_dir *d;
	struct stat st, lst;
	size_t i;

	(void)state;
	put("a.log", 100, "\"e1\"");
	put("b.log", 5, "\"e2\"");
	put("sub/c.log", 7, "\"e3\"");
	S.o[1].no_meta = true; /* b.log: named by an index without metadata */
	assert_int_equal(ns_opendir(ns, 1, &d), 0);
	int lists = S.lists, stats = S.stats;

	i = dir_index(d, "a.log");
	assert_int_equal(ns_dir_lookup(ns, d, i, &st), 0);
	assert_int_equal(st.st_size, 100);
	assert_true(S_ISREG(st.st_mode));
	/* a lookup finds the same inode and attributes; two lookups now to forget */
	assert_int_equal(lookup_ok(ns, 1, "a.log", &lst), st.st_ino);
	assert_int_equal(lst.st_size, 100);
	ns_forget(ns, st.st_ino, 1);
	assert_int_equal(ns_getattr(ns, st.st_ino, &lst), 0); /* one lookup left */
	ns_forget(ns, st.st_ino, 1);
	assert_int_equal(ns_getattr(ns, st.st_ino, &lst), -ENOENT);

	i = dir_index(d, "sub");
	assert_int_equal(ns_dir_lookup(ns, d, i, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(ns_dir_lookup(ns, d, dir_index(d, "b.log"), &st), -EAGAIN);
	assert_int_equal(S.lists, lists); /* memory only: the store was never asked */
	assert_int_equal(S.stats, stats);
	ns_dir_put(d);

	/* a handle on an older listing: a name gone since is not answered from it */
	assert_int_equal(ns_opendir(ns, 1, &d), 0);
	i = dir_index(d, "a.log");
	S.o[0].present = false;
	S.now += 61 * SEC;
	struct ns_dir *d2;
	assert_int_equal(ns_opendir(ns, 1, &d2), 0); /* stale: served, refreshed behind */
	ns_dir_put(d2);
	assert_int_equal(ns_opendir(ns, 1, &d2), 0);
	assert_int_equal(ns_dir_count(d2), ns_dir_count(d) - 1);
	assert_int_equal(ns_dir_lookup(ns, d, i, &st), -EAGAIN);
	ns_dir_put(d2);
	ns_dir_put(d);
	ns_free(ns);
}

/* ns_move: the only open file, having served nothing, moves; with a second open it cannot. */
static void test_move(void **state)
{
	struct ns *ns = mk(60, 1);
	struct fobj *o, *o2, *moved;
	struct stat st;
	bool same, changed;
	uint64_t a, b;

	(void)state;
	put("f", 100, "\"v1\"");
	a = lookup_ok(ns, 1, "f", NULL);
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
	assert_false(same);
	/* the store has nothing newer: no move */
	assert_int_equal(ns_move(ns, a, o, 0, &moved), -ESTALE);
	put("f", 150, "\"v2\"");
	/* someone served bytes of v1 on this inode: no move */
	assert_int_equal(ns_move(ns, a, o, 1, &moved), -ESTALE);
	fobj_put(o);
	ns_release(ns, a);
	ns_forget(ns, a, 1);

	put("g", 100, "\"g1\"");
	a = lookup_ok(ns, 1, "g", NULL);
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
	put("g", 150, "\"g2\"");
	assert_int_equal(ns_move(ns, a, o, 0, &moved), 0);
	assert_int_equal(moved->size, 150);
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(st.st_size, 150);
	fobj_put(o);

	/* two files open: the move is refused and the name gets a new inode */
	assert_int_equal(ns_open(ns, a, &o2, &same, &changed), 0);
	assert_true(same);
	put("g", 190, "\"g3\"");
	assert_int_equal(ns_move(ns, a, moved, 0, &o), -ESTALE);
	b = lookup_ok(ns, 1, "g", &st);
	assert_true(b != a);
	assert_int_equal(st.st_size, 190);
	fobj_put(moved);
	fobj_put(o2);
	ns_release(ns, a);
	ns_release(ns, a);
	ns_free(ns);
}

/* Remove @path from the fake store. */
static void del(const char *path)
{
	for (int i = 0; i < MAXOBJ; i++)
		if (S.o[i].present && strcmp(S.o[i].path, path) == 0)
			S.o[i].present = false;
}

/* A node made from a listing entry (lazy: no version of its own) answers from the directory's
 * listing: with nothing open it follows the entry to a new version in place (same inode); when
 * the name leaves the listing, or becomes a directory, it keeps what it had; an open gives it a
 * version, revalidated when the listing is older than metadata_ttl. */
static void test_lazy_versions(void **state)
{
	struct ns *ns = mk(10, 1);
	struct fobj *o;
	struct stat st;
	bool same, changed;
	uint64_t a, x, x2, dir;

	(void)state;
	put("a", 100, "\"a1\"");
	put("b", 1, "\"b\"");
	put("x", 7, "\"x1\"");
	a = lookup_ok(ns, 1, "a", &st);
	x = lookup_ok(ns, 1, "x", NULL);
	assert_int_equal(st.st_size, 100);
	assert_true(cache_oid_eq(oid_of(ns, a), cache_oid_make("fake://store", "a", "\"a1\" size=100")));

	/* a new version, relisted by a lookup of another name: a follows, on its inode */
	put("a", 200, "\"a2\"");
	S.now += 11 * SEC;
	lookup_ok(ns, 1, "b", NULL);
	assert_int_equal(S.lists, 2);
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(st.st_size, 200);
	assert_int_equal(lookup_ok(ns, 1, "a", NULL), a);
	assert_true(cache_oid_eq(oid_of(ns, a), cache_oid_make("fake://store", "a", "\"a2\" size=200")));

	/* a leaves the store, x becomes a prefix: both nodes keep what they had */
	del("a");
	del("x");
	put("x/y", 3, "\"y\"");
	S.now += 11 * SEC;
	lookup_ok(ns, 1, "b", NULL);
	assert_int_equal(S.lists, 3);
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(st.st_size, 200);
	assert_true(S_ISREG(st.st_mode));
	assert_true(cache_oid_eq(oid_of(ns, a), cache_oid_make("fake://store", "a", "\"a2\" size=200")));
	assert_int_equal(ns_lookup(ns, 1, "a", &st), -ENOENT);
	x2 = lookup_ok(ns, 1, "x", &st);
	assert_true(x2 != x);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(ns_getattr(ns, x, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 7);

	/* an open within metadata_ttl of the listing asks nothing; past it, a HEAD */
	int stats = S.stats;
	uint64_t b = lookup_ok(ns, 1, "b", NULL);
	assert_int_equal(ns_open(ns, b, &o, &same, &changed), 0);
	assert_int_equal(S.stats, stats);
	assert_false(same);
	assert_int_equal(o->size, 1);
	fobj_put(o);
	ns_release(ns, b);
	uint64_t y = lookup_ok(ns, x2, "y", NULL);
	S.now += 11 * SEC;
	put("x/y", 4, "\"y2\"");
	assert_int_equal(ns_open(ns, y, &o, &same, &changed), 0);
	assert_int_equal(S.stats, stats + 1);
	assert_int_equal(o->size, 4);
	assert_true(changed); /* the kernel's attributes (3 bytes) are old */
	fobj_put(o);
	ns_release(ns, y);

	/* a directory forgotten before its lazy children: they keep their attributes, and their
	 * paths (a node holds its name: the forgotten directory stays until its last child) */
	put("d/e/f", 9, "\"f\"");
	put("d/e/g", 5, "\"g\"");
	dir = lookup_ok(ns, 1, "d", NULL);
	uint64_t e = lookup_ok(ns, dir, "e", NULL);
	uint64_t f = lookup_ok(ns, e, "f", NULL), g = lookup_ok(ns, e, "g", NULL);
	ns_forget(ns, dir, 1);
	ns_forget(ns, e, 1);
	assert_int_equal(ns_getattr(ns, f, &st), 0);
	assert_int_equal(st.st_size, 9);
	assert_true(cache_oid_eq(oid_of(ns, f), cache_oid_make("fake://store", "d/e/f", "\"f\" size=9")));
	char path[64];
	assert_int_equal(ns_path(ns, g, path, sizeof(path)), 0);
	assert_string_equal(path, "d/e/g");
	assert_int_equal(ns_open(ns, f, &o, &same, &changed), 0);
	assert_string_equal(o->path, "d/e/f");
	fobj_put(o);
	ns_release(ns, f);
	ns_forget(ns, f, 1);
	/* a name looked up again finds the same nodes all the way down: the kernel keeps a
	 * file's inode, and its page cache, after it forgot the directory's */
	assert_int_equal(lookup_ok(ns, 1, "d", NULL), dir);
	assert_int_equal(lookup_ok(ns, dir, "e", NULL), e);
	assert_int_equal(lookup_ok(ns, e, "g", &st), g);
	assert_int_equal(st.st_size, 5);
	ns_forget(ns, dir, 1);
	ns_forget(ns, e, 1);
	assert_int_equal(ns_getattr(ns, e, &st), 0); /* kept for g */
	ns_forget(ns, g, 2); /* the last child of the forgotten d/e: all three go */
	assert_int_equal(ns_getattr(ns, g, &st), -ENOENT);
	assert_int_equal(ns_getattr(ns, e, &st), -ENOENT);
	assert_int_equal(ns_getattr(ns, dir, &st), -ENOENT);
	ns_free(ns);

	/* the mount ends with forgotten directories kept for their children */
	ns = mk(10, 1);
	put("d/e/f", 9, "\"f\"");
	dir = lookup_ok(ns, 1, "d", NULL);
	e = lookup_ok(ns, dir, "e", NULL);
	lookup_ok(ns, e, "f", NULL);
	ns_forget(ns, dir, 1);
	ns_forget(ns, e, 1);
	ns_free(ns);
}

/* The ETag a new lookup of @name in the root gives (its listing entry's), compared with @want;
 * the node is forgotten again. */
static void listed_etag_is(struct ns *ns, const char *name, const char *want)
{
	struct fobj *o;
	uint64_t a = lookup_ok(ns, 1, name, NULL);

	assert_int_equal(ns_peek(ns, a, &o), 0);
	assert_string_equal(o->etag, want);
	fobj_put(o);
	ns_forget(ns, a, 1);
}

/* A listing keeps a quoted lowercase MD5 as its 16 bytes and gives every ETag back as the store
 * sent it; ETags the store gives later (ns_move's stat) replace it in place or appended, in
 * every direction between the two forms. */
static void test_listing_etags(void **state)
{
	static const char *const etags[] = {
	    "\"0123456789abcdef0123456789abcdef\"",   /* one PUT: 16 bytes */
	    "\"0123456789abcdef0123456789abcdef-2\"", /* multipart: the string */
	    "\"fedcba9876543210fedcba9876543210\"",   /* in place of the longer one */
	    "\"x\"",                                  /* in place of 16 bytes */
	    "\"0123456789ABCDEF0123456789ABCDEF\"",   /* upper case: the string, appended */
	    "0123456789abcdef0123456789abcdef",       /* unquoted: the string */
	    "\"0123456789abcdef0123456789abcdeg\"",   /* not hex */
	    "",
	};
	struct ns *ns = mk(60, 1);
	struct fobj *o, *moved;
	bool same, changed;
	uint64_t a;

	(void)state;
	for (size_t i = 0; i < sizeof(etags) / sizeof(etags[0]); i++) {
		char name[8];

		snprintf(name, sizeof(name), "k%zu", i);
		put(name, i, etags[i]);
	}
	for (size_t i = 0; i < sizeof(etags) / sizeof(etags[0]); i++) {
		char name[8];

		snprintf(name, sizeof(name), "k%zu", i);
		listed_etag_is(ns, name, etags[i]);
	}
	put("m", 100, etags[0]);
	S.stats = 0;
	S.now += SEC; /* the listing above has no "m": a HEAD adds it */
	listed_etag_is(ns, "m", etags[0]);
	for (size_t i = 1; i < 7; i++) {
		a = lookup_ok(ns, 1, "m", NULL);
		assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
		put("m", 100 + i, etags[i]);
		assert_int_equal(ns_move(ns, a, o, 0, &moved), 0);
		fobj_put(o);
		fobj_put(moved);
		ns_release(ns, a);
		ns_forget(ns, a, 1);
		listed_etag_is(ns, "m", etags[i]);
	}
	assert_int_equal(S.lists, 1); /* the ETags came from the stats, through the listing */
	assert_int_equal(S.stats, 1 + 6);
	ns_free(ns);
}

/*
 * Random operations against a small reference model: objects are put, replaced, deleted and
 * turned into prefixes (and back) in the store, while names are looked up (also as readdirplus
 * entries), opened, released and forgotten in any order, directories before their children
 * included. After each step: every inode the model holds answers getattr with its path, and a
 * file a version its path really had; every inode with open files shows the version they
 * have; every forgotten one is gone. At the end
 * everything is released and forgotten (the sanitizer build finds what is not freed).
 */
#define R_INOS 64
#define R_FHS 16
static const char *const r_paths[] = {"f",     "g",     "x",     "x/f", "x/g",
				      "x/y",   "x/y/f", "x/y/g", "z/f", "z/x/f"};

static uint64_t r_seed;
static bool r_had[10][1000]; /* sizes each path had */

static bool r_size_had(const char *path, off_t size)
{
	for (int i = 0; i < 10; i++)
		if (strcmp(r_paths[i], path) == 0)
			return size >= 0 && size < 1000 && r_had[i][size];
	return false;
}

static unsigned rnd(unsigned n)
{
	r_seed = r_seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return (unsigned)(r_seed >> 33) % n;
}

struct r_ino {
	uint64_t ino;
	char path[32];
	unsigned count; /* lookups the model holds */
	bool is_dir;
};

/* The kernel got @st for @name in @dir (a lookup, or a readdirplus entry): one more lookup of
 * that inode, which joins in[] with its path when new. */
static void r_seen(struct r_ino *in, int *nin, const struct r_ino *dir, const char *name,
		   const struct stat *st)
{
	int k;

	for (k = 0; k < *nin && in[k].ino != st->st_ino; k++)
		;
	if (k == *nin) {
		int w = snprintf(in[k].path, sizeof(in[k].path), "%s%s%s", dir->path,
				 dir->path[0] ? "/" : "", name);

		assert_true(w > 0 && (size_t)w < sizeof(in[k].path));
		in[k].ino = st->st_ino;
		in[k].count = 0;
		(*nin)++;
	}
	in[k].count++;
	in[k].is_dir = S_ISDIR(st->st_mode);
}

static void test_random_against_model(void **state)
{
	struct r_ino in[R_INOS];
	struct {
		uint64_t ino;
		struct fobj *o;
	} fh[R_FHS];
	int nin, nfh;

	(void)state;
	for (int seed = 1; seed <= 4; seed++) {
		struct ns *ns = mk(2, 1);

		r_seed = (uint64_t)seed;
		memset(r_had, 0, sizeof(r_had));
		nin = nfh = 0;
		in[nin].ino = 1; /* the root, never forgotten */
		in[nin].path[0] = '\0';
		in[nin].count = 1;
		in[nin++].is_dir = true;
		for (int step = 0; step < 3000; step++) {
			unsigned op = rnd(10), i = nin ? rnd((unsigned)nin) : 0;
			struct stat st;
			char name[16], etag[16];
			bool same, changed;

			if (op == 0) { /* a new version, or a new object */
				unsigned p = rnd(10), size = rnd(1000);

				snprintf(etag, sizeof(etag), "\"%d\"", step);
				put(r_paths[p], size, etag);
				r_had[p][size] = true;
			} else if (op == 1) {
				del(r_paths[rnd(10)]);
			} else if (op == 2) {
				S.now += rnd(3) * SEC;
			} else if ((op == 3 || op == 4) && in[i].is_dir && nin < R_INOS) {
				const char *p = r_paths[rnd(10)], *slash;
				size_t dl = strlen(in[i].path);

				if (dl && (strncmp(p, in[i].path, dl) || p[dl] != '/'))
					continue;
				p += dl ? dl + 1 : 0;
				slash = strchr(p, '/');
				snprintf(name, sizeof(name), "%.*s",
					 (int)(slash ? (size_t)(slash - p) : strlen(p)), p);
				if (ns_lookup(ns, in[i].ino, name, &st) < 0)
					continue;
				r_seen(in, &nin, &in[i], name, &st);
			} else if (op == 5 && in[i].is_dir && nin + 10 < R_INOS) { /* readdirplus */
				struct ns_dir *d;

				if (ns_opendir(ns, in[i].ino, &d) < 0)
					continue;
				for (size_t j = 0; j < ns_dir_count(d); j++) {
					bool is_dir;

					if (ns_dir_lookup(ns, d, j, &st) == 0)
						r_seen(in, &nin, &in[i], ns_dir_name(d, j, &is_dir),
						       &st);
				}
				ns_dir_put(d);
			} else if (op == 6 && i > 0) { /* forget, all or part */
				unsigned c = 1 + rnd(in[i].count);

				/* the kernel keeps a lookup while a file is open on the inode */
				for (int h = 0; h < nfh; h++)
					if (fh[h].ino == in[i].ino && c == in[i].count)
						c--;
				if (!c)
					continue;
				ns_forget(ns, in[i].ino, c);
				in[i].count -= c;
				if (!in[i].count)
					in[i] = in[--nin];
			} else if (op == 7 && !in[i].is_dir && nfh < R_FHS) {
				struct fobj *o;

				if (ns_open(ns, in[i].ino, &o, &same, &changed) < 0)
					continue;
				assert_string_equal(o->path, in[i].path);
				fh[nfh].ino = in[i].ino;
				fh[nfh++].o = o;
			} else if (op == 8 && nfh) {
				unsigned h = rnd((unsigned)nfh);

				fobj_put(fh[h].o);
				ns_release(ns, fh[h].ino);
				fh[h] = fh[--nfh];
			} else if (op == 9 && nfh) {
				unsigned h = rnd((unsigned)nfh);

				ns_stale(ns, fh[h].ino, fh[h].o->id);
			}
			for (int k = 0; k < nin; k++) {
				char path[64];

				assert_int_equal(ns_getattr(ns, in[k].ino, &st), 0);
				assert_int_equal(ns_path(ns, in[k].ino, path, sizeof(path)), 0);
				assert_string_equal(path, in[k].path);
				if (!S_ISDIR(st.st_mode)) {
					assert_int_equal(st.st_mtime, 1000);
					assert_true(r_size_had(path, st.st_size));
				}
			}
			for (int h = 0; h < nfh; h++) {
				assert_int_equal(ns_getattr(ns, fh[h].ino, &st), 0);
				assert_int_equal(st.st_size, fh[h].o->size);
				assert_true(cache_oid_eq(oid_of(ns, fh[h].ino), fh[h].o->id));
			}
		}
		while (nfh) {
			fobj_put(fh[--nfh].o);
			ns_release(ns, fh[nfh].ino);
		}
		/* forget in random order: directories before their children too. A directory
		 * stays while the kernel knows a child (its inode is the one a new lookup gets);
		 * once everything is forgotten, nothing is left */
		uint64_t gone[R_INOS];
		int ngone = 0;

		while (nin > 1) {
			unsigned i = 1 + rnd((unsigned)nin - 1);
			uint64_t ino = in[i].ino;
			struct stat st;

			ns_forget(ns, ino, in[i].count);
			if (!in[i].is_dir)
				assert_int_equal(ns_getattr(ns, ino, &st), -ENOENT);
			gone[ngone++] = ino;
			in[i] = in[--nin];
		}
		for (int k = 0; k < ngone; k++) {
			struct stat st;

			assert_int_equal(ns_getattr(ns, gone[k], &st), -ENOENT);
		}
		ns_free(ns);
	}
}

/* Answers of asynchronous calls, counted. */
static struct {
	int entries, entry_errs, dirs;
	int last_err;
	off_t last_size;      /* of the last entry answered */
	bool last_stale;      /* ... from metadata past metadata_ttl */
	struct ns_dir *d[32];
	int opens;
	struct {
		int err;
		struct fobj *o;
		bool same, changed;
	} open[8];
} A;

static void on_entry_answer(void *arg, int err, const struct stat *st, bool stale)
{
	(void)arg;
	A.entries++;
	A.last_stale = stale;
	A.last_err = err;
	if (err)
		A.entry_errs++;
	else
		A.last_size = st->st_size;
}

static void on_open_answer(void *arg, int err, struct fobj *o, bool same, bool changed)
{
	(void)arg;
	assert_true(A.opens < 8);
	A.open[A.opens].err = err;
	A.open[A.opens].o = o;
	A.open[A.opens].same = same;
	A.open[A.opens].changed = changed;
	A.opens++;
}

static void on_dir_answer(void *arg, int err, struct ns_dir *d)
{
	(void)arg;
	assert_int_equal(err, 0);
	A.d[A.dirs++] = d;
}

/* 20 lookups and 10 opendirs of one directory while its first listing is in flight: one
 * listing, and all are answered by it; nothing is answered before it. */
static void test_single_flight_listing(void **state)
{
	struct ns *ns = mk(60, 1);
	char name[16];

	(void)state;
	memset(&A, 0, sizeof(A));
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "d/f%02d", i);
		put(name, (uint64_t)i, "\"e\"");
	}
	uint64_t d = lookup_ok(ns, 1, "d", NULL);
	S.hold = true;
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		ns_lookup_async(ns, d, name, on_entry_answer, NULL);
	}
	for (int i = 0; i < 10; i++)
		ns_opendir_async(ns, d, on_dir_answer, NULL);
	assert_int_equal(A.entries, 0); /* parked, not answered */
	assert_int_equal(A.dirs, 0);
	assert_int_equal(S.nheld, 1);   /* one listing asked */
	assert_true(S.held[0].list);
	assert_string_equal(S.held[0].path, "d");
	int lists = S.lists;
	release();
	assert_int_equal(S.lists, lists + 1);
	assert_int_equal(A.entries, 20);
	assert_int_equal(A.entry_errs, 0);
	assert_int_equal(A.dirs, 10);
	/* the handles share one listing, not ten copies */
	for (int i = 0; i < 10; i++) {
		assert_ptr_equal(A.d[i]->l, A.d[0]->l);
		assert_int_equal(ns_dir_count(A.d[i]), 20);
	}
	for (int i = 0; i < 10; i++)
		ns_dir_put(A.d[i]);
	S.hold = false;
	ns_free(ns);
}

/* opendir serves the listing held and refreshes it in the background once it is older than
 * metadata_ttl; the handle keeps its listing, the next opendir gets the new one. */
static void test_stale_while_revalidate(void **state)
{
	struct ns *ns = mk(10, 1);
	struct ns_dir *d1, *d2, *d3;
	bool is_dir;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a\"");
	assert_int_equal(ns_opendir(ns, 1, &d1), 0);
	assert_int_equal(S.lists, 1);
	put("b", 1, "\"b\"");
	S.now += 5 * SEC;
	assert_int_equal(ns_opendir(ns, 1, &d2), 0); /* fresh: no listing */
	assert_int_equal(S.lists, 1);
	assert_ptr_equal(d1->l, d2->l);
	S.now += 6 * SEC; /* 11 s: stale */
	S.hold = true;
	ns_opendir_async(ns, 1, on_dir_answer, NULL);
	assert_int_equal(A.dirs, 1);    /* answered at once, from what is held */
	assert_int_equal(ns_dir_count(A.d[0]), 1);
	assert_int_equal(S.nheld, 1);   /* and a refresh went out */
	ns_opendir_async(ns, 1, on_dir_answer, NULL);
	assert_int_equal(A.dirs, 2);
	assert_int_equal(S.nheld, 1);   /* single flight: not a second one */
	release();
	S.hold = false;
	assert_int_equal(S.lists, 2);
	assert_int_equal(ns_dir_count(A.d[0]), 1); /* handles keep what they opened */
	assert_int_equal(ns_opendir(ns, 1, &d3), 0);
	assert_int_equal(S.lists, 2);
	assert_int_equal(ns_dir_count(d3), 2);
	assert_string_equal(ns_dir_name(d3, 1, &is_dir), "b");
	ns_dir_put(d1);
	ns_dir_put(d2);
	ns_dir_put(d3);
	ns_dir_put(A.d[0]);
	ns_dir_put(A.d[1]);
	ns_free(ns);
}

/* A refresh that fails keeps the last good listing: lookups and opendirs are answered from it,
 * the failure is reported once, and the next good refresh replaces it. Without any listing the
 * failure reaches the caller. */
static void test_last_good_listing(void **state)
{
	struct ns *ns = mk(10, 0);
	struct ns_dir *d;
	struct stat st;

	(void)state;
	put("a", 1, "\"a\"");
	put("sub/x", 1, "\"x\"");
	uint64_t sub = lookup_ok(ns, 1, "sub", NULL);
	S.now += 11 * SEC;
	S.list_err = -ETIMEDOUT;
	lookup_ok(ns, 1, "a", &st); /* from what is held; the refresh behind it failed */
	assert_int_equal(S.lists, 2);
	assert_int_equal(S.logs, 1);
	assert_true(S.log_kept);
	assert_int_equal(ns_lookup(ns, 1, "nope", &st), -ENOENT);
	assert_int_equal(ns_opendir(ns, 1, &d), 0);
	assert_int_equal(ns_dir_count(d), 2);
	ns_dir_put(d);
	assert_int_equal(S.logs, 1); /* once, however often it fails */
	/* a directory never listed: the error itself */
	assert_int_equal(ns_opendir(ns, sub, &d), -ETIMEDOUT);
	assert_int_equal(S.logs, 2);
	assert_false(S.log_kept);
	/* the store is back: the next refresh replaces the listing, and a new failure logs */
	S.list_err = 0;
	put("c", 1, "\"c\"");
	lookup_ok(ns, 1, "c", NULL);
	S.now += 11 * SEC;
	S.list_err = -EIO;
	lookup_ok(ns, 1, "c", NULL);
	assert_int_equal(S.logs, 3);
	ns_free(ns);
}

/* The kernel forgets a directory's inode (nobody holds it open; drop_caches or memory
 * pressure): its listing is kept for the next node of its path. While the store fails, the
 * directory looked up again still lists and looks up from its last good listing; while the
 * listing is fresh, it is not listed again. Kept listings are bounded: the oldest go. */
static void test_forgotten_dir_keeps_listing(void **state)
{
	struct ns *ns = mk(10, 0);
	struct ns_dir *d;
	struct stat st;
	uint64_t sub, sub2;
	char name[16];

	(void)state;
	put("sub/x", 1, "\"x\"");
	put("sub/y", 2, "\"y\"");
	sub = lookup_ok(ns, 1, "sub", NULL);
	assert_int_equal(ns_opendir(ns, sub, &d), 0);
	assert_int_equal(ns_dir_count(d), 2);
	ns_dir_put(d);
	assert_int_equal(S.lists, 2);
	ns_forget(ns, sub, 1);
	/* fresh: the new node answers without listing again */
	sub2 = lookup_ok(ns, 1, "sub", NULL);
	assert_true(sub2 != sub);
	assert_int_equal(ns_opendir(ns, sub2, &d), 0);
	assert_int_equal(ns_dir_count(d), 2);
	ns_dir_put(d);
	assert_int_equal(S.lists, 2);
	/* forgotten again, the store fails, the listing ages: the last good one answers */
	ns_forget(ns, sub2, 1);
	S.now += 11 * SEC;
	S.list_err = -EIO;
	sub = lookup_ok(ns, 1, "sub", NULL); /* the root's refresh failed: its last good one */
	assert_int_equal(S.logs, 1);
	assert_int_equal(ns_opendir(ns, sub, &d), 0);
	assert_int_equal(ns_dir_count(d), 2);
	ns_dir_put(d);
	lookup_ok(ns, sub, "y", &st);
	assert_int_equal(st.st_size, 2);
	assert_int_equal(S.logs, 2); /* once for the root, once for sub */
	/* the store is back: refreshed as usual */
	S.list_err = 0;
	put("sub/z", 3, "\"z\"");
	S.now += 11 * SEC;
	lookup_ok(ns, sub, "z", &st);
	assert_int_equal(st.st_size, 3);
	ns_forget(ns, sub, 1);

	/* bounded: of 66 forgotten directories, the 2 forgotten first lose their listings */
	ns_free(ns);
	ns = mk(600, 0);
	for (int i = 0; i < 66; i++) {
		snprintf(name, sizeof(name), "d%02d/f", i);
		put(name, 1, "\"f\"");
	}
	for (int i = 0; i < 66; i++) {
		snprintf(name, sizeof(name), "d%02d", i);
		sub = lookup_ok(ns, 1, name, NULL);
		ns_forget(ns, lookup_ok(ns, sub, "f", NULL), 1);
		ns_forget(ns, sub, 1);
	}
	assert_int_equal(S.lists, 1 + 66);
	sub = lookup_ok(ns, 1, "d65", NULL);
	lookup_ok(ns, sub, "f", NULL);
	assert_int_equal(S.lists, 1 + 66); /* kept */
	sub = lookup_ok(ns, 1, "d02", NULL);
	lookup_ok(ns, sub, "f", NULL);
	assert_int_equal(S.lists, 1 + 66); /* kept: the 64th newest */
	sub = lookup_ok(ns, 1, "d01", NULL);
	lookup_ok(ns, sub, "f", NULL);
	assert_int_equal(S.lists, 1 + 67); /* gone: listed again */
	ns_free(ns); /* kept listings are freed with it (ASan) */
}

/* A new name found by a HEAD while handles share the listing: the handles keep theirs
 * (unchanged), the directory gets a copy with the name. */
static void test_insert_copies_shared_listing(void **state)
{
	struct ns *ns = mk(60, 1);
	struct ns_dir *d1, *d2;

	(void)state;
	put("a", 1, "\"a\"");
	assert_int_equal(ns_opendir(ns, 1, &d1), 0);
	put("b", 1, "\"b\"");
	lookup_ok(ns, 1, "b", NULL);
	assert_int_equal(ns_dir_count(d1), 1);
	assert_int_equal(ns_opendir(ns, 1, &d2), 0);
	assert_int_equal(ns_dir_count(d2), 2);
	assert_true(d1->l != d2->l);
	assert_int_equal(S.lists, 1);
	ns_dir_put(d1);
	ns_dir_put(d2);
	ns_free(ns);
}

/* Lookups of unknown names while the store does not answer are parked, each on its own HEAD;
 * what ns holds is answered meanwhile (a known name, opendir, getattr). */
static void test_parked_lookups_do_not_block_known(void **state)
{
	struct ns *ns = mk(60, 1);
	struct ns_dir *d;
	struct stat st;
	char name[16];

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a\"");
	uint64_t a = lookup_ok(ns, 1, "a", NULL);
	S.hold = true;
	for (int i = 0; i < 32; i++) {
		snprintf(name, sizeof(name), "new%02d", i);
		ns_lookup_async(ns, 1, name, on_entry_answer, NULL);
	}
	assert_int_equal(S.nheld, 32);
	assert_int_equal(A.entries, 0);
	lookup_ok(ns, 1, "a", &st); /* answered at once */
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(ns_opendir(ns, 1, &d), 0);
	ns_dir_put(d);
	S.stat_err = -ETIMEDOUT;
	release();
	S.hold = false;
	assert_int_equal(A.entries, 32);
	assert_int_equal(A.entry_errs, 32);
	assert_int_equal(A.last_err, -ETIMEDOUT);
	ns_free(ns);
}

/* Issue 28, point 8: a lookup of a name the listing held has answers at once however old the
 * listing, and one refresh goes out behind it; callers during that refresh start no other (a
 * known name does not join it, an unknown one waits for it and then asks the store); the
 * next lookup after it sees what it brought. */
static void test_lookup_stale_while_revalidate(void **state)
{
	struct ns *ns = mk(10, 1);
	struct ns_dir *h;
	struct stat st;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("d/a", 1, "\"a1\"");
	put("d/b", 2, "\"b\"");
	uint64_t d = lookup_ok(ns, 1, "d", NULL);
	uint64_t a = lookup_ok(ns, d, "a", &st);
	assert_int_equal(st.st_size, 1);
	int lists = S.lists;
	put("d/a", 100, "\"a2\"");
	put("d/c", 3, "\"c\"");
	S.now += 11 * SEC; /* the listing of d/ is stale */
	S.hold = true;
	ns_lookup_async(ns, d, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 1); /* at once, from what is held */
	assert_int_equal(A.entry_errs, 0);
	assert_int_equal(A.last_size, 1);
	assert_true(A.last_stale);      /* the kernel is not to keep it */
	assert_int_equal(S.nheld, 1);   /* one refresh went out */
	assert_true(S.held[0].list);
	assert_string_equal(S.held[0].path, "d");
	/* a second caller during the refresh: answered at once, no second listing */
	ns_lookup_async(ns, d, "b", on_entry_answer, NULL);
	ns_lookup_async(ns, d, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 3);
	assert_int_equal(ns_getattr(ns, a, &st), 0);
	assert_int_equal(ns_opendir(ns, d, &h), 0);
	assert_int_equal(ns_dir_count(h), 2);
	ns_dir_put(h);
	/* a name never seen waits for that refresh (no request of its own yet) */
	ns_lookup_async(ns, d, "c", on_entry_answer, NULL);
	assert_int_equal(A.entries, 3);
	assert_int_equal(S.nheld, 1);
	release();
	S.hold = false;
	assert_int_equal(A.entries, 4);
	assert_int_equal(A.entry_errs, 0);
	assert_int_equal(A.last_size, 3); /* the refresh brought it: no HEAD */
	assert_false(A.last_stale);
	assert_int_equal(S.stats, 0);
	assert_int_equal(S.lists, lists + 1);
	/* the next lookup sees what the refresh brought, on the same inode (nothing open) */
	assert_int_equal(lookup_ok(ns, d, "a", &st), a);
	assert_int_equal(st.st_size, 100);
	assert_int_equal(S.lists, lists + 1);
	ns_free(ns);
}

/* A refresh that fails while lookups are answered from the stale listing: they go on being
 * answered from it (the last good listing), the failure is reported once, and the next lookup
 * sends one new refresh, not one per caller. */
static void test_failed_refresh_behind_lookups(void **state)
{
	struct ns *ns = mk(10, 1);
	struct stat st;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a\"");
	lookup_ok(ns, 1, "a", NULL);
	int lists = S.lists;
	S.now += 11 * SEC;
	S.hold = true;
	S.list_err = -ETIMEDOUT;
	for (int i = 0; i < 5; i++)
		ns_lookup_async(ns, 1, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 5);
	assert_int_equal(S.nheld, 1);
	release();
	assert_int_equal(S.lists, lists + 1);
	assert_int_equal(S.logs, 1);
	assert_true(S.log_kept);
	for (int i = 0; i < 5; i++)
		ns_lookup_async(ns, 1, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 10);
	assert_int_equal(A.entry_errs, 0);
	assert_int_equal(A.last_size, 1);
	assert_int_equal(S.nheld, 1); /* the next refresh: one */
	release();
	S.hold = false;
	assert_int_equal(S.logs, 1);
	assert_int_equal(ns_lookup(ns, 1, "a", &st), 0);
	ns_free(ns);
}

/* An open of a version older than metadata_ttl: one HEAD per node, and the open waits for it
 * until the answer, or REVAL_WAIT_NS (the fake timer), then takes the version held, with the
 * page cache dropped (same = false); opens while that HEAD is out take it at once. The answer
 * is applied whoever waits: a new version with files open makes the name a new inode and the
 * old one stale, so its next open waits for the store and gets ESTALE. */
static void test_open_revalidation(void **state)
{
	struct ns *ns = mk_cfg(10, 1, true);
	struct fobj *o;
	bool same, changed;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a1\"");
	uint64_t a = lookup_ok(ns, 1, "a", NULL);
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0); /* fresh: no HEAD */
	assert_int_equal(S.stats, 0);
	fobj_put(o);
	ns_release(ns, a);
	/* old, and the store answers in time: the open waits for it */
	S.now += 11 * SEC;
	S.hold = true;
	ns_open_async(ns, a, on_open_answer, NULL);
	assert_int_equal(A.opens, 0);
	assert_int_equal(S.nheld, 1);
	assert_int_equal(S.ntimers, 1);
	release();
	assert_int_equal(A.opens, 1);
	assert_int_equal(A.open[0].err, 0);
	assert_true(A.open[0].same); /* confirmed: the page cache is good */
	S.now += SEC / 10;
	fire_due(); /* a late timer finds nobody */
	/* old again and changed; the store is slow: the open goes on without it */
	put("a", 2, "\"a2\"");
	S.now += 11 * SEC;
	ns_open_async(ns, a, on_open_answer, NULL);
	assert_int_equal(A.opens, 1);
	S.now += SEC / 10;
	fire_due();
	assert_int_equal(A.opens, 2);
	assert_int_equal(A.open[1].err, 0);
	assert_int_equal(A.open[1].o->size, 1); /* the version held */
	assert_false(A.open[1].same);           /* not confirmed: pages dropped */
	/* while that HEAD is out, an open takes the version at once, asking nothing more */
	ns_open_async(ns, a, on_open_answer, NULL);
	assert_int_equal(A.opens, 3);
	assert_int_equal(A.open[2].o->size, 1);
	assert_int_equal(S.nheld, 1);
	/* the answer: a new version with two files open on the old one */
	release();
	S.hold = false;
	assert_int_equal(S.stats, 2);
	uint64_t b = lookup_ok(ns, 1, "a", NULL);
	assert_true(b != a);
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), -ESTALE);
	assert_int_equal(ns_open(ns, b, &o, &same, &changed), 0);
	assert_int_equal(o->size, 2);
	fobj_put(o);
	ns_release(ns, b);
	for (int i = 1; i < 3; i++) {
		fobj_put(A.open[i].o);
		ns_release(ns, a);
	}
	fobj_put(A.open[0].o);
	ns_release(ns, a);
	S.now += SEC; /* the I/O loop runs its timers before the namespace goes */
	fire_due();
	ns_free(ns);
}

/* A file overwritten through the mount while a revalidation of its old version is out: the
 * store's answer about the old version, arriving after the commit, must not undo it, and an
 * open for reading while it is written is EBUSY even once that answer wakes it. */
static void test_reval_does_not_undo_a_write(void **state)
{
	struct ns *ns = mk_cfg(10, 1, true);
	struct bk_meta w = {.size = 5, .mtime = 1000, .etag = "\"w1\""};
	struct cache_oid id;
	struct fobj *o;
	bool same, changed;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a1\"");
	uint64_t a = lookup_ok(ns, 1, "a", NULL);
	/* old: the open's HEAD is held, and the open goes on without it */
	S.now += 11 * SEC;
	S.hold = true;
	ns_open_async(ns, a, on_open_answer, NULL);
	S.now += SEC / 10;
	fire_due();
	assert_int_equal(A.opens, 1);
	assert_int_equal(A.open[0].err, 0);
	fobj_put(A.open[0].o);
	ns_release(ns, a);
	assert_int_equal(S.nheld, 1);
	/* overwritten and committed while that HEAD is out */
	assert_int_equal(ns_truncate(ns, a), 0);
	ns_open_async(ns, a, on_open_answer, NULL);
	assert_int_equal(A.opens, 2);
	assert_int_equal(A.open[1].err, -EBUSY);
	ns_set_size(ns, a, 5);
	assert_int_equal(ns_written(ns, a, &w, &id), 0);
	/* the answer about a1 comes in late */
	release();
	S.hold = false;
	assert_int_equal(ns_open(ns, a, &o, &same, &changed), 0);
	assert_int_equal(o->size, 5);
	assert_string_equal(o->etag, "\"w1\"");
	assert_true(cache_oid_eq(o->id, id));
	fobj_put(o);
	ns_release(ns, a);
	S.now += SEC;
	fire_due();
	ns_free(ns);
}

/* With lookups of unknown names parked on a store that does not answer, and no sign of life
 * from it for REVAL_WAIT_NS, an open of an old version takes it at once (its HEAD goes out
 * behind); a version never confirmed with an ETag still waits for the store. */
static void test_open_when_store_stalled(void **state)
{
	struct ns *ns = mk_cfg(1, 1, true);
	char name[16];

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a1\"");
	put("n", 1, "");
	uint64_t a = lookup_ok(ns, 1, "a", NULL);
	uint64_t n = lookup_ok(ns, 1, "n", NULL);
	S.hold = true;
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "new%d", i);
		ns_lookup_async(ns, 1, name, on_entry_answer, NULL);
	}
	assert_int_equal(S.nheld, 8);
	S.now += 2 * SEC; /* past metadata_ttl, and the store silent for that long */
	ns_open_async(ns, a, on_open_answer, NULL);
	assert_int_equal(A.opens, 1);
	assert_int_equal(A.open[0].err, 0);
	assert_int_equal(S.nheld, 9); /* its HEAD, behind it */
	ns_open_async(ns, n, on_open_answer, NULL);
	assert_int_equal(A.opens, 1); /* no ETag: waits */
	S.now += SEC;
	fire_due();
	assert_int_equal(A.opens, 1); /* its timer does not let it go */
	assert_int_equal(A.entries, 0);
	release();
	S.hold = false;
	assert_int_equal(A.opens, 2);
	assert_int_equal(A.open[1].err, 0);
	assert_int_equal(A.entries, 8);
	for (int i = 0; i < 2; i++)
		fobj_put(A.open[i].o);
	ns_release(ns, a);
	ns_release(ns, n);
	S.now += SEC;
	fire_due();
	ns_free(ns);
}

/* A file an index names without metadata (a manifest): its first lookup waits for the store's
 * stat; once it has a version, a lookup past metadata_ttl answers from it at once (stale) and
 * one stat goes out behind it; the next lookup has the store's answer. */
static void test_manifest_version_while_revalidated(void **state)
{
	struct ns *ns = mk(10, 1);
	struct stat st;

	(void)state;
	memset(&A, 0, sizeof(A));
	put("a", 1, "\"a1\"");
	S.o[0].no_meta = true;
	S.hold = true;
	ns_lookup_async(ns, 1, "a", on_entry_answer, NULL);
	release(); /* the listing, then the stat it needs */
	assert_int_equal(A.entries, 1);
	assert_int_equal(A.last_size, 1);
	assert_int_equal(S.stats, 1);
	put("a", 5, "\"a2\"");
	S.now += 11 * SEC;
	ns_lookup_async(ns, 1, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 2); /* at once: the version held */
	assert_int_equal(A.last_size, 1);
	assert_true(A.last_stale);
	ns_lookup_async(ns, 1, "a", on_entry_answer, NULL);
	assert_int_equal(A.entries, 3);
	assert_int_equal(S.nheld, 2);   /* the refresh of / and one stat of a, not two */
	release();
	S.hold = false;
	assert_int_equal(S.stats, 2);
	assert_int_equal(ns_lookup(ns, 1, "a", &st), 0);
	assert_int_equal(st.st_size, 5);
	ns_free(ns);
}

/* Memory of the namespace at N keys in one prefix, listed (ls) and then every name looked up
 * (a lookup, or an `ls -l`: readdirplus makes the same node): printed, with bounds: <= 200 B
 * per key both ways (issue 8 asks it at 1M keys), in the root and three levels down (a node
 * holds its name, not its path). */
static int big_n;
static const char *big_dir; /* the prefix holding the keys; its parents list one directory */

static int big_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg)
{
	struct bk_meta m = {.size = 1234567, .mtime = 1700000000};
	char name[64];

	(void)b;
	S.lists++;
	if (strcmp(dir, big_dir) != 0) {
		const char *rest = big_dir + strlen(dir) + (dir[0] ? 1 : 0);

		snprintf(name, sizeof(name), "%.*s", (int)strcspn(rest, "/"), rest);
		return fn(arg, name, true, NULL);
	}
	for (int i = 0; i < big_n; i++) {
		snprintf(name, sizeof(name), "%020d.log", i);
		snprintf(m.etag, sizeof(m.etag), "\"%032x\"", (unsigned)i * 2654435761u);
		int e = fn(arg, name, false, &m);
		if (e < 0)
			return e;
	}
	return 0;
}

static int big_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
			  void *arg)
{
	done(arg, big_list(b, dir, fn, arg));
	return 0;
}

static void memory_per_key(int n, const char *dir)
{
	static const struct bk_ops big_ops = {.list = big_list, .list_async = big_list_async};
	static struct backend big = {.ops = &big_ops, .scheme = "fake"};
	struct ns_cfg cfg = {.backend = &big, .store = "fake://big", .metadata_ttl = 60,
			     .negative_ttl = 1, .block_size = 65536, .now_ns = fake_now};
	uint64_t bytes0, bytes1, bytes2, keys0, keys;
	struct ns_dir *d[20];
	struct ns *ns;
	char name[64];
	uint64_t ino = 1;

	memset(&S, 0, sizeof(S));
	S.now = SEC;
	big_n = n;
	big_dir = dir;
	ns = ns_new(&cfg);
	assert_non_null(ns);
	for (const char *p = dir; *p;) {
		size_t l = strcspn(p, "/");

		snprintf(name, sizeof(name), "%.*s", (int)l, p);
		ino = lookup_ok(ns, ino, name, NULL);
		p += l + (p[l] == '/');
	}
	ns_mem(ns, &bytes0, &keys0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(ns_opendir(ns, ino, &d[i]), 0);
	ns_mem(ns, &bytes1, &keys);
	assert_int_equal(keys - keys0, n);
	for (int i = 0; i < n; i++) {
		struct stat st;

		snprintf(name, sizeof(name), "%020d.log", i);
		assert_int_equal(ns_lookup(ns, ino, name, &st), 0);
		assert_int_equal(st.st_size, 1234567);
	}
	ns_mem(ns, &bytes2, &keys);
	double listed = (double)(bytes1 - bytes0) / n, looked = (double)(bytes2 - bytes0) / n;
	print_message("# namespace at %dk keys in \"%s/\": %.1f B/key listed (20 open handles "
		      "share it), %.1f B/key with every name looked up (a node each)\n",
		      n / 1000, dir, listed, looked);
	assert_true(listed <= 200);
	assert_true(looked <= 200);
	assert_int_equal(S.lists, 1 + (dir[0] ? 3 : 0));
	for (int i = 0; i < 20; i++)
		ns_dir_put(d[i]);
	ns_free(ns);
}

static void test_memory_per_key(void **state)
{
	(void)state;
	memory_per_key(100000, "");
	memory_per_key(100000, "kafka/topic-a/partition-0");
}

/* The same at 1M keys, as the issue measures it: about 5 s, so only with TIERFS_NS_1M=1.
 * Without it the test is a skip, and meson counts it as one (tests/unit/cmocka_tap.py). */
static void test_memory_per_key_1m(void **state)
{
	(void)state;
	if (!getenv("TIERFS_NS_1M")) {
		print_message("# SKIP the 1M-key run: set TIERFS_NS_1M=1 (about 5 s)\n");
		skip();
	}
	memory_per_key(1000000, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_identity_survives_forget),
	    cmocka_unit_test(test_negative_lookup),
	    cmocka_unit_test(test_many_missing_names),
	    cmocka_unit_test(test_listing_stamped_at_start),
	    cmocka_unit_test(test_stale_marker_early),
	    cmocka_unit_test(test_failed_lookup_frees_node),
	    cmocka_unit_test(test_new_version_new_inode),
	    cmocka_unit_test(test_move),
	    cmocka_unit_test(test_lazy_versions),
	    cmocka_unit_test(test_size_is_part_of_the_version),
	    cmocka_unit_test(test_random_against_model),
	    cmocka_unit_test(test_listing_etags),
	    cmocka_unit_test(test_readdirplus_entries),
	    cmocka_unit_test(test_single_flight_listing),
	    cmocka_unit_test(test_stale_while_revalidate),
	    cmocka_unit_test(test_last_good_listing),
	    cmocka_unit_test(test_insert_copies_shared_listing),
	    cmocka_unit_test(test_forgotten_dir_keeps_listing),
	    cmocka_unit_test(test_parked_lookups_do_not_block_known),
	    cmocka_unit_test(test_lookup_stale_while_revalidate),
	    cmocka_unit_test(test_failed_refresh_behind_lookups),
	    cmocka_unit_test(test_open_revalidation),
	    cmocka_unit_test(test_reval_does_not_undo_a_write),
	    cmocka_unit_test(test_open_when_store_stalled),
	    cmocka_unit_test(test_manifest_version_while_revalidated),
	    cmocka_unit_test(test_memory_per_key),
	    cmocka_unit_test(test_memory_per_key_1m),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
