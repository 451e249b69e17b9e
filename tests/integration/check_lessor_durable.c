/* lessor with group commit: no answer precedes its commit.  16 clients
 * claim and complete runs concurrently against `lessor serve --synchronous
 * full` (group commit on, the default), so writes share transactions; once
 * KILL_AFTER completions were answered the clients stop sending, and as soon
 * as the last answer is in lessor is killed with SIGKILL (nothing else it
 * would commit may come in between: the reaper ticks every 5 s here),
 * restarted on the same database, and every write that was answered must be
 * there: each acknowledged completion's run has finished, each acknowledged
 * grant not completed is still held by its token.  A lessor that answered a
 * group before its COMMIT (and committed it with the next group) fails this
 * (tried).  kill -9 keeps the page cache, so this proves the answer follows
 * the commit, not the fsync; the fsync is SQLite's synchronous=FULL. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/time.h"

#define N_CLIENTS 16
#define N_RUNS 400
#define KILL_AFTER 100 /* acknowledged completions before the kill */

struct ack {
	char id[32];
	char token[64];
	bool completed; /* the completion was answered 200 */
};

struct client {
	struct tu_lessor *l;
	unsigned index;
	struct ack acks[N_RUNS];
	unsigned n_acks;
};

static struct client clients[N_CLIENTS];
static unsigned completed; /* answered completions, all clients */
static bool stop;          /* KILL_AFTER reached: no new claims */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;

static void note(bool done)
{
	pthread_mutex_lock(&lock);
	completed += done;
	stop = completed >= KILL_AFTER;
	pthread_cond_broadcast(&progress);
	pthread_mutex_unlock(&lock);
}

/* until KILL_AFTER completions were answered (or every client stopped) */
static bool stopping(void)
{
	bool v;

	pthread_mutex_lock(&lock);
	v = stop;
	pthread_mutex_unlock(&lock);
	return v;
}

static void wait_completions(usec_t timeout)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(timeout / USEC_PER_SEC) + 1;
	pthread_mutex_lock(&lock);
	while (completed < KILL_AFTER)
		ck_assert_int_eq(pthread_cond_timedwait(&progress, &lock, &ts), 0);
	pthread_mutex_unlock(&lock);
}

static bool grant(lessor_client *c, struct client *w, unsigned seq, struct ack *ret)
{
	char body[192];
	cJSON *resp = NULL, *g;
	long status = 0;
	bool got = false;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"k-%u-%u\",\"worker_id\":\"w%u\",\"max_runs\":1,"
	         "\"lease_ttl_s\":600,\"wait_s\":0}",
	         w->index, seq, w->index);
	if (lessor_client_json(c, "POST", "/v1/claims", body, &status, &resp) == 0 &&
	    status == 200 && (g = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "runs"), 0))) {
		snprintf(ret->id, sizeof(ret->id), "%s", cJSON_GetObjectItem(g, "id")->valuestring);
		snprintf(
		    ret->token, sizeof(ret->token), "%s",
		    cJSON_GetObjectItem(cJSON_GetObjectItem(g, "lease"), "token")->valuestring);
		got = true;
	}
	cJSON_Delete(resp);
	return got;
}

static bool complete(lessor_client *c, struct ack *a)
{
	char path[64], body[192];
	long status = 0;

	snprintf(path, sizeof(path), "/v1/runs/%s/complete", a->id);
	snprintf(body, sizeof(body),
	         "{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0}",
	         a->token);
	return lessor_client_json(c, "POST", path, body, &status, NULL) == 0 && status == 200;
}

/* Claims and completes until told to stop (or the queue is empty). */
static void *client_main(void *p)
{
	struct client *w = p;
	lessor_client *c = tu_lessor_client(w->l);

	for (unsigned seq = 0; c && w->n_acks < N_RUNS && !stopping(); seq++) {
		struct ack *a = &w->acks[w->n_acks];

		if (!grant(c, w, seq, a))
			break;
		w->n_acks++; /* the grant was answered: it is a write to find again */
		if (!complete(c, a))
			break;
		a->completed = true;
		note(true);
	}
	lessor_client_free(c);
	note(false);
	return NULL;
}

static char *run_status(struct tu_lessor *l, const char *id)
{
	cJSON *run = tu_lessor_get_run(l, id);
	char *s;

	ck_assert_ptr_nonnull(run);
	s = strdup(cJSON_GetObjectItem(run, "status")->valuestring);
	cJSON_Delete(run);
	return s;
}

static void check_after_restart(struct tu_lessor *l, unsigned *ret_completed, unsigned *ret_held)
{
	for (unsigned i = 0; i < N_CLIENTS; i++)
		for (unsigned k = 0; k < clients[i].n_acks; k++) {
			struct ack *a = &clients[i].acks[k];
			_cleanup_free_ char *s = run_status(l, a->id);
			char path[64], body[128];
			long status = 0;

			if (a->completed) {
				ck_assert_msg(streq(s, "succeeded"), "%s answered complete, now %s",
				              a->id, s);
				++*ret_completed;
				continue;
			}
			/* granted (answered), completion not answered: either it committed
			 * before the kill, or the lease is still held by the token */
			if (streq(s, "succeeded"))
				continue;
			ck_assert_msg(streq(s, "running"), "%s was granted, now %s", a->id, s);
			snprintf(path, sizeof(path), "/v1/runs/%s/lease", a->id);
			snprintf(body, sizeof(body), "{\"token\":\"%s\",\"ttl_s\":60}", a->token);
			ck_assert_int_eq(tu_lessor_json(l, "POST", path, body, &status, NULL), 0);
			ck_assert_msg(status == 200, "%s: the granted lease is lost (%ld)", a->id,
			              status);
			++*ret_held;
		}
}

/* /v1/stats counts them: every answered claim and completion is a write,
 * and a commit holds one write or more. */
static void check_counters(struct tu_lessor *l)
{
	cJSON *stats = NULL, *so;
	long status = 0;
	double commits, writes;

	ck_assert_int_eq(tu_lessor_json(l, "GET", "/v1/stats", NULL, &status, &stats), 0);
	ck_assert_int_eq(status, 200);
	so = cJSON_GetObjectItem(stats, "store");
	commits = cJSON_GetNumberValue(cJSON_GetObjectItem(so, "commits"));
	writes = cJSON_GetNumberValue(cJSON_GetObjectItem(so, "writes"));
	ck_assert(writes >= N_RUNS + 2 * KILL_AFTER); /* the enqueues, claims, completions */
	ck_assert(commits >= 1 && commits <= writes);
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(so, "writes_waiting")));
	cJSON_Delete(stats);
}

START_TEST(test_every_answered_write_survives_kill_9)
{
	struct tu_lessor *l = NULL;
	pthread_t t[N_CLIENTS];
	unsigned n_completed = 0, n_held = 0;

	static char *const args[] = {"--tick", "5s", NULL};

	/* --synchronous full, group commit */
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &l), 0);
	for (unsigned i = 0; i < N_RUNS; i++) {
		_cleanup_free_ char *id = tu_lessor_enqueue(l, "{\"workflow\":\"w\"}");

		ck_assert_ptr_nonnull(id);
	}
	for (unsigned i = 0; i < N_CLIENTS; i++) {
		clients[i] = (struct client){.l = l, .index = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, client_main, &clients[i]), 0);
	}
	/* the moment the last answer is in */
	wait_completions(tu_timeout(60 * USEC_PER_SEC));
	for (unsigned i = 0; i < N_CLIENTS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	check_counters(l);
	ck_assert_int_eq(tu_lessor_kill(l), 128 + SIGKILL);
	ck_assert_int_eq(tu_lessor_restart(l), 0);
	check_after_restart(l, &n_completed, &n_held);
	ck_assert_uint_ge(n_completed, KILL_AFTER);
	ck_assert_int_eq(tu_lessor_stop(l), 0);
	tu_lessor_free(l);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_durable");
	TCase *tc = tcase_create("sqlite");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_every_answered_write_survives_kill_9);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
