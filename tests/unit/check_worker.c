/* lib/worker/run.c's table, cell by cell, against a scripted driver: no HTTP,
 * no lessor.  The test is the runs' host (run.h's struct run_host) and its
 * driver is a drv_ops table defined here that answers from a script, from the
 * loop (ev_defer), or holds the request open.  Each case is data: how to
 * bring a run to a state, the event, the state right after it, and what the
 * run then asked of the driver and of its host while the loop was stepped.
 * Children are real (/bin/sh scripts), so RE_EXITED comes from the process. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor_proc.h"
#include "proto/driver-int.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/claim.h"
#include "worker/run.h"

#define MSEC USEC_PER_MSEC
#define SEC USEC_PER_SEC

/* ---------------------------------------------------------------- the scripted driver */

enum op { OP_CLAIM, OP_RENEW, OP_LOG, OP_BODY, OP_COMPLETE, OP_RELEASE, OP_CANCEL, _OP_MAX };
static const char *const op_names[_OP_MAX] = {"claim",    "renew",   "log",         "body",
                                              "complete", "release", "claim_cancel"};

#define HOLD (-1) /* the request stays open until the run drops it */

static int script[_OP_MAX]; /* an enum drv_verdict, or HOLD */
static char actions[512];   /* "renew body complete done ..." */

static void act(const char *what)
{
	size_t n = strlen(actions);

	snprintf(actions + n, sizeof(actions) - n, "%s%s", n ? " " : "", what);
}

struct drv_run {
	int dummy;
};

/* A request's script: answered from the loop (ev_defer), or held open; a run
 * that drops the request (drv_cancel) cancels the answer too. */
struct fake_req {
	drv_req_t *rq;
	int verdict;
	ev_t *ev;
};

static void deliver(void *userdata)
{
	struct fake_req *f = userdata;
	struct drv_answer a = {.verdict = (enum drv_verdict)f->verdict, .ttl_s = 60};

	snprintf(a.detail, sizeof(a.detail), "scripted");
	/* a retry the run must not take up again while a case looks at it */
	a.retry_after = f->verdict == DRV_RETRY ? 10 * SEC : 0;
	drv_req_answer(f->rq, &a);
}

/* Requests held open (HOLD), by op, so a test can answer them later. */
#define HELD_MAX 64
static struct fake_req *held[HELD_MAX];
static enum op held_op[HELD_MAX];

static void held_forget(struct fake_req *f)
{
	for (size_t i = 0; i < HELD_MAX; i++)
		if (held[i] == f)
			held[i] = NULL;
}

/* Answer one request of op held so far (the oldest first); false: none. */
static bool answer_held(enum op op, int verdict)
{
	for (size_t i = 0; i < HELD_MAX; i++)
		if (held[i] && held_op[i] == op) {
			struct fake_req *f = held[i];

			held[i] = NULL;
			f->verdict = verdict;
			ck_assert_int_eq(ev_defer(f->ev, deliver, f), 0);
			return true;
		}
	return false;
}

static void fake_req_free(void *state)
{
	struct fake_req *f = state;

	ev_defer_cancel(f->ev, deliver, f);
	held_forget(f);
	free(f);
}

/* Every request: recorded, then answered from the script. */
static int fake_req(drv_t *d, enum op op, drv_cb cb, void *ud, drv_req_t **ret)
{
	drv_req_t *rq = drv_req_new(d, NULL, cb, ud);
	struct fake_req *f = calloc(1, sizeof(*f));

	ck_assert_ptr_nonnull(rq);
	ck_assert_ptr_nonnull(f);
	act(op_names[op]);
	*f = (struct fake_req){.rq = rq, .verdict = script[op], .ev = d->ev};
	rq->state = f;
	rq->state_free = fake_req_free;
	rq->ret = ret;
	if (ret)
		*ret = rq;
	if (script[op] != HOLD) {
		ck_assert_int_eq(ev_defer(d->ev, deliver, f), 0);
		return 0;
	}
	for (size_t i = 0; i < HELD_MAX; i++)
		if (!held[i]) {
			held[i] = f;
			held_op[i] = op;
			break;
		}
	return 0;
}

/* Claims: recorded per workflow, answered from the loop: empty, or with up to
 * grant_left runs of workflow grant_wf. */
static const char *const claim_wfs[] = {"a", "b", "c"};
static unsigned claims_of[3], claims_all, claim_inflight, claim_inflight_max;
static unsigned grant_left, granted;
/* Claims for runs from the claim_hold-th on (1 = the first) are held open
 * until release_claims(); 0 = none. */
static unsigned claim_hold, claims_sent;
static struct fake_claim *held_claims[16];
static const char *grant_wf = "say";

static void grant_runs(struct drv_claim_answer *ans, unsigned max_runs)
{
	unsigned n = MIN(max_runs, grant_left);

	ans->runs = calloc(n + 1, sizeof(*ans->runs));
	ck_assert_ptr_nonnull(ans->runs);
	for (unsigned i = 0; i < n; i++) {
		struct drv_grant *g = &ans->runs[i];

		granted++;
		*g = (struct drv_grant){.workflow = strdup(grant_wf),
		                        .attempt = 1,
		                        .ttl_s = 60,
		                        .input = strdup("null"),
		                        .input_len = 4,
		                        .usable_for_reject = true,
		                        .priv = calloc(1, sizeof(struct drv_run))};
		ck_assert_int_ge(asprintf(&g->id, "g-%u", granted), 0);
		ck_assert_int_ge(asprintf(&g->lease_key, "lease-%u", granted), 0);
	}
	ans->n_runs = n;
	grant_left -= n;
}

struct fake_claim {
	drv_req_t *rq;
	ev_t *ev;
	unsigned n;
};

static void claim_deliver(void *userdata)
{
	struct fake_claim *f = userdata;
	struct drv_claim_answer ans = {.queue_depth = -1};

	claim_inflight -= f->n;
	if (grant_left)
		grant_runs(&ans, f->n);
	f->n = 0;
	drv_req_claim_answer(f->rq, &ans);
}

static void fake_claim_free(void *state)
{
	struct fake_claim *f = state;

	for (size_t i = 0; i < ELEMENTSOF(held_claims); i++)
		if (held_claims[i] == f)
			held_claims[i] = NULL;
	ev_defer_cancel(f->ev, claim_deliver, f);
	claim_inflight -= f->n;
	free(f);
}

static int fake_claim(drv_t *d, const struct drv_claim *rq, drv_claim_cb cb, void *ud,
                      drv_req_t **ret)
{
	drv_req_t *r = drv_req_new(d, NULL, NULL, ud);
	struct fake_claim *f = calloc(1, sizeof(*f));

	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(f);
	act(op_names[OP_CLAIM]);
	ck_assert_ptr_nonnull(rq->workflows);
	if (rq->workflows[0] && rq->workflows[1])
		claims_all++;
	else
		for (size_t i = 0; i < ELEMENTSOF(claim_wfs); i++)
			if (rq->workflows[0] && streq(rq->workflows[0], claim_wfs[i]))
				claims_of[i]++;
	claim_inflight += rq->max_runs;
	claim_inflight_max = MAX(claim_inflight_max, claim_inflight);
	*f = (struct fake_claim){.rq = r, .ev = d->ev, .n = rq->max_runs};
	r->claim_cb = cb;
	r->state = f;
	r->state_free = fake_claim_free;
	r->ret = ret;
	if (ret)
		*ret = r;
	claims_sent += rq->max_runs > 0;
	if (rq->max_runs > 0 && claim_hold && claims_sent >= claim_hold) {
		for (size_t i = 0; i < ELEMENTSOF(held_claims); i++)
			if (!held_claims[i]) {
				held_claims[i] = f;
				return 0;
			}
		ck_abort_msg("too many claims held");
	}
	ck_assert_int_eq(ev_defer(d->ev, claim_deliver, f), 0);
	return 0;
}

static unsigned claims_held(void)
{
	unsigned n = 0;

	for (size_t i = 0; i < ELEMENTSOF(held_claims); i++)
		n += held_claims[i] != NULL;
	return n;
}

/* Answer every held claim (with runs while grant_left lasts). */
static void release_claims(void)
{
	claim_hold = 0;
	for (size_t i = 0; i < ELEMENTSOF(held_claims); i++)
		if (held_claims[i]) {
			ck_assert_int_eq(
			    ev_defer(held_claims[i]->ev, claim_deliver, held_claims[i]), 0);
			held_claims[i] = NULL;
		}
}

static int fake_claim_cancel(drv_t *d, drv_cb cb, void *ud, drv_req_t **ret)
{
	return fake_req(d, OP_CANCEL, cb, ud, ret);
}

static int fake_renew(drv_t *d, drv_run_t *run, unsigned ttl_s, usec_t timeout, bool fresh,
                      drv_cb cb, void *ud, drv_req_t **ret)
{
	return fake_req(d, OP_RENEW, cb, ud, ret);
}

static int fake_log(drv_t *d, drv_run_t *run, uint64_t offset, const void *data, size_t len,
                    usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	return fake_req(d, OP_LOG, cb, ud, ret);
}

static char *last_tail; /* the log_tail of the last completion body made */

static int fake_body(drv_t *d, drv_run_t *run, const struct drv_outcome *o, char **ret)
{
	act(op_names[OP_BODY]);
	free(last_tail);
	last_tail = o->log_tail ? strdup(o->log_tail) : NULL;
	*ret = strdup("{\"log_length\":0}");
	return *ret ? 0 : -ENOMEM;
}

static int fake_complete(drv_t *d, drv_run_t *run, const char *body, drv_cb cb, void *ud,
                         drv_req_t **ret)
{
	return fake_req(d, OP_COMPLETE, cb, ud, ret);
}

static int fake_release(drv_t *d, drv_run_t *run, enum drv_release_reason why, unsigned delay_s,
                        drv_cb cb, void *ud, drv_req_t **ret)
{
	return fake_req(d, OP_RELEASE, cb, ud, ret);
}

static void fake_run_free(drv_run_t *run)
{
	free(run);
}

static const struct drv_ops fake_ops = {
    .name = "scripted",
    .caps = DRV_CAP_LOG_OFFSETS | DRV_CAP_CLAIM_CANCEL | DRV_CAP_SERVER_CANCEL |
            DRV_CAP_SERVER_TTL | DRV_CAP_MULTI_WORKFLOW | DRV_CAP_RELEASE | DRV_CAP_LOG_LENGTH,
    .claim = fake_claim,
    .claim_cancel = fake_claim_cancel,
    .renew = fake_renew,
    .log_append = fake_log,
    .complete_body = fake_body,
    .complete = fake_complete,
    .release = fake_release,
    .run_free = fake_run_free,
};

/* The same with no capability at all: no release (a run given back is dropped
 * here), no claim covering several workflows (a claim per workflow). */
static struct drv_ops bare_ops;

/* ---------------------------------------------------------------- the host */

static ev_t *E;
static metrics_t *M;
static offload_t *O;
static drv_t *D;
static struct conf_ref *CR;
static char *dir;
static struct run_host H;
static struct breaker B;
static struct run *R; /* the run under test, NULL once it is DONE */

static struct breaker *host_breaker(void *host, const char *workflow)
{
	return &B;
}

static void host_breaker_changed(void *host, const char *workflow)
{
	act("breaker");
}

static void host_spool(void *host, struct run *r)
{
	act("spool");
}

static void host_done(void *host, struct run *r)
{
	ck_assert_ptr_eq(r, R);
	act("done");
	R = NULL;
}

static const struct run_host_ops host_ops = {
    .breaker = host_breaker,
    .breaker_changed = host_breaker_changed,
    .spool = host_spool,
    .done = host_done,
};

static void write_script(const char *name, const char *body)
{
	_cleanup_free_ char *path = NULL, *text = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void setup(void)
{
	_cleanup_free_ char *path = NULL, *text = NULL, *err = NULL;
	struct conf *c = NULL;
	struct metrics *m;

	dir = tu_tmpdir("worker");
	ck_assert_ptr_nonnull(dir);
	write_script("sleep.sh", "exec sleep 30");
	write_script("say.sh", "echo said");                      /* output, then exit */
	write_script("say_sleep.sh", "echo said; exec sleep 30"); /* output, then wait */
	/* 500 lines (over 4 KiB) on stdout, the last on stderr, a failure */
	write_script("chatty.sh", "i=0; while [ $i -lt 500 ]; do echo \"line $i\"; i=$((i+1)); "
	                          "done; echo bye >&2; exit 3");
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = http://127.0.0.1:9\n"
	                          "[worker]\nrun_dir = %1$s/run\nspool_dir = %1$s/spool\n"
	                          "lease_ttl = 60s\nlease_refresh = 20s\nkill_grace = 5s\n"
	                          "[workflow.sleep]\ncommand = %1$s/sleep.sh\n"
	                          "[workflow.say]\ncommand = %1$s/say.sh\n"
	                          "[workflow.say_sleep]\ncommand = %1$s/say_sleep.sh\n"
	                          "[workflow.chatty]\ncommand = %1$s/chatty.sh\n",
	                          dir),
	                 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	ck_assert_int_eq(
	    conf_load(&(struct conf_source){.path = path, .default_worker_id = "w1"}, &c, &err), 0);
	CR = conf_ref_new(c);
	ck_assert_ptr_nonnull(CR);
	ck_assert_int_eq(ev_new(&E, NULL), 0);
	ck_assert_int_eq(offload_new(E, 2, &O), 0);
	M = m = metrics_new();
	ck_assert_ptr_nonnull(m);
	bare_ops = fake_ops;
	bare_ops.caps = 0; /* as little as a driver can have */
	breaker_init(&B, 5, 10 * SEC, 60 * SEC);
	H = (struct run_host){
	    .ops = &host_ops,
	    .ev = E,
	    .offload = O,
	    .m = {.started = metrics_counter(m, "started", "", "workflow"),
	          .finished = metrics_counter(m, "finished", "", "workflow,outcome"),
	          .leases_lost = metrics_counter(m, "lost", "", NULL),
	          .renewals = metrics_counter(m, "renewals", "", "result"),
	          .duration =
	              metrics_histogram(m, "duration", "", "workflow", (const double[]){1}, 1),
	          .log_bytes = metrics_counter(m, "log_bytes", "", NULL),
	          .log_dropped = metrics_counter(m, "log_dropped", "", "reason"),
	          .results_refused = metrics_counter(m, "results_refused", "", "workflow")},
	};
}

static struct run_table T;

static void teardown(void)
{
	run_table_free(&T);
	free(last_tail);
	last_tail = NULL;
	offload_drain(O, 10 * SEC);
	O = offload_free(O);
	metrics_free(M);
	E = ev_free(E);
	conf_ref_put(CR);
	rm_rf(dir);
	free(dir);
}

/* ---------------------------------------------------------------- stepping */

static void step(usec_t for_how_long)
{
	usec_t end = time_mono() + for_how_long;

	while (time_mono() < end)
		ck_assert_int_ge(ev_run_once(E, 10 * MSEC), 0);
}

static enum run_state now_state(void)
{
	return R ? R->state : RUN_DONE;
}

/* Until the run leaves state s (an event of the process or a timer). */
static void step_until_not(enum run_state s)
{
	usec_t end = time_mono() + tu_timeout(10 * SEC);

	while (now_state() == s) {
		ck_assert_msg(time_mono() < end, "the run stays %s", run_state_name(s));
		ck_assert_int_ge(ev_run_once(E, 10 * MSEC), 0);
	}
}

/* How a case brings its run to the state it starts from. */
enum from {
	F_CLAIMED,     /* a fresh grant of workflow sleep */
	F_CLAIMED_BAD, /* a fresh grant the worker must reject */
	F_WAITING,
	F_READY,             /* claimed ahead of a free slot (worker.prefetch) */
	F_RUNNING,           /* sleep.sh */
	F_RUNNING_SAY,       /* say.sh: it says something and exits */
	F_KILLING,           /* say_sleep.sh, cancelled: SIGTERM sent, not yet gone */
	F_FLUSHING,          /* say.sh exited, its log append held */
	F_REPORTING,         /* rejected, the completion held */
	F_REPORTING_BACKOFF, /* rejected, the completion answered "retry" (10 s) */
	F_RELEASING,         /* released unstarted, the release held */
	F_RELEASING_BACKOFF, /* released, the release answered "retry" (10 s) */
	F_RELEASING_BARE,    /* released unstarted; the driver cannot release */
	F_RELEASING_STOPPED, /* say_sleep.sh killed by a hard stop: its log's append held */
};

static const char *from_workflow(enum from f)
{
	switch (f) {
	case F_RUNNING_SAY:
	case F_FLUSHING:
		return "say";
	case F_KILLING:
	case F_RELEASING_STOPPED:
		return "say_sleep";
	default:
		return "sleep";
	}
}

static void new_run(enum from f)
{
	drv_run_t *priv = calloc(1, sizeof(*priv));
	struct drv_grant g = {
	    .id = strdup("r-1"),
	    .workflow = strdup(from_workflow(f)),
	    .attempt = 1,
	    .ttl_s = 60,
	    .input = strdup("null"),
	    .input_len = 4,
	    .lease_key = strdup("lease-1"),
	    .invalid = f == F_CLAIMED_BAD ? strdup("input is not valid UTF-8") : NULL,
	    .usable_for_reject = true,
	    .priv = priv,
	};

	ck_assert_int_eq(
	    drv_new_ops(E, CR->conf, M, f == F_RELEASING_BARE ? &bare_ops : &fake_ops, &D), 0);
	H.drv = D;
	R = run_new(&H, CR, &g, ev_now(E));
	ck_assert_ptr_nonnull(R);
	drv_grant_done(&g);
}

static void dispatch(enum run_event ev)
{
	run_dispatch(R, ev);
}

static void reach(enum from f)
{
	for (int i = 0; i < _OP_MAX; i++)
		script[i] = HOLD;
	new_run(f);
	switch (f) {
	case F_CLAIMED:
	case F_CLAIMED_BAD:
		break;
	case F_WAITING:
		dispatch(RE_WAIT);
		break;
	case F_READY:
		dispatch(RE_READY);
		break;
	case F_RUNNING:
	case F_RUNNING_SAY:
		dispatch(RE_START);
		break;
	case F_KILLING:
		dispatch(RE_START);
		step(100 * MSEC); /* its output is read */
		dispatch(RE_CANCEL);
		break;
	case F_FLUSHING:
		dispatch(RE_START);
		step_until_not(RUN_RUNNING);
		step(100 * MSEC); /* the result file read, the log's append sent (held) */
		break;
	case F_REPORTING_BACKOFF:
		script[OP_COMPLETE] = DRV_RETRY;
		/* fall through */
	case F_REPORTING:
		free(R->reject_reason);
		R->reject_reason = strdup("scripted rejection");
		dispatch(RE_REJECT);
		step(50 * MSEC);
		break;
	case F_RELEASING_BACKOFF:
		script[OP_RELEASE] = DRV_RETRY;
		/* fall through */
	case F_RELEASING:
	case F_RELEASING_BARE:
		R->release_reason = DRV_RELEASE_DRAINING;
		dispatch(RE_RELEASE);
		if (f != F_RELEASING_BARE)
			step(50 * MSEC);
		break;
	case F_RELEASING_STOPPED:
		dispatch(RE_START);
		step(100 * MSEC); /* its output is read */
		H.stopping = true;
		dispatch(RE_HARD_STOP);
		step_until_not(RUN_KILLING);
		H.stopping = false;
		break;
	}
	for (int i = 0; i < _OP_MAX; i++)
		script[i] = HOLD;
	actions[0] = '\0';
}

/* Drop what is left of the case: the run (teardown), the driver. */
static void finish(void)
{
	H.tearing_down = true;
	if (R)
		dispatch(RE_ABANDON);
	H.tearing_down = false;
	ck_assert_ptr_null(R);
	step(20 * MSEC);
	D = drv_free(D);
	H.drv = NULL;
}

/* ---------------------------------------------------------------- the cases */

struct cell_case {
	enum from from;       /* how the run gets to the state... */
	enum run_state state; /* ...which is this */
	enum run_event ev;    /* what happens */
	bool natural;         /* the event comes from the loop (a child's exit), not dispatched */
	bool stopping;        /* the host is in a hard stop */
	enum run_state next;  /* the state right after the event (RUN_DONE: freed) */
	const char *actions;  /* what the run asked of the driver and the host, in order,
	                       * while the loop ran a little after the event */
};

#define C(f, s, e, n, a)                                                                           \
	{                                                                                          \
		.from = f, .state = s, .ev = e, .next = n, .actions = a                            \
	}

static const struct cell_case cases[] = {
    /* CLAIMED */
    C(F_CLAIMED, RUN_CLAIMED, RE_START, RUN_RUNNING, ""),
    C(F_CLAIMED_BAD, RUN_CLAIMED, RE_REJECT, RUN_REPORTING, "body complete"),
    C(F_CLAIMED, RUN_CLAIMED, RE_RELEASE, RUN_RELEASING, "release"),
    C(F_CLAIMED, RUN_CLAIMED, RE_LEASE_LOST, RUN_DONE, "done"),
    C(F_CLAIMED, RUN_CLAIMED, RE_WAIT, RUN_WAITING, ""),
    C(F_CLAIMED, RUN_CLAIMED, RE_READY, RUN_READY, ""),
    C(F_CLAIMED, RUN_CLAIMED, RE_RENEW, RUN_CLAIMED, "renew"),
    C(F_CLAIMED, RUN_CLAIMED, RE_DEADLINE, RUN_DONE, "done"),
    C(F_CLAIMED, RUN_CLAIMED, RE_ABANDON, RUN_DONE, "done"),
    /* WAITING */
    C(F_WAITING, RUN_WAITING, RE_START, RUN_RUNNING, ""),
    C(F_WAITING, RUN_WAITING, RE_RELEASE, RUN_RELEASING, "release"),
    C(F_WAITING, RUN_WAITING, RE_CANCEL, RUN_REPORTING, "body complete"),
    C(F_WAITING, RUN_WAITING, RE_LEASE_LOST, RUN_DONE, "done"),
    {.from = F_WAITING,
     .state = RUN_WAITING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_RELEASING,
     .actions = "release"},
    C(F_WAITING, RUN_WAITING, RE_RENEW, RUN_WAITING, "renew"),
    C(F_WAITING, RUN_WAITING, RE_DEADLINE, RUN_DONE, "done"),
    C(F_WAITING, RUN_WAITING, RE_ABANDON, RUN_DONE, "done"),
    /* READY: claimed ahead of a free slot; its timer is the hold */
    C(F_READY, RUN_READY, RE_START, RUN_RUNNING, ""),
    C(F_READY, RUN_READY, RE_WAIT, RUN_WAITING, ""),
    C(F_READY, RUN_READY, RE_RELEASE, RUN_RELEASING, "release"),
    C(F_READY, RUN_READY, RE_TIMER, RUN_RELEASING, "release"),
    C(F_READY, RUN_READY, RE_CANCEL, RUN_REPORTING, "body complete"),
    C(F_READY, RUN_READY, RE_LEASE_LOST, RUN_DONE, "done"),
    {.from = F_READY,
     .state = RUN_READY,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_RELEASING,
     .actions = "release"},
    C(F_READY, RUN_READY, RE_RENEW, RUN_READY, "renew"),
    C(F_READY, RUN_READY, RE_DEADLINE, RUN_DONE, "done"),
    C(F_READY, RUN_READY, RE_ABANDON, RUN_DONE, "done"),
    /* RUNNING */
    {.from = F_RUNNING_SAY,
     .state = RUN_RUNNING,
     .ev = RE_EXITED,
     .natural = true,
     .next = RUN_FLUSHING,
     .actions = "log"},
    /* SIGTERM: the child goes, and its outcome is reported */
    C(F_RUNNING, RUN_RUNNING, RE_TIMER, RUN_KILLING, "body complete"),
    C(F_RUNNING, RUN_RUNNING, RE_CANCEL, RUN_KILLING, "body complete"),
    /* lost: SIGKILL at once, so the exit follows, and nothing is written */
    C(F_RUNNING, RUN_RUNNING, RE_LEASE_LOST, RUN_KILLING, "done"),
    /* stopped for shutdown: given back once it is gone */
    {.from = F_RUNNING,
     .state = RUN_RUNNING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_KILLING,
     .actions = "release"},
    C(F_RUNNING, RUN_RUNNING, RE_RENEW, RUN_RUNNING, "renew"),
    C(F_RUNNING, RUN_RUNNING, RE_DEADLINE, RUN_KILLING, "done"),
    C(F_RUNNING, RUN_RUNNING, RE_ABANDON, RUN_DONE, "done"),
    /* KILLING (cancelled, SIGTERM sent) */
    {.from = F_KILLING,
     .state = RUN_KILLING,
     .ev = RE_EXITED,
     .natural = true,
     .next = RUN_FLUSHING,
     .actions = "log"},
    /* (the child then exits on its SIGTERM: its log goes out) */
    C(F_KILLING, RUN_KILLING, RE_CANCEL, RUN_KILLING, "log"),
    C(F_KILLING, RUN_KILLING, RE_LEASE_LOST, RUN_KILLING, "done"),
    /* stopping: the cancelled run's outcome goes to the spool, log unshipped */
    {.from = F_KILLING,
     .state = RUN_KILLING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_KILLING,
     .actions = "body spool done"},
    C(F_KILLING, RUN_KILLING, RE_RENEW, RUN_KILLING, "renew log"),
    C(F_KILLING, RUN_KILLING, RE_DEADLINE, RUN_KILLING, "done"),
    C(F_KILLING, RUN_KILLING, RE_ABANDON, RUN_DONE, "done"),
    /* FLUSHING (the log append held) */
    C(F_FLUSHING, RUN_FLUSHING, RE_LOG_FLUSHED, RUN_REPORTING, "body complete"),
    C(F_FLUSHING, RUN_FLUSHING, RE_CANCEL, RUN_FLUSHING, ""),
    C(F_FLUSHING, RUN_FLUSHING, RE_LEASE_LOST, RUN_DONE, "done"),
    {.from = F_FLUSHING,
     .state = RUN_FLUSHING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_DONE,
     .actions = "body spool done"},
    C(F_FLUSHING, RUN_FLUSHING, RE_TIMER, RUN_REPORTING, "body complete"),
    C(F_FLUSHING, RUN_FLUSHING, RE_RENEW, RUN_FLUSHING, "renew"),
    /* the child is gone: the result is still offered, the API decides */
    C(F_FLUSHING, RUN_FLUSHING, RE_DEADLINE, RUN_FLUSHING, ""),
    C(F_FLUSHING, RUN_FLUSHING, RE_ABANDON, RUN_DONE, "done"),
    /* REPORTING (the completion held, or in its backoff) */
    C(F_REPORTING, RUN_REPORTING, RE_REPORTED, RUN_DONE, "done"),
    C(F_REPORTING, RUN_REPORTING, RE_CANCEL, RUN_REPORTING, ""),
    C(F_REPORTING, RUN_REPORTING, RE_LEASE_LOST, RUN_DONE, "done"),
    {.from = F_REPORTING,
     .state = RUN_REPORTING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_DONE,
     .actions = "spool done"},
    C(F_REPORTING_BACKOFF, RUN_REPORTING, RE_TIMER, RUN_REPORTING, "complete"),
    C(F_REPORTING, RUN_REPORTING, RE_RENEW, RUN_REPORTING, "renew"),
    C(F_REPORTING, RUN_REPORTING, RE_DEADLINE, RUN_REPORTING, ""),
    /* a stop that overran: the result made goes to the spool */
    C(F_REPORTING, RUN_REPORTING, RE_ABANDON, RUN_DONE, "spool done"),
    /* RELEASING (the release held, or in its backoff) */
    C(F_RELEASING, RUN_RELEASING, RE_RELEASED, RUN_DONE, "done"),
    C(F_RELEASING, RUN_RELEASING, RE_CANCEL, RUN_RELEASING, ""),
    C(F_RELEASING, RUN_RELEASING, RE_LEASE_LOST, RUN_DONE, "done"),
    {.from = F_RELEASING,
     .state = RUN_RELEASING,
     .ev = RE_HARD_STOP,
     .stopping = true,
     .next = RUN_RELEASING,
     .actions = ""},
    C(F_RELEASING_BACKOFF, RUN_RELEASING, RE_TIMER, RUN_RELEASING, "release"),
    /* a driver without release: the run is dropped here */
    C(F_RELEASING_BARE, RUN_RELEASING, RE_TIMER, RUN_DONE, "done"),
    C(F_RELEASING, RUN_RELEASING, RE_RENEW, RUN_RELEASING, "renew"),
    C(F_RELEASING, RUN_RELEASING, RE_DEADLINE, RUN_DONE, "done"),
    C(F_RELEASING, RUN_RELEASING, RE_ABANDON, RUN_DONE, "done"),
    /* killed by a hard stop: its log (and a line saying so) goes first, then
     * the release */
    {.from = F_RELEASING_STOPPED,
     .state = RUN_RELEASING,
     .ev = RE_LOG_FLUSHED,
     .stopping = true,
     .next = RUN_RELEASING,
     .actions = "log release"},
    {.from = F_RELEASING_STOPPED,
     .state = RUN_RELEASING,
     .ev = RE_LEASE_LOST,
     .stopping = true,
     .next = RUN_DONE,
     .actions = "done"},
};

static const char *case_name(const struct cell_case *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s x %s (case from %d)", run_state_name(c->state),
	         run_event_name(c->ev), (int)c->from);
	return buf;
}

START_TEST(test_cell)
{
	const struct cell_case *c = &cases[_i];
	char name[96];
	enum run_state after;

	case_name(c, name, sizeof(name));
	reach(c->from);
	ck_assert_msg(now_state() == c->state, "%s: reached %s", name, run_state_name(now_state()));
	H.stopping = c->stopping;
	H.kill_now = false;
	if (c->natural)
		step_until_not(c->state);
	else
		dispatch(c->ev);
	after = now_state();
	ck_assert_msg(after == c->next, "%s: next state %s, expected %s", name,
	              run_state_name(after), run_state_name(c->next));
	step(300 * MSEC);
	ck_assert_msg(streq(actions, c->actions), "%s: actions \"%s\", expected \"%s\"", name,
	              actions, c->actions);
	H.stopping = false;
	finish();
}
END_TEST

/* Every non-empty cell of the table has a case, and every case a cell. */
START_TEST(test_every_cell_covered)
{
	for (int s = 0; s < RUN_DONE; s++)
		for (int e = 0; e < _RE_MAX; e++) {
			bool has = false;

			for (size_t i = 0; i < ELEMENTSOF(cases); i++)
				has = has || (cases[i].state == (enum run_state)s &&
				              cases[i].ev == (enum run_event)e);
			ck_assert_msg(has == run_cell(s, e), "%s x %s: %s", run_state_name(s),
			              run_event_name(e),
			              has ? "a case for an empty cell" : "a cell without a case");
		}
}
END_TEST

/* The table's index by run id: every run of an id found (a re-granted run
 * is held twice), none after it left, across the index's growth. */
#define IDS 3000
START_TEST(test_table_ids)
{
	struct run_table t = {0};
	struct run *runs = calloc(IDS + 1, sizeof(*runs));
	char ids[IDS][16];
	int found;

	ck_assert_ptr_nonnull(runs);
	for (int i = 0; i < IDS; i++) {
		snprintf(ids[i], sizeof(ids[i]), "r-%d", i);
		runs[i] = (struct run){.id = ids[i], .state = RUN_RUNNING};
		run_table_add(&t, &runs[i]);
	}
	runs[IDS] = (struct run){.id = ids[7], .state = RUN_CLAIMED}; /* r-7 again */
	run_table_add(&t, &runs[IDS]);
	for (int i = 0; i < IDS; i++) {
		struct run *r = run_table_find(&t, ids[i]);

		ck_assert_ptr_nonnull(r);
		ck_assert_str_eq(r->id, ids[i]);
	}
	found = 0;
	for (struct run *r = run_table_find(&t, "r-7"); r; r = run_table_find_next(r, "r-7"))
		found++;
	ck_assert_int_eq(found, 2);
	ck_assert_ptr_null(run_table_find(&t, "r-3000"));
	ck_assert_ptr_null(run_table_find(&t, NULL));
	run_table_remove(&t, &runs[7]);
	ck_assert_ptr_eq(run_table_find(&t, "r-7"), &runs[IDS]);
	ck_assert_ptr_null(run_table_find_next(&runs[IDS], "r-7"));
	for (int i = 0; i < IDS; i++)
		if (i != 7)
			run_table_remove(&t, &runs[i]);
	run_table_remove(&t, &runs[IDS]);
	ck_assert_uint_eq(t.n, 0);
	ck_assert_ptr_null(t.head);
	ck_assert_ptr_null(run_table_find(&t, "r-1"));
	run_table_free(&t);
	free(runs);
}
END_TEST

/* ---------------------------------------------------------------- the claimer */

static struct conf_ref *ch_conf(void *host)
{
	return CR;
}

static unsigned ch_slots(void *host)
{
	return CR->conf->worker.concurrency;
}

static bool ch_true(void *host)
{
	return true;
}

static bool ch_running = true; /* false: draining */

static bool ch_is_running(void *host)
{
	return ch_running;
}

static void ch_add(void *host, struct run *r)
{
	run_table_add(&T, r);
}

static void ch_idle(void *host)
{
}

static const struct claimer_host_ops claimer_ops = {
    .conf = ch_conf,
    .slots = ch_slots,
    .breaker = host_breaker,
    .running = ch_is_running,
    .may_start = ch_true,
    .add = ch_add,
    .idle = ch_idle,
};

/* Three workflows, two slots; the claims answer empty at once. */
static void claim_for(const struct drv_ops *ops, usec_t how_long)
{
	claimer_t *cl = NULL;
	struct conf *c = NULL;
	_cleanup_free_ char *path = NULL, *text = NULL, *err = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/claims.conf", dir), 0);
	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = http://127.0.0.1:9\n"
	                          "[worker]\nrun_dir = %1$s/run\nspool_dir = %1$s/spool\n"
	                          "concurrency = 2\nlong_poll = 0\npoll_interval = 10ms\n"
	                          "[workflow.a]\ncommand = %1$s/sleep.sh\n"
	                          "[workflow.b]\ncommand = %1$s/sleep.sh\n"
	                          "[workflow.c]\ncommand = %1$s/sleep.sh\n",
	                          dir),
	                 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	ck_assert_int_eq(
	    conf_load(&(struct conf_source){.path = path, .default_worker_id = "w1"}, &c, &err), 0);
	conf_ref_put(CR);
	CR = conf_ref_new(c);
	ck_assert_int_eq(drv_new_ops(E, c, M, ops, &D), 0);
	H.drv = D;
	run_table_free(&T);
	T = (struct run_table){0};
	ck_assert_int_eq(
	    claimer_new(
	        &(struct claimer_params){.ops = &claimer_ops,
	                                 .runs = &H,
	                                 .table = &T,
	                                 .m_claims = metrics_counter(M, "claims", "", "result"),
	                                 .m_queue_depth = metrics_gauge(M, "depth", "", NULL)},
	        &cl),
	    0);
	memset(claims_of, 0, sizeof(claims_of));
	claims_all = claim_inflight = claim_inflight_max = 0;
	claim_kick(cl);
	step(how_long);
	claimer_free(cl);
	D = drv_free(D);
}

/* Without DRV_CAP_MULTI_WORKFLOW: a claim per workflow, never more runs asked
 * for at once than there are free slots, and none of the three starves
 * although only two fit at a time. */
/* The outcome carries the end of the run's output (drv_outcome.log_tail), for
 * APIs without a log: bounded, from a line's start, stdout and stderr both. */
START_TEST(test_log_tail)
{
	drv_run_t *priv = calloc(1, sizeof(*priv));
	struct drv_grant g = {.id = strdup("r-1"),
	                      .workflow = strdup("chatty"),
	                      .attempt = 1,
	                      .ttl_s = 60,
	                      .input = strdup("null"),
	                      .input_len = 4,
	                      .lease_key = strdup("lease-1"),
	                      .usable_for_reject = true,
	                      .priv = priv};
	usec_t end = time_mono() + tu_timeout(10 * SEC);
	size_t n;

	for (int i = 0; i < _OP_MAX; i++)
		script[i] = DRV_OK;
	/* no log offsets, as the APIs that want a tail have none */
	ck_assert_int_eq(drv_new_ops(E, CR->conf, M, &bare_ops, &D), 0);
	H.drv = D;
	R = run_new(&H, CR, &g, ev_now(E));
	ck_assert_ptr_nonnull(R);
	drv_grant_done(&g);
	dispatch(RE_START);
	while (R) {
		ck_assert_msg(time_mono() < end, "the run stays %s", run_state_name(R->state));
		ck_assert_int_ge(ev_run_once(E, 10 * MSEC), 0);
	}
	D = drv_free(D);
	ck_assert_ptr_nonnull(last_tail);
	n = strlen(last_tail);
	ck_assert_uint_le(n, 4096);
	ck_assert_uint_ge(n, 4000 - 16);
	ck_assert_ptr_nonnull(startswith(last_tail, "line "));
	ck_assert_ptr_nonnull(strstr(last_tail, "line 499\nbye\n"));
	ck_assert_str_eq(last_tail + n - 4, "bye\n");
}
END_TEST

START_TEST(test_claim_lanes)
{
	claim_for(&bare_ops, 1 * SEC);
	ck_assert_uint_eq(claims_all, 0);
	ck_assert_uint_le(claim_inflight_max, 2);
	ck_assert_uint_eq(claim_inflight_max, 2);
	for (size_t i = 0; i < ELEMENTSOF(claim_wfs); i++)
		ck_assert_msg(claims_of[i] >= 2, "workflow %s claimed %u times", claim_wfs[i],
		              claims_of[i]);
}
END_TEST

/* With it: one claim at a time naming every workflow, as before. */
START_TEST(test_claim_one)
{
	claim_for(&fake_ops, 500 * MSEC);
	ck_assert_uint_ge(claims_all, 2);
	ck_assert_uint_eq(claims_of[0] + claims_of[1] + claims_of[2], 0);
	ck_assert_uint_eq(claim_inflight_max, 2);
}
END_TEST

/* ---------------------------------------------------------------- slots and the reporting queue */

/* The runs' host of the claims they came from, as the worker is: a run that
 * gives its slot or its place in the reporting queue back kicks the claimer. */
static claimer_t *CL;
static struct drv_ops queue_ops;

static void q_done(void *host, struct run *r)
{
	act("done");
	run_table_remove(&T, r);
	claim_run_unblocked(CL, r->id);
	claim_kick(CL);
}

static unsigned running_max; /* T.running's highest */

static void q_moved(void *host, struct run *r, enum run_state before)
{
	bool freed = run_table_moved(&T, r, before);

	running_max = MAX(running_max, T.running);
	if (freed && r->state != RUN_DONE)
		claim_kick(CL);
}

static const struct run_host_ops queue_host_ops = {
    .breaker = host_breaker,
    .breaker_changed = host_breaker_changed,
    .spool = host_spool,
    .done = q_done,
    .moved = q_moved,
};

/* One slot; the runs (say.sh) exit at once and ship their log; every
 * completion is held until the test answers it. */
static void queue_start(const char *worker_extra, unsigned runs)
{
	struct conf *c = NULL;
	_cleanup_free_ char *path = NULL, *text = NULL, *err = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/queue.conf", dir), 0);
	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = http://127.0.0.1:9\n"
	                          "[worker]\nrun_dir = %1$s/run\nspool_dir = %1$s/spool\n"
	                          "long_poll = 0\npoll_interval = 10ms\n"
	                          "lease_ttl = 60s\nlease_refresh = 20s\n%2$s\n"
	                          "[workflow.say]\ncommand = %1$s/say.sh\n"
	                          "[workflow.sleep]\ncommand = %1$s/sleep.sh\n",
	                          dir, worker_extra),
	                 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	ck_assert_msg(conf_load(&(struct conf_source){.path = path, .default_worker_id = "w1"}, &c,
	                        &err) == 0,
	              "%s", err);
	conf_ref_put(CR);
	CR = conf_ref_new(c);
	for (int i = 0; i < _OP_MAX; i++)
		script[i] = DRV_OK;
	script[OP_RENEW] = HOLD;
	script[OP_COMPLETE] = HOLD;
	queue_ops = fake_ops; /* what it took of a log is what was sent: no offsets to answer */
	queue_ops.caps &= ~(unsigned)DRV_CAP_LOG_OFFSETS;
	ck_assert_int_eq(drv_new_ops(E, c, M, &queue_ops, &D), 0);
	H.drv = D;
	H.ops = &queue_host_ops;
	run_table_free(&T);
	T = (struct run_table){0};
	grant_left = runs;
	granted = claims_sent = 0;
	running_max = 0;
	ch_running = true;
	claim_inflight = claim_inflight_max = 0;
	ck_assert_int_eq(
	    claimer_new(
	        &(struct claimer_params){.ops = &claimer_ops,
	                                 .runs = &H,
	                                 .table = &T,
	                                 .m_claims = metrics_counter(M, "claims", "", "result"),
	                                 .m_queue_depth = metrics_gauge(M, "depth", "", NULL)},
	        &CL),
	    0);
	claim_kick(CL);
}

/* Until cond holds, stepping the loop (a run's child, a claim's answer). */
#define STEP_UNTIL(cond)                                                                           \
	do {                                                                                       \
		usec_t _end = time_mono() + tu_timeout(10 * SEC);                                  \
		while (!(cond)) {                                                                  \
			ck_assert_msg(time_mono() < _end,                                          \
			              "never: %s (held %u: %u running, %u "                        \
			              "reporting; %u granted)",                                    \
			              #cond, T.n, T.running, T.reporting, granted);                \
			ck_assert_int_ge(ev_run_once(E, 10 * MSEC), 0);                            \
		}                                                                                  \
	} while (0)

static unsigned in_state(enum run_state s)
{
	unsigned n = 0;

	for (const struct run *r = T.head; r; r = r->next)
		n += r->state == s;
	return n;
}

/* Every completion answered, the runs gone, the claimer and driver freed. */
static void queue_finish(void)
{
	grant_left = 0;
	release_claims();
	STEP_UNTIL((answer_held(OP_COMPLETE, DRV_OK), T.n == 0));
	CL = claimer_free(CL);
	step(20 * MSEC);
	D = drv_free(D);
	H.drv = NULL;
	H.ops = &host_ops;
}

/* One slot: the run after a run whose completion is still in flight is
 * claimed and runs; its completion does not wait for the first one's. */
START_TEST(test_slot_free_while_reporting)
{
	queue_start("concurrency = 1", 2);
	STEP_UNTIL(in_state(RUN_REPORTING) == 2);
	ck_assert_uint_eq(granted, 2);
	ck_assert_uint_eq(T.reporting, 2);
	ck_assert_uint_eq(T.running, 0);
	queue_finish();
}
END_TEST

/* One slot and worker.prefetch = 1: a run is claimed ahead of the slot and
 * waits in RUN_READY; it starts as the running one exits, while that one's
 * completion is still held, and the slot never holds two children. */
START_TEST(test_prefetch)
{
	queue_start("concurrency = 1\nprefetch = 1\nprefetch_hold = 1min", 10);
	STEP_UNTIL(granted == 2);
	ck_assert_uint_eq(T.ready + T.running, 2);
	STEP_UNTIL(T.reporting == 3);
	step(100 * MSEC);
	/* three runs went through while the first completion was held; then
	 * the full reporting queue stopped claims, the one claimed ahead ran */
	ck_assert_uint_eq(granted, 3);
	ck_assert_uint_eq(T.ready, 0);
	ck_assert_uint_eq(T.running, 0);
	ck_assert_uint_eq(running_max, 1);
	queue_finish();
	ck_assert_uint_eq(running_max, 1);
}
END_TEST

/* A run claimed ahead of its slot whose workflow's breaker opened while it
 * waited is given back (blocked_workflow) at once, and is not started when
 * the slot frees. */
START_TEST(test_prefetch_breaker)
{
	grant_wf = "sleep";
	queue_start("concurrency = 1\nprefetch = 1\nprefetch_hold = 1min", 2);
	STEP_UNTIL(T.running == 1 && T.ready == 1);
	for (int i = 0; i < 5; i++)
		(void)breaker_record(&B, true, ev_now(E));
	ck_assert(!breaker_allows(&B));
	actions[0] = '\0';
	claim_kick(CL); /* as the worker does when a breaker changes */
	ck_assert_uint_eq(T.ready, 0);
	for (struct run *r = T.head; r; r = r->next)
		if (r->state == RUN_RUNNING)
			run_dispatch(r, RE_CANCEL);
	STEP_UNTIL(T.ready == 0 && T.running == 0);
	step(200 * MSEC);
	ck_assert_uint_eq(T.running, 0);
	ck_assert_uint_eq(running_max, 1);
	ck_assert_msg(strstr(actions, "release"), "actions: %s", actions);
	grant_wf = "say";
	queue_finish();
}
END_TEST

/* A full reporting queue (a dead API) stops claims; a completion answered
 * makes room for one more run. */
START_TEST(test_reporting_queue_full)
{
	queue_start("concurrency = 1\nmax_reporting = 2", 10);
	STEP_UNTIL(T.reporting == 2);
	step(300 * MSEC); /* claims would have gone out by now */
	ck_assert_uint_eq(granted, 2);
	ck_assert_uint_eq(T.n, 2);
	ck_assert_uint_eq(T.running, 0);
	ck_assert_uint_eq(claim_inflight, 0); /* no claim for runs is open */
	ck_assert(answer_held(OP_COMPLETE, DRV_OK));
	STEP_UNTIL(granted == 3 && T.reporting == 2);
	step(100 * MSEC);
	ck_assert_uint_eq(granted, 3);
	queue_finish();
}
END_TEST

/* Four slots, the first claim's four runs exit one by one while the claim
 * for the first freed slot is still out: each freed slot is claimed at once
 * by a claim ahead, the claims in flight never ask for more runs than there
 * are free slots, and what they bring fits. */
START_TEST(test_claim_ahead)
{
	claim_hold = 2; /* the first claim is answered, the next ones held */
	queue_start("concurrency = 4", 100);
	script[OP_COMPLETE] = DRV_OK;
	STEP_UNTIL(T.running == 0 && granted == 4 && claim_inflight == 4);
	ck_assert_uint_ge(claims_held(), 2); /* more than one claim was out at once */
	ck_assert_uint_le(claim_inflight_max, 4);
	step(100 * MSEC);
	ck_assert_uint_eq(claim_inflight, 4); /* no claim beyond the free slots */
	release_claims();
	STEP_UNTIL(granted >= 8);
	ck_assert_uint_le(T.running, 4);
	ck_assert_uint_le(claim_inflight_max, 4);
	queue_finish();
}
END_TEST

/* A drain with claims ahead out: the one with the long poll is cancelled on
 * the server; the claims ahead are left to end and what they bring is given
 * back unstarted. */
START_TEST(test_claim_ahead_stop)
{
	claim_hold = 2;
	queue_start("concurrency = 4", 100);
	script[OP_COMPLETE] = DRV_OK;
	STEP_UNTIL(T.n == 0 && granted == 4 && claim_inflight == 4);
	ck_assert_uint_ge(claims_held(), 2);
	actions[0] = '\0';
	ch_running = false;
	claim_stop(CL);
	ck_assert_str_eq(actions, "claim_cancel");
	ck_assert(claimer_busy(CL)); /* the claims ahead, left to end */
	release_claims();
	STEP_UNTIL(!claimer_busy(CL) && T.n == 0);
	ck_assert_uint_eq(T.running, 0);
	ck_assert_msg(strstr(actions, "release"), "actions: %s", actions);
	ck_assert_msg(!strstr(actions, "complete"), "a run claimed ahead was started: %s", actions);
	queue_finish();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("worker");
	TCase *tc = tcase_create("table");
	TCase *tcc = tcase_create("claims");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_cell, 0, (int)ELEMENTSOF(cases));
	tcase_add_test(tc, test_every_cell_covered);
	tcase_add_test(tc, test_table_ids);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(tcc, setup, teardown);
	tcase_add_test(tcc, test_claim_lanes);
	tcase_add_test(tcc, test_log_tail);
	tcase_add_test(tcc, test_claim_one);
	suite_add_tcase(s, tcc);
	TCase *tq = tcase_create("reporting");
	tcase_add_checked_fixture(tq, setup, teardown);
	tcase_set_timeout(tq, 60);
	tcase_add_test(tq, test_slot_free_while_reporting);
	tcase_add_test(tq, test_reporting_queue_full);
	tcase_add_test(tq, test_prefetch);
	tcase_add_test(tq, test_prefetch_breaker);
	tcase_add_test(tq, test_claim_ahead);
	tcase_add_test(tq, test_claim_ahead_stop);
	suite_add_tcase(s, tq);
	return tu_run(s);
}
