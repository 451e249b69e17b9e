/* Private to lib/worker: the worker's own shape.  Its parts have their own
 * headers, each naming only what it needs:
 *   run.h      a run's life (the table), knows its owner as a run_host
 *   claim.h    the claimer, knows the runs (run.h) and its owner as a claimer_host
 *   spool.h    the spool's files
 *   spooler.h  the spool's delivery (run.h, spool.h)
 * and this file, the worker, includes them all; none includes it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"
#include "exec/cgroup.h"
#include "obs/metrics.h"
#include "obs/status.h"
#include "offload/offload.h"
#include "proto/driver.h"
#include "util/fileio.h"
#include "util/random.h"
#include "worker/breaker.h"
#include "worker/claim.h"
#include "worker/run.h"
#include "worker/spool.h"
#include "worker/spooler.h"
#include "worker/worker.h"

/* ---- worker.c: the owner of the runs, the claimer and the spooler ---- */
struct wfstate {
	char *name;
	struct breaker breaker;
};

/* leftovers.c: SIGKILL to the processes still running for runs of the
 * lessee that had pid, under run_dir; how many. */
unsigned leftovers_kill(const char *run_dir, long pid);

/* Helper threads (result files, spool writes, run directory removals). */
#define OFFLOAD_THREADS 4

/* fds the daemon keeps besides its runs': the API connections, the status
 * endpoint's, what each helper thread holds at most (a removal's directory
 * fds; a result file takes 2), and 32 for the loop's own, the spool, journal
 * and log files.  Short of one, a run's result goes unread. */
#define WORKER_FD_RESERVE                                                                          \
	(DRV_MAX_CONNECTIONS + STATUS_CONNECTION_LIMIT + OFFLOAD_THREADS * RM_RF_FDS_MAX + 32)

struct worker {
	ev_t *ev;
	struct conf_ref *cref;
	metrics_t *metrics;
	drv_t *drv;
	enum worker_phase phase;
	worker_exit_cb on_exit;
	void *userdata;
	bool exited;
	bool exit_forced; /* the hard stop overran: nothing in flight is waited for */
	bool renew_wave;  /* renewing the leases due soon (host_renewing) */
	usec_t renew_wave_at; /* when the table was last looked at for that */

	struct run_host host; /* what the runs share (run.h) */
	struct run_table table;
	uint64_t runs_done;
	struct wfstate *wfs;
	size_t n_wfs;

	claimer_t *claimer;
	spooler_t *spooler;

	ev_timer_t *drain_timer, *exit_timer, *breaker_timer;
	offload_t *offload; /* file work and reaping a child can make slow */

	/* kill mode: a cgroup per run when we have a subtree, else process groups */
	cgroup_tree_t *cgroups;
	unsigned fd_slots;       /* the runs whose fds fit under RLIMIT_NOFILE; 0: any */
	char kill_mode_why[256]; /* why process groups */
	metric_t *m_kill_mode;

	metric_t *m_started, *m_finished, *m_in_flight, *m_slots, *m_claims, *m_leases_lost,
	    *m_renewals, *m_duration, *m_blocked, *m_log_bytes, *m_spool, *m_queue_depth,
	    *m_draining, *m_backend, *m_spool_delivered, *m_spool_dropped, *m_log_dropped,
	    *m_build_info, *m_slots_busy, *m_reporting, *m_reporting_max, *m_ready,
	    *m_results_refused;
};

const struct conf *worker_cur_conf(const worker_t *w);
struct wfstate *worker_wfstate(worker_t *w, const char *name);
void worker_run_add(worker_t *w, struct run *r);
