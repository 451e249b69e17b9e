#include "lessor/faults.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "util/macro.h"
#include "util/strutil.h"

struct lessor_faults {
	pthread_mutex_t lock;
	struct lessor_fault armed[_LESSOR_EP_MAX];
};

static const char *const endpoint_names[_LESSOR_EP_MAX] = {
    [LESSOR_EP_CLAIMS] = "claims",     [LESSOR_EP_LEASE] = "lease",     [LESSOR_EP_LOG] = "log",
    [LESSOR_EP_COMPLETE] = "complete", [LESSOR_EP_RELEASE] = "release",
};

lessor_faults *lessor_faults_new(void)
{
	lessor_faults *f = calloc(1, sizeof(*f));

	if (f)
		pthread_mutex_init(&f->lock, NULL);
	return f;
}

lessor_faults *lessor_faults_free(lessor_faults *f)
{
	if (!f)
		return NULL;
	pthread_mutex_destroy(&f->lock);
	free(f);
	return NULL;
}

int lessor_endpoint_from_name(const char *name, enum lessor_endpoint *ret)
{
	for (int i = 0; i < _LESSOR_EP_MAX; i++)
		if (name && streq(name, endpoint_names[i])) {
			*ret = (enum lessor_endpoint)i;
			return 0;
		}
	return -EINVAL;
}

const char *lessor_endpoint_name(enum lessor_endpoint ep)
{
	return ep >= 0 && ep < _LESSOR_EP_MAX ? endpoint_names[ep] : NULL;
}

void lessor_faults_set(lessor_faults *f, enum lessor_endpoint ep, const struct lessor_fault *x)
{
	pthread_mutex_lock(&f->lock);
	f->armed[ep] = *x;
	f->armed[ep].seen = 0;
	pthread_mutex_unlock(&f->lock);
}

void lessor_faults_clear(lessor_faults *f)
{
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < _LESSOR_EP_MAX; i++)
		f->armed[i] = (struct lessor_fault){0};
	pthread_mutex_unlock(&f->lock);
}

/* Counts one request against the fault of ep if it affects it (count and
 * every); called with the lock held. */
static bool take_locked(struct lessor_fault *x, struct lessor_fault *ret)
{
	if (x->count == 0)
		return false;
	x->seen++;
	if (x->every > 1 && x->seen % x->every != 0)
		return false;
	x->count--;
	*ret = *x;
	return true;
}

bool lessor_faults_take(lessor_faults *f, enum lessor_endpoint ep, struct lessor_fault *ret)
{
	bool hit;

	if (!f || ep < 0 || ep >= _LESSOR_EP_MAX)
		return false;
	pthread_mutex_lock(&f->lock);
	hit = take_locked(&f->armed[ep], ret);
	pthread_mutex_unlock(&f->lock);
	return hit;
}

bool lessor_faults_take_plain(lessor_faults *f, enum lessor_endpoint ep, struct lessor_fault *ret)
{
	bool hit = false;

	if (!f || ep < 0 || ep >= _LESSOR_EP_MAX)
		return false;
	pthread_mutex_lock(&f->lock);
	if (!f->armed[ep].legacy)
		hit = take_locked(&f->armed[ep], ret);
	pthread_mutex_unlock(&f->lock);
	return hit;
}

bool lessor_faults_take_legacy(lessor_faults *f, enum lessor_endpoint ep)
{
	struct lessor_fault x;
	bool hit = false;

	if (!f || ep < 0 || ep >= _LESSOR_EP_MAX)
		return false;
	pthread_mutex_lock(&f->lock);
	if (f->armed[ep].legacy)
		hit = take_locked(&f->armed[ep], &x);
	pthread_mutex_unlock(&f->lock);
	return hit;
}

cJSON *lessor_faults_json(lessor_faults *f)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < _LESSOR_EP_MAX; i++) {
		const struct lessor_fault *x = &f->armed[i];
		cJSON *e;

		if (x->count == 0)
			continue;
		e = cJSON_AddObjectToObject(o, endpoint_names[i]);
		if (!e)
			break;
		cJSON_AddNumberToObject(e, "status", x->status);
		cJSON_AddNumberToObject(e, "count", x->count);
		cJSON_AddNumberToObject(e, "retry_after_s", x->retry_after_s);
		cJSON_AddNumberToObject(e, "delay_ms", x->delay_ms);
		cJSON_AddNumberToObject(e, "every", x->every > 1 ? x->every : 1);
		if (x->legacy)
			cJSON_AddBoolToObject(e, "legacy", true);
		if (x->lose_answer)
			cJSON_AddBoolToObject(e, "lose_answer", true);
	}
	pthread_mutex_unlock(&f->lock);
	return o;
}
