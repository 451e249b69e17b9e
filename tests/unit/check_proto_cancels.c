/* Cancel events on the client side of the protocol (docs/protocol.md):
 * "held" in a claim body, "cancel_requested" in its answer, read as hostile. */
#include <cJSON.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"

START_TEST(test_held_in_body)
{
	struct proto_held h[] = {{"r-1", "tok1"}, {"r-2", "tok2"}};
	char *none[] = {NULL};
	struct proto_claim_req rq = {.claim_id = "c1",
	                             .worker_id = "w",
	                             .max_runs = 0,
	                             .lease_ttl_s = 60,
	                             .workflows = none,
	                             .tags = none,
	                             .send_held = true,
	                             .held = h,
	                             .n_held = 2};
	char *body = NULL;
	cJSON *j, *held;

	ck_assert_int_eq(proto_claim_body(&rq, &body), 0);
	j = cJSON_Parse(body);
	ck_assert_ptr_nonnull(j);
	held = cJSON_GetObjectItem(j, "held");
	ck_assert_int_eq(cJSON_GetArraySize(held), 2);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(held, 1), "id")->valuestring,
	                 "r-2");
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(held, 1), "token")->valuestring,
	                 "tok2");
	ck_assert_int_eq(cJSON_GetObjectItem(j, "max_runs")->valueint, 0);
	cJSON_Delete(j);
	free(body);

	/* not asked: no "held" at all (what an older worker sends) */
	rq.send_held = false;
	ck_assert_int_eq(proto_claim_body(&rq, &body), 0);
	ck_assert_ptr_null(strstr(body, "held"));
	free(body);

	/* asked with nothing held: an empty list, so the server says it supports it */
	rq.send_held = true;
	rq.n_held = 0;
	ck_assert_int_eq(proto_claim_body(&rq, &body), 0);
	ck_assert_ptr_nonnull(strstr(body, "\"held\":[]"));
	free(body);
}
END_TEST

static void parse(const char *text, struct proto_claim_resp *cr)
{
	char *err = NULL;

	ck_assert_msg(proto_claim_parse(text, strlen(text), 4096, cr, &err) == 0, "%s: %s", text,
	              err ? err : "?");
}

START_TEST(test_cancels_parsed)
{
	struct proto_claim_resp cr;

	parse("{\"runs\":[],\"queue_depth\":0}", &cr);
	ck_assert(!cr.has_cancels); /* an older server */
	ck_assert_ptr_null(cr.cancels);
	proto_claim_resp_done(&cr);

	parse("{\"runs\":[],\"cancel_requested\":[]}", &cr);
	ck_assert(cr.has_cancels);
	ck_assert_ptr_nonnull(cr.cancels);
	ck_assert_ptr_null(cr.cancels[0]);
	proto_claim_resp_done(&cr);

	/* hostile entries are skipped, valid ones kept; the second copy of the key is ignored */
	parse("{\"cancel_requested\":[\"r-1\",7,null,\"bad id\",{\"x\":1},\"r-2\"],\"runs\":[],"
	      "\"cancel_requested\":[\"r-9\"]}",
	      &cr);
	ck_assert(cr.has_cancels);
	ck_assert_uint_eq(strv_length(cr.cancels), 2);
	ck_assert_str_eq(cr.cancels[0], "r-1");
	ck_assert_str_eq(cr.cancels[1], "r-2");
	proto_claim_resp_done(&cr);

	/* not an array: as if absent */
	parse("{\"runs\":[],\"cancel_requested\":\"r-1\"}", &cr);
	ck_assert(!cr.has_cancels);
	proto_claim_resp_done(&cr);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto_cancels");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_held_in_body);
	tcase_add_test(tc, test_cancels_parsed);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
