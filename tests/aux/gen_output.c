/* gen_output BYTES [SEED]: write BYTES deterministic pseudo-random bytes
 * (binary, all 256 values) to stdout, in odd-sized writes.  The tests rebuild
 * the same stream with tu_gen_fill() to check a log byte for byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

int main(int argc, char **argv)
{
	unsigned long long total, done = 0;
	uint64_t s;
	char buf[7919];

	if (argc < 2 || strcmp(argv[1], "--help") == 0) {
		fprintf(argc < 2 ? stderr : stdout, "usage: gen_output BYTES [SEED]\n");
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("gen_output %s\n", LESSEE_VERSION);
		return 0;
	}
	total = strtoull(argv[1], NULL, 10);
	s = tu_gen_seed(argc > 2 ? strtoull(argv[2], NULL, 10) : 0);
	while (done < total) {
		size_t n = sizeof(buf);

		if (n > total - done)
			n = (size_t)(total - done);
		tu_gen_fill(&s, buf, n);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(STDOUT_FILENO, buf + off, n - off);

			if (w <= 0)
				return 1;
			off += (size_t)w;
		}
		done += n;
	}
	return 0;
}
