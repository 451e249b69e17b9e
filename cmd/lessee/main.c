/* placeholder until the daemon issue: answers --version/--help */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--version") == 0) {
		printf("lessee %s\n", LESSEE_VERSION);
		return 0;
	}
	printf("usage: lessee [--version|--help]\n");
	return argc > 1 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
