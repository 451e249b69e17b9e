/* lessee's parsers of the small API answers (lib/proto/proto_native.c): the
 * lease renewal, the completion, a log append's {"length": N} and the "error"
 * code of an error body, a batch renewal's answer.  The first byte picks the
 * parser. */
#include <errno.h>
#include <string.h>
#include <stdlib.h>

#include "fuzz.h"
#include "proto/json_scan.h"
#include "proto/proto.h"

static void lease(const char *b, size_t n)
{
	unsigned ttl = 0;
	bool cancel = false;

	if (proto_lease_parse(b, n, &ttl, &cancel) == 0)
		FUZZ_ASSERT(ttl >= 1 && ttl <= PROTO_TTL_MAX);
}

/* A completion's answer may carry a claim's ("next"): parsed as one. */
static void complete_next(const struct json_span *next)
{
	struct proto_claim_resp cr;
	char *err = NULL, code[32];

	FUZZ_ASSERT(next->len >= 1); /* any JSON value, "3" too */
	if (proto_claim_parse(next->p, next->len, 4096, &cr, &err) == 0)
		proto_claim_resp_done(&cr);
	free(err);
	(void)proto_claim_error(next->p, next->len, code, sizeof(code));
}

static void complete(const char *b, size_t n, size_t cap)
{
	char status[64];
	struct json_span next;

	memset(status, 'x', sizeof(status));
	if (proto_complete_parse(b, n, status, sizeof(status), &next) == 0 && next.p)
		complete_next(&next);
	if (proto_complete_parse(b, n, status, cap, NULL) == 0 && cap > 0) {
		FUZZ_ASSERT(memchr(status, '\0', cap));
		FUZZ_ASSERT(strlen(status) == 0 || proto_valid_id(status) ||
		            strlen(status) == cap - 1);
	}
}

static void log_length(const char *b, size_t n)
{
	uint64_t len = 0;

	if (proto_log_length_parse(b, n, &len) == 0)
		FUZZ_ASSERT(len <= (UINT64_C(1) << 53));
}

static void error_code(const char *b, size_t n, size_t cap)
{
	char buf[PROTO_ID_MAX + 1];
	const char *e = proto_error_code(b, n, buf, cap);

	if (e) {
		FUZZ_ASSERT(e == buf && memchr(buf, '\0', cap));
		FUZZ_ASSERT(strlen(buf) < cap);
	}
}

/* A batch renewal's answer, for three leases asked (protocol v1
 * POST /v1/leases/renew): every entry read is renewed or lost. */
static void renew_batch(const char *b, size_t n)
{
	static const struct proto_held asked[] = {{"r-1", "t1"}, {"r-2", "t2"}, {"r-3", "t3"}};
	struct proto_renewed got[3];

	if (proto_renew_batch_parse(b, n, asked, 3, got) < 0)
		return;
	for (size_t i = 0; i < 3; i++)
		FUZZ_ASSERT(got[i].lost || (got[i].ttl_s >= 1 && got[i].ttl_s <= PROTO_TTL_MAX));
}

FUZZ_TARGET(answers)
{
	char *body;
	size_t n;

	if (size < 1)
		return 0;
	n = size - 1;
	body = fuzz_strndup(data + 1, n);
	switch (data[0] & 7) {
	case 0:
		lease(body, n);
		break;
	case 1:
		complete(body, n, 64);
		break;
	case 2:
		complete(body, n, 1 + (data[0] >> 3) % 16);
		break;
	case 3:
		log_length(body, n);
		break;
	case 4:
		error_code(body, n, sizeof((char[PROTO_ID_MAX + 1]){0}));
		break;
	case 5:
		error_code(body, n, 1 + (data[0] >> 3));
		break;
	case 6:
		renew_batch(body, n);
		break;
	default:
		/* the same body through every parser */
		lease(body, n);
		complete(body, n, 64);
		log_length(body, n);
		error_code(body, n, PROTO_ID_MAX + 1);
		renew_batch(body, n);
		break;
	}
	free(body);
	return 0;
}
