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
#include <string.h>

/* --version and --help, as every program of ours answers them.  libFuzzer
 * calls LLVMFuzzerInitialize() before it reads its own flags, and it ignores
 * a flag with two dashes: without this, `harness --help` starts fuzzing. */
static inline void fuzz_std_answer(int argc, char **argv, const char *name)
{
	if (argc != 2)
		return;
	if (strcmp(argv[1], "--version") == 0)
		printf("fuzz/%s %s\n", name, LESSEE_VERSION);
	else if (strcmp(argv[1], "--help") == 0)
		printf("usage: %s [LIBFUZZER_FLAG...] [CORPUS_DIR...]\n"
		       "  libFuzzer harness fuzz/%s.c (make fuzz runs it; scripts/fuzz.sh)\n"
		       "  -help=1 lists libFuzzer's own flags\n",
		       argv[0], name);
	else
		return;
	exit(0);
}

#define FUZZ_LIBFUZZER_ENTRY(name)                                                                 \
	int LLVMFuzzerInitialize(int *argc, char ***argv);                                         \
	int LLVMFuzzerInitialize(int *argc, char ***argv)                                          \
	{                                                                                          \
		fuzz_std_answer(*argc, *argv, #name);                                              \
		return 0;                                                                          \
	}                                                                                          \
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
