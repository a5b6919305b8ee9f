/*
 * cluster.h - what tierfs reads of a Redis Cluster: the hash slot of a key, the redirections
 * a node answers with (MOVED, ASK), and the slot map a node describes (CLUSTER NODES). Pure
 * functions over bytes a server sent, no I/O: backend/redis.c routes with them, the unit
 * tests drive them directly. Everything a server sent is checked: a reply that does not
 * parse is refused (-EPROTO), never half taken.
 */
#ifndef TIERFS_CLUSTER_H
#define TIERFS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BK_CLUSTER_SLOTS    16384u
#define BK_CLUSTER_MASTERS  16u	  /* masters a map may name (redis.c's MAX_SERVERS) */
#define BK_CLUSTER_NONE	    0xffu /* a slot no master serves */
#define BK_CLUSTER_HOST_MAX 256u  /* a node's address, NUL included */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as the cluster specification gives it:
 * "123456789" is 0x31C3. */
uint16_t bk_cluster_crc16(const void *buf, size_t len);

/* The slot of @key: CRC16 of its hash tag (the bytes between the first '{' and the first '}'
 * after it, when there is at least one) or of the whole key, mod 16384. */
unsigned bk_cluster_slot(const void *key, size_t len);

/* A redirection: "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>". */
struct bk_cluster_redirect {
	bool ask; /* ASK (this command only), or MOVED (the slot moved) */
	unsigned slot;
	char host[BK_CLUSTER_HOST_MAX]; /* "" when the node sent none: the host it was asked at */
	int port;
};

/* Parse the error reply @err (@len bytes, without the '-'). @return 0 and *ret, -ENOENT when
 * it is not a redirection, -EPROTO when it is one but malformed (a slot over 16383, a bad
 * port, an address too long). */
int bk_cluster_parse_redirect(const char *err, size_t len, struct bk_cluster_redirect *ret);

/* The masters serving slots and which serves each slot. */
struct bk_cluster_map {
	unsigned nmasters;
	struct {
		char host[BK_CLUSTER_HOST_MAX];
		int port;
	} master[BK_CLUSTER_MASTERS];
	uint8_t slot[BK_CLUSTER_SLOTS]; /* index into master, or BK_CLUSTER_NONE */
};

/*
 * Parse CLUSTER NODES' text (@len bytes): one line a node, "<id> <ip:port@cport[,hostname]>
 * <flags> <master> <ping> <pong> <epoch> <link> [<slot>|<lo>-<hi>|[<migrating>]]...". Only
 * masters that are not failed (flags without fail, noaddr, handshake) serve slots; an empty
 * ip is @dflt_host (the node asked). @return 0 and *ret; -EPROTO for a line that does not
 * parse, a slot out of range or served twice, a NUL; -E2BIG for more than BK_CLUSTER_MASTERS
 * masters serving slots.
 */
int bk_cluster_parse_nodes(const char *text, size_t len, const char *dflt_host,
			   struct bk_cluster_map *ret);

#endif
