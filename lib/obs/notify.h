/* systemd service notifications (sd_notify): READY=1, STATUS=, STOPPING=1 and the
 * watchdog keep-alive, sent from a loop timer so a stuck loop stops feeding it.
 * Every call is a no-op when NOTIFY_SOCKET is unset. */
#pragma once

#include <stdbool.h>

#include "ev/ev.h"
#include "util/macro.h"

typedef struct notify notify_t;

/* Reads NOTIFY_SOCKET and WATCHDOG_USEC/WATCHDOG_PID (the latter two are then
 * unset; lib/exec never passes any of them to a run). */
int notify_new(ev_t *e, notify_t **ret);
notify_t *notify_free(notify_t *n);
bool notify_enabled(const notify_t *n);
void notify_ready(notify_t *n);
void notify_stopping(notify_t *n);
void notify_reloading(notify_t *n);
void notify_status(notify_t *n, const char *fmt, ...) _printf_(2, 3);
