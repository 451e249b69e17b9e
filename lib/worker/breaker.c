#include "worker/breaker.h"

void breaker_init(struct breaker *b, unsigned threshold, usec_t cooldown, usec_t cooldown_max)
{
	*b = (struct breaker){
	    .state = BREAKER_CLOSED,
	    .threshold = threshold,
	    .cooldown_base = cooldown,
	    .cooldown_max = cooldown_max < cooldown ? cooldown : cooldown_max,
	    .cooldown = cooldown,
	};
}

bool breaker_tick(struct breaker *b, usec_t now)
{
	if (b->state != BREAKER_OPEN || now < b->open_until)
		return false;
	b->state = BREAKER_HALF_OPEN;
	return true;
}

bool breaker_allows(const struct breaker *b)
{
	switch (b->state) {
	case BREAKER_CLOSED:
		/* verdicts on their way count as failures that may come only once
		 * a failure is in the count: a healthy workflow at 16 slots has more
		 * runs flushing at once than the threshold, and holding its claims
		 * for them cut its throughput thirtyfold (check_breaker) */
		return !b->threshold || b->failures == 0 || b->failures + b->pending < b->threshold;
	case BREAKER_HALF_OPEN:
		return b->trials == 0;
	default:
		return false;
	}
}

void breaker_run_started(struct breaker *b)
{
	if (b->state == BREAKER_HALF_OPEN)
		b->trials++;
}

void breaker_run_abandoned(struct breaker *b)
{
	if (b->state == BREAKER_HALF_OPEN && b->trials > 0)
		b->trials--;
}

void breaker_pending(struct breaker *b)
{
	b->pending++;
}

void breaker_settled(struct breaker *b)
{
	if (b->pending > 0)
		b->pending--;
}

static void trip(struct breaker *b, usec_t now)
{
	b->state = BREAKER_OPEN;
	b->open_until = now + b->cooldown;
	b->opened_count++;
	b->trials = 0;
	/* the next opening, if the trial fails, lasts twice as long */
	b->cooldown = b->cooldown > b->cooldown_max / 2 ? b->cooldown_max : b->cooldown * 2;
}

bool breaker_record(struct breaker *b, bool failed, usec_t now)
{
	enum breaker_state before = b->state;

	if (b->state == BREAKER_HALF_OPEN && b->trials > 0)
		b->trials--;
	if (!failed) {
		b->failures = 0;
		b->state = BREAKER_CLOSED;
		b->cooldown = b->cooldown_base;
		return before != BREAKER_CLOSED;
	}
	b->failures++;
	if (b->state == BREAKER_HALF_OPEN ||
	    (b->state == BREAKER_CLOSED && b->threshold && b->failures >= b->threshold))
		trip(b, now);
	return before != b->state;
}

const char *breaker_state_name(enum breaker_state s)
{
	static const char *const names[] = {"closed", "open", "half-open"};

	return names[s];
}
