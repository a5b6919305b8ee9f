/*
 * diskfill.c - fill a disk tier's cache_dir with records, through disk.c itself, for the
 * benchmark of recovery at mount (bench.py, scenario "disk"): filling 10 GiB through a store
 * and a mount would take minutes; this writes the same segment files at the disk's speed.
 *
 *   diskfill DIR DISK_SIZE BLOCK_SIZE BYTES      (sizes in bytes)
 *
 * Opens (or wipes, if of another geometry) the tier in DIR as a mount with disk_size=DISK_SIZE
 * and block_size=BLOCK_SIZE would, and puts BYTES of full blocks of one made-up object,
 * waiting for the writer every 16 blocks (disk_put drops what a full queue cannot take). Each
 * block's bytes differ (its index in the first 8 bytes), so every CRC differs. Prints one JSON
 * line: blocks written, bytes, seconds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disk.h"

static void log_line(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "diskfill: %s\n", msg);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct disk_cfg cfg = {.log = log_line};
	struct disk_stats st;
	struct disk *d;
	unsigned char *buf;
	uint64_t bytes, nblk;
	double t0;
	char why[512];
	int r;

	if (argc != 5) {
		fprintf(stderr, "usage: diskfill DIR DISK_SIZE BLOCK_SIZE BYTES\n");
		return 2;
	}
	cfg.dir = argv[1];
	cfg.size = strtoull(argv[2], NULL, 0);
	cfg.block_size = (uint32_t)strtoul(argv[3], NULL, 0);
	bytes = strtoull(argv[4], NULL, 0);
	r = disk_open(&cfg, &d, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "diskfill: %s\n", r == -EPERM ? why : strerror(-r));
		return 1;
	}
	buf = malloc(cfg.block_size);
	if (!buf)
		return 1;
	for (uint32_t i = 0; i < cfg.block_size; i++)
		buf[i] = (unsigned char)(i * 2654435761u >> 13);
	nblk = bytes / cfg.block_size;
	t0 = now_s();
	struct cache_oid oid = cache_oid_make("bench", "diskfill", "1");

	for (uint64_t b = 0; b < nblk; b++) {
		memcpy(buf, &b, sizeof(b));
		disk_put(d, (struct cache_key){oid, b}, buf, cfg.block_size);
		if (b % 16 == 15)
			disk_flush(d);
	}
	disk_flush(d);
	disk_get_stats(d, &st);
	printf("{\"blocks\": %llu, \"bytes\": %llu, \"resident_blocks\": %llu, "
	       "\"write_drops\": %llu, \"seconds\": %.3f}\n",
	       (unsigned long long)st.writes, (unsigned long long)st.bytes_written,
	       (unsigned long long)st.blocks, (unsigned long long)st.write_drops, now_s() - t0);
	disk_close(d);
	free(buf);
	return st.write_errors ? 1 : 0;
}
