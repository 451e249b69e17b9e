/* lessor's fault injection beyond one endpoint's next `count` requests, as the
 * chaos test (tests/chaos/chaos.c) uses it: "endpoint": "all" and "every". */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"

static struct tu_lessor *L;

static void setup(void)
{
	static char *const args[] = {"--enable-faults", NULL};

	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
}

static void teardown(void)
{
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
}

static long req(const char *method, const char *path, const char *body, cJSON **ret)
{
	long status = 0;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, ret), 0);
	return status;
}

static long claim(int n)
{
	char body[160];

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"c%d\",\"worker_id\":\"w\",\"max_runs\":1,\"lease_ttl_s\":30}", n);
	return req("POST", "/v1/claims", body, NULL);
}

START_TEST(test_all_endpoints)
{
	cJSON *armed = NULL;
	const char *const names[] = {"claims", "lease", "log", "complete", "release"};

	ck_assert_int_eq(req("POST", "/v1/admin/faults",
	                     "{\"endpoint\":\"all\",\"status\":503,\"count\":1}", &armed),
	                 200);
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		ck_assert_msg(cJSON_GetObjectItemCaseSensitive(armed, names[i]), "%s not armed",
		              names[i]);
	cJSON_Delete(armed);
	/* each endpoint has its own count: one 503, then the real answer */
	ck_assert_int_eq(claim(1), 503);
	ck_assert_int_eq(claim(2), 200);
	ck_assert_int_eq(req("POST", "/v1/runs/nope/lease", "{\"token\":\"t\",\"ttl_s\":5}", NULL),
	                 503);
	ck_assert_int_eq(req("POST", "/v1/runs/nope/lease", "{\"token\":\"t\",\"ttl_s\":5}", NULL),
	                 404);
	ck_assert_int_eq(
	    req("POST", "/v1/runs/nope/release", "{\"token\":\"t\",\"reason\":\"draining\"}", NULL),
	    503);
	ck_assert_int_eq(
	    req("POST", "/v1/runs/nope/release", "{\"token\":\"t\",\"reason\":\"draining\"}", NULL),
	    404);
}
END_TEST

START_TEST(test_every_nth)
{
	long want[] = {200, 200, 500, 200, 200, 500, 200, 200, 200};
	cJSON *armed = NULL, *every;

	ck_assert_int_eq(req("POST", "/v1/admin/faults",
	                     "{\"endpoint\":\"claims\",\"status\":500,\"count\":2,\"every\":3}",
	                     &armed),
	                 200);
	every = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(armed, "claims"),
	                                         "every");
	ck_assert_msg(cJSON_IsNumber(every) && every->valueint == 3, "every not shown");
	cJSON_Delete(armed);
	for (int i = 0; i < (int)ELEMENTSOF(want); i++)
		ck_assert_int_eq(claim(i), want[i]);
	/* the old form still means "each of the next count" */
	ck_assert_int_eq(
	    req("POST", "/v1/admin/faults", "{\"endpoint\":\"claims\",\"status\":502}", NULL), 200);
	ck_assert_int_eq(claim(100), 502);
	ck_assert_int_eq(claim(101), 200);
	ck_assert_int_eq(req("POST", "/v1/admin/faults",
	                     "{\"endpoint\":\"claims\",\"status\":502,\"every\":0}", NULL),
	                 400);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_faults");
	TCase *tc = tcase_create("faults");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_all_endpoints);
	tcase_add_test(tc, test_every_nth);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
