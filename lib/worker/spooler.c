/* The spool's delivery: see spooler.h.  The files are spool.c's. */
#include "worker/spooler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/random.h"
#include "worker/spool.h"

#define SPOOL_RETRY_BASE (2 * USEC_PER_SEC)
#define SPOOL_RETRY_CAP (5 * USEC_PER_MINUTE)

struct spooler {
	struct spooler_params p;
	struct spool_item *items;
	unsigned inflight;
	unsigned pending;
	struct spool_job *jobs; /* results being written to the spool, off the loop */
	bool forced;            /* the hard stop overran: no more waiting for them */
	bool delivering;
	ev_timer_t *timer;
	unsigned attempt;
};

static const struct conf *spooler_conf(const struct spooler *sp)
{
	return sp->p.conf(sp->p.ud);
}

static void spooler_idle(struct spooler *sp)
{
	sp->p.idle(sp->p.ud);
}

struct spool_item {
	struct spooler *sp;
	struct spool_entry e;
	drv_req_t *req;
	drv_run_t *priv; /* the driver's run, restored from the body */
	logship_t *log;  /* shipping e.tail, before the completion */
	bool log_done;
	struct spool_item *next;
};

static void spool_gauge(struct spooler *sp)
{
	metric_set(sp->p.m_pending, sp->pending);
}

static void spool_dropped(struct spooler *sp, const char *reason)
{
	metric_add(sp->p.m_dropped, 1, reason);
}

/* A result going to the spool: the write (two files, each fsync'd with its
 * directory) runs on a helper thread, since a child can make that fsync slow
 * (gigabytes of dirty page cache on the same file system) and a spool on a hung
 * file system would stall every other run.  The job copies what the write and
 * its report need: the run is gone by the time it is done. */
struct spool_job {
	struct spooler *sp;
	struct spool_job *next, **pprev; /* sp->jobs, on the loop */
	char *dir, *body, *tail_data, *run_id, *workflow;
	char name[SPOOL_NAME_MAX];
	size_t max_body;
	struct spool_tail tail;
	int err; /* set by the helper thread */
	bool ran;
};

static void spool_report(struct spooler *sp, const struct log_fields *f, const char *dir,
                         const char *name, size_t tail_len, int err)
{
	if (err < 0) {
		spool_dropped(sp, err == -EFBIG       ? "too_large"
		                  : err == -ECANCELED ? "write_unfinished"
		                                      : "write_failed");
		log_emit(LOG_ERR, f,
		         "cannot spool the result to %s: %s; the run returns to the "
		         "queue when its lease expires",
		         dir,
		         err == -ECANCELED ? "the daemon exited before it was written"
		                           : strerror(-err));
		return;
	}
	sp->pending++;
	spool_gauge(sp);
	log_emit(LOG_NOTICE, f,
	         "result spooled to %s as %s (with %zu log bytes still to ship), to be delivered "
	         "at next start",
	         dir, name, tail_len);
}

static struct spool_job *spool_job_free(struct spool_job *j)
{
	if (j) {
		free(j->dir);
		free(j->body);
		free(j->tail_data);
		free(j->run_id);
		free(j->workflow);
		free(j);
	}
	return NULL;
}

static struct spool_job *spool_job_new(struct spooler *sp, const struct run *r, const char *name,
                                       const struct spool_tail *tail)
{
	struct spool_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->sp = sp;
	j->dir = strdup(spooler_conf(sp)->worker.spool_dir);
	j->body = strdup(r->body);
	j->run_id = strdup(r->id);
	j->workflow = strdup(r->workflow ? r->workflow : "");
	j->tail = *tail;
	j->tail_data = malloc(MAX(tail->len, 1));
	if (!j->dir || !j->body || !j->run_id || !j->workflow || !j->tail_data)
		return spool_job_free(j);
	memcpy(j->tail_data, tail->data ? tail->data : "", tail->len);
	j->tail.data = j->tail_data;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->max_body = spool_max_body(r->cref->conf->worker.max_output_bytes);
	return j;
}

static void spool_job_work(void *arg)
{
	struct spool_job *j = arg;

	j->err = spool_write(j->dir, j->name, j->body, j->max_body, &j->tail);
	j->ran = true;
}

static void spool_job_done(void *arg, int q)
{
	struct spool_job *j = arg;
	struct spooler *sp = j->sp;
	struct log_fields f = {
	    .run_id = j->run_id, .workflow = j->workflow, .attempt = j->tail.attempt};

	*j->pprev = j->next;
	if (j->next)
		j->next->pprev = j->pprev;
	spool_report(sp, &f, j->dir, j->name, j->tail.len,
	             j->ran  ? j->err
	             : q < 0 ? q
	                     : -ECANCELED);
	spool_job_free(j);
	spooler_idle(sp);
}

void spooler_write(struct spooler *sp, struct run *r)
{
	const char *dir = spooler_conf(sp)->worker.spool_dir;
	struct log_fields f = {.run_id = r->id, .workflow = r->workflow, .attempt = r->attempt};
	struct spool_tail tail = {.attempt = r->attempt};
	char name[SPOOL_NAME_MAX];
	struct spool_job *j = NULL;
	int q = r->body ? spool_entry_name(r->id, r->lease_key ? r->lease_key : r->id, name,
	                                   sizeof(name))
	                : -ENOMEM;

	if (q >= 0 && r->log && r->spool_log)
		logship_unshipped(r->log, &tail.data, &tail.len, &tail.where);
	if (q >= 0)
		j = spool_job_new(sp, r, name, &tail);
	if (j &&
	    offload_submit(sp->p.offload, NULL, spool_job_work, spool_job_done, j, NULL) >= 0) {
		j->next = sp->jobs;
		if (j->next)
			j->next->pprev = &j->next;
		j->pprev = &sp->jobs;
		sp->jobs = j;
		return;
	}
	spool_job_free(j);
	if (q >= 0) /* no helper thread, or no memory for the copy: here, as before */
		q = spool_write(dir, name, r->body,
		                spool_max_body(r->cref->conf->worker.max_output_bytes), &tail);
	spool_report(sp, &f, dir, name, tail.len, q);
}

/* Teardown, after offload_free: spool writes still inside a helper thread (a
 * hung file system) past the exit bound.  The threads still use them: left,
 * not freed. */
static void spool_jobs_abandon(struct spooler *sp)
{
	for (struct spool_job *j = sp->jobs; j; j = j->next) {
		struct log_fields f = {
		    .run_id = j->run_id, .workflow = j->workflow, .attempt = j->tail.attempt};

		log_emit(LOG_ERR, &f,
		         "spooling the result to %s did not finish; exiting without it: it may "
		         "be lost, and the run returns to the queue when its lease expires",
		         j->dir);
		spool_dropped(sp, "write_unfinished");
	}
	sp->jobs = NULL;
}

static void spool_item_free(struct spool_item *it)
{
	drv_cancel(it->req);
	logship_free(it->log);
	if (it->priv)
		drv_ops(it->sp->p.drv)->run_free(it->priv);
	spool_entry_done(&it->e);
	free(it);
}

static void spool_item_drop(struct spool_item *it)
{
	struct spooler *sp = it->sp;
	struct spool_item **pp;

	spool_remove(spooler_conf(sp)->worker.spool_dir, it->e.name);
	sp->pending--;
	spool_gauge(sp);
	for (pp = &sp->items; *pp != it; pp = &(*pp)->next)
		;
	*pp = it->next;
	spool_item_free(it);
}

static void spool_deliver_all(struct spooler *sp);

/* The driver's one classification of a completion's answer, as for a live
 * completion: delivered; refused for good or the lease is gone (dropped);
 * anything else is tried again. */
static void on_spool_complete(const struct drv_answer *a, void *userdata)
{
	struct spool_item *it = userdata;
	struct spooler *sp = it->sp;
	struct log_fields f = {.run_id = it->e.run_id};

	it->req = NULL;
	sp->inflight--;
	if (a->verdict == DRV_OK) {
		log_emit(LOG_INFO, &f, "spooled result delivered (%s)", it->e.name);
		metric_add(sp->p.m_delivered, 1);
		spool_item_drop(it);
	} else if (a->verdict == DRV_LOST || a->verdict == DRV_REFUSED) {
		log_emit(LOG_WARNING, &f, "spooled result refused (%s), dropping it (%s)",
		         a->detail, it->e.name);
		spool_dropped(sp, "refused");
		spool_item_drop(it);
	} else if (!ev_timer_armed(sp->timer)) {
		log_emit(LOG_WARNING, &f, "spooled result %s not delivered (%s), retrying",
		         it->e.name, a->detail);
		ev_timer_arm(sp->timer, backoff_full_jitter(SPOOL_RETRY_BASE, SPOOL_RETRY_CAP,
		                                            sp->attempt++, 0));
	}
	spooler_idle(sp);
}

/* The driver's run, rebuilt from the spooled body; an entry it cannot use is
 * dropped (false). */
static bool spool_restore(struct spool_item *it)
{
	struct spooler *sp = it->sp;
	struct log_fields f = {.run_id = it->e.run_id};
	int q;

	if (it->priv)
		return true;
	q = drv_ops(sp->p.drv)->restore(sp->p.drv, it->e.run_id, it->e.body, &it->priv);
	if (q >= 0)
		return true;
	it->priv = NULL;
	log_emit(LOG_ERR, &f, "spooled result %s unusable (%s), dropping it", it->e.name,
	         strerror(-q));
	spool_dropped(sp, "unreadable");
	spool_item_drop(it);
	return false;
}

static void spool_post(struct spool_item *it)
{
	struct spooler *sp = it->sp;

	if (drv_ops(sp->p.drv)->complete(sp->p.drv, it->priv, it->e.body, on_spool_complete, it,
	                                 &it->req) >= 0)
		sp->inflight++;
	else
		it->req = NULL;
}

/* The tail is shipped (or the server will not take it): the completion says
 * how long the log is now, where the driver's completion carries it. */
static void on_spool_log(logship_t *ls, enum logship_event event, void *userdata)
{
	struct spool_item *it = userdata;
	struct spooler *sp = it->sp;
	struct logship_stats st;
	struct log_fields f = {.run_id = it->e.run_id};

	logship_get_stats(ls, &st);
	it->log_done = true;
	sp->inflight--;
	if (event == LOGSHIP_LEASE_LOST)
		log_emit(LOG_WARNING, &f, "spooled log of %s refused (lease lost)", it->e.name);
	else if (!drv_has(sp->p.drv, DRV_CAP_LOG_LENGTH) ||
	         drv_ops(sp->p.drv)->body_set_log_length(&it->e.body, st.acked) >= 0)
		log_emit(LOG_INFO, &f, "spooled log of %s shipped, the log holds %llu bytes",
		         it->e.name, (unsigned long long)st.acked);
	spool_post(it);
	spooler_idle(sp);
}

static int spool_ship_log(struct spool_item *it)
{
	struct spooler *sp = it->sp;
	const struct drv_ops *ops = drv_ops(sp->p.drv);
	const char *key = ops->run_lease_key ? ops->run_lease_key(it->priv) : NULL;
	struct logship_params p = {
	    .ev = sp->p.ev,
	    .drv = sp->p.drv,
	    .run = it->priv,
	    .lease_key = key ? key : it->e.run_id,
	    .buffer_cap = it->e.tail_len + 1,
	    .request_timeout = spooler_conf(sp)->api.request_timeout,
	    .attempt = it->e.attempt,
	    .resume = &it->e.where,
	};
	int q = logship_new(&p, on_spool_log, it, &it->log);

	if (q < 0)
		return q;
	sp->inflight++;
	logship_write(it->log, it->e.tail, it->e.tail_len);
	logship_finish(it->log);
	return 0;
}

static void spool_deliver_all(struct spooler *sp)
{
	struct spool_item *it, *next;

	for (it = sp->items; it; it = next) {
		next = it->next;
		if (it->req || (it->log && !it->log_done) || !spool_restore(it))
			continue;
		if (it->e.tail_len > 0 && !it->log && spool_ship_log(it) >= 0)
			continue;
		spool_post(it);
	}
}

/* Drain or stop: a tail still shipping stays in the spool for the next start. */
static void spool_stop_logs(struct spooler *sp)
{
	for (struct spool_item *it = sp->items; it; it = it->next)
		if (it->log && !it->log_done) {
			logship_abandon(it->log);
			it->log_done = true;
			sp->inflight--;
		}
}

static void on_timer(ev_timer_t *t, void *userdata)
{
	struct spooler *sp = userdata;

	if (sp->delivering)
		spool_deliver_all(sp);
}

static int spool_load_one(struct spool_entry *e, void *userdata)
{
	struct spooler *sp = userdata;
	struct spool_item *it;

	if (e->error < 0) {
		struct log_fields f = {.run_id = e->run_id};

		log_emit(LOG_ERR, &f, "cannot read the spooled result %s: %s; left in place",
		         e->name, strerror(-e->error));
		spool_dropped(sp, e->error == -EFBIG ? "too_large" : "unreadable");
		spool_entry_done(e);
		return 0;
	}
	it = calloc(1, sizeof(*it));
	if (!it) {
		spool_entry_done(e);
		return -ENOMEM;
	}
	it->sp = sp;
	it->e = *e;
	it->next = sp->items;
	sp->items = it;
	sp->pending++;
	return 0;
}

static void on_spool_cleaned(const char *name, void *userdata)
{
	log_info("removed %s/%s, left in the spool by a crash", (const char *)userdata, name);
}

void spooler_load(struct spooler *sp)
{
	const struct conf *c = spooler_conf(sp);
	int q;

	spool_clean(c->worker.spool_dir, on_spool_cleaned, c->worker.spool_dir);
	q = spool_foreach(c->worker.spool_dir, spool_max_body(c->worker.max_output_bytes),
	                  spool_load_one, sp);
	if (q < 0)
		log_warning("cannot read the spool %s: %s, ignoring", c->worker.spool_dir,
		            strerror(-q));
	if (sp->pending)
		log_notice("delivering %u spooled results from a previous run", sp->pending);
	spool_gauge(sp);
}

int spooler_new(const struct spooler_params *p, struct spooler **ret)
{
	struct spooler *sp = calloc(1, sizeof(*sp));
	int q;

	if (!sp)
		return -ENOMEM;
	sp->p = *p;
	q = ev_timer_add(p->ev, USEC_INFINITY, on_timer, sp, &sp->timer);
	if (q < 0) {
		free(sp);
		return q;
	}
	*ret = sp;
	return 0;
}

struct spooler *spooler_free(struct spooler *sp)
{
	struct spool_item *it, *next;

	if (!sp)
		return NULL;
	for (it = sp->items; it; it = next) {
		next = it->next;
		spool_item_free(it);
	}
	spool_jobs_abandon(sp);
	ev_timer_del(sp->timer);
	free(sp);
	return NULL;
}

void spooler_deliver(struct spooler *sp)
{
	sp->delivering = true;
	spool_deliver_all(sp);
}

void spooler_stop(struct spooler *sp)
{
	sp->delivering = false;
	ev_timer_disarm(sp->timer);
	spool_stop_logs(sp);
}

bool spooler_busy(const struct spooler *sp)
{
	return sp->inflight > 0 || (sp->jobs && !sp->forced);
}

void spooler_force(struct spooler *sp)
{
	sp->inflight = 0;
	sp->forced = true;
}

unsigned spooler_pending(const struct spooler *sp)
{
	return sp->pending;
}
