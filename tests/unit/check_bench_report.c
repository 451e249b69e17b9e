/* scripts/bench_report.sh's two steps that need no benchmark run: bench/e2e's
 * printed table parsed into TSV rows (and refused loudly when its shape
 * changes), and the TSV rendered into docs/performance.md's generated parts
 * with the hand-written text around them kept; and that the whole script
 * parses. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

static char *dir;

static void setup(void)
{
	dir = tu_tmpdir("bench-report");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	rm_rf(dir);
	free(dir);
}

static void put(const char *name, const char *text)
{
	_cleanup_free_ char *path = tu_fmt("%s/%s", dir, name);

	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
}

static char *get(const char *name)
{
	_cleanup_free_ char *path = tu_fmt("%s/%s", dir, name);
	char *text = NULL;

	ck_assert_int_ge(read_file_capped(path, 1 << 20, &text, NULL), 0);
	return text;
}

/* The script with args, from the source tree; its exit status. */
static int script(const char *args)
{
	const char *top = getenv("LESSEE_SRCDIR");
	_cleanup_free_ char *cmd = tu_fmt("'%s/scripts/bench_report.sh' %s 2>'%s/err'",
	                                  top && *top ? top : ".", args, dir);
	int st = system(cmd);

	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole script parses: the steps above return before sh reads its
 * later lines, where a quoting slip once hid until a full report run. */
START_TEST(test_script_parses)
{
	const char *top = getenv("LESSEE_SRCDIR");
	_cleanup_free_ char *cmd =
	    tu_fmt("sh -n '%s/scripts/bench_report.sh' 2>'%s/err'", top && *top ? top : ".", dir);
	int st = system(cmd);

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sh -n: %s", get("err"));
}
END_TEST

static const char e2e_out[] =
    "loop backend: io_uring; run directories on tmpfs (/dev/shm/x)\n"
    "end-to-end /bin/true runs through lessor + lessee (200 runs x 2 rounds, medians)\n"
    "slots  lessee run/s     cpu us/run  floor run/s   exec run/s   vs floor    vs exec "
    "lessor us/r\n"
    "1               270           1125          825          825      0.33x      0.33x         "
    "640\n"
    "16              877            400         1877         1979      0.47x      0.44x         "
    "320\n"
    "\n"
    "CPU a run (us, medians of the same rounds): lessee, and in this process the floor's "
    "posix_spawn, lib/exec's spawn and a run's files in /dev/shm/x\n"
    "slots    lessee  posix_spawn   lib/exec  run files  lessee rest\n"
    "1          1125           51         85         27         1013\n"
    "16          400           56         57         26          317\n"
    "\n"
    "daemon RSS: idle 11644 KiB; with 200 concurrent `sleep 30` runs 12220 KiB (2.9 KiB "
    "per run), 417 fds open\n";

START_TEST(test_parse_e2e)
{
	_cleanup_free_ char *args = tu_fmt("parse-e2e <'%s/e2e.txt' >'%s/e2e.tsv'", dir, dir);
	_cleanup_free_ char *tsv = NULL;

	put("e2e.txt", e2e_out);
	ck_assert_int_eq(script(args), 0);
	tsv = get("e2e.tsv");
	ck_assert_str_eq(tsv, "e2e\tlessee + lessor (normal)\t1\truns_per_s\t270\t825\t0.3273\n"
	                      "e2e\tlessee + lessor (normal)\t1\tcpu_us_per_run\t1125\t-\t-\n"
	                      "e2e\tlib/exec on the loop\t1\truns_per_s\t825\t825\t1.0000\n"
	                      "e2e\tlessee + lessor (normal)\t16\truns_per_s\t877\t1877\t0.4672\n"
	                      "e2e\tlessee + lessor (normal)\t16\tcpu_us_per_run\t400\t-\t-\n"
	                      "e2e\tlib/exec on the loop\t16\truns_per_s\t1979\t1877\t1.0543\n"
	                      "e2e\tposix_spawn floor\t1\tcpu_us_per_run\t51\t-\t-\n"
	                      "e2e\tlib/exec on the loop\t1\tcpu_us_per_run\t85\t-\t-\n"
	                      "e2e\ta run's files\t1\tcpu_us_per_run\t27\t-\t-\n"
	                      "e2e\tposix_spawn floor\t16\tcpu_us_per_run\t56\t-\t-\n"
	                      "e2e\tlib/exec on the loop\t16\tcpu_us_per_run\t57\t-\t-\n"
	                      "e2e\ta run's files\t16\tcpu_us_per_run\t26\t-\t-\n"
	                      "e2e\tlessee + lessor (normal)\t0\trss_kib\t11644\t-\t-\n"
	                      "e2e\tlessee + lessor (normal)\t200\trss_kib\t12220\t-\t-\n");
}
END_TEST

/* A column more, or no table at all: an error, not silently fewer rows. */
START_TEST(test_parse_e2e_refuses_a_new_shape)
{
	_cleanup_free_ char *args = tu_fmt("parse-e2e <'%s/e2e.txt' >/dev/null", dir);
	_cleanup_free_ char *changed = strdup(e2e_out), *err = NULL;
	char *row = strstr(changed, "\n16 ");

	ck_assert_ptr_nonnull(row);
	memcpy(row + 1, "16 9", 4); /* a row with one field more */
	put("e2e.txt", changed);
	ck_assert_int_ne(script(args), 0);
	err = get("err");
	ck_assert_ptr_nonnull(strstr(err, "unexpected row in the throughput table"));
	free(err);
	free(changed);
	changed = strdup(e2e_out);
	row = strstr(changed, "\n16          400");
	ck_assert_ptr_nonnull(row);
	memcpy(row + 1, "16 9", 4); /* the CPU table's row with one field more */
	put("e2e.txt", changed);
	ck_assert_int_ne(script(args), 0);
	err = get("err");
	ck_assert_ptr_nonnull(strstr(err, "unexpected row in the CPU table"));
	put("e2e.txt", "slots run/s\n1 2\n");
	ck_assert_int_ne(script(args), 0);
}
END_TEST

START_TEST(test_render)
{
	_cleanup_free_ char *args = tu_fmt("render '%s' '%s/doc.md'", dir, dir);
	_cleanup_free_ char *doc = NULL, *again = NULL;

	put("all.tsv",
	    "bench\tsystem\tslots\tmetric\tmedian\tfloor\tratio\n"
	    "e2e\tlessee + lessor (normal)\t16\truns_per_s\t877\t1877\t0.4672\n"
	    "e2e\tlessee + lessor (normal)\t16\tcpu_us_per_run\t400\t-\t-\n"
	    "latency\tlessee + lessor (full)\t16\tpeak_rss_kib\t11776\t-\t-\n"
	    "conductor_peers\tConductor official JS client\t16\truns_per_s\t165\t2365\t0.0698\n"
	    "conductor_peers\tConductor official JS client\t16\tcpu_us_per_run\t5350\t-\t-\n"
	    "conductor_peers\tConductor official JS client\t16\tpeak_rss_kib\t110940\t-\t-\n");
	put("machine.tsv", "cores (nproc)\t2\n");
	put("params.tsv", "e2e 200 2 200\tRUNS ROUNDS\n");
	put("doc.md", "# Hand title\n<!-- generated:machine -->\nstale\n"
	              "<!-- end generated:machine -->\nprose\n<!-- generated:peers -->\n"
	              "<!-- end generated:peers -->\n<!-- generated:figures -->\n"
	              "<!-- end generated:figures -->\n<!-- generated:params -->\n"
	              "<!-- end generated:params -->\ntail\n");
	ck_assert_int_eq(script(args), 0);
	doc = get("doc.md");
	ck_assert_ptr_null(strstr(doc, "stale"));
	ck_assert_ptr_nonnull(strstr(doc, "# Hand title\n<!-- generated:machine -->\n"
	                                  "- cores (nproc): 2\n<!-- end generated:machine -->\n"
	                                  "prose\n"));
	ck_assert_ptr_nonnull(
	    strstr(doc, "| lessee + lessor (`--synchronous normal`), 16 slots ¹ | 0.47 | 400 µs "
	                "| 11.5 MiB |\n"));
	ck_assert_ptr_nonnull(
	    strstr(doc, "| Conductor official JS client ² | 0.07 | 5350 µs | 108.3 MiB |\n"));
	/* Not measured: a dash, not a zero. */
	ck_assert_ptr_nonnull(strstr(doc, "| lessee, Camunda 7 driver ³ | — | — | — |\n"));
	ck_assert_ptr_nonnull(strstr(doc, "| Conductor official JS client | 16 | runs_per_s | 165 "
	                                  "| 2365 | 0.0698 |\n"));
	ck_assert_ptr_nonnull(strstr(doc, "- `e2e 200 2 200`: RUNS ROUNDS\n"));
	ck_assert_ptr_nonnull(strstr(doc, "<!-- end generated:params -->\ntail\n"));
	/* Rendering again changes nothing. */
	ck_assert_int_eq(script(args), 0);
	again = get("doc.md");
	ck_assert_str_eq(again, doc);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_report");
	TCase *tc = tcase_create("script");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_parse_e2e);
	tcase_add_test(tc, test_parse_e2e_refuses_a_new_shape);
	tcase_add_test(tc, test_render);
	tcase_add_test(tc, test_script_parses);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
