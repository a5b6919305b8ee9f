/*
 * crc32c.h - CRC-32C (Castagnoli, as iSCSI, ext4 and RocksDB use it), for the tiers that keep
 * blocks outside memory (disk, shared): every block they hand back is checked against it.
 *
 * crc32c(0, buf, len) is the standard CRC-32C of buf ("123456789" gives 0xe3069283), and
 * crc32c(crc32c(0, a, n), b, m) is the CRC of a followed by b. ISA-L's crc32_iscsi does the
 * work (SSE4.2 or PCLMUL, chosen at run time; a table on other machines).
 */
#ifndef TIERFS_CRC32C_H
#define TIERFS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
