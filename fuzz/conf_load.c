/* The whole configuration load (lib/conf conf_load): the main file, its
 * drop-ins, the environment and --set overrides, all from one input.  Lines
 * "%%d" start the next drop-in, "%%e" environment entries (one a line),
 * "%%s" overrides (one a line); what comes before the first is the main file.
 * A configuration that loads must print (conf_print, as --check-config) as
 * one that loads again to the same thing (conf_diff finds nothing). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "fuzz.h"

#define DROPINS 8
#define LINES 32

static char dir[64], main_path[96], dropin_dir[128], printed_path[96];

static void setup(void)
{
	const char *tmp = getenv("TMPDIR");

	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "%s/fuzz-conf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir))
		abort();
	snprintf(main_path, sizeof(main_path), "%s/lessee.conf", dir);
	snprintf(printed_path, sizeof(printed_path), "%s/printed.conf", dir);
	snprintf(dropin_dir, sizeof(dropin_dir), "%s.d", main_path);
	if (mkdir(dropin_dir, 0700) < 0)
		abort();
}

static void write_file(const char *path, const char *p, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		abort();
}

static void dropin_path(char *b, size_t len, unsigned i)
{
	snprintf(b, len, "%s/%02u-fuzz.conf", dropin_dir, i);
}

struct input {
	unsigned n_dropins;
	char *env[LINES + 1];
	size_t n_env;
	struct conf_override set[LINES];
	char *set_s[LINES];
	size_t n_set;
};

/* Split "a\nb\n" into lines appended to v (NUL-terminated copies). */
static void lines(const char *p, size_t n, char **v, size_t *count, size_t max)
{
	const char *end = p + n;

	while (p < end && *count < max) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);

		v[(*count)++] = strndup(p, len);
		p = nl ? nl + 1 : end;
	}
}

static void split(const char *s, size_t n, struct input *in)
{
	const char *end = s + n, *p = s;
	char kind = 'm';

	for (;;) {
		const char *m = memmem(p, (size_t)(end - p), "\n%%", 3);
		size_t len = (m ? m : end) - p;

		if (kind == 'm')
			write_file(main_path, p, len);
		else if (kind == 'd' && in->n_dropins < DROPINS) {
			char path[160];

			dropin_path(path, sizeof(path), in->n_dropins++);
			write_file(path, p, len);
		} else if (kind == 'e')
			lines(p, len, in->env, &in->n_env, LINES);
		else if (kind == 's') {
			size_t before = in->n_set;

			lines(p, len, in->set_s, &in->n_set, LINES);
			for (size_t i = before; i < in->n_set; i++)
				in->set[i] = (struct conf_override){.setting = in->set_s[i]};
		}
		if (!m || m + 3 >= end)
			break;
		kind = m[3];
		p = memchr(m + 3, '\n', (size_t)(end - m - 3));
		if (!p)
			break;
		p++;
	}
}

static void input_done(struct input *in)
{
	char path[160];

	for (unsigned i = 0; i < in->n_dropins; i++) {
		dropin_path(path, sizeof(path), i);
		unlink(path);
	}
	for (size_t i = 0; i < in->n_env; i++)
		free(in->env[i]);
	for (size_t i = 0; i < in->n_set; i++)
		free(in->set_s[i]);
}

/* conf_print without its "# read PATH" lines (they name the files read). */
static char *printed(const struct conf *c, size_t *ret_len)
{
	char *text = NULL, *out, *w;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	FUZZ_ASSERT(f && conf_print(c, f) >= 0 && fclose(f) == 0);
	*ret_len = n;
	out = w = strdup(text);
	FUZZ_ASSERT(out);
	for (const char *p = text; *p;) {
		const char *nl = strchrnul(p, '\n');
		size_t len = (size_t)(nl - p) + (*nl ? 1 : 0);

		if (strncmp(p, "# read ", 7) != 0) {
			memcpy(w, p, len);
			w += len;
		}
		p += len;
	}
	*w = '\0';
	free(text);
	return out;
}

/* conf_print redacts workflow env values whose name looks secret: those do
 * not come back as they were. */
static bool has_secret_env(const struct conf *c)
{
	for (size_t i = 0; i < c->n_workflows; i++)
		for (char **e = c->workflows[i].env; *e; e++) {
			char *name = strndup(*e, strcspn(*e, "="));
			bool secret = name && conf_env_name_is_secret(name);

			free(name);
			if (secret)
				return true;
		}
	return false;
}

static void reload(const struct conf *c, char *const *env)
{
	struct conf_source src = {.path = printed_path, .env = env, .default_worker_id = "fuzz"};
	struct conf_change *ch = NULL;
	struct conf *again = NULL;
	char *text, *text2, *error = NULL;
	size_t n, n2;
	int r;

	/* the whole text, "# read" lines too: that is what --check-config shows */
	{
		char *full = NULL;
		FILE *f = open_memstream(&full, &n);

		FUZZ_ASSERT(f && conf_print(c, f) >= 0 && fclose(f) == 0);
		write_file(printed_path, full, n);
		free(full);
	}
	text = printed(c, &n);
	r = conf_load(&src, &again, &error);
	if (r < 0) {
		fprintf(stderr, "the printed configuration does not load: %s\n%s\n",
		        error ? error : strerror(-r), text);
		abort();
	}
	text2 = printed(again, &n2);
	if (strcmp(text, text2) != 0) {
		fprintf(stderr, "the printed configuration prints differently:\n%s\n----\n%s\n",
		        text, text2);
		abort();
	}
	FUZZ_ASSERT(conf_diff(c, again, &ch, &n) == 0);
	if (n > 0 && !has_secret_env(c)) {
		fprintf(stderr, "the printed configuration loads differently: %s\n%s\n",
		        ch[0].description, text);
		abort();
	}
	conf_changes_free(ch, n);
	conf_free(again);
	free(text);
	free(text2);
}

FUZZ_TARGET(conf_load)
{
	struct input in = {0};
	struct conf_source src = {.path = main_path, .default_worker_id = "fuzz"};
	struct conf *c = NULL;
	char *s, *error = NULL;
	int r;

	setup();
	s = fuzz_strndup(data, size);
	split(s, size, &in);
	src.env = in.env;
	src.overrides = in.set;
	src.n_overrides = in.n_set;
	r = conf_load(&src, &c, &error);
	if (r == 0) {
		FUZZ_ASSERT(c && c->api.url && c->worker.id && c->worker.tags && c->sources);
		for (size_t i = 0; i < c->n_workflows; i++)
			FUZZ_ASSERT(c->workflows[i].argv && c->workflows[i].argv[0] &&
			            c->workflows[i].argv[0][0] == '/' && c->workflows[i].env);
		reload(c, in.env);
		conf_free(c);
	} else {
		FUZZ_ASSERT(r != -EINVAL || error);
	}
	free(error);
	input_done(&in);
	free(s);
	return 0;
}
