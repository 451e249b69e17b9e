/* One run's life: a state x event table (docs/architecture.md, "A run's life").
 *
 *   CLAIMED --start--> RUNNING --exit--> FLUSHING --log shipped--> REPORTING --> DONE
 *      |                  | timeout / cancel / lease lost / hard stop
 *      |                  v
 *      |               KILLING --exit--> FLUSHING (timeout, cancel)
 *      |                         \-----> DONE (lease lost, nothing written)
 *      |                          \----> RELEASING (shutdown) --> DONE
 *      +--reject--> REPORTING;  +--release--> RELEASING
 *      |
 *      +--wait--> WAITING --start (the older execution is DONE)--> RUNNING
 *                    +--lease lost--> DONE;  +--release / hard stop--> RELEASING
 *                    +--cancel--> REPORTING (cancelled, never started)
 *
 * Every change of state goes through run_dispatch and the table; the timers
 * are events of it too (RE_TIMER: the run's timeout, the flush bound, a
 * retry's backoff; RE_RENEW: a renewal is due; RE_DEADLINE: the local lease
 * deadline), and so is the worker giving up on a run (RE_ABANDON).  The run
 * knows its owner only as a run_host (run.h) and the API only as a driver
 * (proto/driver.h).
 *
 * WAITING: the API granted a run whose id an older lease of ours still
 * executes (RUNNING or KILLING); the new one starts only once that process
 * group is gone (claim.c), so one run id never has two live executions here.
 * The lease is renewed in every state but DONE, so a slow API never hands a
 * finished run to someone else while its result is still being reported. */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"
#include "worker/run.h"

/* drv_outcome.log_tail: the last 4 KiB of the run's output */
#define RUN_TAIL_MAX 4096

#define RETRY_BASE (500 * USEC_PER_MSEC)
#define REPORT_RETRY_CAP (30 * USEC_PER_SEC)
#define LOG_FLUSH_TIMEOUT (60 * USEC_PER_SEC)
/* A run stopped for a shutdown ships its log, marked, before its release,
 * for at most this long: the hard stop is bounded by kill_grace + 15 s. */
#define RELEASE_LOG_BOUND (2 * USEC_PER_SEC)

typedef enum run_state (*run_action)(struct run *r);

/* ---------------------------------------------------------------- conf refs */

struct conf_ref *conf_ref_new(struct conf *c)
{
	struct conf_ref *r = calloc(1, sizeof(*r));

	if (!r) {
		conf_free(c);
		return NULL;
	}
	r->conf = c;
	r->refs = 1;
	return r;
}

struct conf_ref *conf_ref_get(struct conf_ref *r)
{
	r->refs++;
	return r;
}

struct conf_ref *conf_ref_put(struct conf_ref *r)
{
	if (r && --r->refs == 0) {
		conf_free(r->conf);
		free(r);
	}
	return NULL;
}

static const char *const state_names[_RUN_STATE_MAX] = {
    [RUN_CLAIMED] = "claimed",     [RUN_WAITING] = "waiting",     [RUN_READY] = "ready",
    [RUN_RUNNING] = "running",     [RUN_KILLING] = "killing",     [RUN_FLUSHING] = "flushing",
    [RUN_REPORTING] = "reporting", [RUN_RELEASING] = "releasing", [RUN_DONE] = "done",
};

static const char *const event_names[_RE_MAX] = {
    [RE_START] = "start",         [RE_REJECT] = "reject",
    [RE_RELEASE] = "release",     [RE_EXITED] = "exited",
    [RE_CANCEL] = "cancel",       [RE_LEASE_LOST] = "lease-lost",
    [RE_HARD_STOP] = "hard-stop", [RE_LOG_FLUSHED] = "log-flushed",
    [RE_REPORTED] = "reported",   [RE_RELEASED] = "released",
    [RE_WAIT] = "wait",           [RE_TIMER] = "timer",
    [RE_RENEW] = "renew",         [RE_DEADLINE] = "deadline",
    [RE_ABANDON] = "abandon",     [RE_READY] = "ready",
};

const char *run_state_name(enum run_state s)
{
	return state_names[s];
}

const char *run_event_name(enum run_event ev)
{
	return event_names[ev];
}

static const struct conf *run_conf(const struct run *r)
{
	return r->cref->conf;
}

static struct log_fields run_fields(const struct run *r, const char *outcome)
{
	return (struct log_fields){.run_id = r->id, .workflow = r->workflow,
				   .attempt = r->attempt, .outcome = outcome};
}

#define run_log(r, prio, ...)                                                                      \
	do {                                                                                       \
		struct log_fields _f = run_fields(r, NULL);                                        \
		log_emit(prio, &_f, __VA_ARGS__);                                                  \
	} while (0)

static const struct drv_ops *run_drv(const struct run *r)
{
	return drv_ops(r->h->drv);
}

/* ---------------------------------------------------------------- lease */

/* Renewals (docs/architecture.md, "Leases"): each attempt is bounded by the time
 * left to the local deadline, a stalled one is abandoned and retried at once on
 * a new connection, and no backoff or Retry-After pushes a retry past the
 * deadline. */
#define RENEW_ATTEMPT_MIN (500 * USEC_PER_MSEC)
#define RENEW_RETRY_BASE (250 * USEC_PER_MSEC)
#define RENEW_RETRY_CAP (1 * USEC_PER_SEC)
#define RENEW_RETRY_MIN (100 * USEC_PER_MSEC) /* near the deadline: no burst */
/* A finished run's result outlives the local deadline by this much at most
 * (RESULT_OFFER_TTLS leases, at least RESULT_OFFER_MIN), then it is spooled. */
#define RESULT_OFFER_TTLS 10
#define RESULT_OFFER_MIN (10 * USEC_PER_MINUTE)

static void lease_renew(struct run *r);

static usec_t lease_margin(unsigned ttl_s)
{
	return conf_lease_margin(ttl_s * USEC_PER_SEC);
}

static usec_t lease_local(unsigned ttl_s)
{
	return ttl_s * USEC_PER_SEC - lease_margin(ttl_s);
}

static usec_t lease_left(const struct run *r)
{
	usec_t now = ev_now(r->h->ev);

	return r->lease_deadline > now ? r->lease_deadline - now : 0;
}

/* A grant or renewal the server made at `from` at the earliest, for ttl_s, is
 * ours until this moment.  The next renewal is due after lease_refresh, or
 * after half the local lease when the server granted a shorter one. */
static void lease_granted(struct run *r, usec_t from, unsigned ttl_s)
{
	usec_t local = lease_local(ttl_s);

	r->lease_ttl_s = ttl_s;
	r->lease_deadline = from + local;
	ev_timer_arm_at(r->deadline_timer, r->lease_deadline);
	ev_timer_arm_at(r->renew_timer, from + MIN(run_conf(r)->worker.lease_refresh, local / 2));
}

/* The server granted a claim's runs between the claim's send and the arrival
 * of its answer.  Counting from the send is safe; when that leaves less than
 * half of the local lease (the claim was parked in a long poll), count from the
 * arrival instead and renew at once: the renewal's answer gives a sure
 * deadline.  So a claimed run never arrives already lost. */
static void lease_claimed(struct run *r, usec_t sent, unsigned ttl_s)
{
	usec_t now = ev_now(r->h->ev);
	char d[TIME_DURATION_MAX];

	if (now - sent <= lease_local(ttl_s) / 2) {
		lease_granted(r, sent, ttl_s);
		return;
	}
	run_log(r, LOG_DEBUG,
		"claim answered after %s: lease counted from its arrival, renewing now",
		time_format_duration(d, sizeof(d), now - sent));
	lease_granted(r, now, ttl_s);
	ev_timer_arm(r->renew_timer, 0);
}

static void lease_lost(struct run *r, const char *why)
{
	if (r->state == RUN_REPORTING && r->req) {
		/* the completion in flight may be what ended the lease (the server
		 * ends it with the run): that completion's answer decides, and it
		 * is fenced by the same token */
		run_log(r, LOG_INFO,
		        "lease refused (%s) while the completion is in flight: its answer decides",
		        why);
		/* no more renewals; the deadline timer stays: a completion that
		 * never gets through is offered, then spooled, as any other */
		drv_cancel(r->lease_req);
		r->lease_req = NULL;
		ev_timer_disarm(r->renew_timer);
		return;
	}
	run_log(r, LOG_WARNING, "lease lost (%s): stopping the run, nothing more is written", why);
	metric_add(r->h->m.leases_lost, 1);
	run_dispatch(r, RE_LEASE_LOST);
}

/* Half of what is left of the local lease, so a stalled attempt is abandoned
 * while a retry still fits; past the deadline (a result still offered), the
 * server's lease has about the margin left. */
static usec_t renew_timeout(const struct run *r)
{
	usec_t rt = run_conf(r)->api.request_timeout, left = lease_left(r);

	if (!left)
		return MIN(rt, MAX(lease_margin(r->lease_ttl_s) / 2, RENEW_ATTEMPT_MIN));
	return MIN(rt, MAX(left / 2, RENEW_ATTEMPT_MIN));
}

static usec_t renew_retry_delay(const struct run *r, const struct drv_answer *a)
{
	usec_t left = lease_left(r), d;
	usec_t cap = left ? RENEW_RETRY_CAP
			  : MIN(RENEW_RETRY_CAP, lease_margin(r->lease_ttl_s) / 4);

	/* our own bound gave up on a stalled attempt: again now, on a new connection */
	if (a->error == -ETIMEDOUT && a->elapsed >= RENEW_ATTEMPT_MIN / 2)
		return 0;
	d = backoff_full_jitter(RENEW_RETRY_BASE, cap, r->lease_retries, 0);
	/* Retry-After is honoured only while two more retries fit before the deadline */
	if (a->retry_after > d)
		d = MAX(d, MIN(a->retry_after, left / 3));
	return left ? MAX(MIN(d, left / 2), MIN(d, RENEW_RETRY_MIN)) : d;
}

/* The API answers renewals again: a result waiting out its report backoff goes now. */
static void lease_recovered(struct run *r)
{
	if (r->state == RUN_REPORTING && !r->req)
		ev_timer_arm(r->timer, 0);
}

static unsigned lease_ttl_asked(const struct run *r)
{
	return (unsigned)(run_conf(r)->worker.lease_ttl / USEC_PER_SEC);
}

static void on_lease(const struct drv_answer *a, void *userdata)
{
	struct run *r = userdata;
	bool recovered;
	char why[200];

	r->lease_req = NULL;
	if (a->verdict == DRV_OK) {
		metric_add(r->h->m.renewals, 1, "ok");
		recovered = r->lease_retries > 0;
		r->lease_retries = 0;
		r->lease_fresh = false;
		lease_granted(r, r->lease_sent_at, a->ttl_s ? a->ttl_s : lease_ttl_asked(r));
		if (recovered)
			lease_recovered(r);
		if (a->cancel)
			run_dispatch(r, RE_CANCEL);
		return;
	}
	if (a->verdict == DRV_LOST) {
		metric_add(r->h->m.renewals, 1, "lost");
		snprintf(why, sizeof(why), "renewal answered %s", a->detail);
		lease_lost(r, why);
		return;
	}
	/* transient (or a garbled answer): try again soon; the deadline timer decides loss */
	metric_add(r->h->m.renewals, 1, "error");
	run_log(r, LOG_WARNING, "lease renewal failed (%s), retrying", a->detail);
	r->lease_fresh = a->error != 0;
	ev_timer_arm(r->renew_timer, renew_retry_delay(r, a));
	r->lease_retries++;
}

static void lease_renew(struct run *r)
{
	if (r->lease_req || !r->priv)
		return;
	r->lease_sent_at = ev_now(r->h->ev);
	ev_timer_disarm(r->renew_timer);
	if (run_drv(r)->renew(r->h->drv, r->priv, lease_ttl_asked(r), renew_timeout(r),
			      r->lease_fresh, on_lease, r, &r->lease_req) < 0) {
		r->lease_req = NULL;
		ev_timer_arm(r->renew_timer, MIN(RENEW_RETRY_CAP, MAX(lease_left(r) / 2, 1)));
		return;
	}
	if (r->h->ops->renewing)
		r->h->ops->renewing(r->h->host, r);
}

void run_renew_due(struct run *r, usec_t by)
{
	/* a lease backing off after a failed renewal keeps its backoff */
	if (r->lease_retries == 0 && ev_timer_armed(r->renew_timer) &&
	    ev_timer_deadline(r->renew_timer) <= by)
		run_dispatch(r, RE_RENEW);
}

static void on_renew_timer(ev_timer_t *t, void *userdata)
{
	run_dispatch(userdata, RE_RENEW);
}

/* The child has exited: nothing runs on a lease that may be someone else's, and
 * a late completion is safe (its token fences it), so the API decides, not the
 * local clock.  Renewals go on; the result is offered until offer_until, then
 * spooled (delivered at the next start). */
static usec_t result_offer_bound(const struct run *r)
{
	return MAX(RESULT_OFFER_TTLS * r->lease_ttl_s * USEC_PER_SEC, RESULT_OFFER_MIN);
}

static enum run_state act_spool(struct run *r);
static void run_verdict(struct run *r);

/* RE_DEADLINE once the child is gone (FLUSHING, REPORTING): the result is
 * offered until the bound, then spooled. */
static enum run_state act_offer(struct run *r)
{
	usec_t now = ev_now(r->h->ev);
	char d[TIME_DURATION_MAX];

	if (!r->offer_until) {
		r->offer_until = now + result_offer_bound(r);
		run_log(r, LOG_WARNING,
			"local lease deadline passed after the run ended: still offering its "
			"result for up to %s, the API decides",
			time_format_duration(d, sizeof(d), result_offer_bound(r)));
	}
	if (now < r->offer_until) {
		ev_timer_arm_at(r->deadline_timer, r->offer_until);
		return r->state;
	}
	run_log(r, LOG_ERR,
		"result not delivered within %s of the local lease deadline: spooling it",
		time_format_duration(d, sizeof(d), result_offer_bound(r)));
	snprintf(r->note, sizeof(r->note), "undelivered past the lease deadline, spooled");
	return act_spool(r);
}

static void on_deadline(ev_timer_t *t, void *userdata)
{
	run_dispatch(userdata, RE_DEADLINE);
}

static void lease_stop(struct run *r)
{
	drv_cancel(r->lease_req);
	r->lease_req = NULL;
	ev_timer_disarm(r->renew_timer);
	ev_timer_disarm(r->deadline_timer);
}

/* ---------------------------------------------------------------- spawn */

/* A scratch file in the run's own directory: no fsync, it dies with the run. */
/* The input file, written at offset 0 and left there: the fd is also the
 * child's stdin (one open, not one to write and one to read).  Returns the
 * fd or -errno. */
static int write_input(struct run *r, const char *path)
{
	_cleanup_close_ int fd =
	    open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	int q;

	if (fd < 0)
		return -errno;
	q = pwrite_all(fd, r->input, r->input_len, 0);
	if (q < 0)
		return q;
	if (r->wf->user && fchown(fd, r->wf->uid, r->wf->gid) < 0)
		return -errno;
	return TAKE_FD(fd);
}

/* name (with its '='), value and tail joined: no format string to parse,
 * seven of them per spawn. */
static int env_push(char ***v, const char *name, const char *value, const char *tail)
{
	size_t a = strlen(name), b = strlen(value), c = strlen(tail);
	char *s = malloc(a + b + c + 1);

	if (!s)
		return -ENOMEM;
	memcpy(s, name, a);
	memcpy(s + a, value, b);
	memcpy(s + a + b, tail, c + 1);
	return strv_push(v, s);
}

static int env_push_u64(char ***v, const char *name, uint64_t value)
{
	char num[24];

	snprintf(num, sizeof(num), "%" PRIu64, value);
	return env_push(v, name, num, "");
}

static usec_t run_timeout(const struct run *r);

/* The daemon's allowed variables with the workflow's over them: made at the
 * workflow's first spawn and kept with its configuration. */
static char *const *workflow_env(const struct conf_workflow *wf, int *ret_err)
{
	struct conf_workflow *cache = (struct conf_workflow *)(uintptr_t)wf; /* the loop's own */

	*ret_err = 0;
	if (!cache->spawn_env)
		*ret_err = exec_env_build(NULL, NULL, wf->env, &cache->spawn_env);
	return cache->spawn_env;
}

/* The run's own variables (the driver's, then LESSEE_*), strings of its own
 * in *ret_own (strv_free), set over the workflow's in *ret (free() alone). */
static int build_env(struct run *r, char ***ret, char ***ret_own)
{
	_cleanup_(strv_freep) char **extra = strv_copy(r->env);
	usec_t timeout = run_timeout(r);
	char *const *base;
	int q;

	if (!extra)
		return -ENOMEM;
	base = workflow_env(r->wf, &q);
	if (q < 0)
		return q;
	if ((q = env_push(&extra, "LESSEE_RUN_ID=", r->id, "")) < 0 ||
	    (q = env_push(&extra, "LESSEE_WORKFLOW=", r->workflow, "")) < 0 ||
	    (q = env_push_u64(&extra, "LESSEE_ATTEMPT=", r->attempt)) < 0 ||
	    (q = env_push(&extra, "LESSEE_WORKER_ID=", run_conf(r)->worker.id, "")) < 0 ||
	    (q = env_push(&extra, "LESSEE_INPUT_FILE=", r->dir, "/input.json")) < 0 ||
	    (q = env_push(&extra, "LESSEE_RESULT_FILE=", r->dir, "/result.json")) < 0)
		return q;
	if (timeout != USEC_INFINITY &&
	    (q = env_push_u64(&extra, "LESSEE_DEADLINE_MS=", timeout / USEC_PER_MSEC)) < 0)
		return q;
	if ((q = exec_env_overlay(base, extra, ret)) < 0)
		return q;
	*ret_own = TAKE_PTR(extra);
	return 0;
}

/* What the run asks for: the API's timeout_s, else the workflow's own, else
 * worker.run_timeout. */
static usec_t run_timeout_asked(const struct run *r)
{
	if (r->timeout_s)
		return r->timeout_s * USEC_PER_SEC;
	return r->wf->timeout;
}

/* The smaller of what the run asks for and the operator's max_timeout. */
static usec_t run_timeout(const struct run *r)
{
	return MIN(run_timeout_asked(r), r->wf->max_timeout);
}

static void log_timeout_cap(struct run *r)
{
	char a[TIME_DURATION_MAX], m[TIME_DURATION_MAX];

	if (run_timeout_asked(r) <= r->wf->max_timeout)
		return;
	run_log(r, LOG_NOTICE, "timeout %s (%s) capped by max_timeout: stopped after %s",
	        time_format_duration(a, sizeof(a), run_timeout_asked(r)),
	        r->timeout_s ? "the API's timeout_s" : "the workflow's",
	        time_format_duration(m, sizeof(m), r->wf->max_timeout));
}

/* The run directory's parents, <run_dir>/lessee-<pid>: made when a run finds
 * them missing (the first run, the first after a reload that moved run_dir,
 * or after an operator or tmpfiles removed them), not once per run.  The
 * per-daemon level lets a restart clean what a killed predecessor left
 * (worker.c).  Traversable, not listable, so a run dropped to another user
 * can reach its own directory: exactly 0711, not what the umask (the units'
 * UMask=0077) left of it. */
static int make_run_dir_parent(const char *parent)
{
	int q;

	if ((q = mkdir_p(parent, 0711)) < 0)
		return q;
	return chmod(parent, 0711) < 0 ? -errno : 0;
}

/* <run_dir>/lessee-<pid>/<id>.<attempt>.<n>, n counting the daemon's run
 * directories: a requeue or an expiry does not bump the attempt, so only n
 * keeps two leases of one run apart.  The directory is created here, never
 * reused, and r->dir names it only once it is ours: run_free removes nothing
 * else.  One mkdir per run; the parents only on ENOENT. */
static int make_run_dir(struct run *r)
{
	static unsigned long seq;
	const struct conf *c = run_conf(r);
	bool made_parent = false;
	int q;

	for (unsigned tries = 0;; tries++) {
		_cleanup_free_ char *dir = NULL;

		if (asprintf(&dir, "%s/lessee-%d/%s.%u.%lu", c->worker.run_dir, (int)getpid(), r->id,
			     r->attempt, ++seq) < 0)
			return -ENOMEM;
		if (mkdir(dir, 0700) >= 0) {
			r->dir = TAKE_PTR(dir);
			break;
		}
		if (errno == ENOENT && !made_parent) {
			*strrchr(dir, '/') = '\0';
			if ((q = make_run_dir_parent(dir)) < 0)
				return q;
			made_parent = true;
			continue;
		}
		if (errno != EEXIST || tries >= 100)
			return -errno;
		/* not ours: leave it alone */
	}
	if (r->wf->user && chown(r->dir, r->wf->uid, r->wf->gid) < 0)
		return -errno;
	return 0;
}

static int start_logship(struct run *r);

/* The log shipper comes with the first output: a run that prints nothing
 * (a sleeper, /bin/true) holds none, about 600 bytes and two timers less. */
static void on_output(exec_proc_t *p, int stream, const void *data, size_t len, void *userdata)
{
	struct run *r = userdata;

	if (!r->log && !r->log_failed && start_logship(r) < 0) {
		r->log_failed = true;
		run_log(r, LOG_ERR,
		        "cannot ship the run's log: out of memory; its output "
		        "goes to this log's tail only");
	}
	if (r->log)
		logship_write(r->log, data, len);
	if (tail_feed(&r->tail, data, len) < 0)
		log_debug("run=%s: out of memory keeping its output's tail, ignoring", r->id);
}

static void on_exit_cb(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct run *r = userdata;

	r->result = *res;
	run_dispatch(r, RE_EXITED);
}

static void on_log_event(logship_t *ls, enum logship_event event, void *userdata)
{
	struct run *r = userdata;

	if (event == LOGSHIP_LEASE_LOST)
		lease_lost(r, "log append answered 409/404");
	else
		run_dispatch(r, RE_LOG_FLUSHED);
}

static void on_log_throttle(void *ctx, bool pause)
{
	struct run *r = ctx;

	if (r->proc)
		exec_output_pause(r->proc, pause);
}

static int start_logship(struct run *r)
{
	const struct conf *c = run_conf(r);
	struct logship_params p = {
		.ev = r->h->ev,
		.drv = r->h->drv,
		.run = r->priv,
		.lease_key = r->lease_key,
		.max_log_bytes = r->wf->max_log_bytes,
		.request_timeout = c->api.request_timeout,
		.throttle = on_log_throttle,
		.throttle_ctx = r,
		.attempt = MAX(r->attempt, 1u),
	};

	return logship_new(&p, on_log_event, r, &r->log);
}

/* Its own cgroup in cgroup kill mode.  Should that fail (cgroup.max.descendants,
 * say) the run still starts, stopped through its process group only. */
static const char *run_cgroup(struct run *r)
{
	int q;

	if (!r->h->cgroups)
		return NULL;
	q = cgroup_run_new(r->h->cgroups, r->id, &r->cg);
	if (q < 0)
		run_log(r, LOG_WARNING, "cannot create the run's cgroup: %s; it is stopped "
			"through its process group only", strerror(-q));
	return cgroup_run_path(r->cg);
}

static int spawn(struct run *r, const char **step)
{
	char input[PATH_MAX];
	_cleanup_close_ int in = -1;
	_cleanup_free_ char **env = NULL;
	_cleanup_(strv_freep) char **own = NULL;
	usec_t timeout = run_timeout(r);
	struct exec_spec spec = {
		.path = r->wf->argv[0],
		.argv = r->wf->argv,
		.stdin_fd = -1,
		.set_ids = r->wf->user != NULL,
		.uid = r->wf->uid,
		.gid = r->wf->gid,
		.offload = r->h->offload,
	};
	int q;

	*step = "run directory";
	if ((q = make_run_dir(r)) < 0)
		return q;
	snprintf(input, sizeof(input), "%s/input.json", r->dir);
	*step = "input file";
	if ((in = write_input(r, input)) < 0)
		return in;
	*step = "environment";
	if ((q = build_env(r, &env, &own)) < 0)
		return q;
	spec.envp = env;
	spec.stdin_fd = in;
	spec.cwd = r->wf->working_directory ? r->wf->working_directory : r->dir;
	spec.cgroup = run_cgroup(r);
	*step = NULL;
	q = exec_spawn(r->h->ev, &spec, on_output, on_exit_cb, r, &r->proc, step);
	if (q >= 0 && timeout != USEC_INFINITY) {
		log_timeout_cap(r);
		ev_timer_arm(r->timer, timeout);
	}
	return q;
}

/* ---------------------------------------------------------------- outcome */

static void set_error(struct run *r, const char *fmt, ...) _printf_(2, 3);
static void set_error(struct run *r, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL, *joined = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s)
		return;
	if (r->error && asprintf(&joined, "%s; %s", r->error, s) >= 0) {
		free(s);
		s = joined;
	}
	free(r->error);
	r->error = s;
}

/* What this host ran short of, not the run: a full disk or quota, no fd, no
 * process, no memory.  Soon over, or an operator's to fix. */
static bool host_short_of(int err)
{
	switch (-err) {
	case ENOSPC:
	case EDQUOT:
	case EMFILE:
	case ENFILE:
	case EAGAIN:
	case ENOMEM:
		return true;
	default:
		return false;
	}
}

/* The run failed for this host's want (host_short_of): reported retryable,
 * no verdict for its workflow's breaker, and the host holds claims back. */
static void host_trouble(struct run *r)
{
	r->host_trouble = true;
	r->outcome.retryable = true;
	if (r->h->ops->host_trouble)
		r->h->ops->host_trouble(r->h->host, r->error ? r->error : "?");
}

/* A result file the run cannot stand behind (not a regular file, a symlink,
 * unreadable by the run's user, over the cap): the run fails, with the reason. */
static void result_bad(struct run *r, const char *why)
{
	if (r->outcome.status == DRV_SUCCEEDED) {
		r->outcome.status = DRV_FAILED;
		r->outcome.reason = DRV_REASON_EXIT;
		r->outcome.retryable = false;
	}
	set_error(r, "result file %s", why);
}

/* The result file was not read (err): the run's fault (result_bad), or this
 * host's want, which loses the result of a run that succeeded: a retry. */
static void result_unread(struct run *r, const char *why, int err)
{
	bool succeeded = r->outcome.status == DRV_SUCCEEDED;

	result_bad(r, why);
	if (succeeded && host_short_of(err))
		host_trouble(r);
}

static void collect_finish(struct run *r)
{
	int then = r->collect_then;

	r->collect_job = NULL;
	r->collecting = false;
	r->collect_then = -1;
	if (then >= 0)
		run_dispatch(r, (enum run_event)then);
}

/* The result file becomes `output` when it holds valid JSON within the cap. */
static void on_result_read(void *arg, int q)
{
	struct result_job *j = arg;
	struct run *r = j->run;
	char why[128];

	if (q == -ECANCELED) {
		result_job_free(j);
		return;
	}
	if (q < 0) {
		snprintf(why, sizeof(why), "not read: cannot act as the run's user (%s)",
			 strerror(-q));
		result_unread(r, why, q);
	} else if (j->err < 0)
		result_unread(r, j->why, j->err);
	else if (j->data && !j->valid_json)
		set_error(r, "result file is not valid JSON, ignored");
	else
		r->output = TAKE_PTR(j->data);
	result_job_free(j);
	collect_finish(r);
}

/* Off the loop, with the run's own fsuid/fsgid: a child can leave a FIFO, a
 * symlink to a root-only file or a huge file there.  Most runs leave none:
 * then no helper thread is woken. */
static void collect_start(struct run *r)
{
	struct offload_creds cr = {.uid = r->wf->uid, .gid = r->wf->gid};
	struct result_job *j;

	if (!r->dir || runfiles_result_absent(r->dir))
		return;
	j = calloc(1, sizeof(*j));
	if (!j || !(j->dir = strdup(r->dir))) {
		result_job_free(j);
		result_unread(r, "not read: out of memory", -ENOMEM);
		return;
	}
	j->run = r;
	j->cap = run_conf(r)->worker.max_output_bytes;
	j->owner = r->wf->user ? r->wf->uid : geteuid();
	if (offload_submit(r->h->offload, r->wf->user ? &cr : NULL, result_job_work,
			   on_result_read, j, &r->collect_job) < 0) {
		result_job_free(j);
		result_unread(r, "not read: no helper thread", -EAGAIN);
		return;
	}
	r->collecting = true;
}

/* Waiting for the result file, an action that needs it waits too. */
static bool collect_defer(struct run *r, enum run_event ev)
{
	if (!r->collecting)
		return false;
	if (r->collect_then != RE_HARD_STOP)
		r->collect_then = ev;
	if (!ev_timer_armed(r->timer)) /* bounded like the log flush */
		ev_timer_arm(r->timer, LOG_FLUSH_TIMEOUT);
	return true;
}

static void collect_abandon(struct run *r)
{
	offload_cancel(r->collect_job);
	r->collect_job = NULL;
	r->collecting = false;
	r->collect_then = -1;
	result_bad(r, "not read: reading it did not finish in time");
	run_log(r, LOG_WARNING, "result file not read after %llus, reporting without it",
		(unsigned long long)(LOG_FLUSH_TIMEOUT / USEC_PER_SEC));
}

static void set_signal(struct run *r, int sig)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(r->signame, sizeof(r->signame), "SIG%s", abbrev);
	else
		snprintf(r->signame, sizeof(r->signame), "SIG%d", sig);
	r->outcome.signal = r->signame;
}

static bool exit_code_terminal(const struct conf_workflow *wf, int code)
{
	for (size_t i = 0; i < wf->n_terminal_exit_codes; i++)
		if (wf->terminal_exit_codes[i] == code)
			return true;
	return false;
}

/* Exit 0 succeeded; exit N failed (retryable only for 75, EX_TEMPFAIL);
 * a signal is a crash (retryable); the kill reason overrides both. */
static void classify(struct run *r)
{
	const struct exec_result *x = &r->result;
	struct drv_outcome *o = &r->outcome;

	o->has_exit_code = x->exited;
	o->exit_code = x->exited ? x->exit_code : 0;
	if (!x->exited)
		set_signal(r, x->signal);
	o->duration_ms = x->duration / USEC_PER_MSEC;
	if (r->kill_reason == KILL_TIMEOUT) {
		o->status = DRV_FAILED;
		o->reason = DRV_REASON_TIMEOUT;
		o->retryable = true;
		set_error(r, "timed out after %" PRIu64 " ms", (uint64_t)(run_timeout(r) / 1000));
	} else if (r->kill_reason == KILL_CANCEL) {
		o->status = DRV_CANCELLED;
		o->reason = DRV_REASON_CANCELLED;
	} else if (x->exited && x->exit_code == 0) {
		o->status = DRV_SUCCEEDED;
		o->reason = DRV_REASON_EXIT;
	} else if (x->exited) {
		o->status = DRV_FAILED;
		o->reason = DRV_REASON_EXIT;
		o->retryable = x->exit_code == 75;
		o->terminal = exit_code_terminal(r->wf, x->exit_code);
		set_error(r, "exited with status %d", x->exit_code);
	} else {
		o->status = DRV_FAILED;
		o->reason = DRV_REASON_CRASH;
		o->retryable = true;
		set_error(r, "killed by %s%s", r->signame, x->core_dumped ? " (core dumped)" : "");
	}
}

/* Exit 75 (EX_TEMPFAIL): the run asks to be tried again later. */
static bool outcome_is_retry(const struct run *r)
{
	if (r->outcome.status == DRV_FAILED && r->host_trouble)
		return true;
	return r->outcome.status == DRV_FAILED && r->outcome.reason == DRV_REASON_EXIT &&
	       r->outcome.has_exit_code && r->outcome.exit_code == 75;
}

const char *run_outcome_label(const struct run *r)
{
	if (r->outcome.status == DRV_SUCCEEDED)
		return "succeeded";
	if (outcome_is_retry(r))
		return "retry";
	if (r->outcome.status == DRV_CANCELLED)
		return "cancelled";
	switch (r->outcome.reason) {
	case DRV_REASON_TIMEOUT:
		return "timeout";
	case DRV_REASON_CRASH:
		return "crash";
	case DRV_REASON_SPAWN_ERROR:
		return "spawn_error";
	case DRV_REASON_REJECTED:
		return "rejected";
	default:
		return "failed";
	}
}

/* Does this outcome count against the workflow's breaker?  A retry (exit 75)
 * says nothing either way: it neither counts nor resets the failures. */
static bool outcome_is_failure(const struct run *r)
{
	return r->outcome.status == DRV_FAILED && r->outcome.reason != DRV_REASON_REJECTED &&
	       !outcome_is_retry(r);
}

static int build_body(struct run *r)
{
	struct logship_stats st = {0};

	if (r->body)
		return 0;
	if (r->log)
		logship_get_stats(r->log, &st);
	r->outcome.log_length = st.acked;
	if (r->log && r->spool_log) { /* the spool ships the rest at next start */
		const void *d;
		size_t n;
		struct logship_resume at;

		logship_unshipped(r->log, &d, &n, &at);
		r->outcome.log_length = at.offset + n;
	}
	r->outcome.error = r->error;
	r->outcome.output = r->output;
	if (!r->log_tail && !(r->log_tail = tail_text(&r->tail)))
		return -ENOMEM;
	r->outcome.log_tail = r->log_tail;
	if (!r->priv)
		return -EINVAL;
	return run_drv(r)->complete_body(r->h->drv, r->priv, &r->outcome, &r->body);
}

/* ---------------------------------------------------------------- report */

static void on_complete(const struct drv_answer *a, void *userdata)
{
	struct run *r = userdata;
	char why[200];

	r->req = NULL;
	r->req_carries = NULL; /* its answer comes right after this one */
	switch (a->verdict) {
	case DRV_OK:
		snprintf(r->note, sizeof(r->note), "the API says %s",
			 a->run_status[0] ? a->run_status : "?");
		run_dispatch(r, RE_REPORTED);
		break;
	case DRV_LOST:
		snprintf(why, sizeof(why), "completion answered %s", a->detail);
		lease_lost(r, why);
		break;
	case DRV_RETRY:
	case DRV_DENIED: /* the credentials may come back: keep the result */
		run_log(r, LOG_WARNING, "report failed (%s), retrying", a->detail);
		ev_timer_arm(r->timer,
			     drv_retry_delay(a, r->req_attempts++, RETRY_BASE, REPORT_RETRY_CAP));
		break;
	default:
		run_log(r, LOG_ERR, "the API refused the result for good (%s): giving up on it",
			a->detail);
		r->result_refused = true;
		snprintf(r->note, sizeof(r->note), "result refused: %.78s", a->detail);
		run_dispatch(r, RE_REPORTED);
		break;
	}
}

static int send_carrying(const struct drv_claim *claim, drv_claim_cb cb, void *lane, void *ctx)
{
	struct run *r = ctx;
	int q = run_drv(r)->complete_claim(r->h->drv, r->priv, r->body, claim, on_complete, r, cb,
	                                   lane, &r->req);

	if (q >= 0)
		r->req_carries = lane;
	return q;
}

/* The first send may carry a claim for the slot the run left; a retry is
 * the plain body (the claim, if unanswered, is asked again apart). */
static void send_complete(struct run *r)
{
	int q = 0;

	r->req_carries = NULL;
	if (r->req_attempts == 0 && r->h->ops->carry)
		q = r->h->ops->carry(r->h->host, r, send_carrying, r);
	if (q <= 0)
		q = run_drv(r)->complete(r->h->drv, r->priv, r->body, on_complete, r, &r->req);
	if (q < 0) {
		r->req = NULL;
		ev_timer_arm(r->timer, USEC_PER_SEC);
	}
}

/* Stop the request in flight; a claim it carried is then unanswered. */
static void req_cancel(struct run *r)
{
	void *lane = r->req_carries;

	drv_cancel(r->req);
	r->req = NULL;
	r->req_carries = NULL;
	if (lane)
		r->h->ops->carry_dropped(r->h->host, lane);
}

static void on_release(const struct drv_answer *a, void *userdata)
{
	struct run *r = userdata;

	r->req = NULL;
	if (a->verdict == DRV_OK || a->verdict == DRV_LOST || r->h->stopping ||
	    r->req_attempts >= 5) {
		if (a->verdict != DRV_OK)
			run_log(r, LOG_WARNING, "release not confirmed (%s); the lease will expire",
				a->detail);
		run_dispatch(r, RE_RELEASED);
		return;
	}
	ev_timer_arm(r->timer, drv_retry_delay(a, r->req_attempts++, RETRY_BASE, REPORT_RETRY_CAP));
}

/* Can the API take the run back?  Else it is dropped here, and the API's own
 * timeout puts it back in the queue. */
static bool can_release(const struct run *r)
{
	return r->priv && drv_has(r->h->drv, DRV_CAP_RELEASE);
}

/* RE_TIMER while RELEASING: the release goes out (again). */
static enum run_state act_release_send(struct run *r)
{
	if (r->log_before_release) { /* RELEASE_LOG_BOUND passed */
		run_log(r, LOG_WARNING,
		        "log not shipped within %llus of the stop: releasing the "
		        "run without the rest",
		        (unsigned long long)(RELEASE_LOG_BOUND / USEC_PER_SEC));
		r->log_before_release = false;
		logship_abandon(r->log);
	}
	if (!can_release(r)) {
		run_log(r, LOG_NOTICE,
			"the API cannot take the run back: dropped here, it returns to the queue "
			"when the API's own timeout expires");
		return RUN_DONE;
	}
	if (r->req) /* one in flight already */
		return RUN_RELEASING;
	if (run_drv(r)->release(r->h->drv, r->priv, r->release_reason, 0, on_release, r,
				&r->req) >= 0)
		return RUN_RELEASING;
	r->req = NULL;
	if (r->req_attempts >= 5 || r->h->stopping) {
		run_log(r, LOG_WARNING, "release not sent; the lease will expire");
		return RUN_DONE;
	}
	ev_timer_arm(r->timer, drv_retry_delay(NULL, r->req_attempts++, RETRY_BASE,
					       REPORT_RETRY_CAP));
	return RUN_RELEASING;
}

/* RE_TIMER while REPORTING: the completion's backoff is over. */
static enum run_state act_resend(struct run *r)
{
	if (!r->req)
		send_complete(r);
	return RUN_REPORTING;
}

static void on_timer(ev_timer_t *t, void *userdata)
{
	run_dispatch(userdata, RE_TIMER);
}

/* ---------------------------------------------------------------- actions */

static enum run_state act_spool(struct run *r);

static enum run_state enter_reporting(struct run *r)
{
	int q;

	if (collect_defer(r, RE_LOG_FLUSHED))
		return RUN_FLUSHING;
	run_verdict(r);
	if (r->h->stopping)
		return act_spool(r);
	if ((q = build_body(r)) < 0) {
		run_log(r, LOG_ERR, "cannot build the completion: %s", strerrordesc_np(-q));
		return RUN_DONE;
	}
	r->req_attempts = 0;
	ev_timer_disarm(r->timer);
	send_complete(r);
	return RUN_REPORTING;
}

static enum run_state enter_flushing(struct run *r)
{
	if (!r->log || r->h->stopping)
		return enter_reporting(r);
	logship_finish(r->log);
	ev_timer_arm(r->timer, LOG_FLUSH_TIMEOUT);
	return RUN_FLUSHING;
}

/* The release goes out on the timer's event, once the run is RELEASING
 * (act_release_send).  An execution stopped for a shutdown first ships what
 * it wrote, then a line saying it was stopped (RE_LOG_FLUSHED, or the bound):
 * released with it in the buffer, its log ended cut, with no word why. */
static enum run_state enter_releasing(struct run *r)
{
	r->req_attempts = 0;
	if (r->log && r->proc && !r->lost) {
		logship_note(r->log, "execution stopped: the worker is shutting down; the run "
		                     "goes back to the queue");
		logship_finish(r->log);
		r->log_before_release = true;
		ev_timer_arm(r->timer, RELEASE_LOG_BOUND);
		return RUN_RELEASING;
	}
	ev_timer_arm(r->timer, 0);
	return RUN_RELEASING;
}

/* RE_LOG_FLUSHED while RELEASING: the log went first, now the release. */
static enum run_state act_release_after_log(struct run *r)
{
	if (r->log_before_release) {
		r->log_before_release = false;
		ev_timer_arm(r->timer, 0);
	}
	return RUN_RELEASING;
}

static enum run_state act_start(struct run *r)
{
	struct breaker *b;
	const char *step = NULL;
	int q;

	ev_timer_disarm(r->timer); /* a READY run's hold; spawn arms the timeout */
	r->started_at = ev_now(r->h->ev);
	b = r->h->ops->breaker(r->h->host, r->workflow);
	if (b)
		breaker_run_started(b);
	r->breaker_started = b != NULL;
	metric_add(r->h->m.started, 1, r->workflow);
	q = spawn(r, &step);
	if (q >= 0) {
		snprintf(r->note, sizeof(r->note), "pid %d", (int)exec_pid(r->proc));
		if (r->h->ops->host_trouble)
			r->h->ops->host_trouble(r->h->host, NULL);
		return RUN_RUNNING;
	}
	r->outcome = (struct drv_outcome){.status = DRV_FAILED,
					    .reason = DRV_REASON_SPAWN_ERROR};
	set_error(r, "%s: %s", step ? step : "spawn", strerror(-q));
	run_log(r, LOG_ERR, "could not start %s: %s%s", r->wf->argv[0], r->error,
	        host_short_of(q) ? " (this host's want, not the run's: reported for a retry)" : "");
	if (host_short_of(q))
		host_trouble(r);
	return enter_reporting(r);
}

static enum run_state act_release(struct run *r);

static enum run_state act_wait(struct run *r)
{
	ev_timer_disarm(r->timer); /* a hold, when it was ready */
	return RUN_WAITING;
}

/* No slot free: the run waits for one, at most prefetch_hold. */
static enum run_state act_ready(struct run *r)
{
	ev_timer_arm(r->timer, run_conf(r)->worker.prefetch_hold);
	return RUN_READY;
}

/* The hold passed and no slot came free: someone else may run it sooner. */
static enum run_state act_ready_expired(struct run *r)
{
	char d[TIME_DURATION_MAX];

	r->release_reason = DRV_RELEASE_NO_SLOT;
	run_log(r, LOG_INFO, "no slot came free within prefetch_hold %s",
	        time_format_duration(d, sizeof(d), run_conf(r)->worker.prefetch_hold));
	return act_release(r);
}

/* Never started: nothing to stop, nothing written; report it cancelled. */
static enum run_state act_cancel_waiting(struct run *r)
{
	r->outcome = (struct drv_outcome){.status = DRV_CANCELLED,
					    .reason = DRV_REASON_CANCELLED};
	run_log(r, LOG_NOTICE, "the API asks to cancel a run not started yet");
	return enter_reporting(r);
}

static enum run_state act_stop_waiting(struct run *r)
{
	r->release_reason = DRV_RELEASE_SHUTDOWN;
	return act_release(r);
}

static enum run_state act_reject(struct run *r)
{
	r->outcome = (struct drv_outcome){.status = DRV_FAILED,
					    .reason = DRV_REASON_REJECTED};
	set_error(r, "rejected by the worker: %s", r->reject_reason);
	run_log(r, LOG_ERR, "rejecting the run: %s", r->reject_reason);
	return enter_reporting(r);
}

static enum run_state act_release(struct run *r)
{
	run_log(r, LOG_NOTICE, "releasing the run unstarted (%s)",
		drv_release_reason_name(r->release_reason));
	return enter_releasing(r);
}

static enum run_state act_exited(struct run *r)
{
	ev_timer_disarm(r->timer);
	classify(r);
	collect_start(r);
	return enter_flushing(r);
}

static enum run_state kill_for(struct run *r, enum kill_reason why)
{
	const struct conf *c = run_conf(r);

	/* a lost lease is someone else's now: the whole group dies at once */
	bool now = r->h->kill_now || why == KILL_LEASE_LOST;

	r->kill_reason = why;
	exec_kill(r->proc, now ? 0 : c->worker.kill_grace);
	ev_timer_disarm(r->timer);
	return RUN_KILLING;
}

static enum run_state act_timeout(struct run *r)
{
	run_log(r, LOG_WARNING, "timed out: stopping its process group");
	return kill_for(r, KILL_TIMEOUT);
}

static enum run_state act_cancel(struct run *r)
{
	run_log(r, LOG_NOTICE, "the API asks to cancel: stopping its process group");
	return kill_for(r, KILL_CANCEL);
}

/* Someone else may hold the run now: not one more byte about it. */
static void go_silent(struct run *r)
{
	r->lost = true;
	lease_stop(r);
	req_cancel(r);
	if (r->log)
		logship_abandon(r->log);
}

static enum run_state act_lost_running(struct run *r)
{
	go_silent(r);
	return kill_for(r, KILL_LEASE_LOST);
}

static enum run_state act_lost_killing(struct run *r)
{
	go_silent(r);
	r->kill_reason = KILL_LEASE_LOST;
	exec_kill(r->proc, 0); /* no more grace: the lease is someone else's */
	return RUN_KILLING;
}

static enum run_state act_lost(struct run *r)
{
	go_silent(r);
	return RUN_DONE;
}

static enum run_state act_stop_running(struct run *r)
{
	return kill_for(r, KILL_SHUTDOWN);
}

static enum run_state act_stop_killing(struct run *r)
{
	if (r->h->kill_now)
		exec_kill(r->proc, 0);
	return RUN_KILLING;
}

static enum run_state act_killed(struct run *r)
{
	switch (r->kill_reason) {
	case KILL_LEASE_LOST:
		return RUN_DONE;
	case KILL_SHUTDOWN:
		r->release_reason = DRV_RELEASE_SHUTDOWN;
		run_log(r, LOG_NOTICE, "stopped for shutdown: releasing it");
		return enter_releasing(r);
	default:
		return act_exited(r);
	}
}

static enum run_state act_flushed(struct run *r)
{
	return enter_reporting(r);
}

static enum run_state act_spool(struct run *r)
{
	if (collect_defer(r, RE_HARD_STOP))
		return r->state;
	req_cancel(r);
	r->spool_log = !r->body && r->log; /* a hard stop before the log was shipped */
	if (build_body(r) >= 0)
		r->h->ops->spool(r->h->host, r);
	return RUN_DONE;
}

static enum run_state act_done(struct run *r)
{
	return RUN_DONE;
}

static enum run_state act_ignore(struct run *r)
{
	return r->state;
}

static enum run_state act_renew(struct run *r)
{
	lease_renew(r);
	return r->state;
}

static const run_action table[_RUN_STATE_MAX][_RE_MAX];

/* RE_DEADLINE while the lease matters (the child may run, or the run is
 * unstarted or being given back): the lease is lost, as on DRV_LOST. */
static enum run_state act_deadline_lost(struct run *r)
{
	run_log(r, LOG_WARNING,
		"lease lost (local lease deadline passed without a renewal): stopping the run, "
		"nothing more is written");
	metric_add(r->h->m.leases_lost, 1);
	return table[r->state][RE_LEASE_LOST](r);
}

/* RE_TIMER while RUNNING: the run's own timeout. */
static enum run_state act_timer_running(struct run *r)
{
	snprintf(r->note, sizeof(r->note), "the run's timeout");
	return act_timeout(r);
}

/* RE_TIMER while FLUSHING: the bound on the log's flush (or on reading the
 * result file) is over: report with what we have. */
static enum run_state act_flush_bound(struct run *r)
{
	if (r->collecting)
		collect_abandon(r);
	else
		run_log(r, LOG_WARNING, "log not fully shipped after %llus, reporting anyway",
			(unsigned long long)(LOG_FLUSH_TIMEOUT / USEC_PER_SEC));
	return enter_reporting(r);
}

/* The worker gives up on the run: at teardown with nothing kept and nothing
 * counted; when a hard stop overran, a result already made is spooled first. */
static enum run_state act_abandon(struct run *r)
{
	if (r->h->tearing_down) {
		struct breaker *b = r->h->ops->breaker(r->h->host, r->workflow);

		if (b && r->verdict_pending)
			breaker_settled(b);
		r->verdict_pending = false;
		r->breaker_started = false;
		free(r->reject_reason);
		r->reject_reason = NULL;
	} else if (r->body && (r->state == RUN_REPORTING || r->state == RUN_FLUSHING)) {
		req_cancel(r);
		r->h->ops->spool(r->h->host, r);
	}
	return RUN_DONE;
}

/* Every cell that is not NULL; check_worker steps each one.  RE_RENEW,
 * RE_DEADLINE and RE_ABANDON reach every live state.  One row per state,
 * one cell per line, as written (not clang-format's layout). */
/* clang-format off */
static const run_action table[_RUN_STATE_MAX][_RE_MAX] = {
	[RUN_CLAIMED] = {
		[RE_START] = act_start,
		[RE_REJECT] = act_reject,
		[RE_RELEASE] = act_release,
		[RE_LEASE_LOST] = act_lost,
		[RE_WAIT] = act_wait,
		[RE_READY] = act_ready,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_READY] = {
		[RE_START] = act_start,
		[RE_WAIT] = act_wait,
		[RE_RELEASE] = act_release,
		[RE_TIMER] = act_ready_expired,
		[RE_CANCEL] = act_cancel_waiting,
		[RE_LEASE_LOST] = act_lost,
		[RE_HARD_STOP] = act_stop_waiting,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_WAITING] = {
		[RE_START] = act_start,
		[RE_RELEASE] = act_release,
		[RE_CANCEL] = act_cancel_waiting,
		[RE_LEASE_LOST] = act_lost,
		[RE_HARD_STOP] = act_stop_waiting,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_RUNNING] = {
		[RE_EXITED] = act_exited,
		[RE_TIMER] = act_timer_running,
		[RE_CANCEL] = act_cancel,
		[RE_LEASE_LOST] = act_lost_running,
		[RE_HARD_STOP] = act_stop_running,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_KILLING] = {
		[RE_EXITED] = act_killed,
		[RE_CANCEL] = act_ignore,
		[RE_LEASE_LOST] = act_lost_killing,
		[RE_HARD_STOP] = act_stop_killing,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_FLUSHING] = {
		[RE_LOG_FLUSHED] = act_flushed,
		[RE_CANCEL] = act_ignore,
		[RE_LEASE_LOST] = act_lost,
		[RE_HARD_STOP] = act_spool,
		[RE_TIMER] = act_flush_bound,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_offer,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_REPORTING] = {
		[RE_REPORTED] = act_done,
		[RE_CANCEL] = act_ignore,
		[RE_LEASE_LOST] = act_lost,
		[RE_HARD_STOP] = act_spool,
		[RE_TIMER] = act_resend,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_offer,
		[RE_ABANDON] = act_abandon,
	},
	[RUN_RELEASING] = {
		[RE_RELEASED] = act_done,
		[RE_CANCEL] = act_ignore,
		[RE_LEASE_LOST] = act_lost,
		[RE_HARD_STOP] = act_ignore,
		[RE_TIMER] = act_release_send,
		[RE_LOG_FLUSHED] = act_release_after_log,
		[RE_RENEW] = act_renew,
		[RE_DEADLINE] = act_deadline_lost,
		[RE_ABANDON] = act_abandon,
	},
};
/* clang-format on */

bool run_cell(enum run_state s, enum run_event ev)
{
	return table[s][ev] != NULL;
}

/* ---------------------------------------------------------------- places */

bool run_holds_slot(enum run_state s)
{
	return s == RUN_CLAIMED || s == RUN_WAITING || s == RUN_RUNNING || s == RUN_KILLING;
}

static unsigned *run_place(struct run_table *t, enum run_state s)
{
	if (s == RUN_DONE)
		return NULL;
	if (s == RUN_READY)
		return &t->ready;
	return run_holds_slot(s) ? &t->running : &t->reporting;
}

static size_t id_bucket(const struct run_table *t, const char *id)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ t->id_seed; /* FNV-1a, keyed */

	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	h ^= h >> 29; /* the low bits pick the bucket: mix the high ones in */
	return (size_t)h & (t->n_ids - 1);
}

static void id_link(struct run_table *t, struct run *r)
{
	struct run **b = &t->ids[id_bucket(t, r->id)];

	r->id_next = *b;
	*b = r;
}

/* Twice the buckets once there are more runs than buckets; when that fails
 * the chains only grow longer. */
static void ids_grow(struct run_table *t)
{
	size_t n = t->n_ids ? t->n_ids * 2 : 64;
	struct run **old = t->ids, **ids = calloc(n, sizeof(*ids));
	size_t n_old = t->n_ids;

	if (!ids)
		return;
	if (!t->ids)
		random_bytes(&t->id_seed, sizeof(t->id_seed));
	t->ids = ids;
	t->n_ids = n;
	for (size_t i = 0; i < n_old; i++)
		for (struct run *r = old[i], *next; r; r = next) {
			next = r->id_next;
			id_link(t, r);
		}
	free(old);
}

static void id_unlink(struct run_table *t, struct run *r)
{
	struct run **p;

	if (!r->id || !t->ids)
		return;
	for (p = &t->ids[id_bucket(t, r->id)]; *p; p = &(*p)->id_next)
		if (*p == r) {
			*p = r->id_next;
			break;
		}
	r->id_next = NULL;
}

struct run *run_table_find(const struct run_table *t, const char *id)
{
	struct run *r;

	if (!id || !t->ids)
		return NULL;
	for (r = t->ids[id_bucket(t, id)]; r && !streq(r->id, id); r = r->id_next)
		;
	return r;
}

struct run *run_table_find_next(struct run *r, const char *id)
{
	for (r = r->id_next; r && !streq(r->id, id); r = r->id_next)
		;
	return r;
}

void run_table_free(struct run_table *t)
{
	free(t->ids);
	t->ids = NULL;
	t->n_ids = 0;
}

void run_table_add(struct run_table *t, struct run *r)
{
	unsigned *place = run_place(t, r->state);

	if (r->id) {
		if (t->n >= t->n_ids)
			ids_grow(t);
		if (t->ids)
			id_link(t, r);
	}

	r->prev = NULL;
	r->next = t->head;
	if (t->head)
		t->head->prev = r;
	t->head = r;
	t->n++;
	if (place)
		(*place)++;
}

void run_table_remove(struct run_table *t, struct run *r)
{
	id_unlink(t, r);
	if (r->prev)
		r->prev->next = r->next;
	else
		t->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	t->n--;
}

static void ready_link(struct run_table *t, struct run *r)
{
	r->ready_next = NULL;
	r->ready_prev = t->ready_tail;
	if (t->ready_tail)
		t->ready_tail->ready_next = r;
	else
		t->ready_head = r;
	t->ready_tail = r;
}

static void ready_unlink(struct run_table *t, struct run *r)
{
	if (r->ready_prev)
		r->ready_prev->ready_next = r->ready_next;
	else
		t->ready_head = r->ready_next;
	if (r->ready_next)
		r->ready_next->ready_prev = r->ready_prev;
	else
		t->ready_tail = r->ready_prev;
	r->ready_prev = r->ready_next = NULL;
}

bool run_table_moved(struct run_table *t, struct run *r, enum run_state before)
{
	unsigned *from = run_place(t, before), *to = run_place(t, r->state);

	if (before == RUN_READY && r->state != RUN_READY)
		ready_unlink(t, r);
	else if (r->state == RUN_READY && before != RUN_READY)
		ready_link(t, r);

	t->flushing += (r->state == RUN_FLUSHING) - (before == RUN_FLUSHING);
	if (from == to)
		return false;
	if (from)
		(*from)--;
	if (to)
		(*to)++;
	return from != NULL;
}

/* ---------------------------------------------------------------- life */

/* Lease loss, shutdown and cancellation say nothing about the workflow. */
static const char *no_verdict_label(const struct run *r)
{
	if (r->lost)
		return "lease_lost";
	if (r->kill_reason == KILL_SHUTDOWN)
		return "released";
	if (r->outcome.status == DRV_CANCELLED)
		return "cancelled";
	return NULL;
}

/* The verdict of a started run for its workflow's breaker: none for a
 * retry or a run that ended without one.  Returns true when the state changed. */
static bool breaker_verdict(struct run *r, struct breaker *b)
{
	bool changed = false;

	if (r->verdict_given)
		return false;
	r->verdict_given = true;
	if (no_verdict_label(r) || outcome_is_retry(r))
		breaker_run_abandoned(b);
	else
		changed = breaker_record(b, outcome_is_failure(r), ev_now(r->h->ev));
	if (r->verdict_pending)
		breaker_settled(b);
	r->verdict_pending = false;
	return changed;
}

/* The child is gone: until the verdict is in, its workflow's breaker counts
 * it as one that may fail, so the slot it freed is not refilled past the
 * threshold while the run flushes its log and reads its result. */
static void run_verdict_pending(struct run *r)
{
	struct breaker *b = r->h->ops->breaker(r->h->host, r->workflow);

	if (r->breaker_started && b && !r->verdict_pending && !r->verdict_given) {
		breaker_pending(b);
		r->verdict_pending = true;
	}
}

/* The verdict is final (the child gone, its result read): to the breaker now,
 * not when the API answers the report. */
static void run_verdict(struct run *r)
{
	struct breaker *b = r->h->ops->breaker(r->h->host, r->workflow);

	if (!r->breaker_started || !b || r->verdict_given)
		return;
	if (breaker_verdict(r, b))
		r->h->ops->breaker_changed(r->h->host, r->workflow);
	else if (r->h->ops->settled)
		r->h->ops->settled(r->h->host, r->workflow);
}

static void run_record_outcome(struct run *r)
{
	struct breaker *b = r->h->ops->breaker(r->h->host, r->workflow);
	const char *label;

	if (!r->breaker_started || !b) {
		/* a hostile API must not mint label values: only configured names */
		if (r->reject_reason)
			metric_add(r->h->m.finished, 1, r->wf ? r->workflow : "unknown", "rejected");
		return;
	}
	label = no_verdict_label(r);
	if (!label) {
		metric_observe(r->h->m.duration,
			       (double)(ev_now(r->h->ev) - r->started_at) / USEC_PER_SEC, r->workflow);
		label = run_outcome_label(r);
	}
	metric_add(r->h->m.finished, 1, r->workflow, label);
	if (r->result_refused)
		metric_add(r->h->m.results_refused, 1, r->workflow);
	if (breaker_verdict(r, b))
		r->h->ops->breaker_changed(r->h->host, r->workflow);
}

static void run_free(struct run *r)
{
	lease_stop(r);
	req_cancel(r);
	ev_timer_del(r->renew_timer);
	ev_timer_del(r->deadline_timer);
	ev_timer_del(r->timer);
	exec_free(r->proc);
	cgroup_run_free(r->cg);
	if (r->log) {
		struct logship_stats st;

		logship_get_stats(r->log, &st);
		if (st.no_progress)
			run_log(r, LOG_WARNING,
			        "the API answered %u log appends without taking their bytes: each "
			        "was sent again after a backoff",
			        st.no_progress);
		if (st.server_limit)
			run_log(r, LOG_WARNING,
			        "the API keeps no more of this run's log (its own cap, at %" PRIu64
			        " bytes): the rest of the output was not shipped; the API's cap is "
			        "below the workflow's max_log_bytes",
			        st.acked);
		metric_add(r->h->m.log_bytes, (double)st.acked);
		metric_add(r->h->m.log_dropped, (double)st.dropped, "buffer_full");
		metric_add(r->h->m.log_dropped, (double)st.truncated, "max_log_bytes");
		logship_free(r->log);
	}
	offload_cancel(r->collect_job);
	if (r->dir)
		runfiles_remove(r->h->offload, r->dir);
	conf_ref_put(r->cref);
	if (r->priv)
		run_drv(r)->run_free(r->priv);
	if (r->lease_key)
		explicit_bzero(r->lease_key, strlen(r->lease_key));
	strv_free(r->env);
	free(r->dir);
	free(r->id);
	free(r->workflow);
	free(r->lease_key);
	free(r->input);
	free(r->reject_reason);
	free(r->error);
	free(r->output);
	free(r->body);
	free(r->log_tail);
	tail_done(&r->tail);
	free(r);
}

/* What the end line calls the run's fate. */
static const char *end_label(const struct run *r, enum run_state before, enum run_event ev)
{
	const char *label = no_verdict_label(r);

	if (label)
		return label;
	if (before == RUN_RELEASING || ev == RE_ABANDON)
		return "released";
	return run_outcome_label(r);
}

/* Is a change of state logged (info)?  If not, its note goes unformatted. */
static bool change_logged(struct run *r)
{
	if (log_get_max_level() >= LOG_INFO)
		return true;
	r->note[0] = '\0';
	return false;
}

/* The run's end: one line with every field an operator asks about. */
static void log_end(struct run *r, enum run_state before, enum run_event ev)
{
	struct logship_stats st = {0};
	usec_t now = ev_now(r->h->ev), d = 0;
	char dur[TIME_DURATION_MAX], how[48] = "";
	struct log_run_end end;
	struct log_fields f;

	if (!change_logged(r))
		return;
	f = run_fields(r, end_label(r, before, ev));
	if (r->log)
		logship_get_stats(r->log, &st);
	if (r->proc && r->result.duration)
		d = r->result.duration;
	else if (r->started_at)
		d = now - r->started_at;
	end = (struct log_run_end){.has_exit_code = r->outcome.has_exit_code,
	                           .exit_code = r->outcome.exit_code,
	                           .signal = r->outcome.signal,
	                           .duration_ms = d / USEC_PER_MSEC,
	                           .pid = r->proc ? (int)exec_pid(r->proc) : 0,
	                           .log_bytes = st.acked};
	f.end = &end;
	if (end.has_exit_code)
		snprintf(how, sizeof(how), ", exit status %d", end.exit_code);
	else if (end.signal)
		snprintf(how, sizeof(how), ", %s", end.signal);
	log_emit(LOG_INFO, &f, "finished: %s%s after %s (%s -> done, %s%s%s)", f.outcome, how,
	         time_format_duration(dur, sizeof(dur), d), state_names[before], event_names[ev],
	         r->note[0] ? ": " : "", r->note);
	r->note[0] = '\0';
}

/* One info line per change of state, with the outcome once there is one. */
static void log_transition(struct run *r, enum run_state before, enum run_event ev)
{
	bool known = r->state >= RUN_REPORTING && r->state != RUN_RELEASING && !r->lost &&
		     r->body != NULL;
	struct log_fields f;

	if (!change_logged(r))
		return;
	f = run_fields(r, known ? run_outcome_label(r) : NULL);
	log_emit(LOG_INFO, &f, "%s -> %s (%s%s%s)", state_names[before], state_names[r->state],
		 event_names[ev], r->note[0] ? ": " : "", r->note);
	r->note[0] = '\0';
}

void run_dispatch(struct run *r, enum run_event ev)
{
	enum run_state before = r->state, after;
	run_action action = table[before][ev];

	if (!action) {
		run_log(r, LOG_DEBUG, "event %s ignored in state %s", event_names[ev],
			state_names[before]);
		return;
	}
	after = action(r);
	if (after == before)
		return;
	r->state = after;
	if (run_holds_slot(before) && !run_holds_slot(after))
		run_verdict_pending(r);
	if (r->h->ops->moved)
		r->h->ops->moved(r->h->host, r, before);
	if (after != RUN_DONE) {
		log_transition(r, before, ev);
		return;
	}
	log_end(r, before, ev);
	run_record_outcome(r);
	r->h->ops->done(r->h->host, r);
	run_free(r);
}

struct run *run_new(struct run_host *h, struct conf_ref *conf, struct drv_grant *g,
		    usec_t claim_sent_at)
{
	struct run *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->h = h;
	r->cref = conf_ref_get(conf);
	r->id = TAKE_PTR(g->id);
	r->workflow = g->workflow ? TAKE_PTR(g->workflow) : strdup("?");
	r->lease_key = TAKE_PTR(g->lease_key);
	r->priv = TAKE_PTR(g->priv);
	r->env = TAKE_PTR(g->env);
	r->attempt = g->attempt;
	r->timeout_s = g->timeout_s;
	r->input = TAKE_PTR(g->input);
	r->input_len = g->input_len;
	r->reject_reason = TAKE_PTR(g->invalid);
	r->claimed_at = ev_now(h->ev);
	r->collect_then = -1;
	tail_init(&r->tail, RUN_TAIL_MAX);
	r->wf = conf_find_workflow(r->cref->conf, r->workflow);
	if (!r->workflow || ev_timer_add(h->ev, USEC_INFINITY, on_renew_timer, r,
					 &r->renew_timer) < 0 ||
	    ev_timer_add(h->ev, USEC_INFINITY, on_deadline, r, &r->deadline_timer) < 0 ||
	    ev_timer_add(h->ev, USEC_INFINITY, on_timer, r, &r->timer) < 0) {
		run_free(r);
		return NULL;
	}
	lease_claimed(r, claim_sent_at, g->ttl_s);
	return r;
}
