/* Showing a configuration (--check-config), comparing two (SIGHUP), and keeping
 * the restart-only part of the running one.  All of it goes through the key
 * tables and conf_value_format(), so a new key needs no code here. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf-int.h"
#include "util/macro.h"
#include "util/strutil.h"

static void print_key(FILE *f, const struct conf_key *k, const void *base)
{
	_cleanup_free_ char *v = conf_value_format(k, base, true);

	fprintf(f, "%s =%s%s\n", k->name, v && *v ? " " : "", v ? v : "");
}

static void print_token(FILE *f, const struct conf *c)
{
	if (c->api.token)
		fprintf(f, "# token: set, %zu bytes, read from %s\n", strlen(c->api.token),
		        c->api.token_path);
	else
		fputs("# token: not set, requests carry no Authorization header\n", f);
}

static void print_key_secret(FILE *f, const struct conf *c)
{
	if (c->api.key_secret)
		fprintf(f, "# key secret: set, %zu bytes, read from %s\n",
		        strlen(c->api.key_secret), c->api.key_secret_file);
}

static void print_password(FILE *f, const struct conf *c)
{
	if (c->api.password)
		fprintf(f, "# password: set, %zu bytes, read from %s\n", strlen(c->api.password),
		        c->api.password_file);
}

int conf_print(const struct conf *c, FILE *f)
{
	const char *section = NULL;

	fputs("# lessee: effective configuration (secrets redacted)\n", f);
	for (size_t i = 0; c->sources[i]; i++)
		fprintf(f, "# read %s\n", c->sources[i]);
	for (size_t i = 0; i < conf_n_keys; i++) {
		const struct conf_key *k = &conf_keys[i];

		if (!section || !streq(section, k->section))
			fprintf(f, "\n[%s]\n", k->section);
		section = k->section;
		if (conf_key_foreign(c->api.protocol, k->section, k->name))
			continue;
		print_key(f, k, c);
		if (k->offset == offsetof(struct conf, api.token_file))
			print_token(f, c);
		if (k->offset == offsetof(struct conf, api.key_secret_file))
			print_key_secret(f, c);
		if (k->offset == offsetof(struct conf, api.password_file))
			print_password(f, c);
	}
	for (size_t w = 0; w < c->n_workflows; w++) {
		fprintf(f, "\n[workflow.%s]\n", c->workflows[w].name);
		for (size_t i = 0; i < conf_n_wf_keys; i++)
			if (!conf_key_foreign(c->api.protocol, "workflow", conf_wf_keys[i].name))
				print_key(f, &conf_wf_keys[i], &c->workflows[w]);
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -EIO;
}

/* ---- diff ---- */

struct changes {
	struct conf_change *v;
	size_t n;
};

_printf_(3, 4) static int add_change(struct changes *ch, bool live, const char *fmt, ...)
{
	struct conf_change *nv = realloc(ch->v, (ch->n + 1) * sizeof(*nv));
	va_list ap;
	int n;

	if (!nv)
		return -ENOMEM;
	ch->v = nv;
	va_start(ap, fmt);
	n = vasprintf(&nv[ch->n].description, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	nv[ch->n++].live = live;
	return 0;
}

static const char *shown(const char *v)
{
	return *v ? v : "(unset)";
}

/* Compared in full, described redacted: a changed secret is reported, never shown. */
static int diff_key(struct changes *ch, const char *prefix, const struct conf_key *k, const void *a,
                    const void *b)
{
	_cleanup_free_ char *fa = conf_value_format(k, a, false);
	_cleanup_free_ char *fb = conf_value_format(k, b, false);
	_cleanup_free_ char *ra = NULL, *rb = NULL;
	bool live = k->flags & KEY_LIVE;

	if (!fa || !fb)
		return -ENOMEM;
	if (streq(fa, fb))
		return 0;
	ra = conf_value_format(k, a, true);
	rb = conf_value_format(k, b, true);
	if (!ra || !rb)
		return -ENOMEM;
	if (streq(ra, rb))
		return add_change(ch, live, "%s.%s: changed (secret values not shown)", prefix,
		                  k->name);
	return add_change(ch, live, "%s.%s: %s -> %s", prefix, k->name, shown(ra), shown(rb));
}

static int diff_workflow(struct changes *ch, const struct conf_workflow *a,
                         const struct conf_workflow *b)
{
	_cleanup_free_ char *prefix = NULL;
	int r = 0;

	if (asprintf(&prefix, "workflow.%s", a->name) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < conf_n_wf_keys && r >= 0; i++)
		r = diff_key(ch, prefix, &conf_wf_keys[i], a, b);
	return r;
}

static int diff_workflows(struct changes *ch, const struct conf *a, const struct conf *b)
{
	size_t i = 0, j = 0;
	int r = 0;

	while ((i < a->n_workflows || j < b->n_workflows) && r >= 0) {
		int cmp = i == a->n_workflows ? 1
		          : j == b->n_workflows
		              ? -1
		              : strcmp(a->workflows[i].name, b->workflows[j].name);

		if (cmp < 0)
			r = add_change(ch, true, "workflow.%s: removed", a->workflows[i++].name);
		else if (cmp > 0)
			r = add_change(ch, true, "workflow.%s: added", b->workflows[j++].name);
		else
			r = diff_workflow(ch, &a->workflows[i++], &b->workflows[j++]);
	}
	return r;
}

static int diff_token(struct changes *ch, const struct conf *a, const struct conf *b)
{
	if (streq_ptr(a->api.token, b->api.token))
		return 0;
	return add_change(ch, false, "api.token: %s",
	                  !a->api.token   ? "set"
	                  : !b->api.token ? "removed"
	                                  : "changed");
}

/* A secret read at load: whether it changed, never what it is. */
static int diff_secret(struct changes *ch, const char *name, const char *a, const char *b)
{
	if (streq_ptr(a, b))
		return 0;
	return add_change(ch, false, "api.%s: %s", name, !a ? "set" : !b ? "removed" : "changed");
}

static int diff_key_secret(struct changes *ch, const struct conf *a, const struct conf *b)
{
	return diff_secret(ch, "key_secret", a->api.key_secret, b->api.key_secret);
}

int conf_diff(const struct conf *old, const struct conf *new, struct conf_change **ret,
              size_t *ret_n)
{
	struct changes ch = {0};
	int r = 0;

	for (size_t i = 0; i < conf_n_keys && r >= 0; i++) {
		r = diff_key(&ch, conf_keys[i].section, &conf_keys[i], old, new);
		if (r >= 0 && conf_keys[i].offset == offsetof(struct conf, api.token_file))
			r = diff_token(&ch, old, new);
		if (r >= 0 && conf_keys[i].offset == offsetof(struct conf, api.key_secret_file))
			r = diff_key_secret(&ch, old, new);
		if (r >= 0 && conf_keys[i].offset == offsetof(struct conf, api.password_file))
			r = diff_secret(&ch, "password", old->api.password, new->api.password);
	}
	if (r >= 0)
		r = diff_workflows(&ch, old, new);
	if (r < 0) {
		conf_changes_free(ch.v, ch.n);
		return r;
	}
	*ret = ch.v;
	*ret_n = ch.n;
	return 0;
}

struct conf_change *conf_changes_free(struct conf_change *c, size_t n)
{
	for (size_t i = 0; c && i < n; i++)
		free(c[i].description);
	free(c);
	return NULL;
}

/* ---- reload ---- */

static int retain_token(struct conf *next, const struct conf *cur)
{
	char *t = cur->api.token ? strdup(cur->api.token) : NULL;
	char *p = cur->api.token_path ? strdup(cur->api.token_path) : NULL;

	if ((cur->api.token && !t) || (cur->api.token_path && !p)) {
		free(t);
		free(p);
		return -ENOMEM;
	}
	if (next->api.token)
		explicit_bzero(next->api.token, strlen(next->api.token));
	free(next->api.token);
	free(next->api.token_path);
	next->api.token = t;
	next->api.token_path = p;
	return 0;
}

static int retain_secret(char **next, const char *cur)
{
	char *t = cur ? strdup(cur) : NULL;

	if (cur && !t)
		return -ENOMEM;
	if (*next)
		explicit_bzero(*next, strlen(*next));
	free(*next);
	*next = t;
	return 0;
}

int conf_retain_restart_fields(struct conf *next, const struct conf *cur)
{
	char problem[CONF_PROBLEM_MAX];
	int r = 0;

	/* format + parse copies any type; a value that was valid stays valid */
	for (size_t i = 0; i < conf_n_keys && r >= 0; i++) {
		const struct conf_key *k = &conf_keys[i];
		_cleanup_free_ char *v = NULL;

		if (k->flags & KEY_LIVE)
			continue;
		v = conf_value_format(k, cur, false);
		r = v ? conf_value_parse(k, next, v, problem) : -ENOMEM;
	}
	if (r >= 0)
		r = retain_token(next, cur);
	if (r >= 0)
		r = retain_secret(&next->api.key_secret, cur->api.key_secret);
	return r < 0 ? r : retain_secret(&next->api.password, cur->api.password);
}
