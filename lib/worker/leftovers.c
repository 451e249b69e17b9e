/* What a lessee killed with SIGKILL left running.  In cgroup mode its runs'
 * cgroups hold every process and are killed at the next start (exec.md);
 * in process-group mode only a run's first process gets a parent-death
 * signal, and the rest of its group, or a grandchild that made itself a
 * session, runs on: the next lessee would take the run again when its lease
 * expires, and run it twice at once.  Under systemd the unit's cgroup is
 * killed for us, in a container the PID namespace; bare, this finds them by
 * the run directory in their environment (LESSEE_RESULT_FILE, which every
 * descendant inherits unless it clears its environment). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "worker/worker-int.h"

/* A process killed as it forks may leave a child the pass had walked past. */
#define LEFTOVER_PASSES 8

static bool environ_has(pid_t pid, const char *prefix, size_t n)
{
	char path[64];
	_cleanup_free_ char *env = NULL;
	size_t len = 0;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	if (read_file_capped(path, 1u << 20, &env, &len) < 0)
		return false; /* gone, or not ours to read (another uid without CAP_SYS_PTRACE) */
	for (size_t i = 0; i < len; i += strnlen(env + i, len - i) + 1)
		if (len - i >= n && memcmp(env + i, prefix, n) == 0)
			return true;
	return false;
}

struct killed {
	pid_t *v;
	size_t n, alloc;
};

static bool killed_before(const struct killed *k, pid_t pid)
{
	for (size_t i = 0; i < k->n; i++)
		if (k->v[i] == pid)
			return true;
	return false;
}

static void killed_add(struct killed *k, pid_t pid)
{
	if (k->n == k->alloc) {
		size_t na = k->alloc ? 2 * k->alloc : 16;
		pid_t *nv = realloc(k->v, na * sizeof(*nv));

		if (!nv)
			return; /* counted again in a later pass, at worst */
		k->v = nv;
		k->alloc = na;
	}
	k->v[k->n++] = pid;
}

/* One walk of /proc: SIGKILL, through a pidfd (a pid reused meanwhile is not
 * hit), to each process whose environment names the directory and that was
 * not signalled before (killed, not yet gone); how many new ones. */
static unsigned kill_pass(const char *prefix, size_t n, struct killed *k)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	unsigned killed = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		int fd;

		if (*end || pid <= 0 || pid == getpid() || killed_before(k, (pid_t)pid))
			continue;
		fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
		if (fd < 0 && errno != ENOSYS) /* gone */
			continue;
		/* without pidfds (valgrind 3.19 has none): by pid, as kill(1) does */
		if (environ_has((pid_t)pid, prefix, n) &&
		    (fd >= 0 ? syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0)
		             : kill((pid_t)pid, SIGKILL)) == 0) {
			killed_add(k, (pid_t)pid);
			killed++;
		}
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	return killed;
}

unsigned leftovers_kill(const char *run_dir, long pid)
{
	char prefix[PATH_MAX + 64];
	struct killed done = {0};
	unsigned total = 0, k = 1;
	size_t n;

	n = (size_t)snprintf(prefix, sizeof(prefix), "LESSEE_RESULT_FILE=%s/lessee-%ld/", run_dir,
	                     pid);
	if (n >= sizeof(prefix))
		return 0;
	for (unsigned pass = 0; pass < LEFTOVER_PASSES && k > 0; pass++)
		total += k = kill_pass(prefix, n, &done);
	free(done.v);
	return total;
}
