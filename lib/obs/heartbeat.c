#include "obs/heartbeat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "log/log.h"
#include "util/macro.h"

#define DEFAULT_TIMEOUT (10 * USEC_PER_SEC)

struct heartbeat {
	ev_t *ev;
	http_t *http;
	http_req_t *req; /* in flight, or NULL */
	ev_timer_t *timer;
	usec_t next; /* deadline of the next tick */
	char *url;
	char where[128]; /* scheme://host, what the logs show */
	usec_t interval, timeout;
	bool (*healthy)(void *userdata);
	void *userdata;
	bool failing, paused;
	struct heartbeat_stats st;
};

/* scheme://host[:port] without user info, path or query: monitoring services
 * put their secret in the path (healthchecks.io, Cronitor, Dead Man's Snitch). */
static void redact_url(const char *url, char *out, size_t n)
{
	const char *sep = strstr(url, "://"), *host, *end, *at;

	if (!sep) {
		snprintf(out, n, "(heartbeat URL)");
		return;
	}
	host = sep + 3;
	end = host + strcspn(host, "/?#");
	at = memrchr(host, '@', (size_t)(end - host));
	if (at)
		host = at + 1;
	snprintf(out, n, "%.*s://%.*s", (int)(sep - url), url, (int)(end - host), host);
}

static void record(heartbeat_t *hb, bool ok, const char *why)
{
	if (ok) {
		hb->st.ok++;
		if (hb->failing)
			log_notice("heartbeat to %s: delivered again", hb->where);
		hb->failing = false;
		return;
	}
	hb->st.failed++;
	if (!hb->failing)
		log_warning("heartbeat to %s failed: %s (logged again only once it recovers)",
		            hb->where, why);
	hb->failing = true;
}

static void on_done(http_req_t *req, const struct http_response *resp, void *userdata)
{
	heartbeat_t *hb = userdata;
	char why[192];

	hb->req = NULL;
	if (resp->error)
		snprintf(why, sizeof(why), "%s",
		         resp->error_message ? resp->error_message : strerror(-resp->error));
	else
		snprintf(why, sizeof(why), "HTTP %ld", resp->status);
	record(hb, !resp->error && resp->status >= 200 && resp->status < 300, why);
}

static void send_ping(heartbeat_t *hb)
{
	struct http_request rq = {
	    .method = "HEAD",
	    .url = hb->url,
	    .connect_timeout = hb->timeout,
	    .timeout = hb->timeout,
	    .max_response = 4096,
	    .label = "heartbeat",
	};
	int r = http_send(hb->http, &rq, on_done, hb, &hb->req);

	if (r < 0) {
		hb->req = NULL;
		record(hb, false, strerror(-r));
		return;
	}
	hb->st.sent++;
}

/* Fixed cadence; after a stall (a loop that did not run for a while) the
 * missed ticks are dropped, not sent in a burst. */
static void schedule_next(heartbeat_t *hb)
{
	hb->next += hb->interval;
	if (hb->next <= ev_now(hb->ev))
		hb->next = ev_now(hb->ev) + hb->interval;
	ev_timer_arm_at(hb->timer, hb->next);
}

static bool check_healthy(heartbeat_t *hb)
{
	bool ok = !hb->healthy || hb->healthy(hb->userdata);

	if (ok == !hb->paused)
		return ok;
	hb->paused = !ok;
	if (ok)
		log_info("heartbeat to %s resumed: healthy again", hb->where);
	else
		log_info("heartbeat to %s paused: not healthy", hb->where);
	return ok;
}

static void on_tick(ev_timer_t *t, void *userdata)
{
	heartbeat_t *hb = userdata;

	schedule_next(hb);
	if (!check_healthy(hb))
		hb->st.skipped_unhealthy++;
	else if (hb->req) {
		hb->st.skipped_busy++;
		log_debug("heartbeat to %s: previous request still in flight, skipping this one",
		          hb->where);
	} else
		send_ping(hb);
}

int heartbeat_new(ev_t *e, const struct heartbeat_opts *o, heartbeat_t **ret)
{
	const struct http_opts ho = {.ca_file = o->ca_file};
	heartbeat_t *hb;
	int r;

	if (!o->url || o->interval == 0 || o->interval == USEC_INFINITY)
		return -EINVAL;
	hb = calloc(1, sizeof(*hb));
	if (!hb)
		return -ENOMEM;
	*hb = (struct heartbeat){
	    .ev = e,
	    .interval = o->interval,
	    .timeout = o->timeout ? o->timeout : MIN(o->interval, DEFAULT_TIMEOUT),
	    .healthy = o->healthy,
	    .userdata = o->userdata,
	    .next = ev_now(e),
	};
	redact_url(o->url, hb->where, sizeof(hb->where));
	hb->url = strdup(o->url);
	r = hb->url ? http_new(e, &ho, &hb->http) : -ENOMEM;
	if (r >= 0)
		r = ev_timer_add(e, USEC_INFINITY, on_tick, hb, &hb->timer);
	if (r < 0) {
		heartbeat_free(hb);
		return r;
	}
	schedule_next(hb);
	*ret = hb;
	return 0;
}

heartbeat_t *heartbeat_free(heartbeat_t *hb)
{
	if (!hb)
		return NULL;
	http_free(hb->http); /* cancels the request in flight, without its callback */
	ev_timer_del(hb->timer);
	free(hb->url);
	free(hb);
	return NULL;
}

void heartbeat_get_stats(const heartbeat_t *hb, struct heartbeat_stats *ret)
{
	*ret = hb->st;
}
