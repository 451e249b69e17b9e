/* The PostgreSQL backend: not there yet. */
#include "lessor/store-int.h"

#include <errno.h>

#include "log/log.h"

static int pg_open(const char *target, const struct lessor_store_config *cfg, void **ret)
{
	log_error("this lessor has no PostgreSQL backend yet");
	return -EPROTONOSUPPORT;
}

const struct lessor_store_backend lessor_store_backend_pg = {
    .name = "postgresql",
    .open = pg_open,
};
