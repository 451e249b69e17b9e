/* probe: print, one "key=value" per line, what a spawned program sees of its
 * setup: ids, session, open fds, signal state, limits, prctl flags, cwd and the
 * whole environment ("env=NAME=value").  For lib/exec's child-setup tests. */
#include <dirent.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "testutil.h"

extern char **environ;

static void print_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	const char *sep = "";

	printf("fds=");
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' && atoi(de->d_name) != dirfd(d)) {
			printf("%s%s", sep, de->d_name);
			sep = ",";
		}
	printf("\n");
	if (d)
		closedir(d);
}

/* SigBlk, SigIgn, NoNewPrivs... exactly as the kernel shows them. */
static void print_status(void)
{
	static const char *const keys[] = {"SigBlk:", "SigIgn:", "NoNewPrivs:"};
	FILE *f = fopen("/proc/self/status", "re");
	char line[512];

	while (f && fgets(line, sizeof(line), f))
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (strncmp(line, keys[i], strlen(keys[i])) == 0) {
				char *v = line + strlen(keys[i]);

				v += strspn(v, " \t");
				printf("%.*s=%s", (int)strlen(keys[i]) - 1, keys[i], v);
			}
	if (f)
		fclose(f);
}

static void print_ids(void)
{
	gid_t groups[64];
	int n = getgroups(64, groups);

	printf("uid=%d\ngid=%d\ngroups=", (int)getuid(), (int)getgid());
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", (int)groups[i]);
	printf("\n");
}

static void print_rlimit(const char *name, int resource)
{
	struct rlimit rl;

	if (getrlimit(resource, &rl) == 0)
		printf("%s=%llu:%llu\n", name, (unsigned long long)rl.rlim_cur,
		       (unsigned long long)rl.rlim_max);
}

int main(int argc, char **argv)
{
	char cwd[PATH_MAX];
	int pdeathsig = -1;

	if (tu_std_answer(argc, argv, "probe (lessee tests)", "usage: probe\n"))
		return 0;
	if (argc != 1) {
		fputs("usage: probe\n", stderr);
		return 2;
	}
	print_fds(); /* first, before stdio opens anything */
	printf("pid=%d\nsid=%d\npgid=%d\n", (int)getpid(), (int)getsid(0), (int)getpgrp());
	print_ids();
	print_status();
	print_rlimit("nofile", RLIMIT_NOFILE);
	print_rlimit("fsize", RLIMIT_FSIZE);
	print_rlimit("core", RLIMIT_CORE);
	prctl(PR_GET_PDEATHSIG, &pdeathsig);
	printf("pdeathsig=%d\n", pdeathsig);
	printf("cwd=%s\n", getcwd(cwd, sizeof(cwd)) ? cwd : "?");
	for (char **e = environ; *e; e++)
		printf("env=%s\n", *e);
	return 0;
}
