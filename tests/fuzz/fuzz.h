/*
 * fuzz.h - what every fuzz target in tests/fuzz/ shares: the libFuzzer entry points and an
 * invariant check that is never compiled out.
 *
 * Each fuzz_<thing>.c defines LLVMFuzzerTestOneInput() (and optionally LLVMFuzzerInitialize())
 * and is linked twice: with -fsanitize=fuzzer for fuzzing (meson -Dfuzz=true, clang, see
 * scripts/fuzz), and with replay.c, a plain main() that feeds it the saved corpus in
 * tests/fuzz/corpus/<thing>/ as an ordinary unit test. A target must therefore keep no state
 * between inputs beyond what LLVMFuzzerInitialize() sets up, must free everything it
 * allocates (LeakSanitizer counts a leak as a crash), and reports a broken invariant by
 * aborting, which both libFuzzer and meson see as a failure.
 */
#ifndef TIERFS_FUZZ_H
#define TIERFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Like assert(), but also under NDEBUG, and it names the broken invariant. */
#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__,       \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* @data as a malloc'd NUL-terminated string (it may hold earlier NULs). Aborts when out of
 * memory: a fuzz input is small, and a NULL here would only hide the input's effect. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	FUZZ_CHECK(s);
	if (size)
		memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

#endif
