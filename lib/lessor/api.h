/* The HTTP API of lessor, independent of the HTTP server library: a call is
 * one request (method, path, headers via callbacks, the whole body) and
 * produces one reply, or parks itself (long poll, injected delay) and is run
 * again when resumed.  See docs/protocol.md for the endpoints. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "lessor/store.h"
#include "lessor/tokens.h"
#include "lessor/waiters.h"

typedef struct lessor_api lessor_api;
typedef struct lessor_call lessor_call;

struct lessor_api_config {
	lessor_store *store;     /* borrowed */
	lessor_waiters *waiters; /* borrowed */
	lessor_tokens *tokens;   /* taken on success; NULL = no authentication */
	size_t max_body;         /* request bodies above this are refused (413) */
	bool enable_faults;      /* serve /v1/admin/faults */
};

int lessor_api_new(const struct lessor_api_config *cfg, lessor_api **ret);
lessor_api *lessor_api_free(lessor_api *a);
size_t lessor_api_max_body(const lessor_api *a);
/* Replaces the token set (takes t) for every request from now on. */
void lessor_api_set_tokens(lessor_api *a, lessor_tokens *t);

/* How a call reads its request and parks itself.  suspend() is called with
 * the waiters' lock held; resume() from any thread. */
struct lessor_call_io {
	const char *(*header)(void *userdata, const char *name);
	const char *(*query)(void *userdata, const char *name);
	void (*suspend)(void *userdata);
	void (*resume)(void *userdata);
	/* optional: the client's socket, watched while parked so that a client
	 * that hangs up is let go at once (-1: none) */
	int (*fd)(void *userdata);
	void *userdata;
};

enum {
	LESSOR_CALL_REPLY = 1,     /* lessor_call_reply() is ready */
	LESSOR_CALL_SUSPENDED = 2, /* parked: run again after resume() */
};

int lessor_call_new(lessor_api *a, const char *method, const char *path,
                    const struct lessor_call_io *io, lessor_call **ret);
lessor_call *lessor_call_free(lessor_call *c);

/* Runs the request, or runs it again after a resume.  body_too_large: the
 * body exceeded max_body and was not kept.  Returns LESSOR_CALL_REPLY or
 * LESSOR_CALL_SUSPENDED. */
int lessor_call_run(lessor_call *c, const void *body, size_t len, bool body_too_large);

struct lessor_reply {
	unsigned status;
	const char *content_type;
	char *body; /* owned by the call; the HTTP layer may take it (TAKE_PTR) */
	size_t len;
	unsigned retry_after_s; /* 0 = no Retry-After */
	const char *allow;      /* Allow: for 405 */
	bool auth_challenge;    /* WWW-Authenticate: Bearer */
	const char *csp;        /* Content-Security-Policy: (the dashboard's files) */
	bool no_cache;          /* Cache-Control: no-cache */
};
struct lessor_reply *lessor_call_reply(lessor_call *c);
/* The test fault lose_answer: the request was handled, the answer is not sent
 * (the connection is closed instead).  Also a parked request whose client
 * hung up: it is let go unanswered. */
bool lessor_call_lose_answer(const lessor_call *c);
const char *lessor_call_method(const lessor_call *c);
const char *lessor_call_path(const lessor_call *c);
