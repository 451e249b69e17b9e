/* Per-run cgroups: the last step of the kill ladder for what left the process
 * group (setsid, double forks).  See docs/exec.md, "Kill modes".
 *
 * The daemon's own cgroup v2 (systemd Delegate=yes, or a container's cgroup)
 * is organised as systemd's delegation rules ask:
 *
 *   <ours>/supervisor     the daemon itself (no processes in inner nodes)
 *   <ours>/runs/<name>.N  one per run; exec_spec.cgroup puts the child there
 *
 * Killing a run's cgroup (cgroup.kill, Linux 5.14) takes every process in it,
 * whatever its session or parent.  A run's cgroup is removed once empty. */
#pragma once

#include <stddef.h>

#include "ev/ev.h"

typedef struct cgroup_tree cgroup_tree_t;
typedef struct cgroup_run cgroup_run_t;

/* Our cgroup v2 directory from the texts of /proc/self/cgroup and
 * /proc/self/mountinfo (the first cgroup2 mount; a mount of a subtree is
 * followed through its root).  -ENOENT: no cgroup2 mount or no "0::" line;
 * -EXDEV: our cgroup is outside the mounted subtree. */
int cgroup_locate(const char *proc_cgroup, const char *mountinfo, char **ret_dir);

/* Take the subtree at dir (NULL: the cgroup we are in): it needs cgroup.kill
 * (not the root cgroup, Linux 5.14+) and must be writable for us.  Moves the
 * calling process into dir/supervisor, creates dir/runs and kills and removes
 * what a previous daemon left there.  1 and *ret: cgroup mode.  0, *ret NULL
 * and one line in why: no usable subtree, use process groups.  Nothing is
 * left changed in that case. */
int cgroup_tree_open(ev_t *e, const char *dir, cgroup_tree_t **ret, char *why, size_t why_len);
const char *cgroup_tree_path(const cgroup_tree_t *t);
/* Kills and removes what is still left under runs/ (one try), frees.  NULL-safe. */
cgroup_tree_t *cgroup_tree_free(cgroup_tree_t *t);

/* A fresh runs/<name>.N for one run (name: any text, made safe). */
int cgroup_run_new(cgroup_tree_t *t, const char *name, cgroup_run_t **ret);
const char *cgroup_run_path(const cgroup_run_t *c);
/* Kill everything in it and remove it: now, or from a timer while it empties.
 * NULL-safe. */
cgroup_run_t *cgroup_run_free(cgroup_run_t *c);

/* SIGKILL every process in the cgroup of this directory fd (cgroup.kill). */
int cgroup_kill_fd(int dir_fd);
