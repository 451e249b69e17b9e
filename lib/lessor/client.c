#include "lessor/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"
#include "util/macro.h"
#include "util/strutil.h"

struct lessor_client {
	CURL *h;
	char *base;
	char *auth; /* "Authorization: Bearer ..." */
	long timeout_ms;
	char error[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int lessor_client_new(const char *base_url, const char *token, lessor_client **ret)
{
	lessor_client *c;

	pthread_once(&global_once, global_init);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->timeout_ms = 120 * 1000;
	c->h = curl_easy_init();
	c->base = strdup(base_url);
	if (!c->h || !c->base ||
	    (token && asprintf(&c->auth, "Authorization: Bearer %s", token) < 0)) {
		c->auth = NULL;
		lessor_client_free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

lessor_client *lessor_client_free(lessor_client *c)
{
	if (!c)
		return NULL;
	if (c->h)
		curl_easy_cleanup(c->h);
	if (c->auth)
		explicit_bzero(c->auth, strlen(c->auth));
	free(c->auth);
	free(c->base);
	free(c);
	return NULL;
}

void lessor_client_set_timeout(lessor_client *c, usec_t timeout)
{
	c->timeout_ms = (long)(timeout / USEC_PER_MSEC);
}

const char *lessor_client_error(const lessor_client *c)
{
	return c->error;
}

void lessor_response_done(struct lessor_response *r)
{
	free(r->body);
	*r = (struct lessor_response){.retry_after_s = -1};
}

struct sink {
	struct buf body;
	long retry_after_s;
};

static size_t on_body(char *p, size_t size, size_t n, void *userdata)
{
	struct sink *k = userdata;

	/* a short count makes curl fail the transfer with CURLE_WRITE_ERROR */
	return buf_append(&k->body, p, size * n) < 0 ? 0 : size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *userdata)
{
	struct sink *k = userdata;
	size_t len = size * n;
	const char name[] = "retry-after:";

	if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0)
		k->retry_after_s = strtol(p + sizeof(name) - 1, NULL, 10);
	return len;
}

static void set_method(CURL *h, const char *method, const void *body, size_t len)
{
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
	if (body || streq(method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
		if (!streq(method, "POST"))
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
		return;
	}
	curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	if (!streq(method, "GET"))
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
}

static struct curl_slist *header_list(const lessor_client *c, char *const *headers)
{
	struct curl_slist *l = curl_slist_append(NULL, "Expect:"), *n;

	if (l && c->auth && (n = curl_slist_append(l, c->auth)))
		l = n;
	for (size_t i = 0; l && headers && headers[i]; i++)
		if ((n = curl_slist_append(l, headers[i])))
			l = n;
	return l;
}

static int transport_error(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_WRITE_ERROR:
		return -EFBIG;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

int lessor_client_request(lessor_client *c, const char *method, const char *path,
                          char *const *headers, const void *body, size_t len,
                          struct lessor_response *ret)
{
	struct sink k = {.body = BUF_INIT(LESSOR_CLIENT_MAX_RESPONSE), .retry_after_s = -1};
	struct curl_slist *hl = header_list(c, headers);
	_cleanup_free_ char *url = NULL;
	CURLcode rc;
	long status = 0;

	if (!hl || asprintf(&url, "%s%s", c->base, path) < 0) {
		url = NULL;
		curl_slist_free_all(hl);
		return -ENOMEM;
	}
	c->error[0] = '\0';
	curl_easy_setopt(c->h, CURLOPT_URL, url);
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->error);
	curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &k);
	curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c->h, CURLOPT_HEADERDATA, &k);
	curl_easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
	set_method(c->h, method, body, len);
	rc = curl_easy_perform(c->h);
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hl);
	if (rc != CURLE_OK) {
		if (!c->error[0])
			snprintf(c->error, sizeof(c->error), "%s", curl_easy_strerror(rc));
		buf_done(&k.body);
		return transport_error(rc);
	}
	curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	*ret = (struct lessor_response){
	    .status = status, .len = k.body.len, .retry_after_s = k.retry_after_s};
	ret->body = k.body.len ? buf_steal(&k.body) : NULL;
	buf_done(&k.body);
	return 0;
}

int lessor_client_json(lessor_client *c, const char *method, const char *path,
                       const char *body_json, long *ret_status, cJSON **ret)
{
	char *hdr[] = {"Content-Type: application/json", NULL};
	struct lessor_response resp;
	int r;

	r = lessor_client_request(c, method, path, hdr, body_json,
	                          body_json ? strlen(body_json) : 0, &resp);
	if (r < 0)
		return r;
	if (ret_status)
		*ret_status = resp.status;
	if (ret)
		*ret = resp.body ? cJSON_ParseWithLength(resp.body, resp.len) : NULL;
	lessor_response_done(&resp);
	return 0;
}
