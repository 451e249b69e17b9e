/* snoop: a run that tries to reach its daemon's secrets, and prints what it
 * could reach.  One line per probe: "snoop PROBE: denied (why)" or
 * "snoop PROBE: REACHED what", then "snoop done".  Exit status 0 either way:
 * the test reads the lines (check_secrets).
 *
 *   snoop [--creds DIR] [--spool DIR] [--file PATH]...
 *
 * The daemon is the parent (getppid()): its /proc/PID/{maps,mem,environ,fd},
 * PTRACE_ATTACH and PTRACE_SEIZE; then our own fds beyond 0-2 and
 * capabilities (bounding set aside: it only limits), the
 * credentials directory, the spool, and any file named with --file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NEEDLE "Bearer "

static pid_t daemon_pid;

static void denied(const char *probe, int err)
{
	printf("snoop %s: denied (%s)\n", probe, strerror(err));
}

/* The bytes after the needle, printable ones only, so the test can compare. */
static void print_hit(const char *p, size_t avail)
{
	size_t n = strlen(NEEDLE);

	while (n < avail && n < 80 && p[n] > 0x20 && p[n] < 0x7f)
		n++;
	printf("snoop mem: found %.*s\n", (int)n, p);
}

static size_t scan(const char *buf, size_t len, unsigned *printed)
{
	size_t hits = 0, nl = strlen(NEEDLE);

	for (const char *p = buf; (p = memmem(p, len - (size_t)(p - buf), NEEDLE, nl)); p += nl) {
		hits++;
		if ((*printed)++ < 8)
			print_hit(p, len - (size_t)(p - buf));
	}
	return hits;
}

static void scan_region(int mem, uint64_t lo, uint64_t hi, size_t *bytes, size_t *hits,
                        unsigned *printed)
{
	static char buf[1 << 16];

	for (uint64_t a = lo; a < hi; a += sizeof(buf)) {
		size_t want = hi - a < sizeof(buf) ? (size_t)(hi - a) : sizeof(buf);
		ssize_t n = pread(mem, buf, want, (off_t)a);

		if (n <= 0)
			return;
		*bytes += (size_t)n;
		*hits += scan(buf, (size_t)n, printed);
	}
}

static void probe_mem(void)
{
	char path[64], line[512];
	size_t bytes = 0, hits = 0;
	unsigned printed = 0;
	FILE *maps;
	int mem;

	snprintf(path, sizeof(path), "/proc/%d/mem", (int)daemon_pid);
	mem = open(path, O_RDONLY | O_CLOEXEC);
	if (mem < 0)
		denied("mem", errno);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)daemon_pid);
	maps = fopen(path, "re");
	if (!maps)
		denied("maps", errno);
	else
		printf("snoop maps: REACHED %s\n", path);
	if (mem < 0 || !maps) {
		if (maps)
			fclose(maps);
		if (mem >= 0)
			close(mem);
		return;
	}
	while (fgets(line, sizeof(line), maps)) {
		uint64_t lo, hi;
		char perms[8];

		/* > 4 GiB: a sanitizer's shadow, untouched */
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s", &lo, &hi, perms) == 3 &&
		    perms[0] == 'r' && !strstr(line, "[vvar") && hi - lo <= (UINT64_C(4) << 30))
			scan_region(mem, lo, hi, &bytes, &hits, &printed);
	}
	fclose(maps);
	close(mem);
	if (bytes == 0)
		printf("snoop mem: denied (opened, but no byte readable)\n");
	else
		printf("snoop mem: REACHED %zu bytes, %zu copies of '%s'\n", bytes, hits, NEEDLE);
}

static void probe_environ(void)
{
	char path[64], buf[65536];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)daemon_pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return denied("environ", errno);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return denied("environ", errno);
	printf("snoop environ: REACHED %zd bytes\n", n);
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1)
		printf("snoop environ: %.*s\n", (int)strcspn(buf + i, "="), buf + i);
}

static void probe_dir(const char *probe, const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	if (!d)
		return denied(probe, errno);
	printf("snoop %s: REACHED %s\n", probe, path);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			printf("snoop %s: entry %s\n", probe, de->d_name);
	closedir(d);
}

static void probe_file(const char *probe, const char *path)
{
	char buf[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return denied(probe, errno);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return denied(probe, errno);
	buf[n] = '\0';
	printf("snoop %s: REACHED %s: %s\n", probe, path, buf);
}

static void probe_ptrace(const char *probe, enum __ptrace_request req)
{
	if (ptrace(req, daemon_pid, NULL, NULL) < 0)
		return denied(probe, errno);
	printf("snoop %s: REACHED pid %d\n", probe, (int)daemon_pid);
	if (req == PTRACE_ATTACH)
		(void)waitpid(daemon_pid, NULL, __WALL);
	else
		(void)ptrace(PTRACE_INTERRUPT, daemon_pid, NULL, NULL),
		    (void)waitpid(daemon_pid, NULL, __WALL);
	(void)ptrace(PTRACE_DETACH, daemon_pid, NULL, NULL);
}

/* Capabilities of our own: with CAP_SETUID a run could become the daemon's
 * user, with CAP_SYS_PTRACE read it anyway. */
static void probe_caps(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	bool any = false;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long v;
		char key[16];

		if (sscanf(line, "Cap%15[A-Za-z]:%llx", key, &v) == 2 && v && strcmp(key, "Bnd")) {
			printf("snoop caps: REACHED Cap%s %llx\n", key, v);
			any = true;
		}
	}
	if (f)
		fclose(f);
	if (!any)
		printf("snoop caps: denied (none)\n");
}

static void probe_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	bool any = false;

	while (d && (de = readdir(d))) {
		char link[64], target[256];
		int fd = atoi(de->d_name);
		ssize_t n;

		if (de->d_name[0] == '.' || fd <= 2 || fd == dirfd(d))
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = '\0';
		printf("snoop fds: REACHED fd %d -> %s\n", fd, target);
		any = true;
	}
	if (d)
		closedir(d);
	if (!any)
		printf("snoop fds: denied (none beyond 0-2)\n");
}

/* Not a probe: what a run needs, its own directory, owned by it and writable. */
static void show_cwd(void)
{
	struct stat st;
	int fd;

	if (stat(".", &st) < 0)
		return (void)printf("snoop cwd: stat: %s\n", strerror(errno));
	fd = open("snoop.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	printf("snoop cwd: owner %u:%u mode %04o, %s\n", (unsigned)st.st_uid, (unsigned)st.st_gid,
	       (unsigned)(st.st_mode & 07777), fd >= 0 ? "writable" : strerror(errno));
	if (fd >= 0)
		close(fd);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"creds", required_argument, NULL, 'c'},
	    {"spool", required_argument, NULL, 's'},
	    {"file", required_argument, NULL, 'f'},
	    {0},
	};
	static const char usage[] = "usage: snoop [--creds DIR] [--spool DIR] [--file PATH]...\n";
	char path[64];
	int c;

	/* by hand, not tu_std_answer(): tests/systemd/run.sh builds this file
	 * alone, against libc only */
	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "--help"))) {
		if (!strcmp(argv[1], "--version"))
			printf("snoop (lessee tests) %s\n", LESSEE_VERSION);
		else
			fputs(usage, stdout);
		return 0;
	}
	daemon_pid = getppid();
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("snoop uid=%d gid=%d parent=%d\n", (int)getuid(), (int)getgid(), (int)daemon_pid);
	show_cwd();
	probe_fds(); /* first: nothing of ours is open yet */
	probe_caps();
	probe_mem();
	probe_environ();
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)daemon_pid);
	probe_dir("daemon-fds", path);
	probe_ptrace("ptrace-attach", PTRACE_ATTACH);
	probe_ptrace("ptrace-seize", PTRACE_SEIZE);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
		if (c == 'c') {
			char file[4096];

			probe_dir("creds", optarg);
			snprintf(file, sizeof(file), "%s/api-token", optarg);
			probe_file("creds-token", file);
		} else if (c == 's') {
			probe_dir("spool", optarg);
		} else if (c == 'f') {
			probe_file("file", optarg);
		} else {
			fputs(usage, stderr);
			return 2;
		}
	}
	printf("snoop done\n");
	return 0;
}
