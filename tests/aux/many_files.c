/* many_files N: create N empty files f<i> in the working directory, print
 * "created N\n" and exit 0.  For the tests and the benchmark of removing a
 * large run directory off the loop (tests/integration/check_hostile.c,
 * bench/healthz_rmrf.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

int main(int argc, char **argv)
{
	static const char usage[] = "usage: many_files N\n";
	char name[32];
	long n;

	if (tu_std_answer(argc, argv, "many_files (lessee tests)", usage))
		return 0;
	if (argc != 2 || (n = strtol(argv[1], NULL, 10)) <= 0) {
		fputs(usage, stderr);
		return 2;
	}
	for (long i = 0; i < n; i++) {
		int fd;

		snprintf(name, sizeof(name), "f%ld", i);
		fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			perror(name);
			return 1;
		}
		close(fd);
	}
	printf("created %ld\n", n);
	return 0;
}
