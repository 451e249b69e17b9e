/* Poison-pill circuit breaker, one per workflow.
 *
 * CLOSED --N consecutive failures--> OPEN --cooldown--> HALF_OPEN
 * HALF_OPEN: one trial run at a time; success -> CLOSED (cooldown reset),
 * failure -> OPEN with the cooldown doubled (capped).
 * Lease loss, cancellation and release never reach the breaker. */
#pragma once

#include <stdbool.h>

#include "util/time.h"

enum breaker_state { BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN };

struct breaker {
	enum breaker_state state;
	unsigned failures;  /* consecutive */
	unsigned threshold; /* max_consecutive_failures; 0 = never opens */
	usec_t cooldown_base, cooldown_max;
	usec_t cooldown;   /* the one in force (or next) */
	usec_t open_until; /* monotonic */
	unsigned trials;   /* trial runs in flight while HALF_OPEN */
	unsigned pending;  /* runs whose child is gone, their verdict not yet known */
	unsigned opened_count;
};

void breaker_init(struct breaker *b, unsigned threshold, usec_t cooldown, usec_t cooldown_max);
/* Advance OPEN -> HALF_OPEN when the cooldown is over.  Returns true on a change. */
bool breaker_tick(struct breaker *b, usec_t now);
/* May a run of this workflow be claimed / started now?  Not while the runs
 * whose verdict is pending could, all failing, reach the threshold. */
bool breaker_allows(const struct breaker *b);
/* A run of this workflow starts (counts the trial while HALF_OPEN). */
void breaker_run_started(struct breaker *b);
/* The outcome of a run that was started: returns true when the state changed. */
bool breaker_record(struct breaker *b, bool failed, usec_t now);
/* A started run ended without a verdict (lease lost, cancelled, released). */
void breaker_run_abandoned(struct breaker *b);
/* A started run's child is gone; its verdict comes later (breaker_settled). */
void breaker_pending(struct breaker *b);
/* The verdict of a pending run is in (recorded, abandoned or dropped). */
void breaker_settled(struct breaker *b);
const char *breaker_state_name(enum breaker_state s);
