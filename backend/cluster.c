/*
 * cluster.c - a Redis Cluster's routing, read from what its nodes say (see cluster.h).
 *
 *   key ─► hash tag? ─► CRC16 XMODEM ─► & 16383 ─► slot ─► map.slot[slot] ─► master
 *                                                              ▲
 *   CLUSTER NODES (text) ─► bk_cluster_parse_nodes ────────────┘  (each master's ranges)
 *   -MOVED 3999 127.0.0.1:6381 ─► bk_cluster_parse_redirect ─► the slot's new master
 *
 * The slot map comes from CLUSTER NODES rather than CLUSTER SLOTS: its answer is one bulk
 * string, which the reply bounds of resp.h already take (a value's length), where CLUSTER
 * SLOTS answers arrays four deep with an element per slot range (thousands after slots have
 * moved one by one), past every bound the client keeps on arrays. A line that does not parse
 * refuses the whole map: a map half read would send keys to nodes that do not serve them.
 *
 * No state, no locks: the functions read their arguments and write their out-parameters.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

uint16_t bk_cluster_crc16(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

unsigned bk_cluster_slot(const void *key, size_t len)
{
	const char *k = key, *open = memchr(k, '{', len);

	if (open) {
		size_t rest = len - (size_t)(open - k) - 1;
		const char *close = memchr(open + 1, '}', rest);

		if (close && close > open + 1) /* "{}" is no tag: the whole key is hashed */
			return bk_cluster_crc16(open + 1, (size_t)(close - open - 1)) &
			       (BK_CLUSTER_SLOTS - 1);
	}
	return bk_cluster_crc16(k, len) & (BK_CLUSTER_SLOTS - 1);
}

/* A decimal number of @len bytes at @p, no sign, at most @max. @return it, or -1. */
static long number(const char *p, size_t len, long max)
{
	long v = 0;

	if (len == 0 || len > 9)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v <= max ? v : -1;
}

/* "host:port" (@len bytes; the host may be empty, or an IPv6 address with colons of its own)
 * into @host and *ret_port. @return 0 or -EPROTO. */
static int host_port(const char *p, size_t len, char *host, int *ret_port)
{
	const char *colon = len ? memrchr(p, ':', len) : NULL;
	size_t hl;
	long port;

	if (!colon)
		return -EPROTO;
	hl = (size_t)(colon - p);
	port = number(colon + 1, len - hl - 1, 65535);
	if (hl >= BK_CLUSTER_HOST_MAX || port < 1 || memchr(p, '\0', hl))
		return -EPROTO;
	memcpy(host, p, hl);
	host[hl] = '\0';
	*ret_port = (int)port;
	return 0;
}

int bk_cluster_parse_redirect(const char *err, size_t len, struct bk_cluster_redirect *ret)
{
	struct bk_cluster_redirect r = {0};
	const char *p, *sp, *end = err + len;
	long slot;

	if (len > 4 && memcmp(err, "ASK ", 4) == 0) {
		r.ask = true;
		p = err + 4;
	} else if (len > 6 && memcmp(err, "MOVED ", 6) == 0) {
		p = err + 6;
	} else {
		return -ENOENT;
	}
	sp = memchr(p, ' ', (size_t)(end - p));
	if (!sp)
		return -EPROTO;
	slot = number(p, (size_t)(sp - p), BK_CLUSTER_SLOTS - 1);
	if (slot < 0 || host_port(sp + 1, (size_t)(end - sp - 1), r.host, &r.port) < 0)
		return -EPROTO;
	r.slot = (unsigned)slot;
	*ret = r;
	return 0;
}

/* Whether the comma-separated @flags (@len bytes) hold @flag. */
static bool has_flag(const char *flags, size_t len, const char *flag)
{
	size_t fl = strlen(flag);
	const char *p = flags, *end = flags + len;

	while (p < end) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		size_t l = c ? (size_t)(c - p) : (size_t)(end - p);

		if (l == fl && memcmp(p, flag, fl) == 0)
			return true;
		p += l + 1;
	}
	return false;
}

/* The fields of one line, split at spaces: @return how many (at most @max), or -EPROTO. */
static int split(const char *p, size_t len, const char **f, size_t *fl, int max)
{
	const char *end = p + len;
	int n = 0;

	while (p < end) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));
		size_t l = sp ? (size_t)(sp - p) : (size_t)(end - p);

		if (l > 0) {
			if (n == max)
				return -EPROTO;
			f[n] = p;
			fl[n++] = l;
		}
		p += l + 1;
	}
	return n;
}

/* A slot field of master @m's line: "N", "LO-HI", or "[...]" (a slot being moved, which the
 * node answers with ASK: skipped). @return 0 or -EPROTO. */
static int take_slots(struct bk_cluster_map *map, uint8_t m, const char *p, size_t len)
{
	const char *dash = memchr(p, '-', len);
	long lo, hi;

	if (p[0] == '[')
		return p[len - 1] == ']' ? 0 : -EPROTO;
	lo = number(p, dash ? (size_t)(dash - p) : len, BK_CLUSTER_SLOTS - 1);
	hi = dash ? number(dash + 1, len - (size_t)(dash - p) - 1, BK_CLUSTER_SLOTS - 1) : lo;
	if (lo < 0 || hi < lo)
		return -EPROTO;
	for (long s = lo; s <= hi; s++) {
		if (map->slot[s] != BK_CLUSTER_NONE)
			return -EPROTO; /* served twice */
		map->slot[s] = m;
	}
	return 0;
}

#define MAX_FIELDS (8 + BK_CLUSTER_SLOTS)

/* One node's line (@len bytes, no newline) into @map. @return 0 or -errno. */
static int take_line(struct bk_cluster_map *map, const char *p, size_t len, const char *dflt,
		     const char **f, size_t *fl)
{
	int n = split(p, len, f, fl, MAX_FIELDS);
	const char *at, *comma;
	size_t al;
	uint8_t m;

	if (n == 0)
		return 0; /* an empty line */
	if (n < 8)
		return -EPROTO;
	if (!has_flag(f[2], fl[2], "master") || has_flag(f[2], fl[2], "fail") ||
	    has_flag(f[2], fl[2], "noaddr") || has_flag(f[2], fl[2], "handshake") || n == 8)
		return 0; /* a replica, a failed master, or one with no slots */
	if (map->nmasters == BK_CLUSTER_MASTERS)
		return -E2BIG;
	m = (uint8_t)map->nmasters;
	/* "ip:port@cport[,hostname]": the address is before the '@' */
	at = memchr(f[1], '@', fl[1]);
	comma = memchr(f[1], ',', fl[1]);
	al = at ? (size_t)(at - f[1]) : comma ? (size_t)(comma - f[1]) : fl[1];
	if (host_port(f[1], al, map->master[m].host, &map->master[m].port) < 0)
		return -EPROTO;
	if (!map->master[m].host[0]) {
		if (strlen(dflt) >= BK_CLUSTER_HOST_MAX)
			return -EPROTO;
		strcpy(map->master[m].host, dflt);
	}
	for (int i = 8; i < n; i++)
		if (take_slots(map, m, f[i], fl[i]) < 0)
			return -EPROTO;
	map->nmasters++;
	return 0;
}

int bk_cluster_parse_nodes(const char *text, size_t len, const char *dflt_host,
			   struct bk_cluster_map *ret)
{
	struct bk_cluster_map *map = malloc(sizeof(*map));
	const char **f = malloc(MAX_FIELDS * sizeof(*f));
	size_t *fl = malloc(MAX_FIELDS * sizeof(*fl));
	const char *p = text, *end = text + len;
	int e = -ENOMEM;

	if (!map || !f || !fl)
		goto out;
	memset(map, 0, sizeof(*map));
	memset(map->slot, BK_CLUSTER_NONE, sizeof(map->slot));
	e = memchr(text, '\0', len) ? -EPROTO : 0;
	while (e == 0 && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);

		e = take_line(map, p, l && p[l - 1] == '\r' ? l - 1 : l, dflt_host, f, fl);
		p += l + 1;
	}
	if (e == 0)
		*ret = *map;
out:
	free(map);
	free(f);
	free(fl);
	return e;
}
