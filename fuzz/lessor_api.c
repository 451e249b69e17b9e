/* lessor's request handling in process (lib/lessor/api.c lessor_call_*, the
 * same entry the HTTP server uses): routing, authentication, every endpoint's
 * JSON body, query strings and headers, against a real SQLite store.
 *
 * Input: "METHOD PATH[?QUERY]\n", then "Name: value" header lines, a blank
 * line, the body.  @ID@, @TOKEN@ and @CLAIM@ are replaced by a run this
 * iteration enqueued and claimed (its lease token) and the claim's id, so the
 * fuzzer gets past the lease checks.  No authentication (every route is
 * reached; the token comparison has its own unit tests). */
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fuzz.h"
#include "lessor/api-int.h"
#include "lessor/store.h"
#include "lessor/waiters.h"
#include "log/log.h"
#include "util/buf.h"

#define PAIRS 32
#define STORE_ROUNDS 2000 /* a fresh database now and then: it only grows */

static char db_dir[64], db_path[96];
static lessor_store *store;
static unsigned rounds;

static const struct lessor_store_config store_cfg = {
    .max_lease_expiries = 3, .retry_base_ms = 10, .retry_max_ms = 100, .max_log_bytes = 4096};

struct pair {
	char *name, *value;
};

struct request {
	char *method, *path;
	struct pair headers[PAIRS], query[PAIRS];
	size_t n_headers, n_query;
	const char *body;
	size_t len;
	bool resumed;
};

static void store_reset(void)
{
	const char *tmp = getenv("TMPDIR");
	char p[128];

	if (!db_dir[0]) {
		log_set_max_level(LOG_CRIT);
		snprintf(db_dir, sizeof(db_dir), "%s/fuzz-lessor-XXXXXX",
		         tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(db_dir))
			abort();
		snprintf(db_path, sizeof(db_path), "%s/lessor.db", db_dir);
	}
	store = lessor_store_free(store);
	unlink(db_path);
	snprintf(p, sizeof(p), "%s-wal", db_path);
	unlink(p);
	snprintf(p, sizeof(p), "%s-shm", db_path);
	unlink(p);
	if (lessor_store_open(db_path, &store_cfg, &store) < 0)
		abort();
	rounds = 0;
}

/* A run held by this iteration: its id, token and claim id. */
static void held_run(char id[LESSOR_RUN_ID_MAX], char token[LESSOR_TOKEN_LEN + 1],
                     char claim_id[32])
{
	struct lessor_enqueue e = {
	    .workflow = "fuzzw", .input_json = "{\"a\":1}", .max_attempts = 2};
	struct lessor_claim_req rq = {.claim_id = claim_id,
	                              .worker_id = "fuzz-worker",
	                              .max_runs = 1,
	                              .ttl_s = 60,
	                              .workflows_json = "[\"fuzzw\"]",
	                              .tags_json = "[]",
	                              .record_worker = true};
	struct lessor_claim_result res = {0};
	bool created;

	snprintf(claim_id, 32, "fuzz-claim-%u", rounds);
	strcpy(id, "none");
	strcpy(token, "none");
	if (lessor_store_enqueue(store, &e, lessor_now_ms(), id, &created) < 0)
		return;
	if (lessor_store_claim(store, &rq, lessor_now_ms(), &res) == 0 && res.n_runs > 0) {
		strcpy(id, res.runs[0].id);
		strcpy(token, res.runs[0].token);
	}
	lessor_claim_result_done(&res);
}

static char *replace_all(const char *s, size_t n, const char *const (*subst)[2], size_t n_subst,
                         size_t *ret_len)
{
	struct buf b = BUF_INIT(SIZE_MAX);
	const char *p = s, *end = s + n;

	while (p < end) {
		size_t i;

		for (i = 0; i < n_subst; i++) {
			size_t kl = strlen(subst[i][0]);

			if ((size_t)(end - p) >= kl && memcmp(p, subst[i][0], kl) == 0) {
				if (buf_append(&b, subst[i][1], strlen(subst[i][1])) < 0)
					abort();
				p += kl;
				break;
			}
		}
		if (i == n_subst && buf_append(&b, p++, 1) < 0)
			abort();
	}
	if (buf_append(&b, "", 1) < 0)
		abort();
	*ret_len = b.len - 1;
	return b.data;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

/* In place, as libmicrohttpd decodes arguments: %XX and '+'. */
static void unescape(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (*s == '%' && hexval(s[1]) >= 0 && hexval(s[2]) >= 0) {
			*w++ = (char)(hexval(s[1]) << 4 | hexval(s[2]));
			s += 2;
		} else
			*w++ = *s == '+' ? ' ' : *s;
	}
	*w = '\0';
}

static void parse_query(struct request *rq, char *q)
{
	for (char *tok = strsep(&q, "&"); tok && rq->n_query < PAIRS; tok = strsep(&q, "&")) {
		char *eq = strchr(tok, '=');

		if (eq)
			*eq++ = '\0';
		unescape(tok);
		if (eq)
			unescape(eq);
		rq->query[rq->n_query++] = (struct pair){tok, eq ? eq : tok + strlen(tok)};
	}
}

/* Splits text (NUL-terminated, len bytes) in place. */
static int parse_request(struct request *rq, char *text, size_t len)
{
	char *end = text + len, *nl = memchr(text, '\n', len), *sp, *q, *line;

	if (!nl)
		return -EINVAL;
	*nl = '\0';
	sp = strchr(text, ' ');
	if (!sp)
		return -EINVAL;
	*sp = '\0';
	rq->method = text;
	rq->path = sp + 1;
	q = strchr(rq->path, '?');
	if (q) {
		*q++ = '\0';
		parse_query(rq, q);
	}
	for (line = nl + 1; line < end; line = nl + 1) {
		char *colon;

		nl = memchr(line, '\n', (size_t)(end - line));
		if (!nl)
			nl = end;
		*nl = '\0';
		if (!*line)
			break;
		colon = strchr(line, ':');
		if (colon && rq->n_headers < PAIRS) {
			*colon++ = '\0';
			rq->headers[rq->n_headers++] =
			    (struct pair){line, colon + strspn(colon, " \t")};
		}
	}
	rq->body = nl < end ? nl + 1 : end;
	rq->len = (size_t)(end - rq->body);
	return 0;
}

static const char *io_header(void *userdata, const char *name)
{
	struct request *rq = userdata;

	for (size_t i = 0; i < rq->n_headers; i++)
		if (strcasecmp(rq->headers[i].name, name) == 0)
			return rq->headers[i].value;
	return NULL;
}

static const char *io_query(void *userdata, const char *name)
{
	struct request *rq = userdata;

	for (size_t i = 0; i < rq->n_query; i++)
		if (strcmp(rq->query[i].name, name) == 0)
			return rq->query[i].value;
	return NULL;
}

static void io_suspend(void *userdata)
{
}

static void io_resume(void *userdata)
{
	((struct request *)userdata)->resumed = true;
}

static void check_reply(const struct lessor_reply *rep)
{
	FUZZ_ASSERT(rep->status >= 200 && rep->status <= 599);
	FUZZ_ASSERT(rep->status != 500);
	FUZZ_ASSERT(!rep->len || rep->body);
	if (rep->body && rep->content_type && strstr(rep->content_type, "json")) {
		cJSON *j = cJSON_ParseWithLength(rep->body, rep->len);

		FUZZ_ASSERT(j);
		cJSON_Delete(j);
	}
}

static void run_call(lessor_waiters *w, struct request *rq)
{
	struct lessor_call_io io = {.header = io_header,
	                            .query = io_query,
	                            .suspend = io_suspend,
	                            .resume = io_resume,
	                            .userdata = rq};
	lessor_api *api = NULL;
	lessor_call *c = NULL;
	struct lessor_api_config cfg = {.store = store,
	                                .waiters = w,
	                                .tokens = NULL, /* no authentication: every route */
	                                .max_body = 64 * 1024,
	                                .enable_faults = true};
	int r;

	if (lessor_api_new(&cfg, &api) < 0 ||
	    lessor_call_new(api, rq->method, rq->path, &io, &c) < 0)
		abort();
	r = lessor_call_run(c, rq->body, rq->len > cfg.max_body ? 0 : rq->len,
	                    rq->len > cfg.max_body);
	if (r == LESSOR_CALL_SUSPENDED) {
		/* a long poll or an injected delay: end it now, as at shutdown */
		lessor_waiters_shutdown(w);
		FUZZ_ASSERT(rq->resumed);
		r = lessor_call_run(c, rq->body, rq->len > cfg.max_body ? 0 : rq->len,
		                    rq->len > cfg.max_body);
	}
	FUZZ_ASSERT(r == LESSOR_CALL_REPLY);
	check_reply(lessor_call_reply(c));
	lessor_call_free(c);
	lessor_api_free(api);
}

FUZZ_TARGET(lessor_api)
{
	char id[LESSOR_RUN_ID_MAX], token[LESSOR_TOKEN_LEN + 1], claim_id[32];
	struct request rq = {0};
	lessor_waiters *w;
	char *text;
	size_t len;

	if (!store || ++rounds >= STORE_ROUNDS)
		store_reset();
	held_run(id, token, claim_id);
	const char *const subst[][2] = {{"@ID@", id}, {"@TOKEN@", token}, {"@CLAIM@", claim_id}};
	text = replace_all((const char *)data, size, subst, 3, &len);
	if (parse_request(&rq, text, len) == 0) {
		w = lessor_waiters_new();
		if (!w)
			abort();
		run_call(w, &rq);
		lessor_waiters_free(w);
	}
	free(text);
	return 0;
}
