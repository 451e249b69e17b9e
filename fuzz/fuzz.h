/* The harnesses' common part.  Each fuzz/<name>.c defines its entry with
 * FUZZ_TARGET(name) { ... }: built with -DLESSEE_LIBFUZZER (make fuzz) it is
 * also libFuzzer's LLVMFuzzerTestOneInput; in the normal build the same
 * function is what tests/unit/check_fuzz_regress.c replays the seed corpora
 * and fuzz/regress/<name>/ (every crash found, kept) through.
 *
 * A harness returns 0 and aborts (FUZZ_ASSERT) when a property fails, so a
 * wrong answer is a crash just like a sanitizer report. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef LESSEE_LIBFUZZER
#define FUZZ_LIBFUZZER_ENTRY(name)                                                                 \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                              \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                               \
	{                                                                                          \
		return fuzz_##name(data, size);                                                    \
	}
#else
#define FUZZ_LIBFUZZER_ENTRY(name)
#endif

#define FUZZ_TARGET(name)                                                                          \
	int fuzz_##name(const uint8_t *data, size_t size);                                         \
	FUZZ_LIBFUZZER_ENTRY(name)                                                                 \
	int fuzz_##name(const uint8_t *data, size_t size)

#define FUZZ_ASSERT(x)                                                                             \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #x);   \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* The input as a NUL-terminated string of exactly size bytes (a body as lib/http
 * hands it over: NUL-terminated, possibly with NULs inside). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	for (size_t i = 0; i < size; i++)
		s[i] = (char)data[i];
	s[size] = '\0';
	return s;
}
