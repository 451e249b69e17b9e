/* ledger LEDGER LOCKDIR LINE_US: the chaos test's job (tests/chaos/chaos.c).
 *
 * Appends one line per event to the shared LEDGER (O_APPEND, one write() per
 * line, so lines from concurrent jobs never interleave):
 *
 *   START|BEAT|TERM|END|OVERLAP <run id> <attempt> <pid> <CLOCK_MONOTONIC ns> <worker id>
 *
 * then writes the run's deterministic output (tests/aux/ledger.h) to stdout,
 * one line per write() every LINE_US x chaos_pause_factor() microseconds,
 * and its result file.
 * OVERLAP: another process still held LOCKDIR/<run id> (an flock the kernel
 * drops when its holder dies, even by SIGKILL), i.e. two executions of one run
 * at once.  A quarter of the ids trap SIGTERM and carry on (a hostile child);
 * the others die of it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "testutil.h"

static int ledger_fd = -1;
static const char *run_id = "?", *attempt = "?", *worker = "?";
static volatile sig_atomic_t got_term;

static void note(const char *kind)
{
	struct timespec ts;
	char line[512];
	int n;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(line, sizeof(line), "%s %s %s %d %lld %s\n", kind, run_id, attempt,
	             (int)getpid(), (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, worker);
	if (n > 0 && write(ledger_fd, line, (size_t)n) != n)
		_exit(3);
}

static void on_term(int sig)
{
	got_term = 1;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(4);
		p += w;
		n -= (size_t)w;
	}
}

static void write_result(const char *path)
{
	char buf[512];
	int n = chaos_result(run_id, buf, sizeof(buf));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0) {
		fprintf(stderr, "ledger: cannot create the result file %s: %m\n", path);
		_exit(5);
	}
	write_all(fd, buf, (size_t)n);
	if (close(fd) < 0)
		_exit(5);
}

static void pause_us(long us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int main(int argc, char **argv)
{
	const char *result = getenv("LESSEE_RESULT_FILE");
	char path[4096], line[256];
	unsigned n;
	int lock_fd;
	bool term_noted = false;
	static const char usage[] = "usage: ledger LEDGER LOCKDIR LINE_US (as a lessee run)\n";

	if (tu_std_answer(argc, argv, "ledger (lessee tests)", usage))
		return 0;
	if (argc != 4 || !getenv("LESSEE_RUN_ID") || !result) {
		fputs(usage, stderr);
		return 2;
	}
	run_id = getenv("LESSEE_RUN_ID");
	attempt = getenv("LESSEE_ATTEMPT") ? getenv("LESSEE_ATTEMPT") : "?";
	worker = getenv("LESSEE_WORKER_ID") ? getenv("LESSEE_WORKER_ID") : "?";
	ledger_fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	snprintf(path, sizeof(path), "%s/%s", argv[2], run_id);
	lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (ledger_fd < 0 || lock_fd < 0)
		return 3;
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0)
		note("OVERLAP");
	note("START");
	if (chaos_traps_term(run_id))
		sigaction(SIGTERM, &(struct sigaction){.sa_handler = on_term}, NULL);
	n = chaos_lines(run_id);
	for (unsigned k = 0; k < n; k++) {
		int len = chaos_line(run_id, k, n, line, sizeof(line));

		if (got_term && !term_noted) {
			note("TERM");
			term_noted = true;
		}
		write_all(STDOUT_FILENO, line, (size_t)len);
		if (k % 10 == 9)
			note("BEAT");
		pause_us(atol(argv[3]) * (long)chaos_pause_factor(run_id));
	}
	write_result(result);
	note("END");
	return 0;
}
