/* Private to lib/lessor/api*.c. */
#pragma once

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>

#include "lessor/api.h"
#include "lessor/faults.h"
#include "lessor/fields.h"
#include "lessor/json_raw.h"
#include "lessor/tokens.h"
#include "util/macro.h"

struct lessor_api {
	lessor_store *store;
	lessor_waiters *waiters;
	pthread_mutex_t tokens_lock; /* tokens is replaced on SIGHUP */
	lessor_tokens *tokens;
	uint64_t tokens_gen; /* one more at each replacement */
	size_t max_body;
	lessor_faults *faults; /* NULL unless --enable-faults */
};

struct lessor_route {
	const char *method;
	const char *pattern; /* "*" matches one path segment, captured in call->arg */
	int (*handler)(lessor_call *c);
	enum lessor_endpoint endpoint; /* fault injection target */
	bool json_body;                /* the body must be a JSON object */
};

#define LESSOR_ARG_MAX 160

struct lessor_call {
	lessor_api *api;
	struct lessor_call_io io;
	char *method, *path;
	const struct lessor_route *route;
	struct lessor_principal who; /* set before the handler runs */
	uint64_t tokens_gen;         /* the api's tokens_gen when `who` was found */
	char arg[LESSOR_ARG_MAX];
	char allow[48];
	const char *body;
	size_t len;
	cJSON *json;
	unsigned round; /* 0, then one more per resume */
	bool fault_taken;
	struct lessor_fault fault;
	struct lessor_waiter waiter;
	void *state; /* a handler's state across resumes */
	void (*state_free)(void *state);
	struct lessor_reply reply;
	char msg[LESSOR_MSG_MAX];
};

int64_t lessor_now_ms(void);

/* The request body's text, as json_raw.h reads it. */
static inline struct json_span lessor_call_body(const lessor_call *c)
{
	return (struct json_span){c->body, c->len};
}

/* A log append's Content-Range, "bytes <start>-<end>/<*|total>", covering
 * exactly len bytes: 0 and *ret_start, or -EINVAL.  h may be NULL. */
int lessor_parse_content_range(const char *h, size_t len, uint64_t *ret_start);

/* Each returns LESSOR_CALL_REPLY.  lessor_reply_json takes body. */
int lessor_reply_json(lessor_call *c, unsigned status, cJSON *body);
int lessor_reply_error(lessor_call *c, unsigned status, const char *code, const char *fmt, ...)
    _printf_(4, 5);
/* 400 invalid_request with c->msg. */
int lessor_reply_invalid(lessor_call *c);
/* -ENOENT, -ESTALE, -EEXIST, database errors ... as the right status. */
int lessor_reply_store_error(lessor_call *c, int r);
/* The status, error code and message a store error r is answered with. */
unsigned lessor_store_error_answer(int r, const char **ret_code, const char **ret_message);

/* Parks the call until woken or c->waiter.deadline: 0 parked, -EAGAIN (a wake
 * happened since seen_gen: look again), -ESHUTDOWN. */
int lessor_call_park(lessor_call *c, uint64_t seen_gen);

/* False when the tokens were replaced since c was authenticated: a parked
 * call is then authenticated again when it runs (a revoked token gets 401),
 * and must not be handed anything before that. */
bool lessor_call_auth_current(lessor_call *c);

/* A named worker token may touch only the runs whose lease (lease_token)
 * was granted to it: 0 when the caller may go on, else LESSOR_CALL_REPLY
 * with 409 lease_lost, the answer for a run that does not exist too. */
int lessor_call_check_holder(lessor_call *c, const char *lease_token);
/* The same question for the lease (run id, lease_token): 1 when the caller
 * may touch it (any caller but a named worker token, or the worker it was
 * granted to), 0 when not (no such lease either), < 0 a store error. */
int lessor_call_holds(lessor_call *c, const char *id, const char *lease_token);

/* handlers: api_worker.c */
int lessor_h_claim(lessor_call *c);
int lessor_h_claim_cancel(lessor_call *c);
int lessor_h_renew(lessor_call *c);
int lessor_h_renew_batch(lessor_call *c);
int lessor_h_log_append(lessor_call *c);
int lessor_h_complete(lessor_call *c);
int lessor_h_complete_batch(lessor_call *c);
int lessor_h_release(lessor_call *c);
/* lessor_store_enqueue, handed over in the same transaction to the claim
 * parked longest that can take the run (lessor_waiters_adopt): that claim
 * is answered with it without another commit.  When no claim was parked,
 * or the one handed the enqueue took another run, the run wakes the parked
 * claims as before.  (api_worker.c: it knows the claims' state.) */
int lessor_enqueue_hand_off(lessor_call *c, const struct lessor_enqueue *e,
                            char id[LESSOR_RUN_ID_MAX], bool *ret_created);

/* handlers: api_admin.c */
int lessor_h_enqueue(lessor_call *c);
int lessor_h_list(lessor_call *c);
int lessor_h_show(lessor_call *c);
int lessor_h_log_read(lessor_call *c);
int lessor_h_cancel(lessor_call *c);
int lessor_h_requeue(lessor_call *c);
int lessor_h_stats(lessor_call *c);
int lessor_h_workers(lessor_call *c);
int lessor_h_faults_set(lessor_call *c);
int lessor_h_faults_clear(lessor_call *c);
int lessor_h_faults_get(lessor_call *c);
int lessor_h_health(lessor_call *c);
/* handler: ui.c */
int lessor_h_ui(lessor_call *c);
