/*
 * nslist.c - the namespace's listings (ns.c): what the store listed one level below a
 * directory, and the names it said are missing from it.
 *
 * A listing (struct ns_listing, ns_i.h) is one array of entries sorted by name and one string
 * pool for their names and ETags. It is filled on the I/O thread as the store lists
 * (ns_listing_append), sorted once at the end (ns_listing_seal), published in its directory
 * (dirst.list) and shared with the handles opened on it, reference counted. Names are found by
 * binary search (ns_find_entry); one shared with others is copied before it is changed
 * (ns_listing_own: copy on write). A directory's negative entries (struct negs) are the names
 * the store said do not exist, kept negative_ttl.
 *
 * Locking: ns->lock, as ns.c says. A listing being filled belongs to its fetch alone; once
 * published it is changed only under the lock, and one with other holders only in place of
 * equal size. The negative entries are the directory's (dirst), under the lock.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ns_i.h"

/* ---- listings ------------------------------------------------------------------------------ */

struct ns_listing *ns_listing_new(void)
{
	struct ns_listing *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->pool = malloc(64);
	if (!l->pool) {
		free(l);
		return NULL;
	}
	l->refs = 1;
	l->pcap = 64;
	l->pool[0] = '\0';
	l->plen = 1;
	return l;
}

void ns_listing_get(struct ns_listing *l)
{
	__atomic_fetch_add(&l->refs, 1, __ATOMIC_RELAXED);
}

void ns_listing_put(struct ns_listing *l)
{
	if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	free(l->e);
	free(l->pool);
	free(l);
}

void ns_forgotten_free(struct forgotten *f)
{
	ns_listing_put(f->list);
	free(f);
}

const char *ns_lname(const struct ns_listing *l, const struct lent *e)
{
	return l->pool + e->name;
}

/* Copy @n bytes at @s into the pool. @return 0 and their offset, or -ENOMEM, -EFBIG. */
int ns_pool_put(struct ns_listing *l, const void *s, size_t n, uint32_t *ret)
{
	if (l->plen + n > UINT32_MAX)
		return -EFBIG;
	if (l->plen + n > l->pcap) {
		size_t cap = l->pcap * 2;
		char *p;

		while (cap < l->plen + n)
			cap *= 2;
		p = realloc(l->pool, cap);
		if (!p)
			return -ENOMEM;
		l->pool = p;
		l->pcap = cap;
	}
	memcpy(l->pool + l->plen, s, n);
	*ret = (uint32_t)l->plen;
	l->plen += n;
	return 0;
}

/* Copy string @s into the pool. @return 0 and its offset (0 for ""), or -ENOMEM, -EFBIG. */
static int pool_add(struct ns_listing *l, const char *s, uint32_t *ret)
{
	if (!s[0]) {
		*ret = 0;
		return 0;
	}
	return ns_pool_put(l, s, strlen(s) + 1, ret);
}

/* Is @etag a quoted MD5 in lowercase hex ("<32 digits>")? Then its 16 bytes are in @ret. */
bool ns_etag_md5(const char *etag, unsigned char ret[16])
{
	if (strlen(etag) != 34 || etag[0] != '"' || etag[33] != '"')
		return false;
	for (int i = 0; i < 32; i++) {
		char c = etag[1 + i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (v < 0)
			return false;
		if (i & 1)
			ret[i / 2] |= (unsigned char)v;
		else
			ret[i / 2] = (unsigned char)(v << 4);
	}
	return true;
}

/* Put @etag in the pool, 16 bytes for a quoted MD5 (*ret_md5). @return as ns_pool_put. */
static int pool_etag(struct ns_listing *l, const char *etag, uint32_t *ret, bool *ret_md5)
{
	unsigned char md5[16];

	*ret_md5 = ns_etag_md5(etag, md5);
	return *ret_md5 ? ns_pool_put(l, md5, 16, ret) : pool_add(l, etag, ret);
}

/* Bytes entry @e's ETag takes in the pool (0 for none). */
size_t ns_etag_bytes(const struct ns_listing *l, const struct lent *e)
{
	if (e->flags & LE_MD5)
		return 16;
	return e->etag ? strlen(l->pool + e->etag) + 1 : 0;
}

void ns_lent_meta(const struct ns_listing *l, const struct lent *e, struct bk_meta *m)
{
	memset(m, 0, sizeof(*m));
	m->size = e->size;
	m->mtime = e->mtime;
	m->mtime_ns = e->mtime_ns;
	if (e->flags & LE_MD5) {
		const unsigned char *b = (const unsigned char *)l->pool + e->etag;
		static const char hex[] = "0123456789abcdef";

		m->etag[0] = '"';
		for (int i = 0; i < 16; i++) {
			m->etag[1 + 2 * i] = hex[b[i] >> 4];
			m->etag[2 + 2 * i] = hex[b[i] & 15];
		}
		m->etag[33] = '"'; /* and the NUL of the memset */
	} else {
		snprintf(m->etag, sizeof(m->etag), "%s", l->pool + e->etag);
	}
	m->have_perm = (e->flags & LE_PERM) != 0;
	m->perm = e->perm;
}

/* Add an entry at the end (unsorted). @return 0 or -ENOMEM. */
int ns_listing_append(struct ns_listing *l, const char *name, bool is_dir,
		      const struct bk_meta *m)
{
	struct lent *e;
	int r;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;

		e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		l->e = e;
		l->cap = cap;
	}
	e = &l->e[l->n];
	memset(e, 0, sizeof(*e));
	if ((r = pool_add(l, name, &e->name)) < 0)
		return r;
	e->flags = is_dir ? LE_DIR : 0;
	if (m && !is_dir) {
		bool md5;

		e->flags |= LE_META;
		e->size = m->size;
		e->mtime = m->mtime;
		e->mtime_ns = m->mtime_ns;
		if ((r = pool_etag(l, m->etag, &e->etag, &md5)) < 0)
			return r;
		if (md5)
			e->flags |= LE_MD5;
	}
	if (m && m->have_perm) {
		e->flags |= LE_PERM;
		e->perm = (uint16_t)(m->perm & 0777);
	}
	l->n++;
	return 0;
}

static int cmp_lent(const void *a, const void *b, void *arg)
{
	const struct lent *x = a, *y = b;
	const struct ns_listing *l = arg;
	int c = strcmp(ns_lname(l, x), ns_lname(l, y));

	if (c)
		return c;
	/* directories first among equal names */
	return (int)(y->flags & LE_DIR) - (int)(x->flags & LE_DIR);
}

/* Sort, keep one entry per name (pages may repeat a prefix; a key "a" and a prefix "a/" make
 * the directory win, as a file cannot hold children), and give back the slack. */
void ns_listing_seal(struct ns_listing *l)
{
	size_t w = 0;

	if (l->n)
		qsort_r(l->e, l->n, sizeof(*l->e), cmp_lent, l);
	for (size_t i = 0; i < l->n; i++) {
		if (w && strcmp(ns_lname(l, &l->e[w - 1]), ns_lname(l, &l->e[i])) == 0)
			continue;
		l->e[w++] = l->e[i];
	}
	l->n = w;
	if (l->n && l->n < l->cap) {
		struct lent *e = realloc(l->e, l->n * sizeof(*e));

		if (e) {
			l->e = e;
			l->cap = l->n;
		}
	}
	if (l->plen < l->pcap) {
		char *p = realloc(l->pool, l->plen);

		if (p) {
			l->pool = p;
			l->pcap = l->plen;
		}
	}
}

/* Binary search: the entry named @name, or NULL; *ret_pos is where it is or would go. */
struct lent *ns_find_pos(struct ns_listing *l, const char *name, size_t *ret_pos)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(ns_lname(l, &l->e[mid]), name);

		if (c == 0) {
			*ret_pos = mid;
			return &l->e[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*ret_pos = lo;
	return NULL;
}

struct lent *ns_find_entry(struct ns_listing *l, const char *name)
{
	size_t pos;

	return ns_find_pos(l, name, &pos);
}

/* Make @d's listing one that only @d holds, copying it if open handles share it (lock held).
 * @return it, or NULL if out of memory. */
struct ns_listing *ns_listing_own(struct dirst *d)
{
	struct ns_listing *l = d->list, *c;

	if (__atomic_load_n(&l->refs, __ATOMIC_ACQUIRE) == 1)
		return l; /* only handles opened under the lock could add one */
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->e = malloc((l->n ? l->n : 1) * sizeof(*c->e));
	c->pool = malloc(l->plen);
	if (!c->e || !c->pool) {
		free(c->e);
		free(c->pool);
		free(c);
		return NULL;
	}
	memcpy(c->e, l->e, l->n * sizeof(*c->e));
	memcpy(c->pool, l->pool, l->plen);
	c->refs = 1;
	c->n = c->cap = l->n;
	c->plen = c->pcap = l->plen;
	c->time_ns = l->time_ns;
	c->stale = l->stale;
	d->list = c;
	ns_listing_put(l);
	return c;
}

/* Add @name to @d's listing, keeping it sorted (it is not in it; lock held).
 * @return the entry or NULL (out of memory). */
struct lent *ns_listing_insert(struct dirst *d, const char *name, bool is_dir,
			       const struct bk_meta *m)
{
	struct ns_listing *l = ns_listing_own(d);
	struct lent e;
	size_t pos;

	if (!l || ns_find_pos(l, name, &pos) || ns_listing_append(l, name, is_dir, m) < 0)
		return NULL;
	e = l->e[l->n - 1];
	memmove(&l->e[pos + 1], &l->e[pos], (l->n - 1 - pos) * sizeof(e));
	l->e[pos] = e;
	return &l->e[pos];
}

bool ns_fresh(struct ns *ns, uint64_t t, uint64_t now)
{
	return now - t < ns->cfg.metadata_ttl * 1000000000ULL;
}

/* May @d's listing answer without asking the store (lock held)? */
bool ns_listing_fresh(struct ns *ns, const struct dirst *d)
{
	return d->list && (ns->cfg.immutable ||
			   (!d->list->stale && ns_fresh(ns, d->list->time_ns, clock_ns(ns))));
}

void ns_negs_free(struct negs *g)
{
	for (uint32_t i = 0; g && i < g->n; i++)
		free(g->e[i].name);
	free(g);
}

struct dirst *ns_dirst_new(void)
{
	return calloc(1, sizeof(struct dirst));
}

/* ---- names missing from a listing ---------------------------------------------------------- */

/* Did the store say @name is missing from directory @d less than negative_ttl ago? */
bool ns_neg_fresh(struct ns *ns, struct dirst *d, const char *name, uint64_t now)
{
	for (uint32_t i = 0; d->negs && i < d->negs->n; i++) {
		struct neg *g = &d->negs->e[i];

		if (strcmp(g->name, name) == 0)
			return now - g->time_ns < ns->cfg.negative_ttl * 1000000000ULL;
	}
	return false;
}

/* Remove entry @i of @d's negative cache, keeping the order (oldest first); the array goes
 * with its last entry. */
static void neg_remove(struct dirst *d, uint32_t i)
{
	struct negs *g = d->negs;

	free(g->e[i].name);
	memmove(&g->e[i], &g->e[i + 1], (--g->n - i) * sizeof(g->e[0]));
	if (!g->n) {
		free(g);
		d->negs = NULL;
	}
}

/* Remember that @name is missing from @d. Entries are in the order they came (oldest first):
 * the expired ones and the same name's go, and when NEG_MAX fresh ones remain, the oldest.
 * Out of memory: not remembered (the next lookup asks). */
void ns_neg_add(struct ns *ns, struct dirst *d, const char *name, uint64_t now)
{
	uint64_t ttl = ns->cfg.negative_ttl * 1000000000ULL;
	struct negs *g = d->negs;
	uint32_t w = 0;
	char *copy;

	for (uint32_t i = 0; g && i < g->n; i++) {
		if (now - g->e[i].time_ns >= ttl || strcmp(g->e[i].name, name) == 0)
			free(g->e[i].name);
		else
			g->e[w++] = g->e[i];
	}
	if (g && !(g->n = w)) {
		free(g);
		d->negs = g = NULL;
	}
	if (!ttl || !(copy = strdup(name)))
		return;
	if (g && g->n == NEG_MAX) {
		neg_remove(d, 0);
	} else if (!g || g->n == g->cap) {
		uint32_t cap = g ? g->cap * 2 : 4;
		struct negs *ng = realloc(g, sizeof(*g) + cap * sizeof(g->e[0]));

		if (!ng) {
			free(copy);
			return;
		}
		if (!g)
			ng->n = 0;
		ng->cap = cap;
		d->negs = ng;
	}
	g = d->negs;
	g->e[g->n++] = (struct neg){.name = copy, .time_ns = now};
}

void ns_neg_del(struct dirst *d, const char *name)
{
	for (uint32_t i = 0; d->negs && i < d->negs->n; i++) {
		if (strcmp(d->negs->e[i].name, name) == 0) {
			neg_remove(d, i);
			return;
		}
	}
}

