/* Private to the native driver (protocol v1): what drv_native.c, which
 * makes each request, shares with drv_native_batch.c, which puts requests of
 * one kind asked for together into one (renewals, completions). */
#pragma once

#include "proto/driver-int.h"
#include "proto/v1.h"
#include "util/random.h"

#define SMALL_ANSWER 4096

struct batch;

enum batch_type {
	BATCH_RENEW,    /* POST /v1/leases/renew */
	BATCH_COMPLETE, /* POST /v1/completions */
	_BATCH_TYPE_MAX,
};

struct native {
	char *worker_id;
	char claim_id[UUID_STRING_MAX];      /* the last claim for runs, "" = none yet */
	struct batch *open[_BATCH_TYPE_MAX]; /* the one requests join now */
	bool off[_BATCH_TYPE_MAX];           /* the API lacks the batch: one per request */
	unsigned in_flight[_BATCH_TYPE_MAX]; /* batches sent, not yet answered */
	ev_timer_t *hold;                    /* bounds a batch's wait for them */
	bool no_slot_unknown;                /* a 400 to release reason no_slot */
};

struct drv_run {
	char *id;
	char *token;
};

/* What one POST of a JSON body to base + path is made of. */
struct post_args {
	const char *path_fmt; /* with %s for id, or none */
	const char *id;
	const char *body;
	const char *label;
	usec_t timeout;      /* 0: the driver's */
	size_t max_response; /* 0: SMALL_ANSWER */
	bool fresh;
};

/* Send the POST pa for rq; on failure rq is still the caller's. */
int native_post_keep(drv_t *d, const struct post_args *pa, drv_req_t *rq, drv_req_t **ret);
/* The same; on failure rq is freed and nothing runs. */
int native_post(drv_t *d, const struct post_args *pa, drv_req_t *rq, drv_req_t **ret);

/* A request's place in a batch (rq->state, or the head of it). */
struct batch_item {
	struct batch *b; /* NULL once out of it (or never in one) */
	size_t idx;
	drv_run_t *run;
	unsigned ttl_s;      /* renewal */
	char *body;          /* completion: its single request's body, owned */
	size_t max_response; /* completion: its single answer's cap */
};

/* rq->state_free of a batch_item (or of a state that begins with one). */
void batch_item_free(void *state);

/* One renewal alone: its request, and its answer's reading. */
struct post_args native_lease_args(const drv_run_t *run, const char *body, usec_t timeout,
                                   bool fresh);
void native_on_renew(drv_req_t *rq, const struct http_response *resp);

/* rq (on_http native_on_renew, state a batch_item of run) joins the renewals
 * of this loop turn; -ENOMEM when it cannot (then send it alone). */
int batch_renew_join(drv_t *d, drv_req_t *rq, usec_t timeout, bool fresh);
/* rq (on_http the single completion's answer reading, state a batch_item
 * with run, body and max_response) joins the completions waiting to go;
 * 1 when it did not (its body is too large for one: send it alone). */
int batch_complete_join(drv_t *d, drv_req_t *rq);
/* The request in the completions waiting to go (not sent yet) that match
 * says is key's, or NULL. */
drv_req_t *batch_complete_waiting(drv_t *d, bool (*match)(const drv_req_t *rq, const void *key),
                                  const void *key);
void batch_close_all(drv_t *d);
