/* The Prometheus renderer (lib/obs/metrics.c) with hostile label values:
 * the input is NUL-separated words, each operation taking its label values
 * from the words that follow.  The rendered text must be valid exposition
 * format 0.0.4 (every label value quoted with only \\ \" \n escapes, one
 * sample a line, valid UTF-8) with one sample per child created. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "obs/metrics.h"

#define OPS 64

static const double buckets[] = {0.1, 1, 10};

struct words {
	const char *w[OPS * 3];
	size_t n, next;
};

static const char *word(struct words *ws)
{
	return ws->next < ws->n ? ws->w[ws->next++] : "";
}

/* Length of the valid UTF-8 sequence at s (RFC 3629), 0 when there is none. */
static unsigned seq_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0], len = c < 0x80                 ? 1
	                         : c >= 0xc2 && c <= 0xdf ? 2
	                         : c >= 0xe0 && c <= 0xef ? 3
	                         : c >= 0xf0 && c <= 0xf4 ? 4
	                                                  : 0;
	unsigned cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;

	if (!len || len > n)
		return 0;
	for (unsigned k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned len = seq_len(s + i, n - i);

		if (!len)
			return false;
		i += len;
	}
	return true;
}

/* As the registry keys children: every bad byte is U+FFFD. */
static void fixed(const char *s, struct buf *b)
{
	size_t n = strlen(s);

	for (size_t i = 0; i < n;) {
		unsigned len = seq_len((const unsigned char *)s + i, n - i);

		if (buf_append(b, len ? s + i : "\xef\xbf\xbd", len ? len : 3) < 0)
			abort();
		i += len ? len : 1;
	}
	if (buf_append(b, "", 1) < 0) /* words have no NUL: a separator */
		abort();
}

/* One sample line: name{k="v",...} value.  Returns the end of the line. */
static const char *check_sample(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));

	FUZZ_ASSERT(nl);
	FUZZ_ASSERT(p < nl && (strchr("_:", *p) || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')));
	while (p < nl && *p != '{' && *p != ' ')
		p++;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			while (*p != '=') {
				FUZZ_ASSERT(p < nl && *p != '"' && *p != ',' && *p != '}');
				p++;
			}
			FUZZ_ASSERT(*++p == '"');
			for (p++; *p != '"'; p++) {
				FUZZ_ASSERT(p < nl);
				if (*p == '\\') {
					p++;
					FUZZ_ASSERT(*p == '\\' || *p == '"' || *p == 'n');
				}
			}
			p++;
			FUZZ_ASSERT(*p == ',' || *p == '}');
			if (*p == ',')
				p++;
		}
		p++;
	}
	FUZZ_ASSERT(*p == ' ' && p + 1 < nl);
	return nl + 1;
}

static size_t check_text(const char *s, size_t n)
{
	const char *p = s, *end = s + n;
	size_t samples = 0;

	FUZZ_ASSERT(strlen(s) == n && valid_utf8((const unsigned char *)s, n));
	while (p < end) {
		if (*p == '#') {
			FUZZ_ASSERT(strncmp(p, "# HELP ", 7) == 0 || strncmp(p, "# TYPE ", 7) == 0);
			p = memchr(p, '\n', (size_t)(end - p));
			FUZZ_ASSERT(p);
			p++;
		} else {
			p = check_sample(p, end);
			samples++;
		}
	}
	return samples;
}

struct seen {
	char *key[OPS];
	size_t len[OPS];
	size_t n;
};

/* Count distinct label tuples (as the registry makes children). */
static void seen_add(struct seen *s, const char *a, const char *b)
{
	struct buf kb = BUF_INIT(SIZE_MAX);
	char *k;

	fixed(a, &kb);
	fixed(b, &kb);
	k = kb.data;
	for (size_t i = 0; i < s->n; i++)
		if (s->len[i] == kb.len && memcmp(s->key[i], k, kb.len) == 0) {
			free(k);
			return;
		}
	s->len[s->n] = kb.len;
	s->key[s->n++] = k;
}

static void seen_clear(struct seen *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->key[i]);
	s->n = 0;
}

FUZZ_TARGET(metrics)
{
	metrics_t *m = metrics_new();
	metric_t *c =
	    metrics_counter(m, "fuzz_runs_total", "Runs \\ by\nworkflow", "workflow,outcome");
	metric_t *g = metrics_gauge(m, "fuzz_running", "Running", "workflow");
	metric_t *h =
	    metrics_histogram(m, "fuzz_duration_seconds", "Durations", "workflow,le_x", buckets, 3);
	metric_t *u = metrics_gauge(m, "fuzz_up", "Up", NULL);
	struct seen sc = {0}, sg = {0}, sh = {0};
	struct words ws = {0};
	struct buf out = BUF_INIT(SIZE_MAX);
	char *s = fuzz_strndup(data, size);
	size_t expect;
	bool up = false;

	FUZZ_ASSERT(m && c && g && h && u);
	for (const char *p = s; p <= s + size && ws.n < OPS * 3; p += strlen(p) + 1)
		ws.w[ws.n++] = p;
	for (size_t op = 0; op < OPS && ws.next < ws.n; op++) {
		const char *sel = word(&ws), *a, *b;
		double v = (double)strlen(sel) - 2;

		switch (sel[0] & 7) {
		case 0:
			a = word(&ws), b = word(&ws);
			metric_add(c, v, a, b);
			seen_add(&sc, a, b);
			break;
		case 1:
			a = word(&ws);
			metric_set(g, sel[1] == 'n' ? NAN : sel[1] == 'i' ? -INFINITY : v, a);
			seen_add(&sg, a, "");
			break;
		case 2:
			a = word(&ws), b = word(&ws);
			metric_observe(h, v / 3, a, b);
			seen_add(&sh, a, b);
			break;
		case 3:
			metric_reset(g);
			seen_clear(&sg);
			break;
		case 4:
			a = word(&ws), b = word(&ws);
			(void)metric_get(c, a, b);
			(void)metric_get(h, a, b);
			break;
		default:
			metric_set(u, v);
			up = true;
			break;
		}
	}
	FUZZ_ASSERT(metrics_render(m, &out) == 0);
	expect = sc.n + sg.n + sh.n * (3 + 1 + 2) + up;
	if (check_text(out.data ? out.data : "", out.len) != expect) {
		fprintf(stderr, "expected %zu samples in:\n%s\n", expect, out.data);
		abort();
	}
	buf_done(&out);
	seen_clear(&sc);
	seen_clear(&sg);
	seen_clear(&sh);
	metrics_free(m);
	free(s);
	return 0;
}
