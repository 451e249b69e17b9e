/* lessor's dashboard (/ui).  Without a browser: the static files are served
 * without a token, with a strict Content-Security-Policy and nosniff, and
 * hold no data; the API behind them still wants the admin token.  In a real
 * browser (Debian's chromium, headless, driven by tests/ui/ui_test.mjs with
 * playwright-core): a run enqueued through the API appears in the list, its
 * log tail grows on its page while a real lessee runs it, requeue from the
 * page revokes its lease, and cancel from the page ends it cancelled in the
 * API.
 *
 * The browser part needs node, chromium and playwright-core (installed with
 * npm into build/ui-node, or $UI_NODE_CACHE, on first use; $CHROMIUM names
 * another browser binary).  When one is missing the binary runs
 * the rest and exits 77 (skipped).  UI_SCREENSHOT_DIR=docs refreshes
 * docs/ui.png and docs/ui-run.png. */
#include <cJSON.h>
#include <check.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define ADMIN "admin-0123456789abcdef"
#define WORKER_TOKEN "worker-0123456789abcdef"
#define PLAYWRIGHT "playwright-core@1.65.1"

static struct tu_lessor *L;
static char *dir;
static char node_cache[4096]; /* holds node_modules/playwright-core */

static void setup(void)
{
	dir = tu_tmpdir("ui");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(
	    tu_lessor_start(
	        &(struct tu_lessor_opts){.admin_token = ADMIN,
	                                 .worker_tokens = "ui-worker " WORKER_TOKEN "\n"},
	        &L),
	    0);
}

static void teardown(void)
{
	ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
	rm_rf(dir);
	free(dir);
}

/* ---------------------------------------------------------- without a browser */

struct got {
	long status;
	char *headers, *body;
	size_t hlen, blen;
};

static size_t grow(char **p, size_t *n, const char *data, size_t len)
{
	char *q = realloc(*p, *n + len + 1);

	if (!q)
		return 0;
	memcpy(q + *n, data, len);
	*n += len;
	q[*n] = '\0';
	*p = q;
	return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata)
{
	struct got *g = userdata;

	return grow(&g->headers, &g->hlen, data, size * n);
}

static size_t on_body(char *data, size_t size, size_t n, void *userdata)
{
	struct got *g = userdata;

	return grow(&g->body, &g->blen, data, size * n);
}

/* GET a path without any token. */
static void get(const char *path, struct got *g)
{
	CURL *c = curl_easy_init();
	_cleanup_free_ char *url = NULL;

	*g = (struct got){0};
	ck_assert_ptr_nonnull(c);
	ck_assert_int_ge(asprintf(&url, "%s%s", tu_lessor_url(L), path), 0);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, g);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, g);
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &g->status);
	curl_easy_cleanup(c);
	if (!g->headers)
		g->headers = strdup("");
	if (!g->body)
		g->body = strdup("");
}

static void got_done(struct got *g)
{
	free(g->headers);
	free(g->body);
}

START_TEST(test_static_files)
{
	static const struct {
		const char *path, *type, *needle;
	} files[] = {
	    {"/ui", "text/html; charset=utf-8", "<script src=\"/ui/app.js\""},
	    {"/ui/", "text/html; charset=utf-8", "<title>lessor</title>"},
	    {"/ui/index.html", "text/html; charset=utf-8", "<title>lessor</title>"},
	    {"/ui/app.js", "text/javascript; charset=utf-8", "sessionStorage"},
	    {"/ui/style.css", "text/css; charset=utf-8", "table.grid"},
	};
	struct got g;
	char line[128];

	for (size_t i = 0; i < ELEMENTSOF(files); i++) {
		get(files[i].path, &g);
		ck_assert_msg(g.status == 200, "%s: %ld", files[i].path, g.status);
		snprintf(line, sizeof(line), "Content-Type: %s\r\n", files[i].type);
		ck_assert_msg(strcasestr(g.headers, line), "%s: %s", files[i].path, g.headers);
		ck_assert_ptr_nonnull(
		    strcasestr(g.headers, "Content-Security-Policy: default-src 'self';"));
		ck_assert_ptr_nonnull(strcasestr(g.headers, "frame-ancestors 'none'"));
		ck_assert_ptr_nonnull(strcasestr(g.headers, "X-Content-Type-Options: nosniff\r\n"));
		ck_assert_ptr_nonnull(strcasestr(g.headers, "Cache-Control: no-cache\r\n"));
		ck_assert_msg(strstr(g.body, files[i].needle), "%s lacks %s", files[i].path,
		              files[i].needle);
		/* everything is loaded from this origin: no CDN, no inline script */
		ck_assert_ptr_null(strstr(g.body, "http://"));
		ck_assert_ptr_null(strstr(g.body, "https://"));
		ck_assert_ptr_null(strstr(g.body, "<script>"));
		got_done(&g);
	}
	get("/ui/nope.js", &g);
	ck_assert_int_eq(g.status, 404);
	got_done(&g);
	get("/ui/../v1/runs", &g);
	ck_assert_int_ne(g.status, 200);
	got_done(&g);
	/* the data behind the page still needs the admin token */
	get("/v1/runs", &g);
	ck_assert_int_eq(g.status, 401);
	ck_assert_ptr_nonnull(strcasestr(g.headers, "X-Content-Type-Options: nosniff\r\n"));
	got_done(&g);
}
END_TEST

/* ---------------------------------------------------------- in a browser */

static void write_script(const char *name, const char *body)
{
	_cleanup_free_ char *path = NULL, *text = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static char *lessee_conf(void)
{
	_cleanup_free_ char *tf = NULL;
	char *conf = NULL;

	ck_assert_int_ge(asprintf(&tf, "%s/worker-token", dir), 0);
	ck_assert_int_eq(write_file_atomic(tf, WORKER_TOKEN "\n", strlen(WORKER_TOKEN) + 1, 0600),
	                 0);
	write_script("ok.sh",
	             "echo building; echo '{\"artifact\":\"app.tar\"}' >\"$LESSEE_RESULT_FILE\"");
	write_script("fail.sh", "echo 'tests failed' >&2; exit 3");
	/* a line every 200 ms for at most a minute */
	write_script("ticker.sh", "i=0\nwhile [ $i -lt 300 ]; do echo \"tick $i\"; i=$((i + 1)); "
	                          "sleep 0.2; done");
	ck_assert_int_ge(asprintf(&conf,
	                          "[api]\ntoken_file = %1$s\n"
	                          "[workflow.build]\ncommand = %2$s/ok.sh\n"
	                          "[workflow.test]\ncommand = %2$s/fail.sh\n"
	                          "[workflow.ticker]\ncommand = %2$s/ticker.sh\n",
	                          tf, dir),
	                 0);
	return conf;
}

static char *enqueue_wait(const char *body, const char *status)
{
	char *id = tu_lessor_enqueue(L, body);

	ck_assert_ptr_nonnull(id);
	if (status)
		ck_assert_int_eq(tu_lessor_wait_status(L, id, status, tu_timeout(20 * SEC)), 0);
	return id;
}

/* node tests/ui/ui_test.mjs URL TOKEN RUN_ID: its exit status. */
static int run_node(const char *run_id)
{
	_cleanup_free_ char *script = NULL, *url = NULL;
	const char *src = getenv("LESSEE_SRCDIR"), *shots = getenv("UI_SCREENSHOT_DIR");
	pid_t pid;
	int status;

	ck_assert_int_ge(asprintf(&script, "%s/tests/ui/ui_test.mjs", src ? src : "."), 0);
	ck_assert_int_ge(asprintf(&url, "%s", tu_lessor_url(L)), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("UI_NODE_MODULES", node_cache, 1);
		setenv("UI_SCREENSHOT_DIR", shots && *shots ? shots : dir, 1);
		execlp("node", "node", script, url, ADMIN, run_id, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_dashboard_in_browser)
{
	_cleanup_free_ char *conf = lessee_conf();
	_cleanup_free_ char *b1 = NULL, *b2 = NULL, *t1 = NULL, *p1 = NULL, *tick = NULL;
	struct tu_lessee *d = NULL;
	cJSON *run;

	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &d),
	                 0);
	/* a few finished and waiting runs, so the list has something to show */
	b1 = enqueue_wait("{\"workflow\":\"build\",\"input\":{\"commit\":\"4f2a9c1\"}}",
	                  "succeeded");
	t1 = enqueue_wait("{\"workflow\":\"test\",\"input\":{\"commit\":\"4f2a9c1\"},\"tags\":[]}",
	                  "failed");
	b2 = enqueue_wait("{\"workflow\":\"build\",\"input\":{\"commit\":\"77b0e3d\"}}",
	                  "succeeded");
	p1 = enqueue_wait(
	    "{\"workflow\":\"deploy\",\"input\":{\"env\":\"staging\"},\"tags\":[\"prod\"]}", NULL);
	tick = enqueue_wait(
	    "{\"workflow\":\"ticker\",\"input\":{\"job\":\"ticker\",\"every_ms\":200}}", "running");
	ck_assert_int_eq(run_node(tick), 0);
	/* the page said cancelled: so does the API, and the child is gone */
	ck_assert_int_eq(tu_lessor_wait_status(L, tick, "cancelled", tu_timeout(10 * SEC)), 0);
	run = tu_lessor_get_run(L, tick);
	ck_assert_ptr_nonnull(run);
	ck_assert_int_gt(cJSON_GetObjectItemCaseSensitive(run, "log_length")->valuedouble, 0);
	cJSON_Delete(run);
	ck_assert_int_eq(tu_lessee_stop(d), 0);
	tu_lessee_free(d);
}
END_TEST

/* ---------------------------------------------------------- prerequisites */

static bool have(const char *cmd)
{
	_cleanup_free_ char *line = NULL;

	if (asprintf(&line, "%s >/dev/null 2>&1", cmd) < 0)
		return false;
	return system(line) == 0;
}

/* NULL when the browser test can run, else why not. */
static const char *browser_missing(void)
{
	const char *src = getenv("LESSEE_SRCDIR"), *chromium = getenv("CHROMIUM");
	const char *cache = getenv("UI_NODE_CACHE");
	_cleanup_free_ char *pkg = NULL, *install = NULL;

	if (!have("node --version"))
		return "node is not installed (apt-get install nodejs npm)";
	if (access(chromium && *chromium ? chromium : "/usr/bin/chromium", X_OK) < 0)
		return "chromium is not installed (apt-get install chromium)";
	if (cache && *cache)
		snprintf(node_cache, sizeof(node_cache), "%s", cache);
	else
		snprintf(node_cache, sizeof(node_cache), "%s/build/ui-node", src ? src : ".");
	if (asprintf(&pkg, "%s/node_modules/playwright-core/package.json", node_cache) < 0)
		return "out of memory";
	if (access(pkg, R_OK) == 0)
		return NULL;
	if (!have("npm --version"))
		return "npm is not installed (apt-get install npm)";
	fprintf(stderr, "check_ui: npm install %s into %s\n", PLAYWRIGHT, node_cache);
	if (mkdir_p(node_cache, 0755) < 0 ||
	    asprintf(&install,
	             "timeout 300 npm install --prefix '%s' --no-audit --no-fund --no-save "
	             "--fetch-retries=1 --loglevel=error %s",
	             node_cache, PLAYWRIGHT) < 0 ||
	    !have(install) || access(pkg, R_OK) < 0)
		return "cannot install playwright-core from the npm registry";
	return NULL;
}

int main(void)
{
	const char *missing = browser_missing();
	Suite *s = suite_create("ui");
	TCase *t = tcase_create("static");
	int r;

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_static_files);
	suite_add_tcase(s, t);
	if (!missing) {
		t = tcase_create("browser");
		tcase_add_checked_fixture(t, setup, teardown);
		tcase_set_timeout(t, 180);
		tcase_add_test(t, test_dashboard_in_browser);
		suite_add_tcase(s, t);
	}
	r = tu_run(s);
	if (r == 0 && missing) {
		fprintf(stderr, "check_ui: SKIP the browser test: %s\n", missing);
		return 77;
	}
	return r;
}
