/*
 * crc32c.c - CRC-32C over ISA-L (see crc32c.h).
 *
 * crc32_iscsi(buf, len, init) runs the register without the standard's final inversion:
 * inverting on the way in and on the way out makes it the standard, chainable CRC. It takes an
 * int length, so lengths past INT_MAX go in pieces.
 */
#include <limits.h>

#include <isa-l/crc.h>

#include "crc32c.h"

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	unsigned char *p = (unsigned char *)buf; /* ISA-L's prototype lacks the const */
	uint32_t r = ~crc;

	while (len) {
		int n = len > (size_t)INT_MAX ? INT_MAX : (int)len;

		r = crc32_iscsi(p, n, r);
		p += n;
		len -= (size_t)n;
	}
	return ~r;
}
