/*
 * fuzz_cluster.c - what a Redis Cluster node sends that backend/cluster.c reads: CLUSTER
 * NODES' text (bk_cluster_parse_nodes) and a MOVED or ASK error (bk_cluster_parse_redirect),
 * and the slot of a key (bk_cluster_slot). The input's first byte picks which (0: nodes,
 * 1: a redirect, other: a key), the rest is the text. Checked beyond "no crash, no leak, no
 * UB": a map taken names at most BK_CLUSTER_MASTERS masters, each with a host that fits and
 * a port in 1-65535, and every slot is served by one of them or by none; a redirect taken has
 * a slot under 16384 and a port in 1-65535; a key's slot is under 16384, and a key with a
 * hash tag has its tag's slot.
 */
#include <errno.h>

#include "cluster.h"
#include "fuzz.h"

static void nodes(const char *p, size_t n)
{
	struct bk_cluster_map *m = malloc(sizeof(*m));

	FUZZ_CHECK(m);
	if (bk_cluster_parse_nodes(p, n, "10.0.0.1", m) == 0) {
		FUZZ_CHECK(m->nmasters <= BK_CLUSTER_MASTERS);
		for (unsigned i = 0; i < m->nmasters; i++) {
			FUZZ_CHECK(strlen(m->master[i].host) < BK_CLUSTER_HOST_MAX);
			FUZZ_CHECK(m->master[i].port >= 1 && m->master[i].port <= 65535);
		}
		for (unsigned s = 0; s < BK_CLUSTER_SLOTS; s++)
			FUZZ_CHECK(m->slot[s] == BK_CLUSTER_NONE || m->slot[s] < m->nmasters);
	}
	free(m);
}

static void redirect(const char *p, size_t n)
{
	struct bk_cluster_redirect r;
	int e = bk_cluster_parse_redirect(p, n, &r);

	FUZZ_CHECK(e == 0 || e == -ENOENT || e == -EPROTO);
	if (e == 0) {
		FUZZ_CHECK(r.slot < BK_CLUSTER_SLOTS);
		FUZZ_CHECK(r.port >= 1 && r.port <= 65535);
		FUZZ_CHECK(strlen(r.host) < BK_CLUSTER_HOST_MAX);
	}
}

static void key(const char *p, size_t n)
{
	unsigned s = bk_cluster_slot(p, n);
	const char *open = memchr(p, '{', n), *close;

	FUZZ_CHECK(s < BK_CLUSTER_SLOTS);
	if (!open)
		return;
	close = memchr(open + 1, '}', n - (size_t)(open - p) - 1);
	if (close && close > open + 1)
		FUZZ_CHECK(s == bk_cluster_slot(open + 1, (size_t)(close - open - 1)) ||
			   memchr(open + 1, '{', (size_t)(close - open - 1)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *p;

	if (size < 1)
		return 0;
	p = malloc(size - 1 ? size - 1 : 1); /* its own buffer: ASan sees a read past the end */
	FUZZ_CHECK(p);
	memcpy(p, data + 1, size - 1);
	if (data[0] == 0)
		nodes(p, size - 1);
	else if (data[0] == 1)
		redirect(p, size - 1);
	else
		key(p, size - 1);
	free(p);
	return 0;
}
