#include "obs/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

struct notify {
	ev_t *ev;
	bool enabled;
	usec_t watchdog;
	ev_timer_t *timer;
	char last_status[256];
};

static void on_watchdog(ev_timer_t *t, void *userdata)
{
	notify_t *n = userdata;

	sd_notify(0, "WATCHDOG=1");
	ev_timer_arm(t, n->watchdog / 2);
}

int notify_new(ev_t *e, notify_t **ret)
{
	notify_t *n = calloc(1, sizeof(*n));
	uint64_t wd = 0;
	int r;

	if (!n)
		return -ENOMEM;
	n->ev = e;
	n->enabled = getenv("NOTIFY_SOCKET") != NULL;
	/* sd_watchdog_enabled checks WATCHDOG_PID against us; unset=1 clears both */
	if (n->enabled && sd_watchdog_enabled(1, &wd) > 0 && wd > 0) {
		n->watchdog = wd;
		r = ev_timer_add(e, 0, on_watchdog, n, &n->timer);
		if (r < 0) {
			free(n);
			return r;
		}
	}
	*ret = n;
	return 0;
}

notify_t *notify_free(notify_t *n)
{
	if (!n)
		return NULL;
	ev_timer_del(n->timer);
	free(n);
	return NULL;
}

bool notify_enabled(const notify_t *n)
{
	return n && n->enabled;
}

void notify_ready(notify_t *n)
{
	if (notify_enabled(n))
		sd_notify(0, "READY=1");
}

void notify_stopping(notify_t *n)
{
	if (notify_enabled(n))
		sd_notify(0, "STOPPING=1");
}

void notify_reloading(notify_t *n)
{
	if (notify_enabled(n))
		sd_notify(0, "RELOADING=1");
}

void notify_status(notify_t *n, const char *fmt, ...)
{
	char s[sizeof(n->last_status)];
	va_list ap;

	if (!notify_enabled(n))
		return;
	va_start(ap, fmt);
	vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	if (strcmp(s, n->last_status) == 0)
		return;
	memcpy(n->last_status, s, sizeof(s));
	sd_notifyf(0, "STATUS=%s", s);
}
