/* The chaos test's job (tests/aux/ledger.c) and its checker (tests/chaos/chaos.c)
 * share these: everything a run writes is a pure function of its run id, so
 * the checker can rebuild the exact log and result of any run.
 *
 *   output: chaos_lines(id) lines, line k = chaos_line(id, k, ...)
 *   result: chaos_result(id) = {"id":ID,"lines":N,"digest":"<fnv64 of the output>"}
 *   a quarter of the ids trap SIGTERM (chaos_traps_term) and carry on;
 *   the pace differs per id (chaos_pause_factor). */
#pragma once

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t chaos_fnv(const void *p, size_t n, uint64_t h)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static inline uint64_t chaos_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static inline uint64_t chaos_id_hash(const char *id)
{
	return chaos_fnv(id, strlen(id), 0xcbf29ce484222325ULL);
}

static inline unsigned chaos_lines(const char *id)
{
	return 20 + (unsigned)(chaos_id_hash(id) % 181);
}

/* The job pauses LINE_US times this (1..6) between lines: with LINE_US 10 ms
 * a run takes 0.2 s to 12 s, 4 s on average; a quarter outlive a 6 s lease. */
static inline unsigned chaos_pause_factor(const char *id)
{
	return 1 + (unsigned)((chaos_mix(chaos_id_hash(id)) >> 8) % 6);
}

static inline bool chaos_traps_term(const char *id)
{
	return chaos_mix(chaos_id_hash(id)) % 4 == 0;
}

/* Line k (0-based) of n, newline included; its length (< 256). */
static inline int chaos_line(const char *id, unsigned k, unsigned n, char *buf, size_t size)
{
	uint64_t h = chaos_mix(chaos_id_hash(id) ^ ((uint64_t)(k + 1) << 20));
	unsigned pad = (unsigned)(h % 48);
	char fill[48];

	memset(fill, 'a' + (int)(h % 26), sizeof(fill));
	return snprintf(buf, size, "chaos %.64s line %u/%u %016" PRIx64 " %.*s\n", id, k + 1, n, h,
	                (int)pad, fill);
}

/* The whole output of a run (malloc'ed, NUL-terminated), NULL on ENOMEM. */
static inline char *chaos_output(const char *id, size_t *ret_len)
{
	unsigned n = chaos_lines(id);
	char *out = malloc((size_t)n * 256 + 1);
	size_t len = 0;

	if (!out)
		return NULL;
	for (unsigned k = 0; k < n; k++)
		len += (size_t)chaos_line(id, k, n, out + len, 256);
	out[len] = '\0';
	*ret_len = len;
	return out;
}

/* The result file's JSON text. */
static inline int chaos_result(const char *id, char *buf, size_t size)
{
	size_t len = 0;
	char *out = chaos_output(id, &len);
	uint64_t d = out ? chaos_fnv(out, len, 0xcbf29ce484222325ULL) : 0;

	free(out);
	return snprintf(buf, size, "{\"id\":\"%.128s\",\"lines\":%u,\"digest\":\"%016" PRIx64 "\"}",
	                id, chaos_lines(id), d);
}
