/* lib/proto: request bodies and hostile responses. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/json_scan.h"
#include "proto/proto.h"
#include "testutil.h"
#include "util/macro.h"

#define PARSE(s, resp, err) proto_claim_parse((s), strlen(s), 1 << 20, (resp), (err))

START_TEST(test_claim_body)
{
	char *wf[] = {"build", NULL}, *tags[] = {"gpu", NULL}, *none[] = {NULL}, *s;
	struct proto_claim_req rq = {.claim_id = "c1", .worker_id = "w1", .max_runs = 4,
				     .lease_ttl_s = 90, .wait_s = 20, .workflows = wf, .tags = tags};
	cJSON *j;

	ck_assert_int_eq(proto_claim_body(&rq, &s), 0);
	j = cJSON_Parse(s);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "claim_id")->valuestring, "c1");
	ck_assert_int_eq(cJSON_GetObjectItem(j, "max_runs")->valueint, 4);
	ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "workflows"), 0)->valuestring,
			 "build");
	cJSON_Delete(j);
	free(s);
	/* omitted workflows = any; an empty vector = none */
	rq.workflows = NULL;
	ck_assert_int_eq(proto_claim_body(&rq, &s), 0);
	ck_assert_ptr_null(strstr(s, "workflows"));
	free(s);
	rq.workflows = none;
	ck_assert_int_eq(proto_claim_body(&rq, &s), 0);
	ck_assert_ptr_nonnull(strstr(s, "\"workflows\":[]"));
	free(s);
}
END_TEST

START_TEST(test_claim_parse_ok)
{
	struct proto_claim_resp resp;
	char *err = NULL;
	const char *body =
		"{\"runs\":[{\"id\":\"r-81\",\"workflow\":\"build\",\"attempt\":2,"
		"\"lease\":{\"token\":\"tok\",\"ttl_s\":90},\"input\":{\"a\":[1,2]},"
		"\"timeout_s\":600,\"tags\":[\"gpu\"],\"future_field\":1}],\"queue_depth\":12}";

	ck_assert_int_eq(PARSE(body, &resp, &err), 0);
	ck_assert_uint_eq(resp.n_runs, 1);
	ck_assert_ptr_null(resp.runs[0].invalid);
	ck_assert_str_eq(resp.runs[0].id, "r-81");
	ck_assert_str_eq(resp.runs[0].token, "tok");
	ck_assert_uint_eq(resp.runs[0].attempt, 2);
	ck_assert_uint_eq(resp.runs[0].timeout_s, 600);
	ck_assert_str_eq(resp.runs[0].input, "{\"a\":[1,2]}");
	ck_assert_int_eq(resp.queue_depth, 12);
	proto_claim_resp_done(&resp);
}
END_TEST

START_TEST(test_claim_parse_hostile)
{
	static const char *const malformed[] = {
		"", "null", "[]", "{\"runs\":{}}", "{\"runs\":[", "{\"runs\":\"x\"}",
	};
	static const struct {
		const char *body;
		bool usable;
	} bad_runs[] = {
		{"{\"runs\":[{\"id\":\"has space\",\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}", false},
		{"{\"runs\":[{\"id\":\"r1\",\"lease\":{\"ttl_s\":9}}]}", false},
		{"{\"runs\":[{\"id\":\"r1\",\"lease\":{\"token\":\"t\",\"ttl_s\":0}}]}", false},
		{"{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1.5,"
		 "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}", true},
		{"{\"runs\":[{\"id\":\"r1\",\"workflow\":\"a/b\",\"attempt\":1,"
		 "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}", true},
		{"{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,\"timeout_s\":-1,"
		 "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}", true},
		{"{\"runs\":[7]}", false},
	};
	struct proto_claim_resp resp;
	char *err;

	for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
		err = NULL;
		ck_assert_int_eq(PARSE(malformed[i], &resp, &err), -EBADMSG);
		ck_assert_ptr_nonnull(err);
		free(err);
	}
	for (size_t i = 0; i < sizeof(bad_runs) / sizeof(bad_runs[0]); i++) {
		err = NULL;
		ck_assert_int_eq(PARSE(bad_runs[i].body, &resp, &err), 0);
		ck_assert_uint_eq(resp.n_runs, 1);
		ck_assert_msg(resp.runs[0].invalid, "accepted %s", bad_runs[i].body);
		ck_assert_int_eq(resp.runs[0].usable_for_reject, bad_runs[i].usable);
		proto_claim_resp_done(&resp);
	}
}
END_TEST

START_TEST(test_input_cap)
{
	struct proto_claim_resp resp;
	char *err = NULL;
	const char *body = "{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,"
			   "\"lease\":{\"token\":\"t\",\"ttl_s\":9},\"input\":\"0123456789\"}]}";

	ck_assert_int_eq(proto_claim_parse(body, strlen(body), 8, &resp, &err), 0);
	ck_assert_ptr_nonnull(resp.runs[0].invalid);
	ck_assert(resp.runs[0].usable_for_reject);
	proto_claim_resp_done(&resp);
}
END_TEST

START_TEST(test_lease_and_complete)
{
	unsigned ttl;
	bool cancel;
	uint64_t len;
	char *s, code[64];
	struct proto_outcome oc = {.status = PROTO_FAILED, .reason = PROTO_REASON_CRASH,
				   .signal = "SIGSEGV", .retryable = true, .duration_ms = 12,
				   .log_length = 5, .output = "{\"x\":1}"};
	cJSON *j;

	ck_assert_int_eq(proto_lease_parse("{\"ttl_s\":90,\"cancel_requested\":true}", 36, &ttl,
					   &cancel), 0);
	ck_assert_uint_eq(ttl, 90);
	ck_assert(cancel);
	ck_assert_int_eq(proto_lease_parse("{\"ttl_s\":\"90\"}", 14, &ttl, &cancel), -EBADMSG);
	ck_assert_int_eq(proto_log_length_parse("{\"length\":77}", 13, &len), 0);
	ck_assert_uint_eq(len, 77);
	ck_assert_int_eq(proto_log_length_parse("{\"length\":-1}", 13, &len), -EBADMSG);
	ck_assert_str_eq(proto_error_code("{\"error\":\"lease_lost\"}", 22, code, sizeof(code)),
			 "lease_lost");
	ck_assert_ptr_null(proto_error_code("<html>", 6, code, sizeof(code)));

	ck_assert_int_eq(proto_complete_body("tok", &oc, &s), 0);
	j = cJSON_Parse(s);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "exit_code")));
	ck_assert_str_eq(cJSON_GetObjectItem(j, "reason")->valuestring, "crash");
	ck_assert_str_eq(cJSON_GetObjectItem(j, "signal")->valuestring, "SIGSEGV");
	ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "output"), "x")->valueint, 1);
	cJSON_Delete(j);
	free(s);
}
END_TEST

/* The v1 vocabulary as docs/protocol.md states it ("Conventions"); lessor
 * answers the same inputs the same way (check_lessor_http, test_vocabulary). */
START_TEST(test_vocabulary)
{
	char id128[129], id129[130], tag64[65], tag65[66];
	const struct {
		bool (*valid)(const char *);
		const char *s;
		bool want;
	} cases[] = {
	    {proto_valid_worker_id, "lessee-0192f0c8", true},
	    {proto_valid_worker_id, "host.example.org", true},
	    {proto_valid_worker_id, "host/slot-3", true}, /* the documented examples */
	    {proto_valid_worker_id, "ci@host", true},
	    {proto_valid_worker_id, "ci@host/slot:2", true},
	    {proto_valid_worker_id, id128, true},
	    {proto_valid_worker_id, id129, false},
	    {proto_valid_worker_id, "", false},
	    {proto_valid_worker_id, "has space", false},
	    {proto_valid_worker_id, "a?b", false},
	    {proto_valid_worker_id, "a%2Fb", false},
	    {proto_valid_worker_id, "h\xc3\xa9te", false},
	    {proto_valid_id, "r-81", true},
	    {proto_valid_id, id128, true},
	    {proto_valid_id, id129, false},
	    {proto_valid_id, "a/b", false},
	    {proto_valid_id, "a@b", false},
	    {proto_valid_tag, "region:eu", true},
	    {proto_valid_tag, "k=v/w", true},
	    {proto_valid_tag, tag64, true},
	    {proto_valid_tag, tag65, false},
	    {proto_valid_tag, "a@b", false},
	    {proto_valid_tag, "a*b", false},
	};

	memset(id128, 'i', 128), id128[128] = '\0';
	memset(id129, 'i', 129), id129[129] = '\0';
	memset(tag64, 't', 64), tag64[64] = '\0';
	memset(tag65, 't', 65), tag65[65] = '\0';
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(cases[i].valid(cases[i].s) == cases[i].want, "case %zu '%.20s': %s", i,
			      cases[i].s, cases[i].want ? "refused" : "accepted");
}
END_TEST

/* A lease token is an identifier (1..128 bytes of [A-Za-z0-9._:-]): the
 * client sends it back in the Lease-Token header and in every claim's "held",
 * where lessor refuses anything else with 400 (the whole claim). */
START_TEST(test_claim_token_is_an_identifier)
{
	char long_ok[129], long_bad[130];
	const struct {
		const char *token;
		bool want;
	} cases[] = {
	    {"3243071ead0f078340c26b8d3a70e57b", true},
	    {"tok:1.a_b-c", true},
	    {long_ok, true},
	    {long_bad, false},
	    {"a b", false},
	    {"a\\r\\nX-Injected: 1", false},
	    {"a/b", false},
	    {"eyJhbGciOiJIUzI1NiJ9+/=", false},
	};

	memset(long_ok, 'k', 128), long_ok[128] = '\0';
	memset(long_bad, 'k', 129), long_bad[129] = '\0';
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct proto_claim_resp resp;
		char *err = NULL, *body;

		ck_assert_int_ge(asprintf(&body,
					  "{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,"
					  "\"lease\":{\"token\":\"%s\",\"ttl_s\":9}}]}",
					  cases[i].token),
				 0);
		ck_assert_int_eq(PARSE(body, &resp, &err), 0);
		ck_assert_uint_eq(resp.n_runs, 1);
		ck_assert_msg((resp.runs[0].invalid == NULL) == cases[i].want, "case %zu: %s", i,
			      cases[i].want ? "refused" : "accepted");
		/* a run with a token we would not send back is dropped, not rejected */
		ck_assert_int_eq(resp.runs[0].usable_for_reject, cases[i].want);
		proto_claim_resp_done(&resp);
		free(body);
	}
}
END_TEST

/* "error" is at most 4096 bytes of UTF-8: a longer text is cut on a
 * character boundary, never inside one. */
START_TEST(test_error_text_cut_on_a_character)
{
	char error[4200], *s;
	struct proto_outcome oc = {.status = PROTO_FAILED, .reason = PROTO_REASON_EXIT,
				   .has_exit_code = true, .exit_code = 1};
	cJSON *j;
	const char *e;

	memset(error, 'a', 4095);
	strcpy(error + 4095, "\xc3\xa9 and more"); /* U+00E9 across the 4096th byte */
	oc.error = error;
	ck_assert_int_eq(proto_complete_body("tok", &oc, &s), 0);
	j = cJSON_Parse(s);
	e = cJSON_GetObjectItem(j, "error")->valuestring;
	ck_assert_uint_eq(strlen(e), 4095);
	ck_assert_uint_eq(strspn(e, "a"), 4095);
	cJSON_Delete(j);
	free(s);
	/* exactly 4096 bytes that end on a whole character are kept */
	strcpy(error + 4094, "\xc3\xa9");
	ck_assert_int_eq(proto_complete_body("tok", &oc, &s), 0);
	j = cJSON_Parse(s);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, error);
	cJSON_Delete(j);
	free(s);
}
END_TEST

/* The completion body is written by hand (it is on every run's path): it is
 * the text cJSON printed for the same members, byte for byte, whatever the
 * strings hold. */
static char *complete_body_by_cjson(const char *token, const struct proto_outcome *oc)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *out = oc->output ? cJSON_Parse(oc->output) : NULL;
	char cut[PROTO_ERROR_TEXT_MAX + 1], *s;

	cJSON_AddStringToObject(o, "token", token);
	cJSON_AddStringToObject(o, "status", proto_status_name(oc->status));
	cJSON_AddStringToObject(o, "reason", proto_reason_name(oc->reason));
	if (oc->has_exit_code)
		cJSON_AddNumberToObject(o, "exit_code", oc->exit_code);
	else
		cJSON_AddNullToObject(o, "exit_code");
	if (oc->signal)
		cJSON_AddStringToObject(o, "signal", oc->signal);
	else
		cJSON_AddNullToObject(o, "signal");
	cJSON_AddBoolToObject(o, "retryable", oc->retryable);
	cJSON_AddNumberToObject(o, "duration_ms", (double)oc->duration_ms);
	cJSON_AddNumberToObject(o, "log_length", (double)oc->log_length);
	if (oc->error) {
		snprintf(cut, sizeof(cut), "%.*s", (int)v1_error_text_len(oc->error), oc->error);
		cJSON_AddStringToObject(o, "error", cut);
	} else
		cJSON_AddNullToObject(o, "error");
	cJSON_AddItemToObject(o, "output", out ? out : cJSON_CreateNull());
	s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

START_TEST(test_complete_body_as_cjson)
{
	static const char *const texts[] = {"plain",
	                                    "",
	                                    "quote \" backslash \\ slash /",
	                                    "tab\tnl\ncr\rbs\bff\f",
	                                    "\x01\x1f\x7f del and \xc3\xa9 \xe2\x82\xac utf-8",
	                                    "\xff\xfe not utf-8"};
	static const char *const outputs[] = {NULL, "{\"x\":[1,2.5,\"a\\u0001\"]}", "7 trailing",
	                                      "\"s\"", "not json"};

	for (size_t i = 0; i < ELEMENTSOF(texts); i++)
		for (size_t k = 0; k < ELEMENTSOF(outputs); k++) {
			struct proto_outcome oc = {.status = i % 2 ? PROTO_FAILED : PROTO_SUCCEEDED,
			                           .reason = PROTO_REASON_EXIT,
			                           .has_exit_code = k % 2,
			                           .exit_code = (int)k - 2,
			                           .signal = i % 3 ? NULL : "SIGKILL",
			                           .retryable = k % 3 == 0,
			                           .error = k == 0 ? NULL : texts[i],
			                           .duration_ms = 123456789012ULL * i,
			                           .log_length = 4096 * k,
			                           .output = outputs[k]};
			char *want = complete_body_by_cjson(texts[i], &oc), *got = NULL;

			ck_assert_int_eq(proto_complete_body(texts[i], &oc, &got), 0);
			ck_assert_str_eq(got, want);
			free(got);
			free(want);
		}
}
END_TEST

/* A completion carrying a claim ("next"): the claim spliced into the body,
 * the answer's claim found by span, a member given twice refused. */
START_TEST(test_complete_next)
{
	static const char ans[] = "{\"run_status\":\"succeeded\",\"next\":{\"runs\":[],"
	                          "\"queue_depth\":0}}";
	struct json_span next;
	char status[32], code[32];
	char *s = NULL;
	cJSON *j;

	ck_assert_int_eq(proto_complete_splice("{\"token\":\"t\"}", "{\"max_runs\":1}", &s), 0);
	j = cJSON_Parse(s);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "token")->valuestring, "t");
	ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "next"), "max_runs")->valueint,
	                 1);
	cJSON_Delete(j);
	free(s);
	ck_assert_int_eq(proto_complete_splice("", "{}", &s), -EINVAL);

	ck_assert_int_eq(proto_complete_parse(ans, strlen(ans), status, sizeof(status), &next), 0);
	ck_assert_str_eq(status, "succeeded");
	ck_assert_ptr_nonnull(next.p);
	ck_assert_int_eq(strncmp(next.p, "{\"runs\":[]", 10), 0);
	ck_assert_int_eq(proto_claim_error(next.p, next.len, code, sizeof(code)), 0);
	/* an older server: no "next" */
	ck_assert_int_eq(
	    proto_complete_parse("{\"run_status\":\"failed\"}", 23, status, sizeof(status), &next),
	    0);
	ck_assert_ptr_null(next.p);
	/* given twice, or trailing bytes: unusable */
	ck_assert_int_lt(proto_complete_parse("{\"run_status\":\"failed\",\"next\":{},\"next\":{}}",
	                                      43, status, sizeof(status), &next),
	                 0);
	ck_assert_int_lt(proto_complete_parse("{\"run_status\":\"failed\"} x", 25, status,
	                                      sizeof(status), &next),
	                 0);
	ck_assert_int_eq(
	    proto_claim_error("{\"runs\":[],\"error\":\"internal\"}", 30, code, sizeof(code)), 1);
	ck_assert_str_eq(code, "internal");
}
END_TEST

/* proto/v1.h: every name maps to its enum and back, and nothing else does. */
#define CHECK_NAMES(name, from, list, n)                                                           \
	do {                                                                                       \
		for (int i_ = 0; i_ < (n); i_++) {                                                 \
			ck_assert_str_eq(name(i_), list[i_]);                                      \
			ck_assert_int_eq(from(list[i_]), i_);                                      \
		}                                                                                  \
		ck_assert_ptr_null(list[n]);                                                       \
		ck_assert_ptr_null(name(n));                                                       \
		ck_assert_int_eq(from("bogus"), -EINVAL);                                          \
		ck_assert_int_eq(from(NULL), -EINVAL);                                             \
	} while (0)

START_TEST(test_v1_names)
{
	CHECK_NAMES(v1_status_name, v1_status_from_name, v1_status_names, _V1_STATUS_N);
	CHECK_NAMES(v1_reason_name, v1_reason_from_name, v1_reason_names, _V1_REASON_N);
	CHECK_NAMES(v1_release_reason_name, v1_release_reason_from_name, v1_release_reason_names,
		    _V1_RELEASE_N);
	CHECK_NAMES(v1_run_status_name, v1_run_status_from_name, v1_run_status_names,
		    _V1_RUN_STATUS_N);
	/* the client's names are these */
	ck_assert_str_eq(proto_status_name(PROTO_CANCELLED), "cancelled");
	ck_assert_str_eq(proto_reason_name(PROTO_REASON_SPAWN_ERROR), "spawn_error");
	ck_assert_str_eq(proto_release_reason_name(PROTO_RELEASE_UNSUPPORTED_WORKFLOW),
			 "unsupported_workflow");
	ck_assert_uint_eq(v1_error_text_len(""), 0);
	ck_assert(v1_valid_signal("SIGRTMIN+3") && !v1_valid_signal("SIG 9"));
}
END_TEST

/* POST /v1/completions: each body with its run's id first; the answer's
 * entries, in order, each the status its single answer would have had. */
START_TEST(test_complete_batch)
{
	char *ids[] = {"r-1", "r-2", "r-3", NULL};
	char *bodies[] = {"{\"token\":\"t1\",\"status\":\"succeeded\"}",
	                  "{\"token\":\"t2\",\"status\":\"failed\",\"next\":{\"max_runs\":1}}",
	                  "{\"token\":\"t3\"}"};
	struct proto_completed got[3];
	const char *ans = "{\"completions\": [{\"id\":\"r-1\",\"run_status\":\"succeeded\"},"
	                  " {\"run_status\":\"retrying\",\"id\":\"r-2\",\"next\":{\"runs\":[]}},"
	                  " {\"id\":\"r-3\",\"error\":\"not_found\",\"message\":\"x\"}]}";
	char status[32];
	struct json_span next;
	char *body = NULL;

	ck_assert_int_eq(proto_complete_batch_body(ids, bodies, 3, &body), 0);
	ck_assert_str_eq(body, "{\"completions\":[{\"id\":\"r-1\",\"token\":\"t1\",\"status\":"
	                       "\"succeeded\"},{\"id\":\"r-2\",\"token\":\"t2\",\"status\":"
	                       "\"failed\",\"next\":{\"max_runs\":1}},{\"id\":\"r-3\",\"token\":"
	                       "\"t3\"}]}");
	free(body);
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 3, got), 0);
	ck_assert_int_eq(got[0].status, 200);
	ck_assert_int_eq(got[1].status, 200);
	ck_assert_int_eq(got[2].status, 404);
	ck_assert_int_eq(
	    proto_complete_parse(got[1].entry.p, got[1].entry.len, status, sizeof(status), &next),
	    0);
	ck_assert_str_eq(status, "retrying");
	ck_assert_int_eq(next.len, strlen("{\"runs\":[]}"));
	/* another order, a count that differs, an unknown error, garbage */
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids + 1, 2, got), -EBADMSG);
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 2, got), -EBADMSG);
	ans = "{\"completions\":[{\"id\":\"r-1\",\"error\":\"internal\"}]}";
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 1, got), -EBADMSG);
	ans = "{\"completions\":[{\"id\":\"r-1\",\"error\":\"lease_lost\"}]} x";
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 1, got), -EBADMSG);
	ans = "{\"completions\":[{\"id\":\"r-1\",\"error\":\"lease_lost\"}],\"x\":1}";
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 1, got), 0);
	ck_assert_int_eq(got[0].status, 409);
	/* a JSON null is absent (docs/protocol.md): a success, not garbage
	 * (which had the completion sent again and again) */
	ans = "{\"completions\":[{\"id\":\"r-1\",\"run_status\":\"succeeded\",\"error\":null,"
	      "\"message\":null}]}";
	ck_assert_int_eq(proto_complete_batch_parse(ans, strlen(ans), ids, 1, got), 0);
	ck_assert_int_eq(got[0].status, 200);
	/* a body that is not one object with members cannot take an id */
	bodies[0] = "{}";
	ck_assert_int_eq(proto_complete_batch_body(ids, bodies, 1, &body), -EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_claim_body);
	tcase_add_test(tc, test_claim_parse_ok);
	tcase_add_test(tc, test_claim_parse_hostile);
	tcase_add_test(tc, test_input_cap);
	tcase_add_test(tc, test_lease_and_complete);
	tcase_add_test(tc, test_complete_batch);
	tcase_add_test(tc, test_vocabulary);
	tcase_add_test(tc, test_claim_token_is_an_identifier);
	tcase_add_test(tc, test_error_text_cut_on_a_character);
	tcase_add_test(tc, test_complete_body_as_cjson);
	tcase_add_test(tc, test_v1_names);
	tcase_add_test(tc, test_complete_next);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
