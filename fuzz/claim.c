/* The claim answer (lib/proto/proto_native.c proto_claim_parse, over
 * lib/proto/json_scan.c).  The first byte picks the input cap. */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "proto/proto.h"
#include "util/strutil.h"

static const size_t caps[] = {0, 1, 2, 16, 64, 1024, 1u << 20, SIZE_MAX};

static void check_run(const struct proto_run *r, size_t max_input)
{
	if (!r->invalid) {
		FUZZ_ASSERT(r->id && proto_valid_id(r->id));
		FUZZ_ASSERT(r->workflow && proto_valid_id(r->workflow));
		FUZZ_ASSERT(v1_valid_token(r->token));
		FUZZ_ASSERT(r->ttl_s >= 1 && r->ttl_s <= PROTO_TTL_MAX);
		/* an absent input is "null", whatever the cap */
		FUZZ_ASSERT(r->input && (r->input_len <= max_input || streq(r->input, "null")));
		FUZZ_ASSERT(strlen(r->input) == r->input_len);
	}
	if (r->usable_for_reject)
		FUZZ_ASSERT(r->id && proto_valid_id(r->id) && v1_valid_token(r->token));
}

FUZZ_TARGET(claim)
{
	struct proto_claim_resp resp = {0};
	size_t max_input;
	char *body, *error = NULL;
	int r;

	if (size < 1)
		return 0;
	max_input = caps[data[0] % (sizeof(caps) / sizeof(caps[0]))];
	body = fuzz_strndup(data + 1, size - 1);
	r = proto_claim_parse(body, size - 1, max_input, &resp, &error);
	if (r == 0) {
		FUZZ_ASSERT(resp.n_runs <= PROTO_MAX_RUNS);
		FUZZ_ASSERT(resp.n_runs == 0 || resp.runs);
		for (size_t i = 0; i < resp.n_runs; i++)
			check_run(&resp.runs[i], max_input);
		proto_claim_resp_done(&resp);
	} else {
		FUZZ_ASSERT(r < 0);
	}
	free(error);
	free(body);
	return 0;
}
