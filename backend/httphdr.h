/*
 * httphdr.h - HTTP header values the range reader trusts only after checking.
 */
#ifndef TIERFS_HTTPHDR_H
#define TIERFS_HTTPHDR_H

#include <stddef.h>
#include <stdint.h>

/* "bytes 0-99/1234" -> 0, 99, 1234; "bytes 0-99/ *" (no space) -> total UINT64_MAX.
 * @return 0 or -EINVAL (malformed, first > last, last >= total, overflow). */
int httphdr_content_range(const char *v, size_t len, uint64_t *ret_first, uint64_t *ret_last,
			  uint64_t *ret_total);

/* Decimal Content-Length, no sign, no overflow. @return 0 or -EINVAL. */
int httphdr_content_length(const char *v, size_t len, uint64_t *ret);

/* RFC 1123 / 850 / asctime date -> seconds since epoch. @return 0 or -EINVAL. */
int httphdr_date(const char *v, size_t len, int64_t *ret);

#endif
