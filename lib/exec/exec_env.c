/* A child's environment: an allowlist of the daemon's own, never its systemd
 * protocol variables or its LESSEE_* settings (the token lives there), then the
 * run's explicit variables. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "util/macro.h"
#include "util/strutil.h"

/* Meant for the daemon alone: a child holding them could notify, feed the
 * watchdog or claim sockets and credentials on the daemon's behalf. */
static const char *const systemd_vars[] = {
    "NOTIFY_SOCKET",  "WATCHDOG_PID",          "WATCHDOG_USEC",  "LISTEN_FDS",    "LISTEN_PID",
    "LISTEN_FDNAMES", "CREDENTIALS_DIRECTORY", "JOURNAL_STREAM", "INVOCATION_ID",
};

static const char *const default_allow[] = {
    "PATH", "LANG",    "LANGUAGE", "LC_*",   "TZ",   "HOME",
    "USER", "LOGNAME", "SHELL",    "TMPDIR", "TERM", NULL,
};

#define DAEMON_PREFIX "LESSEE_"

/* "NAME=value" or "NAME": the length of NAME. */
static size_t name_len(const char *s)
{
	return strcspn(s, "=");
}

static bool name_is(const char *name, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(name, lit, n) == 0;
}

static bool is_systemd_var(const char *name, size_t n)
{
	for (size_t i = 0; i < ELEMENTSOF(systemd_vars); i++)
		if (name_is(name, n, systemd_vars[i]))
			return true;
	return false;
}

static bool is_daemon_var(const char *name, size_t n)
{
	return n >= strlen(DAEMON_PREFIX) &&
	       memcmp(name, DAEMON_PREFIX, strlen(DAEMON_PREFIX)) == 0;
}

bool exec_env_forbidden(const char *name)
{
	size_t n;

	if (!name)
		return false;
	n = name_len(name);
	return is_systemd_var(name, n) || is_daemon_var(name, n);
}

/* An entry ending in '*' allows every name it is a prefix of ("LC_*"). */
static bool is_allowed(const char *name, size_t n, const char *const *allow)
{
	for (; *allow; allow++) {
		size_t an = strlen(*allow);

		if (an > 0 && (*allow)[an - 1] == '*') {
			if (n >= an - 1 && memcmp(name, *allow, an - 1) == 0)
				return true;
		} else if (name_is(name, n, *allow)) {
			return true;
		}
	}
	return false;
}

static char **env_find(char **env, const char *name, size_t n)
{
	for (size_t i = 0; env && env[i]; i++)
		if (name_len(env[i]) == n && memcmp(env[i], name, n) == 0)
			return &env[i];
	return NULL;
}

static bool is_assignment(const char *s, size_t n)
{
	return n > 0 && s[n] == '=';
}

static int env_from_parent(char ***env, char *const *from, const char *const *allow)
{
	for (size_t i = 0; from && from[i]; i++) {
		size_t n = name_len(from[i]);
		int r;

		if (!is_assignment(from[i], n) || !is_allowed(from[i], n, allow) ||
		    exec_env_forbidden(from[i]) || env_find(*env, from[i], n))
			continue; /* the first of duplicates wins, as with getenv() */
		r = strv_extend(env, from[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

static int env_set(char ***env, const char *assignment)
{
	size_t n = name_len(assignment);
	char **slot, *copy;

	if (!is_assignment(assignment, n))
		return -EINVAL;
	if (is_systemd_var(assignment, n))
		return -EPERM;
	slot = env_find(*env, assignment, n);
	if (!slot)
		return strv_extend(env, assignment);
	copy = strdup(assignment);
	if (!copy)
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

int exec_env_overlay(char *const *base, char *const *extra, char ***ret)
{
	size_t nb = 0, ne = 0, n;
	char **env;

	while (base && base[nb])
		nb++;
	while (extra && extra[ne])
		ne++;
	env = calloc(nb + ne + 1, sizeof(char *));
	if (!env)
		return -ENOMEM;
	if (nb)
		memcpy(env, base, nb * sizeof(char *));
	n = nb;
	for (size_t i = 0; i < ne; i++) {
		size_t len = name_len(extra[i]);
		char **slot;

		if (!is_assignment(extra[i], len) || is_systemd_var(extra[i], len)) {
			free(env);
			return is_assignment(extra[i], len) ? -EPERM : -EINVAL;
		}
		slot = env_find(env, extra[i], len);
		if (slot)
			*slot = extra[i];
		else
			env[n++] = extra[i];
	}
	*ret = env;
	return 0;
}

int exec_env_build(char *const *from, const char *const *allow, char *const *extra, char ***ret)
{
	_cleanup_(strv_freep) char **env = NULL;
	int r;

	if (!ret)
		return -EINVAL;
	r = env_from_parent(&env, from ? from : environ, allow ? allow : default_allow);
	if (r < 0)
		return r;
	for (size_t i = 0; extra && extra[i]; i++) {
		r = env_set(&env, extra[i]);
		if (r < 0)
			return r;
	}
	if (!env && !(env = calloc(1, sizeof(char *))))
		return -ENOMEM;
	*ret = TAKE_PTR(env);
	return 0;
}
