/* Protocol v1 as lessor speaks it (docs/protocol.md). */
#include "proto/proto.h"

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/json_scan.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/strutil.h"

bool proto_valid_id(const char *s)
{
	return v1_valid_id(s);
}

bool proto_valid_tag(const char *s)
{
	return v1_valid_tag(s);
}

bool proto_valid_worker_id(const char *s)
{
	return v1_valid_worker_id(s);
}

static void cjson_deletep(cJSON **j)
{
	cJSON_Delete(*j);
}
#define _cleanup_json_ _cleanup_(cjson_deletep)

/* Serialize and hand over; -ENOMEM on any allocation failure along the way. */
static int json_finish(cJSON *root, char **ret)
{
	char *s = cJSON_PrintUnformatted(root);

	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

/* An integer member.  cJSON (1.7.15) prints every number with "%1.15g" and
 * reads it back with sscanf to check it, some 3,000 instructions a number:
 * three in every completion.  An integer needs neither. */
static cJSON *add_int(cJSON *o, const char *key, int64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, v);
	return cJSON_AddRawToObject(o, key, s);
}

static cJSON *strv_to_json(char *const *v)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; a && v && v[i]; i++)
		if (!cJSON_AddItemToArray(a, cJSON_CreateString(v[i]))) {
			cJSON_Delete(a);
			return NULL;
		}
	return a;
}

static int held_to_json(cJSON *o, const struct proto_held *h, size_t n)
{
	cJSON *a = cJSON_AddArrayToObject(o, "held");

	for (size_t i = 0; a && i < n; i++) {
		cJSON *e = cJSON_CreateObject();

		if (!e || !cJSON_AddItemToArray(a, e) || !cJSON_AddStringToObject(e, "id", h[i].id) ||
		    !cJSON_AddStringToObject(e, "token", h[i].token))
			return -ENOMEM;
	}
	return a ? 0 : -ENOMEM;
}

int proto_claim_body(const struct proto_claim_req *rq, char **ret)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	cJSON *tags;

	if (!o || !cJSON_AddStringToObject(o, "claim_id", rq->claim_id) ||
	    !cJSON_AddStringToObject(o, "worker_id", rq->worker_id) ||
	    !add_int(o, "max_runs", rq->max_runs) || !add_int(o, "lease_ttl_s", rq->lease_ttl_s) ||
	    !add_int(o, "wait_s", rq->wait_s))
		return -ENOMEM;
	if (rq->workflows) {
		cJSON *w = strv_to_json(rq->workflows);

		if (!w || !cJSON_AddItemToObject(o, "workflows", w)) {
			cJSON_Delete(w);
			return -ENOMEM;
		}
	}
	tags = strv_to_json(rq->tags);
	if (!tags || !cJSON_AddItemToObject(o, "tags", tags)) {
		cJSON_Delete(tags);
		return -ENOMEM;
	}
	if (rq->send_held && held_to_json(o, rq->held, rq->n_held) < 0)
		return -ENOMEM;
	return json_finish(o, ret);
}

/* A whole non-negative integer within [lo, hi] (hi at most UINT_MAX: a
 * queue_depth of 66666666660 is not one, fuzz/regress/answers). */
static bool json_uint(const cJSON *j, double lo, double hi, unsigned *ret)
{
	double d;

	if (!cJSON_IsNumber(j))
		return false;
	d = j->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < lo || d > hi || d > (double)UINT_MAX)
		return false;
	*ret = (unsigned)d;
	return true;
}

static const char *json_str(const cJSON *o, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(j) ? j->valuestring : NULL;
}

#define SMALL_VALUE_MAX (16u << 10)

enum run_key { K_ID, K_WORKFLOW, K_ATTEMPT, K_LEASE, K_TIMEOUT, K_INPUT, K_N };
static const char *const run_keys[K_N] = {"id",    "workflow",  "attempt",
                                          "lease", "timeout_s", "input"};

/* Where the members of one run we read are, in the answer's text. */
struct run_text {
	struct json_span v[K_N]; /* the first of each */
	unsigned dups;           /* 1 << key: given more than once */
	bool input_bad_utf8;
};

static int set_invalid(struct proto_run *r, const char *why)
{
	if (!r->invalid)
		r->invalid = strdup(why);
	return r->invalid ? 0 : -ENOMEM;
}

static int parse_lease(const cJSON *item, struct proto_run *r)
{
	const cJSON *lease = cJSON_GetObjectItemCaseSensitive(item, "lease");
	const char *token = json_str(lease, "token");

	/* sent back in a header and in every claim's "held": an identifier only */
	if (!cJSON_IsObject(lease) || !v1_valid_token(token))
		return set_invalid(r, "lease.token missing or invalid");
	if (!(r->token = strdup(token)))
		return -ENOMEM;
	if (!json_uint(cJSON_GetObjectItemCaseSensitive(lease, "ttl_s"), 1, PROTO_TTL_MAX,
		       &r->ttl_s))
		return set_invalid(r, "lease.ttl_s missing or out of range");
	return 0;
}

/* The run's input: the server's bytes, checked before anything is copied. */
static int parse_input(const struct run_text *t, size_t max_input, struct proto_run *r)
{
	const struct json_span *in = &t->v[K_INPUT];

	if (in->p && in->len > max_input)
		return set_invalid(r, "input larger than the configured cap");
	if (t->input_bad_utf8)
		return set_invalid(r, "input is not valid UTF-8");
	r->input = in->p ? strndup(in->p, in->len) : strdup("null");
	if (!r->input)
		return -ENOMEM;
	r->input_len = in->p ? in->len : 4;
	return 0;
}

static int parse_run(const cJSON *item, const struct run_text *t, size_t max_input,
                     struct proto_run *r)
{
	const char *id = json_str(item, "id"), *wf = json_str(item, "workflow");
	const cJSON *t_s;
	int q;

	if (!cJSON_IsObject(item))
		return set_invalid(r, "run is not an object");
	if (t->dups & (1u << K_ID | 1u << K_LEASE))
		return set_invalid(r, "run has a duplicate \"id\" or \"lease\"");
	if (!proto_valid_id(id))
		return set_invalid(r, "run id missing or invalid");
	if (!(r->id = strdup(id)))
		return -ENOMEM;
	q = parse_lease(item, r);
	if (q < 0 || r->invalid)
		return q;
	r->usable_for_reject = true;
	if (t->dups)
		return set_invalid(r, "run has a duplicate key");
	if (!proto_valid_id(wf))
		return set_invalid(r, "workflow missing or invalid");
	if (!(r->workflow = strdup(wf)))
		return -ENOMEM;
	if (!json_uint(cJSON_GetObjectItemCaseSensitive(item, "attempt"), 1, 1e6, &r->attempt))
		return set_invalid(r, "attempt missing or out of range");
	t_s = cJSON_GetObjectItemCaseSensitive(item, "timeout_s");
	if (t_s && !cJSON_IsNull(t_s) && !json_uint(t_s, 1, 365.0 * 86400, &r->timeout_s))
		return set_invalid(r, "timeout_s out of range");
	return parse_input(t, max_input, r);
}

/* A small value (an id, the lease object, a number) decoded by cJSON; one too
 * big to be valid becomes `false`, which no check accepts. */
static cJSON *small_value(const struct json_span *v)
{
	return v->len <= SMALL_VALUE_MAX ? cJSON_ParseWithLength(v->p, v->len)
	                                 : cJSON_CreateFalse();
}

static const char *const lease_keys[] = {"token", "ttl_s"};

static int key_index(const struct json_span *key, const char *const *names, size_t n);

/* The lease object, `false` when it names its token or ttl_s twice. */
static cJSON *lease_value(const struct json_span *v)
{
	struct json_iter it;
	struct json_span key, val;
	bool bad = false, seen[ELEMENTSOF(lease_keys)] = {false};
	int r, k;

	if (v->len > SMALL_VALUE_MAX || json_iter_open(&it, v->p, v->p + v->len, '{', 1) < 0)
		return small_value(v);
	while ((r = json_iter_next(&it, &key, &bad)) > 0 && json_iter_value(&it, &val, &bad) >= 0) {
		k = key_index(&key, lease_keys, ELEMENTSOF(lease_keys));
		if (k >= 0 && seen[k])
			return cJSON_CreateFalse();
		if (k >= 0)
			seen[k] = true;
	}
	return small_value(v);
}

/* The member name as written (quotes included), decoded; NULL when it cannot
 * be one we read. */
static const char *key_name(const struct json_span *key, char *buf, size_t size)
{
	_cleanup_json_ cJSON *k = NULL;

	if (key->len - 2 < size && !memchr(key->p, '\\', key->len)) {
		memcpy(buf, key->p + 1, key->len - 2);
		buf[key->len - 2] = '\0';
		return buf;
	}
	if (key->len > 256 || !(k = cJSON_ParseWithLength(key->p, key->len)) ||
	    !cJSON_IsString(k) || strlen(k->valuestring) >= size)
		return NULL;
	return strcpy(buf, k->valuestring);
}

static int key_index(const struct json_span *key, const char *const *names, size_t n)
{
	char buf[32]; /* the longest key we read, "cancel_requested", and more */
	const char *k = key_name(key, buf, sizeof(buf));

	for (size_t i = 0; k && i < n; i++)
		if (streq(k, names[i]))
			return (int)i;
	return -1;
}

static int add_small(cJSON *o, const char *key, cJSON *v)
{
	if (v && cJSON_AddItemToObject(o, key, v))
		return 0;
	cJSON_Delete(v);
	return -ENOMEM;
}

/* The members of one run we read, found without decoding the others; the
 * small ones decoded into *ret_item (NULL when the run is not an object). */
static int scan_run(struct json_iter *runs, struct run_text *t, cJSON **ret_item)
{
	struct json_iter it;
	struct json_span key, val;
	bool bad = false;
	int r, k;

	*t = (struct run_text){0};
	*ret_item = NULL;
	if (json_iter_open(&it, runs->p, runs->end, '{', runs->depth + 1) < 0)
		return json_iter_value(runs, &val, &bad);
	if (!(*ret_item = cJSON_CreateObject()))
		return -ENOMEM;
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		bad = false;
		k = key_index(&key, run_keys, K_N);
		r = json_iter_value(&it, &val, &bad);
		if (r < 0)
			break;
		if (k < 0)
			continue;
		if (t->v[k].p) {
			t->dups |= 1u << k;
			continue;
		}
		t->v[k] = val;
		if (k == K_INPUT)
			t->input_bad_utf8 = bad;
		else if (add_small(*ret_item, run_keys[k],
		                   k == K_LEASE ? lease_value(&val) : small_value(&val)) < 0)
			return -ENOMEM;
	}
	runs->p = it.p;
	return r;
}

struct claim_scan {
	struct proto_claim_resp *ret;
	size_t max_input;
	bool have_runs;
	const char *error; /* what is wrong, when more than the syntax */
	const char *at;    /* where the scan stopped */
};

static int scan_runs(struct json_iter *top, struct claim_scan *cs)
{
	struct proto_claim_resp *ret = cs->ret;
	struct json_iter it;
	struct json_span none;
	bool bad = false;
	int r;

	if (cs->have_runs) {
		cs->error = "claim response has \"runs\" twice";
		return -EBADMSG;
	}
	cs->have_runs = true;
	if (json_iter_open(&it, top->p, top->end, '[', top->depth + 1) < 0) {
		cs->error = "claim response is not {\"runs\": [...]}";
		return -EBADMSG;
	}
	ret->runs = calloc(PROTO_MAX_RUNS + 1, sizeof(struct proto_run));
	if (!ret->runs)
		return -ENOMEM;
	while ((r = json_iter_next(&it, &none, &bad)) > 0) {
		_cleanup_json_ cJSON *item = NULL;
		struct run_text t;

		if (ret->n_runs == PROTO_MAX_RUNS) {
			cs->error = "claim response has more runs than the protocol allows";
			return -EBADMSG;
		}
		r = scan_run(&it, &t, &item);
		if (r < 0) {
			top->p = it.p;
			return r;
		}
		r = parse_run(item, &t, cs->max_input, &ret->runs[ret->n_runs++]);
		if (r < 0)
			return r;
	}
	top->p = it.p;
	return r;
}

/* "cancel_requested": an array of run ids; anything else in it is skipped (a
 * hostile id never reaches the run table), a non-array is as if absent. */
static int scan_cancels(const struct json_span *v, struct proto_claim_resp *ret)
{
	_cleanup_json_ cJSON *a = v->len <= PROTO_CLAIM_ENVELOPE
	                              ? cJSON_ParseWithLength(v->p, v->len)
	                              : NULL;
	const cJSON *e;

	if (ret->has_cancels || !cJSON_IsArray(a))
		return 0;
	ret->cancels = calloc(1, sizeof(char *));
	if (!ret->cancels)
		return -ENOMEM;
	ret->has_cancels = true;
	cJSON_ArrayForEach(e, a)
	{
		if (!cJSON_IsString(e) || !proto_valid_id(e->valuestring))
			continue;
		if (strv_extend(&ret->cancels, e->valuestring) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int scan_claim(const char *body, size_t len, struct claim_scan *cs)
{
	static const char *const top_keys[] = {"runs", "queue_depth", "cancel_requested"};
	const char *end = body + len;
	struct json_iter it;
	struct json_span key, val;
	bool bad = false, have_depth = false;
	int r;

	if (json_iter_open(&it, body, end, '{', 1) < 0) {
		cs->error = "claim response is not {\"runs\": [...]}";
		return -EBADMSG;
	}
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		int k = key_index(&key, top_keys, ELEMENTSOF(top_keys));

		if (k == 0) {
			r = scan_runs(&it, cs);
		} else {
			r = json_iter_value(&it, &val, &bad);
			if (r >= 0 && k == 1 && !have_depth) {
				_cleanup_json_ cJSON *qd = small_value(&val);
				unsigned depth;

				have_depth = true;
				if (json_uint(qd, 0, 1e12, &depth))
					cs->ret->queue_depth = depth;
			} else if (r >= 0 && k == 2)
				r = scan_cancels(&val, cs->ret);
		}
		if (r < 0)
			break;
	}
	cs->at = it.p;
	if (r < 0)
		return r;
	if (json_scan_ws(it.p, end) != end)
		return -EBADMSG;
	if (!cs->have_runs) {
		cs->error = "claim response is not {\"runs\": [...]}";
		return -EBADMSG;
	}
	return 0;
}

size_t proto_claim_max_response(unsigned max_runs, size_t max_input)
{
	size_t per_run = max_input + PROTO_RUN_OVERHEAD;

	if (per_run < max_input ||
	    (max_runs && per_run > (SIZE_MAX - PROTO_CLAIM_ENVELOPE) / max_runs))
		return SIZE_MAX;
	return per_run * max_runs + PROTO_CLAIM_ENVELOPE;
}

size_t proto_renew_batch_max_response(size_t n)
{
	return 4096 + n * PROTO_RENEWED_MAX; /* n <= V1_RENEW_MAX: no overflow */
}

int proto_claim_parse(const char *body, size_t len, size_t max_input, struct proto_claim_resp *ret,
                      char **ret_error)
{
	struct claim_scan cs = {.ret = ret, .max_input = max_input};
	int r;

	*ret = (struct proto_claim_resp){.queue_depth = -1};
	r = scan_claim(body ? body : "", body ? len : 0, &cs);
	if (r >= 0)
		return 0;
	proto_claim_resp_done(ret);
	if (r == -EBADMSG) {
		if (cs.error)
			*ret_error = strdup(cs.error);
		else if (asprintf(ret_error,
		                  "claim response is not valid JSON (at byte %zu of %zu)",
		                  cs.at ? (size_t)(cs.at - body) : 0, len) < 0)
			*ret_error = NULL;
	}
	return r;
}

void proto_run_done(struct proto_run *r)
{
	free(r->id);
	free(r->workflow);
	free(r->token);
	free(r->input);
	free(r->invalid);
	*r = (struct proto_run){0};
}

void proto_claim_resp_done(struct proto_claim_resp *r)
{
	for (size_t i = 0; i < r->n_runs; i++)
		proto_run_done(&r->runs[i]);
	free(r->runs);
	strv_free(r->cancels);
	*r = (struct proto_claim_resp){.queue_depth = -1};
}

int proto_lease_body(const char *token, unsigned ttl_s, char **ret)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();

	if (!o || !cJSON_AddStringToObject(o, "token", token) || !add_int(o, "ttl_s", ttl_s))
		return -ENOMEM;
	return json_finish(o, ret);
}

int proto_lease_parse(const char *body, size_t len, unsigned *ret_ttl_s, bool *ret_cancel)
{
	_cleanup_json_ cJSON *root = cJSON_ParseWithLength(body, len);
	const cJSON *cancel;
	unsigned ttl;

	if (!cJSON_IsObject(root) ||
	    !json_uint(cJSON_GetObjectItemCaseSensitive(root, "ttl_s"), 1, PROTO_TTL_MAX, &ttl))
		return -EBADMSG;
	cancel = cJSON_GetObjectItemCaseSensitive(root, "cancel_requested");
	if (cancel && !cJSON_IsBool(cancel) && !cJSON_IsNull(cancel))
		return -EBADMSG;
	*ret_ttl_s = ttl;
	*ret_cancel = cJSON_IsTrue(cancel);
	return 0;
}

int proto_renew_batch_body(const char *worker_id, unsigned ttl_s, const struct proto_held *leases,
                           size_t n, char **ret)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	cJSON *arr;

	if (!o || !cJSON_AddStringToObject(o, "worker_id", worker_id) ||
	    !add_int(o, "ttl_s", ttl_s) || !(arr = cJSON_AddArrayToObject(o, "leases")))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		cJSON *e = cJSON_CreateObject();

		if (!e || !cJSON_AddItemToArray(arr, e) ||
		    !cJSON_AddStringToObject(e, "id", leases[i].id) ||
		    !cJSON_AddStringToObject(e, "token", leases[i].token))
			return -ENOMEM;
	}
	return json_finish(o, ret);
}

/* One entry of a batch renewal's answer. */
static int renewed_parse(const cJSON *e, const char *id, struct proto_renewed *out)
{
	const char *got = json_str(e, "id"), *err = json_str(e, "error");
	const cJSON *cancel = cJSON_GetObjectItemCaseSensitive(e, "cancel_requested");

	if (!got || !streq(got, id))
		return -EBADMSG;
	*out = (struct proto_renewed){0};
	if (err) {
		out->lost = streq(err, "lease_lost") || streq(err, "not_found");
		return out->lost ? 0 : -EBADMSG;
	}
	if (!json_uint(cJSON_GetObjectItemCaseSensitive(e, "ttl_s"), 1, PROTO_TTL_MAX,
	               &out->ttl_s) ||
	    (cancel && !cJSON_IsBool(cancel) && !cJSON_IsNull(cancel)))
		return -EBADMSG;
	out->cancel = cJSON_IsTrue(cancel);
	return 0;
}

int proto_renew_batch_parse(const char *body, size_t len, const struct proto_held *asked, size_t n,
                            struct proto_renewed *out)
{
	_cleanup_json_ cJSON *root = cJSON_ParseWithLength(body, len);
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "leases"), *e;
	size_t i = 0;

	if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n)
		return -EBADMSG;
	cJSON_ArrayForEach(e, arr)
	{
		if (renewed_parse(e, asked[i].id, &out[i]) < 0)
			return -EBADMSG;
		i++;
	}
	return 0;
}

const char *proto_status_name(enum proto_status s)
{
	return v1_status_name((enum v1_status)s);
}

const char *proto_reason_name(enum proto_reason r)
{
	return v1_reason_name((enum v1_reason)r);
}

const char *proto_release_reason_name(enum proto_release_reason r)
{
	return v1_release_reason_name((enum v1_release_reason)r);
}

/* s[0..len) as a JSON string, escaped as cJSON escapes: '"', '\\', the five
 * control characters JSON has a letter for, the others as \u00XX; every
 * other byte (UTF-8 included) as it is. */
static int buf_json_string(struct buf *b, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef", ctl[] = "\b\f\n\r\t";
	int q = buf_append(b, "\"", 1);
	size_t i = 0;

	while (q >= 0 && i < len) {
		size_t plain = i;
		const char *letter;
		unsigned char c;

		while (plain < len && (unsigned char)s[plain] >= 0x20 && s[plain] != '"' &&
		       s[plain] != '\\')
			plain++;
		q = buf_append(b, s + i, plain - i);
		if (q < 0 || plain == len)
			break;
		c = (unsigned char)s[plain];
		if ((letter = strchr(ctl, c)))
			q = buf_append(b, (const char[]){'\\', "bfnrt"[letter - ctl]}, 2);
		else if (c == '"' || c == '\\')
			q = buf_append(b, (const char[]){'\\', (char)c}, 2);
		else
			q = buf_append(
			    b, (const char[]){'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}, 6);
		i = plain + 1;
	}
	return q < 0 ? q : buf_append(b, "\"", 1);
}

/* ,"key": (keys are ours: nothing to escape) */
static int buf_json_key(struct buf *b, const char *key)
{
	int q = buf_appends(b, ",\"");

	if (q >= 0)
		q = buf_appends(b, key);
	return q < 0 ? q : buf_appends(b, "\":");
}

static int buf_json_member(struct buf *b, const char *key, const char *s)
{
	int q = buf_json_key(b, key);

	if (q >= 0)
		q = s ? buf_json_string(b, s, strlen(s)) : buf_appends(b, "null");
	return q;
}

/* A number member, or null (no printf: buf_printf formats twice). */
static int buf_json_int(struct buf *b, const char *key, bool has, int64_t v)
{
	char num[24], *p = num + sizeof(num);
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	int q = buf_json_key(b, key);

	if (q < 0 || !has)
		return q < 0 ? q : buf_appends(b, "null");
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	return buf_append(b, p, (size_t)(num + sizeof(num) - p));
}

/* output is JSON text we validated when reading the result file: printed
 * again as cJSON reads it, so nothing after its value goes along. */
static int buf_output(struct buf *b, const char *output)
{
	_cleanup_json_ cJSON *j = output ? cJSON_Parse(output) : NULL;
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;
	int q;

	if (j && !s)
		return -ENOMEM;
	q = buf_appends(b, s ? s : "null");
	free(s);
	return q;
}

/* Written out, not through cJSON: this is on every run's path, and a cJSON
 * tree of eleven members costs some 13,000 instructions to build, print and
 * free.  The members, in this order, are what proto_complete_parse's callers
 * and body_set_uint (log_length) expect. */
int proto_complete_body(const char *token, const struct proto_outcome *oc, char **ret)
{
	_cleanup_(buf_done) struct buf b = BUF_INIT(0);
	int q;

	q = buf_appends(&b, "{\"token\":");
	if (q >= 0)
		q = buf_json_string(&b, token, strlen(token));
	if (q >= 0)
		q = buf_json_member(&b, "status", proto_status_name(oc->status));
	if (q >= 0)
		q = buf_json_member(&b, "reason", proto_reason_name(oc->reason));
	if (q >= 0)
		q = buf_json_int(&b, "exit_code", oc->has_exit_code, oc->exit_code);
	if (q >= 0)
		q = buf_json_member(&b, "signal", oc->signal);
	if (q >= 0)
		q = buf_appends(&b, oc->retryable ? ",\"retryable\":true" : ",\"retryable\":false");
	if (q >= 0)
		q = buf_json_int(&b, "duration_ms", true, (int64_t)oc->duration_ms);
	if (q >= 0)
		q = buf_json_int(&b, "log_length", true, (int64_t)oc->log_length);
	if (q >= 0)
		q = buf_json_key(&b, "error");
	if (q >= 0)
		q = oc->error ? buf_json_string(&b, oc->error, v1_error_text_len(oc->error))
		              : buf_appends(&b, "null");
	if (q >= 0)
		q = buf_json_key(&b, "output");
	if (q >= 0)
		q = buf_output(&b, oc->output);
	if (q >= 0)
		q = buf_appends(&b, "}");
	if (q < 0)
		return q;
	*ret = buf_steal(&b);
	return *ret ? 0 : -ENOMEM;
}

/* The answer's members: run_status (a small string) and next (a claim's
 * answer, left to proto_claim_parse); each at most once. */
static int complete_members(const char *body, size_t len, struct json_span *status,
                            struct json_span *next)
{
	struct json_iter it;
	struct json_span key, val;
	bool bad = false;
	int r;

	*status = *next = (struct json_span){0};
	if (json_iter_open(&it, body, body + len, '{', 1) < 0)
		return -EBADMSG;
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		static const char *const names[] = {"run_status", "next"};
		int k = key_index(&key, names, ELEMENTSOF(names));
		struct json_span *want = k == 0 ? status : k == 1 ? next : NULL;

		if (json_iter_value(&it, &val, &bad) < 0 || (want && want->p))
			return -EBADMSG;
		if (want)
			*want = val;
	}
	if (r < 0 || json_scan_ws(it.p, body + len) != body + len)
		return -EBADMSG;
	return 0;
}

int proto_complete_parse(const char *body, size_t len, char *ret_status, size_t status_len,
                         struct json_span *ret_next)
{
	struct json_span st, next;
	_cleanup_json_ cJSON *s = NULL;

	if (complete_members(body, len, &st, &next) < 0 || !st.p || st.len > SMALL_VALUE_MAX)
		return -EBADMSG;
	s = cJSON_ParseWithLength(st.p, st.len);
	if (!cJSON_IsString(s) || !proto_valid_id(s->valuestring))
		return -EBADMSG;
	snprintf(ret_status, status_len, "%s", s->valuestring);
	if (ret_next)
		*ret_next = next;
	return 0;
}

int proto_complete_splice(const char *body, const char *claim_body, char **ret)
{
	size_t n = strlen(body);

	/* a completion body is one object made by proto_complete_body */
	if (n < 2 || body[n - 1] != '}')
		return -EINVAL;
	if (asprintf(ret, "%.*s,\"next\":%s}", (int)(n - 1), body, claim_body) < 0)
		return -ENOMEM;
	return 0;
}

int proto_complete_batch_body(char *const *ids, char *const *bodies, size_t n, char **ret)
{
	size_t len = sizeof("{\"completions\":[]}");
	char *out, *p;

	for (size_t i = 0; i < n; i++) {
		/* each body is one object of proto_complete_body's, never empty */
		if (bodies[i][0] != '{' || bodies[i][1] == '}' || !proto_valid_id(ids[i]))
			return -EINVAL;
		len += strlen(ids[i]) + strlen(bodies[i]) + sizeof("{\"id\":\"\",},");
	}
	out = p = malloc(len);
	if (!out)
		return -ENOMEM;
	p = stpcpy(p, "{\"completions\":[");
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s{\"id\":\"%s\",%s", i ? "," : "", ids[i], bodies[i] + 1);
	strcpy(p, "]}");
	*ret = out;
	return 0;
}

/* One entry of a batch completion's answer: its id must be the one asked;
 * "error" makes it the single completion's 409 or 404. */
static int completed_parse(const struct json_span *entry, const char *id, long *ret_status)
{
	static const char *const names[] = {"id", "error"};
	struct json_span key, val, got[2] = {{0}};
	struct json_iter it;
	bool bad = false;
	int r;

	if (json_iter_open(&it, entry->p, entry->p + entry->len, '{', 2) < 0)
		return -EBADMSG;
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		int k = key_index(&key, names, ELEMENTSOF(names));

		if (json_iter_value(&it, &val, &bad) < 0 || (k >= 0 && got[k].p))
			return -EBADMSG;
		if (k >= 0)
			got[k] = val;
	}
	_cleanup_json_ cJSON *i = got[0].p ? small_value(&got[0]) : NULL;
	_cleanup_json_ cJSON *e = got[1].p ? small_value(&got[1]) : NULL;

	if (r < 0 || !cJSON_IsString(i) || !streq(i->valuestring, id))
		return -EBADMSG;
	if (!e || cJSON_IsNull(e)) /* null is absent */
		*ret_status = 200;
	else if (cJSON_IsString(e) && streq(e->valuestring, "lease_lost"))
		*ret_status = 409;
	else if (cJSON_IsString(e) && streq(e->valuestring, "not_found"))
		*ret_status = 404;
	else
		return -EBADMSG;
	return 0;
}

int proto_complete_batch_parse(const char *body, size_t len, char *const *ids, size_t n,
                               struct proto_completed *out)
{
	struct json_iter it, arr;
	struct json_span key, val;
	size_t k = 0;
	bool bad = false, seen = false;
	int r;

	if (json_iter_open(&it, body, body + len, '{', 1) < 0)
		return -EBADMSG;
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		static const char *const names[] = {"completions"};

		if (key_index(&key, names, 1) != 0) {
			if (json_iter_value(&it, &val, &bad) < 0)
				return -EBADMSG;
			continue;
		}
		if (seen || json_iter_open(&arr, it.p, it.end, '[', 2) < 0)
			return -EBADMSG;
		seen = true;
		while ((r = json_iter_next(&arr, &key, &bad)) > 0) {
			if (k == n || json_iter_value(&arr, &val, &bad) < 0 ||
			    completed_parse(&val, ids[k], &out[k].status) < 0)
				return -EBADMSG;
			out[k++].entry = val;
		}
		if (r < 0)
			return -EBADMSG;
		it.p = arr.p;
	}
	if (r < 0 || !seen || k != n || json_scan_ws(it.p, body + len) != body + len)
		return -EBADMSG;
	return 0;
}

int proto_claim_error(const char *body, size_t len, char *ret_code, size_t code_len)
{
	_cleanup_json_ cJSON *root = cJSON_ParseWithLength(body, len);
	const char *code = json_str(root, "error");

	if (!code)
		return 0;
	snprintf(ret_code, code_len, "%s", code);
	return 1;
}

int proto_release_body(const char *token, enum proto_release_reason reason, unsigned delay_s,
		       char **ret)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();

	if (!o || !cJSON_AddStringToObject(o, "token", token) ||
	    !cJSON_AddStringToObject(o, "reason", proto_release_reason_name(reason)) ||
	    !add_int(o, "delay_s", delay_s))
		return -ENOMEM;
	return json_finish(o, ret);
}

int proto_log_length_parse(const char *body, size_t len, uint64_t *ret)
{
	_cleanup_json_ cJSON *root = cJSON_ParseWithLength(body, len);
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "length");
	double d;

	if (!cJSON_IsNumber(l))
		return -EBADMSG;
	d = l->valuedouble;
	if (!isfinite(d) || d < 0 || d != floor(d) || d > 9007199254740992.0)
		return -EBADMSG;
	*ret = (uint64_t)d;
	return 0;
}

const char *proto_error_code(const char *body, size_t len, char *buf, size_t buflen)
{
	_cleanup_json_ cJSON *root = body ? cJSON_ParseWithLength(body, len) : NULL;
	const char *e = json_str(root, "error");

	if (!e || !proto_valid_id(e))
		return NULL;
	snprintf(buf, buflen, "%s", e);
	return buf;
}

int proto_url(const char *base, const char *path_fmt, const char *id, char **ret)
{
	_cleanup_free_ char *path = NULL;

	if (id && !proto_valid_id(id))
		return -EINVAL;
	if (asprintf(&path, path_fmt, id ? id : "") < 0)
		return -ENOMEM;
	if (asprintf(ret, "%s%s", base, path) < 0)
		return -ENOMEM;
	return 0;
}
