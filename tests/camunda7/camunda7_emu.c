/* camunda7_emu: an in-memory emulation of the Camunda 7 external-task REST API
 * (Camunda 7, Operaton, CIB seven), for tests and benchmarks.  It is NOT an
 * engine: it is written from the engine's own source (operaton/operaton, read
 * not copied; camunda-bpm-platform has the same classes under org.camunda)
 * and held to the official camunda-external-task-client-js by
 * tests/camunda7/sdk.  Where each behaviour comes from:
 *
 *  engine-rest (org.operaton.bpm.engine.rest):
 *   ExternalTaskRestService / impl.ExternalTaskRestServiceImpl   the routes;
 *     @Consumes(APPLICATION_JSON) on every POST but /unlock (else 415)
 *   impl.FetchAndLockHandlerImpl   fetchAndLock: answer at once when tasks were
 *     locked or asyncResponseTimeout is null; else hold the request, fetch
 *     again when the engine signals "a task is available" (a task inserted or
 *     unlocked: ExternalTaskManager.insert / ExternalTaskEntity.unlock →
 *     fireExternalTaskAvailableEvent) or every PENDING_REQUEST_FETCH_INTERVAL
 *     (30 s), answer [] once the timeout passed; a timeout above
 *     MAX_REQUEST_TIMEOUT (1,800,000 ms) is 400; a request held at shutdown is
 *     answered 500 ("Request rejected due to shutdown of application server.")
 *   dto.externaltask.FetchExternalTasksDto (+Extended: asyncResponseTimeout),
 *     LockedExternalTaskDto, ExternalTaskDto, CompleteExternalTaskDto,
 *     ExternalTaskFailureDto, ExternalTaskBpmnError, ExtendLockOnExternalTaskDto
 *   dto.VariableValueDto   typed variables {type, value, valueInfo}: an unknown
 *     type is 400 "Unsupported value type", a value that does not convert to
 *     the primitive's Java type 400 "Cannot convert value ...", a serializable
 *     type (Object, Json, Xml) takes only a string or null
 *   sub.externaltask.impl.ExternalTaskResourceImpl   NotFoundException → 404
 *     "External task with id X does not exist", BadUserRequestException → 400
 *     with the engine's message (both RestException with the cause's code);
 *     unlock maps only NotFoundException
 *   exception.ExceptionHandlerHelper + dto.ExceptionDto   every error body is
 *     {type: the exception's simple class name, message, code}: code is the
 *     ProcessEngineException's (BuiltinExceptionCode.FALLBACK = 0), also through
 *     a RestException's cause, else null; a ProcessEngineException that is not a
 *     BadUserRequestException is 500 (NullValueException for a missing
 *     workerId / errorCode / topicName: 500, not 400);
 *     JsonParse/JsonMappingExceptionHandler: malformed or mistyped JSON → 400
 *     InvalidRequestException with an empty message
 *   mapper.JacksonConfigurator   dates "yyyy-MM-dd'T'HH:mm:ss.SSSZ"; nulls
 *     written; unknown properties ignored
 *   security.auth.ProcessEngineAuthenticationFilter +
 *     impl.HttpBasicAuthenticationProvider   401, no body, WWW-Authenticate:
 *     Basic realm="default".  Bearer tokens are not engine-rest's (Camunda Run
 *     / Spring Security OAuth2 put them in front): 401 + WWW-Authenticate: Bearer
 *  engine (org.operaton.bpm.engine.impl):
 *   cmd.FetchExternalTasksCmd   validateInput: workerId, topicName not null,
 *     maxResults >= 0, lockDuration > 0 (ProcessEngineException/NullValueException:
 *     500); usePriority orders by priority descending first
 *   mapping/entity/ExternalTask.xml selectExternalTasksForTopics   fetchable:
 *     lockExpirationTime null or <= now, not suspended, retries null or > 0,
 *     topic (and businessKey) matches; ExternalTaskManager: no topics → none
 *   cmd.ExternalTaskCmd, cmd.HandleExternalTaskCmd   workerId null → 500;
 *     task missing → 404; workerId != the task's workerId → 400 "<what> cannot
 *     be <done> by worker 'W'. It is locked by worker 'V'." — the workerId
 *     string is the only fence: completing, failing or bpmnError after the lock
 *     expired is ACCEPTED while nobody re-locked the task
 *   cmd.CompleteExternalTaskCmd, cmd.HandleExternalTaskFailureCmd (retries >= 0,
 *     retryTimeout >= 0, else 500), cmd.HandleExternalTaskBpmnErrorCmd
 *     (errorCode not null, else 500), cmd.ExtendLockOnExternalTaskCmd
 *     (newDuration > 0 checked first: 400 BadUserRequestException; a lock that
 *     expired → 400 "Cannot extend a lock that expired"), cmd.UnlockExternalTaskCmd
 *     (no workerId: anyone may unlock), cmd.LockExternalTaskCmd (lockDuration > 0,
 *     else 400; refused only while another worker's lock has not expired)
 *   persistence.entity.ExternalTaskEntity   complete/bpmnError delete the task
 *     (later calls 404); failed(): errorMessage cut to MAX_EXCEPTION_MESSAGE_LENGTH
 *     (666), errorDetails kept when the new one is null, lockExpirationTime =
 *     now + retryTimeout with the workerId kept, retries set and an incident
 *     created when they reach 0 (the task is then never fetched); lock();
 *     extendLock(): now + newDuration; unlock(): workerId and lock cleared
 *
 *   camunda7_emu [--listen 127.0.0.1:PORT] [--ready-fd N] [--port-file F]
 *                [--basic-user U --basic-password-file F] [--bearer-token-file F]
 *                [--sweep-ms N] [--no-spin] [--quiet]
 *
 *   --no-spin: an engine without the Spin plugin (engine-plugins/spin-plugin
 *   registers the Json and Xml value types; ValueTypeResolverImpl alone knows
 *   boolean, bytes, date, double, integer, long, null, short, string, object,
 *   number and file), so a Json or Xml variable is 400 "Unsupported value
 *   type" (VariableValueDto.toTypedValue)
 *
 * Engine endpoints, under /engine-rest:
 *   POST /external-task/fetchAndLock   GET /external-task/{id}
 *   GET  /external-task/{id}/errorDetails
 *   POST /external-task/{id}/complete|failure|bpmnError|extendLock|unlock|lock
 *
 * Test controls under /emu/, which no engine has (never behind auth):
 *   POST /emu/tasks {topicName, variables?, localVariables?, retries? (absent =
 *        null), priority? (0), businessKey?, processInstanceId?, count? (1)}
 *        → {id, ids, processInstanceId}; variables typed ({type, value,
 *        valueInfo?}) or plain JSON (typed as the engine types untyped values)
 *   GET  /emu/tasks[?topicName=T]   GET /emu/tasks/{id}: what the emulator saw:
 *        state AVAILABLE | LOCKED | FAILED (a failure's retryTimeout not yet
 *        passed) | INCIDENT (retries 0) | COMPLETED | BPMN_ERROR | DELETED,
 *        workerId, lockExpirationTime, retries, errorMessage, errorDetails,
 *        retryTimeout, variables, completeVariables, completeLocalVariables,
 *        bpmnError {code, message, variables}, counts {fetched, extendLock,
 *        unlock, complete, failure, bpmnError, refused}
 *   POST /emu/tasks/{id}/cancel   its process instance cancelled: DELETED
 *   POST /emu/tasks/{id}/expire   its lock expired a millisecond ago
 *   GET  /emu/wait?timeout_ms=N& id=ID&state=S | id=ID&counter=C&count=N |
 *        topicName=T&state=S&count=N | stat=NAME&count=N   200 once it holds,
 *        408 at the timeout
 *   GET  /emu/counts (text)   POST|DELETE /emu/faults   GET /emu/stats
 *
 * One thread per connection (libmicrohttpd); all state behind one mutex. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
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
#include <time.h>
#include <unistd.h>

#include "util/macro.h"
#include "util/random.h"

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

#define ROOT "/engine-rest"
#define BODY_MAX (16u << 20)
#define MAX_REQUEST_TIMEOUT_MS 1800000LL /* FetchAndLockHandlerImpl.MAX_REQUEST_TIMEOUT */
#define PENDING_FETCH_INTERVAL_MS                                                                  \
	30000LL /* FetchAndLockHandlerImpl.PENDING_REQUEST_FETCH_INTERVAL */
#define MAX_EXCEPTION_MESSAGE_LENGTH 666 /* ExternalTaskEntity */
#define CODE_NULL (-1)                   /* ExceptionDto.code absent: null */
#define CODE_FALLBACK 0                  /* BuiltinExceptionCode.FALLBACK */
#define ENGINE_NAME "default"

enum end { END_NONE, END_COMPLETED, END_BPMN_ERROR, END_DELETED };

struct task {
	char id[UUID_STRING_MAX];
	char pi[UUID_STRING_MAX], exec[UUID_STRING_MAX], act_inst[64];
	char *topic, *worker, *business_key, *error_message, *error_details;
	cJSON *vars, *local_vars;           /* name → {type, value, valueInfo} */
	cJSON *done_vars, *done_local_vars; /* what complete (or failure) sent */
	cJSON *bpmn_error;                  /* {code, message, variables} */
	long long lock_exp_ms;              /* 0: null */
	long long create_ms, retry_timeout_ms;
	long long priority;
	int retries; /* -1: null */
	enum end end;
	bool failed_wait; /* the lock is a failure's retryTimeout, not a worker's */
	uint64_t seq;
	unsigned fetched, extend_lock, unlock, complete, failure, bpmn, refused, lock;
	long long last_new_duration;
};

struct fault {
	char *path;
	unsigned count, status, stall_ms;
	bool reset;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* broadcast on every change a waiter may want */
	struct task **tasks;
	size_t n_tasks, cap_tasks;
	struct fault *faults;
	size_t n_faults;
	cJSON *stats;
	uint64_t seq, avail_gen; /* avail_gen: the engine's "a task is available" signal */
	bool stopping;
	/* options */
	char *basic_user, *basic_password, *bearer;
	bool quiet, no_spin;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------------------ time */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
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

/* JacksonConfigurator.DEFAULT_DATE_FORMAT, in UTC: 2026-12-02T21:40:00.123+0000 */
static cJSON *date_json(long long ms)
{
	char buf[48];
	time_t s = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0)
		return cJSON_CreateNull();
	gmtime_r(&s, &tm);
	snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03lld+0000", tm.tm_year + 1900,
	         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
	return cJSON_CreateString(buf);
}

/* Engine ids are UUIDs (StrongUuidGenerator, the default in Camunda Run). */
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

/* ExternalTaskManager.fireExternalTaskAvailableEvent: wakes held fetches. */
static void signal_available(void)
{
	E.avail_gen++;
	pthread_cond_broadcast(&E.cv);
}

/* ----------------------------------------------------------------- model */

static struct task *task_find(const char *id)
{
	for (size_t i = 0; id && i < E.n_tasks; i++)
		if (strcmp(E.tasks[i]->id, id) == 0)
			return E.tasks[i];
	return NULL;
}

/* The engine's runtime table: an ended task is gone (404). */
static struct task *task_live(const char *id)
{
	struct task *t = task_find(id);

	return t && t->end == END_NONE ? t : NULL;
}

static void task_free(struct task *t)
{
	free(t->topic);
	free(t->worker);
	free(t->business_key);
	free(t->error_message);
	free(t->error_details);
	cJSON_Delete(t->vars);
	cJSON_Delete(t->local_vars);
	cJSON_Delete(t->done_vars);
	cJSON_Delete(t->done_local_vars);
	cJSON_Delete(t->bpmn_error);
	free(t);
}

static bool lock_held(const struct task *t, long long now)
{
	return t->lock_exp_ms > 0 && t->lock_exp_ms > now;
}

/* selectExternalTasksForTopics' WHERE, topics aside. */
static bool fetchable(const struct task *t, long long now)
{
	return t->end == END_NONE && !lock_held(t, now) && (t->retries < 0 || t->retries > 0);
}

static const char *task_state(const struct task *t, long long now)
{
	switch (t->end) {
	case END_COMPLETED:
		return "COMPLETED";
	case END_BPMN_ERROR:
		return "BPMN_ERROR";
	case END_DELETED:
		return "DELETED";
	case END_NONE:
		break;
	}
	if (t->retries == 0)
		return "INCIDENT";
	if (lock_held(t, now))
		return t->failed_wait ? "FAILED" : "LOCKED";
	return "AVAILABLE";
}

static void set_str(char **dst, const char *s)
{
	free(*dst);
	*dst = s ? strdup(s) : NULL;
}

/* ------------------------------------------------------------- variables */

/* An error answer being built: status, ExceptionDto {type, message, code}. */
struct err {
	unsigned status;
	const char *type;
	char msg[1024];
	int code;
};

static void err_set(struct err *e, unsigned status, const char *type, int code, const char *fmt,
                    ...) _printf_(5, 6);
static void err_set(struct err *e, unsigned status, const char *type, int code, const char *fmt,
                    ...)
{
	va_list ap;

	e->status = status;
	e->type = type;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
}

/* Jackson read a body it could not map: JsonMappingExceptionHandler → 400
 * InvalidRequestException with an empty message (its cause is not a
 * ProcessEngineException: code null). */
static void err_mapping(struct err *e)
{
	err_set(e, 400, "InvalidRequestException", CODE_NULL, "%s", "");
}

/* The value types a ValueTypeResolver knows in Camunda Run (engine + Spin;
 * spin marks the plugin's). */
static const struct {
	const char *name, *java;
	bool serializable, spin;
} vtypes[] = {
    {"boolean", "java.lang.Boolean", false, false},
    {"bytes", "[B", false, false},
    {"short", "java.lang.Short", false, false},
    {"integer", "java.lang.Integer", false, false},
    {"long", "java.lang.Long", false, false},
    {"date", "java.util.Date", false, false},
    {"double", "java.lang.Double", false, false},
    {"string", "java.lang.String", false, false},
    {"null", NULL, false, false},
    {"number", "java.lang.Number", false, false},
    {"file", NULL, false, false},
    {"object", NULL, true, false},
    {"json", NULL, true, true},
    {"xml", NULL, true, true},
};

static bool str_is_long(const char *s, long long lo, long long hi, long long *ret)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return false;
	*ret = v;
	return true;
}

/* An integral Java value of [lo, hi] from a JSON value (Jackson reads a JSON
 * integer as Integer/Long and maps it by "\"" + value + "\"", so a string of
 * digits converts too; a fraction or a bool does not). */
static bool to_integral(const cJSON *v, long long lo, long long hi, long long *ret)
{
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
		    v->valuedouble > (double)hi)
			return false;
		*ret = (long long)v->valuedouble;
		return true;
	}
	return cJSON_IsString(v) && str_is_long(v->valuestring, lo, hi, ret);
}

/* VariableValueDto.createFromPrimitiveValueType: the value converted to the
 * type's Java class, or false. */
static bool prim_convert(const char *name, const cJSON *v, cJSON **ret)
{
	long long n;
	char *end;

	if (!v || cJSON_IsNull(v) || strcmp(name, "null") == 0) {
		*ret = cJSON_CreateNull();
		return true;
	}
	if (strcmp(name, "integer") == 0 || strcmp(name, "short") == 0 ||
	    strcmp(name, "long") == 0) {
		long long lim = name[0] == 'i' ? 2147483647LL : name[0] == 's' ? 32767 : LLONG_MAX;

		if (!to_integral(v, -lim - 1, lim, &n))
			return false;
		*ret = cJSON_CreateNumber((double)n);
		return true;
	}
	if (strcmp(name, "double") == 0 || strcmp(name, "number") == 0) {
		double d;

		if (cJSON_IsNumber(v)) {
			*ret = cJSON_CreateNumber(v->valuedouble);
			return true;
		}
		if (!cJSON_IsString(v) || !*v->valuestring)
			return false;
		d = strtod(v->valuestring, &end);
		if (*end)
			return false;
		*ret = cJSON_CreateNumber(d);
		return true;
	}
	if (strcmp(name, "boolean") == 0) {
		if (cJSON_IsBool(v)) {
			*ret = cJSON_CreateBool(cJSON_IsTrue(v));
			return true;
		}
		if (cJSON_IsString(v) &&
		    (strcmp(v->valuestring, "true") == 0 || strcmp(v->valuestring, "false") == 0)) {
			*ret = cJSON_CreateBool(v->valuestring[0] == 't');
			return true;
		}
		return false;
	}
	if (strcmp(name, "string") == 0) {
		if (cJSON_IsString(v)) {
			*ret = cJSON_CreateString(v->valuestring);
			return true;
		}
		if (cJSON_IsNumber(v) || cJSON_IsBool(v)) { /* "\"" + 5 + "\"" → "5" */
			_cleanup_free_ char *s = cJSON_PrintUnformatted(v);

			*ret = cJSON_CreateString(s ? s : "");
			return true;
		}
		return false;
	}
	/* date, bytes: the serialized string (the date format is not checked here) */
	if (!cJSON_IsString(v))
		return false;
	*ret = cJSON_CreateString(v->valuestring);
	return true;
}

/* VariableValueDto.toTypedValue then fromTypedValue: what the engine stores
 * and later shows, {type (capitalised, toRestApiTypeName), value, valueInfo},
 * or NULL with *e set. */
static cJSON *var_typed(const cJSON *dto, struct err *e)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(dto, "type");
	const cJSON *value = cJSON_GetObjectItemCaseSensitive(dto, "value");
	const cJSON *info = cJSON_GetObjectItemCaseSensitive(dto, "valueInfo");
	char name[64], out_name[64];
	cJSON *o, *v = NULL;
	size_t k;

	if (!cJSON_IsObject(dto) || (type && !cJSON_IsNull(type) && !cJSON_IsString(type)) ||
	    (info && !cJSON_IsNull(info) && !cJSON_IsObject(info))) {
		err_mapping(e);
		return NULL;
	}
	if (!cJSON_IsString(type)) {
		/* Variables.untypedValue: the Java object Jackson made of the JSON
		 * (maps and lists become Object values; shown as Json here) */
		const char *t =
		    cJSON_IsString(value)           ? "String"
		    : cJSON_IsBool(value)           ? "Boolean"
		    : !value || cJSON_IsNull(value) ? "Null"
		    : cJSON_IsNumber(value) && value->valuedouble == floor(value->valuedouble) &&
		            fabs(value->valuedouble) < 2147483648.0
		        ? "Integer"
		    : cJSON_IsNumber(value) && value->valuedouble == floor(value->valuedouble)
		        ? "Long"
		    : cJSON_IsNumber(value) ? "Double"
		                            : "Json";

		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "type", t);
		if (strcmp(t, "Json") == 0) {
			_cleanup_free_ char *s = cJSON_PrintUnformatted(value);

			cJSON_AddStringToObject(o, "value", s ? s : "null");
		} else if (strcmp(t, "Null") == 0) {
			cJSON_AddNullToObject(o, "value");
		} else {
			cJSON_AddItemToObject(o, "value", cJSON_Duplicate(value, true));
		}
		cJSON_AddObjectToObject(o, "valueInfo");
		return o;
	}
	/* fromRestApiTypeName: first letter lowered; typeForName is exact */
	snprintf(name, sizeof(name), "%s", type->valuestring);
	name[0] = (char)tolower((unsigned char)name[0]);
	for (k = 0; k < ELEMENTSOF(vtypes); k++)
		if (strcmp(vtypes[k].name, name) == 0 && !(vtypes[k].spin && E.no_spin))
			break;
	if (!*type->valuestring || k == ELEMENTSOF(vtypes)) {
		err_set(e, 400, "RestException", CODE_NULL, "Unsupported value type '%s'",
		        type->valuestring);
		return NULL;
	}
	if (vtypes[k].serializable) {
		if (value && !cJSON_IsNull(value) && !cJSON_IsString(value)) {
			err_set(
			    e, 400, "InvalidRequestException", CODE_NULL,
			    "Must provide 'null' or String value for value of SerializableValue "
			    "type '%s'.",
			    type->valuestring);
			return NULL;
		}
		v = value && cJSON_IsString(value) ? cJSON_CreateString(value->valuestring)
		                                   : cJSON_CreateNull();
	} else if (strcmp(name, "file") == 0) {
		v = cJSON_CreateNull(); /* fromTypedValue leaves a FileValue's value out */
	} else if (!prim_convert(name, value, &v)) {
		_cleanup_free_ char *s = cJSON_IsString(value) ? strdup(value->valuestring)
		                                               : cJSON_PrintUnformatted(value);

		err_set(e, 400, "InvalidRequestException", CODE_NULL,
		        "Cannot convert value '%s' of type '%s' to java type %s", s ? s : "",
		        type->valuestring, vtypes[k].java);
		return NULL;
	}
	snprintf(out_name, sizeof(out_name), "%s", name); /* toRestApiTypeName */
	out_name[0] = (char)toupper((unsigned char)out_name[0]);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", out_name);
	cJSON_AddItemToObject(o, "value", v);
	/* a primitive's valueInfo is {} (transient only when set); the
	 * serializable ones keep objectTypeName / serializationDataFormat */
	if (cJSON_IsObject(info) &&
	    (vtypes[k].serializable || strcmp(name, "file") == 0 ||
	     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(info, "transient"))))
		cJSON_AddItemToObject(o, "valueInfo", cJSON_Duplicate(info, true));
	else
		cJSON_AddObjectToObject(o, "valueInfo");
	return o;
}

/* VariableValueDto.toMap: a map of typed values (null → empty); an object is
 * wanted, else Jackson's mapping error. */
static cJSON *vars_typed(const cJSON *m, struct err *e)
{
	cJSON *out = cJSON_CreateObject();
	const cJSON *v;

	if (m && !cJSON_IsNull(m) && !cJSON_IsObject(m)) {
		cJSON_Delete(out);
		err_mapping(e);
		return NULL;
	}
	const cJSON *obj = cJSON_IsObject(m) ? m : NULL;

	cJSON_ArrayForEach(v, obj)
	{
		cJSON *t = var_typed(v, e);

		if (!t) {
			cJSON_Delete(out);
			return NULL;
		}
		cJSON_AddItemToObject(out, v->string, t);
	}
	return out;
}

/* execution.setVariables: each one replaces its namesake. */
static void vars_merge(cJSON *into, const cJSON *from)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, from)
	{
		cJSON_DeleteItemFromObjectCaseSensitive(into, v->string);
		cJSON_AddItemToObject(into, v->string, cJSON_Duplicate(v, true));
	}
}

/* --------------------------------------------------------------- render */

static void add_str_or_null(cJSON *o, const char *k, const char *v)
{
	if (v) /* JacksonConfigurator: nulls are written */
		cJSON_AddStringToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

/* ExternalTaskDto (GET /external-task/{id}), field by field. */
static cJSON *task_dto(const struct task *t)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "activityId", "emuTask");
	cJSON_AddStringToObject(o, "activityInstanceId", t->act_inst);
	add_str_or_null(o, "errorMessage", t->error_message);
	cJSON_AddStringToObject(o, "executionId", t->exec);
	cJSON_AddStringToObject(o, "id", t->id);
	cJSON_AddItemToObject(o, "lockExpirationTime", date_json(t->lock_exp_ms));
	cJSON_AddItemToObject(o, "createTime", date_json(t->create_ms));
	cJSON_AddStringToObject(o, "processDefinitionId", "emuProcess:1:emu");
	cJSON_AddStringToObject(o, "processDefinitionKey", "emuProcess");
	cJSON_AddNullToObject(o, "processDefinitionVersionTag");
	cJSON_AddStringToObject(o, "processInstanceId", t->pi);
	if (t->retries < 0)
		cJSON_AddNullToObject(o, "retries");
	else
		cJSON_AddNumberToObject(o, "retries", t->retries);
	cJSON_AddBoolToObject(o, "suspended", false);
	add_str_or_null(o, "workerId", t->worker);
	cJSON_AddStringToObject(o, "topicName", t->topic);
	cJSON_AddNullToObject(o, "tenantId");
	cJSON_AddNumberToObject(o, "priority", (double)t->priority);
	add_str_or_null(o, "businessKey", t->business_key);
	return o;
}

/* LockedExternalTaskImpl.fromEntity: the variables asked for (null: all; an
 * unknown name: left out) of the execution, or its local ones only. */
static cJSON *fetched_vars(const struct task *t, const cJSON *names, bool local)
{
	_cleanup_json_ cJSON *all = cJSON_Duplicate(t->local_vars, true);
	cJSON *out;
	const cJSON *n;

	if (!local) {
		const cJSON *v;

		cJSON_Delete(all);
		all = cJSON_Duplicate(t->vars, true);
		cJSON_ArrayForEach(v, t->local_vars) /* a local one shadows its namesake */
		{
			cJSON_DeleteItemFromObjectCaseSensitive(all, v->string);
			cJSON_AddItemToObject(all, v->string, cJSON_Duplicate(v, true));
		}
	}
	if (!cJSON_IsArray(names))
		return TAKE_PTR(all);
	out = cJSON_CreateObject();
	cJSON_ArrayForEach(n, names)
	{
		const cJSON *v = cJSON_IsString(n)
		                     ? cJSON_GetObjectItemCaseSensitive(all, n->valuestring)
		                     : NULL;

		if (v && !cJSON_GetObjectItemCaseSensitive(out, n->valuestring))
			cJSON_AddItemToObject(out, n->valuestring, cJSON_Duplicate(v, true));
	}
	return out;
}

/* LockedExternalTaskDto, field by field. */
static cJSON *locked_dto(const struct task *t, const cJSON *names, bool local)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "activityId", "emuTask");
	cJSON_AddStringToObject(o, "activityInstanceId", t->act_inst);
	add_str_or_null(o, "errorMessage", t->error_message);
	add_str_or_null(o, "errorDetails", t->error_details);
	cJSON_AddStringToObject(o, "executionId", t->exec);
	cJSON_AddStringToObject(o, "id", t->id);
	cJSON_AddItemToObject(o, "lockExpirationTime", date_json(t->lock_exp_ms));
	cJSON_AddItemToObject(o, "createTime", date_json(t->create_ms));
	cJSON_AddStringToObject(o, "processDefinitionId", "emuProcess:1:emu");
	cJSON_AddStringToObject(o, "processDefinitionKey", "emuProcess");
	cJSON_AddNullToObject(o, "processDefinitionVersionTag");
	cJSON_AddStringToObject(o, "processInstanceId", t->pi);
	if (t->retries < 0)
		cJSON_AddNullToObject(o, "retries");
	else
		cJSON_AddNumberToObject(o, "retries", t->retries);
	cJSON_AddBoolToObject(o, "suspended", false);
	add_str_or_null(o, "workerId", t->worker);
	cJSON_AddStringToObject(o, "topicName", t->topic);
	cJSON_AddNullToObject(o, "tenantId");
	cJSON_AddItemToObject(o, "variables", fetched_vars(t, names, local));
	cJSON_AddNumberToObject(o, "priority", (double)t->priority);
	add_str_or_null(o, "businessKey", t->business_key);
	cJSON_AddObjectToObject(o, "extensionProperties");
	return o;
}

static cJSON *dup_or_null(const cJSON *j)
{
	return j ? cJSON_Duplicate(j, true) : cJSON_CreateNull();
}

/* The /emu/ view: what the engine holds, plus what the emulator saw. */
static cJSON *emu_task_json(const struct task *t)
{
	long long now = now_ms();
	cJSON *o = cJSON_CreateObject(), *n;

	cJSON_AddStringToObject(o, "id", t->id);
	cJSON_AddStringToObject(o, "topicName", t->topic);
	cJSON_AddStringToObject(o, "state", task_state(t, now));
	add_str_or_null(o, "workerId", t->worker);
	cJSON_AddItemToObject(o, "lockExpirationTime", date_json(t->lock_exp_ms));
	cJSON_AddNumberToObject(o, "lockExpirationMs", (double)t->lock_exp_ms);
	cJSON_AddNumberToObject(o, "lockRemainingMs",
	                        t->lock_exp_ms > 0 ? (double)(t->lock_exp_ms - now) : 0);
	if (t->retries < 0)
		cJSON_AddNullToObject(o, "retries");
	else
		cJSON_AddNumberToObject(o, "retries", t->retries);
	cJSON_AddNumberToObject(o, "priority", (double)t->priority);
	add_str_or_null(o, "businessKey", t->business_key);
	cJSON_AddStringToObject(o, "processInstanceId", t->pi);
	add_str_or_null(o, "errorMessage", t->error_message);
	add_str_or_null(o, "errorDetails", t->error_details);
	cJSON_AddNumberToObject(o, "retryTimeout", (double)t->retry_timeout_ms);
	cJSON_AddNumberToObject(o, "lastNewDuration", (double)t->last_new_duration);
	cJSON_AddItemToObject(o, "variables", cJSON_Duplicate(t->vars, true));
	cJSON_AddItemToObject(o, "localVariables", cJSON_Duplicate(t->local_vars, true));
	cJSON_AddItemToObject(o, "completeVariables", dup_or_null(t->done_vars));
	cJSON_AddItemToObject(o, "completeLocalVariables", dup_or_null(t->done_local_vars));
	cJSON_AddItemToObject(o, "bpmnError", dup_or_null(t->bpmn_error));
	n = cJSON_AddObjectToObject(o, "counts");
	cJSON_AddNumberToObject(n, "fetched", t->fetched);
	cJSON_AddNumberToObject(n, "extendLock", t->extend_lock);
	cJSON_AddNumberToObject(n, "unlock", t->unlock);
	cJSON_AddNumberToObject(n, "complete", t->complete);
	cJSON_AddNumberToObject(n, "failure", t->failure);
	cJSON_AddNumberToObject(n, "bpmnError", t->bpmn);
	cJSON_AddNumberToObject(n, "refused", t->refused);
	cJSON_AddNumberToObject(n, "lock", t->lock);
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

/* MediaType.APPLICATION_JSON exactly, no charset (the JS client compares). */
static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, cJSON *j)
{
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;

	cJSON_Delete(j);
	if (!s)
		return reply(c, 500, NULL, NULL);
	return reply(c, status, "application/json", s);
}

/* ExceptionHandlerHelper.getResponse: ExceptionDto {type, message, code}. */
static enum MHD_Result reply_err(struct MHD_Connection *c, const struct err *e)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "type", e->type);
	cJSON_AddStringToObject(o, "message", e->msg);
	if (e->code == CODE_NULL)
		cJSON_AddNullToObject(o, "code");
	else
		cJSON_AddNumberToObject(o, "code", e->code);
	return reply_json(c, e->status, o);
}

#define reply_error(c, status, type, code, ...)                                                    \
	({                                                                                         \
		struct err _e;                                                                     \
		err_set(&_e, status, type, code, __VA_ARGS__);                                     \
		reply_err(c, &_e);                                                                 \
	})

/* /emu/ answers: not the engine's, so plain {message}. */
static enum MHD_Result emu_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "message", msg);
	return reply_json(c, status, o);
}

/* --------------------------------------------------------- request bodies */

/* @Consumes(APPLICATION_JSON): RESTEasy refuses another media type with 415
 * (NotSupportedException, a WebApplicationException: its own status). */
static bool json_consumed(struct MHD_Connection *c, struct err *e)
{
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	size_t n = ct ? strcspn(ct, "; \t") : 0;

	if (ct && n == 16 && strncasecmp(ct, "application/json", 16) == 0)
		return true;
	err_set(e, 415, "NotSupportedException", CODE_NULL,
	        "RESTEASY003065: Cannot consume content type");
	return false;
}

/* The DTO as Jackson would bind it: NULL with *e set when it cannot.  An empty
 * body binds no DTO: the resource then dereferences null (500 NPE). */
static cJSON *body_parse(struct MHD_Connection *c, const struct req *q, const char *what,
                         struct err *e)
{
	cJSON *j;

	if (!json_consumed(c, e))
		return NULL;
	if (!q->len) {
		err_set(e, 500, "NullPointerException", CODE_NULL,
		        "Cannot invoke \"%s\" because \"dto\" is null", what);
		return NULL;
	}
	j = cJSON_ParseWithLength(q->body, q->len);
	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		err_set(e, 400, "InvalidRequestException", CODE_NULL, "%s", "");
		return NULL;
	}
	return j;
}

/* Jackson's scalar coercions for a String field: a number or bool is taken as
 * its text; an object or array is a mapping error.  *ret NULL = absent/null. */
static bool j_str(const cJSON *o, const char *k, const char **ret, char *buf, size_t len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	*ret = NULL;
	if (!v || cJSON_IsNull(v))
		return true;
	if (cJSON_IsString(v)) {
		*ret = v->valuestring;
		return true;
	}
	if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
		_cleanup_free_ char *s = cJSON_PrintUnformatted(v);

		snprintf(buf, len, "%s", s ? s : "");
		*ret = buf;
		return true;
	}
	return false;
}

/* An int/long field: a number (a fraction truncated, ACCEPT_FLOAT_AS_INT), a
 * string of digits, null/absent = def (a primitive's 0, or a Long's null). */
/* A String field read strictly: a string or null (a number's coercion is
 * not kept for these; a mapping error instead). */
static bool j_sval(const cJSON *o, const char *k, const char **ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	*ret = cJSON_IsString(v) ? v->valuestring : NULL;
	return !v || cJSON_IsNull(v) || cJSON_IsString(v);
}

static bool j_long(const cJSON *o, const char *k, long long def, long long *ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	*ret = def;
	if (!v || cJSON_IsNull(v))
		return true;
	if (cJSON_IsNumber(v)) {
		if (!isfinite(v->valuedouble) || fabs(v->valuedouble) > 9.2e18)
			return false;
		*ret = (long long)v->valuedouble;
		return true;
	}
	return cJSON_IsString(v) && str_is_long(v->valuestring, LLONG_MIN, LLONG_MAX, ret);
}

static bool j_bool(const cJSON *o, const char *k, bool *ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	*ret = false;
	if (!v || cJSON_IsNull(v))
		return true;
	if (cJSON_IsBool(v) || cJSON_IsNumber(v)) {
		*ret = cJSON_IsNumber(v) ? v->valuedouble != 0 : cJSON_IsTrue(v);
		return true;
	}
	if (cJSON_IsString(v) &&
	    (strcmp(v->valuestring, "true") == 0 || strcmp(v->valuestring, "false") == 0)) {
		*ret = v->valuestring[0] == 't';
		return true;
	}
	return false;
}

/* ---------------------------------------------------------- fetchAndLock */

struct topic_req {
	const char *name, *business_key;
	long long lock_ms;
	const cJSON *variables; /* array of names or NULL (all) */
	bool local;
};

struct fetch_req {
	const char *worker;
	char wbuf[64];
	long long max_tasks, timeout_ms; /* timeout_ms -1: null */
	bool use_priority;
	struct topic_req *topics;
	size_t n_topics;
};

/* FetchExternalTasksDto bound from the body: false (400) on a mapping error. */
static bool fetch_parse(const cJSON *j, struct fetch_req *f)
{
	const cJSON *topics = cJSON_GetObjectItemCaseSensitive(j, "topics"), *t;
	size_t i = 0;

	if (!j_str(j, "workerId", &f->worker, f->wbuf, sizeof(f->wbuf)) ||
	    !j_long(j, "maxTasks", 0, &f->max_tasks) ||
	    !j_long(j, "asyncResponseTimeout", -1, &f->timeout_ms) ||
	    !j_bool(j, "usePriority", &f->use_priority) ||
	    (topics && !cJSON_IsNull(topics) && !cJSON_IsArray(topics)) ||
	    f->max_tasks > 2147483647LL || f->max_tasks < -2147483648LL)
		return false;
	f->n_topics = (size_t)cJSON_GetArraySize(topics);
	f->topics = calloc(f->n_topics + 1, sizeof(*f->topics));
	if (!f->topics)
		return false;
	const cJSON *arr = cJSON_IsArray(topics) ? topics : NULL;

	cJSON_ArrayForEach(t, arr)
	{
		struct topic_req *r = &f->topics[i++];
		const cJSON *vars = cJSON_GetObjectItemCaseSensitive(t, "variables"), *v;

		if (!cJSON_IsObject(t))
			return false;
		if (!j_sval(t, "topicName", &r->name) ||
		    !j_sval(t, "businessKey", &r->business_key) ||
		    !j_long(t, "lockDuration", 0, &r->lock_ms) ||
		    !j_bool(t, "localVariables", &r->local) ||
		    (vars && !cJSON_IsNull(vars) && !cJSON_IsArray(vars)))
			return false;
		r->variables = cJSON_IsArray(vars) ? vars : NULL;
		cJSON_ArrayForEach(v, r->variables) if (!cJSON_IsString(v)) return false;
		r->variables = cJSON_IsArray(vars) ? vars : NULL;
	}
	return true;
}

/* FetchExternalTasksCmd.validateInput (500s: not BadUserRequestExceptions). */
static bool fetch_validate(const struct fetch_req *f, struct err *e)
{
	if (!f->worker) {
		err_set(e, 500, "NullValueException", CODE_FALLBACK, "workerId is null");
		return false;
	}
	if (f->max_tasks < 0) {
		err_set(e, 500, "ProcessEngineException", CODE_FALLBACK,
		        "maxResults is not greater than or equal to 0");
		return false;
	}
	for (size_t i = 0; i < f->n_topics; i++) {
		if (!f->topics[i].name) {
			err_set(e, 500, "NullValueException", CODE_FALLBACK, "topicName is null");
			return false;
		}
		if (f->topics[i].lock_ms <= 0) {
			err_set(e, 500, "ProcessEngineException", CODE_FALLBACK,
			        "lockTime is not greater than 0");
			return false;
		}
	}
	return true;
}

/* The fetch instruction for t (the map keyed by topic name keeps the last). */
static const struct topic_req *topic_for(const struct fetch_req *f, const struct task *t)
{
	const struct topic_req *r = NULL;

	for (size_t i = 0; i < f->n_topics; i++)
		if (strcmp(f->topics[i].name, t->topic) == 0)
			r = &f->topics[i];
	if (r && r->business_key && (!t->business_key || strcmp(r->business_key, t->business_key)))
		return NULL;
	return r;
}

/* usePriority: ORDER BY PRIORITY_ DESC; otherwise no ORDER BY (insertion
 * order here, whatever the database gives in an engine). */
static bool before(const struct task *a, const struct task *b, bool prio)
{
	if (prio && a->priority != b->priority)
		return a->priority > b->priority;
	return a->seq < b->seq;
}

/* FetchExternalTasksCmd.execute with E.mu held: lock up to maxTasks, their
 * LockedExternalTaskDtos. */
static cJSON *fetch_lock(const struct fetch_req *f)
{
	cJSON *a = cJSON_CreateArray();
	long long now = now_ms();

	for (long long got = 0; got < f->max_tasks; got++) {
		struct task *best = NULL;
		const struct topic_req *r = NULL;

		for (size_t i = 0; i < E.n_tasks; i++) {
			struct task *t = E.tasks[i];
			const struct topic_req *tr;

			if (!fetchable(t, now) || !(tr = topic_for(f, t)))
				continue;
			if (!best || before(t, best, f->use_priority))
				best = t, r = tr;
		}
		if (!best)
			break;
		set_str(&best->worker, f->worker); /* ExternalTaskEntity.lock */
		best->lock_exp_ms = now + r->lock_ms;
		best->failed_wait = false;
		best->fetched++;
		stat_inc("tasks_locked");
		cJSON_AddItemToArray(a, locked_dto(best, r->variables, r->local));
	}
	return a;
}

static enum MHD_Result h_fetch(struct MHD_Connection *c, const struct req *q)
{
	_cleanup_json_ cJSON *j = NULL;
	struct fetch_req f = {0};
	struct err e;
	cJSON *a = NULL;
	enum MHD_Result ret;

	pthread_mutex_lock(&E.mu);
	stat_inc("fetchAndLock");
	pthread_mutex_unlock(&E.mu);
	if (!(j = body_parse(c, q, "FetchExternalTasksExtendedDto.getAsyncResponseTimeout()", &e)))
		return reply_err(c, &e);
	if (!fetch_parse(j, &f)) {
		free(f.topics);
		err_mapping(&e);
		return reply_err(c, &e);
	}
	if (f.timeout_ms > MAX_REQUEST_TIMEOUT_MS) { /* addPendingRequest, before any fetch */
		free(f.topics);
		return reply_error(c, 400, "InvalidRequestException", CODE_NULL,
		                   "The asynchronous response timeout cannot be set to a value "
		                   "greater than %lld milliseconds",
		                   MAX_REQUEST_TIMEOUT_MS);
	}
	if (!fetch_validate(&f, &e)) {
		free(f.topics);
		return reply_err(c, &e);
	}
	pthread_mutex_lock(&E.mu);
	{
		long long end = mono_ms() + MAX(f.timeout_ms, 0);
		long long next_fetch = mono_ms() + PENDING_FETCH_INTERVAL_MS;

		for (;;) {
			uint64_t gen = E.avail_gen;
			long long left;

			a = fetch_lock(&f);
			if (cJSON_GetArraySize(a) > 0 || f.timeout_ms < 0 || mono_ms() >= end)
				break;
			cJSON_Delete(a);
			a = NULL;
			/* held: fetch again on the engine's signal, every 30 s, at the end */
			while (E.avail_gen == gen && !E.stopping && (left = end - mono_ms()) > 0 &&
			       mono_ms() < next_fetch) {
				struct timespec ts = mono_after(MIN(left, next_fetch - mono_ms()));

				pthread_cond_timedwait(&E.cv, &E.mu, &ts);
			}
			if (E.stopping)
				break;
			if (mono_ms() >= next_fetch)
				next_fetch = mono_ms() + PENDING_FETCH_INTERVAL_MS;
		}
		if (a && cJSON_GetArraySize(a) > 0)
			stat_inc("fetchAndLock_nonempty");
	}
	pthread_mutex_unlock(&E.mu);
	free(f.topics);
	if (!a)
		return reply_error(c, 500, "RestException", CODE_NULL,
		                   "Request rejected due to shutdown of application server.");
	ret = reply_json(c, 200, a);
	return ret;
}

/* ---------------------------------------------------- task handlers */

enum op { OP_COMPLETE, OP_FAILURE, OP_BPMN_ERROR, OP_EXTEND_LOCK, OP_UNLOCK, OP_LOCK };

/* HandleExternalTaskCmd.getErrorMessageOnWrongWorkerAccess, per command. */
static void wrong_worker(struct err *e, enum op op, const char *id, const char *worker,
                         const char *owner)
{
	static const char *const what[] = {
	    [OP_COMPLETE] = "External Task %s cannot be completed by worker '%s'",
	    [OP_FAILURE] = "Failure of External Task %s cannot be reported by worker '%s'",
	    [OP_BPMN_ERROR] = "Bpmn error of External Task %s cannot be reported by worker '%s'",
	    [OP_EXTEND_LOCK] = "The lock of the External Task %s cannot be extended by worker '%s'",
	    [OP_LOCK] = "External Task %s cannot be locked by worker '%s'",
	};
	char head[512];

	snprintf(head, sizeof(head), what[op], id, worker);
	err_set(e, 400, "RestException", CODE_FALLBACK, "%s. It is locked by worker '%s'.", head,
	        owner ? owner : "null");
}

static void not_found(struct err *e, const char *id, int code)
{
	err_set(e, 404, "RestException", code, "External task with id %s does not exist", id);
}

/* ExternalTaskEntity.setErrorMessage: the first 666 chars (Java chars:
 * UTF-16 units; counted here as code points, the same for the BMP). */
static char *message_cap(const char *s)
{
	size_t i = 0, chars = 0;

	if (!s)
		return NULL;
	while (s[i] && chars < MAX_EXCEPTION_MESSAGE_LENGTH) {
		i++;
		while ((s[i] & 0xc0) == 0x80)
			i++;
		chars++;
	}
	return strndup(s, i);
}

/* The parsed body of one of the task commands. */
struct handle {
	const char *worker, *error_message, *error_details, *error_code;
	char wbuf[64], cbuf[64];
	long long retries, retry_timeout, new_duration, lock_duration;
	cJSON *vars, *local_vars; /* typed, or NULL when absent */
};

static void handle_done(struct handle *h)
{
	cJSON_Delete(h->vars);
	cJSON_Delete(h->local_vars);
}

/* Bind the DTO and convert its variables (VariableValueDto.toMap happens in
 * the resource, before the command: a bad variable is 400 whatever the task). */
static bool handle_parse(enum op op, const cJSON *j, struct handle *h, struct err *e)
{
	if (!j_str(j, "workerId", &h->worker, h->wbuf, sizeof(h->wbuf)) ||
	    !j_sval(j, "errorMessage", &h->error_message) ||
	    !j_sval(j, "errorDetails", &h->error_details) ||
	    !j_str(j, "errorCode", &h->error_code, h->cbuf, sizeof(h->cbuf)) ||
	    !j_long(j, "retries", 0, &h->retries) ||
	    !j_long(j, "retryTimeout", 0, &h->retry_timeout) ||
	    !j_long(j, "newDuration", 0, &h->new_duration) ||
	    !j_long(j, "lockDuration", 0, &h->lock_duration)) {
		err_mapping(e);
		return false;
	}
	if (op == OP_COMPLETE || op == OP_FAILURE || op == OP_BPMN_ERROR) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "variables");
		const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "localVariables");

		if (v && !cJSON_IsNull(v) && !(h->vars = vars_typed(v, e)))
			return false;
		if (op != OP_BPMN_ERROR && l && !cJSON_IsNull(l) &&
		    !(h->local_vars = vars_typed(l, e)))
			return false;
	}
	return true;
}

/* The command's own checks before the task is looked up. */
static bool handle_validate(enum op op, const struct handle *h, struct err *e)
{
	if (op == OP_EXTEND_LOCK && h->new_duration <= 0) { /* in the constructor */
		err_set(e, 400, "RestException", CODE_FALLBACK, "lockTime is not greater than 0");
		return false;
	}
	if (!h->worker) {
		err_set(e, 500, "NullValueException", CODE_FALLBACK, "workerId is null");
		return false;
	}
	if (op == OP_FAILURE && h->retries < 0) {
		err_set(e, 500, "ProcessEngineException", CODE_FALLBACK,
		        "retries is not greater than or equal to 0");
		return false;
	}
	if (op == OP_FAILURE && h->retry_timeout < 0) {
		err_set(e, 500, "ProcessEngineException", CODE_FALLBACK,
		        "retryDuration is not greater than or equal to 0");
		return false;
	}
	if (op == OP_LOCK && h->lock_duration <= 0) { /* LockExternalTaskCmd.validateInput */
		err_set(e, 400, "RestException", CODE_FALLBACK,
		        "lockDuration is not greater than 0");
		return false;
	}
	if (op == OP_BPMN_ERROR && !h->error_code) {
		err_set(e, 500, "NullValueException", CODE_FALLBACK, "errorCode is null");
		return false;
	}
	return true;
}

/* UTF-16 code units of UTF-8 text (what an nvarchar counts). */
static size_t utf16_units(const char *s)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xc0) != 0x80 ? 1 + (*p >= 0xf0) : 0;
	return n;
}

/* The database under the engine (engine/src/main/resources/.../create/
 * activiti.postgres.create.engine.sql, ACT_RU_VARIABLE: NAME_ varchar(255),
 * TEXT_ varchar(4000), where StringValueSerializer puts a String): a longer
 * value fails the flush, and the engine answers 500 with nothing changed
 * (the message of PostgreSQL's, shortened). */
static bool vars_fit(const cJSON *vars, struct err *e)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, vars)
	{
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, "value");

		if (utf16_units(v->string) > 255 ||
		    (cJSON_IsString(t) && strcmp(t->valuestring, "String") == 0 &&
		     cJSON_IsString(x) && utf16_units(x->valuestring) > 4000)) {
			err_set(
			    e, 500, "ProcessEngineException", CODE_FALLBACK,
			    "ENGINE-03083 Exception while executing Batch Database Operations "
			    "with message 'ERROR: value too long for type character varying(%d)'",
			    utf16_units(v->string) > 255 ? 255 : 4000);
			return false;
		}
	}
	return true;
}

/* The command on a live task whose lock h->worker owns (E.mu held). */
static bool handle_apply(enum op op, struct task *t, struct handle *h, struct err *e)
{
	long long now = now_ms();

	if (!vars_fit(h->vars, e) || !vars_fit(h->local_vars, e))
		return false;

	switch (op) {
	case OP_COMPLETE: /* ExternalTaskEntity.complete: variables set, task deleted */
		if (h->vars)
			vars_merge(t->vars, h->vars);
		if (h->local_vars)
			vars_merge(t->local_vars, h->local_vars);
		cJSON_Delete(t->done_vars);
		cJSON_Delete(t->done_local_vars);
		t->done_vars = TAKE_PTR(h->vars);
		t->done_local_vars = TAKE_PTR(h->local_vars);
		t->end = END_COMPLETED;
		t->complete++;
		break;
	case OP_FAILURE: /* ExternalTaskEntity.failed */
		if (h->vars)
			vars_merge(t->vars, h->vars);
		if (h->local_vars)
			vars_merge(t->local_vars, h->local_vars);
		free(t->error_message);
		t->error_message = message_cap(h->error_message);
		if (h->error_details)
			set_str(&t->error_details, h->error_details);
		t->lock_exp_ms = now + h->retry_timeout;
		t->retry_timeout_ms = h->retry_timeout;
		t->failed_wait = true;
		t->retries = (int)MIN(h->retries, 2147483647LL); /* 0: an incident */
		t->failure++;
		break;
	case OP_BPMN_ERROR: { /* ExternalTaskEntity.bpmnError: propagated, task deleted */
		cJSON *b = cJSON_CreateObject();

		cJSON_AddStringToObject(b, "code", h->error_code);
		add_str_or_null(b, "message", h->error_message);
		cJSON_AddItemToObject(b, "variables",
		                      h->vars ? TAKE_PTR(h->vars) : cJSON_CreateObject());
		vars_merge(t->vars, cJSON_GetObjectItemCaseSensitive(b, "variables"));
		cJSON_Delete(t->bpmn_error);
		t->bpmn_error = b;
		t->end = END_BPMN_ERROR;
		t->bpmn++;
		break;
	}
	case OP_EXTEND_LOCK: /* ExtendLockOnExternalTaskCmd.execute */
		if (t->lock_exp_ms < now) {
			err_set(
			    e, 400, "RestException", CODE_FALLBACK,
			    "Cannot extend a lock that expired: lockExpirationTime is not greater "
			    "than or equal to %lld",
			    now);
			return false;
		}
		t->lock_exp_ms = now + h->new_duration;
		t->last_new_duration = h->new_duration;
		t->extend_lock++;
		break;
	case OP_LOCK: /* ExternalTaskEntity.lock */
		set_str(&t->worker, h->worker);
		t->lock_exp_ms = now + h->lock_duration;
		t->failed_wait = false;
		t->lock++;
		break;
	case OP_UNLOCK:
		break;
	}
	pthread_cond_broadcast(&E.cv);
	return true;
}

static const char *const op_names[] = {"complete",   "failure", "bpmnError",
                                       "extendLock", "unlock",  "lock"};

/* HandleExternalTaskCmd.validateWorkerViolation; LockExternalTaskCmd's own:
 * only another worker's lock that has not expired stands in the way. */
static bool worker_violation(enum op op, const struct task *t, const char *worker)
{
	if (op == OP_LOCK)
		return t->worker && strcmp(worker, t->worker) != 0 && lock_held(t, now_ms());
	return !t->worker || strcmp(worker, t->worker) != 0;
}

static enum MHD_Result h_task_op(struct MHD_Connection *c, enum op op, const char *id,
                                 const struct req *q)
{
	_cleanup_json_ cJSON *j = NULL;
	struct handle h = {0};
	struct err e = {0};
	struct task *t;
	bool ok = false;

	pthread_mutex_lock(&E.mu);
	stat_inc(op_names[op]);
	pthread_mutex_unlock(&E.mu);
	if (op == OP_UNLOCK) { /* UnlockExternalTaskCmd: no body, no workerId */
		pthread_mutex_lock(&E.mu);
		if ((t = task_live(id))) {
			set_str(&t->worker, NULL);
			t->lock_exp_ms = 0;
			t->failed_wait = false;
			t->unlock++;
			signal_available();
		}
		pthread_mutex_unlock(&E.mu);
		if (!t)
			return reply_error(c, 404, "RestException", CODE_FALLBACK,
			                   "External task with id %s does not exist", id);
		return reply(c, 204, NULL, NULL);
	}
	if (!(j = body_parse(c, q, "HandleExternalTaskDto.getWorkerId()", &e)))
		goto refused;
	if (!handle_parse(op, j, &h, &e) || !handle_validate(op, &h, &e))
		goto refused;
	pthread_mutex_lock(&E.mu);
	t = task_live(id);
	if (!t)
		not_found(&e, id, CODE_FALLBACK);
	else if (worker_violation(op, t, h.worker))
		wrong_worker(&e, op, id, h.worker, t->worker);
	else
		ok = handle_apply(op, t, &h, &e);
	if (!ok && (t = task_find(id)))
		t->refused++;
	pthread_mutex_unlock(&E.mu);
	handle_done(&h);
	return ok ? reply(c, 204, NULL, NULL) : reply_err(c, &e);
refused:
	handle_done(&h);
	pthread_mutex_lock(&E.mu);
	if ((t = task_find(id)))
		t->refused++;
	pthread_mutex_unlock(&E.mu);
	return reply_err(c, &e);
}

/* GET /external-task/{id}: ExternalTaskDto, or 404 (a RestException of its
 * own: code null). */
static enum MHD_Result h_get_task(struct MHD_Connection *c, const char *id)
{
	struct task *t;
	cJSON *j = NULL;

	pthread_mutex_lock(&E.mu);
	stat_inc("get_task");
	if ((t = task_live(id)))
		j = task_dto(t);
	pthread_mutex_unlock(&E.mu);
	if (!t)
		return reply_error(c, 404, "RestException", CODE_NULL,
		                   "External task with id %s does not exist", id);
	return reply_json(c, 200, j);
}

/* GET /external-task/{id}/errorDetails: text/plain; none → 204. */
static enum MHD_Result h_error_details(struct MHD_Connection *c, const char *id)
{
	struct task *t;
	char *s = NULL;

	pthread_mutex_lock(&E.mu);
	if ((t = task_live(id)) && t->error_details)
		s = strdup(t->error_details);
	pthread_mutex_unlock(&E.mu);
	if (!t)
		return reply_error(c, 404, "RestException", CODE_FALLBACK,
		                   "External task with id %s does not exist", id);
	return s ? reply(c, 200, "text/plain", s) : reply(c, 204, NULL, NULL);
}

/* ------------------------------------------------------------------ auth */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(4 * ((n + 2) / 3) + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)(unsigned char)s[i] << 16;

		if (i + 1 < n)
			v |= (unsigned)(unsigned char)s[i + 1] << 8;
		if (i + 2 < n)
			v |= (unsigned char)s[i + 2];
		out[o++] = b64[(v >> 18) & 63];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

/* ProcessEngineAuthenticationFilter: true when the request may pass. */
static bool auth_ok(struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");

	if (E.bearer)
		return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, E.bearer) == 0;
	if (E.basic_user) {
		_cleanup_free_ char *pair = NULL, *enc = NULL;

		if (asprintf(&pair, "%s:%s", E.basic_user, E.basic_password) < 0 ||
		    !(enc = base64(pair)))
			return false;
		return h && strncmp(h, "Basic ", 6) == 0 && strcmp(h + 6, enc) == 0;
	}
	return true;
}

static enum MHD_Result reply_401(struct MHD_Connection *c)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "WWW-Authenticate",
	                        E.bearer ? "Bearer" : "Basic realm=\"" ENGINE_NAME "\"");
	ret = MHD_queue_response(c, 401, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---------------------------------------------------------------- faults */

enum fault_act { FAULT_NONE, FAULT_ANSWERED, FAULT_RESET };

/* Applies the first matching fault rule to this engine request. */
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
		*ret = reply_error(c, f.status, "ProcessEngineException", CODE_FALLBACK,
		                   "injected fault (emulator)");
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
		return emu_error(c, 400, "emu: want {path?, count, status?, stall_ms?, reset?}");
	pthread_mutex_lock(&E.mu);
	v = realloc(E.faults, (E.n_faults + 1) * sizeof(*E.faults));
	if (v) {
		E.faults = v;
		E.faults[E.n_faults++] = (struct fault){
		    .path = strdup(path ? path->valuestring : ROOT "/"),
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

/* A task as an external-task activity creates it (ExternalTaskEntity
 * .createAndInsert: createTime now, retries null, no lock). */
static struct task *task_add(const char *topic, const cJSON *vars, const cJSON *local_vars,
                             const char *business_key, const char *pi)
{
	struct task *t = calloc(1, sizeof(*t));

	if (!t || !grow((void **)&E.tasks, &E.cap_tasks, E.n_tasks, sizeof(*E.tasks)))
		goto fail;
	uuid_v4(t->id);
	if (pi)
		snprintf(t->pi, sizeof(t->pi), "%s", pi);
	else
		uuid_v4(t->pi);
	uuid_v4(t->exec);
	snprintf(t->act_inst, sizeof(t->act_inst), "emuTask:%s", t->exec);
	t->topic = strdup(topic);
	t->business_key = business_key ? strdup(business_key) : NULL;
	t->vars = cJSON_Duplicate(vars, true);
	t->local_vars = cJSON_Duplicate(local_vars, true);
	if (!t->topic || (business_key && !t->business_key) || !t->vars || !t->local_vars)
		goto fail;
	t->retries = -1;
	t->create_ms = now_ms();
	t->seq = ++E.seq;
	E.tasks[E.n_tasks++] = t;
	return t;
fail:
	if (t)
		task_free(t);
	return NULL;
}

/* /emu/tasks variables: typed ({type?, value, valueInfo?}) as the engine
 * takes them, or a plain JSON value, typed as an untyped one would be. */
static cJSON *emu_vars(const cJSON *m, struct err *e)
{
	_cleanup_json_ cJSON *typed = cJSON_CreateObject();
	const cJSON *v;

	if (m && !cJSON_IsObject(m))
		return NULL;
	cJSON_ArrayForEach(v, m)
	{
		if (cJSON_IsObject(v) && (cJSON_GetObjectItemCaseSensitive(v, "type") ||
		                          cJSON_GetObjectItemCaseSensitive(v, "value"))) {
			cJSON_AddItemToObject(typed, v->string, cJSON_Duplicate(v, true));
		} else {
			cJSON *w = cJSON_CreateObject();

			cJSON_AddItemToObject(w, "value", cJSON_Duplicate(v, true));
			cJSON_AddItemToObject(typed, v->string, w);
		}
	}
	return vars_typed(typed, e);
}

static enum MHD_Result h_emu_create(struct MHD_Connection *c, const struct req *q)
{
	_cleanup_json_ cJSON *j = cJSON_ParseWithLength(q->body, q->len);
	_cleanup_json_ cJSON *vars = NULL, *local = NULL;
	const cJSON *topic = cJSON_GetObjectItemCaseSensitive(j, "topicName");
	const cJSON *bk = cJSON_GetObjectItemCaseSensitive(j, "businessKey");
	const cJSON *pi = cJSON_GetObjectItemCaseSensitive(j, "processInstanceId");
	const cJSON *retries = cJSON_GetObjectItemCaseSensitive(j, "retries");
	const cJSON *prio = cJSON_GetObjectItemCaseSensitive(j, "priority");
	const cJSON *count = cJSON_GetObjectItemCaseSensitive(j, "count");
	long long n = cJSON_IsNumber(count) ? (long long)count->valuedouble : 1;
	struct err e;
	cJSON *o, *ids;

	if (!cJSON_IsString(topic) || !*topic->valuestring || (bk && !cJSON_IsString(bk)) ||
	    (pi && !cJSON_IsString(pi)) ||
	    (retries && !cJSON_IsNull(retries) &&
	     (!cJSON_IsNumber(retries) || retries->valuedouble < 0)) ||
	    (prio && !cJSON_IsNumber(prio)) || n < 1 || n > 1000000 ||
	    !(vars = emu_vars(cJSON_GetObjectItemCaseSensitive(j, "variables"), &e)) ||
	    !(local = emu_vars(cJSON_GetObjectItemCaseSensitive(j, "localVariables"), &e)))
		return emu_error(c, 400,
		                 "emu: want {topicName, variables?, localVariables?, retries?, "
		                 "priority?, businessKey?, processInstanceId?, count?} (variables "
		                 "typed as the engine takes them)");
	o = cJSON_CreateObject();
	ids = cJSON_AddArrayToObject(o, "ids");
	pthread_mutex_lock(&E.mu);
	for (long long i = 0; i < n; i++) {
		struct task *t = task_add(topic->valuestring, vars, local,
		                          bk ? bk->valuestring : NULL, pi ? pi->valuestring : NULL);

		if (!t)
			break;
		t->retries = cJSON_IsNumber(retries) ? (int)retries->valuedouble : -1;
		t->priority = prio ? (long long)prio->valuedouble : 0;
		cJSON_AddItemToArray(ids, cJSON_CreateString(t->id));
		if (i == 0) {
			cJSON_AddStringToObject(o, "id", t->id);
			cJSON_AddStringToObject(o, "processInstanceId", t->pi);
		}
	}
	stat_inc("emu_create");
	signal_available(); /* ExternalTaskManager.insert */
	pthread_mutex_unlock(&E.mu);
	if (cJSON_GetArraySize(ids) < n) {
		cJSON_Delete(o);
		return emu_error(c, 500, "emu: out of memory");
	}
	return reply_json(c, 200, o);
}

static enum MHD_Result h_emu_list(struct MHD_Connection *c)
{
	const char *topic = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "topicName");
	cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tasks");

	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_tasks; i++)
		if (!topic || strcmp(topic, E.tasks[i]->topic) == 0)
			cJSON_AddItemToArray(a, emu_task_json(E.tasks[i]));
	pthread_mutex_unlock(&E.mu);
	return reply_json(c, 200, o);
}

enum emu_act { EMU_VIEW, EMU_CANCEL, EMU_EXPIRE };

static enum MHD_Result h_emu_task(struct MHD_Connection *c, const char *id, enum emu_act act)
{
	struct task *t;
	cJSON *j = NULL;
	const char *refused = NULL;

	pthread_mutex_lock(&E.mu);
	if ((t = task_find(id))) {
		long long now = now_ms();

		if (act != EMU_VIEW && t->end != END_NONE) {
			refused = "emu: the task has ended";
		} else if (act == EMU_CANCEL) { /* the process instance deleted */
			t->end = END_DELETED;
			pthread_cond_broadcast(&E.cv);
		} else if (act == EMU_EXPIRE) {
			if (!lock_held(t, now))
				refused = "emu: the task is not locked";
			else
				t->lock_exp_ms = now - 1;
			pthread_cond_broadcast(&E.cv);
		}
		j = emu_task_json(t);
	}
	pthread_mutex_unlock(&E.mu);
	if (!t)
		return emu_error(c, 404, "emu: no such task");
	if (refused) {
		cJSON_Delete(j);
		return emu_error(c, 409, refused);
	}
	return reply_json(c, 200, j);
}

/* /emu/wait's condition, checked with E.mu held: the answer once it holds. */
struct wait_for {
	const char *id, *topic, *state, *stat, *counter;
	int count;
};

static cJSON *wait_check(const struct wait_for *w)
{
	long long now = now_ms();
	cJSON *j;

	if (w->id) {
		struct task *t = task_find(w->id);
		cJSON *v;

		if (!t)
			return NULL;
		v = emu_task_json(t);
		if (w->state && strcmp(task_state(t, now), w->state) == 0)
			return v;
		if (w->counter) {
			const cJSON *n = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(v, "counts"), w->counter);

			if (cJSON_IsNumber(n) && n->valuedouble >= w->count)
				return v;
		}
		cJSON_Delete(v);
		return NULL;
	}
	if (w->topic) {
		int n = 0;

		for (size_t i = 0; i < E.n_tasks; i++)
			n += strcmp(E.tasks[i]->topic, w->topic) == 0 &&
			     strcmp(task_state(E.tasks[i], now), w->state) == 0;
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

/* The next lock expiry after now (states move on it), or -1. */
static long long next_expiry(void)
{
	long long now = now_ms(), best = -1;

	for (size_t i = 0; i < E.n_tasks; i++) {
		long long x = E.tasks[i]->lock_exp_ms;

		if (E.tasks[i]->end == END_NONE && x > now && (best < 0 || x < best))
			best = x;
	}
	return best;
}

static int query_int(struct MHD_Connection *c, const char *key, int def, int *ret)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
	long long n;

	*ret = def;
	if (!v || !*v)
		return 0;
	if (!str_is_long(v, 0, 2147483647LL, &n))
		return -EINVAL;
	*ret = (int)n;
	return 0;
}

static enum MHD_Result h_emu_wait(struct MHD_Connection *c)
{
	struct wait_for w = {
	    .id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "id"),
	    .topic = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "topicName"),
	    .state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state"),
	    .stat = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stat"),
	    .counter = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "counter"),
	};
	int timeout, kinds = !!w.id + !!w.topic + !!w.stat;
	long long end;
	cJSON *j = NULL;

	if (kinds != 1 || (w.id && !w.state == !w.counter) || (w.topic && !w.state) ||
	    query_int(c, "timeout_ms", 10000, &timeout) < 0 ||
	    query_int(c, "count", 1, &w.count) < 0)
		return emu_error(
		    c, 400, "emu: want id with state or counter, topicName with state, or stat");
	end = mono_ms() + timeout;
	pthread_mutex_lock(&E.mu);
	while (!(j = wait_check(&w))) {
		long long left = end - mono_ms(), x = next_expiry();

		if (left <= 0 || E.stopping)
			break;
		if (x > 0) /* a lock running out changes a state without an event */
			left = MIN(left, MAX(x - now_ms() + 1, 1));
		struct timespec ts = mono_after(MIN(left, 1000));
		pthread_cond_timedwait(&E.cv, &E.mu, &ts);
	}
	pthread_mutex_unlock(&E.mu);
	if (j)
		return reply_json(c, 200, j);
	return emu_error(c, 408, "emu: the condition did not hold in time");
}

/* GET /emu/counts: "STATE N" lines, for shell scripts (make demo). */
static enum MHD_Result h_emu_counts(struct MHD_Connection *c)
{
	static const char *const states[] = {"AVAILABLE", "LOCKED",     "FAILED", "INCIDENT",
	                                     "COMPLETED", "BPMN_ERROR", "DELETED"};
	unsigned n[ELEMENTSOF(states)] = {0};
	long long now = now_ms();
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return reply(c, 500, NULL, NULL);
	pthread_mutex_lock(&E.mu);
	for (size_t i = 0; i < E.n_tasks; i++)
		for (size_t k = 0; k < ELEMENTSOF(states); k++)
			if (strcmp(task_state(E.tasks[i], now), states[k]) == 0)
				n[k]++;
	pthread_mutex_unlock(&E.mu);
	for (size_t k = 0; k < ELEMENTSOF(states); k++)
		fprintf(f, "%s %u\n", states[k], n[k]);
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

/* "/external-task/{id}/complete" → id: one segment after prefix, then suffix. */
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

/* JAX-RS: a known path with another method is 405 (NotAllowedException). */
static enum MHD_Result not_allowed(struct MHD_Connection *c)
{
	return reply_error(c, 405, "NotAllowedException", CODE_NULL,
	                   "RESTEASY003650: No resource method found for this method");
}

static enum MHD_Result route_engine(struct MHD_Connection *c, const char *url, const char *m,
                                    const struct req *q)
{
	static const struct {
		const char *suffix;
		enum op op;
	} ops[] = {{"/complete", OP_COMPLETE},    {"/failure", OP_FAILURE},
	           {"/bpmnError", OP_BPMN_ERROR}, {"/extendLock", OP_EXTEND_LOCK},
	           {"/unlock", OP_UNLOCK},        {"/lock", OP_LOCK}};
	char seg[1024];
	const char *s;

	if (strcmp(url, ROOT "/external-task/fetchAndLock") == 0)
		return is(m, "POST") ? h_fetch(c, q) : not_allowed(c);
	for (size_t i = 0; i < ELEMENTSOF(ops); i++)
		if ((s = segment(url, ROOT "/external-task/", seg, sizeof(seg), ops[i].suffix)))
			return is(m, "POST") ? h_task_op(c, ops[i].op, s, q) : not_allowed(c);
	if ((s = segment(url, ROOT "/external-task/", seg, sizeof(seg), "/errorDetails")))
		return is(m, "GET") ? h_error_details(c, s) : not_allowed(c);
	if ((s = segment(url, ROOT "/external-task/", seg, sizeof(seg), "")))
		return is(m, "GET") ? h_get_task(c, s) : not_allowed(c);
	return reply_error(c, 404, "NotFoundException", CODE_NULL,
	                   "RESTEASY003210: Could not find resource for full path: %s", url);
}

static enum MHD_Result route_emu(struct MHD_Connection *c, const char *url, const char *m,
                                 const struct req *q)
{
	char seg[256];
	const char *s;

	if (strcmp(url, "/emu/tasks") == 0)
		return is(m, "POST") ? h_emu_create(c, q) : h_emu_list(c);
	if ((s = segment(url, "/emu/tasks/", seg, sizeof(seg), "/cancel")) && is(m, "POST"))
		return h_emu_task(c, s, EMU_CANCEL);
	if ((s = segment(url, "/emu/tasks/", seg, sizeof(seg), "/expire")) && is(m, "POST"))
		return h_emu_task(c, s, EMU_EXPIRE);
	if ((s = segment(url, "/emu/tasks/", seg, sizeof(seg), "")) && is(m, "GET"))
		return h_emu_task(c, s, EMU_VIEW);
	if (strcmp(url, "/emu/wait") == 0 && is(m, "GET"))
		return h_emu_wait(c);
	if (strcmp(url, "/emu/faults") == 0 && (is(m, "POST") || is(m, "DELETE")))
		return h_emu_faults(c, m, q);
	if (strcmp(url, "/emu/counts") == 0 && is(m, "GET"))
		return h_emu_counts(c);
	if (strcmp(url, "/emu/stats") == 0 && is(m, "GET"))
		return h_emu_stats(c);
	return emu_error(c, 404, "emu: no such control");
}

static enum MHD_Result route(struct MHD_Connection *c, const char *url, const char *m,
                             const struct req *q)
{
	enum MHD_Result ret = MHD_NO;

	if (strncmp(url, "/emu/", 5) == 0)
		return route_emu(c, url, m, q);
	switch (fault_apply(c, url, &ret)) {
	case FAULT_RESET:
		return MHD_NO; /* libmicrohttpd closes the connection without an answer */
	case FAULT_ANSWERED:
		return ret;
	case FAULT_NONE:
		break;
	}
	if (!auth_ok(c)) {
		pthread_mutex_lock(&E.mu);
		stat_inc("auth_refused");
		pthread_mutex_unlock(&E.mu);
		return reply_401(c);
	}
	return route_engine(c, url, m, q);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	struct req *q = *con_cls;
	enum MHD_Result ret;

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
	if (q->too_big)
		ret = reply_error(c, 413, "RestException", CODE_NULL, "request body too large");
	else
		ret = route(c, url, method, q);
	if (!E.quiet)
		fprintf(stderr, "camunda7_emu: %s %s%s\n", method, url,
		        ret == MHD_YES ? "" : " (connection dropped)");
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

static int read_secret(const char *path, char **ret)
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
	free(*ret);
	*ret = strdup(buf);
	return *ret ? 0 : -ENOMEM;
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
	fprintf(f, "usage: camunda7_emu [--listen 127.0.0.1:PORT] [--ready-fd N] "
	           "[--port-file F] [--basic-user U --basic-password-file F] "
	           "[--bearer-token-file F] [--no-spin] [--quiet]\n");
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
	    {"basic-user", required_argument, NULL, 'u'},
	    {"basic-password-file", required_argument, NULL, 'P'},
	    {"bearer-token-file", required_argument, NULL, 'b'},
	    {"sweep-ms", required_argument, NULL, 'w'}, /* accepted, unused: expiry is lazy */
	    {"no-spin", no_argument, NULL, 'S'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const char *port_file = NULL, *pw_file = NULL, *bearer_file = NULL;
	int ready_fd = -1, o, sig;
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *info;
	pthread_condattr_t ca;
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
		case 'u':
			E.basic_user = optarg;
			break;
		case 'P':
			pw_file = optarg;
			break;
		case 'b':
			bearer_file = optarg;
			break;
		case 'w':
			break;
		case 'S':
			E.no_spin = true;
			break;
		case 'q':
			E.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("camunda7_emu (lessee tests) %s\n", LESSEE_VERSION);
			return 0;
		default:
			return usage(stderr), 2;
		}
	}
	if (!E.basic_user != !pw_file || (pw_file && read_secret(pw_file, &E.basic_password) < 0) ||
	    (bearer_file && read_secret(bearer_file, &E.bearer) < 0)) {
		fprintf(stderr,
		        "camunda7_emu: --basic-user needs a readable --basic-password-file; "
		        "--bearer-token-file must be readable\n");
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
		fprintf(stderr, "camunda7_emu: cannot listen\n");
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (announce(info ? info->port : 0, ready_fd, port_file) < 0) {
		fprintf(stderr, "camunda7_emu: cannot start\n");
		return 1;
	}
	fprintf(stderr, "camunda7_emu: serving on 127.0.0.1:%u%s%s\n", info ? info->port : 0,
	        E.basic_user ? " (basic auth)" : "", E.bearer ? " (bearer auth)" : "");
	sigwait(&ss, &sig);
	pthread_mutex_lock(&E.mu);
	E.stopping = true;
	pthread_cond_broadcast(&E.cv);
	pthread_mutex_unlock(&E.mu);
	MHD_stop_daemon(d);
	for (size_t i = 0; i < E.n_tasks; i++)
		task_free(E.tasks[i]);
	for (size_t i = 0; i < E.n_faults; i++)
		free(E.faults[i].path);
	free(E.tasks);
	free(E.faults);
	free(E.basic_password);
	free(E.bearer);
	cJSON_Delete(E.stats);
	return 0;
}
