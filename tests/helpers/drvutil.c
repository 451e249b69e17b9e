#include "drvutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf/conf.h"

void tu_driver(ev_t *e, const struct drv_ops *ops, const char *url, const char *id,
               const char *token, metrics_t **ret_m, drv_t **ret_d, drv_run_t **ret_run)
{
	char url_copy[256], worker_id[] = "w1";
	struct conf c = {
	    .api = {.url = url_copy, .request_timeout = 30 * USEC_PER_SEC},
	    .worker = {.id = worker_id},
	};
	char *body = NULL;

	ck_assert_uint_lt((size_t)snprintf(url_copy, sizeof(url_copy), "%s", url),
	                  sizeof(url_copy));
	*ret_m = metrics_new();
	ck_assert_ptr_nonnull(*ret_m);
	ck_assert_int_eq(drv_new_ops(e, &c, *ret_m, ops, ret_d), 0);
	ck_assert_int_ge(asprintf(&body, "{\"token\":\"%s\"}", token), 0);
	ck_assert_int_eq(ops->restore(*ret_d, id, body, ret_run), 0);
	free(body);
}

void tu_native_driver(ev_t *e, const char *url, const char *id, const char *token,
                      metrics_t **ret_m, drv_t **ret_d, drv_run_t **ret_run)
{
	tu_driver(e, &drv_native_ops, url, id, token, ret_m, ret_d, ret_run);
}
