/* Per-run cgroups (cgroup.h): finding and taking our cgroup v2 subtree, one
 * cgroup per run, cgroup.kill, and removing a run's cgroup once it is empty. */
#include "exec/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define PROC_TEXT_MAX (1 << 22)
/* A run's cgroup that does not empty after its kill: retry with backoff, then
 * leave it to the next start's cleanup. */
#define REMOVE_FIRST (20 * USEC_PER_MSEC)
#define REMOVE_MAX_DELAY USEC_PER_SEC
#define REMOVE_GIVE_UP (60 * USEC_PER_SEC)
#define NAME_MAX_HINT 128

static void *mfree(void *p)
{
	free(p);
	return NULL;
}

struct cgroup_run {
	cgroup_tree_t *tree;
	char *path;
	usec_t since; /* when the removal started */
	struct cgroup_run *next;
};

struct cgroup_tree {
	ev_t *e;
	char *path;
	char *runs;              /* path/runs/<our pid>: one per daemon sharing the subtree */
	unsigned seq;            /* run cgroups are runs/<pid>/<name>.<seq> */
	struct cgroup_run *gone; /* killed, waiting to be empty for rmdir */
	ev_timer_t *timer;
	usec_t delay;
};

/* ---------------------------------------------------------------- locating */

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else
			*w++ = *s;
	}
	*w = '\0';
}

/* The root and mount point of the first cgroup2 mount in a mountinfo text:
 * "id parent maj:min root mountpoint opts [optional...] - fstype source sopts". */
static int find_cgroup2_mount(const char *mountinfo, char **ret_root, char **ret_mnt)
{
	_cleanup_free_ char *text = strdup(mountinfo);
	char *line, *save = NULL;

	if (!text)
		return -ENOMEM;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *dash = strstr(line, " - ");
		char *f[5], *fsave = NULL, *p = line;
		int n = 0;

		if (!dash || !startswith(dash + 3, "cgroup2 "))
			continue;
		*dash = '\0';
		while (n < 5 && (f[n] = strtok_r(p, " ", &fsave)))
			p = NULL, n++;
		if (n < 5)
			continue;
		unescape_octal(f[3]);
		unescape_octal(f[4]);
		*ret_root = strdup(f[3]);
		*ret_mnt = strdup(f[4]);
		if (!*ret_root || !*ret_mnt) {
			*ret_root = mfree(*ret_root);
			*ret_mnt = mfree(*ret_mnt);
			return -ENOMEM;
		}
		return 0;
	}
	return -ENOENT;
}

/* The path of the "0::" line (cgroup v2), without its newline. */
static int own_cgroup_path(const char *proc_cgroup, char **ret)
{
	const char *p = proc_cgroup;

	while (p && *p) {
		if (startswith(p, "0::/")) {
			size_t n = strcspn(p + 3, "\n");

			*ret = strndup(p + 3, n);
			return *ret ? 0 : -ENOMEM;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -ENOENT;
}

/* path relative to root ("/" = the mount's top), or NULL when outside it. */
static const char *relative_to(const char *path, const char *root)
{
	const char *rel;

	if (streq(root, "/"))
		return path;
	rel = startswith(path, root);
	if (!rel || (*rel != '\0' && *rel != '/'))
		return NULL;
	return *rel ? rel : "/";
}

int cgroup_locate(const char *proc_cgroup, const char *mountinfo, char **ret_dir)
{
	_cleanup_free_ char *root = NULL, *mnt = NULL, *own = NULL;
	const char *rel;
	int r;

	if (!proc_cgroup || !mountinfo || !ret_dir)
		return -EINVAL;
	if ((r = find_cgroup2_mount(mountinfo, &root, &mnt)) < 0 ||
	    (r = own_cgroup_path(proc_cgroup, &own)) < 0)
		return r;
	rel = relative_to(own, root);
	if (!rel)
		return -EXDEV;
	if (streq(rel, "/"))
		*ret_dir = strdup(mnt);
	else if (asprintf(ret_dir, "%s%s", streq(mnt, "/") ? "" : mnt, rel) < 0)
		*ret_dir = NULL;
	return *ret_dir ? 0 : -ENOMEM;
}

static int locate_self(char **ret_dir)
{
	_cleanup_free_ char *cg = NULL, *mi = NULL;
	int r;

	if ((r = read_file_capped("/proc/self/cgroup", PROC_TEXT_MAX, &cg, NULL)) < 0 ||
	    (r = read_file_capped("/proc/self/mountinfo", PROC_TEXT_MAX, &mi, NULL)) < 0)
		return r;
	return cgroup_locate(cg, mi, ret_dir);
}

/* ---------------------------------------------------------------- files */

static int write_at(int dir_fd, const char *file, const char *text)
{
	_cleanup_close_ int fd = openat(dir_fd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	return write_all(fd, text, strlen(text));
}

static int write_path(const char *dir, const char *file, const char *text)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return -errno;
	return write_at(dfd, file, text);
}

int cgroup_kill_fd(int dir_fd)
{
	int r = write_at(dir_fd, "cgroup.kill", "1");

	return r == -ENODEV ? 0 : r; /* ENODEV: the cgroup is being removed */
}

static bool has_file(const char *dir, const char *file)
{
	char p[PATH_MAX];

	return snprintf(p, sizeof(p), "%s/%s", dir, file) < (int)sizeof(p) && access(p, F_OK) == 0;
}

/* ---------------------------------------------------------------- removal */

/* Child cgroups first (a run that may write its cgroup can make some), depth
 * first, as far as they go now. */
static void remove_descendants(const char *path, int depth)
{
	DIR *d;
	struct dirent *de;

	if (depth <= 0 || !(d = opendir(path)))
		return;
	while ((de = readdir(d))) {
		char sub[PATH_MAX];

		if (de->d_type != DT_DIR || de->d_name[0] == '.' ||
		    snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
			continue;
		remove_descendants(sub, depth - 1);
		(void)rmdir(sub);
	}
	closedir(d);
}

/* cgroup.kill (it takes the descendants too), then rmdir: 0 removed (or
 * already gone), -EBUSY not empty yet. */
static int kill_and_remove(const char *path)
{
	if (rmdir(path) == 0 || errno == ENOENT)
		return 0;
	(void)write_path(path, "cgroup.kill", "1");
	if (rmdir(path) == 0 || errno == ENOENT)
		return 0;
	if (errno == EBUSY)
		remove_descendants(path, 16);
	if (rmdir(path) == 0 || errno == ENOENT)
		return 0;
	return -errno;
}

static cgroup_run_t *run_free_now(cgroup_run_t *c)
{
	free(c->path);
	free(c);
	return NULL;
}

static void arm_removal(cgroup_tree_t *t)
{
	ev_timer_arm(t->timer, t->delay);
	t->delay = MIN(t->delay * 2, REMOVE_MAX_DELAY);
}

static void on_remove_timer(ev_timer_t *timer, void *userdata)
{
	cgroup_tree_t *t = userdata;
	cgroup_run_t **pp = &t->gone;

	while (*pp) {
		cgroup_run_t *c = *pp;
		int r = kill_and_remove(c->path);

		if (r == -EBUSY && time_mono() - c->since < REMOVE_GIVE_UP) {
			pp = &c->next;
			continue;
		}
		if (r < 0)
			log_warning("cannot remove the cgroup %s: %s; the next start removes it, "
			            "ignoring",
			            c->path, strerror(-r));
		*pp = c->next;
		run_free_now(c);
	}
	if (t->gone)
		arm_removal(t);
	else
		t->delay = REMOVE_FIRST;
}

static void defer_removal(cgroup_tree_t *t, cgroup_run_t *c)
{
	c->since = time_mono();
	c->next = t->gone;
	t->gone = c;
	if (!ev_timer_armed(t->timer))
		arm_removal(t);
}

cgroup_run_t *cgroup_run_free(cgroup_run_t *c)
{
	int r;

	if (!c)
		return NULL;
	r = kill_and_remove(c->path);
	if (r == -EBUSY) {
		defer_removal(c->tree, c);
		return NULL;
	}
	if (r < 0)
		log_warning("cannot remove the cgroup %s: %s, ignoring", c->path, strerror(-r));
	return run_free_now(c);
}

static int defer_path(cgroup_tree_t *t, const char *dir, const char *name)
{
	cgroup_run_t *c = calloc(1, sizeof(*c));

	if (!c || (name                      ? asprintf(&c->path, "%s/%s", dir, name)
	           : (c->path = strdup(dir)) ? 0
	                                     : -1) < 0) {
		free(c);
		return -ENOMEM;
	}
	c->tree = t;
	defer_removal(t, c);
	return 0;
}

/* Kill and remove (from the timer) every cgroup in dir; then dir itself
 * unless keep. */
static int remove_children(cgroup_tree_t *t, const char *dir, bool keep)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	if (!keep) /* first in the list = retried last, after its children */
		r = defer_path(t, dir, NULL);
	while (r >= 0 && (de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		log_notice("killing and removing the cgroup %s/%s, left by a previous lessee", dir,
		           de->d_name);
		r = defer_path(t, dir, de->d_name);
	}
	closedir(d);
	return r;
}

/* What a previous daemon left under runs/: runs/<pid> of a dead pid, or of
 * ours (a restart with the same pid, as PID 1 of a container).  Those of a
 * live daemon sharing the subtree are its own. */
static int adopt_leftovers(cgroup_tree_t *t)
{
	_cleanup_free_ char *runs = NULL;
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (asprintf(&runs, "%s/runs", t->path) < 0)
		return -ENOMEM;
	d = opendir(runs);
	if (!d)
		return -errno;
	while (r >= 0 && (de = readdir(d))) {
		char *end, sub[PATH_MAX];
		long pid = strtol(de->d_name, &end, 10);
		bool ours = pid == (long)getpid();

		if (de->d_type != DT_DIR || *end || pid <= 0 ||
		    (!ours && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", runs, de->d_name);
		r = remove_children(t, sub, ours);
	}
	closedir(d);
	return r;
}

/* ---------------------------------------------------------------- the tree */

static const char *why_errno(int err)
{
	switch (err) {
	case EROFS:
		return "read-only (ProtectControlGroups=yes, or a container's read-only "
		       "/sys/fs/cgroup)";
	case EACCES:
	case EPERM:
		return "not delegated to us (systemd: Delegate=yes)";
	default:
		return strerror(err);
	}
}

/* Into dir/supervisor, creating it. */
static int move_self(const char *dir, const char **step)
{
	_cleanup_free_ char *sup = NULL;
	char pid[32];
	bool made;
	int r;

	if (asprintf(&sup, "%s/supervisor", dir) < 0)
		return -ENOMEM;
	*step = "mkdir supervisor";
	made = mkdir(sup, 0755) == 0;
	if (!made && errno != EEXIST)
		return -errno;
	*step = "move into supervisor";
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	r = write_path(sup, "cgroup.procs", pid);
	if (r < 0 && made)
		(void)rmdir(sup);
	return r;
}

static cgroup_tree_t *tree_new(ev_t *e, char *path)
{
	cgroup_tree_t *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->e = e;
	t->path = path;
	t->delay = REMOVE_FIRST;
	if (asprintf(&t->runs, "%s/runs/%d", path, (int)getpid()) < 0 ||
	    ev_timer_add(e, USEC_INFINITY, on_remove_timer, t, &t->timer) < 0) {
		t->runs = NULL;
		cgroup_tree_free(t);
		return NULL;
	}
	return t;
}

/* systemd's Delegate=yes hands the unit's cgroup to its User=.  Permissions
 * alone do not tell: the CAP_DAC_OVERRIDE the shipped units give an
 * unprivileged lessee (to clean run directories of another user) would let it
 * write a cgroup nobody delegated.  Root decides by permissions as before. */
static bool delegated_to_us(const char *dir, char *why, size_t why_len)
{
	struct stat st;

	if (geteuid() == 0 || stat(dir, &st) < 0 || st.st_uid == geteuid())
		return true;
	snprintf(why, why_len, "%s belongs to uid %u: not delegated to us (systemd: Delegate=yes)",
	         dir, (unsigned)st.st_uid);
	return false;
}

static int tree_check(const char *dir, char *why, size_t why_len)
{
	if (!delegated_to_us(dir, why, why_len))
		return 0;
	if (!has_file(dir, "cgroup.procs")) {
		snprintf(why, why_len, "%s is no cgroup v2 directory", dir);
		return 0;
	}
	if (!has_file(dir, "cgroup.kill")) {
		snprintf(why, why_len, "%s",
		         has_file(dir, "cgroup.events")
		             ? "the kernel has no cgroup.kill (Linux 5.14 needed)"
		             : "lessee is in the root cgroup (not delegated)");
		return 0;
	}
	return 1;
}

int cgroup_tree_open(ev_t *e, const char *dir, cgroup_tree_t **ret, char *why, size_t why_len)
{
	_cleanup_free_ char *path = NULL;
	const char *step = NULL;
	cgroup_tree_t *t;
	int r;

	*ret = NULL;
	r = dir ? ((path = strdup(dir)) ? 0 : -ENOMEM) : locate_self(&path);
	if (r < 0) {
		snprintf(why, why_len, "%s",
		         r == -ENOENT  ? "no cgroup v2 hierarchy"
		         : r == -EXDEV ? "our cgroup is not under the mounted cgroup2 hierarchy"
		                       : strerror(-r));
		return 0;
	}
	if (tree_check(path, why, why_len) == 0)
		return 0;
	t = tree_new(e, path);
	if (!t) {
		snprintf(why, why_len, "%s", strerror(ENOMEM));
		return 0;
	}
	path = NULL;
	r = move_self(t->path, &step);
	if (r >= 0) {
		step = "mkdir runs";
		r = mkdir_p(t->runs, 0755);
	}
	if (r < 0) {
		snprintf(why, why_len, "%s: %s: %s", t->path, step, why_errno(-r));
		cgroup_tree_free(t);
		return 0;
	}
	(void)adopt_leftovers(t);
	*ret = t;
	return 1;
}

const char *cgroup_tree_path(const cgroup_tree_t *t)
{
	return t ? t->path : NULL;
}

cgroup_tree_t *cgroup_tree_free(cgroup_tree_t *t)
{
	if (!t)
		return NULL;
	while (t->gone) {
		cgroup_run_t *c = t->gone;

		t->gone = c->next;
		(void)kill_and_remove(c->path);
		run_free_now(c);
	}
	(void)rmdir(t->runs);
	ev_timer_del(t->timer);
	free(t->runs);
	free(t->path);
	free(t);
	return NULL;
}

/* ---------------------------------------------------------------- runs */

/* A cgroup name from any text: [A-Za-z0-9_.-] kept, the rest '_', capped, and
 * never "." or ".." or a dot first (the kernel's names and ours). */
static void safe_name(const char *name, char *buf, size_t n)
{
	size_t i;

	for (i = 0; name && name[i] && i + 1 < n && i < NAME_MAX_HINT; i++) {
		char ch = name[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		          (ch == '.' && i > 0);

		buf[i] = ok ? ch : '_';
	}
	buf[i] = '\0';
	if (i == 0)
		snprintf(buf, n, "run");
}

int cgroup_run_new(cgroup_tree_t *t, const char *name, cgroup_run_t **ret)
{
	char safe[NAME_MAX_HINT + 1];
	cgroup_run_t *c;

	if (!t || !ret)
		return -EINVAL;
	safe_name(name, safe, sizeof(safe));
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->tree = t;
	for (;;) {
		if (asprintf(&c->path, "%s/%s.%u", t->runs, safe, ++t->seq) < 0) {
			free(c);
			return -ENOMEM;
		}
		if (mkdir(c->path, 0755) == 0)
			break;
		if (errno != EEXIST) {
			int r = -errno;

			free(c->path);
			free(c);
			return r;
		}
		c->path = mfree(c->path);
	}
	*ret = c;
	return 0;
}

const char *cgroup_run_path(const cgroup_run_t *c)
{
	return c ? c->path : NULL;
}
