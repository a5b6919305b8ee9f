/*
 * jsonidx.h - nginx `autoindex_format json` directory listings, parsed with json-c.
 */
#ifndef TIERFS_JSONIDX_H
#define TIERFS_JSONIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Once per entry: name as sent, is_dir for "directory", size (0 for directories), mtime from
 * the RFC 1123 "mtime" (INT64_MIN if absent). Return 0 to go on, negative to stop. */
typedef int (*jsonidx_fn)(void *arg, const char *name, bool is_dir, uint64_t size,
			  int64_t mtime);

/* @return 0, -EIO if @body is not such a listing, or the callback's negative value. */
int jsonidx_parse(const char *body, size_t len, jsonidx_fn fn, void *arg);

#endif
