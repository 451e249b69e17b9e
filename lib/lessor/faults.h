/* Fault injection for tests (lessor serve --enable-faults): the next `count`
 * requests to a worker endpoint (or every `every`-th of them, until `count`
 * were affected) are delayed and/or answered with a status. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>

enum lessor_endpoint {
	LESSOR_EP_NONE = -1,
	LESSOR_EP_CLAIMS,
	LESSOR_EP_LEASE,
	LESSOR_EP_LOG,
	LESSOR_EP_COMPLETE,
	LESSOR_EP_RELEASE,
	_LESSOR_EP_MAX,
};

struct lessor_fault {
	unsigned status;        /* 0 = handle normally (after the delay) */
	unsigned count;         /* requests left to affect */
	unsigned retry_after_s; /* 0 = no Retry-After header */
	unsigned delay_ms;
	unsigned every;   /* affect every every-th request; 0 and 1: each one */
	unsigned seen;    /* requests counted since the fault was armed */
	bool lose_answer; /* handled normally, then the connection is closed unanswered
	                   * (the answer lost on its way back) */
	bool legacy;      /* claims: answer as a server without cancel events ("held" ignored)
	                   * and without a completion's "next" (ignored, no "next" answered);
	                   * lease (status 0): as a server without the batch renewal
	                   * (POST /v1/leases/renew answers 404, single renewals as usual);
	                   * complete (status 0): as a server without the batch completion
	                   * (POST /v1/completions answers 404, single completions as usual) */
};

typedef struct lessor_faults lessor_faults;

lessor_faults *lessor_faults_new(void);
lessor_faults *lessor_faults_free(lessor_faults *f);

int lessor_endpoint_from_name(const char *name, enum lessor_endpoint *ret);
const char *lessor_endpoint_name(enum lessor_endpoint ep);

void lessor_faults_set(lessor_faults *f, enum lessor_endpoint ep, const struct lessor_fault *x);
void lessor_faults_clear(lessor_faults *f);
/* Consumes one request's worth of the fault armed for ep, if any. */
bool lessor_faults_take(lessor_faults *f, enum lessor_endpoint ep, struct lessor_fault *ret);
/* The same, unless the fault armed for ep is a legacy one, which is left
 * armed and unspent: a request an older server answered as this one does (a
 * single renewal or completion, while the legacy lease or complete fault
 * hides the batch renewal or completion). */
bool lessor_faults_take_plain(lessor_faults *f, enum lessor_endpoint ep, struct lessor_fault *ret);
/* The same, only when the fault armed for ep is a legacy one: a claim made
 * by another endpoint (a completion's "next") plays the older server too,
 * and leaves the claims endpoint's other faults to its own requests. */
bool lessor_faults_take_legacy(lessor_faults *f, enum lessor_endpoint ep);
/* {"complete": {"status":..., "count":..., ...}, ...} for armed faults. */
cJSON *lessor_faults_json(lessor_faults *f);
