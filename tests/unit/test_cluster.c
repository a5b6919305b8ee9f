/*
 * test_cluster.c - backend/cluster.c: the hash slot (the specification's CRC16 vector, hash
 * tags, the slots of keys redis-cli's CLUSTER KEYSLOT gives), MOVED and ASK as nodes send them
 * and as they must not be taken, and CLUSTER NODES' text: masters, replicas, failed masters,
 * slots being moved, and maps refused whole.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cluster.h"

static unsigned slot_of(const char *k)
{
	return bk_cluster_slot(k, strlen(k));
}

static void crc16_vector(void **state)
{
	(void)state;
	assert_int_equal(bk_cluster_crc16("123456789", 9), 0x31C3);
	assert_int_equal(bk_cluster_crc16("", 0), 0);
}

static void slots_of_keys(void **state)
{
	(void)state;
	/* redis-server 7.0's CLUSTER KEYSLOT */
	assert_int_equal(slot_of("foo"), 12182);
	assert_int_equal(slot_of("bar"), 5061);
	assert_int_equal(slot_of("123456789"), 0x31C3 & 16383);
	/* a tag: only what is inside the first {...} counts */
	assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
	assert_int_equal(slot_of("{user1000}.followers"), slot_of("{user1000}.following"));
	assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
	/* "{}" is no tag, nor is a '{' without a '}' after it */
	assert_int_equal(slot_of("foo{}{bar}"), bk_cluster_crc16("foo{}{bar}", 10) & 16383);
	assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
	assert_int_equal(slot_of("foo{bar"), bk_cluster_crc16("foo{bar", 7) & 16383);
	/* the fleet's: a block's lock has its value key as its tag */
	assert_int_equal(slot_of("tierfs:lock:{tierfs:tfs1:00000000000000010000000000000002:3:"
				 "4194304}"),
			 slot_of("tierfs:tfs1:00000000000000010000000000000002:3:4194304"));
}

static void redirects(void **state)
{
	struct bk_cluster_redirect r;
	const char *m = "MOVED 3999 127.0.0.1:6381", *a = "ASK 16383 ::1:7000",
		   *e = "MOVED 12 :30001";

	(void)state;
	assert_int_equal(bk_cluster_parse_redirect(m, strlen(m), &r), 0);
	assert_false(r.ask);
	assert_int_equal(r.slot, 3999);
	assert_string_equal(r.host, "127.0.0.1");
	assert_int_equal(r.port, 6381);
	assert_int_equal(bk_cluster_parse_redirect(a, strlen(a), &r), 0);
	assert_true(r.ask);
	assert_int_equal(r.slot, 16383);
	assert_string_equal(r.host, "::1");
	assert_int_equal(r.port, 7000);
	assert_int_equal(bk_cluster_parse_redirect(e, strlen(e), &r), 0); /* unknown endpoint */
	assert_string_equal(r.host, "");
	assert_int_equal(r.port, 30001);
}

static void redirects_refused(void **state)
{
	static const char *const others[] = {"ERR unknown command", "MOVE 1 a:1", "ASKING", "",
					     "CLUSTERDOWN The cluster is down"};
	static const char *const bad[] = {"MOVED 16384 a:1",
					  "MOVED -1 a:1",
					  "MOVED 1 a:0",
					  "MOVED 1 a:65536",
					  "MOVED 1 a",
					  "MOVED 1",
					  "MOVED  a:1",
					  "ASK x a:1",
					  "MOVED 1 a:1 ",
					  "MOVED 1 a:+1",
					  "MOVED 0000000001 a:1",
					  "ASK 1 a:99999999999999999999"};
	struct bk_cluster_redirect r = {.slot = 77};
	char longhost[400];

	(void)state;
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		assert_int_equal(bk_cluster_parse_redirect(others[i], strlen(others[i]), &r),
				 -ENOENT);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(bk_cluster_parse_redirect(bad[i], strlen(bad[i]), &r), -EPROTO);
	snprintf(longhost, sizeof(longhost), "MOVED 1 %0300d:1", 0);
	assert_int_equal(bk_cluster_parse_redirect(longhost, strlen(longhost), &r), -EPROTO);
	assert_int_equal(bk_cluster_parse_redirect("MOVED 1 a\0b:1", 13, &r), -EPROTO);
	assert_int_equal(r.slot, 77); /* written only on success */
}

/* redis-server 7.0's answer for 3 masters and 3 replicas, a slot being moved, a failed node */
static const char NODES[] =
    "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@40004 slave "
    "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n"
    "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@40002 master - 0 "
    "1426238316232 2 connected 5461-10922 [5461->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]\n"
    "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@40003 master - 0 "
    "1426238318243 3 connected 10923-16383\n"
    "6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@40005 slave "
    "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected\n"
    "824fe116063bc5fcf9f4ffd895bc17aee7731ac3 127.0.0.1:30006@40006 master,fail - "
    "1426238316232 1426238316000 6 disconnected\n"
    "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca :30001@40001,node1.example myself,master - 0 0 "
    "1 connected 0-5460\n";

static void nodes_map(void **state)
{
	struct bk_cluster_map *m = malloc(sizeof(*m));

	(void)state;
	assert_non_null(m);
	assert_int_equal(bk_cluster_parse_nodes(NODES, strlen(NODES), "10.1.1.1", m), 0);
	assert_int_equal(m->nmasters, 3);
	assert_string_equal(m->master[0].host, "127.0.0.1");
	assert_int_equal(m->master[0].port, 30002);
	assert_int_equal(m->master[1].port, 30003);
	assert_string_equal(m->master[2].host, "10.1.1.1"); /* no ip: the node asked */
	assert_int_equal(m->master[2].port, 30001);
	assert_int_equal(m->slot[0], 2);
	assert_int_equal(m->slot[5460], 2);
	assert_int_equal(m->slot[5461], 0); /* migrating: still its owner's (it answers ASK) */
	assert_int_equal(m->slot[10922], 0);
	assert_int_equal(m->slot[10923], 1);
	assert_int_equal(m->slot[16383], 1);
	/* a cluster with no slots assigned yet: valid, nothing served */
	assert_int_equal(bk_cluster_parse_nodes("", 0, "h", m), 0);
	assert_int_equal(m->nmasters, 0);
	assert_int_equal(m->slot[100], BK_CLUSTER_NONE);
	free(m);
}

static void nodes_refused(void **state)
{
	static const char *const bad[] = {
	    "x 127.0.0.1:1@2 master - 0 0 1 connected 0-16384\n",
	    "x 127.0.0.1:1@2 master - 0 0 1 connected 5-4\n",
	    "x 127.0.0.1:1@2 master - 0 0 1 connected 0-10\n"
	    "y 127.0.0.1:2@3 master - 0 0 1 connected 10\n", /* slot 10 twice */
	    "x 127.0.0.1:1@2 master - 0 0 1\n",		     /* too few fields */
	    "x 127.0.0.1@2 master - 0 0 1 connected 1\n",    /* no port */
	    "x 127.0.0.1:0@2 master - 0 0 1 connected 1\n",
	    "x 127.0.0.1:1@2 master - 0 0 1 connected [1->-y\n",
	    "x 127.0.0.1:1@2 master - 0 0 1 connected -\n",
	    "x 127.0.0.1:1@2 master - 0 0 1 connected a-b\n",
	};
	struct bk_cluster_map *m = malloc(sizeof(*m));
	char many[4096] = "";

	(void)state;
	assert_non_null(m);
	m->nmasters = 99;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(bk_cluster_parse_nodes(bad[i], strlen(bad[i]), "h", m), -EPROTO);
	assert_int_equal(bk_cluster_parse_nodes("x a:1@2 master - 0 0 1 c 1\0", 27, "h", m),
			 -EPROTO);
	for (int i = 0; i < 17; i++) /* 17 masters: over BK_CLUSTER_MASTERS */
		snprintf(many + strlen(many), sizeof(many) - strlen(many),
			 "n%d 127.0.0.1:%d@1 master - 0 0 1 connected %d\n", i, 7000 + i, i);
	assert_int_equal(bk_cluster_parse_nodes(many, strlen(many), "h", m), -E2BIG);
	assert_int_equal(m->nmasters, 99); /* written only on success */
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(crc16_vector), cmocka_unit_test(slots_of_keys),
	    cmocka_unit_test(redirects),    cmocka_unit_test(redirects_refused),
	    cmocka_unit_test(nodes_map),    cmocka_unit_test(nodes_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
