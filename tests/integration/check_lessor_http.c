/* lessor over HTTP: a real `lessor serve` on 127.0.0.1 for every test. */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lessor/client.h"
#include "lessor/store.h"
#include "jsonutil.h"
#include "lessor_proc.h"
#include "proto/proto.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"

static struct tu_lessor *L;

/* Common server settings: a fast reaper and retries, a small log cap. */
static void start_with(const char *token, char *const *more)
{
	char *args[32] = {"--tick",
	                  "20ms",
	                  "--retry-base",
	                  "300ms",
	                  "--retry-max",
	                  "600ms",
	                  "--max-log-bytes",
	                  "64",
	                  "--max-lease-expiries",
	                  "2",
	                  "--enable-faults",
	                  "--max-body-bytes",
	                  "64K",
	                  NULL};
	size_t n = strv_length(args);

	for (size_t i = 0; more && more[i] && n < ELEMENTSOF(args) - 1; i++)
		args[n++] = more[i];
	args[n] = NULL;
	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = token, .args = args}, &L), 0);
}

static void start(void)
{
	start_with(NULL, NULL);
}

static void teardown(void)
{
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0); /* clean exit: no leak, no crash */
	L = tu_lessor_free(L);
}

/* A request that must answer want_status; returns its JSON (caller frees). */
static cJSON *req(const char *method, const char *path, const char *body, long want_status)
{
	long status = 0;
	cJSON *j = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, &j), 0);
	ck_assert_msg(status == want_status, "%s %s: %ld, want %ld", method, path, status,
	              want_status);
	return j;
}

static void req0(const char *method, const char *path, const char *body, long want_status)
{
	cJSON_Delete(req(method, path, body, want_status));
}

static const char *jstr(const cJSON *j, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	ck_assert_msg(cJSON_IsString(v), "'%s' is not a string", name);
	return v->valuestring;
}

static double jnum(const cJSON *j, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	ck_assert_msg(cJSON_IsNumber(v), "'%s' is not a number", name);
	return v->valuedouble;
}

static char *enqueue(const char *body)
{
	char *id = tu_lessor_enqueue(L, body);

	ck_assert_ptr_nonnull(id);
	return id;
}

/* POST /v1/claims; returns the response (200). */
static cJSON *claim(const char *claim_id, const char *worker, int max, int ttl, int wait,
                    const char *extra)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"%s\","
	                                   "\"max_runs\":%d,\"lease_ttl_s\":%d,\"wait_s\":%d%s}",
	                                   claim_id, worker, max, ttl, wait, extra ? extra : "");

	return req("POST", "/v1/claims", body, 200);
}

static const cJSON *runs_of(const cJSON *resp)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(resp, "runs");

	ck_assert(cJSON_IsArray(r));
	return r;
}

static char *token_of(const cJSON *run)
{
	return strdup(jstr(cJSON_GetObjectItemCaseSensitive(run, "lease"), "token"));
}

static void complete(const char *id, const char *token, const char *status, bool retryable,
                     long want_status, const char *want_run_status)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/complete", id);
	_cleanup_free_ char *body =
	    tu_fmt("{\"token\":\"%s\",\"status\":\"%s\",\"reason\":\"exit\","
	           "\"exit_code\":%d,\"retryable\":%s,\"duration_ms\":12,"
	           "\"log_length\":0,\"output\":{\"ok\":true}}",
	           token, status, streq(status, "succeeded") ? 0 : 1, retryable ? "true" : "false");
	cJSON *j = req("POST", path, body, want_status);

	if (want_run_status)
		ck_assert_str_eq(jstr(j, "run_status"), want_run_status);
	cJSON_Delete(j);
}

static int append_log(lessor_client *c, const char *id, const char *token, size_t start,
                      const char *data, long *ret_length)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/log", id);
	_cleanup_free_ char *tok = tu_fmt("Lease-Token: %s", token);
	_cleanup_free_ char *range =
	    tu_fmt("Content-Range: bytes %zu-%zu/*", start, start + strlen(data) - 1);
	char *hdr[] = {tok, range, "Content-Type: application/octet-stream", NULL};
	struct lessor_response resp;
	cJSON *j;
	long status;

	ck_assert_int_eq(lessor_client_request(c, "PATCH", path, hdr, data, strlen(data), &resp),
	                 0);
	status = resp.status;
	j = resp.body ? cJSON_ParseWithLength(resp.body, resp.len) : NULL;
	if (ret_length)
		*ret_length = cJSON_IsNumber(cJSON_GetObjectItem(j, "length"))
		                  ? (long)cJSON_GetObjectItem(j, "length")->valuedouble
		                  : -1;
	cJSON_Delete(j);
	lessor_response_done(&resp);
	return (int)status;
}

static cJSON *run(const char *id)
{
	cJSON *j = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(j);
	return j;
}

static void assert_run_str(const char *id, const char *field, const char *want)
{
	cJSON *j = run(id);

	ck_assert_str_eq(jstr(j, field), want);
	cJSON_Delete(j);
}

static long run_num(const char *id, const char *field)
{
	cJSON *j = run(id);
	long v = (long)jnum(j, field);

	cJSON_Delete(j);
	return v;
}

/* ---- concurrency ---- */

#define N_RUNS 300
#define N_CLAIMERS 4

struct claimer {
	int index;
	char (*ids)[LESSOR_RUN_ID_MAX];
	size_t n;
	int failures;
};

/* Claims (1..5 at a time, never waiting) and completes until the queue is dry. */
static void *claimer_main(void *p)
{
	struct claimer *cl = p;
	lessor_client *c = tu_lessor_client(L);

	for (int round = 0; c; round++) {
		char body[256];
		const cJSON *r;
		cJSON *resp = NULL;
		long status = 0;

		snprintf(body, sizeof(body),
		         "{\"claim_id\":\"c%d-%d\",\"worker_id\":\"w%d\",\"max_runs\":%d,"
		         "\"lease_ttl_s\":60,\"wait_s\":0}",
		         cl->index, round, cl->index, 1 + round % 5);
		if (lessor_client_json(c, "POST", "/v1/claims", body, &status, &resp) < 0 ||
		    status != 200) {
			cl->failures++;
			cJSON_Delete(resp);
			break;
		}
		r = cJSON_GetObjectItem(resp, "runs");
		if (cJSON_GetArraySize(r) == 0) {
			cJSON_Delete(resp);
			break;
		}
		for (const cJSON *g = r->child; g; g = g->next) {
			const char *id = cJSON_GetObjectItem(g, "id")->valuestring;
			const char *tok =
			    cJSON_GetObjectItem(cJSON_GetObjectItem(g, "lease"), "token")
			        ->valuestring;
			char path[64], done[160];

			snprintf(cl->ids[cl->n++], LESSOR_RUN_ID_MAX, "%s", id);
			snprintf(path, sizeof(path), "/v1/runs/%s/complete", id);
			snprintf(done, sizeof(done),
			         "{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\","
			         "\"exit_code\":0}",
			         tok);
			if (lessor_client_json(c, "POST", path, done, &status, NULL) < 0 ||
			    status != 200)
				cl->failures++;
		}
		cJSON_Delete(resp);
	}
	lessor_client_free(c);
	return NULL;
}

START_TEST(test_concurrent_claimers_never_share)
{
	static struct claimer cl[N_CLAIMERS];
	static char seen[N_RUNS + 1];
	pthread_t t[N_CLAIMERS];
	size_t total = 0;
	cJSON *stats;

	start_with(NULL, (char *[]){"--synchronous", "normal", NULL});
	for (int i = 0; i < N_RUNS; i++)
		free(enqueue("{\"workflow\":\"w\"}"));
	for (int i = 0; i < N_CLAIMERS; i++) {
		cl[i] = (struct claimer){.index = i, .ids = calloc(N_RUNS, LESSOR_RUN_ID_MAX)};
		ck_assert_int_eq(pthread_create(&t[i], NULL, claimer_main, &cl[i]), 0);
	}
	for (int i = 0; i < N_CLAIMERS; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(cl[i].failures, 0);
		ck_assert_uint_gt(cl[i].n, 0); /* each claimer really competed */
		for (size_t k = 0; k < cl[i].n; k++) {
			int n = atoi(cl[i].ids[k] + 2);

			ck_assert(n >= 1 && n <= N_RUNS);
			ck_assert_msg(!seen[n], "%s was granted twice", cl[i].ids[k]);
			seen[n] = 1;
		}
		total += cl[i].n;
		free(cl[i].ids);
	}
	ck_assert_uint_eq(total, N_RUNS);
	stats = req("GET", "/v1/stats", NULL, 200);
	ck_assert_int_eq((int)jnum(stats, "succeeded"), N_RUNS);
	cJSON_Delete(stats);
	ck_assert_int_eq((int)run_num("r-17", "attempt"), 1); /* one lease each */
}
END_TEST

/* ---- long poll ---- */

struct poller {
	const char *body;
	cJSON *resp;
	usec_t returned;
};

static void *poller_main(void *p)
{
	struct poller *po = p;
	long status = 0;

	if (tu_lessor_json(L, "POST", "/v1/claims", po->body, &status, &po->resp) < 0 ||
	    status != 200) {
		cJSON_Delete(po->resp);
		po->resp = NULL;
	}
	po->returned = time_mono();
	return NULL;
}

static void wait_parked(int want)
{
	usec_t end = time_mono() + tu_timeout(5 * USEC_PER_SEC);

	for (;;) {
		cJSON *s = req("GET", "/v1/stats", NULL, 200);
		int n = (int)jnum(s, "parked_requests");

		cJSON_Delete(s);
		if (n == want)
			return;
		ck_assert_msg(time_mono() < end, "parked_requests stays %d, want %d", n, want);
		tu_sleep(10 * USEC_PER_MSEC);
	}
}

START_TEST(test_long_poll_wakes_on_matching_enqueue)
{
	struct poller po = {.body = "{\"claim_id\":\"lp\",\"worker_id\":\"w\",\"max_runs\":1,"
	                            "\"lease_ttl_s\":30,\"wait_s\":30,\"workflows\":[\"build\"],"
	                            "\"tags\":[\"gpu\"]}"};
	_cleanup_free_ char *other = NULL, *id = NULL;
	pthread_t t;
	usec_t enqueued;

	/* a slow reaper: only the enqueue itself can answer the poll in time */
	start_with(NULL, (char *[]){"--tick", "1h", NULL});
	ck_assert_int_eq(pthread_create(&t, NULL, poller_main, &po), 0);
	wait_parked(1);
	/* runs it cannot take do not answer it */
	other = enqueue("{\"workflow\":\"deploy\"}");
	free(enqueue("{\"workflow\":\"build\",\"tags\":[\"gpu\",\"big\"]}"));
	tu_sleep(100 * USEC_PER_MSEC);
	wait_parked(1);
	enqueued = time_mono();
	id = enqueue("{\"workflow\":\"build\",\"tags\":[\"gpu\"]}");
	pthread_join(t, NULL);
	ck_assert_ptr_nonnull(po.resp);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(po.resp)), 1);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(runs_of(po.resp), 0), "id"), id);
	/* woken by the enqueue, not by its 30 s deadline (and the reaper is idle) */
	ck_assert_msg(po.returned - enqueued < 20 * USEC_PER_SEC, "not woken");
	cJSON_Delete(po.resp);
	wait_parked(0);
}
END_TEST

static double store_commits(void)
{
	cJSON *s = req("GET", "/v1/stats", NULL, 200);
	double n = jnum(cJSON_GetObjectItemCaseSensitive(s, "store"), "commits");

	cJSON_Delete(s);
	return n;
}

static const char *first_run_id(const cJSON *resp)
{
	ck_assert_ptr_nonnull(resp);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(resp)), 1);
	return jstr(cJSON_GetArrayItem(runs_of(resp), 0), "id");
}

/* An enqueue that finds a claim parked for it grants the run to that claim
 * in its own transaction: the run is running when the enqueue is answered,
 * and on SQLite the two took one commit (one fsync), not two. */
START_TEST(test_enqueue_hands_run_to_parked_claim)
{
	struct poller po = {.body = "{\"claim_id\":\"ho\",\"worker_id\":\"w\",\"max_runs\":2,"
	                            "\"lease_ttl_s\":30,\"wait_s\":30}"};
	_cleanup_free_ char *id = NULL;
	double commits;
	pthread_t t;

	start_with(NULL, (char *[]){"--tick", "1h", NULL});
	ck_assert_int_eq(pthread_create(&t, NULL, poller_main, &po), 0);
	wait_parked(1);
	commits = store_commits();
	id = enqueue("{\"workflow\":\"build\"}");
	if (!getenv("LESSOR_TEST_PG")) /* PostgreSQL: two transactions, still before the answer */
		ck_assert_msg(store_commits() == commits + 1, "enqueue and grant took %.0f commits",
		              store_commits() - commits);
	assert_run_str(id, "status", "running");
	pthread_join(t, NULL);
	ck_assert_str_eq(first_run_id(po.resp), id);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(runs_of(po.resp), 0), "workflow"), "build");
	ck_assert_int_eq((int)jnum(po.resp, "queue_depth"), 0);
	cJSON_Delete(po.resp);
	wait_parked(0);
}
END_TEST

/* A long poll of one run, 30 s, by `worker` */
#define CLAIM_OF(id, worker)                                                                       \
	"{\"claim_id\":\"" id "\",\"worker_id\":\"" worker "\",\"max_runs\":1,"                    \
	"\"lease_ttl_s\":30,\"wait_s\":30}"

/* a parked, then b: a has been parked longer */
static void park_two(struct poller *a, pthread_t *ta, struct poller *b, pthread_t *tb)
{
	ck_assert_int_eq(pthread_create(ta, NULL, poller_main, a), 0);
	wait_parked(1);
	ck_assert_int_eq(pthread_create(tb, NULL, poller_main, b), 0);
	wait_parked(2);
}

/* The hand-off goes to the claim parked longest; the others stay parked. */
START_TEST(test_hand_off_oldest_claim_first)
{
	struct poller a = {.body = CLAIM_OF("a", "w1")}, b = {.body = CLAIM_OF("b", "w2")};
	_cleanup_free_ char *first = NULL, *second = NULL;
	pthread_t ta, tb;

	start_with(NULL, (char *[]){"--tick", "1h", NULL});
	park_two(&a, &ta, &b, &tb);
	first = enqueue("{\"workflow\":\"w\"}");
	pthread_join(ta, NULL);
	ck_assert_str_eq(first_run_id(a.resp), first);
	wait_parked(1);
	second = enqueue("{\"workflow\":\"w\"}");
	pthread_join(tb, NULL);
	ck_assert_str_eq(first_run_id(b.resp), second);
	cJSON_Delete(a.resp);
	cJSON_Delete(b.resp);
}
END_TEST

/* The claim handed the enqueue may take an older run that became due without
 * a wake (a release delay ran out, the reaper idle): the new run then wakes
 * the other parked claims as before, and is not left waiting for a deadline. */
START_TEST(test_hand_off_of_another_run_wakes_the_rest)
{
	struct poller a = {.body = CLAIM_OF("a", "w1")}, b = {.body = CLAIM_OF("b", "w2")};
	_cleanup_free_ char *old = NULL, *tok = NULL, *path = NULL, *body = NULL, *fresh = NULL;
	pthread_t ta, tb;
	usec_t enqueued;
	cJSON *j;

	start_with(NULL, (char *[]){"--tick", "1h", NULL});
	old = enqueue("{\"workflow\":\"w\"}");
	j = claim("c0", "w0", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s/release", old);
	body = tu_fmt("{\"token\":\"%s\",\"reason\":\"shutdown\",\"delay_s\":1}", tok);
	req0("POST", path, body, 200);
	park_two(&a, &ta, &b, &tb);
	/* the release delay is the property: let it run out, nobody woken */
	tu_sleep(1200 * USEC_PER_MSEC);
	enqueued = time_mono();
	fresh = enqueue("{\"workflow\":\"w\"}");
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ck_assert_str_eq(first_run_id(a.resp), old);
	ck_assert_str_eq(first_run_id(b.resp), fresh);
	ck_assert_msg(b.returned - enqueued < 20 * USEC_PER_SEC, "the new run woke nobody");
	cJSON_Delete(a.resp);
	cJSON_Delete(b.resp);
}
END_TEST

START_TEST(test_long_poll_deadline_and_zero_wait)
{
	usec_t t0;
	cJSON *j;

	start();
	t0 = time_mono();
	j = claim("a", "w", 1, 30, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
	cJSON_Delete(j);
	t0 = time_mono();
	j = claim("b", "w", 1, 30, 1, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
	ck_assert_msg(time_mono() - t0 >= 900 * USEC_PER_MSEC, "the long poll was not held");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_claim_cancel_answers_parked_poll)
{
	struct poller po = {.body = "{\"claim_id\":\"cc\",\"worker_id\":\"w\",\"max_runs\":1,"
	                            "\"lease_ttl_s\":30,\"wait_s\":30}"};
	pthread_t t;
	cJSON *j;

	start();
	ck_assert_int_eq(pthread_create(&t, NULL, poller_main, &po), 0);
	wait_parked(1);
	j = req("POST", "/v1/claims/cc/cancel", NULL, 200);
	ck_assert_int_eq((int)jnum(j, "released"), 0);
	cJSON_Delete(j);
	pthread_join(t, NULL);
	ck_assert_ptr_nonnull(po.resp);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(po.resp)), 0);
	cJSON_Delete(po.resp);
	/* and the cancelled claim never grants later */
	free(enqueue("{\"workflow\":\"w\"}"));
	j = claim("cc", "w", 1, 30, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
	cJSON_Delete(j);
}
END_TEST

/* A connection to lessor with one request sent and left unread; -1 when not. */
static int send_raw(const char *method, const char *path, const char *body)
{
	const char *url = tu_lessor_url(L), *colon = strrchr(url, ':');
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	_cleanup_free_ char *rq = tu_fmt("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: "
	                                 "application/json\r\nContent-Length: %zu\r\n\r\n%s",
	                                 method, path, strlen(body), body);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, rq, strlen(rq)) != (ssize_t)strlen(rq)) {
		safe_close(fd);
		return -1;
	}
	return fd;
}

/* A worker that gives up a long poll closes its connection (lessee does, for
 * its claim for no runs when a slot frees): the parked claim goes at once,
 * not at its wait_s, and takes no run. */
START_TEST(test_long_poll_ends_when_client_hangs_up)
{
	int fd, fd0;
	cJSON *j;

	start();
	fd = send_raw("POST", "/v1/claims",
	              "{\"claim_id\":\"gone\",\"worker_id\":\"w\",\"max_runs\":1,"
	              "\"lease_ttl_s\":30,\"wait_s\":60}");
	fd0 = send_raw("POST", "/v1/claims",
	               "{\"claim_id\":\"gone0\",\"worker_id\":\"w\",\"max_runs\":0,"
	               "\"lease_ttl_s\":30,\"wait_s\":60,\"held\":[]}");
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(fd0, 0);
	wait_parked(2);
	close(fd);
	close(fd0);
	wait_parked(0);
	/* the claim that went took nothing: a new run is there for the next one */
	free(enqueue("{\"workflow\":\"w\"}"));
	j = claim("next", "w", 1, 30, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 1);
	cJSON_Delete(j);
}
END_TEST

/* ---- leases and fencing ---- */

/* Every write with the token gets `want`; returns how many writes were made. */
static int writes_with(const char *id, const char *token, long want)
{
	_cleanup_free_ char *lease = tu_fmt("/v1/runs/%s/lease", id);
	_cleanup_free_ char *release = tu_fmt("/v1/runs/%s/release", id);
	_cleanup_free_ char *b1 = tu_fmt("{\"token\":\"%s\",\"ttl_s\":30}", token);
	_cleanup_free_ char *b2 = tu_fmt("{\"token\":\"%s\",\"reason\":\"draining\"}", token);
	lessor_client *c = tu_lessor_client(L);

	req0("POST", lease, b1, want);
	ck_assert_int_eq(append_log(c, id, token, 0, "x", NULL), (int)want);
	complete(id, token, "failed", false, want, NULL);
	req0("POST", release, b2, want);
	lessor_client_free(c);
	return 4;
}

START_TEST(test_expired_lease_requeued_with_new_token)
{
	_cleanup_free_ char *id = NULL, *old = NULL, *fresh = NULL;
	_cleanup_free_ char *lease = NULL, *renew = NULL;
	cJSON *j, *leases;

	start();
	id = enqueue("{\"workflow\":\"w\",\"max_attempts\":3}");
	j = claim("c1", "w1", 1, 1, 0, NULL);
	old = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "pending", 10 * USEC_PER_SEC), 0);
	j = claim("c2", "w2", 1, 5, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 1);
	fresh = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(runs_of(j), 0), "attempt"), 1);
	cJSON_Delete(j);
	ck_assert_str_ne(old, fresh);
	/* the old holder is refused on every kind of write */
	writes_with(id, old, 409);
	lease = tu_fmt("/v1/runs/%s/lease", id);
	renew = tu_fmt("{\"token\":\"%s\",\"ttl_s\":1}", fresh);
	j = req("POST", lease, renew, 200);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "cancel_requested")));
	cJSON_Delete(j);
	j = run(id);
	ck_assert_int_eq((int)jnum(j, "rejected_writes"), 4);
	leases = cJSON_GetObjectItem(j, "leases");
	ck_assert_int_eq(cJSON_GetArraySize(leases), 2);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "expired");
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(leases, 0), "worker_id"), "w1");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(leases, 1), "ended_at")));
	cJSON_Delete(j);
	/* the second expiry (--max-lease-expiries 2) fails the run */
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "failed", 10 * USEC_PER_SEC), 0);
	assert_run_str(id, "reason", "lease_expired");
	writes_with(id, fresh, 409);
}
END_TEST

START_TEST(test_claim_id_retry_returns_same_runs)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *renew = NULL, *lease = NULL;
	cJSON *first, *again, *j;

	start();
	a = enqueue("{\"workflow\":\"w\"}");
	b = enqueue("{\"workflow\":\"w\"}");
	first = claim("same", "w1", 2, 30, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(first)), 2);
	c = enqueue("{\"workflow\":\"w\"}");
	again = claim("same", "w1", 5, 30, 5, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(again)), 2); /* nothing new granted */
	for (int i = 0; i < 2; i++) {
		const cJSON *x = cJSON_GetArrayItem(runs_of(first), i);
		const cJSON *y = cJSON_GetArrayItem(runs_of(again), i);
		_cleanup_free_ char *tx = token_of(x), *ty = token_of(y);

		ck_assert_str_eq(jstr(x, "id"), jstr(y, "id"));
		ck_assert_str_eq(tx, ty);
	}
	assert_run_str(c, "status", "pending");
	/* another worker cannot replay it */
	req0("POST", "/v1/claims",
	     "{\"claim_id\":\"same\",\"worker_id\":\"w2\",\"max_runs\":1,\"lease_ttl_s\":30}", 400);
	/* cancel releases what was never renewed */
	{
		_cleanup_free_ char *tok = token_of(cJSON_GetArrayItem(runs_of(first), 0));

		lease = tu_fmt("/v1/runs/%s/lease", a);
		renew = tu_fmt("{\"token\":\"%s\",\"ttl_s\":30}", tok);
	}
	req0("POST", lease, renew, 200);
	j = req("POST", "/v1/claims/same/cancel", NULL, 200);
	ck_assert_int_eq((int)jnum(j, "released"), 1);
	cJSON_Delete(j);
	assert_run_str(a, "status", "running");
	assert_run_str(b, "status", "pending");
	cJSON_Delete(first);
	cJSON_Delete(again);
}
END_TEST

START_TEST(test_complete_is_idempotent)
{
	_cleanup_free_ char *id = NULL, *tok = NULL;
	cJSON *j;

	start();
	id = enqueue("{\"workflow\":\"w\",\"input\":{\"n\":[1,2]}}");
	j = claim("c", "w", 1, 30, 0, NULL);
	ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(runs_of(j), 0), "attempt"), 1);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	complete(id, tok, "succeeded", false, 200, "succeeded");
	complete(id, tok, "succeeded", false, 200, "succeeded");
	complete(id, tok, "failed", true, 200, "succeeded"); /* same answer whatever is resent */
	j = run(id);
	ck_assert_str_eq(jstr(j, "status"), "succeeded");
	ck_assert_int_eq((int)jnum(j, "exit_code"), 0);
	ck_assert_int_eq((int)jnum(j, "duration_ms"), 12);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "output"), "ok")));
	ck_assert_str_eq(
	    jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "leases"), 0), "end_reason"),
	    "completed");
	ck_assert_int_eq((int)jnum(j, "rejected_writes"), 0);
	cJSON_Delete(j);
	complete(id, "0123456789abcdef0123456789abcdef", "succeeded", false, 409, NULL);
	complete("r-999", tok, "succeeded", false, 404, NULL);
}
END_TEST

/* A completion resent while the first send is still on its way (a worker's
 * timeout, then its retry) races it: both must answer as one, 200 with the
 * same run_status, whether the first one is committed yet or not.  On
 * PostgreSQL the second waited on the row lock and then found the run gone:
 * 409, as if the lease were lost, and a write counted as rejected. */
struct twin {
	pthread_barrier_t *go;
	const char *path, *body;
	bool batch;
	long status;
	char run_status[32];
};

static void *twin_main(void *p)
{
	struct twin *t = p;
	cJSON *j = NULL;
	const cJSON *e;

	pthread_barrier_wait(t->go);
	if (tu_lessor_json(L, "POST", t->path, t->body, &t->status, &j) < 0)
		t->status = -1;
	e = t->batch ? cJSON_GetArrayItem(tu_jget(j, "completions"), 0) : j;
	snprintf(t->run_status, sizeof(t->run_status), "%s",
	         tu_jstr_or(e, "run_status", tu_jstr_or(e, "error", "?")));
	cJSON_Delete(j);
	return NULL;
}

static void complete_twice_at_once(const char *id, const char *token, bool batch)
{
	static const char fields[] = "\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0,"
	                             "\"duration_ms\":5,\"log_length\":0,\"output\":{\"ok\":1}";
	_cleanup_free_ char *path =
	    batch ? strdup("/v1/completions") : tu_fmt("/v1/runs/%s/complete", id);
	_cleanup_free_ char *body =
	    batch ? tu_fmt("{\"completions\":[{\"id\":\"%s\",\"token\":\"%s\",%s}]}", id, token,
	                   fields)
	          : tu_fmt("{\"token\":\"%s\",%s}", token, fields);
	pthread_barrier_t go;
	struct twin t[2];
	pthread_t th[2];

	ck_assert_int_eq(pthread_barrier_init(&go, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		t[i] = (struct twin){.go = &go, .path = path, .body = body, .batch = batch};
		ck_assert_int_eq(pthread_create(&th[i], NULL, twin_main, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&go);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(t[i].status == 200, "%s %s: %ld", batch ? "batch" : "single", id,
		              t[i].status);
		ck_assert_msg(streq(t[i].run_status, "succeeded"), "%s %s: %s",
		              batch ? "batch" : "single", id, t[i].run_status);
	}
}

START_TEST(test_complete_resent_while_in_flight)
{
	enum { N = 60 };
	char *ids[N], *toks[N];
	cJSON *j;
	int got = 0;

	start();
	for (int i = 0; i < N; i++)
		ids[i] = enqueue("{\"workflow\":\"w\"}");
	j = claim("c", "w", N, 60, 0, NULL);
	for (const cJSON *r = runs_of(j)->child; r; r = r->next) {
		for (int i = 0; i < N; i++)
			if (streq(ids[i], jstr(r, "id")))
				toks[i] = token_of(r), got++;
	}
	cJSON_Delete(j);
	ck_assert_int_eq(got, N);
	for (int i = 0; i < N; i++)
		complete_twice_at_once(ids[i], toks[i], i % 2);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(run_num(ids[i], "rejected_writes"), 0);
		free(ids[i]);
		free(toks[i]);
	}
}
END_TEST

/* ---- JSON as sent ---- */

/* One request: the answer's raw body (free it), status in *ret_status. */
static char *raw_req(const char *method, const char *path, const char *body, long *ret_status)
{
	lessor_client *cl = tu_lessor_client(L);
	struct lessor_response resp = {0};
	char *text;

	ck_assert_ptr_nonnull(cl);
	ck_assert_int_eq(
	    lessor_client_request(cl, method, path,
	                          (char *const[]){"Content-Type: application/json", NULL}, body,
	                          body ? strlen(body) : 0, &resp),
	    0);
	*ret_status = resp.status;
	text = strdup(resp.body ? resp.body : "");
	lessor_response_done(&resp);
	lessor_client_free(cl);
	return text;
}

/* A run's input and output are the bytes the client sent: numbers keep every
 * digit (cJSON holds them as doubles: 2^53 + 1 came back as 2^53, a big one
 * in exponent form, 1e400 as null), escapes stay (a \u0000 cut the string). */
START_TEST(test_input_and_output_kept_as_sent)
{
	static const char value[] =
	    "{\"big\":9007199254740993,\"huge\":12345678901234567890,\"far\":1e400,"
	    "\"nul\":\"a\\u0000b\",\"frac\":0.1000000000000000055511151231257827}";
	_cleanup_free_ char *body = NULL, *ans = NULL, *tok = NULL, *path = NULL, *want = NULL;
	_cleanup_free_ char *id = NULL, *id2 = NULL, *tok2 = NULL;
	long status = 0;
	cJSON *j;

	start();
	body = tu_fmt("{\"workflow\":\"w\",\"input\":%s}", value);
	id = enqueue(body);
	id2 = enqueue(body);
	want = tu_fmt("\"input\":%s", value);
	ans = raw_req("POST", "/v1/claims",
	              "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":2,\"lease_ttl_s\":60}",
	              &status);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(strstr(ans, want), "claim answer: %s", ans);
	j = cJSON_Parse(ans);
	ck_assert_ptr_nonnull(j);
	for (const cJSON *r = runs_of(j)->child; r; r = r->next)
		*(streq(jstr(r, "id"), id) ? &tok : &tok2) = token_of(r);
	cJSON_Delete(j);
	ck_assert_ptr_nonnull(tok);
	ck_assert_ptr_nonnull(tok2);
	/* the output, one completion alone and one in a batch */
	free(body);
	body = tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\","
	              "\"exit_code\":0,\"duration_ms\":1,\"log_length\":0,\"output\":%s}",
	              tok, value);
	path = tu_fmt("/v1/runs/%s/complete", id);
	free(ans);
	ans = raw_req("POST", path, body, &status);
	ck_assert_int_eq(status, 200);
	free(body);
	body = tu_fmt("{\"completions\":[{\"id\":\"%s\",\"token\":\"%s\",\"status\":\"succeeded\","
	              "\"reason\":\"exit\",\"exit_code\":0,\"duration_ms\":1,\"log_length\":0,"
	              "\"output\":%s}]}",
	              id2, tok2, value);
	free(ans);
	ans = raw_req("POST", "/v1/completions", body, &status);
	ck_assert_int_eq(status, 200);
	for (int k = 0; k < 2; k++) {
		_cleanup_free_ char *p = tu_fmt("/v1/runs/%s", k ? id2 : id);
		_cleanup_free_ char *out = tu_fmt("\"output\":%s", value);

		free(ans);
		ans = raw_req("GET", p, NULL, &status);
		ck_assert_int_eq(status, 200);
		ck_assert_msg(strstr(ans, want), "run: %s", ans);
		ck_assert_msg(strstr(ans, out), "run: %s", ans);
	}
}
END_TEST

/* A member name written with an escape ("\u0069nput" is "input" to cJSON) is
 * refused: the value checked and the value kept as written could be two
 * different members, and a batch's entry i matched to another array's. */
START_TEST(test_escaped_member_names_refused)
{
	_cleanup_free_ char *id = NULL, *id2 = NULL, *tok = NULL, *tok2 = NULL, *path = NULL;
	_cleanup_free_ char *body = NULL;
	long status = 0;
	cJSON *j;

	start();
	free(raw_req("POST", "/v1/runs",
	             "{\"workflow\":\"w\",\"\\u0069nput\":{\"a\":1},\"input\":{\"b\":2}}",
	             &status));
	ck_assert_int_eq(status, 400);
	id = enqueue("{\"workflow\":\"w\"}");
	id2 = enqueue("{\"workflow\":\"w\"}");
	j = claim("c", "w", 2, 60, 0, NULL);
	for (const cJSON *r = runs_of(j)->child; r; r = r->next)
		*(streq(jstr(r, "id"), id) ? &tok : &tok2) = token_of(r);
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s/complete", id);
	body =
	    tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0,"
	           "\"duration_ms\":1,\"log_length\":0,\"\\u006futput\":1,\"output\":2}",
	           tok);
	free(raw_req("POST", path, body, &status));
	ck_assert_int_eq(status, 400);
	free(body);
	body =
	    tu_fmt("{\"c\\u006fmpletions\":[{\"id\":\"%s\",\"token\":\"%s\",\"status\":"
	           "\"succeeded\",\"reason\":\"exit\",\"exit_code\":0,\"duration_ms\":1,"
	           "\"log_length\":0,\"output\":{\"mine\":1}}],\"completions\":[{\"id\":\"%s\","
	           "\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0,"
	           "\"duration_ms\":1,\"log_length\":0,\"output\":{\"other\":1}}]}",
	           id, tok, id2, tok2);
	free(raw_req("POST", "/v1/completions", body, &status));
	ck_assert_int_eq(status, 400);
	assert_run_str(id, "status", "running");
	assert_run_str(id2, "status", "running");
}
END_TEST

/* Text that is not UTF-8, or a lone UTF-16 surrogate, is refused with a 400
 * naming it, and changes nothing: SQLite kept it and served JSON no client
 * could read; PostgreSQL answered 500 at every retry of the completion. */
START_TEST(test_bad_utf8_refused)
{
	static const char *const inputs[] = {"\"caf\xc3\x28\"", "\"\xc0\xaf\"", "\"\\ud800\"",
	                                     "\"\xed\xa0\x80\""};
	_cleanup_free_ char *id = NULL, *tok = NULL, *path = NULL, *body = NULL;
	long status = 0;
	cJSON *j;

	start();
	for (size_t i = 0; i < ELEMENTSOF(inputs); i++) {
		_cleanup_free_ char *b = tu_fmt("{\"workflow\":\"w\",\"input\":%s}", inputs[i]);
		_cleanup_free_ char *ans = raw_req("POST", "/v1/runs", b, &status);

		ck_assert_msg(status == 400, "input %zu: %ld %s", i, status, ans);
		ck_assert_msg(strstr(ans, "UTF-8"), "input %zu: %s", i, ans);
	}
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("c", "w", 1, 60, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s/complete", id);
	body = tu_fmt("{\"token\":\"%s\",\"status\":\"failed\",\"reason\":\"exit\",\"exit_code\":1,"
	              "\"duration_ms\":1,\"log_length\":0,\"error\":\"bad \xff byte\"}",
	              tok);
	free(raw_req("POST", path, body, &status));
	ck_assert_int_eq(status, 400);
	assert_run_str(id, "status", "running");
	complete(id, tok, "succeeded", false, 200, "succeeded");
}
END_TEST

/* ---- logs ---- */

START_TEST(test_log_content_range_resync)
{
	_cleanup_free_ char *id = NULL, *tok = NULL, *path = NULL;
	lessor_client *c;
	struct lessor_response resp;
	long len = 0;
	cJSON *j;

	start(); /* --max-log-bytes 64 */
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("c", "w", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	c = tu_lessor_client(L);
	ck_assert_int_eq(append_log(c, id, tok, 0, "hello ", &len), 202);
	ck_assert_int_eq(len, 6);
	/* a resent chunk and a gap both answer 416 with the server's length */
	ck_assert_int_eq(append_log(c, id, tok, 0, "hello ", &len), 416);
	ck_assert_int_eq(len, 6);
	ck_assert_int_eq(append_log(c, id, tok, 9, "xyz", &len), 416);
	ck_assert_int_eq(len, 6);
	ck_assert_int_eq(append_log(c, id, tok, 6, "world\n", &len), 202);
	ck_assert_int_eq(len, 12);
	/* the cap keeps what fits and answers 413 */
	ck_assert_int_eq(
	    append_log(c, id, tok, 12,
	               "0123456789012345678901234567890123456789012345678901234567890123", &len),
	    413);
	ck_assert_int_eq(len, 64);
	ck_assert_int_eq(append_log(c, id, tok, 64, "more", &len), 413);
	/* bad requests */
	{
		_cleanup_free_ char *lp = tu_fmt("/v1/runs/%s/log", id);
		_cleanup_free_ char *th = tu_fmt("Lease-Token: %s", tok);
		char *no_range[] = {th, NULL};
		char *bad_range[] = {th, "Content-Range: bytes 64-70/*", NULL};
		char *no_token[] = {"Content-Range: bytes 64-64/*", NULL};

		ck_assert_int_eq(lessor_client_request(c, "PATCH", lp, no_range, "x", 1, &resp), 0);
		ck_assert_int_eq(resp.status, 400);
		lessor_response_done(&resp);
		ck_assert_int_eq(lessor_client_request(c, "PATCH", lp, bad_range, "x", 1, &resp),
		                 0);
		ck_assert_int_eq(resp.status, 400);
		lessor_response_done(&resp);
		ck_assert_int_eq(lessor_client_request(c, "PATCH", lp, no_token, "x", 1, &resp), 0);
		ck_assert_int_eq(resp.status, 400);
		lessor_response_done(&resp);
	}
	path = tu_fmt("/v1/runs/%s/log", id);
	ck_assert_int_eq(lessor_client_request(c, "GET", path, NULL, NULL, 0, &resp), 0);
	ck_assert_int_eq(resp.status, 200);
	ck_assert_uint_eq(resp.len, 64);
	ck_assert(memcmp(resp.body, "hello world\n0123", 16) == 0);
	lessor_response_done(&resp);
	lessor_client_free(c);
	ck_assert_int_eq((int)run_num(id, "log_length"), 64);
}
END_TEST

/* ---- retries ---- */

static long long lease_granted_ms(const cJSON *run, int i)
{
	return tu_rfc3339_ms(
	    jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(run, "leases"), i), "granted_at"));
}

static long long lease_ended_ms(const cJSON *run, int i)
{
	return tu_rfc3339_ms(
	    jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(run, "leases"), i), "ended_at"));
}

START_TEST(test_retry_backoff_and_attempt_budget)
{
	_cleanup_free_ char *id = NULL, *once = NULL;
	cJSON *j;

	start(); /* --retry-base 300ms --retry-max 600ms */
	id = enqueue("{\"workflow\":\"w\",\"max_attempts\":3}");
	for (int attempt = 1; attempt <= 3; attempt++) {
		char cid[16];
		_cleanup_free_ char *tok = NULL;

		snprintf(cid, sizeof(cid), "c%d", attempt);
		/* the long poll is answered when the backoff runs out */
		j = claim(cid, "w", 1, 30, 20, NULL);
		ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 1);
		ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(runs_of(j), 0), "attempt"), attempt);
		tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
		cJSON_Delete(j);
		complete(id, tok, "failed", true, 200, attempt < 3 ? "retrying" : "failed");
		if (attempt < 3) {
			/* not claimable during the backoff */
			snprintf(cid, sizeof(cid), "peek%d", attempt);
			j = claim(cid, "w", 1, 30, 0, NULL);
			ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
			cJSON_Delete(j);
		}
	}
	j = run(id);
	ck_assert_str_eq(jstr(j, "status"), "failed");
	ck_assert_int_eq((int)jnum(j, "attempts_used"), 3);
	/* server-side times: 300 ms after the first failure, 600 ms after the second */
	ck_assert_int_ge(lease_granted_ms(j, 1) - lease_ended_ms(j, 0), 300);
	ck_assert_int_ge(lease_granted_ms(j, 2) - lease_ended_ms(j, 1), 600);
	cJSON_Delete(j);
	/* not retryable: failed at once */
	once = enqueue("{\"workflow\":\"w\",\"max_attempts\":5}");
	j = claim("d", "w", 1, 30, 0, NULL);
	{
		_cleanup_free_ char *tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));

		complete(once, tok, "failed", false, 200, "failed");
	}
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_release_keeps_attempt)
{
	_cleanup_free_ char *id = NULL, *tok = NULL, *path = NULL, *body = NULL;
	cJSON *j;

	start();
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("a", "w", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s/release", id);
	body = tu_fmt("{\"token\":\"%s\",\"reason\":\"shutdown\",\"delay_s\":0}", tok);
	j = req("POST", path, body, 200);
	ck_assert_str_eq(jstr(j, "run_status"), "pending");
	cJSON_Delete(j);
	req0("POST", path, body, 409);
	j = claim("b", "w", 1, 30, 0, NULL);
	ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(runs_of(j), 0), "attempt"), 1);
	cJSON_Delete(j);
	j = run(id);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "leases"), 0), "detail"),
	                 "shutdown");
	cJSON_Delete(j);
}
END_TEST

/* ---- routing ---- */

START_TEST(test_routing_by_workflow_and_tags)
{
	_cleanup_free_ char *plain = NULL, *gpu = NULL, *eu = NULL;
	cJSON *j, *w;

	start();
	plain = enqueue("{\"workflow\":\"build\"}");
	gpu = enqueue("{\"workflow\":\"build\",\"tags\":[\"gpu\"]}");
	eu = enqueue("{\"workflow\":\"deploy\",\"tags\":[\" region:eu \",\"gpu\",\"gpu\"]}");
	assert_run_str(eu, "status", "pending");
	j = run(eu);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tags")),
	                 2); /* trimmed, unique */
	cJSON_Delete(j);
	j = claim("n", "none", 10, 30, 0, ",\"workflows\":[],\"tags\":[\"gpu\",\"region:eu\"]");
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
	cJSON_Delete(j);
	j = claim("d", "deployer", 10, 30, 0, ",\"workflows\":[\"deploy\"],\"tags\":[\"gpu\"]");
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 0);
	cJSON_Delete(j);
	j = claim("p", "plain", 10, 30, 0, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 1);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(runs_of(j), 0), "id"), plain);
	cJSON_Delete(j);
	j = claim("g", "big", 10, 30, 0, ",\"tags\":[\"region:eu\",\"gpu\",\"ssd\"]");
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(j)), 2);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(runs_of(j), 0), "id"), gpu);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(runs_of(j), 1), "id"), eu);
	cJSON_Delete(j);
	/* /v1/workers tells omitted workflows (any) from [] (none) */
	j = req("GET", "/v1/workers", NULL, 200);
	w = cJSON_GetObjectItem(j, "workers");
	ck_assert_int_eq(cJSON_GetArraySize(w), 4);
	for (const cJSON *e = w->child; e; e = e->next) {
		const char *name = jstr(e, "worker_id");
		const cJSON *wf = cJSON_GetObjectItem(e, "workflows");

		if (streq(name, "none"))
			ck_assert(cJSON_IsArray(wf) && cJSON_GetArraySize(wf) == 0);
		if (streq(name, "plain"))
			ck_assert(cJSON_IsNull(wf));
		if (streq(name, "big"))
			ck_assert_int_eq((int)jnum(e, "runs_held"), 2);
		ck_assert_int_eq((int)jnum(e, "claims"), 1);
	}
	cJSON_Delete(j);
}
END_TEST

/* ---- durability ---- */

static void strip_volatile(cJSON *run)
{
	/* a restart gives held leases their ttl again */
	cJSON_DeleteItemFromObject(run, "lease_expires_at");
}

START_TEST(test_restart_keeps_acknowledged_state)
{
	char *ids[4];
	cJSON *before[4];
	_cleanup_free_ char *t0 = NULL, *t1 = NULL, *renew = NULL, *lease = NULL;
	lessor_client *c;
	cJSON *j;

	start();
	for (int i = 0; i < 4; i++)
		ids[i] = enqueue("{\"workflow\":\"w\",\"max_attempts\":2,\"tags\":[\"t\"],"
		                 "\"input\":{\"deep\":[1,{\"x\":null}]}}");
	j = claim("c", "w", 2, 60, 0, ",\"tags\":[\"t\"]");
	t0 = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	t1 = token_of(cJSON_GetArrayItem(runs_of(j), 1));
	cJSON_Delete(j);
	c = tu_lessor_client(L);
	ck_assert_int_eq(append_log(c, ids[0], t0, 0, "some output\n", NULL), 202);
	lessor_client_free(c);
	complete(ids[0], t0, "succeeded", false, 200, "succeeded");
	req0("POST", "/v1/runs/r-4/cancel", NULL, 200);
	for (int i = 0; i < 4; i++) {
		before[i] = run(ids[i]);
		strip_volatile(before[i]);
	}
	ck_assert_int_eq(tu_lessor_kill(L), 128 + 9);
	ck_assert_int_eq(tu_lessor_restart(L), 0);
	for (int i = 0; i < 4; i++) {
		cJSON *after = run(ids[i]);

		strip_volatile(after);
		ck_assert_msg(cJSON_Compare(before[i], after, true), "%s changed across kill -9",
		              ids[i]);
		cJSON_Delete(after);
		cJSON_Delete(before[i]);
		free(ids[i]);
	}
	/* the held lease is still good, and fencing still works */
	lease = tu_fmt("/v1/runs/r-2/lease");
	renew = tu_fmt("{\"token\":\"%s\",\"ttl_s\":30}", t1);
	req0("POST", lease, renew, 200);
	complete("r-1", t1, "succeeded", false, 409, NULL);
}
END_TEST

struct writer {
	int acked; /* enqueues answered 201 */
	bool stop;
};

static void *writer_main(void *p)
{
	struct writer *w = p;
	lessor_client *c = tu_lessor_client(L);

	for (int i = 0; c && !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); i++) {
		char body[96];
		long status = 0;

		snprintf(body, sizeof(body), "{\"workflow\":\"w\",\"idempotency_key\":\"k-%d\"}",
		         i);
		if (lessor_client_json(c, "POST", "/v1/runs", body, &status, NULL) < 0 ||
		    status != 201)
			break;
		w->acked = i + 1;
	}
	lessor_client_free(c);
	return NULL;
}

START_TEST(test_kill9_loses_no_acknowledged_write)
{
	struct writer w = {0};
	pthread_t t;
	cJSON *stats;

	start();
	ck_assert_int_eq(pthread_create(&t, NULL, writer_main, &w), 0);
	tu_sleep(tu_timeout(400 * USEC_PER_MSEC));
	ck_assert_int_eq(tu_lessor_kill(L), 128 + 9);
	__atomic_store_n(&w.stop, true, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	ck_assert_int_gt(w.acked, 10);
	ck_assert_int_eq(tu_lessor_restart(L), 0);
	/* every acknowledged enqueue is there: its key now answers 200 (existing) */
	for (int i = 0; i < w.acked; i++) {
		char body[96], id[16];
		cJSON *j;

		snprintf(body, sizeof(body), "{\"workflow\":\"w\",\"idempotency_key\":\"k-%d\"}",
		         i);
		j = req("POST", "/v1/runs", body, 200);
		snprintf(id, sizeof(id), "r-%d", i + 1);
		ck_assert_str_eq(jstr(j, "id"), id);
		cJSON_Delete(j);
	}
	stats = req("GET", "/v1/stats", NULL, 200);
	/* at most the one in flight when killed is there unacknowledged */
	ck_assert_int_le((int)jnum(stats, "total") - w.acked, 1);
	cJSON_Delete(stats);
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_bad_input_is_4xx_and_changes_nothing)
{
	static const struct {
		const char *method, *path, *body;
		long status;
	} cases[] = {
	    {"POST", "/v1/runs", "{", 400},
	    {"POST", "/v1/runs", "[]", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\"} trailing", 400},
	    {"POST", "/v1/runs", "{\"workflow\":5}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"bad name\"}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"tags\":[\"ok\",\"no spaces\"]}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"tags\":\"gpu\"}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"max_attempts\":0}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"max_attempts\":1.5}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"max_attempts\":\"2\"}", 400},
	    {"POST", "/v1/runs", "{\"workflow\":\"w\",\"timeout_s\":-1}", 400},
	    {"POST", "/v1/runs", "", 400},
	    {"POST", "/v1/claims", "{\"worker_id\":\"w\",\"max_runs\":1,\"lease_ttl_s\":5}", 400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\" \",\"max_runs\":1,"
	     "\"lease_ttl_s\":5}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":257,"
	     "\"lease_ttl_s\":5}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	     "\"lease_ttl_s\":0}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	     "\"lease_ttl_s\":3601}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	     "\"lease_ttl_s\":5,\"wait_s\":61}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	     "\"lease_ttl_s\":5,\"tags\":[\"a*b\"]}",
	     400},
	    {"POST", "/v1/claims",
	     "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	     "\"lease_ttl_s\":5,\"workflows\":\"build\"}",
	     400},
	    {"POST", "/v1/runs/r-1/lease", "{\"token\":\"t\",\"ttl_s\":0}", 400},
	    {"POST", "/v1/runs/r-1/lease", "{\"token\":\"t\",\"ttl_s\":30}", 404},
	    {"POST", "/v1/runs/nonsense/lease", "{\"token\":\"t\",\"ttl_s\":30}", 404},
	    {"POST", "/v1/runs/r-1/complete",
	     "{\"token\":\"t\",\"status\":\"great\","
	     "\"reason\":\"exit\"}",
	     400},
	    {"POST", "/v1/runs/r-1/complete",
	     "{\"token\":\"t\",\"status\":\"failed\","
	     "\"reason\":\"exit\",\"exit_code\":256}",
	     400},
	    {"POST", "/v1/runs/r-1/release", "{\"token\":\"t\",\"reason\":\"bored\"}", 400},
	    {"POST", "/v1/claims/bad%20id/cancel", NULL, 400},
	    {"GET", "/v1/runs/r-77", NULL, 404},
	    {"GET", "/v1/runs/r-77/log", NULL, 404},
	    {"GET", "/v1/runs?status=sleeping", NULL, 400},
	    {"GET", "/v1/runs?limit=0", NULL, 400},
	    {"POST", "/v1/runs/r-77/cancel", NULL, 404},
	    {"POST", "/v1/runs/r-77/requeue", NULL, 404},
	    {"PUT", "/v1/runs", "{}", 405},
	    {"GET", "/v2/anything", NULL, 404},
	    {"POST", "/v1/admin/faults", "{\"endpoint\":\"nowhere\",\"status\":503}", 400},
	};
	cJSON *stats;

	start();
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		cJSON *j = req(cases[i].method, cases[i].path, cases[i].body, cases[i].status);

		ck_assert_msg(cJSON_IsString(cJSON_GetObjectItem(j, "error")) &&
		                  cJSON_IsString(cJSON_GetObjectItem(j, "message")),
		              "case %zu: no error/message body", i);
		cJSON_Delete(j);
	}
	stats = req("GET", "/v1/stats", NULL, 200);
	ck_assert_int_eq((int)jnum(stats, "total"), 0); /* no half-written row */
	cJSON_Delete(stats);
}
END_TEST

/* The v1 vocabulary: lessor accepts exactly what the client (lib/proto)
 * accepts, as docs/protocol.md states it. */
static void claim_verdict(const char *worker, const char *extra, bool want)
{
	static unsigned n;
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"voc-%u\",\"worker_id\":\"%s\","
	                                   "\"max_runs\":1,\"lease_ttl_s\":5%s}",
	                                   n++, worker, extra ? extra : "");

	req0("POST", "/v1/claims", body, want ? 200 : 400);
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);

	ck_assert_ptr_nonnull(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* ,"workflows": [...] of n distinct names */
static char *workflows_of(size_t n)
{
	size_t size = 16 + n * 16, at;
	char *s = malloc(size);

	ck_assert_ptr_nonnull(s);
	at = (size_t)snprintf(s, size, ",\"workflows\":[");
	for (size_t i = 0; i < n; i++)
		at += (size_t)snprintf(s + at, size - at, "%s\"wf-%zu\"", i ? "," : "", i);
	ck_assert_uint_lt(at + 1, size);
	strcpy(s + at, "]");
	return s;
}

START_TEST(test_vocabulary)
{
	_cleanup_free_ char *id128 = repeat('i', 128), *id129 = repeat('i', 129);
	_cleanup_free_ char *tag64 = repeat('t', 64), *tag65 = repeat('t', 65);
	const char *workers[] = {"lessee-0192f0c8", "host.example.org", "host/slot-3", "ci@host",
	                         "ci@host/slot:2",  id128,              id129,         "",
	                         "has space",       "a?b",              "a%2Fb"};
	const char *tags[] = {"region:eu", "k=v/w", tag64, tag65, "a@b", "a*b"};
	const char *ids[] = {"build", id128, id129, "a/b", "a@b"};

	start();
	for (size_t i = 0; i < ELEMENTSOF(workers); i++)
		claim_verdict(workers[i], NULL, proto_valid_worker_id(workers[i]));
	for (size_t i = 0; i < ELEMENTSOF(tags); i++) {
		_cleanup_free_ char *extra = tu_fmt(",\"tags\":[\"%s\"]", tags[i]);

		claim_verdict("w", extra, proto_valid_tag(tags[i]));
	}
	for (size_t i = 0; i < ELEMENTSOF(ids); i++) {
		_cleanup_free_ char *extra = tu_fmt(",\"workflows\":[\"%s\"]", ids[i]);

		claim_verdict("w", extra, proto_valid_id(ids[i]));
	}
	/* a lessee with its every configured workflow (at most 1024) claimable */
	for (size_t n = 1023; n <= 1025; n++) {
		_cleanup_free_ char *extra = workflows_of(n);

		claim_verdict("w", extra, n <= 1024);
	}
	/* lease tokens are identifiers: unknown run (404), not a bad request */
	req0("POST", "/v1/runs/r-1/lease", "{\"token\":\"tok:1.a_b-c\",\"ttl_s\":5}", 404);
	{
		_cleanup_free_ char *ok = tu_fmt("{\"token\":\"%s\",\"ttl_s\":5}", id128);
		_cleanup_free_ char *bad = tu_fmt("{\"token\":\"%s\",\"ttl_s\":5}", id129);

		req0("POST", "/v1/runs/r-1/lease", ok, 404);
		req0("POST", "/v1/runs/r-1/lease", bad, 400);
		req0("POST", "/v1/runs/r-1/lease", "{\"token\":\"a/b\",\"ttl_s\":5}", 400);
	}
}
END_TEST

START_TEST(test_oversized_bodies_refused)
{
	size_t n = 200 * 1024; /* > --max-body-bytes 64K */
	_cleanup_free_ char *big = malloc(n + 64);
	lessor_client *c;
	struct lessor_response resp;
	char *chunked[] = {"Transfer-Encoding: chunked", "Content-Type: application/json", NULL};

	start();
	snprintf(big, 64, "{\"workflow\":\"w\",\"input\":\"");
	memset(big + strlen(big), 'a', n);
	strcpy(big + n, "\"}");
	req0("POST", "/v1/runs", big, 413);
	c = tu_lessor_client(L);
	ck_assert_int_eq(
	    lessor_client_request(c, "POST", "/v1/runs", chunked, big, strlen(big), &resp), 0);
	ck_assert_int_eq(resp.status, 413);
	lessor_response_done(&resp);
	lessor_client_free(c);
	req0("GET", "/v1/stats", NULL, 200); /* still serving */
}
END_TEST

START_TEST(test_bearer_token)
{
	long status = 0;
	_cleanup_free_ char *url = NULL, *health = NULL;

	start_with("s3cret-token", NULL);
	url = tu_fmt("%s/v1/stats", tu_lessor_url(L));
	health = tu_fmt("%s/healthz", tu_lessor_url(L));
	ck_assert_int_eq(tu_http_json("GET", url, NULL, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 401);
	ck_assert_int_eq(tu_http_json("GET", url, "s3cret-tokeN", NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 401);
	ck_assert_int_eq(tu_http_json("GET", url, "s3cret-token", NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(tu_http_json("GET", health, NULL, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
}
END_TEST

/* ---- admin ---- */

START_TEST(test_requeue_steals_and_cancel_reaches_worker)
{
	_cleanup_free_ char *id = NULL, *old = NULL, *tok = NULL, *lease = NULL, *renew = NULL;
	_cleanup_free_ char *requeue = NULL, *cancel = NULL;
	cJSON *j;

	start();
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("a", "w1", 1, 30, 0, NULL);
	old = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	requeue = tu_fmt("/v1/runs/%s/requeue", id);
	req0("POST", requeue, NULL, 200);
	req0("POST", requeue, NULL, 409); /* not running any more */
	writes_with(id, old, 409);
	j = claim("b", "w2", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	ck_assert_int_eq((int)jnum(cJSON_GetArrayItem(runs_of(j), 0), "attempt"), 1);
	cJSON_Delete(j);
	cancel = tu_fmt("/v1/runs/%s/cancel", id);
	j = req("POST", cancel, NULL, 200);
	ck_assert_str_eq(jstr(j, "status"), "running");
	cJSON_Delete(j);
	lease = tu_fmt("/v1/runs/%s/lease", id);
	renew = tu_fmt("{\"token\":\"%s\",\"ttl_s\":30}", tok);
	j = req("POST", lease, renew, 200);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "cancel_requested")));
	cJSON_Delete(j);
	complete(id, tok, "cancelled", false, 200, "cancelled");
	j = run(id);
	ck_assert_str_eq(
	    jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "leases"), 0), "end_reason"), "revoked");
	cJSON_Delete(j);
	req0("POST", cancel, NULL, 200); /* already cancelled: no-op */
}
END_TEST

START_TEST(test_list_filters)
{
	cJSON *j;

	start();
	free(enqueue("{\"workflow\":\"a\"}"));
	free(enqueue("{\"workflow\":\"b\"}"));
	free(enqueue("{\"workflow\":\"a\"}"));
	req0("POST", "/v1/runs/r-3/cancel", NULL, 200);
	j = req("GET", "/v1/runs?workflow=a", NULL, 200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 2);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0), "id"), "r-3");
	cJSON_Delete(j);
	j = req("GET", "/v1/runs?status=pending&limit=1", NULL, 200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 1);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0), "id"), "r-2");
	cJSON_Delete(j);
}
END_TEST

/* ---- fault injection ---- */

START_TEST(test_fault_injection)
{
	_cleanup_free_ char *id = NULL, *tok = NULL, *lease = NULL, *renew = NULL;
	_cleanup_free_ char *path = NULL, *body = NULL;
	lessor_client *c;
	struct lessor_response resp;
	usec_t t0;
	cJSON *j;

	start();
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("a", "w", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	req0("POST", "/v1/admin/faults",
	     "{\"endpoint\":\"complete\",\"status\":503,\"count\":2,\"retry_after_s\":1}", 200);
	path = tu_fmt("/v1/runs/%s/complete", id);
	body = tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\"}", tok);
	c = tu_lessor_client(L);
	for (int i = 0; i < 3; i++) {
		char *hdr[] = {"Content-Type: application/json", NULL};

		ck_assert_int_eq(
		    lessor_client_request(c, "POST", path, hdr, body, strlen(body), &resp), 0);
		ck_assert_int_eq(resp.status, i < 2 ? 503 : 200);
		ck_assert_int_eq(resp.retry_after_s, i < 2 ? 1 : -1);
		lessor_response_done(&resp);
	}
	lessor_client_free(c);
	assert_run_str(id, "status", "succeeded");
	/* a delay holds the request, then handles it normally */
	free(id);
	free(tok);
	id = enqueue("{\"workflow\":\"w\"}");
	j = claim("b", "w", 1, 30, 0, NULL);
	tok = token_of(cJSON_GetArrayItem(runs_of(j), 0));
	cJSON_Delete(j);
	req0("POST", "/v1/admin/faults", "{\"endpoint\":\"lease\",\"delay_ms\":300}", 200);
	lease = tu_fmt("/v1/runs/%s/lease", id);
	renew = tu_fmt("{\"token\":\"%s\",\"ttl_s\":30}", tok);
	t0 = time_mono();
	req0("POST", lease, renew, 200);
	ck_assert_msg(time_mono() - t0 >= 300 * USEC_PER_MSEC, "the delay was not applied");
	req0("POST", "/v1/admin/faults", "{\"endpoint\":\"claims\",\"status\":500,\"count\":5}",
	     200);
	req0("DELETE", "/v1/admin/faults", NULL, 200);
	j = claim("c", "w", 1, 30, 0, NULL);
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_faults_off_by_default)
{
	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	req0("POST", "/v1/admin/faults", "{\"endpoint\":\"lease\",\"status\":503}", 404);
}
END_TEST

/* ---- shutdown ---- */

START_TEST(test_sigterm_answers_long_polls)
{
	struct poller po = {.body = "{\"claim_id\":\"z\",\"worker_id\":\"w\",\"max_runs\":1,"
	                            "\"lease_ttl_s\":30,\"wait_s\":60}"};
	pthread_t t;
	usec_t t0;

	start();
	ck_assert_int_eq(pthread_create(&t, NULL, poller_main, &po), 0);
	wait_parked(1);
	t0 = time_mono();
	ck_assert_int_eq(tu_lessor_stop(L), 0);
	pthread_join(t, NULL);
	ck_assert_ptr_nonnull(po.resp); /* answered (empty), not cut */
	ck_assert_int_eq(cJSON_GetArraySize(runs_of(po.resp)), 0);
	ck_assert_msg(po.returned - t0 < tu_timeout(20 * USEC_PER_SEC), "held until its deadline");
	cJSON_Delete(po.resp);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_http");
	TCase *tc = tcase_create("http");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_concurrent_claimers_never_share);
	tcase_add_test(tc, test_long_poll_wakes_on_matching_enqueue);
	tcase_add_test(tc, test_enqueue_hands_run_to_parked_claim);
	tcase_add_test(tc, test_hand_off_oldest_claim_first);
	tcase_add_test(tc, test_hand_off_of_another_run_wakes_the_rest);
	tcase_add_test(tc, test_long_poll_deadline_and_zero_wait);
	tcase_add_test(tc, test_claim_cancel_answers_parked_poll);
	tcase_add_test(tc, test_long_poll_ends_when_client_hangs_up);
	tcase_add_test(tc, test_expired_lease_requeued_with_new_token);
	tcase_add_test(tc, test_claim_id_retry_returns_same_runs);
	tcase_add_test(tc, test_complete_is_idempotent);
	tcase_add_test(tc, test_complete_resent_while_in_flight);
	tcase_add_test(tc, test_input_and_output_kept_as_sent);
	tcase_add_test(tc, test_bad_utf8_refused);
	tcase_add_test(tc, test_escaped_member_names_refused);
	tcase_add_test(tc, test_log_content_range_resync);
	tcase_add_test(tc, test_retry_backoff_and_attempt_budget);
	tcase_add_test(tc, test_release_keeps_attempt);
	tcase_add_test(tc, test_routing_by_workflow_and_tags);
	tcase_add_test(tc, test_restart_keeps_acknowledged_state);
	tcase_add_test(tc, test_kill9_loses_no_acknowledged_write);
	tcase_add_test(tc, test_bad_input_is_4xx_and_changes_nothing);
	tcase_add_test(tc, test_vocabulary);
	tcase_add_test(tc, test_oversized_bodies_refused);
	tcase_add_test(tc, test_bearer_token);
	tcase_add_test(tc, test_requeue_steals_and_cancel_reaches_worker);
	tcase_add_test(tc, test_list_filters);
	tcase_add_test(tc, test_fault_injection);
	tcase_add_test(tc, test_faults_off_by_default);
	tcase_add_test(tc, test_sigterm_answers_long_polls);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
