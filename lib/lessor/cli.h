/* The `lessor enqueue|list|show|log|stats|workers|cancel|requeue` commands: talk to a
 * running server and print for people (tables, key: value) or, with --json,
 * the API's JSON.  Each returns an exit code: 0 ok, 1 failure. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

struct lessor_cli {
	const char *url;   /* http://127.0.0.1:8080 */
	const char *token; /* NULL = none */
	bool json;
	FILE *out, *err;
};

struct lessor_cli_enqueue {
	const char *workflow;
	const char *input_json; /* NULL = {} */
	char **tags;
	unsigned max_attempts; /* 0 = server default */
	unsigned timeout_s;    /* 0 = none */
	const char *idempotency_key;
};

int lessor_cli_enqueue(const struct lessor_cli *o, const struct lessor_cli_enqueue *e);
int lessor_cli_list(const struct lessor_cli *o, const char *status, const char *workflow,
                    unsigned limit);
int lessor_cli_show(const struct lessor_cli *o, const char *id);
int lessor_cli_log(const struct lessor_cli *o, const char *id);
int lessor_cli_stats(const struct lessor_cli *o);
int lessor_cli_workers(const struct lessor_cli *o);
int lessor_cli_cancel(const struct lessor_cli *o, const char *id);
int lessor_cli_requeue(const struct lessor_cli *o, const char *id);
