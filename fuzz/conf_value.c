/* Every value type of the configuration (lib/conf/conf-value.c): the first
 * byte picks a key of the tables, the rest (up to a NUL) is its value.  A value
 * that parses must print as text that parses again to the same value
 * (what --check-config prints is a configuration lessee accepts), and the
 * ExecStart-style word splitter must give back every word it quoted. */
#include <string.h>

#include "conf/conf-int.h"
#include "fuzz.h"
#include "util/strutil.h"

static union {
	struct conf c;
	struct conf_workflow wf;
} base1, base2;

static void words_roundtrip(const char *v)
{
	char problem[CONF_PROBLEM_MAX] = "";
	char **words = NULL;

	if (conf_split_words(v, &words, problem) < 0) {
		FUZZ_ASSERT(problem[0] || !words);
		return;
	}
	for (size_t i = 0; words && words[i]; i++) {
		char *s = NULL, **again = NULL;
		size_t n = 0;
		FILE *f = open_memstream(&s, &n);

		FUZZ_ASSERT(f);
		conf_write_word(f, words[i]);
		FUZZ_ASSERT(fclose(f) == 0);
		FUZZ_ASSERT(conf_split_words(s, &again, problem) == 0);
		FUZZ_ASSERT(again && again[0] && streq(again[0], words[i]) && !again[1]);
		for (size_t j = 0; again[j]; j++)
			free(again[j]);
		free(again);
		free(s);
		free(words[i]);
	}
	free(words);
}

FUZZ_TARGET(conf_value)
{
	char problem[CONF_PROBLEM_MAX] = "";
	const struct conf_key *k;
	size_t n_all = conf_n_keys + conf_n_wf_keys, i;
	char *v, *s1, *s2;

	if (size < 1)
		return 0;
	i = data[0] % n_all;
	k = i < conf_n_keys ? &conf_keys[i] : &conf_wf_keys[i - conf_n_keys];
	v = fuzz_strndup(data + 1, size - 1);
	if (data[0] & 0x80)
		words_roundtrip(v);
	if (conf_value_parse(k, &base1, v, problem) < 0) {
		FUZZ_ASSERT(problem[0]);
		conf_value_free(k, &base1);
		free(v);
		return 0;
	}
	s1 = conf_value_format(k, &base1, false);
	FUZZ_ASSERT(s1);
	if (conf_value_parse(k, &base2, s1, problem) < 0) {
		fprintf(stderr, "%s.%s: '%s' printed as '%s', which does not parse: %s\n",
		        k->section, k->name, v, s1, problem);
		abort();
	}
	s2 = conf_value_format(k, &base2, false);
	FUZZ_ASSERT(s2);
	if (!streq(s1, s2)) {
		fprintf(stderr, "%s.%s: '%s' printed as '%s', then as '%s'\n", k->section, k->name,
		        v, s1, s2);
		abort();
	}
	free(s1);
	free(s2);
	conf_value_free(k, &base1);
	conf_value_free(k, &base2);
	memset(&base1, 0, sizeof(base1));
	memset(&base2, 0, sizeof(base2));
	free(v);
	return 0;
}
