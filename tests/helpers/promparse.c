/* Strict Prometheus text format 0.0.4 parser for tests; see promparse.h. */
#include "promparse.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/macro.h"

#define MAX_PAIRS 16

struct parser {
	const char *p, *end; /* the current line, without its '\n' */
	size_t line;
	prom_doc_t *doc;
	size_t fam_alloc, smp_alloc;
	struct prom_family *current; /* the family whose lines we are in */
	bool *typed;                 /* per family: had a TYPE line */
	char err[512];
};

static const char *const type_names[] = {
    [PROM_UNTYPED] = "untyped",     [PROM_COUNTER] = "counter", [PROM_GAUGE] = "gauge",
    [PROM_HISTOGRAM] = "histogram", [PROM_SUMMARY] = "summary",
};

const char *prom_type_name(enum prom_type t)
{
	return (size_t)t < ELEMENTSOF(type_names) ? type_names[t] : "?";
}

static int fail_at(struct parser *ps, size_t line, const char *fmt, ...) _printf_(3, 4);
static int fail_at(struct parser *ps, size_t line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(ps->err, sizeof(ps->err), "line %zu: ", line);

	va_start(ap, fmt);
	vsnprintf(ps->err + n, sizeof(ps->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

#define fail(ps, ...) fail_at(ps, (ps)->line, __VA_ARGS__)

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void skip_blanks(struct parser *ps)
{
	while (ps->p < ps->end && is_blank(*ps->p))
		ps->p++;
}

static bool at_end(const struct parser *ps)
{
	return ps->p >= ps->end;
}

/* Up to the next blank or the end of the line. */
static size_t token(struct parser *ps, const char **ret)
{
	const char *s = ps->p;

	while (ps->p < ps->end && !is_blank(*ps->p))
		ps->p++;
	*ret = s;
	return (size_t)(ps->p - s);
}

static bool tok_is(const char *t, size_t n, const char *word)
{
	return n == strlen(word) && memcmp(t, word, n) == 0;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i], len, cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			len = 2, cp = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			len = 3, cp = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			len = 4, cp = c & 0x07;
		else
			return false;
		if (i + len > n)
			return false;
		for (unsigned k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

static bool name_char(char c, bool first, bool metric)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':'))
		return true;
	return !first && c >= '0' && c <= '9';
}

static int read_name(struct parser *ps, bool metric, char **ret)
{
	const char *s = ps->p;

	while (ps->p < ps->end && name_char(*ps->p, ps->p == s, metric))
		ps->p++;
	if (ps->p == s)
		return fail(ps, "expected a %s name at \"%.20s\"", metric ? "metric" : "label", s);
	*ret = strndup(s, (size_t)(ps->p - s));
	return *ret ? 0 : -ENOMEM;
}

/* Unescape to the end of the line (HELP text), or up to an unescaped '"'
 * (label value, which may also escape '"'). */
static int read_escaped(struct parser *ps, bool quoted, char **ret)
{
	struct buf b = BUF_INIT(0);
	int r = buf_reserve(&b, 0);

	while (r >= 0) {
		char c;

		if (at_end(ps)) {
			if (quoted)
				r = fail(ps, "unterminated label value");
			break;
		}
		c = *ps->p++;
		if (quoted && c == '"')
			break;
		if (c == '\\') {
			char e = at_end(ps) ? ' ' : *ps->p++;

			if (e == 'n')
				c = '\n';
			else if (e == '\\' || (quoted && e == '"'))
				c = e;
			else {
				r = fail(ps, "invalid escape sequence '\\%c'", e);
				break;
			}
		}
		r = buf_append(&b, &c, 1);
	}
	if (r >= 0 && !utf8_valid((const unsigned char *)b.data, b.len))
		r = fail(ps, "invalid UTF-8 in %s", quoted ? "a label value" : "HELP text");
	if (r < 0) {
		buf_done(&b);
		return r;
	}
	*ret = buf_steal(&b);
	return 0;
}

/* [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)?, NaN, +Inf, -Inf.  Nothing else. */
static int parse_float(const char *s, size_t n, double *ret)
{
	char tmp[64];
	size_t i = 0, digits = 0;
	char *e;

	if (tok_is(s, n, "NaN") || tok_is(s, n, "+Inf") || tok_is(s, n, "-Inf")) {
		*ret = s[0] == 'N' ? NAN : s[0] == '+' ? INFINITY : -INFINITY;
		return 0;
	}
	if (n == 0 || n >= sizeof(tmp))
		return -EINVAL;
	if (s[i] == '+' || s[i] == '-')
		i++;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
		digits++;
	if (i < n && s[i] == '.')
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
	if (!digits)
		return -EINVAL;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		size_t d0;

		if (++i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		for (d0 = i; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
		if (i == d0)
			return -EINVAL;
	}
	if (i != n)
		return -EINVAL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	errno = 0;
	*ret = strtod(tmp, &e);
	return errno == ERANGE && isinf(*ret) ? -ERANGE : 0;
}

static int parse_int64(const char *s, size_t n, int64_t *ret)
{
	char tmp[32];
	char *e;
	long long v;

	if (n == 0 || n >= sizeof(tmp) || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
		return -EINVAL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	errno = 0;
	v = strtoll(tmp, &e, 10);
	if (errno || *e || e == tmp || (tmp[0] == '-' && n == 1))
		return -EINVAL;
	*ret = v;
	return 0;
}

static void labels_free(struct prom_label *l, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(l[i].name);
		free(l[i].value);
	}
	free(l);
}

static void sample_done(struct prom_sample *s)
{
	free(s->name);
	labels_free(s->labels, s->n_labels);
}

prom_doc_t *prom_free(prom_doc_t *d)
{
	if (!d)
		return NULL;
	for (size_t i = 0; i < d->n_samples; i++)
		sample_done(&d->samples[i]);
	for (size_t i = 0; i < d->n_families; i++) {
		free(d->families[i].name);
		free(d->families[i].help);
	}
	free(d->samples);
	free(d->families);
	free(d);
	return NULL;
}

static bool has_suffix(const char *s, const char *base, const char *suffix)
{
	size_t n = strlen(base);

	return strncmp(s, base, n) == 0 && strcmp(s + n, suffix) == 0;
}

/* Is a sample called `name` one of this family's? */
static bool family_owns(const struct prom_family *f, const char *name)
{
	switch (f->type) {
	case PROM_HISTOGRAM:
		return has_suffix(name, f->name, "_bucket") || has_suffix(name, f->name, "_sum") ||
		       has_suffix(name, f->name, "_count");
	case PROM_SUMMARY:
		return strcmp(name, f->name) == 0 || has_suffix(name, f->name, "_sum") ||
		       has_suffix(name, f->name, "_count");
	default:
		return strcmp(name, f->name) == 0;
	}
}

static struct prom_family *family_named(struct parser *ps, const char *name)
{
	for (size_t i = 0; i < ps->doc->n_families; i++)
		if (strcmp(ps->doc->families[i].name, name) == 0)
			return &ps->doc->families[i];
	return NULL;
}

static struct prom_family *family_owning(struct parser *ps, const char *name)
{
	for (size_t i = 0; i < ps->doc->n_families; i++)
		if (family_owns(&ps->doc->families[i], name))
			return &ps->doc->families[i];
	return NULL;
}

static int family_add(struct parser *ps, const char *name, struct prom_family **ret)
{
	prom_doc_t *d = ps->doc;
	struct prom_family *f;

	if (d->n_families == ps->fam_alloc) {
		size_t na = ps->fam_alloc ? ps->fam_alloc * 2 : 16;
		void *nf = realloc(d->families, na * sizeof(*d->families));
		bool *nt = realloc(ps->typed, na * sizeof(bool));

		if (nf)
			d->families = nf;
		if (nt)
			ps->typed = nt;
		if (!nf || !nt)
			return -ENOMEM;
		ps->fam_alloc = na;
	}
	f = &d->families[d->n_families];
	*f = (struct prom_family){.name = strdup(name), .first = d->n_samples};
	if (!f->name)
		return -ENOMEM;
	ps->typed[d->n_families++] = false;
	*ret = ps->current = f;
	return 0;
}

/* The family a HELP or TYPE line is about: the current one, or a new one. */
static int family_for_decl(struct parser *ps, const char *name, struct prom_family **ret)
{
	struct prom_family *f;

	if (ps->current && strcmp(ps->current->name, name) == 0) {
		if (ps->current->n)
			return fail(ps, "HELP/TYPE for %s after its samples", name);
		*ret = ps->current;
		return 0;
	}
	if ((f = family_named(ps, name)) || (f = family_owning(ps, name)))
		return fail(ps, "lines of %s are not together with the other lines of %s", name,
		            f->name);
	return family_add(ps, name, ret);
}

/* A histogram or summary claims name_sum, name_count (and name_bucket):
 * no other family may be called that. */
static int check_type_names(struct parser *ps, const struct prom_family *f)
{
	static const char *const suffixes[] = {"_bucket", "_sum", "_count"};

	for (size_t i = 0; i < ps->doc->n_families; i++)
		for (size_t k = 0; k < ELEMENTSOF(suffixes); k++)
			if (has_suffix(ps->doc->families[i].name, f->name, suffixes[k]) &&
			    (f->type == PROM_HISTOGRAM || k > 0))
				return fail(ps, "family %s clashes with %s %s",
				            ps->doc->families[i].name, type_names[f->type],
				            f->name);
	return 0;
}

static int parse_help(struct parser *ps)
{
	_cleanup_free_ char *name = NULL;
	struct prom_family *f;
	int r;

	skip_blanks(ps);
	if ((r = read_name(ps, true, &name)) < 0 || (r = family_for_decl(ps, name, &f)) < 0)
		return r;
	if (f->help)
		return fail(ps, "second HELP line for %s", name);
	if (!at_end(ps) && !is_blank(*ps->p))
		return fail(ps, "expected a blank after the metric name");
	skip_blanks(ps);
	return read_escaped(ps, false, &f->help);
}

static int parse_type(struct parser *ps)
{
	_cleanup_free_ char *name = NULL;
	struct prom_family *f;
	const char *t;
	size_t n, i;
	int r;

	skip_blanks(ps);
	if ((r = read_name(ps, true, &name)) < 0 || (r = family_for_decl(ps, name, &f)) < 0)
		return r;
	if (ps->typed[f - ps->doc->families])
		return fail(ps, "second TYPE line for %s", name);
	if (!at_end(ps) && !is_blank(*ps->p))
		return fail(ps, "expected a blank after the metric name");
	skip_blanks(ps);
	n = token(ps, &t);
	for (i = 0; i < ELEMENTSOF(type_names); i++)
		if (tok_is(t, n, type_names[i]))
			break;
	if (i == ELEMENTSOF(type_names))
		return fail(ps, "unknown metric type \"%.*s\"", (int)n, t);
	skip_blanks(ps);
	if (!at_end(ps))
		return fail(ps, "text after the TYPE");
	f->type = (enum prom_type)i;
	ps->typed[f - ps->doc->families] = true;
	return check_type_names(ps, f);
}

static int parse_comment(struct parser *ps)
{
	const char *t;
	size_t n;

	ps->p++; /* '#' */
	skip_blanks(ps);
	n = token(ps, &t);
	if (tok_is(t, n, "HELP"))
		return parse_help(ps);
	if (tok_is(t, n, "TYPE"))
		return parse_type(ps);
	return 0; /* a plain comment */
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct prom_label *)a)->name, ((const struct prom_label *)b)->name);
}

static int add_label(struct parser *ps, struct prom_sample *s, char *name, char *value)
{
	struct prom_label *nl;

	for (size_t i = 0; i < s->n_labels; i++)
		if (strcmp(s->labels[i].name, name) == 0) {
			free(name);
			free(value);
			return fail(ps, "label %s twice", s->labels[i].name);
		}
	nl = realloc(s->labels, (s->n_labels + 1) * sizeof(*nl));
	if (!nl) {
		free(name);
		free(value);
		return -ENOMEM;
	}
	s->labels = nl;
	s->labels[s->n_labels++] = (struct prom_label){name, value};
	return 0;
}

static int parse_one_label(struct parser *ps, struct prom_sample *s)
{
	char *name = NULL, *value = NULL;
	int r = read_name(ps, false, &name);

	if (r < 0)
		return r;
	if (strncmp(name, "__", 2) == 0) {
		fail(ps, "label name %s is reserved", name);
		free(name);
		return -EINVAL;
	}
	skip_blanks(ps);
	if (at_end(ps) || *ps->p++ != '=')
		r = fail(ps, "expected '=' after label %s", name);
	skip_blanks(ps);
	if (r >= 0 && (at_end(ps) || *ps->p++ != '"'))
		r = fail(ps, "expected '\"' to open the value of label %s", name);
	if (r >= 0)
		r = read_escaped(ps, true, &value);
	if (r < 0) {
		free(name);
		return r;
	}
	return add_label(ps, s, name, value);
}

/* {name="value",...} with blanks allowed between tokens and a trailing comma. */
static int parse_labels(struct parser *ps, struct prom_sample *s)
{
	int r;

	ps->p++; /* '{' */
	for (;;) {
		skip_blanks(ps);
		if (!at_end(ps) && *ps->p == '}')
			break;
		if ((r = parse_one_label(ps, s)) < 0)
			return r;
		skip_blanks(ps);
		if (!at_end(ps) && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (at_end(ps) || *ps->p != '}')
			return fail(ps, "expected ',' or '}' in the labels");
		break;
	}
	ps->p++; /* '}' */
	qsort(s->labels, s->n_labels, sizeof(*s->labels), label_cmp);
	return 0;
}

/* The value must follow a blank, unless it follows the labels' '}'. */
static int parse_value_and_time(struct parser *ps, struct prom_sample *s, bool need_blank)
{
	const char *t;
	size_t n;

	if (need_blank && (at_end(ps) || !is_blank(*ps->p)))
		return fail(ps, "expected a blank before the value of %s", s->name);
	skip_blanks(ps);
	n = token(ps, &t);
	if (parse_float(t, n, &s->value) < 0)
		return fail(ps, "invalid value \"%.*s\" for %s", (int)MIN(n, 40), t, s->name);
	skip_blanks(ps);
	if (at_end(ps))
		return 0;
	n = token(ps, &t);
	if (parse_int64(t, n, &s->timestamp) < 0)
		return fail(ps, "invalid timestamp \"%.*s\"", (int)MIN(n, 40), t);
	s->has_timestamp = true;
	skip_blanks(ps);
	return at_end(ps) ? 0 : fail(ps, "text after the timestamp");
}

static bool labels_equal(const struct prom_sample *a, const struct prom_sample *b,
                         const char *except)
{
	size_t i = 0, k = 0;

	for (;;) {
		while (i < a->n_labels && except && strcmp(a->labels[i].name, except) == 0)
			i++;
		while (k < b->n_labels && except && strcmp(b->labels[k].name, except) == 0)
			k++;
		if (i == a->n_labels || k == b->n_labels)
			return i == a->n_labels && k == b->n_labels;
		if (strcmp(a->labels[i].name, b->labels[k].name) != 0 ||
		    strcmp(a->labels[i].value, b->labels[k].value) != 0)
			return false;
		i++, k++;
	}
}

/* The family a sample belongs to: the current one, or a new untyped one. */
static int family_for_sample(struct parser *ps, const char *name, struct prom_family **ret)
{
	struct prom_family *f;

	if (ps->current && family_owns(ps->current, name)) {
		*ret = ps->current;
		return 0;
	}
	if ((f = family_owning(ps, name)) || (f = family_named(ps, name)))
		return fail(ps, "sample %s is not together with the other lines of %s (%s)", name,
		            f->name, type_names[f->type]);
	return family_add(ps, name, ret);
}

static const char *label_of(const struct prom_sample *s, const char *name)
{
	for (size_t i = 0; i < s->n_labels; i++)
		if (strcmp(s->labels[i].name, name) == 0)
			return s->labels[i].value;
	return NULL;
}

/* Checks that need only the sample and its family's type. */
static int check_sample(struct parser *ps, const struct prom_family *f, const struct prom_sample *s)
{
	bool base = strcmp(s->name, f->name) == 0;
	bool bucket = f->type == PROM_HISTOGRAM && has_suffix(s->name, f->name, "_bucket");

	for (size_t i = 0; i < f->n; i++) {
		const struct prom_sample *o = &ps->doc->samples[f->first + i];

		if (strcmp(o->name, s->name) == 0 && labels_equal(o, s, NULL))
			return fail(ps, "sample %s repeats the labels of line %zu", s->name,
			            o->line);
	}
	if (f->type == PROM_COUNTER && !(s->value >= 0))
		return fail(ps, "counter %s has value %g", s->name, s->value);
	if (f->type == PROM_HISTOGRAM && bucket != (label_of(s, "le") != NULL))
		return fail(ps, "histogram %s: le belongs on _bucket samples only", f->name);
	if (f->type == PROM_SUMMARY && base != (label_of(s, "quantile") != NULL))
		return fail(ps, "summary %s: quantile belongs on %s samples only", f->name,
		            f->name);
	return 0;
}

static int sample_append(struct parser *ps, struct prom_sample *s)
{
	prom_doc_t *d = ps->doc;

	if (d->n_samples == ps->smp_alloc) {
		size_t na = ps->smp_alloc ? ps->smp_alloc * 2 : 64;
		void *ns = realloc(d->samples, na * sizeof(*d->samples));

		if (!ns)
			return -ENOMEM;
		d->samples = ns;
		ps->smp_alloc = na;
	}
	d->samples[d->n_samples++] = *s;
	return 0;
}

static int parse_sample(struct parser *ps)
{
	struct prom_sample s = {.line = ps->line};
	struct prom_family *f = NULL;
	bool braces = false;
	int r = read_name(ps, true, &s.name);

	if (r >= 0) {
		const char *after_name = ps->p;

		skip_blanks(ps);
		braces = !at_end(ps) && *ps->p == '{';
		if (braces)
			r = parse_labels(ps, &s);
		else
			ps->p = after_name;
	}
	if (r >= 0)
		r = parse_value_and_time(ps, &s, !braces);
	if (r >= 0)
		r = family_for_sample(ps, s.name, &f);
	if (r >= 0)
		r = check_sample(ps, f, &s);
	if (r >= 0)
		r = sample_append(ps, &s);
	if (r < 0) {
		sample_done(&s);
		return r;
	}
	f->n++;
	return 0;
}

static int parse_line(struct parser *ps)
{
	if (memchr(ps->p, '\0', (size_t)(ps->end - ps->p)))
		return fail(ps, "NUL byte");
	skip_blanks(ps);
	if (at_end(ps))
		return 0;
	if (*ps->p == '#')
		return parse_comment(ps);
	return parse_sample(ps);
}

/* Per label set (without le/quantile) of a histogram or summary. */
struct group {
	const struct prom_sample *key;
	double last_le, last_bucket, inf_bucket, count;
	bool has_inf, has_sum, has_count;
};

static struct group *group_of(struct group *g, size_t *n, const struct prom_sample *s,
                              const char *except)
{
	for (size_t i = 0; i < *n; i++)
		if (labels_equal(g[i].key, s, except))
			return &g[i];
	g[*n] = (struct group){.key = s, .last_le = -INFINITY};
	return &g[(*n)++];
}

static int check_bucket(struct parser *ps, const struct prom_family *f, struct group *g,
                        const struct prom_sample *s)
{
	const char *les = label_of(s, "le");
	double le;

	if (parse_float(les, strlen(les), &le) < 0 || isnan(le))
		return fail_at(ps, s->line, "histogram %s: le=\"%s\" is not a number", f->name,
		               les);
	if (!(le > g->last_le))
		return fail_at(ps, s->line, "histogram %s: le=\"%s\" after a bucket >= it", f->name,
		               les);
	if (!(s->value >= g->last_bucket) || isinf(s->value))
		return fail_at(ps, s->line, "histogram %s: bucket le=\"%s\" is not cumulative",
		               f->name, les);
	g->last_le = le;
	g->last_bucket = s->value;
	if (isinf(le)) {
		g->has_inf = true;
		g->inf_bucket = s->value;
	}
	return 0;
}

static int check_quantile(struct parser *ps, const struct prom_family *f,
                          const struct prom_sample *s)
{
	const char *qs = label_of(s, "quantile");
	double q;

	if (parse_float(qs, strlen(qs), &q) < 0 || !(q >= 0 && q <= 1))
		return fail_at(ps, s->line, "summary %s: quantile=\"%s\" is not in [0, 1]", f->name,
		               qs);
	return 0;
}

static int check_group_end(struct parser *ps, const struct prom_family *f, const struct group *g)
{
	size_t line = g->key->line;

	if (f->type == PROM_HISTOGRAM && !g->has_inf)
		return fail_at(ps, line, "histogram %s: no le=\"+Inf\" bucket", f->name);
	if (!g->has_count || !g->has_sum)
		return fail_at(ps, line, "%s %s: %s_%s missing", type_names[f->type], f->name,
		               f->name, g->has_count ? "sum" : "count");
	if (f->type == PROM_HISTOGRAM && g->inf_bucket != g->count)
		return fail_at(ps, line, "histogram %s: le=\"+Inf\" bucket %g != _count %g",
		               f->name, g->inf_bucket, g->count);
	return 0;
}

static int check_group_sample(struct parser *ps, const struct prom_family *f, struct group *g,
                              const struct prom_sample *s)
{
	if (has_suffix(s->name, f->name, "_sum")) {
		g->has_sum = true;
		return 0;
	}
	if (has_suffix(s->name, f->name, "_count")) {
		g->has_count = true;
		g->count = s->value;
		return s->value >= 0 && !isinf(s->value)
		           ? 0
		           : fail_at(ps, s->line, "%s_count is %g", f->name, s->value);
	}
	if (f->type == PROM_HISTOGRAM)
		return check_bucket(ps, f, g, s);
	return check_quantile(ps, f, s);
}

static int check_groups(struct parser *ps, const struct prom_family *f)
{
	const char *except = f->type == PROM_HISTOGRAM ? "le" : "quantile";
	struct group *g = calloc(f->n + 1, sizeof(*g));
	size_t ng = 0;
	int r = g ? 0 : -ENOMEM;

	for (size_t i = 0; r >= 0 && i < f->n; i++) {
		const struct prom_sample *s = &ps->doc->samples[f->first + i];

		r = check_group_sample(ps, f, group_of(g, &ng, s, except), s);
	}
	for (size_t i = 0; r >= 0 && i < ng; i++)
		r = check_group_end(ps, f, &g[i]);
	free(g);
	return r;
}

int prom_parse(const char *text, size_t len, prom_doc_t **ret, char **ret_error)
{
	struct parser ps = {0};
	const char *p = text, *end = text + len;
	int r = 0;

	ps.doc = calloc(1, sizeof(*ps.doc));
	if (!ps.doc)
		return -ENOMEM;
	while (r >= 0 && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		ps.line++;
		if (!nl) {
			r = fail(&ps, "the last line does not end in a newline");
			break;
		}
		ps.p = p;
		ps.end = nl;
		r = parse_line(&ps);
		p = nl + 1;
	}
	for (size_t i = 0; r >= 0 && i < ps.doc->n_families; i++) {
		const struct prom_family *f = &ps.doc->families[i];

		if (f->type == PROM_HISTOGRAM || f->type == PROM_SUMMARY)
			r = check_groups(&ps, f);
	}
	free(ps.typed);
	if (r < 0) {
		if (ret_error)
			*ret_error = strdup(r == -ENOMEM ? "out of memory" : ps.err);
		prom_free(ps.doc);
		return r;
	}
	*ret = ps.doc;
	return 0;
}

/* ---- lookups ------------------------------------------------------------- */

const struct prom_family *prom_family(const prom_doc_t *d, const char *name)
{
	for (size_t i = 0; i < d->n_families; i++)
		if (strcmp(d->families[i].name, name) == 0)
			return &d->families[i];
	return NULL;
}

const char *prom_label(const struct prom_sample *s, const char *name)
{
	return label_of(s, name);
}

struct pairs {
	const char *kv[2 * MAX_PAIRS];
	size_t n;
};

static void pairs_collect(struct pairs *p, va_list ap)
{
	const char *k;

	p->n = 0;
	while ((k = va_arg(ap, const char *))) {
		const char *v = va_arg(ap, const char *);

		assert(v && p->n < MAX_PAIRS); /* a test written wrong */
		p->kv[2 * p->n] = k;
		p->kv[2 * p->n + 1] = v;
		p->n++;
	}
}

/* Does s carry every pair (and, when exact, nothing else)? */
static bool sample_matches(const struct prom_sample *s, const char *name, const struct pairs *p,
                           bool exact)
{
	if (strcmp(s->name, name) != 0 || (exact && s->n_labels != p->n))
		return false;
	for (size_t i = 0; i < p->n; i++) {
		const char *v = label_of(s, p->kv[2 * i]);

		if (!v || strcmp(v, p->kv[2 * i + 1]) != 0)
			return false;
	}
	return true;
}

/* The next sample from *i on that matches, or NULL. */
static const struct prom_sample *next_match(const prom_doc_t *d, size_t *i, const char *name,
                                            const struct pairs *p, bool exact)
{
	for (; *i < d->n_samples; (*i)++)
		if (sample_matches(&d->samples[*i], name, p, exact))
			return &d->samples[(*i)++];
	return NULL;
}

#define COLLECT(p, last)                                                                           \
	do {                                                                                       \
		va_list ap;                                                                        \
		va_start(ap, last);                                                                \
		pairs_collect(&(p), ap);                                                           \
		va_end(ap);                                                                        \
	} while (0)

const struct prom_sample *prom_find(const prom_doc_t *d, const char *name, ...)
{
	struct pairs p;
	size_t i = 0;

	COLLECT(p, name);
	return next_match(d, &i, name, &p, true);
}

double prom_value(const prom_doc_t *d, const char *name, ...)
{
	const struct prom_sample *s;
	struct pairs p;
	size_t i = 0;

	COLLECT(p, name);
	s = next_match(d, &i, name, &p, true);
	return s ? s->value : NAN;
}

double prom_sum(const prom_doc_t *d, const char *name, ...)
{
	const struct prom_sample *s;
	struct pairs p;
	double sum = 0;
	size_t i = 0;

	COLLECT(p, name);
	while ((s = next_match(d, &i, name, &p, false)))
		sum += s->value;
	return sum;
}

size_t prom_count(const prom_doc_t *d, const char *name, ...)
{
	struct pairs p;
	size_t i = 0, n = 0;

	COLLECT(p, name);
	while (next_match(d, &i, name, &p, false))
		n++;
	return n;
}
