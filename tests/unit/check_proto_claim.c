/* proto_claim_parse on hostile claim answers: strict JSON, bounded nesting,
 * duplicate keys, bad UTF-8, and no tree built of the big parts (issue 10,
 * item 7).  The ordinary cases live in check_proto.c. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/proto.h"
#include "testutil.h"
#include "util/macro.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define MIB ((size_t)1 << 20)
#define RUN_HEAD                                                                                   \
	"{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,\"lease\":{\"token\":\"t\",\"ttl_s\":9}"

static int parse(const char *s, struct proto_claim_resp *resp)
{
	char *err = NULL;
	int r = proto_claim_parse(s, strlen(s), MIB, resp, &err);

	if (r < 0)
		ck_assert_msg(err && *err, "no error text for %s", s);
	free(err);
	return r;
}

/* One run that parses, with the invalid reason (or NULL) and usability. */
static void expect_run(const char *body, const char *invalid, bool usable)
{
	struct proto_claim_resp resp;

	ck_assert_msg(parse(body, &resp) == 0, "refused %s", body);
	ck_assert_uint_eq(resp.n_runs, 1);
	if (invalid) {
		ck_assert_msg(resp.runs[0].invalid, "accepted %s", body);
		ck_assert_msg(strstr(resp.runs[0].invalid, invalid), "%s: %s", body,
		              resp.runs[0].invalid);
		ck_assert_int_eq(resp.runs[0].usable_for_reject, usable);
	} else
		ck_assert_msg(!resp.runs[0].invalid, "%s: %s", body, resp.runs[0].invalid);
	proto_claim_resp_done(&resp);
}

static void expect_refused(const char *body)
{
	struct proto_claim_resp resp;

	ck_assert_msg(parse(body, &resp) == -EBADMSG, "accepted %s", body);
	ck_assert_uint_eq(resp.n_runs, 0);
}

/* The input the child gets: the server's bytes of the value, exactly. */
static void expect_input(const char *input, const char *want)
{
	struct proto_claim_resp resp;
	char body[4096];

	snprintf(body, sizeof(body), "{\"runs\":[" RUN_HEAD ",\"input\":%s}]}", input);
	ck_assert_msg(parse(body, &resp) == 0, "refused %s", body);
	ck_assert_msg(!resp.runs[0].invalid, "%s: %s", body, resp.runs[0].invalid);
	ck_assert_str_eq(resp.runs[0].input, want);
	ck_assert_uint_eq(resp.runs[0].input_len, strlen(want));
	proto_claim_resp_done(&resp);
}

START_TEST(test_existing_cases)
{
	static const char *const malformed[] = {
	    "", "null", "[]", "{\"runs\":{}}", "{\"runs\":[", "{\"runs\":\"x\"}",
	};
	struct proto_claim_resp resp;

	for (size_t i = 0; i < ELEMENTSOF(malformed); i++)
		expect_refused(malformed[i]);
	expect_run("{\"runs\":[{\"id\":\"has space\",\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "run id", false);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"lease\":{\"ttl_s\":9}}]}", "lease.token", false);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"lease\":{\"token\":\"t\",\"ttl_s\":0}}]}",
	           "lease.ttl_s", false);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1.5,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "attempt", true);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"a/b\",\"attempt\":1,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "workflow", true);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,\"timeout_s\":-1,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "timeout_s", true);
	expect_run("{\"runs\":[7]}", "not an object", false);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"0123456789abcdef\"}]}", NULL, false);

	ck_assert_int_eq(parse("{\"runs\":[{\"id\":\"r-81\",\"workflow\":\"build\",\"attempt\":2,"
	                       "\"lease\":{\"token\":\"tok\",\"ttl_s\":90},\"input\":{\"a\":[1,2]},"
	                       "\"timeout_s\":600,\"tags\":[\"gpu\"],\"future_field\":1}],"
	                       "\"queue_depth\":12}",
	                       &resp),
	                 0);
	ck_assert_str_eq(resp.runs[0].id, "r-81");
	ck_assert_str_eq(resp.runs[0].workflow, "build");
	ck_assert_str_eq(resp.runs[0].token, "tok");
	ck_assert_uint_eq(resp.runs[0].attempt, 2);
	ck_assert_uint_eq(resp.runs[0].ttl_s, 90);
	ck_assert_uint_eq(resp.runs[0].timeout_s, 600);
	ck_assert_str_eq(resp.runs[0].input, "{\"a\":[1,2]}");
	ck_assert_int_eq(resp.queue_depth, 12);
	proto_claim_resp_done(&resp);

	/* no input: the child gets null; escapes in the small fields are decoded */
	ck_assert_int_eq(parse("{\"runs\":[{\"\\u0069d\":\"r\\u002d1\",\"workflow\":\"w\","
	                       "\"attempt\":1,\"lease\":{\"token\":\"t\\u002dx\",\"ttl_s\":9}}]}",
	                       &resp),
	                 0);
	ck_assert_ptr_null(resp.runs[0].invalid);
	ck_assert_str_eq(resp.runs[0].id, "r-1");
	ck_assert_str_eq(resp.runs[0].token, "t-x");
	ck_assert_str_eq(resp.runs[0].input, "null");
	ck_assert_int_eq(resp.queue_depth, -1);
	proto_claim_resp_done(&resp);
}
END_TEST

/* The cap counts the input's bytes as sent: at the cap is fine, one more not. */
START_TEST(test_input_cap_edge)
{
	static const char body[] = "{\"runs\":[" RUN_HEAD ",\"input\": \"0123456789abcdef\" }]}";
	struct proto_claim_resp resp;
	char *err = NULL;

	ck_assert_int_eq(proto_claim_parse(body, strlen(body), 18, &resp, &err), 0);
	ck_assert_ptr_null(resp.runs[0].invalid);
	ck_assert_str_eq(resp.runs[0].input, "\"0123456789abcdef\"");
	proto_claim_resp_done(&resp);
	ck_assert_int_eq(proto_claim_parse(body, strlen(body), 17, &resp, &err), 0);
	ck_assert_str_eq(resp.runs[0].invalid, "input larger than the configured cap");
	ck_assert(resp.runs[0].usable_for_reject);
	ck_assert_str_eq(resp.runs[0].token, "t");
	proto_claim_resp_done(&resp);
}
END_TEST

START_TEST(test_strict_json)
{
	static const char *const bad[] = {
	    "{\"runs\":[]}x",         /* trailing garbage */
	    "{\"runs\":[]} {}",       /* a second document */
	    "{\"runs\":[],}",         /* trailing comma */
	    "{\"runs\":[,]}",         /* missing value */
	    "{\"runs\":[] \"a\":1}",  /* missing comma */
	    "{\"runs\" []}",          /* missing colon */
	    "{runs:[]}",              /* unquoted key */
	    "{\"runs\":[],\"x\":01}", /* leading zero */
	    "{\"runs\":[],\"x\":1.}",
	    "{\"runs\":[],\"x\":.5}",
	    "{\"runs\":[],\"x\":+1}",
	    "{\"runs\":[],\"x\":1e}",
	    "{\"runs\":[],\"x\":-}",
	    "{\"runs\":[],\"x\":NaN}",
	    "{\"runs\":[],\"x\":tru}",
	    "{\"runs\":[],\"x\":\"a\tb\"}", /* raw control character */
	    "{\"runs\":[],\"x\":\"\\x\"}",  /* unknown escape */
	    "{\"runs\":[],\"x\":\"\\u12G4\"}",
	    "{\"runs\":[],\"x\":\"open}",
	    "{\"runs\":[],\"runs\":[]}", /* which one? */
	    "\xef\xbb\xbf{\"runs\":[]}", /* a BOM is not JSON */
	};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++)
		expect_refused(bad[i]);
	/* whitespace is fine anywhere it is allowed */
	expect_run(" \r\n\t{ \"runs\" : [ " RUN_HEAD " , \"input\" : [ 1 , 2 ] } ] } \n", NULL,
	           false);
}
END_TEST

START_TEST(test_nesting)
{
	enum { DEEP = 100000 };
	char *s = malloc(2 * DEEP + 64), *p = s;

	/* 997 levels in the input + 3 of the answer: cJSON's own limit, accepted */
	p += sprintf(p, "{\"runs\":[" RUN_HEAD ",\"input\":");
	memset(p, '[', 997);
	memset(p + 997, ']', 997);
	strcpy(p + 2 * 997, "}]}");
	expect_run(s, NULL, false);
	/* one more is refused; so are 100000 (the stack stays flat) */
	p = s + sprintf(s, "{\"runs\":[" RUN_HEAD ",\"input\":");
	memset(p, '[', 998);
	memset(p + 998, ']', 998);
	strcpy(p + 2 * 998, "}]}");
	expect_refused(s);
	p = s + sprintf(s, "{\"runs\":[],\"x\":");
	memset(p, '[', DEEP);
	memset(p + DEEP, ']', DEEP);
	strcpy(p + 2 * DEEP, "}");
	expect_refused(s);
	p = s + sprintf(s, "{\"runs\":[],\"x\":");
	for (int i = 0; i < DEEP / 8; i++)
		p += sprintf(p, "{\"a\":");
	strcpy(p, "1");
	expect_refused(s);
	free(s);
}
END_TEST

START_TEST(test_duplicate_keys)
{
	/* the id or the lease twice: nothing to reject it with */
	expect_run("{\"runs\":[{\"id\":\"r1\",\"id\":\"r2\",\"workflow\":\"w\",\"attempt\":1,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "duplicate", false);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9},\"\\u006cease\":{\"token\":\"u\","
	           "\"ttl_s\":9}}]}",
	           "duplicate", false);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,"
	           "\"lease\":{\"token\":\"t\",\"token\":\"u\",\"ttl_s\":9}}]}",
	           "lease.token", false);
	/* anything else twice: rejected with its lease */
	expect_run("{\"runs\":[" RUN_HEAD ",\"attempt\":2}]}", "duplicate", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":1,\"input\":2}]}", "duplicate", true);
	/* keys we do not read may repeat */
	expect_run("{\"runs\":[" RUN_HEAD ",\"tags\":[],\"tags\":[]}],\"other\":1,\"other\":2}",
	           NULL, false);
}
END_TEST

START_TEST(test_unicode)
{
	/* valid UTF-8 and escapes pass through as the server wrote them */
	expect_input("\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\ud83d\\ude00 \\u00e9\"",
	             "\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\ud83d\\ude00 \\u00e9\"");
	/* broken UTF-8 or UTF-16 in the input: that run is rejected, not the answer */
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"\xff\"}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"\xc0\x80\"}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"\xed\xa0\x80\"}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"\xf4\x90\x80\x80\"}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":\"\xe2\x82\"}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":[\"\\udc00\"]}]}", "UTF-8", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"input\":{\"\\ud800x\":1}}]}", "UTF-8", true);
}
END_TEST

START_TEST(test_numbers)
{
	struct proto_claim_resp resp;

	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1e400,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "attempt", true);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":4294967297,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}]}",
	           "attempt", true);
	expect_run("{\"runs\":[{\"id\":\"r1\",\"workflow\":\"w\",\"attempt\":1,"
	           "\"lease\":{\"token\":\"t\",\"ttl_s\":3601}}]}",
	           "ttl_s", false);
	expect_run("{\"runs\":[" RUN_HEAD ",\"timeout_s\":1e10}]}", "timeout_s", true);
	expect_run("{\"runs\":[" RUN_HEAD ",\"timeout_s\":null}]}", NULL, false);
	/* numbers of the input keep the server's digits (no double round trip) */
	expect_input("12345678901234567890123", "12345678901234567890123");
	expect_input("[1.0e2, -0.5E-3 ,0]", "[1.0e2, -0.5E-3 ,0]");
	ck_assert_int_eq(parse("{\"runs\":[],\"queue_depth\":1e13}", &resp), 0);
	ck_assert_int_eq(resp.queue_depth, -1);
	proto_claim_resp_done(&resp);
	ck_assert_int_eq(parse("{\"queue_depth\":3,\"runs\":[]}", &resp), 0);
	ck_assert_int_eq(resp.queue_depth, 3);
	proto_claim_resp_done(&resp);
}
END_TEST

START_TEST(test_runs_count)
{
	char *s = malloc(PROTO_MAX_RUNS * 128 + 64), *p;
	struct proto_claim_resp resp;

	for (int n = PROTO_MAX_RUNS; n <= PROTO_MAX_RUNS + 1; n++) {
		p = s + sprintf(s, "{\"runs\":[");
		for (int i = 0; i < n; i++)
			p += sprintf(p,
			             "%s{\"id\":\"r%d\",\"workflow\":\"w\",\"attempt\":1,"
			             "\"lease\":{\"token\":\"t\",\"ttl_s\":9}}",
			             i ? "," : "", i);
		strcpy(p, "]}");
		if (n == PROTO_MAX_RUNS) {
			ck_assert_int_eq(parse(s, &resp), 0);
			ck_assert_uint_eq(resp.n_runs, PROTO_MAX_RUNS);
			ck_assert_str_eq(resp.runs[PROTO_MAX_RUNS - 1].id, "r255");
			proto_claim_resp_done(&resp);
		} else
			expect_refused(s);
	}
	free(s);
}
END_TEST

/* Peak RSS of this process, in bytes, since the last reset_hwm(). */
static size_t vm_hwm(void)
{
	char line[256];
	size_t kib = 0;
	FILE *f = fopen("/proc/self/status", "re");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %zu kB", &kib) == 1)
			break;
	fclose(f);
	return kib * 1024;
}

static bool reset_hwm(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "we");
	bool ok = f && fputs("5", f) >= 0;

	if (f && fclose(f) != 0)
		ok = false;
	return ok;
}

/* 32 MB of [0,0,...] (cJSON: 16M nodes, 1 GB), in an input over the cap and in
 * a key nobody reads: parsed with no allocation worth measuring. */
START_TEST(test_no_tree)
{
	enum { SIZE = 32 * 1000 * 1000 };
	char *s = malloc(SIZE + 256), *p;
	struct proto_claim_resp resp;
	size_t base;
	char *err = NULL;

	ck_assert_ptr_nonnull(s);
	p = s + sprintf(s, "{\"runs\":[" RUN_HEAD ",\"input\":[");
	while (p - s < SIZE / 2) {
		*p++ = '0';
		*p++ = ',';
	}
	p += sprintf(p, "0]}],\"x\":[");
	while (p - s < SIZE) {
		*p++ = '0';
		*p++ = ',';
	}
	strcpy(p, "0]}");
	if (SANITIZED || tu_wrapped() || !reset_hwm()) {
		/* RSS means nothing here: check the answer only */
		base = SIZE_MAX / 2;
	} else
		base = vm_hwm();
	ck_assert_int_eq(proto_claim_parse(s, strlen(s), MIB, &resp, &err), 0);
	ck_assert_ptr_nonnull(resp.runs[0].invalid);
	ck_assert(strstr(resp.runs[0].invalid, "input larger"));
	ck_assert(resp.runs[0].usable_for_reject);
	ck_assert_msg(vm_hwm() <= base + 2 * MIB, "peak RSS grew by %zu bytes", vm_hwm() - base);
	proto_claim_resp_done(&resp);
	free(s);
}
END_TEST

/* Random byte edits of a valid answer: whatever they make, the parse ends in
 * an answer or -EBADMSG, reads nothing outside the body (ASan/valgrind
 * builds check that) and hands out inputs that are themselves one value. */
START_TEST(test_mutations)
{
	static const char seed[] =
	    "{\"runs\":[{\"id\":\"r-1\",\"workflow\":\"w\",\"attempt\":1,\"lease\":{\"token\":"
	    "\"t\",\"ttl_s\":9},\"input\":{\"a\":[1,-2.5e3,true,null,\"\\u00e9\\n\xc3\xa9\"]},"
	    "\"timeout_s\":60,\"tags\":[\"x\"]},7],\"queue_depth\":3}";
	static const char alphabet[] = "{}[]\",:\\ 0-eE.tfnu\x80\xc3\xff";
	uint64_t x = 0x9e3779b97f4a7c15u;
	char buf[sizeof(seed) + 8];
	unsigned ok = 0, refused = 0, invalid = 0;

	for (int i = 0; i < 200000; i++) {
		struct proto_claim_resp resp;
		char *err = NULL;
		size_t len = sizeof(seed) - 1;
		int r;

		memcpy(buf, seed, len);
		for (int k = 0; k < 1 + i % 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[x % len] = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
		}
		if (i % 7 == 0)
			len = (size_t)(x >> 40) % len; /* truncated too */
		r = proto_claim_parse(buf, len, 64, &resp, &err);
		ck_assert_msg(r == 0 || r == -EBADMSG, "%d", r);
		ck_assert(r == 0 || err);
		free(err);
		ok += r == 0;
		refused += r < 0;
		invalid += r == 0 && resp.n_runs > 0 && resp.runs[0].invalid;
		for (size_t j = 0; r == 0 && j < resp.n_runs; j++)
			if (resp.runs[j].input) {
				struct proto_claim_resp again;
				char body[256];

				snprintf(body, sizeof(body), "{\"runs\":[],\"x\":%s}",
				         resp.runs[j].input);
				ck_assert_int_eq(parse(body, &again), 0);
				proto_claim_resp_done(&again);
			}
		if (r == 0)
			proto_claim_resp_done(&resp);
	}
	/* the edits reach every outcome */
	ck_assert_msg(ok > 10000 && refused > 10000 && invalid > 1000,
	              "ok %u refused %u invalid %u", ok, refused, invalid);
}
END_TEST

START_TEST(test_max_response)
{
	size_t one = proto_claim_max_response(1, MIB);

	/* one input at the cap plus its run's other fields fits; the whole grows
	 * with max_runs and does not overflow */
	ck_assert_uint_gt(one, MIB + 4096);
	ck_assert_uint_lt(one, MIB + MIB / 4);
	ck_assert_uint_ge(proto_claim_max_response(256, 64 * MIB), (size_t)256 * 64 * MIB);
	ck_assert_uint_eq(proto_claim_max_response(3, MIB) - proto_claim_max_response(2, MIB),
	                  proto_claim_max_response(2, MIB) - one);
	ck_assert_uint_eq(proto_claim_max_response(2, SIZE_MAX / 2), SIZE_MAX);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto_claim");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_existing_cases);
	tcase_add_test(tc, test_input_cap_edge);
	tcase_add_test(tc, test_strict_json);
	tcase_add_test(tc, test_nesting);
	tcase_add_test(tc, test_duplicate_keys);
	tcase_add_test(tc, test_unicode);
	tcase_add_test(tc, test_numbers);
	tcase_add_test(tc, test_runs_count);
	tcase_add_test(tc, test_no_tree);
	tcase_add_test(tc, test_mutations);
	tcase_add_test(tc, test_max_response);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
