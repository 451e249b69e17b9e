#include "log/log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/strutil.h"
#include "util/time.h"

static struct {
	const char *ident;
	enum log_format format;
	int max_level;
	char worker_id[160];
} L = {"lessee", LOG_FORMAT_LOGFMT, LOG_INFO, ""};

static const char *const level_names[] = {
    [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit", [LOG_ERR] = "error",
    [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

const char *log_level_name(int prio)
{
	return prio >= 0 && prio <= LOG_DEBUG ? level_names[prio] : "info";
}

int log_parse_level(const char *s, int *ret)
{
	for (int i = 0; i <= LOG_DEBUG; i++)
		if (streq(s, level_names[i])) {
			*ret = i;
			return 0;
		}
	if (streq(s, "warn")) {
		*ret = LOG_WARNING;
		return 0;
	}
	return -EINVAL;
}

static const char *const format_names[] = {"auto", "logfmt", "json", "journal"};

const char *log_format_name(enum log_format f)
{
	return (size_t)f < ELEMENTSOF(format_names) ? format_names[f] : "auto";
}

int log_parse_format(const char *s, enum log_format *ret)
{
	for (size_t i = 0; i < ELEMENTSOF(format_names); i++)
		if (streq(s, format_names[i])) {
			*ret = (enum log_format)i;
			return 0;
		}
	return -EINVAL;
}

/* ---- lines buffered per loop turn ---- */

static struct {
	bool on;
	pthread_t owner;
	size_t len;
	char data[PIPE_BUF];
} B;

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static struct sigaction fatal_old[ELEMENTSOF(fatal_signals)];

/* Async-signal-safe: write and nothing else. */
static void write_all(const char *p, size_t len)
{
	while (len > 0) {
		ssize_t k = write(STDERR_FILENO, p, len);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return; /* stderr gone or full and non-blocking: as unbuffered */
		p += k;
		len -= (size_t)k;
	}
}

void log_flush(void)
{
	size_t len = B.len;

	if (len == 0 || !pthread_equal(pthread_self(), B.owner))
		return;
	B.len = 0;
	write_all(B.data, len);
}

/* What the loop turn logged so far goes out before the process dies; then the
 * previous action (the default, a sanitizer's) runs: a fault returns and
 * faults again into it, a signal that was sent is raised again. */
static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	size_t len = B.len;

	B.len = 0;
	if (len <= sizeof(B.data))
		write_all(B.data, len);
	for (size_t i = 0; i < ELEMENTSOF(fatal_signals); i++)
		if (fatal_signals[i] == sig)
			sigaction(sig, &fatal_old[i], NULL);
	errno = saved;
	if (si->si_code <= 0)
		raise(sig);
}

static void at_exit_flush(void)
{
	if (B.on)
		log_flush();
}

static void catch_fatal_signals(void)
{
	static bool done;
	struct sigaction sa = {.sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_NODEFER};

	if (done)
		return;
	done = true;
	atexit(at_exit_flush);
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ELEMENTSOF(fatal_signals); i++)
		sigaction(fatal_signals[i], &sa, &fatal_old[i]);
}

void log_set_buffered(bool on)
{
	if (B.on && !on)
		log_flush();
	if (on)
		catch_fatal_signals();
	B.owner = pthread_self();
	B.on = on;
}

/* One line: into the buffer when it is on and this is its thread, else
 * written at once (one write: lines never interleave). */
static void put_line(int prio, const char *line, size_t len)
{
	if (!B.on || !pthread_equal(pthread_self(), B.owner)) {
		write_all(line, len);
		return;
	}
	if (B.len + len > sizeof(B.data))
		log_flush();
	if (len > sizeof(B.data)) {
		write_all(line, len);
		return;
	}
	memcpy(B.data + B.len, line, len);
	B.len += len;
	if (prio <= LOG_WARNING)
		log_flush();
}

/* systemd sets JOURNAL_STREAM=<dev>:<ino> when stderr is connected to journald. */
static int stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return st.st_dev == (dev_t)dev && st.st_ino == (ino_t)ino;
}

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

static void emit_text(int prio, const struct log_fields *f, const char *msg);

/* Lines sent to a journal that is not there vanish: say so once, on stderr. */
static void journal_unreachable(const char *why)
{
	static bool warned;
	char msg[512];

	L.format = LOG_FORMAT_LOGFMT;
	if (warned)
		return;
	warned = true;
	snprintf(msg, sizeof(msg),
	         "log.format = journal, but journald is not reachable (%s): logging to stderr "
	         "as logfmt instead",
	         why);
	emit_text(LOG_WARNING, NULL, msg);
}

static bool journal_reachable(char *why, size_t len)
{
	struct stat st;

	if (stat(JOURNAL_SOCKET, &st) < 0) {
		snprintf(why, len, "%s: %s", JOURNAL_SOCKET, strerror(errno));
		return false;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(why, len, "%s is not a socket", JOURNAL_SOCKET);
		return false;
	}
	return true;
}

void log_setup(const char *ident, enum log_format format, int max_level)
{
	char why[320];

	L.ident = ident;
	L.max_level = max_level;
	if (format == LOG_FORMAT_AUTO)
		format = stderr_is_journal() ? LOG_FORMAT_JOURNAL : LOG_FORMAT_LOGFMT;
	L.format = format;
	if (format == LOG_FORMAT_JOURNAL && !journal_reachable(why, sizeof(why)))
		journal_unreachable(why);
}

void log_set_max_level(int prio)
{
	L.max_level = prio;
}

int log_get_max_level(void)
{
	return L.max_level;
}

enum log_format log_get_format(void)
{
	return L.format;
}

void log_set_worker_id(const char *id)
{
	snprintf(L.worker_id, sizeof(L.worker_id), "%s", id ? id : "");
}

/* A quoted string; control bytes as \u00XX in JSON, \xXX in logfmt. */
static void quoted(struct buf *b, const char *v, bool json)
{
	buf_append(b, "\"", 1);
	for (const char *p = v; *p; p++) {
		if (*p == '"' || *p == '\\')
			buf_printf(b, "\\%c", *p);
		else if (*p == '\n')
			buf_appends(b, "\\n");
		else if ((unsigned char)*p < 0x20)
			buf_printf(b, json ? "\\u%04x" : "\\x%02x", (unsigned char)*p);
		else
			buf_append(b, p, 1);
	}
	buf_append(b, "\"", 1);
}

static bool needs_quotes(const char *v)
{
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '=' || *p == '"' || *p == '\\')
			return true;
	return false;
}

static void field(struct buf *b, bool json, const char *key, const char *val)
{
	if (!val || !*val)
		return;
	buf_printf(b, json ? ",\"%s\":" : " %s=", key);
	if (json || needs_quotes(val))
		quoted(b, val, json);
	else
		buf_appends(b, val); /* logfmt leaves plain words bare */
}

/* A number: bare in both formats. */
static void num_field(struct buf *b, bool json, const char *key, long long v)
{
	buf_printf(b, json ? ",\"%s\":%lld" : " %s=%lld", key, v);
}

static void end_fields(struct buf *b, bool json, const struct log_run_end *e)
{
	if (e->has_exit_code)
		num_field(b, json, "exit_code", e->exit_code);
	field(b, json, "signal", e->signal);
	num_field(b, json, "duration_ms", (long long)e->duration_ms);
	if (e->pid > 0)
		num_field(b, json, "pid", e->pid);
	num_field(b, json, "log_bytes", (long long)e->log_bytes);
}

static void emit_text(int prio, const struct log_fields *f, const char *msg)
{
	struct buf b = BUF_INIT(0);
	char ts[TIME_RFC3339_MAX], attempt[16] = "";
	bool json = L.format == LOG_FORMAT_JSON;

	time_format_rfc3339(ts, sizeof(ts), time_real());
	if (f && f->attempt)
		snprintf(attempt, sizeof(attempt), "%u", f->attempt);
	if (json)
		buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"%s\"", ts, log_level_name(prio));
	else
		buf_printf(&b, "ts=%s level=%s", ts, log_level_name(prio));
	field(&b, json, "msg", msg);
	field(&b, json, "worker_id", L.worker_id);
	if (f) {
		field(&b, json, "run_id", f->run_id);
		field(&b, json, "workflow", f->workflow);
		field(&b, json, "attempt", attempt);
		field(&b, json, "outcome", f->outcome);
		if (f->end)
			end_fields(&b, json, f->end);
	}
	buf_appends(&b, json ? "}\n" : "\n");
	if (b.data)
		put_line(prio, b.data, b.len);
	buf_done(&b);
}

static void iov_field(struct iovec *iov, char bufs[][256], int *n, const char *key, const char *val)
{
	if (!val || !*val)
		return;
	snprintf(bufs[*n], 256, "%s=%s", key, val);
	iov[*n] = (struct iovec){bufs[*n], strlen(bufs[*n])};
	(*n)++;
}

static void journal_end_fields(struct iovec *iov, char bufs[][256], int *n,
                               const struct log_run_end *e)
{
	char v[4][32] = {"", "", "", ""};

	if (e->has_exit_code)
		snprintf(v[0], sizeof(v[0]), "%d", e->exit_code);
	snprintf(v[1], sizeof(v[1]), "%llu", (unsigned long long)e->duration_ms);
	if (e->pid > 0)
		snprintf(v[2], sizeof(v[2]), "%d", e->pid);
	snprintf(v[3], sizeof(v[3]), "%llu", (unsigned long long)e->log_bytes);
	iov_field(iov, bufs, n, "EXIT_CODE", v[0]);
	iov_field(iov, bufs, n, "SIGNAL", e->signal);
	iov_field(iov, bufs, n, "DURATION_MS", v[1]);
	iov_field(iov, bufs, n, "RUN_PID", v[2]);
	iov_field(iov, bufs, n, "LOG_BYTES", v[3]);
}

/* Only the fields that have a value: an empty RUN_ID= would match every filter. */
static void emit_journal(int prio, const struct log_fields *f, const char *msg)
{
	char bufs[12][256], attempt[16] = "", p[2] = {(char)('0' + prio), 0};
	struct buf m = BUF_INIT(0);
	struct iovec iov[13];
	int n = 0, r;

	buf_printf(&m, "MESSAGE=%s", msg);
	iov[n++] = (struct iovec){m.data, m.len};
	iov_field(iov, bufs, &n, "PRIORITY", p);
	iov_field(iov, bufs, &n, "SYSLOG_IDENTIFIER", L.ident);
	iov_field(iov, bufs, &n, "WORKER_ID", L.worker_id);
	if (f) {
		if (f->attempt)
			snprintf(attempt, sizeof(attempt), "%u", f->attempt);
		iov_field(iov, bufs, &n, "RUN_ID", f->run_id);
		iov_field(iov, bufs, &n, "WORKFLOW", f->workflow);
		iov_field(iov, bufs, &n, "ATTEMPT", attempt);
		iov_field(iov, bufs, &n, "OUTCOME", f->outcome);
		if (f->end)
			journal_end_fields(iov, bufs, &n, f->end);
	}
	if (m.data && (r = sd_journal_sendv(iov, n)) < 0) {
		char why[128];

		snprintf(why, sizeof(why), "sending failed: %s", strerror(-r));
		journal_unreachable(why);
		emit_text(prio, f, msg); /* this line too */
	}
	buf_done(&m);
}

void log_emitv(int prio, const struct log_fields *f, const char *fmt, va_list ap)
{
	char msg[2048];
	int saved = errno;

	if (prio > L.max_level)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (L.format == LOG_FORMAT_JOURNAL)
		emit_journal(prio, f, msg);
	else
		emit_text(prio, f, msg);
	errno = saved;
}

void log_emit(int prio, const struct log_fields *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emitv(prio, f, fmt, ap);
	va_end(ap);
}

int log_errno(int prio, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emitv(prio, NULL, fmt, ap);
	va_end(ap);
	return err < 0 ? err : -err;
}
