/* A small blocking HTTP client for lessor's API (libcurl easy): one keep-alive
 * connection per client object, bearer token, capped response bodies.  Used
 * by the CLI, the tests and the benchmark.  A client is not thread-safe; use
 * one per thread. */
#pragma once

#include <cjson/cJSON.h>
#include <stddef.h>

#include "util/time.h"

#define LESSOR_CLIENT_MAX_RESPONSE (128u << 20)

typedef struct lessor_client lessor_client;

/* base_url: "http://127.0.0.1:8080" (paths are appended); token NULL = none. */
int lessor_client_new(const char *base_url, const char *token, lessor_client **ret);
lessor_client *lessor_client_free(lessor_client *c);
/* Whole-request timeout (default 120 s). */
void lessor_client_set_timeout(lessor_client *c, usec_t timeout);
/* libcurl's message for the last transport failure. */
const char *lessor_client_error(const lessor_client *c);

struct lessor_response {
	long status;
	char *body; /* NUL-terminated; NULL when empty */
	size_t len;
	long retry_after_s; /* -1 = no Retry-After */
};
void lessor_response_done(struct lessor_response *r);

/* headers: NULL-terminated "Name: value" strings, may be NULL.  body NULL =
 * none.  Returns 0 (any HTTP status) or -errno for a transport failure:
 * -ECONNREFUSED, -ETIMEDOUT, -EFBIG (response over the cap), -EIO. */
int lessor_client_request(lessor_client *c, const char *method, const char *path,
                          char *const *headers, const void *body, size_t len,
                          struct lessor_response *ret);

/* JSON in and out: body_json NULL = no body.  *ret is the parsed response body
 * (NULL when empty or not JSON); ret may be NULL. */
int lessor_client_json(lessor_client *c, const char *method, const char *path,
                       const char *body_json, long *ret_status, cJSON **ret);
