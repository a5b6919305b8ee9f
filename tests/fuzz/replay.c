/*
 * replay.c - a main() for the fuzz targets without libFuzzer, so the saved corpus runs as an
 * ordinary unit test under any compiler (after systemd's src/fuzz/fuzz-main.c).
 *
 *     fuzz_s3xml_replay tests/fuzz/corpus/s3xml [more files or directories...]
 *
 * Each argument is a file, or a directory whose regular files (not starting with '.') are
 * taken in name order, so a run is the same on every machine. Each file is read into a buffer
 * of exactly its size (so an AddressSanitizer build catches a read past the end, as libFuzzer
 * would) and passed to LLVMFuzzerTestOneInput() once; the empty input runs first, as it does
 * under libFuzzer. A target reports a broken invariant by aborting, which fails the test; a
 * file or directory that cannot be read fails it too (exit 1), so a misplaced corpus is not
 * mistaken for a clean run. On success it prints "ok N inputs" (N counts the files) and
 * exits 0. Single-threaded; all memory is freed per input.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Optional in a target: weak, so a target without it still links. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Read all of @path into a malloc'd buffer of exactly its size. @return 0 or -errno. */
static int read_file(const char *path, uint8_t **ret, size_t *ret_len)
{
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f;
	int r = 0;

	f = fopen(path, "rb");
	if (!f)
		return -errno;
	for (;;) {
		uint8_t chunk[8192];
		size_t n = fread(chunk, 1, sizeof(chunk), f);
		uint8_t *p;

		if (n == 0)
			break;
		if (len + n > cap) {
			cap = len + n;
			p = realloc(buf, cap);
			if (!p) {
				r = -ENOMEM;
				goto out;
			}
			buf = p;
		}
		memcpy(buf + len, chunk, n);
		len += n;
	}
	if (ferror(f))
		r = -EIO;
out:
	fclose(f);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret = buf; /* NULL for an empty file */
	*ret_len = len;
	return 0;
}

static int run_file(const char *path, unsigned *count)
{
	uint8_t *data;
	size_t len;
	int r;

	r = read_file(path, &data, &len);
	if (r < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(-r));
		return r;
	}
	LLVMFuzzerTestOneInput(data ? data : (const uint8_t *)"", len);
	free(data);
	(*count)++;
	return 0;
}

static int skip_dots(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

static int run_dir(const char *dir, unsigned *count)
{
	struct dirent **names;
	int n, r = 0;

	n = scandir(dir, &names, skip_dots, alphasort);
	if (n < 0) {
		r = -errno;
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(-r));
		return r;
	}
	for (int i = 0; i < n; i++) {
		char *path = NULL;
		struct stat st;

		if (r == 0 && asprintf(&path, "%s/%s", dir, names[i]->d_name) < 0) {
			r = -ENOMEM;
			path = NULL;
		}
		if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode))
			r = run_file(path, count);
		free(path);
		free(names[i]);
	}
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	unsigned count = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		int r;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		r = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i], &count);
		if (r < 0)
			return 1;
	}
	printf("ok %u inputs\n", count);
	return 0;
}
