/* ignore_term: ignore SIGTERM, fork a grandchild that ignores it too, print
 * "<pid> <grandchild pid>\n" and sleep in both until killed.  For lib/exec's kill
 * ladder and exec_free() tests: only SIGKILL to the whole group ends this. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "testutil.h"

int main(int argc, char **argv)
{
	pid_t child;

	if (tu_std_answer(argc, argv, "ignore_term (lessee tests)", "usage: ignore_term\n"))
		return 0;
	if (argc != 1) {
		fputs("usage: ignore_term\n", stderr);
		return 2;
	}
	signal(SIGTERM, SIG_IGN); /* inherited by the fork */
	child = fork();
	if (child < 0)
		return 1;
	if (child > 0) {
		printf("%d %d\n", (int)getpid(), (int)child);
		fflush(stdout);
	}
	for (;;)
		pause();
}
