/* ignore_term: ignore SIGTERM, fork a grandchild that ignores it too, print
 * "<pid> <grandchild pid>\n" and sleep in both until killed.  For lib/exec's kill
 * ladder and exec_free() tests: only SIGKILL to the whole group ends this. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	pid_t child;

	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("ignore_term (lessee tests) %s\n", LESSEE_VERSION);
		return 0;
	}
	if (argc != 1) {
		fputs("usage: ignore_term\n",
		      argc == 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr);
		return argc == 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
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
