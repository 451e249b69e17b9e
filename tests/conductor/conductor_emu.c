/* conductor_emu: an in-memory emulation of Conductor's task API, for tests and
 * benchmarks.  It is NOT Conductor: it is written from the facts in
 * docs/conductor.md, each read from the conductor-oss/conductor server source
 * (paths below are in that repository), and held to the official JS SDK by
 * tests/conductor/sdk.  Every behaviour a worker can observe carries a comment
 * naming the server file it comes from.
 *
 *   conductor_emu [--listen 127.0.0.1:PORT] [--ready-fd N] [--port-file F]
 *                 [--auth-key-id ID --auth-secret-file F] [--token-ttl SECONDS]
 *                 [--sweep-ms N] [--task-input-threshold-kb N] [--quiet]
 *
 *   --task-input-threshold-kb: conductor.app.taskInputPayloadSizeThreshold
 *   (ConductorProperties, 3072 KB by default).  A task whose input is larger
 *   as JSON goes to external payload storage when it is scheduled
 *   (ExternalPayloadStorageUtils.verifyAndUpload → TaskModel.externalizeInput;
 *   a default server has DummyPayloadStorage, files named <uuid>.json), and a
 *   worker gets inputData {} with externalInputPayloadStoragePath
 *   (TaskModel.toTask)
 *
 * Conductor's endpoints (under /api, see the handlers below):
 *   GET  /api/tasks/poll/batch/{taskType}  GET /api/tasks/poll/{taskType}
 *   POST /api/tasks   POST /api/tasks/update-v2
 *   GET  /api/tasks/{taskId}   GET|POST /api/tasks/{taskId}/log
 *   POST /api/token (only with --auth-key-id, as Orkes has it; OSS has none)
 *
 * Test controls under /emu/, which do NOT exist in Conductor (no auth):
 *   POST /emu/tasks {taskType, inputData?, responseTimeoutSeconds? (3600),
 *        retryCount? (3), retryDelaySeconds? (60), domain?, count? (1)}
 *        schedules `count` tasks, each in a workflow of its own; answers
 *        {taskId, workflowInstanceId, taskIds: [...]}
 *   GET  /emu/tasks[?taskType=T][&format=text]   every task, with what the emulator saw
 *        (status, workerId, pollCount, updates, extendLeases, logs, ...)
 *   GET  /emu/tasks/{taskId}[?format=text]   one of them
 *   POST /emu/tasks/{taskId}/cancel  terminate its workflow: every
 *        non-terminal task of it becomes CANCELED
 *   GET  /emu/wait?timeout_ms=N&(taskId=ID|workflowInstanceId=ID)&status=S,
 *        or ?taskType=T&status=S&count=N, or ?stat=NAME&count=N: answers 200
 *        once the task/workflow has status S, N tasks of type T have it, or
 *        a stats counter reached N; 408 at the timeout
 *   GET  /emu/counts   "STATUS N" lines (tasks, then workflow_STATUS), text
 *   POST /emu/faults {path?: prefix, count: N, status?: code, stall_ms?: N,
 *        reset?: true}  the next N /api requests under path are stalled,
 *        answered `status` (an ErrorResponse) or have their connection reset
 *   DELETE /emu/faults   GET /emu/stats   (request counters per endpoint)
 *
 * One thread per connection (libmicrohttpd); all state behind one mutex; a
 * sweeper thread plays the decider's response-timeout check every --sweep-ms. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "util/macro.h"
#include "util/random.h"

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

#define BODY_MAX (16u << 20)
#define MAX_POLL_TIMEOUT_MS 5000        /* ExecutionService.MAX_POLL_TIMEOUT_MS */
#define REASON_MAX 500                  /* TaskResult.setReasonForIncompletion */
#define EXEC_LOG_LIMIT 10               /* ConductorProperties.taskExecLogSizeLimit */
#define DEFAULT_RETRY_COUNT 3           /* TaskDef.retryCount */
#define DEFAULT_RETRY_DELAY_S 60        /* TaskDef.retryDelaySeconds */
#define DEFAULT_RESPONSE_TIMEOUT_S 3600 /* TaskDef.responseTimeoutSeconds (ONE_HOUR) */
#define UPDATE_V2_POLL_TIMEOUT_MS 100   /* ExecutionService.POLLING_TIMEOUT_IN_MS */
#define INSTANCE "conductor-emu"

/* TaskModel.Status (core/.../model/TaskModel.java): terminal and retriable. */
enum st {
	ST_SCHEDULED,
	ST_IN_PROGRESS,
	ST_COMPLETED,
	ST_FAILED,
	ST_FAILED_TERMINAL,
	ST_TIMED_OUT,
	ST_CANCELED,
	_ST_MAX
};
static const struct {
	const char *name;
	bool terminal, retriable;
} status_info[_ST_MAX] = {
    [ST_SCHEDULED] = {"SCHEDULED", false, true},
    [ST_IN_PROGRESS] = {"IN_PROGRESS", false, true},
    [ST_COMPLETED] = {"COMPLETED", true, true},
    [ST_FAILED] = {"FAILED", true, true},
    [ST_FAILED_TERMINAL] = {"FAILED_WITH_TERMINAL_ERROR", true, false},
    [ST_TIMED_OUT] = {"TIMED_OUT", true, true},
    [ST_CANCELED] = {"CANCELED", true, false},
};

enum wf_st { WF_RUNNING, WF_COMPLETED, WF_FAILED, WF_TIMED_OUT, WF_TERMINATED };
static const char *const wf_names[] = {"RUNNING", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"};

struct workflow {
	char id[UUID_STRING_MAX];
	enum wf_st status;
};

struct task {
	char id[UUID_STRING_MAX];
	struct workflow *wf;
	char *type, *domain, *worker, *reason, *retried_from;
	char *input_path;      /* externalInputPayloadStoragePath, or NULL */
	cJSON *input, *output; /* output NULL = JSON null (a result may send that) */
	cJSON *logs;           /* [{log, taskId, createdTime}] */
	enum st status;
	int retry_count, retry_max, retry_delay_s, poll_count;
	long long resp_timeout_s, callback_s;
	long long scheduled_ms, start_ms, end_ms, update_ms;
	bool queued, retried; /* queued: in its task queue, due at due_ms */
	long long due_ms;
	uint64_t seq;
	unsigned updates, extends, log_posts;
};

struct fault {
	char *path;
	unsigned count, status, stall_ms;
	bool reset;
};

struct token {
	char value[65];
	long long expires_ms;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* broadcast on every change a waiter may want */
	struct task **tasks;
	size_t n_tasks, cap_tasks;
	struct workflow **wfs;
	size_t n_wfs, cap_wfs;
	struct fault *faults;
	size_t n_faults;
	struct token *tokens;
	size_t n_tokens;
	cJSON *stats;
	uint64_t seq;
	bool stopping;
	/* options */
	char *key_id, *key_secret;
	long long token_ttl_ms;
	unsigned sweep_ms;
	long long input_threshold_kb;
	bool quiet;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .token_ttl_ms = 45LL * 60 * 1000,
       .sweep_ms = 100,
       .input_threshold_kb = 3072};

/* ------------------------------------------------------------------ time */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Absolute CLOCK_MONOTONIC deadline ms from now (E.cv uses that clock). */
static struct timespec mono_after(long long ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Task ids are random UUIDs (core IDGenerator: UUID.randomUUID()). */
static void uuid_v4(char out[UUID_STRING_MAX])
{
	uint8_t b[16];

	random_bytes(b, sizeof(b));
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(out, UUID_STRING_MAX,
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
	         b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
	         b[15]);
}

static void stat_inc(const char *name)
{
	cJSON *n = cJSON_GetObjectItemCaseSensitive(E.stats, name);

	if (n)
		cJSON_SetNumberValue(n, n->valuedouble + 1);
	else
		cJSON_AddNumberToObject(E.stats, name, 1);
	pthread_cond_broadcast(&E.cv); /* /emu/wait?stat= */
}

/* ----------------------------------------------------------------- model */

static struct task *task_find(const char *id)
{
	for (size_t i = 0; id && i < E.n_tasks; i++)
		if (strcmp(E.tasks[i]->id, id) == 0)
			return E.tasks[i];
	return NULL;
}

static struct workflow *wf_find(const char *id)
{
	for (size_t i = 0; id && i < E.n_wfs; i++)
		if (strcmp(E.wfs[i]->id, id) == 0)
			return E.wfs[i];
	return NULL;
}

static bool grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *p;

	if (n < *cap)
		return true;
	p = realloc(*v, (*cap ? *cap * 2 : 64) * size);
	if (!p)
		return false;
	*v = p;
	*cap = *cap ? *cap * 2 : 64;
	return true;
}

static void task_free(struct task *t)
{
	free(t->type);
	free(t->domain);
	free(t->worker);
	free(t->reason);
	free(t->retried_from);
	free(t->input_path);
	cJSON_Delete(t->input);
	cJSON_Delete(t->output);
	cJSON_Delete(t->logs);
	free(t);
}

/* ExternalPayloadStorageUtils.verifyAndUpload(TASK_INPUT): over the threshold,
 * the input goes to storage and the task keeps its path. */
static int input_externalize(struct task *t)
{
	_cleanup_free_ char *text = cJSON_PrintUnformatted(t->input);
	char name[UUID_STRING_MAX];

	if (!text)
		return -ENOMEM;
	if ((long long)strlen(text) <= E.input_threshold_kb * 1024)
		return 0;
	uuid_v4(name);
	return asprintf(&t->input_path, "%s.json", name) < 0 ? (t->input_path = NULL, -ENOMEM) : 0;
}

static struct task *task_add(struct workflow *wf, const char *type, const char *domain,
                             const cJSON *input)
{
	struct task *t = calloc(1, sizeof(*t));

	if (!t || !grow((void **)&E.tasks, &E.cap_tasks, E.n_tasks, sizeof(*E.tasks)))
		goto fail;
	uuid_v4(t->id);
	t->wf = wf;
	t->type = strdup(type);
	t->domain = domain && *domain ? strdup(domain) : NULL;
	t->input = input ? cJSON_Duplicate(input, true) : cJSON_CreateObject();
	t->output = cJSON_CreateObject();
	t->logs = cJSON_CreateArray();
	if (!t->type || (domain && *domain && !t->domain) || !t->input || !t->output || !t->logs ||
	    input_externalize(t) < 0)
		goto fail;
	t->seq = ++E.seq;
	E.tasks[E.n_tasks++] = t;
	return t;
fail:
	if (t)
		task_free(t);
	return NULL;
}

/* Into its task queue, due in delay_s (QueueDAO.push / postpone). */
static void task_enqueue(struct task *t, long long delay_s)
{
	t->queued = true;
	t->due_ms = now_ms() + delay_s * 1000;
	pthread_cond_broadcast(&E.cv);
}

/* Queue names: "domain:taskType", or "taskType" when the domain is null
 * (core/.../utils/QueueUtils.java).  A poll's `domain=` (empty) is bound as
 * "", not null: the queue ":taskType", which no task is scheduled into. */
static bool task_in_queue(const struct task *t, const char *type, const char *domain)
{
	if (strcmp(t->type, type) != 0)
		return false;
	if (!domain)
		return !t->domain;
	return t->domain && strcmp(t->domain, domain) == 0;
}

static void task_set_reason(struct task *t, const char *reason)
{
	free(t->reason);
	t->reason = reason ? strdup(reason) : NULL;
}

/* DeciderService.retry: a new task (new id) copying the failed one, or the
 * workflow ends when the status is not retriable or the retries are spent. */
static void decide_failed(struct task *t)
{
	struct task *n;

	if (!status_info[t->status].retriable || t->retry_count >= t->retry_max) {
		t->wf->status = t->status == ST_CANCELED    ? WF_TERMINATED
		                : t->status == ST_TIMED_OUT ? WF_TIMED_OUT
		                                            : WF_FAILED;
		return;
	}
	n = task_add(t->wf, t->type, t->domain, t->input);
	if (!n) {
		fprintf(stderr, "conductor_emu: out of memory scheduling a retry\n");
		return;
	}
	t->retried = true;
	n->retry_count = t->retry_count + 1;
	n->retry_max = t->retry_max;
	n->retry_delay_s = t->retry_delay_s;
	n->resp_timeout_s = t->resp_timeout_s;
	n->retried_from = strdup(t->id);
	task_set_reason(n, t->reason);
	n->callback_s = t->retry_delay_s; /* rescheduled.setCallbackAfterSeconds(startDelay) */
	n->scheduled_ms = now_ms();
	task_enqueue(n, t->retry_delay_s);
}

/* WorkflowExecutorOps.updateTask, then decide(): the workflow's next step. */
static void decide(struct task *t)
{
	if (t->status == ST_COMPLETED)
		t->wf->status = WF_COMPLETED;
	else if (status_info[t->status].terminal)
		decide_failed(t);
	pthread_cond_broadcast(&E.cv);
}

static void task_finish(struct task *t, enum st s)
{
	t->status = s;
	t->queued = false;
	if (!t->end_ms)
		t->end_ms = now_ms();
	if (!t->update_ms) /* ExecutionDAOFacade.updateTask: terminal keeps its updateTime */
		t->update_ms = t->end_ms;
}

/* WorkflowExecutorOps.terminateWorkflow → cancelNonTerminalTasks. */
static void wf_terminate(struct workflow *wf)
{
	for (size_t i = 0; i < E.n_tasks; i++)
		if (E.tasks[i]->wf == wf && !status_info[E.tasks[i]->status].terminal)
			task_finish(E.tasks[i], ST_CANCELED);
	wf->status = WF_TERMINATED;
	pthread_cond_broadcast(&E.cv);
}

/* DeciderService.isResponseTimedOut + timeoutTask: IN_PROGRESS and no update
 * for responseTimeoutSeconds + callbackAfterSeconds → TIMED_OUT, then retry. */
static void sweep(void)
{
	long long now = now_ms();
	size_t n = E.n_tasks; /* retries appended below are new, not swept now */

	for (size_t i = 0; i < n; i++) {
		struct task *t = E.tasks[i];
		char reason[256];

		if (t->status != ST_IN_PROGRESS || t->resp_timeout_s == 0 ||
		    now - t->update_ms < (t->resp_timeout_s + t->callback_s) * 1000)
			continue;
		snprintf(
		    reason, sizeof(reason),
		    "responseTimeout: %lld exceeded for the taskId: %s with Task Definition: %s",
		    t->resp_timeout_s, t->id, t->type);
		task_set_reason(t, reason);
		task_finish(t, ST_TIMED_OUT);
		decide(t);
	}
}

static void *sweeper(void *arg)
{
	pthread_mutex_lock(&E.mu);
	while (!E.stopping) {
		struct timespec ts = mono_after(E.sweep_ms);

		pthread_cond_timedwait(&E.cv, &E.mu, &ts);
		sweep();
	}
	pthread_mutex_unlock(&E.mu);
	return NULL;
}

/* --------------------------------------------------------------- render */

static void add_str(cJSON *o, const char *k, const char *v)
{
	if (v) /* ObjectMapperProvider: JsonInclude NON_NULL */
		cJSON_AddStringToObject(o, k, v);
}

/* common/.../metadata/tasks/Task.java as Jackson writes it (nulls left out). */
static cJSON *task_json(const struct task *t)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	add_str(o, "taskType", t->type);
	add_str(o, "status", status_info[t->status].name);
	/* TaskModel.toTask: an externalized input is {} */
	cJSON_AddItemToObject(
	    o, "inputData", t->input_path ? cJSON_CreateObject() : cJSON_Duplicate(t->input, true));
	add_str(o, "externalInputPayloadStoragePath", t->input_path);
	add_str(o, "referenceTaskName", t->type);
	cJSON_AddNumberToObject(o, "retryCount", t->retry_count);
	cJSON_AddNumberToObject(o, "seq", 1);
	cJSON_AddNumberToObject(o, "pollCount", t->poll_count);
	add_str(o, "taskDefName", t->type);
	cJSON_AddNumberToObject(o, "scheduledTime", (double)t->scheduled_ms);
	cJSON_AddNumberToObject(o, "startTime", (double)t->start_ms);
	cJSON_AddNumberToObject(o, "endTime", (double)t->end_ms);
	cJSON_AddNumberToObject(o, "updateTime", (double)t->update_ms);
	cJSON_AddNumberToObject(o, "startDelayInSeconds", t->retry_count ? t->retry_delay_s : 0);
	add_str(o, "retriedTaskId", t->retried_from);
	cJSON_AddBoolToObject(o, "retried", t->retried);
	cJSON_AddBoolToObject(o, "executed", status_info[t->status].terminal);
	cJSON_AddBoolToObject(o, "callbackFromWorker", true);
	cJSON_AddNumberToObject(o, "responseTimeoutSeconds", (double)t->resp_timeout_s);
	add_str(o, "workflowInstanceId", t->wf->id);
	add_str(o, "workflowType", "emu_workflow");
	add_str(o, "taskId", t->id);
	add_str(o, "reasonForIncompletion", t->reason);
	cJSON_AddNumberToObject(o, "callbackAfterSeconds", (double)t->callback_s);
	add_str(o, "workerId", t->worker);
	if (t->output)
		cJSON_AddItemToObject(o, "outputData", cJSON_Duplicate(t->output, true));
	add_str(o, "domain", t->domain);
	cJSON_AddNumberToObject(o, "rateLimitPerFrequency", 0);
	cJSON_AddNumberToObject(o, "rateLimitFrequencyInSeconds", 0);
	cJSON_AddNumberToObject(o, "workflowPriority", 0);
	cJSON_AddNumberToObject(o, "iteration", 0);
	return o;
}

/* The /emu/ view: the task as Conductor shows it, plus what the emulator saw. */
static cJSON *emu_task_json(const struct task *t)
{
	cJSON *o = task_json(t);

	if (!o)
		return NULL;
	cJSON_AddItemToObject(o, "logs", cJSON_Duplicate(t->logs, true));
	cJSON_AddNumberToObject(o, "updates", t->updates);
	cJSON_AddNumberToObject(o, "extendLeases", t->extends);
	cJSON_AddNumberToObject(o, "logPosts", t->log_posts);
	cJSON_AddBoolToObject(o, "queued", t->queued);
	add_str(o, "workflowStatus", wf_names[t->wf->status]);
	cJSON_AddNumberToObject(o, "retryCountMax", t->retry_max);
	return o;
}

/* --------------------------------------------------------------- replies */

struct req {
	char *body;
	size_t len;
	bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype,
                             char *body)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"",
	                                    body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	if (ctype)
		MHD_add_response_header(r, "Content-Type", ctype);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, cJSON *j)
{
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;

	cJSON_Delete(j);
	if (!s)
		return reply(c, 500, NULL, NULL);
	return reply(c, status, "application/json", s);
}

/* ErrorResponse (common/.../validation/ErrorResponse.java) as
 * ApplicationExceptionMapper.handleAll builds it. */
static cJSON *error_json(unsigned status, bool retryable, const char *fmt, ...) _printf_(3, 4);
static cJSON *error_json(unsigned status, bool retryable, const char *fmt, ...)
{
	cJSON *o = cJSON_CreateObject();
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cJSON_AddNumberToObject(o, "status", status);
	cJSON_AddStringToObject(o, "message", msg);
	cJSON_AddStringToObject(o, "instance", INSTANCE);
	cJSON_AddBoolToObject(o, "retryable", retryable);
	return o;
}

#define reply_error(c, status, retryable, ...)                                                     \
	reply_json(c, status, error_json(status, retryable, __VA_ARGS__))

/* ValidationExceptionMapper: a ConstraintViolationException is 400 with
 * validationErrors [{path, message}] (invalidValue left out when null). */
static cJSON *violations_json(cJSON *errors)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "status", 400);
	cJSON_AddStringToObject(o, "message", "Validation failed, check below errors for detail.");
	cJSON_AddBoolToObject(o, "retryable", false);
	cJSON_AddItemToObject(o, "validationErrors", errors);
	return o;
}

/* ---------------------------------------------------------------- poll */

/* SqliteQueueDAO.popMessages: due messages of the queue, oldest due first
 * (priority is always 0 here), marked popped. */
static struct task *pop_one(const char *type, const char *domain)
{
	struct task *best = NULL;
	long long now = now_ms();

	for (size_t i = 0; i < E.n_tasks; i++) {
		struct task *t = E.tasks[i];

		if (!t->queued || t->due_ms > now || !task_in_queue(t, type, domain))
			continue;
		if (!best || t->due_ms < best->due_ms ||
		    (t->due_ms == best->due_ms && t->seq < best->seq))
			best = t;
	}
	return best;
}

/* ExecutionService.poll, for one popped task: give it to the worker. */
static void hand_out(struct task *t, const char *worker)
{
	t->queued = false; /* popped, then acked (ExecutionService.ackTaskReceived) */
	t->status = ST_IN_PROGRESS;
	if (!t->start_ms)
		t->start_ms = now_ms();
	t->callback_s = 0;
	free(t->worker);
	t->worker = worker ? strdup(worker) : NULL;
	t->poll_count++;
	t->update_ms = now_ms();
	pthread_cond_broadcast(&E.cv);
}

/* The earliest due time of a queued task of this queue, or -1. */
static long long next_due(const char *type, const char *domain)
{
	long long best = -1;

	for (size_t i = 0; i < E.n_tasks; i++)
		if (E.tasks[i]->queued && task_in_queue(E.tasks[i], type, domain) &&
		    (best < 0 || E.tasks[i]->due_ms < best))
			best = E.tasks[i]->due_ms;
	return best;
}

/* SqliteQueueDAO.pollMessages: pop what is due; while fewer than count and
 * the timeout has not passed, wait and pop again; then whatever was popped.
 * (The server re-pops every 100 ms; we wake when a task is queued.)  Called
 * and returns with E.mu held. */
static cJSON *poll_tasks(const char *type, const char *domain, const char *worker, int count,
                         int timeout_ms)
{
	cJSON *a = cJSON_CreateArray();
	long long end = mono_ms() + timeout_ms;
	int got = 0;

	for (;;) {
		struct task *t;

		while (got < count && (t = pop_one(type, domain))) {
			hand_out(t, worker);
			cJSON_AddItemToArray(a, task_json(t));
			got++;
		}
		long long left = end - mono_ms(), due = next_due(type, domain);

		if (got >= count || timeout_ms < 1 || left <= 0 || E.stopping)
			break;
		if (due >= 0) /* a postponed task may come due before the end */
			left = MIN(left, MAX(due - now_ms(), 1));
		struct timespec ts = mono_after(left);
		pthread_cond_timedwait(&E.cv, &E.mu, &ts);
	}
	return a;
}

/* Query integers as Spring binds `int`: absent = default, not a number =
 * MethodArgumentTypeMismatchException, which ApplicationExceptionMapper maps to 500. */
static int query_int(struct MHD_Connection *c, const char *key, int def, int *ret)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
	char *end;
	long n;

	if (!v || !*v) { /* Spring: an empty value takes the defaultValue too */
		*ret = def;
		return 0;
	}
	errno = 0;
	n = strtol(v, &end, 10);
	if (!*v || *end || errno || n < -2147483648L || n > 2147483647L)
		return -EINVAL;
	*ret = (int)n;
	return 0;
}

/* GET /api/tasks/poll/batch/{taskType}: TaskResource.batchPoll → always 200,
 * a JSON array, [] when empty. */
static enum MHD_Result h_batch_poll(struct MHD_Connection *c, const char *type)
{
	const char *worker = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "workerid");
	const char *domain = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "domain");
	int count, timeout;
	cJSON *a;

	if (query_int(c, "count", 1, &count) < 0 || query_int(c, "timeout", 100, &timeout) < 0)
		return reply_error(c, 500, false,
		                   "Failed to convert value of type 'java.lang.String' "
		                   "to required type 'int'");
	if (timeout > MAX_POLL_TIMEOUT_MS) /* ExecutionService.poll */
		return reply_error(c, 400, false,
		                   "Long Poll Timeout value cannot be more than 5 seconds");
	pthread_mutex_lock(&E.mu);
	stat_inc("poll");
	a = count < 1 ? cJSON_CreateArray() : poll_tasks(type, domain, worker, count, timeout);
	if (cJSON_GetArraySize(a) > 0)
		stat_inc("poll_nonempty");
	pthread_mutex_unlock(&E.mu);
	return reply_json(c, 200, a);
}

/* GET /api/tasks/poll/{taskType}: one task (100 ms), 204 when none
 * (TaskResource.poll, ExecutionService.getLastPollTask). */
static enum MHD_Result h_poll_one(struct MHD_Connection *c, const char *type)
{
	const char *worker = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "workerid");
	const char *domain = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "domain");
	cJSON *a, *t;

	pthread_mutex_lock(&E.mu);
	stat_inc("poll");
	a = poll_tasks(type, domain, worker, 1, UPDATE_V2_POLL_TIMEOUT_MS);
	pthread_mutex_unlock(&E.mu);
	t = cJSON_DetachItemFromArray(a, 0);
	cJSON_Delete(a);
	return t ? reply_json(c, 200, t) : reply(c, 204, NULL, NULL);
}

/* -------------------------------------------------------------- update */

struct result {
	const char *wf_id, *task_id, *worker, *reason;
	int status; /* -1: none given */
	long long callback_s;
	bool extend;
	const cJSON *output; /* NULL = absent, cJSON_NULL = null */
	const cJSON *logs;
};

static int status_parse(const char *s)
{
	/* TaskResult.Status: IN_PROGRESS, FAILED, FAILED_WITH_TERMINAL_ERROR,
	 * COMPLETED, CANCELED; anything else fails deserialization. */
	static const enum st ok[] = {ST_IN_PROGRESS, ST_FAILED, ST_FAILED_TERMINAL, ST_COMPLETED,
	                             ST_CANCELED};

	for (size_t i = 0; i < ELEMENTSOF(ok); i++)
		if (strcmp(s, status_info[ok[i]].name) == 0)
			return ok[i];
	return -1;
}

static bool is_str_or_null(const cJSON *j)
{
	return !j || cJSON_IsString(j) || cJSON_IsNull(j);
}

/* Jackson's reading of a TaskResult: a type mismatch or an unknown enum value
 * is an HttpMessageNotReadableException (500 through ApplicationExceptionMapper);
 * unknown fields are ignored (FAIL_ON_UNKNOWN_PROPERTIES false). */
static const char *result_parse(const cJSON *j, struct result *r)
{
	const cJSON *v;

	if (!cJSON_IsObject(j))
		return "JSON parse error: cannot deserialize TaskResult";
	*r = (struct result){.status = -1};
#define STR(field, key)                                                                            \
	v = cJSON_GetObjectItemCaseSensitive(j, key);                                              \
	if (!is_str_or_null(v))                                                                    \
		return "JSON parse error: " key " is not a string";                                \
	r->field = cJSON_IsString(v) ? v->valuestring : NULL;
	STR(wf_id, "workflowInstanceId");
	STR(task_id, "taskId");
	STR(worker, "workerId");
	STR(reason, "reasonForIncompletion");
#undef STR
	v = cJSON_GetObjectItemCaseSensitive(j, "status");
	if (!is_str_or_null(v) ||
	    (cJSON_IsString(v) && (r->status = status_parse(v->valuestring)) < 0))
		return "JSON parse error: Cannot deserialize value of type "
		       "`TaskResult$Status`: not one of the values accepted for Enum class: "
		       "[IN_PROGRESS, FAILED, FAILED_WITH_TERMINAL_ERROR, COMPLETED, CANCELED]";
	v = cJSON_GetObjectItemCaseSensitive(j, "callbackAfterSeconds");
	if (v && !cJSON_IsNull(v) && !cJSON_IsNumber(v))
		return "JSON parse error: callbackAfterSeconds is not a number";
	r->callback_s = cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
	v = cJSON_GetObjectItemCaseSensitive(j, "extendLease");
	if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
		return "JSON parse error: extendLease is not a boolean";
	r->extend = cJSON_IsTrue(v);
	v = cJSON_GetObjectItemCaseSensitive(j, "outputData");
	if (v && !cJSON_IsNull(v) && !cJSON_IsObject(v))
		return "JSON parse error: outputData is not an object";
	r->output = v;
	v = cJSON_GetObjectItemCaseSensitive(j, "logs");
	if (v && !cJSON_IsNull(v) && !cJSON_IsArray(v))
		return "JSON parse error: logs is not an array";
	r->logs = cJSON_IsArray(v) ? v : NULL;
	cJSON_ArrayForEach(v, r->logs)
	{
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(v, "log");
		const cJSON *ct = cJSON_GetObjectItemCaseSensitive(v, "createdTime");

		if (!cJSON_IsObject(v) || !is_str_or_null(l) ||
		    (ct && !cJSON_IsNull(ct) && !cJSON_IsNumber(ct)))
			return "JSON parse error: cannot deserialize TaskExecLog";
	}
	return NULL;
}

/* TaskService.updateTask's @NotEmpty checks on TaskResult. */
static cJSON *result_violations(const struct result *r)
{
	cJSON *errs = cJSON_CreateArray(), *e;

	if (!r->wf_id || !*r->wf_id) {
		e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "path", "updateTask.taskResult.workflowInstanceId");
		cJSON_AddStringToObject(e, "message", "Workflow Id cannot be null or empty");
		cJSON_AddItemToArray(errs, e);
	}
	if (!r->task_id || !*r->task_id) {
		e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "path", "updateTask.taskResult.taskId");
		cJSON_AddStringToObject(e, "message", "Task ID cannot be null or empty");
		cJSON_AddItemToArray(errs, e);
	}
	if (cJSON_GetArraySize(errs) == 0) {
		cJSON_Delete(errs);
		return NULL;
	}
	return errs;
}

/* TaskResult.setReasonForIncompletion keeps the first 500 characters
 * (Java chars; here code points of the UTF-8). */
static char *reason_cap(const char *s)
{
	size_t i = 0, chars = 0;

	if (!s)
		return NULL;
	while (s[i] && chars < REASON_MAX) {
		i++;
		while ((s[i] & 0xc0) == 0x80)
			i++;
		chars++;
	}
	return strndup(s, i);
}

static void logs_append(struct task *t, const cJSON *logs)
{
	const cJSON *l;
	int n = 0;

	/* ExecutionDAOFacade.addTaskExecLog: at most taskExecLogSizeLimit (10)
	 * entries per call are kept, the rest dropped; each gets the task's id. */
	cJSON_ArrayForEach(l, logs)
	{
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(l, "log");
		const cJSON *ct = cJSON_GetObjectItemCaseSensitive(l, "createdTime");
		cJSON *e;

		if (n++ >= EXEC_LOG_LIMIT)
			break;
		e = cJSON_CreateObject();
		if (cJSON_IsString(text))
			cJSON_AddStringToObject(e, "log", text->valuestring);
		cJSON_AddStringToObject(e, "taskId", t->id);
		cJSON_AddNumberToObject(e, "createdTime", cJSON_IsNumber(ct) ? ct->valuedouble : 0);
		cJSON_AddItemToArray(t->logs, e);
	}
}

/* WorkflowExecutorOps.updateTask on a live task of a live workflow. */
static void result_apply(struct task *t, const struct result *r)
{
	enum st s = (enum st)r->status;

	/* A worker task sent IN_PROGRESS becomes SCHEDULED, back in its queue
	 * after callbackAfterSeconds (queueDAO.postpone). */
	if (s == ST_IN_PROGRESS)
		s = ST_SCHEDULED;
	free(t->reason);
	t->reason = reason_cap(r->reason);
	free(t->worker);
	t->worker = r->worker ? strdup(r->worker) : NULL;
	t->callback_s = r->callback_s;
	/* outputData replaces the task's output; absent = an empty map (the
	 * field's initialiser), explicit null = null. */
	cJSON_Delete(t->output);
	t->output = !r->output                ? cJSON_CreateObject()
	            : cJSON_IsNull(r->output) ? NULL
	                                      : cJSON_Duplicate(r->output, true);
	t->updates++;
	if (status_info[s].terminal) {
		task_finish(t, s);
	} else {
		t->status = s;
		t->update_ms = now_ms();
		task_enqueue(t, r->callback_s);
	}
	if (r->logs)
		logs_append(t, r->logs);
	decide(t);
}

/* The update proper, with E.mu held: 200, or an error status with
 * *ret_err (an ErrorResponse).  *ret_task: the task after it (NULL after a
 * lease extension), for update-v2; *ret_id its id as the body gave it. */
static unsigned update(const struct req *q, struct task **ret_task, char **ret_id, cJSON **ret_err)
{
	_cleanup_json_ cJSON *j = NULL;
	struct result r;
	const char *bad;
	cJSON *errs;
	struct task *t;
	struct workflow *wf;

	*ret_task = NULL;
	if (!q->len) /* Spring: required request body is missing → 500 */
		return *ret_err = error_json(500, false, "Required request body is missing"), 500;
	j = cJSON_ParseWithLength(q->body, q->len);
	if (!j)
		return *ret_err = error_json(500, false, "JSON parse error: malformed TaskResult"),
		       500;
	if ((bad = result_parse(j, &r)))
		return *ret_err = error_json(500, false, "%s", bad), 500;
	if ((errs = result_violations(&r)))
		return *ret_err = violations_json(errs), 400;
	if (r.extend) { /* WorkflowExecutorOps.extendLease: only updateTime moves */
		t = task_find(r.task_id);
		if (!t)
			return *ret_err = error_json(404, false, "No such task found by id: %s",
			                             r.task_id),
			       404;
		t->extends++;
		if (!status_info[t->status].terminal)
			t->update_ms = now_ms();
		pthread_cond_broadcast(&E.cv);
		*ret_id = strdup(r.task_id);
		return 200;
	}
	wf = wf_find(r.wf_id);
	if (!wf) /* ExecutionDAOFacade.getWorkflowModel */
		return *ret_err =
		           error_json(404, false, "No such workflow found by id: %s", r.wf_id),
		       404;
	t = task_find(r.task_id);
	if (!t)
		return *ret_err = error_json(404, false, "No such task found by id: %s", r.task_id),
		       404;
	*ret_task = t;
	*ret_id = strdup(r.task_id);
	/* Already terminal, or its workflow is: ignored, answered as accepted. */
	if (status_info[t->status].terminal || wf->status != WF_RUNNING) {
		t->updates++;
		stat_inc("update_ignored");
		return 200;
	}
	if (r.status < 0) { /* taskResult.getStatus().name() on null: an NPE */
		free(TAKE_PTR(*ret_id));
		*ret_task = NULL;
		return *ret_err = error_json(500, false,
		                             "Cannot invoke \"TaskResult$Status.name()\" "
		                             "because the return value of "
		                             "\"TaskResult.getStatus()\" is null"),
		       500;
	}
	result_apply(t, &r);
	return 200;
}

/* A @RequestBody read by Jackson takes application/json and application/...+json
 * only; anything else (or none: application/octet-stream) is Spring's
 * HttpMediaTypeNotSupportedException, which ApplicationExceptionMapper does not
 * list: 500. */
static cJSON *json_body_refused(struct MHD_Connection *c)
{
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	size_t n = ct ? strcspn(ct, "; \t") : 0;

	if (ct && ((n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
	           (n > 17 && strncasecmp(ct, "application/", 12) == 0 &&
	            strncasecmp(ct + n - 5, "+json", 5) == 0)))
		return NULL;
	return error_json(500, false, "Content-Type '%.*s' is not supported",
	                  ct ? (int)MIN(n, 100) : 24, ct ? ct : "application/octet-stream");
}

/* POST /api/tasks: 200 text/plain with the task id (TaskResource.updateTask). */
static enum MHD_Result h_update(struct MHD_Connection *c, const struct req *q)
{
	struct task *t;
	cJSON *err = NULL;
	char *id = NULL;
	unsigned status;

	if ((err = json_body_refused(c)))
		return reply_json(c, 500, err);
	pthread_mutex_lock(&E.mu);
	stat_inc("update");
	status = update(q, &t, &id, &err);
	pthread_mutex_unlock(&E.mu);
	if (status != 200)
		return reply_json(c, status, err);
	return reply(c, 200, "text/plain;charset=UTF-8", id);
}

/* POST /api/tasks/update-v2 (TaskResource.updateTaskV2): 204 unless the task
 * is terminal after the update; then the next task of its type and domain
 * for the same worker (a 100 ms poll), or 204. */
static enum MHD_Result h_update_v2(struct MHD_Connection *c, const struct req *q)
{
	struct task *t = NULL;
	cJSON *err = NULL, *a = NULL, *next;
	_cleanup_free_ char *id = NULL;
	unsigned status;

	if ((err = json_body_refused(c)))
		return reply_json(c, 500, err);
	pthread_mutex_lock(&E.mu);
	stat_inc("update_v2");
	status = update(q, &t, &id, &err);
	if (status == 200 && t && status_info[t->status].terminal) {
		_cleanup_json_ cJSON *j = cJSON_ParseWithLength(q->body, q->len);
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workerId");
		_cleanup_free_ char *type = strdup(t->type);
		_cleanup_free_ char *domain = t->domain ? strdup(t->domain) : NULL;

		a = poll_tasks(type, domain, cJSON_IsString(w) ? w->valuestring : NULL, 1,
		               UPDATE_V2_POLL_TIMEOUT_MS);
	}
	pthread_mutex_unlock(&E.mu);
	if (status != 200)
		return reply_json(c, status, err);
	next = a ? cJSON_DetachItemFromArray(a, 0) : NULL;
	cJSON_Delete(a);
	return next ? reply_json(c, 200, next) : reply(c, 204, NULL, NULL);
}

/* ----------------------------------------------------------- task reads */

/* GET /api/tasks/{taskId}: 200 Task, else 404 (TaskResource.getTask). */
static enum MHD_Result h_get_task(struct MHD_Connection *c, const char *id)
{
	struct task *t;
	cJSON *j = NULL;

	pthread_mutex_lock(&E.mu);
	stat_inc("get_task");
	if ((t = task_find(id)))
		j = task_json(t);
	pthread_mutex_unlock(&E.mu);
	if (!t)
		return reply_error(c, 404, false, "Task not found for taskId: %s", id);
	return reply_json(c, 200, j);
}

/* POST /api/tasks/{taskId}/log: the body, raw (@RequestBody String), is one
 * log entry; the task is not looked up (ExecutionService.log), so any id is
 * 200 with an empty body.  An empty body: required body missing → 500. */
static enum MHD_Result h_post_log(struct MHD_Connection *c, const char *id, const struct req *q)
{
	struct task *t;
	cJSON *e;

	if (!q->len)
		return reply_error(c, 500, false, "Required request body is missing");
	pthread_mutex_lock(&E.mu);
	stat_inc("log");
	if ((t = task_find(id))) {
		e = cJSON_CreateObject();
		_cleanup_free_ char *text = strndup(q->body, q->len);

		cJSON_AddStringToObject(e, "log", text ? text : "");
		cJSON_AddStringToObject(e, "taskId", id);
		cJSON_AddNumberToObject(e, "createdTime", (double)now_ms());
		cJSON_AddItemToArray(t->logs, e);
		t->log_posts++;
	}
	pthread_mutex_unlock(&E.mu);
	return reply(c, 200, NULL, NULL);
}

/* GET /api/tasks/{taskId}/log: 200 [TaskExecLog], 204 when there is none. */
static enum MHD_Result h_get_log(struct MHD_Connection *c, const char *id)
{
	struct task *t;
	cJSON *a = NULL;

	pthread_mutex_lock(&E.mu);
	stat_inc("get_log");
	if ((t = task_find(id)) && cJSON_GetArraySize(t->logs) > 0)
		a = cJSON_Duplicate(t->logs, true);
	pthread_mutex_unlock(&E.mu);
	return a ? reply_json(c, 200, a) : reply(c, 204, NULL, NULL);
}

/* ------------------------------------------------------------------ auth */

/* Orkes' POST /api/token {keyId, keySecret} → {token} (the OSS server has no
 * such endpoint: 404 there, and here without --auth-key-id).  Not in the OSS
 * source: the shape is what the official SDK sends and reads (handleAuth). */
static enum MHD_Result h_token(struct MHD_Connection *c, const struct req *q)
{
	_cleanup_json_ cJSON *j = cJSON_ParseWithLength(q->body, q->len);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "keyId");
	const cJSON *secret = cJSON_GetObjectItemCaseSensitive(j, "keySecret");
	struct token *tok;
	cJSON *o;

	if (!cJSON_IsString(id) || !cJSON_IsString(secret) ||
	    strcmp(id->valuestring, E.key_id) != 0 ||
	    strcmp(secret->valuestring, E.key_secret) != 0) {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "error", "INVALID_CREDENTIALS");
		cJSON_AddStringToObject(o, "message", "Invalid keyId or keySecret");
		return reply_json(c, 401, o);
	}
	pthread_mutex_lock(&E.mu);
	stat_inc("token");
	tok = realloc(E.tokens, (E.n_tokens + 1) * sizeof(*E.tokens));
	if (tok) {
		uint8_t b[32];

		E.tokens = tok;
		tok = &E.tokens[E.n_tokens++];
		random_bytes(b, sizeof(b));
		for (size_t i = 0; i < sizeof(b); i++)
			snprintf(tok->value + 2 * i, 3, "%02x", b[i]);
		tok->expires_ms = mono_ms() + E.token_ttl_ms;
	}
	o = cJSON_CreateObject();
	if (tok)
		cJSON_AddStringToObject(o, "token", tok->value);
	pthread_mutex_unlock(&E.mu);
	return tok ? reply_json(c, 200, o) : reply_error(c, 500, false, "out of memory");
}

/* NULL when the request may pass, else the error code for the 401 body
 * ({error, message}: what the SDK's isTokenError reads). */
static const char *auth_refused(struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Authorization");
	const char *why = "INVALID_TOKEN";

	if (!E.key_id)
		return NULL;
	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; h && i < E.n_tokens; i++)
		if (strcmp(E.tokens[i].value, h) == 0) {
			why = E.tokens[i].expires_ms > mono_ms() ? NULL : "EXPIRED_TOKEN";
			break;
		}
	if (why)
		stat_inc("auth_refused");
	pthread_mutex_unlock(&E.mu);
	return why;
}

/* ---------------------------------------------------------------- faults */

enum fault_act { FAULT_NONE, FAULT_ANSWERED, FAULT_RESET };

/* Applies the first matching fault rule to this /api request. */
static enum fault_act fault_apply(struct MHD_Connection *c, const char *url, enum MHD_Result *ret)
{
	struct fault f = {0};

	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_faults; i++)
		if (E.faults[i].count > 0 &&
		    strncmp(url, E.faults[i].path, strlen(E.faults[i].path)) == 0) {
			E.faults[i].count--;
			f = E.faults[i];
			stat_inc("faults");
			break;
		}
	pthread_mutex_unlock(&E.mu);
	for (unsigned waited = 0; waited < f.stall_ms; waited += 10) {
		bool stop;

		pthread_mutex_lock(&E.mu);
		stop = E.stopping;
		pthread_mutex_unlock(&E.mu);
		if (stop)
			break;
		usleep(10000);
	}
	if (f.reset)
		return FAULT_RESET;
	if (f.status) {
		*ret = reply_error(c, f.status, f.status >= 500, "injected fault (emulator)");
		return FAULT_ANSWERED;
	}
	return FAULT_NONE;
}

static enum MHD_Result h_emu_faults(struct MHD_Connection *c, const char *method,
                                    const struct req *q)
{
	_cleanup_json_ cJSON *j = NULL;
	const cJSON *path, *count, *status, *stall, *reset;
	struct fault *v;

	if (strcmp(method, "DELETE") == 0) {
		pthread_mutex_lock(&E.mu);
		for (size_t i = 0; i < E.n_faults; i++)
			free(E.faults[i].path);
		E.n_faults = 0;
		pthread_mutex_unlock(&E.mu);
		return reply(c, 204, NULL, NULL);
	}
	j = cJSON_ParseWithLength(q->body, q->len);
	path = cJSON_GetObjectItemCaseSensitive(j, "path");
	count = cJSON_GetObjectItemCaseSensitive(j, "count");
	status = cJSON_GetObjectItemCaseSensitive(j, "status");
	stall = cJSON_GetObjectItemCaseSensitive(j, "stall_ms");
	reset = cJSON_GetObjectItemCaseSensitive(j, "reset");
	if (!cJSON_IsObject(j) || (path && !cJSON_IsString(path)) || !cJSON_IsNumber(count) ||
	    count->valuedouble < 1 || (status && !cJSON_IsNumber(status)) ||
	    (stall && !cJSON_IsNumber(stall)) || (reset && !cJSON_IsBool(reset)))
		return reply_error(c, 400, false,
		                   "emu: want {path?, count, status?, stall_ms?, reset?}");
	pthread_mutex_lock(&E.mu);
	v = realloc(E.faults, (E.n_faults + 1) * sizeof(*E.faults));
	if (v) {
		E.faults = v;
		E.faults[E.n_faults++] = (struct fault){
		    .path = strdup(path ? path->valuestring : "/api/"),
		    .count = (unsigned)count->valuedouble,
		    .status = status ? (unsigned)status->valuedouble : 0,
		    .stall_ms = stall ? (unsigned)stall->valuedouble : 0,
		    .reset = cJSON_IsTrue(reset),
		};
	}
	pthread_mutex_unlock(&E.mu);
	return reply(c, v ? 204 : 500, NULL, NULL);
}

/* ------------------------------------------------------ /emu/ controls */

static long long num_or(const cJSON *j, const char *key, long long def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);

	return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

/* POST /emu/tasks: schedule tasks as a one-task workflow would (the decider
 * schedules a SIMPLE task: SCHEDULED, scheduledTime now, into its queue). */
static enum MHD_Result h_emu_create(struct MHD_Connection *c, const struct req *q)
{
	_cleanup_json_ cJSON *j = cJSON_ParseWithLength(q->body, q->len);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "taskType");
	const cJSON *input = cJSON_GetObjectItemCaseSensitive(j, "inputData");
	const cJSON *domain = cJSON_GetObjectItemCaseSensitive(j, "domain");
	long long n = num_or(j, "count", 1);
	cJSON *o, *ids;

	if (!cJSON_IsString(type) || !*type->valuestring || (input && !cJSON_IsObject(input)) ||
	    (domain && !cJSON_IsString(domain)) || n < 1 || n > 1000000 ||
	    num_or(j, "retryCount", 0) < 0 || num_or(j, "responseTimeoutSeconds", 1) < 1 ||
	    num_or(j, "retryDelaySeconds", 0) < 0)
		return reply_error(c, 400, false,
		                   "emu: want {taskType, inputData?, responseTimeoutSeconds? >= 1, "
		                   "retryCount? >= 0, retryDelaySeconds? >= 0, domain?, count?}");
	o = cJSON_CreateObject();
	ids = cJSON_AddArrayToObject(o, "taskIds");
	pthread_mutex_lock(&E.mu);
	for (long long i = 0; i < n; i++) {
		struct workflow *wf = calloc(1, sizeof(*wf));
		struct task *t = NULL;

		if (wf && grow((void **)&E.wfs, &E.cap_wfs, E.n_wfs, sizeof(*E.wfs))) {
			uuid_v4(wf->id);
			E.wfs[E.n_wfs++] = wf;
			t = task_add(wf, type->valuestring, domain ? domain->valuestring : NULL,
			             input);
		} else {
			free(wf);
		}
		if (!t)
			break;
		t->resp_timeout_s = num_or(j, "responseTimeoutSeconds", DEFAULT_RESPONSE_TIMEOUT_S);
		t->retry_max = (int)num_or(j, "retryCount", DEFAULT_RETRY_COUNT);
		t->retry_delay_s = (int)num_or(j, "retryDelaySeconds", DEFAULT_RETRY_DELAY_S);
		t->scheduled_ms = now_ms();
		task_enqueue(t, 0);
		cJSON_AddItemToArray(ids, cJSON_CreateString(t->id));
		if (i == 0) {
			cJSON_AddStringToObject(o, "taskId", t->id);
			cJSON_AddStringToObject(o, "workflowInstanceId", wf->id);
		}
	}
	stat_inc("emu_create");
	pthread_mutex_unlock(&E.mu);
	if (cJSON_GetArraySize(ids) < n) {
		cJSON_Delete(o);
		return reply_error(c, 500, false, "emu: out of memory");
	}
	return reply_json(c, 200, o);
}

static bool fmt_text(struct MHD_Connection *c)
{
	const char *f = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");

	return f && strcmp(f, "text") == 0;
}

/* One line per task, for shell scripts: id type status retryCount workerId
 * pollCount reason (cut at 80 bytes). */
static enum MHD_Result emu_list_text(struct MHD_Connection *c, const char *type)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return reply(c, 500, NULL, NULL);
	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_tasks; i++) {
		const struct task *t = E.tasks[i];

		if (type && strcmp(type, t->type) != 0)
			continue;
		fprintf(f, "%s %-10s %-26s retry=%d worker=%s polls=%d %.80s\n", t->id, t->type,
		        status_info[t->status].name, t->retry_count, t->worker ? t->worker : "-",
		        t->poll_count, t->reason ? t->reason : "");
	}
	pthread_mutex_unlock(&E.mu);
	fclose(f);
	return reply(c, 200, "text/plain;charset=UTF-8", text);
}

static enum MHD_Result h_emu_list(struct MHD_Connection *c)
{
	const char *type = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "taskType");
	cJSON *o, *a;

	if (fmt_text(c))
		return emu_list_text(c, type);
	o = cJSON_CreateObject();
	a = cJSON_AddArrayToObject(o, "tasks");
	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_tasks; i++)
		if (!type || strcmp(type, E.tasks[i]->type) == 0)
			cJSON_AddItemToArray(a, emu_task_json(E.tasks[i]));
	pthread_mutex_unlock(&E.mu);
	return reply_json(c, 200, o);
}

/* A task's view as "key value" lines, then "log: LINE" per log entry, for
 * shell scripts (make demo).  Takes j. */
static char *emu_task_text(cJSON *j)
{
	static const char *const keys[] = {
	    "taskId",   "taskType",  "status",  "workflowStatus", "retryCount",
	    "workerId", "pollCount", "updates", "extendLeases",   "reasonForIncompletion"};
	const cJSON *l;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f) {
		cJSON_Delete(j);
		return NULL;
	}
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);

		if (cJSON_IsString(v))
			fprintf(f, "%s %s\n", keys[i], v->valuestring);
		else if (cJSON_IsNumber(v))
			fprintf(f, "%s %.0f\n", keys[i], v->valuedouble);
	}
	{
		_cleanup_free_ char *out =
		    cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "outputData"));

		fprintf(f, "outputData %s\n", out ? out : "null");
	}
	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(j, "logs"))
	{
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(l, "log");

		fprintf(f, "log: %s\n", cJSON_IsString(s) ? s->valuestring : "");
	}
	fclose(f);
	cJSON_Delete(j);
	return text;
}

static enum MHD_Result h_emu_task(struct MHD_Connection *c, const char *id, bool cancel)
{
	struct task *t;
	cJSON *j = NULL;
	bool was_terminal = false;

	pthread_mutex_lock(&E.mu);
	if ((t = task_find(id))) {
		was_terminal = t->wf->status != WF_RUNNING;
		if (cancel && !was_terminal)
			wf_terminate(t->wf);
		j = emu_task_json(t);
	}
	pthread_mutex_unlock(&E.mu);
	if (!t)
		return reply_error(c, 404, false, "emu: no task %s", id);
	if (cancel && was_terminal) {
		cJSON_Delete(j);
		return reply_error(c, 409, false, "emu: the workflow of %s has already ended", id);
	}
	if (!cancel && fmt_text(c))
		return reply(c, 200, "text/plain;charset=UTF-8", emu_task_text(j));
	return reply_json(c, 200, j);
}

/* /emu/wait's condition, checked with E.mu held: the answer once it holds. */
struct wait_for {
	const char *task, *wf, *type, *status, *stat;
	int count;
};

static cJSON *wait_check(const struct wait_for *w)
{
	cJSON *j;

	if (w->task) {
		struct task *t = task_find(w->task);

		return t && strcmp(status_info[t->status].name, w->status) == 0 ? emu_task_json(t)
		                                                                : NULL;
	}
	if (w->wf) {
		struct workflow *wf = wf_find(w->wf);

		if (!wf || strcmp(wf_names[wf->status], w->status) != 0)
			return NULL;
		j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "workflowInstanceId", wf->id);
		cJSON_AddStringToObject(j, "status", w->status);
		return j;
	}
	if (w->type) {
		int n = 0;

		for (size_t i = 0; i < E.n_tasks; i++)
			n += strcmp(E.tasks[i]->type, w->type) == 0 &&
			     strcmp(status_info[E.tasks[i]->status].name, w->status) == 0;
		if (n < w->count)
			return NULL;
		j = cJSON_CreateObject();
		cJSON_AddNumberToObject(j, "count", n);
		return j;
	}
	{
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(E.stats, w->stat);
		double n = cJSON_IsNumber(v) ? v->valuedouble : 0;

		if (n < w->count)
			return NULL;
		j = cJSON_CreateObject();
		cJSON_AddNumberToObject(j, "count", n);
		return j;
	}
}

/* GET /emu/wait?timeout_ms=N& one of: taskId=ID&status=S,
 * workflowInstanceId=ID&status=S, taskType=T&status=S&count=N (at least N
 * tasks of type T have status S), stat=NAME&count=N (a /emu/stats counter
 * reached N).  200 once it holds, 408 at the timeout. */
static enum MHD_Result h_emu_wait(struct MHD_Connection *c)
{
	struct wait_for w = {
	    .task = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "taskId"),
	    .wf = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "workflowInstanceId"),
	    .type = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "taskType"),
	    .status = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "status"),
	    .stat = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stat"),
	};
	int timeout, kinds = !!w.task + !!w.wf + !!w.type + !!w.stat;
	long long end;
	cJSON *j = NULL;

	if (kinds != 1 || (!w.stat && !w.status) ||
	    query_int(c, "timeout_ms", 10000, &timeout) < 0 ||
	    query_int(c, "count", 1, &w.count) < 0)
		return reply_error(
		    c, 400, false,
		    "emu: want one of taskId, workflowInstanceId, taskType (with status) "
		    "or stat");
	end = mono_ms() + timeout;
	pthread_mutex_lock(&E.mu);
	while (!(j = wait_check(&w))) {
		long long left = end - mono_ms();

		if (left <= 0 || E.stopping)
			break;
		struct timespec ts = mono_after(MIN(left, 1000));
		pthread_cond_timedwait(&E.cv, &E.mu, &ts);
	}
	pthread_mutex_unlock(&E.mu);
	if (j)
		return reply_json(c, 200, j);
	return reply_error(c, 408, false, "emu: the condition did not hold in %d ms", timeout);
}

/* GET /emu/counts: "NAME N" lines, for shell scripts (make demo): tasks by
 * status, workflows by status ("workflow_" + status). */
static enum MHD_Result h_emu_counts(struct MHD_Connection *c)
{
	unsigned ts[_ST_MAX] = {0}, ws[ELEMENTSOF(wf_names)] = {0};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return reply(c, 500, NULL, NULL);
	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_tasks; i++)
		ts[E.tasks[i]->status]++;
	for (size_t i = 0; i < E.n_wfs; i++)
		ws[E.wfs[i]->status]++;
	pthread_mutex_unlock(&E.mu);
	for (size_t i = 0; i < _ST_MAX; i++)
		fprintf(f, "%s %u\n", status_info[i].name, ts[i]);
	for (size_t i = 0; i < ELEMENTSOF(wf_names); i++)
		fprintf(f, "workflow_%s %u\n", wf_names[i], ws[i]);
	fclose(f);
	return reply(c, 200, "text/plain;charset=UTF-8", text);
}

static enum MHD_Result h_emu_stats(struct MHD_Connection *c)
{
	cJSON *j;

	pthread_mutex_lock(&E.mu);
	j = cJSON_Duplicate(E.stats, true);
	cJSON_AddNumberToObject(j, "tasks", (double)E.n_tasks);
	pthread_mutex_unlock(&E.mu);
	return reply_json(c, 200, j);
}

/* --------------------------------------------------------------- routing */

/* "/api/tasks/{id}" → id: the rest of url after prefix, one segment, or NULL. */
static const char *segment(const char *url, const char *prefix, char *buf, size_t len,
                           const char *suffix)
{
	size_t p = strlen(prefix), n;
	const char *rest;

	if (strncmp(url, prefix, p) != 0)
		return NULL;
	rest = url + p;
	n = strcspn(rest, "/");
	if (n == 0 || n >= len || strcmp(rest + n, suffix) != 0)
		return NULL;
	memcpy(buf, rest, n);
	buf[n] = '\0';
	return buf;
}

static bool is(const char *method, const char *m)
{
	return strcmp(method, m) == 0;
}

static enum MHD_Result route_api(struct MHD_Connection *c, const char *url, const char *m,
                                 const struct req *q)
{
	char seg[1024];
	const char *s;

	if ((s = segment(url, "/api/tasks/poll/batch/", seg, sizeof(seg), "")))
		return is(m, "GET")
		           ? h_batch_poll(c, s)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	if ((s = segment(url, "/api/tasks/poll/", seg, sizeof(seg), "")))
		return is(m, "GET")
		           ? h_poll_one(c, s)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	if (strcmp(url, "/api/tasks") == 0)
		return is(m, "POST")
		           ? h_update(c, q)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	if (strcmp(url, "/api/tasks/update-v2") == 0)
		return is(m, "POST")
		           ? h_update_v2(c, q)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	if ((s = segment(url, "/api/tasks/", seg, sizeof(seg), "/log"))) {
		if (is(m, "POST"))
			return h_post_log(c, s, q);
		return is(m, "GET")
		           ? h_get_log(c, s)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	}
	if ((s = segment(url, "/api/tasks/", seg, sizeof(seg), "")))
		return is(m, "GET")
		           ? h_get_task(c, s)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	return reply_error(c, 404, false, "No static resource %s.", url + 1);
}

static enum MHD_Result route_emu(struct MHD_Connection *c, const char *url, const char *m,
                                 const struct req *q)
{
	char seg[256];
	const char *s;

	if (strcmp(url, "/emu/tasks") == 0)
		return is(m, "POST") ? h_emu_create(c, q) : h_emu_list(c);
	if ((s = segment(url, "/emu/tasks/", seg, sizeof(seg), "/cancel")) && is(m, "POST"))
		return h_emu_task(c, s, true);
	if ((s = segment(url, "/emu/tasks/", seg, sizeof(seg), "")) && is(m, "GET"))
		return h_emu_task(c, s, false);
	if (strcmp(url, "/emu/wait") == 0 && is(m, "GET"))
		return h_emu_wait(c);
	if (strcmp(url, "/emu/faults") == 0 && (is(m, "POST") || is(m, "DELETE")))
		return h_emu_faults(c, m, q);
	if (strcmp(url, "/emu/counts") == 0 && is(m, "GET"))
		return h_emu_counts(c);
	if (strcmp(url, "/emu/stats") == 0 && is(m, "GET"))
		return h_emu_stats(c);
	return reply_error(c, 404, false, "emu: no such control: %s %s", m, url);
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *m,
                             const struct req *q)
{
	enum MHD_Result ret = MHD_NO;
	const char *why;

	if (strncmp(url, "/emu/", 5) == 0)
		return route_emu(c, url, m, q);
	if (strcmp(url, "/api/token") == 0 && E.key_id)
		return is(m, "POST")
		           ? h_token(c, q)
		           : reply_error(c, 405, false, "Request method '%s' is not supported", m);
	switch (fault_apply(c, url, &ret)) {
	case FAULT_RESET:
		return MHD_NO; /* libmicrohttpd closes the connection without an answer */
	case FAULT_ANSWERED:
		return ret;
	case FAULT_NONE:
		break;
	}
	if ((why = auth_refused(c))) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddStringToObject(o, "error", why);
		cJSON_AddStringToObject(o, "message",
		                        strcmp(why, "EXPIRED_TOKEN") == 0
		                            ? "Token has expired"
		                            : "Invalid or missing X-Authorization");
		return reply_json(c, 401, o);
	}
	return route_api(c, url, m, q);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	struct req *q = *con_cls;
	enum MHD_Result ret;
	const char *te;
	bool chunked;

	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		*con_cls = q;
		return MHD_YES;
	}
	if (*upload_size) {
		if (q->len + *upload_size > BODY_MAX) {
			q->too_big = true;
		} else {
			char *b = realloc(q->body, q->len + *upload_size + 1);

			if (!b)
				return MHD_NO;
			memcpy(b + q->len, upload, *upload_size);
			q->body = b;
			q->len += *upload_size;
			q->body[q->len] = '\0';
		}
		*upload_size = 0;
		return MHD_YES;
	}
	/* What clients send, for the tests that hold the emulator to the SDK:
	 * a chunked request body (the JS SDK's), and the answer's route. */
	te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
	chunked = te && strcasestr(te, "chunked");
	if (chunked) {
		pthread_mutex_lock(&E.mu);
		stat_inc("chunked_bodies");
		pthread_mutex_unlock(&E.mu);
	}
	if (q->too_big)
		ret = reply_error(c, 413, false, "request body too large");
	else
		ret = route(c, url, method, q);
	if (!E.quiet)
		fprintf(stderr, "conductor_emu: %s %s%s%s\n", method, url,
		        chunked ? " (chunked)" : "", ret == MHD_YES ? "" : " (connection dropped)");
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct req *q = *con_cls;

	if (q) {
		free(q->body);
		free(q);
		*con_cls = NULL;
	}
}

/* ------------------------------------------------------------------ main */

static int read_secret(const char *path)
{
	FILE *f = fopen(path, "re");
	char buf[4096];
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	E.key_secret = strdup(buf);
	return E.key_secret ? 0 : -ENOMEM;
}

static int parse_listen(const char *s, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64];

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	*sa = (struct sockaddr_in){.sin_family = AF_INET,
	                           .sin_port = htons((uint16_t)atoi(colon + 1))};
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: conductor_emu [--listen 127.0.0.1:PORT] [--ready-fd N] "
	           "[--port-file F] [--auth-key-id ID --auth-secret-file F] "
	           "[--token-ttl SECONDS] [--sweep-ms N] [--task-input-threshold-kb N] "
	           "[--quiet]\n");
}

static int announce(int port, int ready_fd, const char *port_file)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "127.0.0.1:%d\n", port);

	if (ready_fd >= 0) {
		if (write(ready_fd, line, (size_t)n) != n)
			return -errno;
		close(ready_fd);
	}
	if (port_file) {
		char tmp[4096];
		FILE *f;

		snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
		f = fopen(tmp, "we");
		if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 ||
		    rename(tmp, port_file) < 0)
			return -errno;
	}
	if (ready_fd < 0 && !port_file)
		printf("%s", line), fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"ready-fd", required_argument, NULL, 'r'},
	    {"port-file", required_argument, NULL, 'p'},
	    {"auth-key-id", required_argument, NULL, 'k'},
	    {"auth-secret-file", required_argument, NULL, 's'},
	    {"token-ttl", required_argument, NULL, 't'},
	    {"sweep-ms", required_argument, NULL, 'w'},
	    {"task-input-threshold-kb", required_argument, NULL, 'i'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *port_file = NULL, *secret_file = NULL;
	int ready_fd = -1, o, sig;
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *info;
	pthread_condattr_t ca;
	pthread_t sw;
	sigset_t ss;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'l':
			if (parse_listen(optarg, &sa) < 0)
				return usage(stderr), 2;
			break;
		case 'r':
			ready_fd = atoi(optarg);
			break;
		case 'p':
			port_file = optarg;
			break;
		case 'k':
			E.key_id = optarg;
			break;
		case 's':
			secret_file = optarg;
			break;
		case 't':
			E.token_ttl_ms = atoll(optarg) * 1000;
			break;
		case 'w':
			E.sweep_ms = (unsigned)MAX(atoi(optarg), 1);
			break;
		case 'i':
			E.input_threshold_kb = MAX(atoll(optarg), 0);
			break;
		case 'q':
			E.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("conductor_emu (lessee tests) %s\n", LESSEE_VERSION);
			return 0;
		default:
			return usage(stderr), 2;
		}
	}
	if (!E.key_id != !secret_file || (secret_file && read_secret(secret_file) < 0)) {
		fprintf(stderr,
		        "conductor_emu: --auth-key-id needs a readable --auth-secret-file\n");
		return 2;
	}
	E.stats = cJSON_CreateObject();
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&E.cv, &ca);
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	pthread_sigmask(SIG_BLOCK, &ss, NULL); /* every thread inherits it */
	signal(SIGPIPE, SIG_IGN);
	d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
	                         MHD_USE_POLL | MHD_USE_ERROR_LOG,
	                     0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
	                     MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
	                     MHD_OPTION_CONNECTION_LIMIT, 1000u, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "conductor_emu: cannot listen\n");
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (pthread_create(&sw, NULL, sweeper, NULL) != 0 ||
	    announce(info ? info->port : 0, ready_fd, port_file) < 0) {
		fprintf(stderr, "conductor_emu: cannot start\n");
		return 1;
	}
	fprintf(stderr, "conductor_emu: serving on 127.0.0.1:%u%s\n", info ? info->port : 0,
	        E.key_id ? " (auth on)" : "");
	sigwait(&ss, &sig);
	pthread_mutex_lock(&E.mu);
	E.stopping = true;
	pthread_cond_broadcast(&E.cv);
	pthread_mutex_unlock(&E.mu);
	MHD_stop_daemon(d);
	pthread_join(sw, NULL);
	for (size_t i = 0; i < E.n_tasks; i++)
		task_free(E.tasks[i]);
	for (size_t i = 0; i < E.n_wfs; i++)
		free(E.wfs[i]);
	for (size_t i = 0; i < E.n_faults; i++)
		free(E.faults[i].path);
	free(E.tasks);
	free(E.wfs);
	free(E.faults);
	free(E.tokens);
	free(E.key_secret);
	cJSON_Delete(E.stats);
	return 0;
}
