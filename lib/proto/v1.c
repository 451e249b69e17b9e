/* Protocol v1's vocabulary (v1.h, docs/protocol.md "Conventions"). */
#include "proto/v1.h"

#include <errno.h>
#include <string.h>

#include "util/macro.h"
#include "util/strutil.h"

bool v1_valid_id(const char *s)
{
	return str_in_charset(s, 1, V1_ID_MAX, "._:-");
}

bool v1_valid_token(const char *s)
{
	return str_in_charset(s, 1, V1_TOKEN_MAX, "._:-");
}

bool v1_valid_worker_id(const char *s)
{
	return str_in_charset(s, 1, V1_WORKER_ID_MAX, "._:@/-");
}

bool v1_valid_tag(const char *s)
{
	return str_in_charset(s, 1, V1_TAG_MAX, "._:/=-");
}

bool v1_valid_signal(const char *s)
{
	return str_in_charset(s, 1, V1_SIGNAL_MAX, "+-");
}

size_t v1_error_text_len(const char *s)
{
	size_t n = strnlen(s, V1_ERROR_TEXT_MAX + 1);

	if (n <= V1_ERROR_TEXT_MAX)
		return n;
	/* s[n] is the first byte left out: while it continues a character,
	 * that character's first bytes go too */
	for (n = V1_ERROR_TEXT_MAX; n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; n--)
		;
	return n;
}

const char *const v1_status_names[] = {
    [V1_SUCCEEDED] = "succeeded",
    [V1_FAILED] = "failed",
    [V1_CANCELLED] = "cancelled",
    [_V1_STATUS_N] = NULL,
};

const char *const v1_reason_names[] = {
    [V1_REASON_EXIT] = "exit",
    [V1_REASON_TIMEOUT] = "timeout",
    [V1_REASON_CRASH] = "crash",
    [V1_REASON_SPAWN_ERROR] = "spawn_error",
    [V1_REASON_CANCELLED] = "cancelled",
    [V1_REASON_REJECTED] = "rejected",
    [_V1_REASON_N] = NULL,
};

const char *const v1_release_reason_names[] = {
    [V1_RELEASE_DRAINING] = "draining",
    [V1_RELEASE_SHUTDOWN] = "shutdown",
    [V1_RELEASE_BLOCKED_WORKFLOW] = "blocked_workflow",
    [V1_RELEASE_UNSUPPORTED_WORKFLOW] = "unsupported_workflow",
    [V1_RELEASE_NO_SLOT] = "no_slot",
    [_V1_RELEASE_N] = NULL,
};

const char *const v1_run_status_names[] = {
    [V1_RUN_SUCCEEDED] = "succeeded", [V1_RUN_FAILED] = "failed",
    [V1_RUN_CANCELLED] = "cancelled", [V1_RUN_RETRYING] = "retrying",
    [V1_RUN_PENDING] = "pending",     [_V1_RUN_STATUS_N] = NULL,
};

static const char *name_of(const char *const *names, size_t n, int i)
{
	return i >= 0 && (size_t)i < n ? names[i] : NULL;
}

static int from_name(const char *const *names, const char *name)
{
	for (int i = 0; name && names[i]; i++)
		if (streq(name, names[i]))
			return i;
	return -EINVAL;
}

const char *v1_status_name(enum v1_status s)
{
	return name_of(v1_status_names, _V1_STATUS_N, (int)s);
}

const char *v1_reason_name(enum v1_reason r)
{
	return name_of(v1_reason_names, _V1_REASON_N, (int)r);
}

const char *v1_release_reason_name(enum v1_release_reason r)
{
	return name_of(v1_release_reason_names, _V1_RELEASE_N, (int)r);
}

const char *v1_run_status_name(enum v1_run_status s)
{
	return name_of(v1_run_status_names, _V1_RUN_STATUS_N, (int)s);
}

int v1_status_from_name(const char *name)
{
	return from_name(v1_status_names, name);
}

int v1_reason_from_name(const char *name)
{
	return from_name(v1_reason_names, name);
}

int v1_release_reason_from_name(const char *name)
{
	return from_name(v1_release_reason_names, name);
}

int v1_run_status_from_name(const char *name)
{
	return from_name(v1_run_status_names, name);
}
