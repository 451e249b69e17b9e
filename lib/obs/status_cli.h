/* `lessee status`: the running daemon's /status, as tables for a person or as
 * the raw JSON document for a script.  A one-shot client: it runs lib/http on
 * a private loop until the answer is in. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

/* "http://127.0.0.1:9464" for the configured listen address; a wildcard
 * (0.0.0.0, ::) is reached over loopback.  0 or -errno; *ret is freed by the
 * caller. */
int status_cli_base_url(const struct sockaddr *addr, socklen_t len, char **ret);

/* GET <base_url>/status and print it to out (json: the document as sent, plus
 * a newline).  What went wrong is described on err, one line.  Returns 0, or
 * -errno: the transport error when the daemon cannot be reached
 * (-ECONNREFUSED, -ETIMEDOUT, ...), -EPROTO when it answered other than 200,
 * -EBADMSG when the answer is not a status document. */
int status_cli_run(const char *base_url, bool json, FILE *out, FILE *err);

/* `lessee status --healthz`: GET <base_url>/healthz (the liveness probe) and
 * print the first line of its answer ("ok").  For health checks that can only
 * run a command (Docker's HEALTHCHECK).  0 on 200, else as status_cli_run. */
int status_cli_healthz(const char *base_url, FILE *out, FILE *err);

/* The tables for a /status document (what status_cli_run prints).  Every
 * string from the document is printed with control characters replaced and
 * cut to a sane width: it may come from the API.  0 or -EBADMSG. */
int status_cli_print(const char *doc, size_t len, FILE *out);

/* `lessee status --help`. */
void status_cli_usage(FILE *f);
