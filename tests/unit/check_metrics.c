/* lib/obs/metrics: what the registry renders is valid Prometheus text (as the
 * strict parser in tests/helpers/promparse judges it) and counts exactly what
 * was recorded.  The parser's own strictness is tested here too: a parser that
 * accepts anything would make every metrics test worthless. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/metrics.h"
#include "promparse.h"
#include "testutil.h"
#include "util/buf.h"

/* Render m, parse it strictly; the test fails with the parser's message. */
static prom_doc_t *render_parse(metrics_t *m)
{
	struct buf b = BUF_INIT(0);
	prom_doc_t *d = NULL;
	char *err = NULL;

	ck_assert_int_eq(metrics_render(m, &b), 0);
	ck_assert_msg(prom_parse(b.data ? b.data : "", b.len, &d, &err) == 0,
	              "rejected: %s\n---\n%s---", err, b.data ? b.data : "");
	buf_done(&b);
	return d;
}

static void assert_rejects(const char *text, const char *why_substring)
{
	prom_doc_t *d = NULL;
	char *err = NULL;

	ck_assert_msg(prom_parse(text, strlen(text), &d, &err) == -EINVAL, "accepted:\n%s", text);
	ck_assert_ptr_null(d);
	ck_assert_msg(err && strstr(err, why_substring), "error \"%s\" lacks \"%s\" for:\n%s", err,
	              why_substring, text);
	free(err);
}

static prom_doc_t *parse_ok(const char *text)
{
	prom_doc_t *d = NULL;
	char *err = NULL;

	ck_assert_msg(prom_parse(text, strlen(text), &d, &err) == 0, "rejected (%s):\n%s", err,
	              text);
	return d;
}

START_TEST(test_empty_registry)
{
	metrics_t *m = metrics_new();
	prom_doc_t *d;

	ck_assert_ptr_nonnull(m);
	d = render_parse(m);
	ck_assert_uint_eq(d->n_families, 0);
	prom_free(d);
	metrics_free(m);
	ck_assert_ptr_null(metrics_free(NULL));
}
END_TEST

START_TEST(test_counters_exact)
{
	metrics_t *m = metrics_new();
	metric_t *fin =
	    metrics_counter(m, "t_runs_finished_total", "Runs finished", "workflow,outcome");
	metric_t *lost = metrics_counter(m, "t_leases_lost_total", "Leases lost", NULL);
	const struct prom_family *f;
	prom_doc_t *d;

	for (int i = 0; i < 3; i++)
		metric_add(fin, 1, "build", "succeeded");
	metric_add(fin, 1, "build", "failed");
	metric_add(fin, 2, "deploy", "succeeded");
	metric_add(lost, 0);
	metric_add(lost, 1);
	ck_assert_double_eq(metric_get(fin, "build", "succeeded"), 3);
	ck_assert_double_eq(metric_get(fin, "nope", "succeeded"), 0);
	d = render_parse(m);
	f = prom_family(d, "t_runs_finished_total");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(f->type, PROM_COUNTER);
	ck_assert_str_eq(f->help, "Runs finished");
	ck_assert_uint_eq(f->n, 3);
	ck_assert_double_eq(prom_value(d, "t_runs_finished_total", "workflow", "build", "outcome",
	                               "succeeded", NULL),
	                    3);
	ck_assert_double_eq(
	    prom_value(d, "t_runs_finished_total", "outcome", "failed", "workflow", "build", NULL),
	    1);
	ck_assert_double_eq(prom_sum(d, "t_runs_finished_total", "workflow", "build", NULL), 4);
	ck_assert_double_eq(prom_sum(d, "t_runs_finished_total", "outcome", "succeeded", NULL), 5);
	ck_assert_uint_eq(prom_count(d, "t_runs_finished_total", NULL), 3);
	/* a partial label set is not an exact match */
	ck_assert(isnan(prom_value(d, "t_runs_finished_total", "workflow", "build", NULL)));
	ck_assert_ptr_null(
	    prom_find(d, "t_runs_finished_total", "workflow", "deploy", "outcome", "failed", NULL));
	ck_assert_double_eq(prom_value(d, "t_leases_lost_total", NULL), 1);
	prom_free(d);
	metrics_free(m);
}
END_TEST

START_TEST(test_gauges_set_add_reset)
{
	metrics_t *m = metrics_new();
	metric_t *g = metrics_gauge(m, "t_blocked", "Blocked", "workflow");
	metric_t *depth = metrics_gauge(m, "t_queue_depth", "Depth", NULL);
	prom_doc_t *d;

	metric_set(g, 1, "a");
	metric_set(g, 0, "b");
	metric_add(depth, 7);
	metric_add(depth, -10);
	d = render_parse(m);
	ck_assert_int_eq(prom_family(d, "t_blocked")->type, PROM_GAUGE);
	ck_assert_double_eq(prom_value(d, "t_blocked", "workflow", "a", NULL), 1);
	ck_assert_double_eq(prom_value(d, "t_blocked", "workflow", "b", NULL), 0);
	ck_assert_double_eq(prom_value(d, "t_queue_depth", NULL), -3);
	prom_free(d);
	metric_reset(g);
	metric_set(g, 1, "c");
	d = render_parse(m);
	ck_assert_uint_eq(prom_count(d, "t_blocked", NULL), 1);
	ck_assert_double_eq(prom_value(d, "t_blocked", "workflow", "c", NULL), 1);
	prom_free(d);
	metrics_free(m);
}
END_TEST

START_TEST(test_histogram_exact)
{
	static const double bounds[] = {0.1, 1, 10};
	static const double obs[] = {0.05, 0.1, 0.5, 5, 50};
	metrics_t *m = metrics_new();
	metric_t *h =
	    metrics_histogram(m, "t_duration_seconds", "Durations", "workflow", bounds, 3);
	const char *wf = "build";
	prom_doc_t *d;

	for (size_t i = 0; i < ELEMENTSOF(obs); i++)
		metric_observe(h, obs[i], wf);
	metric_observe(h, 2, "other");
	ck_assert_double_eq(metric_get(h, wf), 5);
	d = render_parse(m);
	ck_assert_int_eq(prom_family(d, "t_duration_seconds")->type, PROM_HISTOGRAM);
	/* le is inclusive: 0.1 falls in the 0.1 bucket */
	ck_assert_double_eq(
	    prom_value(d, "t_duration_seconds_bucket", "workflow", wf, "le", "0.1", NULL), 2);
	ck_assert_double_eq(
	    prom_value(d, "t_duration_seconds_bucket", "workflow", wf, "le", "1", NULL), 3);
	ck_assert_double_eq(
	    prom_value(d, "t_duration_seconds_bucket", "workflow", wf, "le", "10", NULL), 4);
	ck_assert_double_eq(
	    prom_value(d, "t_duration_seconds_bucket", "workflow", wf, "le", "+Inf", NULL), 5);
	ck_assert_double_eq(prom_value(d, "t_duration_seconds_count", "workflow", wf, NULL), 5);
	ck_assert_double_eq_tol(prom_value(d, "t_duration_seconds_sum", "workflow", wf, NULL),
	                        55.65, 1e-9);
	ck_assert_double_eq(
	    prom_value(d, "t_duration_seconds_bucket", "workflow", "other", "le", "1", NULL), 0);
	ck_assert_double_eq(prom_value(d, "t_duration_seconds_count", "workflow", "other", NULL),
	                    1);
	ck_assert_uint_eq(prom_count(d, "t_duration_seconds_bucket", "workflow", wf, NULL), 4);
	prom_free(d);
	metrics_free(m);
}
END_TEST

/* Label values are data from elsewhere: every byte must survive the trip. */
START_TEST(test_hostile_label_values)
{
	static const char *const values[] = {
	    "",
	    "\"",
	    "\\",
	    "\\\"",
	    "a\nb",
	    "} 1\nfake_metric 2\n",
	    "a=\"b\",c=\"d\"",
	    "\\n is not a newline",
	    "trailing backslash\\",
	    "ünïcødé ✓ 🚀",
	    "# HELP x y",
	    "\t tab \r cr",
	};
	metrics_t *m = metrics_new();
	metric_t *c = metrics_counter(m, "t_hostile_total", "Hostile \\ help\nsecond line", "v");
	struct buf big = BUF_INIT(0);
	prom_doc_t *d;

	for (int i = 0; i < 10000; i++)
		buf_appends(&big, i % 7 ? "x" : "\"\\\n");
	for (size_t i = 0; i < ELEMENTSOF(values); i++)
		metric_add(c, (double)(i + 1), values[i]);
	metric_add(c, 42, big.data);
	d = render_parse(m);
	ck_assert_str_eq(prom_family(d, "t_hostile_total")->help, "Hostile \\ help\nsecond line");
	ck_assert_uint_eq(prom_count(d, "t_hostile_total", NULL), ELEMENTSOF(values) + 1);
	ck_assert_ptr_null(prom_family(d, "fake_metric"));
	for (size_t i = 0; i < ELEMENTSOF(values); i++)
		ck_assert_msg(prom_value(d, "t_hostile_total", "v", values[i], NULL) ==
		                  (double)(i + 1),
		              "value %zu did not survive", i);
	ck_assert_double_eq(prom_value(d, "t_hostile_total", "v", big.data, NULL), 42);
	prom_free(d);
	buf_done(&big);
	metrics_free(m);
}
END_TEST

/* Bytes that are not UTF-8 would make Prometheus drop the whole scrape: they
 * become U+FFFD, and values that then read alike are one series. */
#define FFFD "\xef\xbf\xbd"
START_TEST(test_invalid_utf8_label)
{
	metrics_t *m = metrics_new();
	metric_t *c = metrics_counter(m, "t_bytes_total", "Bytes", "v");
	prom_doc_t *d;

	metric_add(c, 1, "ok\xff\xfe-\xc3");
	metric_add(c, 2, "\xed\xa0\x80"); /* a UTF-16 surrogate, encoded */
	metric_add(c, 4, "\xfe");
	metric_add(c, 8, "\xff");
	metric_add(c, 16, "\xc3\xa9t\xc3\xa9"); /* valid: untouched */
	ck_assert_double_eq(metric_get(c, "\xfe"), 12);
	d = render_parse(m);
	ck_assert_uint_eq(prom_count(d, "t_bytes_total", NULL), 4);
	ck_assert_double_eq(prom_value(d, "t_bytes_total", "v", "ok" FFFD FFFD "-" FFFD, NULL), 1);
	ck_assert_double_eq(prom_value(d, "t_bytes_total", "v", FFFD FFFD FFFD, NULL), 2);
	ck_assert_double_eq(prom_value(d, "t_bytes_total", "v", FFFD, NULL), 12);
	ck_assert_double_eq(prom_value(d, "t_bytes_total", "v", "\xc3\xa9t\xc3\xa9", NULL), 16);
	prom_free(d);
	metrics_free(m);
}
END_TEST

START_TEST(test_values_render)
{
	metrics_t *m = metrics_new();
	metric_t *g = metrics_gauge(m, "t_gauge", "G", "k");
	prom_doc_t *d;

	metric_set(g, INFINITY, "pinf");
	metric_set(g, -INFINITY, "ninf");
	metric_set(g, NAN, "nan");
	metric_set(g, 0.25, "frac");
	metric_set(g, 1e20, "big");
	metric_set(g, 123456789012345.0, "int");
	d = render_parse(m);
	ck_assert(isinf(prom_value(d, "t_gauge", "k", "pinf", NULL)));
	ck_assert(prom_value(d, "t_gauge", "k", "ninf", NULL) < 0);
	ck_assert(isnan(prom_find(d, "t_gauge", "k", "nan", NULL)->value));
	ck_assert_double_eq(prom_value(d, "t_gauge", "k", "frac", NULL), 0.25);
	ck_assert_double_eq(prom_value(d, "t_gauge", "k", "big", NULL), 1e20);
	ck_assert_double_eq(prom_value(d, "t_gauge", "k", "int", NULL), 123456789012345.0);
	prom_free(d);
	metrics_free(m);
}
END_TEST

/* A scrape cut at the caller's cap is an error, never a short success. */
START_TEST(test_render_over_cap)
{
	metrics_t *m = metrics_new();
	metric_t *c = metrics_counter(m, "t_total", "T", "k");
	struct buf full = BUF_INIT(0);
	char key[16];

	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		metric_add(c, 1, key);
	}
	ck_assert_int_eq(metrics_render(m, &full), 0);
	for (size_t cap = 1; cap < full.len; cap += full.len / 7) {
		struct buf b = BUF_INIT(cap);

		ck_assert_int_eq(metrics_render(m, &b), -E2BIG);
		buf_done(&b);
	}
	{
		struct buf b = BUF_INIT(full.len);

		ck_assert_int_eq(metrics_render(m, &b), 0);
		ck_assert_str_eq(b.data, full.data);
		buf_done(&b);
	}
	buf_done(&full);
	metrics_free(m);
}
END_TEST

/* ---- the parser itself --------------------------------------------------- */

START_TEST(test_parser_accepts)
{
	prom_doc_t *d = parse_ok("# a comment\n"
	                         "\n"
	                         "# HELP x_total Some \\\\ text\\n\n"
	                         "# TYPE x_total counter\n"
	                         "x_total{a=\"1\" , b=\"q\\\"\",} 3 1700000000000\n"
	                         "x_total 0\n"
	                         "  up\t1\n"
	                         "# TYPE s summary\n"
	                         "s{quantile=\"0.5\"} 1.5e-3\n"
	                         "s_sum 7\n"
	                         "s_count 2\n"
	                         "h_bucket{le=\"1\"} 0\n"
	                         "# TYPE g gauge\n"
	                         "g -Inf\n");

	ck_assert_uint_eq(d->n_families, 5);
	ck_assert_str_eq(prom_family(d, "x_total")->help, "Some \\ text\n");
	ck_assert_double_eq(prom_value(d, "x_total", "b", "q\"", "a", "1", NULL), 3);
	ck_assert(prom_find(d, "x_total", "a", "1", "b", "q\"", NULL)->has_timestamp);
	ck_assert_int_eq(prom_family(d, "up")->type, PROM_UNTYPED);
	ck_assert_str_eq(prom_label(prom_find(d, "s", "quantile", "0.5", NULL), "quantile"), "0.5");
	ck_assert_int_eq(prom_family(d, "h_bucket")->type, PROM_UNTYPED);
	prom_free(d);
	d = parse_ok("");
	ck_assert_uint_eq(d->n_families, 0);
	prom_free(d);
}
END_TEST

START_TEST(test_parser_rejects)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
	    {"x 1", "newline"},
	    {"x 1\nx 2\n", "repeats"},
	    {"x{a=\"1\"} 1\nx{a=\"1\"} 2\n", "repeats"},
	    {"x{a=\"1\",a=\"2\"} 1\n", "twice"},
	    {"x{__a=\"1\"} 1\n", "reserved"},
	    {"x{1a=\"1\"} 1\n", "label name"},
	    {"x{a=\"\\t\"} 1\n", "escape"},
	    {"x{a=\"unterminated} 1\n", "unterminated"},
	    {"x{a=1} 1\n", "'\"'"},
	    {"x{a=\"\xff\"} 1\n", "UTF-8"},
	    {"x{a=\"1\" b=\"2\"} 1\n", "','"},
	    {"1x 1\n", "metric name"},
	    {"x-y 1\n", "blank"},
	    {"x 1.2.3\n", "invalid value"},
	    {"x Inf\n", "invalid value"},
	    {"x nan\n", "invalid value"},
	    {"x 0x10\n", "invalid value"},
	    {"x 1e999\n", "invalid value"},
	    {"x\n", "blank"},
	    {"x 1 2 3\n", "after the timestamp"},
	    {"x 1 1.5\n", "timestamp"},
	    {"# HELP x a\\tb\n", "escape"},
	    {"# HELP x a\n# HELP x b\n", "second HELP"},
	    {"# TYPE x counter\n# TYPE x gauge\n", "second TYPE"},
	    {"# TYPE x countr\n", "unknown metric type"},
	    {"# TYPE x counter extra\n", "after the TYPE"},
	    {"x 1\n# TYPE x gauge\n", "after its samples"},
	    {"x 1\ny 1\nx{a=\"b\"} 1\n", "not together"},
	    {"# TYPE x counter\nx -1\n", "counter"},
	    {"# TYPE x counter\nx NaN\n", "counter"},
	    {"# TYPE h histogram\nh 1\n", "not together"},
	    {"# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n", "le belongs"},
	    {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum{le=\"1\"} 1\nh_count 1\n",
	     "le belongs"},
	    {"# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
	    {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", "!= _count"},
	    {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", "h_sum missing"},
	    {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n", "h_count missing"},
	    {"# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
	     "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
	     "after a bucket"},
	    {"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
	     "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
	     "not cumulative"},
	    {"# TYPE h histogram\nh_bucket{le=\"one\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\n"
	     "h_count 1\n",
	     "not a number"},
	    {"# TYPE h histogram\nh_bucket{le=\"+Inf\",a=\"x\"} 1\nh_sum{a=\"x\"} 1\n"
	     "h_count{a=\"x\"} 1\nh_sum{a=\"y\"} 1\nh_count{a=\"y\"} 1\n",
	     "+Inf"},
	    {"h_count 1\n# TYPE h histogram\n", "clashes"},
	    {"# TYPE s summary\ns{quantile=\"2\"} 1\ns_sum 1\ns_count 1\n", "[0, 1]"},
	    {"# TYPE s summary\ns 1\ns_sum 1\ns_count 1\n", "quantile belongs"},
	    {"# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_count 1\n", "s_sum missing"},
	};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++)
		assert_rejects(bad[i].text, bad[i].why);
}
END_TEST

/* A NUL inside the text cannot be passed through strlen: test it by length. */
START_TEST(test_parser_rejects_nul)
{
	static const char text[] = "x 1\ny\0 1\n";
	prom_doc_t *d = NULL;
	char *err = NULL;

	ck_assert_int_eq(prom_parse(text, sizeof(text) - 1, &d, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "line 2: NUL"));
	free(err);
}
END_TEST

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("registry");
	TCase *tp = tcase_create("promparse");

	tcase_add_test(tc, test_empty_registry);
	tcase_add_test(tc, test_counters_exact);
	tcase_add_test(tc, test_gauges_set_add_reset);
	tcase_add_test(tc, test_histogram_exact);
	tcase_add_test(tc, test_hostile_label_values);
	tcase_add_test(tc, test_invalid_utf8_label);
	tcase_add_test(tc, test_values_render);
	tcase_add_test(tc, test_render_over_cap);
	tcase_add_test(tp, test_parser_accepts);
	tcase_add_test(tp, test_parser_rejects);
	tcase_add_test(tp, test_parser_rejects_nul);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, tp);
	return s;
}

int main(void)
{
	return tu_run(metrics_suite());
}
