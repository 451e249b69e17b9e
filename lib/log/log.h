/* One log module for every program: journald native fields when stderr is the
 * journal (JOURNAL_STREAM), logfmt or JSON lines on stderr otherwise.
 * Library code returns errors; callers log once, with context. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

#include "util/macro.h"

enum log_format {
	LOG_FORMAT_AUTO, /* journal if JOURNAL_STREAM matches stderr, else logfmt */
	LOG_FORMAT_LOGFMT,
	LOG_FORMAT_JSON,
	LOG_FORMAT_JOURNAL,
};

/* What a run's end line carries: exit_code= or signal=, duration_ms=, pid=,
 * log_bytes= (JSON numbers; journald EXIT_CODE= SIGNAL= DURATION_MS= RUN_PID=
 * LOG_BYTES=). */
struct log_run_end {
	bool has_exit_code;
	int exit_code;
	const char *signal; /* "SIGSEGV", or NULL */
	uint64_t duration_ms;
	int pid; /* 0 = never started */
	uint64_t log_bytes;
};

/* Structured context attached to a line; any member may be NULL/0. */
struct log_fields {
	const char *run_id;
	const char *workflow;
	unsigned attempt;
	const char *outcome;
	const struct log_run_end *end; /* only on a run's end line */
};

void log_setup(const char *ident, enum log_format format, int max_level);
int log_parse_format(const char *s, enum log_format *ret);
const char *log_format_name(enum log_format f);
int log_parse_level(const char *s, int *ret);
const char *log_level_name(int prio);
void log_set_max_level(int prio);
int log_get_max_level(void);
/* Attached to every line as WORKER_ID= / worker_id=. */
void log_set_worker_id(const char *id);
enum log_format log_get_format(void);

/* Lines on stderr (logfmt, JSON) gathered and written together, one write(2)
 * per log_flush(): the daemon turns this on around its loop and flushes once
 * per loop turn.  Only the calling thread's lines are gathered (another
 * thread's are written at once).  A line at warning or worse is written at
 * once, with the lines before it; a line that would overflow the buffer
 * (PIPE_BUF, so every write stays atomic on a pipe) writes what is there
 * first.  Turning it on also flushes at exit() and on SIGSEGV, SIGBUS, SIGILL,
 * SIGFPE and SIGABRT (then the previous action runs).  Off flushes.  journald
 * lines are sent one by one either way. */
void log_set_buffered(bool on);
void log_flush(void);

void log_emitv(int prio, const struct log_fields *f, const char *fmt, va_list ap) _printf_(3, 0);
void log_emit(int prio, const struct log_fields *f, const char *fmt, ...) _printf_(3, 4);
/* Logs and returns err (a negative errno), for `return log_errno(r, ...)`. */
int log_errno(int prio, int err, const char *fmt, ...) _printf_(3, 4);

#define log_debug(...) log_emit(LOG_DEBUG, NULL, __VA_ARGS__)
#define log_info(...) log_emit(LOG_INFO, NULL, __VA_ARGS__)
#define log_notice(...) log_emit(LOG_NOTICE, NULL, __VA_ARGS__)
#define log_warning(...) log_emit(LOG_WARNING, NULL, __VA_ARGS__)
#define log_error(...) log_emit(LOG_ERR, NULL, __VA_ARGS__)
