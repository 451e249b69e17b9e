/* A claim answer's size is capped from max_runs x worker.max_input_bytes, and
 * parsing it never builds a tree of its big parts: a hostile answer costs the
 * daemon at most about the cap in memory (issue 10, item 7).  A test_httpd
 * plays the API with canned answers; a real lessor serves the valid big one. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "proto/proto.h"
#include "test_httpd.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define MIB ((size_t)1 << 20)
#define HOSTILE_SIZE ((size_t)60 * 1000 * 1000)
#define DEFAULT_MAX_INPUT (4 * MIB)

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

static struct tu_lessor *L;
static struct tu_lessee *D;
static struct test_httpd *H;
static char *files; /* the canned answers of H */

/* RSS figures mean nothing under valgrind or a sanitizer's allocator. */
static bool rss_meaningful(void)
{
	return !SANITIZED && !tu_wrapped();
}

/* VmHWM (peak RSS) of a process, in bytes. */
static size_t vm_hwm(pid_t pid)
{
	char path[64], line[256];
	size_t kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %zu kB", &kib) == 1)
			break;
	fclose(f);
	ck_assert_uint_gt(kib, 0);
	return kib * 1024;
}

static void set_answer(const char *text, size_t len)
{
	_cleanup_free_ char *path = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/v1_claims", files), 0);
	ck_assert_int_eq(write_file_atomic(path, text, len, 0644), 0);
}

/* {"runs":[<one run whose input is [0,0,...]>],"x":[0,0,...]} of about size
 * bytes: cJSON makes one node (64 bytes) per element. */
static char *hostile_answer(size_t size, bool in_input, size_t *ret_len)
{
	static const char run[] = "{\"id\":\"r-1\",\"workflow\":\"w\",\"attempt\":1,"
	                          "\"lease\":{\"token\":\"t\",\"ttl_s\":60},\"input\":";
	char *s = malloc(size + 64), *p = s;

	ck_assert_ptr_nonnull(s);
	p += sprintf(p, "{\"runs\":[%s", in_input ? run : "");
	if (!in_input)
		p += sprintf(p, "],\"x\":");
	*p++ = '[';
	while ((size_t)(p - s) < size - 16) {
		*p++ = '0';
		*p++ = ',';
	}
	p += sprintf(p, "0]%s}", in_input ? "}]" : "");
	*ret_len = (size_t)(p - s);
	return s;
}

static double claims_counted(const char *result)
{
	long status = 0;
	_cleanup_free_ char *text = tu_lessee_status_get(D, "/metrics", &status);
	prom_doc_t *doc = NULL;
	double v;

	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(prom_parse(text, strlen(text), &doc, NULL), 0);
	v = prom_value(doc, "lessee_claims_total", "result", result, NULL);
	prom_free(doc);
	return isnan(v) ? 0 : v; /* never counted */
}

static void start_lessee(const char *api_url, const char *extra)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf,
	                          "[workflow.w]\ncommand = /bin/true\n"
	                          "[status]\nlisten = 127.0.0.1:0\n%s%s%s%s",
	                          api_url ? "[api]\nurl = " : "", api_url ? api_url : "",
	                          api_url ? "\n" : "", extra ? extra : ""),
	                 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static void setup(void)
{
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken"}, &L), 0);
	files = tu_tmpdir("claimcap");
	ck_assert_ptr_nonnull(files);
	ck_assert_int_eq(test_httpd_start(&(struct test_httpd_opts){.files_dir = files}, &H), 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	H = test_httpd_stop(H);
	if (files)
		rm_rf(files);
	free(files);
	files = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

/* A 60 MB answer to a claim for one run is refused as soon as it passes the
 * cap (about max_input_bytes): logged, counted, and the daemon's peak RSS grows
 * by no more than the cap and a few MiB.  Then an answer under the cap whose
 * junk would explode a tree parser costs no more either. */
START_TEST(test_hostile_answer)
{
	_cleanup_free_ char *url = test_httpd_url(H, "%s", "");
	size_t cap = proto_claim_max_response(1, DEFAULT_MAX_INPUT), len, base;
	_cleanup_free_ char *big = hostile_answer(HOSTILE_SIZE, true, &len);
	unsigned n;

	/* the daemon settles on empty answers first: that is the baseline */
	set_answer("{\"runs\":[]}", 11);
	start_lessee(url, "[worker]\nconcurrency = 1\n");
	n = test_httpd_requests(H);
	for (usec_t end = time_mono() + tu_timeout(10 * SEC);
	     test_httpd_requests(H) < n + 2 && time_mono() < end;)
		tu_sleep(20 * USEC_PER_MSEC);
	ck_assert_uint_ge(test_httpd_requests(H), n + 2);
	base = vm_hwm(tu_lessee_pid(D));

	set_answer(big, len);
	ck_assert_int_eq(tu_lessee_wait_log(D, "claim answer too large", tu_timeout(30 * SEC)), 0);
	ck_assert(tu_pid_alive(tu_lessee_pid(D)));
	ck_assert_double_ge(claims_counted("too_large"), 1);
	fprintf(stderr, "60 MB answer: peak RSS grew by %zu KiB, cap %zu KiB\n",
	        (vm_hwm(tu_lessee_pid(D)) - base) / 1024, cap / 1024);
	if (rss_meaningful())
		ck_assert_msg(vm_hwm(tu_lessee_pid(D)) <= base + cap + 4 * MIB,
		              "peak RSS grew by %zu bytes for a cap of %zu",
		              vm_hwm(tu_lessee_pid(D)) - base, cap);

	/* under the cap, but 2 bytes per array element: parsed, nothing built */
	free(big);
	big = hostile_answer(cap - 1024, false, &len);
	set_answer(big, len);
	n = (unsigned)claims_counted("empty");
	for (usec_t end = time_mono() + tu_timeout(20 * SEC);
	     claims_counted("empty") < n + 2 && time_mono() < end;)
		tu_sleep(50 * USEC_PER_MSEC);
	ck_assert_double_ge(claims_counted("empty"), n + 2);
	ck_assert(tu_pid_alive(tu_lessee_pid(D)));
	if (rss_meaningful())
		ck_assert_msg(vm_hwm(tu_lessee_pid(D)) <= base + cap + 4 * MIB,
		              "peak RSS grew by %zu bytes for a cap of %zu",
		              vm_hwm(tu_lessee_pid(D)) - base, cap);
}
END_TEST

/* max_runs runs, each with an input just under max_input_bytes, from a real
 * lessor in one claim answer: accepted, and each child gets its input
 * byte-exact on stdin and in $LESSEE_INPUT_FILE. */
START_TEST(test_valid_big_answer)
{
	static const char check_sh[] =
	    "#!/bin/sh\ncmp - \"$LESSEE_INPUT_FILE\" || exit 1\n"
	    "printf '{\"len\":%s}' $(wc -c < \"$LESSEE_INPUT_FILE\") > \"$LESSEE_RESULT_FILE\"\n";
	enum { RUNS = 3, INPUT = 256 * 1024 };
	_cleanup_free_ char *script = NULL, *extra = NULL, *body = NULL;
	char *ids[RUNS];

	ck_assert_int_ge(asprintf(&script, "%s/check.sh", files), 0);
	ck_assert_int_eq(write_file_atomic(script, check_sh, strlen(check_sh), 0755), 0);
	body = malloc(INPUT + 64);
	ck_assert_ptr_nonnull(body);
	for (int i = 0; i < RUNS; i++) {
		/* "input":"aaa...": INPUT bytes of JSON with its quotes */
		int k = sprintf(body, "{\"workflow\":\"big\",\"input\":\"");

		memset(body + k, 'a' + i, INPUT - 2);
		strcpy(body + k + INPUT - 2, "\"}");
		ids[i] = tu_lessor_enqueue(L, body);
		ck_assert_ptr_nonnull(ids[i]);
	}
	ck_assert_int_ge(asprintf(&extra,
	                          "[workflow.big]\ncommand = %s\n"
	                          "[worker]\nconcurrency = %d\nmax_input_bytes = %d\n",
	                          script, RUNS, INPUT),
	                 0);
	start_lessee(NULL, extra);
	for (int i = 0; i < RUNS; i++) {
		cJSON *run, *len;

		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(30 * SEC)), 0);
		run = tu_lessor_get_run(L, ids[i]);
		len = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "output"), "len");
		ck_assert(cJSON_IsNumber(len));
		ck_assert_int_eq(len->valueint, INPUT);
		cJSON_Delete(run);
		free(ids[i]);
	}
	ck_assert_double_eq(claims_counted("too_large"), 0);
	ck_assert_double_eq(claims_counted("invalid"), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("claimcap");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_hostile_answer);
	tcase_add_test(tc, test_valid_big_answer);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
