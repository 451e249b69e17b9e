/* lib/proto: request bodies and hostile responses. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "testutil.h"

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

int main(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_claim_body);
	tcase_add_test(tc, test_claim_parse_ok);
	tcase_add_test(tc, test_claim_parse_hostile);
	tcase_add_test(tc, test_input_cap);
	tcase_add_test(tc, test_lease_and_complete);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
