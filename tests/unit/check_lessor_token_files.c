/* lib/lessor tokens: the token files, what each token is, and what is refused. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lessor/tokens.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define ADMIN "admin-0123456789abcdef"

static char *dir, *admin_path, *workers_path;
static char err[640];

static void setup(void)
{
	dir = tu_tmpdir("tokens");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&admin_path, "%s/admin", dir), 0);
	ck_assert_int_ge(asprintf(&workers_path, "%s/workers", dir), 0);
	ck_assert_int_eq(write_file_atomic(admin_path, "  " ADMIN "\n", strlen(ADMIN) + 3, 0600),
	                 0);
}

static void teardown(void)
{
	rm_rf(dir);
	free(dir);
	free(admin_path);
	free(workers_path);
}

static int load(const char *workers, lessor_tokens **ret)
{
	err[0] = '\0';
	ck_assert_int_eq(write_file_atomic(workers_path, workers, strlen(workers), 0600), 0);
	return lessor_tokens_load(
	    &(struct lessor_token_files){.admin = admin_path, .workers = workers_path}, ret, err,
	    sizeof(err));
}

static struct lessor_principal who(const lessor_tokens *t, const char *token)
{
	struct lessor_principal p;

	lessor_tokens_check(t, token, &p);
	return p;
}

START_TEST(test_roles_and_names)
{
	lessor_tokens *t = NULL;
	struct lessor_principal p;

	ck_assert_int_eq(load("# comment\n\n  alpha   alpha-token-0123456789  \r\n"
	                      "beta\tbeta-token-0123456789#x\n"
	                      "   # indented comment\n"
	                      "g.a_m-m9 gamma-token-0123456789",
	                      &t),
	                 0);
	ck_assert(lessor_tokens_required(t));
	ck_assert(!lessor_tokens_legacy(t));
	ck_assert_uint_eq(lessor_tokens_n_workers(t), 3);
	p = who(t, ADMIN);
	ck_assert_int_eq(p.role, LESSOR_ROLE_ADMIN);
	ck_assert_str_eq(p.name, "");
	p = who(t, "beta-token-0123456789#x");
	ck_assert_int_eq(p.role, LESSOR_ROLE_WORKER);
	ck_assert_str_eq(p.name, "beta");
	ck_assert_str_eq(who(t, "gamma-token-0123456789").name, "g.a_m-m9");
	ck_assert_str_eq(who(t, "alpha-token-0123456789").name, "alpha");
	/* prefixes, extensions, case and nothing at all match nothing */
	ck_assert_int_eq(who(t, "alpha-token-012345678").role, LESSOR_ROLE_NONE);
	ck_assert_int_eq(who(t, "alpha-token-01234567890").role, LESSOR_ROLE_NONE);
	ck_assert_int_eq(who(t, "ALPHA-token-0123456789").role, LESSOR_ROLE_NONE);
	ck_assert_int_eq(who(t, "").role, LESSOR_ROLE_NONE);
	ck_assert_int_eq(who(t, NULL).role, LESSOR_ROLE_NONE);
	lessor_tokens_free(t);
	ck_assert_ptr_null(lessor_tokens_free(NULL));
}
END_TEST

START_TEST(test_refused_files)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
	    {"alpha\n", "line 1: expected 'NAME TOKEN'"},
	    {"\nalpha t0123456789abcdef extra\n", "line 2: expected 'NAME TOKEN'"},
	    {"al/pha t0123456789abcdef\n", "line 1: a worker name"},
	    {"alpha short\n", "line 1: a token must be"},
	    {"alpha t0123456789abcdef\nalpha u0123456789abcdef\n", "line 2: worker name 'alpha'"},
	    {"alpha t0123456789abcdef\nbeta t0123456789abcdef\n", "line 2: the same token"},
	    {"alpha " ADMIN "\n", "line 1: the same token"},
	};
	lessor_tokens *t = NULL;

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		ck_assert_int_eq(load(bad[i].text, &t), -EINVAL);
		ck_assert_msg(strstr(err, bad[i].why), "%s: %s", bad[i].text, err);
		/* never the token in the message */
		ck_assert_ptr_null(strstr(err, "0123456789abcdef"));
	}
	ck_assert_int_eq(load("", &t), 0); /* no worker at all is allowed */
	ck_assert_uint_eq(lessor_tokens_n_workers(t), 0);
	lessor_tokens_free(t);
}
END_TEST

/* A token file that is a FIFO (or any file but a regular one) is refused at
 * once: opening it for reading waited for a writer, forever, and at a reload
 * that held lessor's signal thread, so SIGTERM was never handled. */
START_TEST(test_fifo_refused_at_once)
{
	lessor_tokens *t = NULL;

	ck_assert_int_eq(unlink(admin_path), 0);
	ck_assert_int_eq(mkfifo(admin_path, 0600), 0);
	ck_assert_int_eq(load("", &t), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
	ck_assert_int_eq(unlink(admin_path), 0);
	ck_assert_int_eq(symlink("/dev/zero", admin_path), 0);
	ck_assert_int_eq(load("", &t), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
}
END_TEST

START_TEST(test_combinations)
{
	lessor_tokens *t = NULL;
	struct lessor_principal p;

	ck_assert_int_eq(lessor_tokens_load(&(struct lessor_token_files){.workers = workers_path},
	                                    &t, err, sizeof(err)),
	                 -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "needs --admin-token-file"));
	ck_assert_int_eq(lessor_tokens_load(&(struct lessor_token_files){.legacy = admin_path,
	                                                                 .admin = admin_path},
	                                    &t, err, sizeof(err)),
	                 -EINVAL);
	ck_assert_int_eq(lessor_tokens_load(&(struct lessor_token_files){.admin = "/nonexistent/x"},
	                                    &t, err, sizeof(err)),
	                 -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x"));
	/* nothing configured: nothing required */
	ck_assert_int_eq(lessor_tokens_load(&(struct lessor_token_files){0}, &t, err, sizeof(err)),
	                 0);
	ck_assert(!lessor_tokens_required(t));
	ck_assert_int_eq(who(t, NULL).role, LESSOR_ROLE_ANY);
	lessor_tokens_free(t);
	/* the deprecated single token: everything, and short tokens as before */
	ck_assert_int_eq(write_file_atomic(admin_path, "s3cret\n", 7, 0600), 0);
	ck_assert_int_eq(lessor_tokens_load(&(struct lessor_token_files){.legacy = admin_path}, &t,
	                                    err, sizeof(err)),
	                 0);
	ck_assert(lessor_tokens_legacy(t));
	p = who(t, "s3cret");
	ck_assert_int_eq(p.role, LESSOR_ROLE_ANY);
	ck_assert_int_eq(who(t, "s3cre").role, LESSOR_ROLE_NONE);
	lessor_tokens_free(t);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_tokens_unit");
	TCase *tc = tcase_create("tokens");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_roles_and_names);
	tcase_add_test(tc, test_refused_files);
	tcase_add_test(tc, test_fifo_refused_at_once);
	tcase_add_test(tc, test_combinations);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
