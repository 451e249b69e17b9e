/* The housekeeping thread: resumes parked requests at their deadline, and
 * every `tick` runs lessor_store_tick() (expire leases, notice runs whose
 * retry/release delay ran out) and wakes the long polls when a run became
 * claimable that way. */
#pragma once

#include "lessor/store.h"
#include "lessor/waiters.h"
#include "util/time.h"

typedef struct lessor_reaper lessor_reaper;

int lessor_reaper_start(lessor_store *s, lessor_waiters *w, usec_t tick, lessor_reaper **ret);
/* Stops and joins the thread. */
lessor_reaper *lessor_reaper_stop(lessor_reaper *r);
