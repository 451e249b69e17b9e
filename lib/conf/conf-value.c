/* Typed values: parse text into a field, write a field back as text, free it.
 * Every source (file, drop-in, environment, override, default) goes through
 * conf_value_parse(), so a value means the same wherever it comes from. */
#include "conf/conf-int.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/v1.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/strutil.h"

#define FIELD(base, k, type) ((type *)(void *)((char *)(base) + (k)->offset))
#define CFIELD(base, k, type)                                                                      \
	((const __typeof__(type) *)(const void *)((const char *)(base) + (k)->offset))

#define URL_MAX 2048
#define ENV_NAME_MAX 256
#define ENV_MAX 1024

_printf_(2, 3) static int problem(char p[CONF_PROBLEM_MAX], const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p, CONF_PROBLEM_MAX, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ---- text hygiene ---- */

const char *conf_text_problem(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		size_t l;

		if (u[i] == '\0')
			return "contains a NUL byte";
		if ((u[i] < 0x20 && u[i] != '\t') || u[i] == 0x7f)
			return "contains a control character";
		l = utf8_seq_len(u + i, n - i);
		if (l == 0)
			return "is not valid UTF-8";
		i += l;
	}
	return NULL;
}

/* ---- ExecStart-style words ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* *s points at a backslash; append what it stands for and move past it. */
static int unescape(const char **s, struct buf *w, char p[CONF_PROBLEM_MAX])
{
	static const char plain[] = "\\\"' \t", ctl_in[] = "ntr", ctl_out[] = "\n\t\r";
	const char *q = *s + 1, *m;
	char c;

	if (*q == '\0')
		return problem(p, "ends with a lone backslash");
	if ((m = strchr(plain, *q)))
		c = *m;
	else if ((m = strchr(ctl_in, *q)))
		c = ctl_out[m - ctl_in];
	else if (*q == 'x' && hexval(q[1]) >= 0 && hexval(q[2]) >= 0) {
		c = (char)(hexval(q[1]) * 16 + hexval(q[2]));
		if (c == '\0')
			return problem(p, "\\x00 is not allowed");
		q += 2;
	} else
		return problem(p, "unknown escape sequence '\\%c'", *q);
	*s = q + 1;
	return buf_append(w, &c, 1);
}

static int quoted(const char **s, struct buf *w, char p[CONF_PROBLEM_MAX])
{
	char quote = **s;
	const char *q = *s + 1;
	int r;

	while (*q && *q != quote) {
		if (quote == '"' && *q == '\\') {
			if ((r = unescape(&q, w, p)) < 0)
				return r;
			continue;
		}
		if ((r = buf_append(w, q++, 1)) < 0)
			return r;
	}
	if (*q != quote)
		return problem(p, "has an unterminated %s quote",
		               quote == '"' ? "double" : "single");
	*s = q + 1;
	return 0;
}

static int one_word(const char **s, struct buf *w, char p[CONF_PROBLEM_MAX])
{
	int r = 0;

	while (**s && !isblank((unsigned char)**s) && r >= 0) {
		if (**s == '\'' || **s == '"')
			r = quoted(s, w, p);
		else if (**s == '\\')
			r = unescape(s, w, p);
		else
			r = buf_append(w, (*s)++, 1);
	}
	return r;
}

int conf_split_words(const char *s, char ***ret, char p[CONF_PROBLEM_MAX])
{
	char **v = calloc(1, sizeof(char *));
	int r = v ? 0 : -ENOMEM;

	while (r >= 0) {
		struct buf w = BUF_INIT(0);
		char *word;

		while (isblank((unsigned char)*s))
			s++;
		if (!*s)
			break;
		r = one_word(&s, &w, p);
		word = r >= 0 ? buf_steal(&w) : NULL;
		buf_done(&w);
		if (r >= 0)
			r = word ? strv_push(&v, word) : -ENOMEM;
	}
	if (r < 0) {
		strv_free(v);
		return r;
	}
	*ret = v;
	return 0;
}

void conf_write_word(FILE *f, const char *w)
{
	const unsigned char *end = (const unsigned char *)w + strlen(w);

	/* plain only when clean text: a byte that is not UTF-8 is written \xHH */
	if (*w && !strpbrk(w, " \t'\"\\$") && !conf_text_problem(w, strlen(w))) {
		fputs(w, f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)w; *c; c++) {
		size_t l;

		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c == '$') /* env refuses a bare "$NAME" */
			fputs("\\x24", f);
		else if (*c == '\n')
			fputs("\\n", f);
		else if (*c == '\t')
			fputs("\\t", f);
		else if (*c == '\r')
			fputs("\\r", f);
		else if (*c < 0x20 || *c == 0x7f || !(l = utf8_seq_len(c, (size_t)(end - c))))
			fprintf(f, "\\x%02x", *c);
		else {
			fwrite(c, 1, l, f);
			c += l - 1;
		}
	}
	fputc('"', f);
}

static void write_words(FILE *f, char *const *v, bool redact)
{
	for (size_t i = 0; v && v[i]; i++) {
		const char *eq = strchr(v[i], '=');

		if (i)
			fputc(' ', f);
		if (redact && eq) {
			_cleanup_free_ char *name = strndup(v[i], (size_t)(eq - v[i]));

			if (name && conf_env_name_is_secret(name)) {
				fprintf(f, "%s=(redacted)", name);
				continue;
			}
		}
		conf_write_word(f, v[i]);
	}
}

bool conf_env_name_is_secret(const char *name)
{
	static const char *const marks[] = {"TOKEN",  "SECRET", "PASSWORD",
	                                    "PASSWD", "KEY",    "CREDENTIAL"};

	for (size_t i = 0; i < ELEMENTSOF(marks); i++)
		if (strcasestr(name, marks[i]))
			return true;
	return false;
}

/* ---- numbers ---- */

static int parse_u64(const char **s, uint64_t *ret)
{
	char *end;

	if (!isdigit((unsigned char)**s))
		return -EINVAL;
	errno = 0;
	*ret = strtoull(*s, &end, 10);
	if (errno)
		return -ERANGE;
	*s = end;
	return 0;
}

static const struct {
	const char *suffix;
	uint64_t mult;
} size_units[] = {
    {"T", 1ULL << 40},
    {"G", 1ULL << 30},
    {"M", 1ULL << 20},
    {"K", 1ULL << 10},
};

static int parse_size(const char *s, uint64_t *ret)
{
	uint64_t n, mult = 1;

	if (parse_u64(&s, &n) < 0)
		return -EINVAL;
	while (isblank((unsigned char)*s))
		s++;
	for (size_t i = 0; i < ELEMENTSOF(size_units); i++)
		if (*s == size_units[i].suffix[0]) {
			mult = size_units[i].mult;
			s += 1 + (startswith(s + 1, "iB") ? 2 : 0);
			break;
		}
	if (mult == 1 && *s == 'B')
		s++;
	if (*s)
		return -EINVAL;
	if (n > UINT64_MAX / mult)
		return -ERANGE;
	*ret = n * mult;
	return 0;
}

static void write_size(FILE *f, uint64_t n)
{
	for (size_t i = 0; i < ELEMENTSOF(size_units); i++)
		if (n >= size_units[i].mult && n % size_units[i].mult == 0) {
			fprintf(f, "%" PRIu64 "%s", n / size_units[i].mult, size_units[i].suffix);
			return;
		}
	fprintf(f, "%" PRIu64, n);
}

static char *size_str(char *b, size_t len, uint64_t n)
{
	FILE *f = fmemopen(b, len, "w");

	if (!f) {
		snprintf(b, len, "%" PRIu64, n);
		return b;
	}
	write_size(f, n);
	fclose(f);
	return b;
}

static int parse_duration(const struct conf_key *k, const char *v, usec_t *ret, char *p)
{
	char lo[TIME_DURATION_MAX], hi[TIME_DURATION_MAX];
	usec_t u;

	if (time_parse_duration(v, &u) < 0)
		return problem(p, "'%.80s' is not a duration (like 90s, 5min, 1h, 250ms%s)", v,
		               k->flags & KEY_INFINITY ? ", infinity" : "");
	if (u == USEC_INFINITY && !(k->flags & KEY_INFINITY))
		return problem(p, "cannot be infinity");
	if (u != USEC_INFINITY && (u < k->min || u > k->max))
		return problem(p, "%.80s is out of range: %s .. %s%s", v,
		               time_format_duration(lo, sizeof(lo), k->min),
		               time_format_duration(hi, sizeof(hi), k->max),
		               k->flags & KEY_INFINITY ? " or infinity" : "");
	if (u != USEC_INFINITY && (k->flags & KEY_WHOLE_SECONDS) && u % USEC_PER_SEC)
		return problem(p,
		               "must be a whole number of seconds (the protocol counts seconds)");
	*ret = u;
	return 0;
}

static int parse_uint(const struct conf_key *k, const char *v, unsigned *ret, char *p)
{
	const char *s = v;
	uint64_t n;

	if (parse_u64(&s, &n) < 0 || *s)
		return problem(p, "'%.80s' is not a whole number", v);
	if (n < k->min || n > k->max)
		return problem(p, "%.80s is out of range: %" PRIu64 " .. %" PRIu64, v, k->min,
		               k->max);
	*ret = (unsigned)n;
	return 0;
}

static int parse_size_key(const struct conf_key *k, const char *v, uint64_t *ret, char *p)
{
	char lo[32], hi[32];
	uint64_t n;

	if (parse_size(v, &n) < 0)
		return problem(p, "'%.80s' is not a size (like 65536, 512K, 64M, 1G)", v);
	if (n < k->min || n > k->max)
		return problem(p, "%.80s is out of range: %s .. %s", v,
		               size_str(lo, sizeof(lo), k->min), size_str(hi, sizeof(hi), k->max));
	*ret = n;
	return 0;
}

/* ---- strings ---- */

static int set_string(char **field, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

static int set_strv(char ***field, char **v)
{
	strv_free(*field);
	*field = v;
	return 0;
}

static int check_path(const char *v, char *p)
{
	if (v[0] != '/')
		return problem(p, "'%.80s' is not an absolute path", v);
	if (strlen(v) >= PATH_MAX)
		return problem(p, "is longer than %d bytes", PATH_MAX - 1);
	return 0;
}

/* The rest in full, by the parser that will use the URL (libcurl's): a host,
 * a port 1..65535 in digits, brackets that close, a valid path. */
static int check_url_parts(const char *v, char *p)
{
	CURLU *u = curl_url();
	CURLUcode rc;
	char *port = NULL;
	int r = 0;

	if (!u)
		return -ENOMEM;
	rc = curl_url_set(u, CURLUPART_URL, v, 0);
	if (rc == CURLUE_OUT_OF_MEMORY)
		r = -ENOMEM;
	else if (rc != CURLUE_OK)
		r = problem(p, "'%.80s' is not a valid URL: %s", v, curl_url_strerror(rc));
	else if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_NO_DEFAULT_PORT) == CURLUE_OK &&
	         streq(port, "0"))
		r = problem(p, "'%.80s' is not a valid URL: port 0 is not a port to connect to", v);
	curl_free(port);
	curl_url_cleanup(u);
	return r;
}

static int check_url(const char *v, char *p)
{
	const char *rest = startswith(v, "https://");
	size_t host;

	if (!rest)
		rest = startswith(v, "http://");
	if (!rest)
		return problem(p, "'%.80s' is not an http:// or https:// URL", v);
	if (strlen(v) > URL_MAX)
		return problem(p, "is longer than %d bytes", URL_MAX);
	for (const char *c = v; *c; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return problem(p, "contains a blank, control or non-ASCII byte");
	host = strcspn(rest, "/?#");
	if (host == 0)
		return problem(p, "'%.80s' has no host", v);
	if (memchr(rest, '@', host))
		return problem(p, "must not carry credentials (user@host): use api.token_file");
	if (strpbrk(rest, "?#"))
		return problem(p, "must not have a query or fragment");
	return check_url_parts(v, p);
}

/* "127.0.0.1:9464" or "[::1]:9464": IP literals only, the daemon resolves nothing. */
static int listen_addr(const char *v, struct sockaddr_storage *ss, socklen_t *len)
{
	const char *colon = strrchr(v, ':'), *port_s;
	char host[INET6_ADDRSTRLEN + 1];
	size_t hl;
	uint64_t port;

	if (!colon || colon == v)
		return -EINVAL;
	port_s = colon + 1;
	if (parse_u64(&port_s, &port) < 0 || *port_s || port > 65535)
		return -EINVAL;
	hl = (size_t)(colon - v);
	if (v[0] == '[') {
		if (hl < 3 || v[hl - 1] != ']' || hl - 2 >= sizeof(host))
			return -EINVAL;
		memcpy(host, v + 1, hl - 2);
		host[hl - 2] = '\0';
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		*a = (struct sockaddr_in6){.sin6_family = AF_INET6,
		                           .sin6_port = htons((uint16_t)port)};
		*len = sizeof(*a);
		return inet_pton(AF_INET6, host, &a->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, v, hl);
	host[hl] = '\0';
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	*len = sizeof(*a);
	return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -EINVAL;
}

static int parse_listen(struct conf *c, const char *v, char *p)
{
	struct sockaddr_storage ss = {0};
	socklen_t len = 0;

	if (listen_addr(v, &ss, &len) < 0)
		return problem(p,
		               "'%.80s' is not ADDRESS:PORT with an IP address (127.0.0.1:9464, "
		               "[::1]:9464) and a port 0..65535 (0: any free port)",
		               v);
	if (set_string(&c->status.listen, v) < 0)
		return -ENOMEM;
	c->status.listen_addr = ss;
	c->status.listen_addr_len = len;
	return 0;
}

static int lookup_user(const char *v, struct passwd *pw, char **buf)
{
	long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
	size_t n = sz > 0 ? (size_t)sz : 16384;
	struct passwd *res = NULL;
	const char *end = v;
	uint64_t uid;
	int r;

	for (;; n *= 2) {
		char *nb = realloc(*buf, n);

		if (!nb)
			return -ENOMEM;
		*buf = nb;
		if (parse_u64(&end, &uid) == 0 && !*end && uid < UINT32_MAX)
			r = getpwuid_r((uid_t)uid, pw, *buf, n, &res);
		else
			r = getpwnam_r(v, pw, *buf, n, &res);
		if (r != ERANGE || n > (1 << 20))
			break;
	}
	return res ? 0 : r > 0 ? -r : -ESRCH;
}

/* workflow.user fills the workflow's uid/gid, worker.run_user the worker's. */
static int parse_user(const struct conf_key *k, void *base, char **field, const char *v, char *p)
{
	struct conf_workflow *wf = base;
	struct conf_worker *w = &((struct conf *)base)->worker;
	bool is_wf = streq(k->section, "workflow");
	_cleanup_free_ char *buf = NULL;
	struct passwd pw;
	int r;

	if (!str_in_charset(v, 1, 64, "._-") || v[0] == '-')
		return problem(p, "'%.80s' is not a user name", v);
	r = lookup_user(v, &pw, &buf);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return problem(p, "unknown user '%s'", v);
	if (set_string(field, v) < 0)
		return -ENOMEM;
	*(is_wf ? &wf->uid : &w->run_uid) = pw.pw_uid;
	*(is_wf ? &wf->gid : &w->run_gid) = pw.pw_gid;
	return 0;
}

/* ---- lists ---- */

static int parse_tags(const char *v, char ***field, char *p)
{
	char **tags = NULL;
	int r = strv_split(v, " ,\t", &tags);

	if (r < 0)
		return r;
	for (size_t i = 0; tags[i]; i++)
		if (!v1_valid_tag(tags[i])) {
			r = problem(p, "tag '%.80s' is not 1..%d bytes of " V1_TAG_CHARSET, tags[i],
			            V1_TAG_MAX);
			strv_free(tags);
			return r;
		}
	strv_sort_uniq(tags);
	if (strv_length(tags) > V1_TAGS_MAX) {
		strv_free(tags);
		return problem(p, "more than %d tags", V1_TAGS_MAX);
	}
	return set_strv(field, tags);
}

/* camunda7 variable names: what fetchAndLock's topic lists */
#define NAMES_MAX 256

static int parse_names(const char *v, char ***field, char *p)
{
	char **names = NULL;
	int r = strv_split(v, " ,\t", &names);

	if (r < 0)
		return r;
	for (size_t i = 0; names[i]; i++)
		if (!str_in_charset(names[i], 1, 255, "._:-")) {
			r = problem(p, "'%.80s' is not 1..255 bytes of [A-Za-z0-9._:-]", names[i]);
			strv_free(names);
			return r;
		}
	strv_sort_uniq(names);
	if (strv_length(names) > NAMES_MAX) {
		strv_free(names);
		return problem(p, "more than %d names", NAMES_MAX);
	}
	return set_strv(field, names);
}

static int parse_command(const char *v, char ***field, char *p)
{
	char **argv = NULL;
	int r = conf_split_words(v, &argv, p);

	if (r < 0)
		return r;
	if (!argv[0])
		r = problem(p, "is empty");
	else if (argv[0][0] != '/')
		r = problem(p,
		            "'%.80s' is not an absolute path (commands run without a shell "
		            "or PATH search)",
		            argv[0]);
	if (r < 0) {
		strv_free(argv);
		return r;
	}
	return set_strv(field, argv);
}

static int check_env_word(const char *w, char *p)
{
	size_t n = strcspn(w, "=");

	if (!w[n] || n == 0 || n > ENV_NAME_MAX || isdigit((unsigned char)w[0]))
		return problem(p, "'%.80s' is not NAME=value", w);
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)w[i]) && w[i] != '_')
			return problem(p, "'%.*s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
			               (int)MIN(n, 80), w);
	if (startswith(w, "LESSEE_"))
		return problem(p, "'%.*s': LESSEE_* variables are set by lessee itself",
		               (int)MIN(n, 80), w);
	return 0;
}

/* "$NAME" or "${": what a shell or systemd would expand and we do not. */
static const char *var_ref(const char *s)
{
	for (s = strchr(s, '$'); s; s = strchr(s + 1, '$'))
		if (s[1] == '{' || s[1] == '_' || isalpha((unsigned char)s[1]))
			return s;
	return NULL;
}

/* Refused rather than passed on literally: "A=$HOME" almost always means an
 * expansion that would silently not happen.  \x24 writes a literal '$'. */
static int check_env_refs(const char *raw, char *const *words, char *p)
{
	if (!var_ref(raw))
		return 0;
	for (size_t i = 0; words[i]; i++)
		if (var_ref(words[i]))
			return problem(p,
			               "'%.80s': values are not expanded ($VAR is passed as it is "
			               "written); write \\x24 for a literal '$'",
			               words[i]);
	return 0;
}

static int parse_env(const char *v, char ***field, char *p)
{
	char **words = NULL;
	int r;

	if (!*v) {
		char **empty = calloc(1, sizeof(char *));

		return empty ? set_strv(field, empty) : -ENOMEM;
	}
	r = conf_split_words(v, &words, p);
	if (r < 0)
		return r;
	for (size_t i = 0; r >= 0 && words[i]; i++)
		r = check_env_word(words[i], p);
	if (r >= 0)
		r = check_env_refs(v, words, p);
	if (r >= 0 && strv_length(*field) + strv_length(words) > ENV_MAX)
		r = problem(p, "more than %d variables", ENV_MAX);
	if (r < 0) {
		strv_free(words);
		return r;
	}
	size_t i = 0;
	for (; words[i] && r >= 0; i++)
		r = strv_push(field, words[i]); /* frees the word when it fails */
	for (; words[i]; i++)
		free(words[i]);
	free(words);
	return r;
}

/* ---- exit codes ---- */

static int int_cmp(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* "3 4" or "3, 4": what terminal_exit_codes lists.  0 is success and 75 asks
 * for a retry: neither can fail a run for good. */
static int parse_exit_codes(struct conf_workflow *wf, const char *v, char *p)
{
	_cleanup_(strv_freep) char **words = NULL;
	_cleanup_free_ int *codes = NULL;
	size_t n = 0;
	int r = strv_split(v, " ,\t", &words);

	if (r < 0)
		return r;
	if (!(codes = calloc(strv_length(words) + 1, sizeof(int))))
		return -ENOMEM;
	for (size_t i = 0; words[i]; i++) {
		const char *s = words[i];
		uint64_t c;

		if (parse_u64(&s, &c) < 0 || *s)
			return problem(p, "'%.80s' is not an exit code (1..255)", words[i]);
		if (c < 1 || c > 255)
			return problem(p, "%.80s is out of range: exit codes are 1..255", words[i]);
		if (c == 75)
			return problem(p,
			               "75 asks for a retry (EX_TEMPFAIL), it cannot be terminal");
		codes[n++] = (int)c;
	}
	qsort(codes, n, sizeof(int), int_cmp);
	wf->n_terminal_exit_codes = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || codes[i] != codes[i - 1])
			codes[wf->n_terminal_exit_codes++] = codes[i];
	free(wf->terminal_exit_codes);
	wf->terminal_exit_codes = wf->n_terminal_exit_codes ? TAKE_PTR(codes) : NULL;
	return 0;
}

static void write_exit_codes(FILE *f, const struct conf_workflow *wf)
{
	for (size_t i = 0; i < wf->n_terminal_exit_codes; i++)
		fprintf(f, "%s%d", i ? " " : "", wf->terminal_exit_codes[i]);
}

/* ---- booleans ---- */

static int parse_bool(const char *v, bool *ret, char *p)
{
	static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {"no", "false",
	                                                                            "off", "0"};

	for (size_t i = 0; i < ELEMENTSOF(yes); i++)
		if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
			*ret = strcasecmp(v, yes[i]) == 0;
			return 0;
		}
	return problem(p, "'%.80s' is not a boolean (yes, no, true, false, on, off, 1, 0)", v);
}

/* ---- dispatch ---- */

static int parse_text(const struct conf_key *k, void *base, const char *v, char *p)
{
	char **field = FIELD(base, k, char *);
	int r = 0;

	if (!*v) {
		if (k->flags & KEY_REQUIRED)
			return problem(p, "must not be empty");
		*field = mfree(*field);
		if (k->type == CONF_LISTEN)
			((struct conf *)base)->status.listen_addr_len = 0;
		return 0;
	}
	switch (k->type) {
	case CONF_PATH:
		r = check_path(v, p);
		break;
	case CONF_URL:
		r = check_url(v, p);
		break;
	case CONF_ID:
		if (!v1_valid_worker_id(v))
			r = problem(p, "'%.80s' is not 1..%d bytes of " V1_WORKER_ID_CHARSET, v,
			            V1_WORKER_ID_MAX);
		break;
	case CONF_NAME:
		if (!str_in_charset(v, 1, 255, "._:-"))
			r = problem(p, "'%.80s' is not 1..255 bytes of [A-Za-z0-9._:-]", v);
		break;
	case CONF_LOGIN:
		/* HTTP basic's user-id: no ':' (RFC 7617), nothing a header cannot carry */
		if (strlen(v) > 255 || strchr(v, ':') ||
		    strspn(v, "!\"#$%&'()*+,-./0123456789;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
		              "abcdefghijklmnopqrstuvwxyz{|}~") != strlen(v))
			r = problem(p, "'%.80s' is not 1..255 bytes of printable ASCII without ':'",
			            v);
		break;
	case CONF_PROTOCOL:
		r = -EINVAL;
		for (size_t i = 0; conf_protocols[i] && r < 0; i++)
			r = streq(v, conf_protocols[i]) ? 0 : -EINVAL;
		if (r < 0)
			r = problem(p, "'%.80s' is not a protocol: native, conductor or camunda7",
			            v);
		break;
	case CONF_LISTEN:
		return parse_listen(base, v, p);
	case CONF_USER:
		return parse_user(k, base, field, v, p);
	default:
		assert(!"not a text type");
	}
	if (r < 0)
		return r;
	if (set_string(field, v) < 0)
		return -ENOMEM;
	/* a base URL: requests append "/v1/..." */
	if (k->type == CONF_URL)
		for (size_t n = strlen(*field); n > 0 && (*field)[n - 1] == '/'; n--)
			(*field)[n - 1] = '\0';
	return 0;
}

int conf_value_parse(const struct conf_key *k, void *base, const char *v, char p[CONF_PROBLEM_MAX])
{
	int level;
	enum log_format format;

	switch (k->type) {
	case CONF_DURATION:
		return parse_duration(k, v, FIELD(base, k, usec_t), p);
	case CONF_UINT:
		return parse_uint(k, v, FIELD(base, k, unsigned), p);
	case CONF_SIZE:
		return parse_size_key(k, v, FIELD(base, k, uint64_t), p);
	case CONF_TAGS:
		return parse_tags(v, FIELD(base, k, char **), p);
	case CONF_NAMES:
		return parse_names(v, FIELD(base, k, char **), p);
	case CONF_COMMAND:
		return parse_command(v, FIELD(base, k, char **), p);
	case CONF_ENV:
		return parse_env(v, FIELD(base, k, char **), p);
	case CONF_BOOL:
		return parse_bool(v, FIELD(base, k, bool), p);
	case CONF_EXIT_CODES:
		assert(k->offset == offsetof(struct conf_workflow, terminal_exit_codes));
		return parse_exit_codes(base, v, p);
	case CONF_LEVEL:
		if (log_parse_level(v, &level) < 0)
			return problem(p,
			               "'%.80s' is not one of debug info notice warning error "
			               "crit alert emerg",
			               v);
		*FIELD(base, k, int) = level;
		return 0;
	case CONF_FORMAT:
		if (log_parse_format(v, &format) < 0)
			return problem(p, "'%.80s' is not one of auto logfmt json journal", v);
		*FIELD(base, k, enum log_format) = format;
		return 0;
	default:
		return parse_text(k, base, v, p);
	}
}

void conf_value_write(FILE *f, const struct conf_key *k, const void *base, bool redact)
{
	char b[TIME_DURATION_MAX];

	switch (k->type) {
	case CONF_DURATION:
		fputs(time_format_duration(b, sizeof(b), *CFIELD(base, k, usec_t)), f);
		break;
	case CONF_UINT:
		fprintf(f, "%u", *CFIELD(base, k, unsigned));
		break;
	case CONF_SIZE:
		write_size(f, *CFIELD(base, k, uint64_t));
		break;
	case CONF_TAGS:
	case CONF_NAMES:
	case CONF_COMMAND:
	case CONF_ENV:
		write_words(f, *CFIELD(base, k, char **), redact && k->type == CONF_ENV);
		break;
	case CONF_BOOL:
		fputs(*CFIELD(base, k, bool) ? "yes" : "no", f);
		break;
	case CONF_EXIT_CODES:
		write_exit_codes(f, base);
		break;
	case CONF_LEVEL:
		fputs(log_level_name(*CFIELD(base, k, int)), f);
		break;
	case CONF_FORMAT:
		fputs(log_format_name(*CFIELD(base, k, enum log_format)), f);
		break;
	default:
		fputs(*CFIELD(base, k, char *) ? *CFIELD(base, k, char *) : "", f);
	}
}

char *conf_value_format(const struct conf_key *k, const void *base, bool redact)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);

	if (!f)
		return NULL;
	conf_value_write(f, k, base, redact);
	if (fclose(f) != 0)
		return mfree(s);
	return s;
}

void conf_value_free(const struct conf_key *k, void *base)
{
	switch (k->type) {
	case CONF_TAGS:
	case CONF_NAMES:
	case CONF_COMMAND:
	case CONF_ENV:
		*FIELD(base, k, char **) = strv_free(*FIELD(base, k, char **));
		break;
	case CONF_PATH:
	case CONF_URL:
	case CONF_ID:
	case CONF_LISTEN:
	case CONF_USER:
	case CONF_NAME:
	case CONF_LOGIN:
	case CONF_PROTOCOL:
		*FIELD(base, k, char *) = mfree(*FIELD(base, k, char *));
		break;
	case CONF_EXIT_CODES:
		((struct conf_workflow *)base)->terminal_exit_codes =
		    mfree(((struct conf_workflow *)base)->terminal_exit_codes);
		((struct conf_workflow *)base)->n_terminal_exit_codes = 0;
		break;
	default:
		break;
	}
}
