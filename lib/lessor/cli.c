#include "lessor/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/client.h"
#include "lessor/json_raw.h"
#include "proto/v1.h"
#include "util/macro.h"
#include "util/strutil.h"

DEFINE_FREE_FUNC(lessor_client, lessor_client_free)
DEFINE_FREE_FUNC(cJSON, cJSON_Delete)

/* ---- calling the server ---- */

static void print_api_error(const struct lessor_cli *o, const struct lessor_response *r)
{
	cJSON *j = r->body ? cJSON_ParseWithLength(r->body, r->len) : NULL;
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "error");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");

	fprintf(o->err, "lessor: the server answered %ld", r->status);
	if (cJSON_IsString(code))
		fprintf(o->err, " %s", code->valuestring);
	if (cJSON_IsString(msg))
		fprintf(o->err, ": %s", msg->valuestring);
	fputc('\n', o->err);
	cJSON_Delete(j);
}

/* Performs one request; prints why and returns -1 unless the status is 2xx. */
static int call(const struct lessor_cli *o, const char *method, const char *path, const char *body,
                struct lessor_response *resp)
{
	_cleanup_(lessor_client_freep) lessor_client *c = NULL;
	char *hdr[] = {"Content-Type: application/json", NULL};
	int r;

	r = lessor_client_new(o->url, o->token, &c);
	if (r < 0) {
		fprintf(o->err, "lessor: %s\n", strerror(-r));
		return -1;
	}
	r = lessor_client_request(c, method, path, hdr, body, body ? strlen(body) : 0, resp);
	if (r < 0) {
		fprintf(o->err, "lessor: cannot talk to %s: %s\n", o->url, lessor_client_error(c));
		return -1;
	}
	if (resp->status < 200 || resp->status > 299) {
		print_api_error(o, resp);
		lessor_response_done(resp);
		return -1;
	}
	return 0;
}

/* A run's input and output, printed as the server sent them (json_raw.h). */
static void keep_as_sent(cJSON *j, struct json_span text)
{
	static const char *const keys[] = {"input", "output"};

	for (size_t i = 0; cJSON_IsObject(j) && i < ELEMENTSOF(keys); i++) {
		struct json_span v;
		_cleanup_free_ char *s = NULL;
		cJSON *raw;

		if (lessor_raw_member(text, keys[i], &v) < 0 || !v.p ||
		    !cJSON_GetObjectItemCaseSensitive(j, keys[i]) ||
		    !(s = lessor_raw_text(v, NULL)) || !(raw = lessor_raw_item(s)))
			continue;
		if (!cJSON_ReplaceItemInObjectCaseSensitive(j, keys[i], raw))
			cJSON_Delete(raw);
	}
}

/* A 2xx JSON response, or NULL (after saying why). */
static cJSON *call_json(const struct lessor_cli *o, const char *method, const char *path,
                        const char *body)
{
	struct lessor_response resp;
	cJSON *j;

	if (call(o, method, path, body, &resp) < 0)
		return NULL;
	j = resp.body ? cJSON_ParseWithLength(resp.body, resp.len) : NULL;
	keep_as_sent(j, (struct json_span){resp.body, resp.len});
	lessor_response_done(&resp);
	if (!j)
		fprintf(o->err, "lessor: the server's answer is not JSON\n");
	return j;
}

static int print_json(const struct lessor_cli *o, const cJSON *j)
{
	_cleanup_free_ char *s = cJSON_Print(j);

	if (!s)
		return 1;
	fprintf(o->out, "%s\n", s);
	return 0;
}

static int check_id(const struct lessor_cli *o, const char *id)
{
	if (v1_valid_id(id))
		return 0;
	fprintf(o->err, "lessor: '%s' is not a run id\n", id);
	return -1;
}

/* ---- field access for printing ---- */

static const char *str_or(const cJSON *j, const char *name, const char *dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	return cJSON_IsString(v) ? v->valuestring : dflt;
}

static long num_or(const cJSON *j, const char *name, long dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	return cJSON_IsNumber(v) ? (long)v->valuedouble : dflt;
}

/* A compact rendering of any member: strings bare, other JSON as text. */
static char *render(const cJSON *j, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

	if (!v || cJSON_IsNull(v))
		return strdup("-");
	if (cJSON_IsString(v))
		return strdup(v->valuestring);
	return cJSON_PrintUnformatted(v);
}

/* A JSON array of strings as "a,b", empty_text when empty, null_text when
 * absent or null. */
static char *strings_text(const cJSON *j, const char *name, const char *empty_text,
                          const char *null_text)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, name), *t;
	struct {
		char *p;
		size_t n;
	} b = {NULL, 0};
	FILE *f;

	if (!a || cJSON_IsNull(a))
		return strdup(null_text);
	if (!a->child)
		return strdup(empty_text);
	f = open_memstream(&b.p, &b.n);
	if (!f)
		return NULL;
	cJSON_ArrayForEach(t, a)
	    fprintf(f, "%s%s", t == a->child ? "" : ",", cJSON_IsString(t) ? t->valuestring : "?");
	fclose(f);
	return b.p;
}

static char *tags_text(const cJSON *j)
{
	return strings_text(j, "tags", "-", "-");
}

/* Why a run ended as it did (its last outcome): "exit 3", "timeout",
 * "crash SIGSEGV", "spawn_error", ...; "-" for none or a clean exit. */
static char *reason_text(const cJSON *run)
{
	const char *reason = str_or(run, "reason", NULL), *sig = str_or(run, "signal", NULL);
	long code = num_or(run, "exit_code", -1);
	char *s = NULL;

	if (!reason || (streq(reason, "exit") && code <= 0))
		return strdup("-");
	if (streq(reason, "exit"))
		return asprintf(&s, "exit %ld", code) < 0 ? NULL : s;
	if (streq(reason, "crash") && sig)
		return asprintf(&s, "crash %s", sig) < 0 ? NULL : s;
	return strdup(reason);
}

/* A table: a header, then n rows of ncols cells (NULL prints "?"), each
 * column as wide as its widest cell. */
static void print_table(FILE *out, const char *const *head, size_t ncols, char **cells, size_t n)
{
	_cleanup_free_ size_t *w = calloc(ncols, sizeof(*w));

	if (!w)
		return;
	for (size_t c = 0; c < ncols; c++) {
		w[c] = strlen(head[c]);
		for (size_t r = 0; r < n; r++)
			w[c] = MAX(w[c], strlen(cells[r * ncols + c] ? cells[r * ncols + c] : "?"));
	}
	for (size_t c = 0; c < ncols; c++)
		fprintf(out, "%-*s%s", (int)w[c], head[c], c + 1 < ncols ? "  " : "\n");
	for (size_t r = 0; r < n; r++)
		for (size_t c = 0; c < ncols; c++)
			fprintf(out, "%-*s%s", (int)w[c],
			        cells[r * ncols + c] ? cells[r * ncols + c] : "?",
			        c + 1 < ncols ? "  " : "\n");
}

/* Prints one row per member of rows with fill_row(member, its ncols cells). */
static int print_rows(const struct lessor_cli *o, const char *const *head, size_t ncols,
                      const cJSON *rows, void (*fill_row)(const cJSON *j, char **cells))
{
	size_t n = (size_t)cJSON_GetArraySize(rows), i = 0;
	char **cells = calloc((n + 1) * ncols, sizeof(*cells));
	const cJSON *j;

	if (!cells)
		return 1;
	cJSON_ArrayForEach(j, rows) fill_row(j, cells + ncols * i++);
	print_table(o->out, head, ncols, cells, n);
	for (i = 0; i < n * ncols; i++)
		free(cells[i]);
	free(cells);
	return 0;
}

/* ---- enqueue ---- */

static cJSON *enqueue_body(const struct lessor_cli_enqueue *e, char *err, size_t errlen)
{
	cJSON *o = cJSON_CreateObject(), *tags;

	cJSON_AddStringToObject(o, "workflow", e->workflow);
	if (e->input_json) {
		/* sent as written: every digit of its numbers (json_raw.h) */
		cJSON *in = lessor_raw_item(e->input_json);

		if (!in || cJSON_IsNull(in)) { /* raw when valid, even "null" */
			snprintf(err, errlen, "--input is not valid JSON (in UTF-8)");
			cJSON_Delete(in);
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddItemToObject(o, "input", in);
	}
	tags = cJSON_AddArrayToObject(o, "tags");
	for (size_t i = 0; e->tags && e->tags[i]; i++)
		cJSON_AddItemToArray(tags, cJSON_CreateString(e->tags[i]));
	if (e->max_attempts)
		cJSON_AddNumberToObject(o, "max_attempts", e->max_attempts);
	if (e->timeout_s)
		cJSON_AddNumberToObject(o, "timeout_s", e->timeout_s);
	if (e->idempotency_key)
		cJSON_AddStringToObject(o, "idempotency_key", e->idempotency_key);
	return o;
}

int lessor_cli_enqueue(const struct lessor_cli *o, const struct lessor_cli_enqueue *e)
{
	char err[128] = "";
	_cleanup_(cJSON_Deletep) cJSON *body = enqueue_body(e, err, sizeof(err)), *run = NULL;
	_cleanup_free_ char *text = NULL;

	if (!body) {
		fprintf(o->err, "lessor: %s\n", err[0] ? err : "out of memory");
		return 1;
	}
	text = cJSON_PrintUnformatted(body);
	run = text ? call_json(o, "POST", "/v1/runs", text) : NULL;
	if (!run)
		return 1;
	if (o->json)
		return print_json(o, run);
	fprintf(o->out, "%s\n", str_or(run, "id", "?"));
	return 0;
}

/* ---- list ---- */

enum {
	COL_ID,
	COL_STATUS,
	COL_WORKFLOW,
	COL_ATTEMPT,
	COL_WORKER,
	COL_OUTCOME,
	COL_REASON,
	COL_CREATED,
	N_COLS
};

static const char *const list_head[N_COLS] = {"ID",     "STATUS",  "WORKFLOW", "ATTEMPT",
                                              "WORKER", "OUTCOME", "REASON",   "CREATED"};

static void list_row(const cJSON *run, char **cells)
{
	cells[COL_ID] = render(run, "id");
	cells[COL_STATUS] = render(run, "status");
	cells[COL_WORKFLOW] = render(run, "workflow");
	if (asprintf(&cells[COL_ATTEMPT], "%ld/%ld", num_or(run, "attempt", 0),
	             num_or(run, "max_attempts", 0)) < 0)
		cells[COL_ATTEMPT] = NULL;
	cells[COL_WORKER] = render(run, "worker_id");
	cells[COL_OUTCOME] = render(run, "outcome");
	cells[COL_REASON] = reason_text(run);
	cells[COL_CREATED] = render(run, "created_at");
}

int lessor_cli_list(const struct lessor_cli *o, const char *status, const char *workflow,
                    unsigned limit)
{
	_cleanup_(cJSON_Deletep) cJSON *j = NULL;
	char path[512];

	if ((status && !v1_valid_id(status)) || (workflow && !v1_valid_id(workflow))) {
		fprintf(o->err, "lessor: malformed --status or --workflow\n");
		return 1;
	}
	snprintf(path, sizeof(path), "/v1/runs?limit=%u%s%s%s%s", limit ? limit : 100,
	         status ? "&status=" : "", status ? status : "", workflow ? "&workflow=" : "",
	         workflow ? workflow : "");
	j = call_json(o, "GET", path, NULL);
	if (!j)
		return 1;
	if (o->json)
		return print_json(o, j);
	return print_rows(o, list_head, N_COLS, cJSON_GetObjectItemCaseSensitive(j, "runs"),
	                  list_row);
}

/* ---- show ---- */

static void show_kv(FILE *out, const char *key, const char *value)
{
	fprintf(out, "%-17s %s\n", key, value);
}

static void show_member(FILE *out, const cJSON *run, const char *key, const char *name)
{
	_cleanup_free_ char *v = render(run, name);

	show_kv(out, key, v ? v : "?");
}

static void show_leases(FILE *out, const cJSON *run)
{
	const cJSON *leases = cJSON_GetObjectItemCaseSensitive(run, "leases"), *l;

	if (!leases || !leases->child)
		return;
	fprintf(out, "leases:\n");
	cJSON_ArrayForEach(l, leases)
	{
		fprintf(out, "  attempt %ld  worker %s  claim %s  granted %s",
		        num_or(l, "attempt", 0), str_or(l, "worker_id", "?"),
		        str_or(l, "claim_id", "?"), str_or(l, "granted_at", "?"));
		if (str_or(l, "ended_at", NULL))
			fprintf(out, "  ended %s (%s)", str_or(l, "ended_at", "?"),
			        str_or(l, "end_reason", "?"));
		else
			fprintf(out, "  held");
		fputc('\n', out);
	}
}

static void show_text(FILE *out, const cJSON *run)
{
	static const struct {
		const char *key, *name;
	} fields[] = {
	    {"id:", "id"},
	    {"workflow:", "workflow"},
	    {"status:", "status"},
	    {"input:", "input"},
	    {"timeout_s:", "timeout_s"},
	    {"idempotency key:", "idempotency_key"},
	    {"outcome:", "outcome"},
	    {"reason:", "reason"},
	    {"exit code:", "exit_code"},
	    {"signal:", "signal"},
	    {"error:", "error"},
	    {"output:", "output"},
	    {"log length:", "log_length"},
	    {"rejected writes:", "rejected_writes"},
	    {"lease expiries:", "lease_expiries"},
	    {"cancel requested:", "cancel_requested"},
	    {"created:", "created_at"},
	    {"started:", "started_at"},
	    {"finished:", "finished_at"},
	};
	_cleanup_free_ char *tags = tags_text(run), *attempt = NULL;

	for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
		show_member(out, run, fields[i].key, fields[i].name);
		if (streq(fields[i].name, "status")) {
			if (asprintf(&attempt, "%ld of %ld", num_or(run, "attempt", 0),
			             num_or(run, "max_attempts", 0)) >= 0)
				show_kv(out, "attempt:", attempt);
			show_kv(out, "tags:", tags ? tags : "?");
		}
	}
	show_leases(out, run);
}

int lessor_cli_show(const struct lessor_cli *o, const char *id)
{
	_cleanup_(cJSON_Deletep) cJSON *run = NULL;
	char path[256];

	if (check_id(o, id) < 0)
		return 1;
	snprintf(path, sizeof(path), "/v1/runs/%s", id);
	run = call_json(o, "GET", path, NULL);
	if (!run)
		return 1;
	if (o->json)
		return print_json(o, run);
	show_text(o->out, run);
	return 0;
}

/* ---- workers ---- */

static const char *const workers_head[] = {"WORKER", "LAST CONTACT", "WORKFLOWS", "TAGS",
                                           "SLOTS",  "HELD",         "GRANTED",   "CLAIMS"};

static void workers_row(const cJSON *w, char **cells)
{
	static const char *const nums[] = {"max_runs", "runs_held", "runs_granted", "claims"};

	cells[0] = render(w, "worker_id");
	cells[1] = render(w, "last_claim_at");
	cells[2] = strings_text(w, "workflows", "none", "any");
	cells[3] = strings_text(w, "tags", "-", "-");
	for (size_t i = 0; i < ELEMENTSOF(nums); i++)
		cells[4 + i] = render(w, nums[i]);
}

int lessor_cli_workers(const struct lessor_cli *o)
{
	_cleanup_(cJSON_Deletep) cJSON *j = call_json(o, "GET", "/v1/workers", NULL);

	if (!j)
		return 1;
	if (o->json)
		return print_json(o, j);
	return print_rows(o, workers_head, ELEMENTSOF(workers_head),
	                  cJSON_GetObjectItemCaseSensitive(j, "workers"), workers_row);
}

/* ---- log, stats, actions ---- */

int lessor_cli_log(const struct lessor_cli *o, const char *id)
{
	struct lessor_response resp;
	char path[256];
	size_t want, n;

	if (check_id(o, id) < 0)
		return 1;
	snprintf(path, sizeof(path), "/v1/runs/%s/log", id);
	if (call(o, "GET", path, NULL, &resp) < 0)
		return 1;
	want = resp.len;
	n = want ? fwrite(resp.body, 1, want, o->out) : 0;
	lessor_response_done(&resp);
	if (n != want || fflush(o->out) != 0) {
		fprintf(o->err, "lessor: cannot write the log: %m\n");
		return 1;
	}
	return 0;
}

/* A number as "name value"; an object's members as "name.member value". */
static void print_stat(const struct lessor_cli *o, const char *prefix, const cJSON *v)
{
	char name[64];
	const cJSON *k;

	snprintf(name, sizeof(name), "%s%s%s", prefix ? prefix : "", prefix ? "." : "", v->string);
	if (!cJSON_IsObject(v)) {
		fprintf(o->out, "%-16s %ld\n", name, (long)v->valuedouble);
		return;
	}
	cJSON_ArrayForEach(k, v) print_stat(o, name, k);
}

int lessor_cli_stats(const struct lessor_cli *o)
{
	_cleanup_(cJSON_Deletep) cJSON *j = call_json(o, "GET", "/v1/stats", NULL);
	const cJSON *v;

	if (!j)
		return 1;
	if (o->json)
		return print_json(o, j);
	cJSON_ArrayForEach(v, j) print_stat(o, NULL, v);
	return 0;
}

static int action(const struct lessor_cli *o, const char *id, const char *verb)
{
	_cleanup_(cJSON_Deletep) cJSON *j = NULL;
	char path[256];

	if (check_id(o, id) < 0)
		return 1;
	snprintf(path, sizeof(path), "/v1/runs/%s/%s", id, verb);
	j = call_json(o, "POST", path, NULL);
	if (!j)
		return 1;
	if (o->json)
		return print_json(o, j);
	fprintf(o->out, "%s %s\n", id, str_or(j, "status", "?"));
	return 0;
}

int lessor_cli_cancel(const struct lessor_cli *o, const char *id)
{
	return action(o, id, "cancel");
}

int lessor_cli_requeue(const struct lessor_cli *o, const char *id)
{
	return action(o, id, "requeue");
}
