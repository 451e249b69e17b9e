/* emit OUT [ERR [CODE [PIPE]]]: write OUT pattern bytes (emit.h) to stdout, then
 * ERR to stderr, then exit with CODE.  PIPE: first make stdout's pipe that big
 * (F_SETPIPE_SZ), so it holds more than one read.  For lib/exec's output tests. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "testutil.h"
#include "util/fileio.h"

static int emit(int fd, unsigned long long n)
{
	char buf[8192];

	for (unsigned long long off = 0; off < n;) {
		size_t len = n - off < sizeof(buf) ? (size_t)(n - off) : sizeof(buf);

		for (size_t i = 0; i < len; i++)
			buf[i] = (char)emit_byte(off + i);
		if (write_all(fd, buf, len) < 0)
			return -1;
		off += len;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const char usage[] = "usage: emit OUT_BYTES [ERR_BYTES [EXIT_CODE [PIPE_BYTES]]]\n";

	if (tu_std_answer(argc, argv, "emit (lessee tests)", usage))
		return 0;
	if (argc < 2 || argc > 5 || strcmp(argv[1], "--help") == 0) {
		fputs(usage, stderr);
		return 2;
	}
	if (argc > 4 && fcntl(1, F_SETPIPE_SZ, atoi(argv[4])) < 0) {
		perror("emit: F_SETPIPE_SZ");
		return 100;
	}
	if (emit(1, strtoull(argv[1], NULL, 10)) < 0 ||
	    (argc > 2 && emit(2, strtoull(argv[2], NULL, 10)) < 0))
		return 1;
	return argc > 3 ? atoi(argv[3]) : 0;
}
