/* lib/ev: the event loop, on the backend named by $LESSEE_IO_BACKEND (tests/run.sh
 * runs this binary once per backend). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ev/ev-int.h"
#include "ev/ev.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/time.h"

/* Slack for "soon": generous, and scaled for valgrind via CK_TIMEOUT_MULTIPLIER. */
static usec_t scaled(usec_t u)
{
	const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
	double f = m ? atof(m) : 1.0;

	return (usec_t)((double)u * (f > 1.0 ? f : 1.0));
}

#define RUN_UNTIL(e, cond)                                                                         \
	do {                                                                                       \
		usec_t _end = time_mono() + scaled(10 * USEC_PER_SEC);                             \
		while (!(cond)) {                                                                  \
			ck_assert_int_ge(ev_run_once((e), 100 * USEC_PER_MSEC), 0);                \
			ck_assert_msg(time_mono() < _end, "timed out waiting for %s", #cond);      \
		}                                                                                  \
	} while (0)

/* One iteration that may wait a little: nothing must be dispatched. */
#define ASSERT_QUIET(e) ck_assert_int_eq(ev_run_once((e), 20 * USEC_PER_MSEC), 0)

static ev_t *new_loop(void)
{
	ev_t *e = NULL;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_str_eq(ev_backend(e), tu_backend());
	return e;
}

static void make_pipe(int p[2])
{
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
}

static void put_byte(int fd)
{
	ck_assert_int_eq(write(fd, "x", 1), 1);
}

/* ---- backend selection ----------------------------------------------------- */

START_TEST(test_backend_selection)
{
	const char *env = getenv("LESSEE_IO_BACKEND");
	char *saved = env ? strdup(env) : NULL;
	ev_t *e = new_loop();

	ck_assert_ptr_null(ev_backend_reason(e));
	e = ev_free(e);
	ck_assert_ptr_null(e);
	ck_assert_ptr_null(ev_free(NULL));

	ck_assert_int_eq(ev_new(&e, "epoll"), 0);
	ck_assert_str_eq(ev_backend(e), "epoll");
	ck_assert_ptr_null(ev_backend_reason(e));
	e = ev_free(e);
	ck_assert_int_eq(ev_new(&e, "io_uring"), 0);
	ck_assert_str_eq(ev_backend(e), "io_uring");
	e = ev_free(e);
	ck_assert_int_eq(ev_new(&e, "kqueue"), -EINVAL);

	setenv("LESSEE_IO_BACKEND", "select", 1);
	ck_assert_int_eq(ev_new(&e, NULL), -EINVAL);
	/* An explicit argument wins over the environment. */
	ck_assert_int_eq(ev_new(&e, "epoll"), 0);
	e = ev_free(e);

	/* Unforced: io_uring, or epoll with the reason io_uring was refused. */
	unsetenv("LESSEE_IO_BACKEND");
	ck_assert_int_eq(ev_new(&e, NULL), 0);
	if (strcmp(ev_backend(e), "io_uring") == 0)
		ck_assert_ptr_null(ev_backend_reason(e));
	else
		ck_assert_ptr_nonnull(ev_backend_reason(e));
	e = ev_free(e);
	if (saved)
		setenv("LESSEE_IO_BACKEND", saved, 1);
	free(saved);
}
END_TEST

/* In a child: make io_uring_setup fail with err, then ev_new must fall back to
 * epoll and say why, and a forced io_uring must fail with err.  Exit code =
 * the step that failed. */
static void got_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	*(uint32_t *)userdata = revents;
}

static int seccomp_child(int err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	char want[128];
	uint32_t got = 0;
	int p[2];
	ev_t *e = NULL;

	if (!ctx ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO((unsigned)err), SCMP_SYS(io_uring_setup), 0) < 0)
		return 10;
	if (seccomp_load(ctx) < 0)
		return 11;
	seccomp_release(ctx);
	unsetenv("LESSEE_IO_BACKEND");
	if (ev_new(&e, NULL) < 0)
		return 12;
	if (strcmp(ev_backend(e), "epoll") != 0)
		return 13;
	snprintf(want, sizeof(want), "io_uring_queue_init: %s", strerror(err));
	if (!ev_backend_reason(e) || strcmp(ev_backend_reason(e), want) != 0)
		return 14;
	/* The fallback loop works. */
	if (pipe2(p, O_CLOEXEC) < 0 || write(p[1], "x", 1) != 1)
		return 15;
	if (ev_io_add(e, p[0], EV_READ, got_cb, &got, NULL) < 0)
		return 16;
	if (ev_run_once(e, USEC_PER_SEC) != 1 || got != EV_READ)
		return 17;
	ev_free(e);
	close(p[0]);
	close(p[1]);
	/* Forced, it is an error, with the kernel's errno. */
	if (ev_new(&e, "io_uring") != -err)
		return 18;
	return 0;
}

static void check_seccomp_fallback(int err)
{
	int status;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(seccomp_child(err));
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	              "seccomp child (errno %d) failed at step %d", err, WEXITSTATUS(status));
}

START_TEST(test_seccomp_fallback)
{
	check_seccomp_fallback(EPERM);
	check_seccomp_fallback(ENOSYS);
}
END_TEST

/* ---- timers ---------------------------------------------------------------- */

#define NORDER 6

struct order {
	ev_t *e;
	int fired[NORDER];
	usec_t at[NORDER];
	int n;
	ev_timer_t *t[NORDER];
};

static void order_cb(ev_timer_t *t, void *userdata)
{
	struct order *o = userdata;

	for (int i = 0; i < NORDER; i++)
		if (o->t[i] == t) {
			o->at[o->n] = time_mono();
			o->fired[o->n++] = i;
		}
	ck_assert(!ev_timer_armed(t));
	ck_assert_uint_eq(ev_timer_deadline(t), USEC_INFINITY);
}

START_TEST(test_timer_order)
{
	/* deadlines in ms; 2 and 4 tie and must fire in arming order */
	static const unsigned ms[NORDER] = {60, 20, 40, 0, 40, 80};
	static const int want[NORDER] = {3, 1, 2, 4, 0, 5};
	struct order o = {0};
	usec_t deadline[NORDER];
	ev_t *e = new_loop();

	o.e = e;
	for (int i = 0; i < NORDER; i++) {
		ck_assert_int_eq(ev_timer_add(e, ms[i] * USEC_PER_MSEC, order_cb, &o, &o.t[i]), 0);
		ck_assert(ev_timer_armed(o.t[i]));
		deadline[i] = ev_timer_deadline(o.t[i]);
		ck_assert_uint_eq(deadline[i], ev_now(e) + ms[i] * USEC_PER_MSEC);
	}
	RUN_UNTIL(e, o.n == NORDER);
	for (int i = 0; i < NORDER; i++) {
		int k = o.fired[i];

		ck_assert_int_eq(k, want[i]);
		ck_assert_uint_ge(o.at[i], deadline[k]);
		ck_assert_msg(o.at[i] - deadline[k] <= scaled(50 * USEC_PER_MSEC),
		              "timer %d fired %llu us late", k,
		              (unsigned long long)(o.at[i] - deadline[k]));
	}
	ASSERT_QUIET(e);
	/* Re-armed timers fire again, once per arming. */
	o.n = 0;
	ck_assert_int_eq(ev_timer_arm(o.t[0], 5 * USEC_PER_MSEC), 0);
	ck_assert_int_eq(ev_timer_arm_at(o.t[1], ev_now(e) + 1 * USEC_PER_MSEC), 0);
	RUN_UNTIL(e, o.n == 2);
	ck_assert_int_eq(o.fired[0], 1);
	ck_assert_int_eq(o.fired[1], 0);
	ASSERT_QUIET(e);
	ev_free(e);
}
END_TEST

/* Each timer's slot knows its deadline and arming order; fired timers must come
 * out in (deadline, arming order) order.  Loops over thousands of timers count
 * errors instead of asserting each time (a passing ck_assert costs a write). */
struct tctx {
	usec_t last_deadline;
	uint64_t last_seq, seq;
	bool sorted;
	int fired, errors;
};

struct tslot {
	struct tctx *c;
	ev_timer_t *t;
	usec_t deadline;
	uint64_t seq;
	int count;
};

static void slot_arm_at(struct tslot *s, usec_t when)
{
	s->c->errors += ev_timer_arm_at(s->t, when) != 0 || !ev_timer_armed(s->t) ||
	                ev_timer_deadline(s->t) != when;
	s->deadline = when;
	s->seq = ++s->c->seq;
}

static void slot_cb(ev_timer_t *t, void *userdata)
{
	struct tslot *s = userdata;
	struct tctx *c = s->c;

	c->errors += t != s->t || ev_timer_armed(t) || ev_timer_deadline(t) != USEC_INFINITY;
	if (s->deadline < c->last_deadline ||
	    (s->deadline == c->last_deadline && s->seq < c->last_seq))
		c->sorted = false;
	c->last_deadline = s->deadline;
	c->last_seq = s->seq;
	s->count++;
	c->fired++;
}

#define NMANY 10000

START_TEST(test_timer_many)
{
	static struct tslot slot[NMANY];
	struct tctx c = {.sorted = true};
	ev_t *e = new_loop();
	int nwant = 0;

	srand(42);
	for (int i = 0; i < NMANY; i++) {
		slot[i] = (struct tslot){.c = &c};
		c.errors += ev_timer_add(e, USEC_INFINITY, slot_cb, &slot[i], &slot[i].t) != 0;
		slot_arm_at(&slot[i], ev_now(e) + (usec_t)(rand() % 50000));
	}
	/* Re-arm every other one, disarm every third, delete every seventh. */
	for (int i = 0; i < NMANY; i++) {
		bool want = true;

		if (i % 2 == 0)
			slot_arm_at(&slot[i], ev_now(e) + (usec_t)(rand() % 80000));
		if (i % 3 == 0) {
			ev_timer_disarm(slot[i].t);
			c.errors += ev_timer_armed(slot[i].t) ||
			            ev_timer_deadline(slot[i].t) != USEC_INFINITY;
			want = false;
		}
		if (i % 7 == 0) {
			slot[i].t = ev_timer_del(slot[i].t);
			want = false;
		}
		slot[i].count = want ? -1 : 0; /* -1 + one firing = 0 */
		nwant += want;
	}
	ck_assert_int_eq(c.errors, 0);
	RUN_UNTIL(e, c.fired == nwant);
	ASSERT_QUIET(e);
	ck_assert(c.sorted);
	for (int i = 0; i < NMANY; i++)
		c.errors += slot[i].count != 0;
	ck_assert_int_eq(c.errors, 0);
	ev_free(e);
}
END_TEST

/* Timers already due fire in one iteration, in (deadline, arming order) order,
 * however they were moved around the heap. */
START_TEST(test_timer_heap_order)
{
	enum { N = 4096 };
	static struct tslot slot[N];
	struct tctx c = {.sorted = true};
	ev_t *e = new_loop();
	usec_t base = ev_now(e) - 1000; /* deadlines in the past */
	int narmed = 0;

	srand(7);
	for (int i = 0; i < N; i++) {
		slot[i] = (struct tslot){.c = &c};
		c.errors += ev_timer_add(e, USEC_INFINITY, slot_cb, &slot[i], &slot[i].t) != 0 ||
		            ev_timer_armed(slot[i].t);
		/* few distinct deadlines: many ties */
		slot_arm_at(&slot[i], base + (usec_t)(rand() % 200));
	}
	for (int i = 0; i < N; i += 3)
		slot_arm_at(&slot[i], base + (usec_t)(rand() % 200));
	for (int i = 1; i < N; i += 5)
		ev_timer_disarm(slot[i].t);
	for (int i = 1; i < N; i += 10)
		slot_arm_at(&slot[i], base + (usec_t)(rand() % 200));
	for (int i = 0; i < N; i++)
		narmed += ev_timer_armed(slot[i].t);
	ck_assert_int_lt(narmed, N);
	ck_assert_int_eq(ev_run_once(e, 0), narmed);
	ck_assert_int_eq(c.fired, narmed);
	ck_assert(c.sorted);
	ck_assert_int_eq(c.errors, 0);
	ev_free(e);
}
END_TEST

struct chain {
	ev_t *e;
	ev_timer_t *self, *victim;
	int self_count, victim_count;
};

static void victim_cb(ev_timer_t *t, void *userdata)
{
	((struct chain *)userdata)->victim_count++;
}

/* Deletes the other timer, due in the same iteration; re-arms itself for "now". */
static void killer_cb(ev_timer_t *t, void *userdata)
{
	struct chain *c = userdata;

	c->self_count++;
	c->victim = ev_timer_del(c->victim);
	if (c->self_count < 5)
		ck_assert_int_eq(ev_timer_arm(t, 0), 0);
}

START_TEST(test_timer_remove_in_callback)
{
	struct chain c = {0};
	ev_t *e = new_loop();

	c.e = e;
	ck_assert_int_eq(ev_timer_add(e, 0, killer_cb, &c, &c.self), 0);
	ck_assert_int_eq(ev_timer_add(e, 0, victim_cb, &c, &c.victim), 0);
	/* Both due now; the killer was armed first, so it runs and the victim not.
	 * Re-arming for "now" waits for the next iteration: one call per run. */
	ck_assert_int_eq(ev_run_once(e, 0), 1);
	ck_assert_int_eq(c.self_count, 1);
	for (int i = 2; i <= 5; i++) {
		ck_assert_int_eq(ev_run_once(e, USEC_INFINITY), 1);
		ck_assert_int_eq(c.self_count, i);
	}
	ASSERT_QUIET(e);
	ck_assert_int_eq(c.victim_count, 0);
	ck_assert(!ev_timer_armed(c.self));
	ev_timer_del(c.self);
	ev_free(e);
}
END_TEST

static void exit_cb(ev_timer_t *t, void *userdata)
{
	ev_t *e = userdata;

	/* No nesting: callbacks never run from inside another ev_* call. */
	ck_assert_int_eq(ev_run_once(e, 0), -EBUSY);
	ev_exit(e, 42);
}

START_TEST(test_run_exit)
{
	ev_t *e = new_loop();
	usec_t t0 = ev_now(e);

	ck_assert_int_eq(ev_timer_add(e, 30 * USEC_PER_MSEC, exit_cb, e, NULL), 0);
	ck_assert_int_eq(ev_run(e), 42);
	ck_assert_uint_ge(ev_now(e), t0 + 30 * USEC_PER_MSEC);
	ck_assert_uint_le(ev_now(e), time_mono());
	/* ev_exit before ev_run: returns at once */
	ev_exit(e, 7);
	ck_assert_int_eq(ev_run(e), 7);
	/* poll with nothing to do */
	ck_assert_int_eq(ev_run_once(e, 0), 0);
	ev_free(e);
}
END_TEST

/* ---- deferred callbacks ---------------------------------------------------- */

struct dlog {
	ev_t *e;
	char s[32];
	int n;
};

static void defer_cb(void *userdata);

static void dlog_add(struct dlog *d, char c)
{
	d->s[d->n++] = c;
	d->s[d->n] = 0;
}

static struct dlog *g_dlog;
static void defer_a(void *u)
{
	dlog_add(g_dlog, 'a');
}
static void defer_b(void *u)
{
	dlog_add(g_dlog, *(const char *)u);
}
static void defer_cb(void *userdata)
{
	struct dlog *d = userdata;

	dlog_add(d, 'D');
	/* queued from a deferred callback: runs in the next iteration */
	ck_assert_int_eq(ev_defer(d->e, defer_a, NULL), 0);
}

START_TEST(test_defer)
{
	struct dlog d = {0};
	ev_t *e = new_loop();
	static char x = 'x', y = 'y';

	d.e = e;
	g_dlog = &d;
	ck_assert_int_eq(ev_defer(e, defer_a, NULL), 0);
	ck_assert_int_eq(ev_defer(e, defer_b, &x), 0);
	ck_assert_int_eq(ev_defer(e, defer_b, &y), 0);
	ck_assert_int_eq(ev_defer(e, defer_b, &x), 0);
	ck_assert_int_eq(ev_defer(e, defer_cb, &d), 0);
	/* drops both (defer_b, &x), keeps (defer_b, &y) */
	ev_defer_cancel(e, defer_b, &x);
	ev_defer_cancel(e, defer_b, NULL);
	/* Pending deferred callbacks: even an infinite timeout does not block. */
	ck_assert_int_eq(ev_run_once(e, USEC_INFINITY), 3);
	ck_assert_str_eq(d.s, "ayD");
	ck_assert_int_eq(ev_run_once(e, USEC_INFINITY), 1);
	ck_assert_str_eq(d.s, "ayDa");
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_defer(e, defer_a, NULL), 0);
	ev_defer_cancel(e, defer_a, NULL);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_defer(e, NULL, NULL), -EINVAL);
	ev_free(e);
}
END_TEST

/* ---- fd watches ------------------------------------------------------------ */

struct iorec {
	int calls;
	uint32_t revents;
	bool drain;
};

static void rec_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct iorec *r = userdata;
	char buf[64];

	r->calls++;
	r->revents = revents;
	if (r->drain)
		while (read(fd, buf, sizeof(buf)) > 0)
			;
}

START_TEST(test_io_level_read)
{
	struct iorec r = {0};
	ev_io_t *w;
	int p[2];
	ev_t *e = new_loop();

	make_pipe(p);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, rec_cb, &r, &w), 0);
	ck_assert_uint_eq(ev_io_get_events(w), EV_READ);
	ASSERT_QUIET(e);
	put_byte(p[1]);
	/* Unread data is reported again on every iteration. */
	for (int i = 1; i <= 3; i++) {
		ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
		ck_assert_int_eq(r.calls, i);
		ck_assert_uint_eq(r.revents, EV_READ);
	}
	/* Paused: nothing, although data is there. */
	ck_assert_int_eq(ev_io_set_events(w, 0), 0);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_io_set_events(w, EV_READ), 0);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	/* Once read, quiet. */
	r.drain = true;
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ASSERT_QUIET(e);
	ck_assert_int_eq(r.calls, 5);
	/* and it fires again for new data */
	put_byte(p[1]);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_int_eq(r.calls, 6);
	ev_io_del(w);
	ev_free(e);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(test_io_write_toggle)
{
	struct iorec r = {0};
	ev_io_t *w;
	int p[2];
	char buf[4096];
	ev_t *e = new_loop();

	make_pipe(p);
	ck_assert_int_eq(ev_io_add(e, p[1], EV_WRITE, rec_cb, &r, &w), 0);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_uint_eq(r.revents, EV_WRITE);
	ck_assert_int_eq(ev_io_set_events(w, 0), 0);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_io_set_events(w, EV_WRITE | EV_READ), 0);
	ck_assert_uint_eq(ev_io_get_events(w), EV_WRITE | EV_READ);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_uint_eq(r.revents, EV_WRITE);
	/* A full pipe is not writable... */
	memset(buf, 'x', sizeof(buf));
	while (write(p[1], buf, sizeof(buf)) > 0)
		;
	ck_assert_int_eq(errno, EAGAIN);
	ASSERT_QUIET(e);
	/* ...until the reader makes room. */
	while (read(p[0], buf, sizeof(buf)) > 0)
		;
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_uint_eq(r.revents, EV_WRITE);
	ck_assert_int_eq(ev_io_set_events(w, 1u << 7), -EINVAL);
	ev_io_del(w);
	ev_free(e);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(test_io_hup)
{
	struct iorec r = {0};
	ev_io_t *w;
	int p[2];
	ev_t *e = new_loop();

	make_pipe(p);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, rec_cb, &r, &w), 0);
	ASSERT_QUIET(e);
	close(p[1]);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_msg(r.revents & EV_HUP, "revents %#x", r.revents);
	/* A paused watch on a hung-up pipe does not wake the loop. */
	ck_assert_int_eq(ev_io_set_events(w, 0), 0);
	ASSERT_QUIET(e);
	ev_io_del(w);
	ev_free(e);
	close(p[0]);
}
END_TEST

START_TEST(test_io_errors)
{
	struct iorec r = {0};
	ev_io_t *w;
	int p[2];
	ev_t *e = new_loop();

	make_pipe(p);
	ck_assert_int_eq(ev_io_add(e, -1, EV_READ, rec_cb, &r, &w), -EBADF);
	ck_assert_int_eq(ev_io_add(e, 1000, EV_READ, rec_cb, &r, &w), -EBADF);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, NULL, &r, &w), -EINVAL);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_HUP, rec_cb, &r, &w), -EINVAL);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, rec_cb, &r, &w), 0);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_WRITE, rec_cb, &r, NULL), -EEXIST);
	/* regular files are not pollable (epoll refuses them; so do both) */
	{
		int f = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

		ck_assert_int_ge(f, 0);
		ck_assert_int_eq(ev_io_add(e, f, EV_READ, rec_cb, &r, NULL), -EPERM);
		close(f);
	}
	ck_assert_ptr_null(ev_io_del(w));
	ck_assert_ptr_null(ev_io_del(NULL));
	/* the fd is free again */
	ck_assert_int_eq(ev_io_add(e, p[0], 0, rec_cb, &r, &w), 0);
	ev_io_del(w);
	ev_free(e);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* Two readable pipes; whichever callback runs first removes the other watch
 * (whose event is pending in the same iteration) and, optionally, re-adds a new
 * watch on the other's fd. */
struct pair {
	ev_t *e;
	int fd[2];
	ev_io_t *w[2];
	int calls[2];
	bool readd;
	ev_io_t *fresh;
	int fresh_calls;
};

static void fresh_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	((struct pair *)userdata)->fresh_calls++;
}

static void pair_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct pair *p = userdata;
	int me = w == p->w[0] ? 0 : 1, other = !me;

	ck_assert_ptr_eq(w, p->w[me]);
	p->calls[me]++;
	if (!p->w[other])
		return;
	p->w[other] = ev_io_del(p->w[other]);
	if (p->readd)
		ck_assert_int_eq(ev_io_add(p->e, p->fd[other], EV_READ, fresh_cb, p, &p->fresh), 0);
}

static void check_pending_removal(bool readd)
{
	struct pair pr = {0};
	int a[2], b[2];
	ev_t *e = new_loop();

	make_pipe(a);
	make_pipe(b);
	pr.e = e;
	pr.readd = readd;
	pr.fd[0] = a[0];
	pr.fd[1] = b[0];
	ck_assert_int_eq(ev_io_add(e, a[0], EV_READ, pair_cb, &pr, &pr.w[0]), 0);
	ck_assert_int_eq(ev_io_add(e, b[0], EV_READ, pair_cb, &pr, &pr.w[1]), 0);
	ASSERT_QUIET(e);
	put_byte(a[1]);
	put_byte(b[1]);
	/* Let both become ready before the loop looks. */
	RUN_UNTIL(e, pr.calls[0] + pr.calls[1] > 0);
	ck_assert_int_eq(pr.calls[0] + pr.calls[1], 1);
	ck_assert_int_eq(pr.fresh_calls, 0);
	if (readd) {
		/* The new watch sees the (unread) data from the next iteration on. */
		RUN_UNTIL(e, pr.fresh_calls > 0);
		ck_assert_int_eq(pr.calls[0] + pr.calls[1], 2);
		ev_io_del(pr.fresh);
	} else {
		/* The survivor fires again (level), the removed one never. */
		ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
		ck_assert_int_eq(pr.calls[0] + pr.calls[1], 2);
		ck_assert(pr.calls[0] == 0 || pr.calls[1] == 0);
	}
	ev_io_del(pr.w[0] ? pr.w[0] : pr.w[1]);
	ev_free(e);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
}

START_TEST(test_io_remove_pending)
{
	check_pending_removal(false);
}
END_TEST

START_TEST(test_io_remove_readd)
{
	check_pending_removal(true);
}
END_TEST

/* A watch that removes itself, closes its fd, and a new fd with the same number
 * is watched: the old registration must not leak events into the new one. */
struct selfdel {
	ev_t *e;
	ev_io_t *w;
	int calls;
};

static void selfdel_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct selfdel *s = userdata;

	s->calls++;
	s->w = ev_io_del(w);
	close(fd);
}

START_TEST(test_io_remove_self)
{
	struct selfdel s = {0};
	struct iorec r = {0};
	ev_io_t *w2;
	int p[2], q[2];
	ev_t *e = new_loop();

	make_pipe(p);
	s.e = e;
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, selfdel_cb, &s, &s.w), 0);
	put_byte(p[1]);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_ptr_null(s.w);
	ASSERT_QUIET(e);
	ck_assert_int_eq(s.calls, 1);
	/* p[0] is closed; reuse its number for a quiet pipe's read end */
	make_pipe(q);
	if (q[0] != p[0])
		ck_assert_int_eq(dup3(q[0], p[0], O_CLOEXEC), p[0]);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, rec_cb, &r, &w2), 0);
	ASSERT_QUIET(e);
	put_byte(q[1]);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_int_eq(r.calls, 1);
	ev_io_del(w2);
	ev_free(e);
	if (q[0] != p[0])
		close(q[0]);
	close(p[0]);
	close(p[1]);
	close(q[1]);
}
END_TEST

/* Interest changed while the watch waits in the kernel (io_uring: the poll in
 * flight is updated in place), including right after its fd became ready,
 * before the loop has seen that. */
START_TEST(test_io_modify_waiting)
{
	struct iorec r = {0}, wr = {0};
	ev_io_t *w, *ww;
	int p[2];
	char c;
	ev_t *e = new_loop();

	make_pipe(p);
	/* write end: EV_READ never fires; adding EV_WRITE fires at once */
	ck_assert_int_eq(ev_io_add(e, p[1], EV_READ, rec_cb, &wr, &ww), 0);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_io_set_events(ww, EV_READ | EV_WRITE), 0);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_uint_eq(wr.revents, EV_WRITE);
	ck_assert_int_eq(ev_io_set_events(ww, EV_READ), 0);
	ASSERT_QUIET(e);

	/* read end: widened and narrowed while waiting, then data arrives */
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, rec_cb, &r, &w), 0);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_io_set_events(w, EV_READ | EV_WRITE), 0);
	ASSERT_QUIET(e);
	ck_assert_int_eq(ev_io_set_events(w, EV_READ), 0);
	ASSERT_QUIET(e);
	put_byte(p[1]);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	ASSERT_QUIET(e);

	/* the fd becomes ready, then the interest changes before the loop runs:
	 * the readiness must still be reported, and again while unread */
	put_byte(p[1]);
	ck_assert_int_eq(ev_io_set_events(w, EV_READ | EV_WRITE), 0);
	for (int i = 2; i <= 3; i++) {
		ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
		ck_assert_int_eq(r.calls, i);
		ck_assert_uint_eq(r.revents, EV_READ);
	}
	/* same again, narrowing to nothing and back */
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	ASSERT_QUIET(e);
	put_byte(p[1]);
	ck_assert_int_eq(ev_io_set_events(w, 0), 0);
	ck_assert_int_eq(ev_io_set_events(w, EV_READ), 0);
	ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
	ck_assert_int_eq(r.calls, 4);
	ck_assert_int_eq(wr.calls, 1);
	ev_io_del(w);
	ev_io_del(ww);
	ev_free(e);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* More ready watches than the io_uring SQ has entries (arming in several
 * submissions) and than its CQ has (completions overflow and are flushed),
 * and more than one epoll_wait batch. */
struct many_io {
	int *hits;
	int first_fd;
	int errors;
};

static void many_io_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct many_io *m = userdata;
	char c;

	m->errors += revents != EV_READ || read(fd, &c, 1) != 1;
	m->hits[fd - m->first_fd]++;
}

START_TEST(test_io_many)
{
	struct rlimit rl;
	struct many_io m = {0};
	int n, (*p)[2], total = 0;
	ev_t *e = new_loop();

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = rl.rlim_max;
	(void)setrlimit(RLIMIT_NOFILE, &rl); /* as far as allowed */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	n = (int)MIN(rl.rlim_cur > 200 ? (rl.rlim_cur - 100) / 2 : 0, (rlim_t)5000);
	ck_assert_int_ge(n, 300);
	p = calloc((size_t)n, sizeof(*p));
	m.hits = calloc((size_t)(4 * n + 100), sizeof(int));
	ck_assert(p && m.hits);
	for (int i = 0; i < n; i++) {
		m.errors += pipe2(p[i], O_CLOEXEC | O_NONBLOCK) != 0;
		if (i == 0)
			m.first_fd = p[0][0];
		m.errors += p[i][0] < m.first_fd ||
		            ev_io_add(e, p[i][0], EV_READ, many_io_cb, &m, NULL) != 0;
	}
	ck_assert_int_eq(m.errors, 0);
	ASSERT_QUIET(e);
	for (int i = 0; i < n; i++)
		m.errors += write(p[i][1], "x", 1) != 1;
	while (total < n) {
		int r = ev_run_once(e, scaled(USEC_PER_SEC));

		ck_assert_int_gt(r, 0);
		total += r;
	}
	ck_assert_int_eq(total, n);
	ASSERT_QUIET(e);
	for (int i = 0; i < n; i++)
		m.errors += m.hits[p[i][0] - m.first_fd] != 1;
	ck_assert_int_eq(m.errors, 0);
	ev_free(e);
	for (int i = 0; i < n; i++) {
		close(p[i][0]);
		close(p[i][1]);
	}
	free(p);
	free(m.hits);
}
END_TEST

/* Reports for an fd number's previous watch never reach the next watch on that
 * number.  (1) Proper use: the old watch's event happens, then it is removed,
 * its fd closed and the number reused, all before the loop looks (io_uring:
 * the old poll's completion is already queued).  (2) Misuse: the fd is closed
 * before ev_io_del while a dup keeps its file alive (epoll: the old
 * registration outlives the fd number). */
START_TEST(test_io_fd_reuse)
{
	struct iorec r1 = {0}, r2 = {0};
	ev_io_t *w1, *w2;
	int a[2], b[2], n, keep;
	ev_t *e = new_loop();

	for (int round = 0; round < 2; round++) {
		make_pipe(a);
		make_pipe(b);
		n = a[0];
		keep = round ? dup(a[0]) : -1;
		ck_assert_int_eq(ev_io_add(e, n, EV_READ, rec_cb, &r1, &w1), 0);
		ASSERT_QUIET(e);
		put_byte(a[1]);
		if (round == 0)
			ev_io_del(w1);
		ck_assert_int_eq(dup3(b[0], n, O_CLOEXEC), n); /* closes a[0] */
		if (round == 1)
			ev_io_del(w1);
		ck_assert_int_eq(ev_io_add(e, n, EV_READ, rec_cb, &r2, &w2), 0);
		for (int i = 0; i < 3; i++)
			ASSERT_QUIET(e);
		ck_assert_int_eq(r1.calls + r2.calls, 0);
		put_byte(b[1]);
		ck_assert_int_eq(ev_run_once(e, scaled(USEC_PER_SEC)), 1);
		ck_assert_int_eq(r2.calls, 1);
		r2.calls = 0;
		ev_io_del(w2);
		safe_close(keep);
		close(n);
		close(a[1]);
		close(b[0]);
		close(b[1]);
	}
	ev_free(e);
}
END_TEST

/* ---- signals --------------------------------------------------------------- */

static bool sig_blocked(int sig)
{
	sigset_t cur;

	ck_assert_int_eq(sigprocmask(SIG_BLOCK, NULL, &cur), 0);
	return sigismember(&cur, sig) == 1;
}

struct sigrec {
	int calls[_NSIG];
	uint32_t pid;
	ev_signal_t *other;
};

static void sig_cb(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct sigrec *r = userdata;

	r->calls[si->ssi_signo]++;
	r->pid = si->ssi_pid;
	r->other = ev_signal_del(r->other);
}

START_TEST(test_signal)
{
	struct sigrec r = {0};
	ev_signal_t *s1, *s2;
	sigset_t usr2;
	ev_t *e = new_loop();

	ck_assert(!sig_blocked(SIGUSR1));
	ck_assert_int_eq(ev_signal_add(e, SIGUSR1, sig_cb, &r, &s1), 0);
	ck_assert(sig_blocked(SIGUSR1));
	ck_assert_int_eq(ev_signal_add(e, SIGUSR1, sig_cb, &r, NULL), -EEXIST);
	ck_assert_int_eq(ev_signal_add(e, SIGKILL, sig_cb, &r, NULL), -EINVAL);
	ck_assert_int_eq(ev_signal_add(e, 0, sig_cb, &r, NULL), -EINVAL);
	ck_assert_int_eq(ev_signal_add(e, _NSIG, sig_cb, &r, NULL), -EINVAL);
	ASSERT_QUIET(e);
	ck_assert_int_eq(kill(getpid(), SIGUSR1), 0);
	RUN_UNTIL(e, r.calls[SIGUSR1] == 1);
	ck_assert_uint_eq(r.pid, (uint32_t)getpid());
	ASSERT_QUIET(e);

	/* SIGUSR2 was blocked before: it stays blocked after its watch goes. */
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	ck_assert_int_eq(sigprocmask(SIG_BLOCK, &usr2, NULL), 0);
	ck_assert_int_eq(ev_signal_add(e, SIGUSR2, sig_cb, &r, &s2), 0);
	/* Both pending at once: SIGUSR1 is read first and removes SIGUSR2's watch;
	 * SIGUSR2 is then neither dispatched nor delivered. */
	r.other = s2;
	ck_assert_int_eq(kill(getpid(), SIGUSR2), 0);
	ck_assert_int_eq(kill(getpid(), SIGUSR1), 0);
	RUN_UNTIL(e, r.calls[SIGUSR1] == 2);
	ASSERT_QUIET(e);
	ck_assert_int_eq(r.calls[SIGUSR2], 0);
	ck_assert(sig_blocked(SIGUSR2));
	ck_assert_int_eq(sigpending(&usr2), 0);
	ck_assert(!sigismember(&usr2, SIGUSR2));
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	ck_assert_int_eq(sigprocmask(SIG_UNBLOCK, &usr2, NULL), 0);

	ev_signal_del(s1);
	ck_assert(!sig_blocked(SIGUSR1));
	ck_assert_ptr_null(ev_signal_del(NULL));
	ev_free(e);
}
END_TEST

/* A pending signal whose watch is removed is dropped, not delivered (SIGTERM's
 * default action would kill the test). */
START_TEST(test_signal_pending_dropped)
{
	struct sigrec r = {0};
	ev_signal_t *s;
	ev_t *e = new_loop();

	ck_assert_int_eq(ev_signal_add(e, SIGTERM, sig_cb, &r, &s), 0);
	ck_assert_int_eq(kill(getpid(), SIGTERM), 0);
	ev_signal_del(s);
	ck_assert(!sig_blocked(SIGTERM));
	ev_free(e);
}
END_TEST

/* ---- children -------------------------------------------------------------- */

struct childrec {
	int calls;
	siginfo_t si;
};

static void child_cb(ev_child_t *c, const siginfo_t *si, void *userdata)
{
	struct childrec *r = userdata;

	r->calls++;
	r->si = *si;
}

/* Children exec /bin/sh, so their exit status is their own even under
 * valgrind (which would otherwise leak-check a forked copy of this process).
 * Every child is remembered and killed by the teardown if a test fails. */
static pid_t spawned[16];
static size_t nspawned;

static void track(pid_t pid)
{
	ck_assert_uint_lt(nspawned, ELEMENTSOF(spawned));
	spawned[nspawned++] = pid;
}

static void kill_leftovers(void)
{
	for (size_t i = 0; i < nspawned; i++) {
		siginfo_t si = {0};

		/* only while it is still our child, so never a recycled pid */
		if (waitid(P_PID, (id_t)spawned[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0) {
			kill(spawned[i], SIGKILL);
			waitid(P_PID, (id_t)spawned[i], &si, WEXITED);
		}
	}
	nspawned = 0;
}

/* fd3/fd4 (or -1) become the script's fds 3 and 4. */
static pid_t spawn_sh(const char *script, int fd3, int fd4)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int a = fd3 >= 0 ? fcntl(fd3, F_DUPFD, 10) : -1;
		int b = fd4 >= 0 ? fcntl(fd4, F_DUPFD, 10) : -1;

		if ((a >= 0 && dup2(a, 3) < 0) || (b >= 0 && dup2(b, 4) < 0))
			_exit(126);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	track(pid);
	return pid;
}

static pid_t spawn_exit(int code)
{
	char script[32];

	snprintf(script, sizeof(script), "exit %d", code);
	return spawn_sh(script, -1, -1);
}

static pid_t spawn_sleeper(void)
{
	return spawn_sh("exec sleep 1000", -1, -1);
}

/* Wait (without reaping) until pid is a zombie. */
static void wait_zombie(pid_t pid)
{
	siginfo_t si = {0};

	ck_assert_int_eq(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	ck_assert_int_eq(si.si_pid, pid);
}

/* A pidfd, or -1 where pidfd_open does not exist (valgrind 3.19 lacks it):
 * callers then test what they can with pidfd < 0. */
static int open_pidfd(pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd < 0 && errno == ENOSYS) {
		fprintf(stderr, "pidfd_open: not implemented here, using the fallback\n");
		return -1;
	}
	ck_assert_msg(fd >= 0, "pidfd_open: %s", strerror(errno));
	return fd;
}

static void check_child(bool use_pidfd)
{
	struct childrec a = {0}, b = {0}, c = {0};
	ev_child_t *ca, *cb, *cc;
	pid_t pa, pb, pc;
	int fa = -1, fb = -1, fc = -1;
	ev_t *e = new_loop();

	pa = spawn_exit(7);
	pb = spawn_sleeper();
	pc = spawn_exit(3);
	if (use_pidfd) {
		fa = open_pidfd(pa);
		fb = open_pidfd(pb);
		fc = open_pidfd(pc);
	}
	/* c has exited before it is watched. */
	wait_zombie(pc);
	ck_assert_int_eq(ev_child_add(e, pa, fa, child_cb, &a, &ca), 0);
	ck_assert_int_eq(ev_child_add(e, pb, fb, child_cb, &b, &cb), 0);
	ck_assert_int_eq(ev_child_add(e, pc, fc, child_cb, &c, &cc), 0);
	ck_assert_int_eq(ev_child_add(e, pa, -1, child_cb, &a, NULL), -EEXIST);
	RUN_UNTIL(e, a.calls && c.calls);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_int_eq(kill(pb, SIGKILL), 0);
	RUN_UNTIL(e, b.calls);
	ASSERT_QUIET(e);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(a.si.si_pid, pa);
	ck_assert_int_eq(a.si.si_code, CLD_EXITED);
	ck_assert_int_eq(a.si.si_status, 7);
	ck_assert_int_eq(b.si.si_pid, pb);
	ck_assert_int_eq(b.si.si_code, CLD_KILLED);
	ck_assert_int_eq(b.si.si_status, SIGKILL);
	ck_assert_int_eq(c.si.si_code, CLD_EXITED);
	ck_assert_int_eq(c.si.si_status, 3);
	/* all reaped */
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	ev_child_del(ca);
	ev_child_del(cb);
	ev_child_del(cc);
	ck_assert(!sig_blocked(SIGCHLD));
	ev_free(e);
	safe_close(fa);
	safe_close(fb);
	safe_close(fc);
}

START_TEST(test_child_pidfd)
{
	check_child(true);
}
END_TEST

START_TEST(test_child_fallback)
{
	check_child(false);
}
END_TEST

/* A removed child watch never calls back, even when its exit is pending. */
START_TEST(test_child_removed)
{
	struct childrec a = {0};
	ev_child_t *ca;
	pid_t pa = spawn_exit(1);
	ev_t *e = new_loop();
	siginfo_t si = {0};

	ck_assert_int_eq(ev_child_add(e, pa, -1, child_cb, &a, &ca), 0);
	wait_zombie(pa);
	ca = ev_child_del(ca);
	ASSERT_QUIET(e);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_int_eq(waitid(P_PID, (id_t)pa, &si, WEXITED), 0);
	ck_assert_int_eq(si.si_status, 1);
	ev_free(e);
}
END_TEST

/* Someone else reaps the child first: the status is lost, but the callback
 * still runs once, saying so. */
START_TEST(test_child_lost)
{
	struct childrec a = {0};
	ev_child_t *ca;
	pid_t pa = spawn_exit(4);
	int status;
	ev_t *e = new_loop();

	ck_assert_int_eq(ev_child_add(e, pa, -1, child_cb, &a, &ca), 0);
	ck_assert_int_eq(waitpid(pa, &status, 0), pa);
	RUN_UNTIL(e, a.calls == 1);
	ASSERT_QUIET(e);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(a.si.si_pid, pa);
	ck_assert_int_eq(a.si.si_code, 0);
	ck_assert_int_eq(a.si.si_errno, ECHILD);
	ev_child_del(ca);
	ev_free(e);
}
END_TEST

/* Subreaper: a grandchild orphaned by its parent is reparented to us and, like
 * an unwatched child, reaped by the loop, while the watched child's status still
 * reaches its callback.  The watched child exits first, so it is the first
 * exited child the WNOWAIT peek sees. */
static void check_orphans(bool use_pidfd)
{
	struct childrec w = {0};
	ev_child_t *cw;
	pid_t pw, pm, pg;
	int fw = -1, p[2], go[2];
	char line[32];
	ssize_t n;
	ev_t *e = new_loop();

	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	pw = spawn_exit(5);
	if (use_pidfd)
		fw = open_pidfd(pw);
	ck_assert_int_eq(ev_child_add(e, pw, fw, child_cb, &w, &cw), 0);
	wait_zombie(pw);
	/* the grandchild reads fd 3 to EOF, i.e. until the test closes go[1] */
	pm = spawn_sh("cat <&3 >/dev/null & echo $! >&4", go[0], p[1]);
	n = read(p[0], line, sizeof(line) - 1);
	ck_assert_int_gt(n, 0);
	line[n] = 0;
	pg = (pid_t)atoi(line);
	track(pg);
	close(p[0]);
	close(p[1]);
	close(go[0]);
	wait_zombie(pm);
	ck_assert_int_eq(ev_set_reap_orphans(e, true), 0);
	ck_assert(sig_blocked(SIGCHLD));
	RUN_UNTIL(e, w.calls == 1 && ev_orphans_reaped(e) == 1);
	ck_assert_int_gt(pg, 0);
	ck_assert_int_eq(kill(pg, 0), 0); /* still there, now our child */
	close(go[1]);                     /* the grandchild exits now */
	RUN_UNTIL(e, ev_orphans_reaped(e) == 2);
	ck_assert_int_eq(w.calls, 1);
	ck_assert_int_eq(w.si.si_pid, pw);
	ck_assert_int_eq(w.si.si_code, CLD_EXITED);
	ck_assert_int_eq(w.si.si_status, 5);
	ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	ck_assert_int_eq(ev_set_reap_orphans(e, false), 0);
	ck_assert(!sig_blocked(SIGCHLD));
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
	ev_child_del(cw);
	ev_free(e);
	safe_close(fw);
}

START_TEST(test_reap_orphans_pidfd)
{
	check_orphans(true);
}
END_TEST

START_TEST(test_reap_orphans_fallback)
{
	check_orphans(false);
}
END_TEST

/* A child watched without a pidfd needs SIGCHLD blocked and in the signalfd.
 * When the orphan reaper has it there already (lessee's case), watching the
 * child and its exit change nothing: no sigprocmask or signalfd call for each
 * run.  Where the mask does change, it is applied. */
START_TEST(test_child_fallback_mask_kept)
{
	struct childrec rec = {0};
	uint64_t n0;
	pid_t pid;
	ev_t *e = new_loop();

	ck_assert_int_eq(ev_set_reap_orphans(e, true), 0);
	ck_assert(sig_blocked(SIGCHLD));
	n0 = ev_sig_applies(e);
	for (int i = 0; i < 3; i++) {
		rec.calls = 0;
		pid = spawn_exit(i);
		ck_assert_int_eq(ev_child_add(e, pid, -1, child_cb, &rec, NULL), 0);
		RUN_UNTIL(e, rec.calls == 1);
		ck_assert_int_eq(rec.si.si_status, i);
	}
	ck_assert_msg(ev_sig_applies(e) == n0, "the unchanged mask was applied %llu times",
	              (unsigned long long)(ev_sig_applies(e) - n0));
	ck_assert(sig_blocked(SIGCHLD));
	/* without the reaper, the first fallback child blocks SIGCHLD, its end
	 * unblocks it */
	ck_assert_int_eq(ev_set_reap_orphans(e, false), 0);
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
	ck_assert(!sig_blocked(SIGCHLD));
	n0 = ev_sig_applies(e);
	rec.calls = 0;
	pid = spawn_sleeper();
	ck_assert_int_eq(ev_child_add(e, pid, -1, child_cb, &rec, NULL), 0);
	ck_assert(sig_blocked(SIGCHLD));
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	RUN_UNTIL(e, rec.calls == 1);
	ck_assert(!sig_blocked(SIGCHLD));
	ck_assert_uint_eq(ev_sig_applies(e) - n0, 2);
	ev_free(e);
}
END_TEST

/* Adding a child and dispatching its exit cost the same with one or a thousand
 * children waiting: every lookup by pid (the duplicate check on add, the orphan
 * reaper's "is this one watched?", the removal) visits a bounded number of
 * entries.  The list this replaced visited every child: a thousand adds cost
 * half a million probes, and each exit up to a thousand more. */
START_TEST(test_child_many_lookup)
{
	enum { N = 1000, FAKE_PID0 = 4194304 + 1 }; /* above PID_MAX_LIMIT: never real */
	static int fds[N];
	static ev_child_t *cs[N];
	struct childrec rec = {0}, quiet = {0};
	struct rlimit rl;
	pid_t sleeper, target;
	int sfd, tfd, go[2];
	uint64_t p0;
	ev_t *e;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < N + 100) {
		fprintf(stderr, "RLIMIT_NOFILE hard limit %llu: too low, skipped\n",
		        (unsigned long long)rl.rlim_max);
		return;
	}
	rl.rlim_cur = MAX(rl.rlim_cur, (rlim_t)N + 100);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	sleeper = spawn_sleeper();
	sfd = open_pidfd(sleeper);
	if (sfd < 0)
		return; /* no pidfd_open (valgrind 3.19): the fallback tests cover the rest */
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
	target = spawn_sh("read x <&3; exit 7", go[0], -1);
	tfd = open_pidfd(target);
	e = new_loop();
	ck_assert_int_eq(ev_set_reap_orphans(e, true), 0);
	/* A thousand children that will not exit during the test: pidfds of one
	 * sleeper under made-up pids. */
	p0 = ev_pid_probes(e);
	for (int i = 0; i < N; i++) {
		fds[i] = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
		ck_assert_int_ge(fds[i], 0);
		ck_assert_int_eq(ev_child_add(e, FAKE_PID0 + i, fds[i], child_cb, &quiet, &cs[i]),
		                 0);
	}
	ck_assert_int_eq(ev_child_add(e, target, tfd, child_cb, &rec, NULL), 0);
	ck_assert_int_eq(ev_child_add(e, target, tfd, child_cb, &rec, NULL), -EEXIST);
	ck_assert_msg(ev_pid_probes(e) - p0 <= 4 * N, "%llu probes for %d adds",
	              (unsigned long long)(ev_pid_probes(e) - p0), N + 2);
	p0 = ev_pid_probes(e);
	close(go[1]); /* EOF: the target exits */
	RUN_UNTIL(e, rec.calls == 1);
	ck_assert_int_eq(rec.si.si_pid, target);
	ck_assert_int_eq(rec.si.si_code, CLD_EXITED);
	ck_assert_int_eq(rec.si.si_status, 7);
	ck_assert_int_eq(quiet.calls, 0);
	ck_assert_msg(ev_pid_probes(e) - p0 <= 16, "%llu probes to dispatch one exit",
	              (unsigned long long)(ev_pid_probes(e) - p0));
	for (int i = 0; i < N; i++) {
		ev_child_del(cs[i]);
		close(fds[i]);
	}
	ck_assert_int_eq(quiet.calls, 0);
	ev_free(e);
	close(go[0]);
	close(tfd);
	close(sfd);
}
END_TEST

/* ---- idle ----------------------------------------------------------------- */

static void noop_timer(ev_timer_t *t, void *u);

/* A process, not a thread: under valgrind a thread of ours cannot run while
 * the loop waits in io_uring_enter (docs/ev.md, "Limits worth knowing"). */
static pid_t late_write(int fd, usec_t after)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		tu_sleep(after);
		_exit(write(fd, "x", 1) == 1 ? 0 : 1);
	}
	return pid;
}

static void read_exit_io(ev_io_t *w, int fd, uint32_t revents, void *u)
{
	char c;

	ck_assert_int_eq(read(fd, &c, 1), 1);
	ev_exit(u, 0);
}

static int posts;

static void count_post(ev_t *e, void *u)
{
	posts++;
}

/* With nothing due, the loop sleeps in one wait until an event comes: a timer
 * an hour away and a post callback (which follows activity only) do not wake
 * it.  The event is a pipe written by a process 300 ms later; what is asserted
 * is the number of iterations, not a duration. */
START_TEST(test_idle_one_wait)
{
	uint64_t it0;
	int p[2], st;
	pid_t writer;
	ev_t *e = new_loop();

	make_pipe(p);
	ck_assert_int_eq(ev_timer_add(e, 3600 * USEC_PER_SEC, noop_timer, NULL, NULL), 0);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, read_exit_io, e, NULL), 0);
	ck_assert_int_eq(ev_post_set(e, count_post, NULL), 0);
	ck_assert_int_eq(ev_post_set(e, count_post, NULL), -EBUSY);
	posts = 0;
	it0 = ev_iterations(e);
	writer = late_write(p[1], 300 * USEC_PER_MSEC);
	ck_assert_int_eq(ev_run(e), 0);
	ck_assert_int_eq(waitpid(writer, &st, 0), writer);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_uint_eq(ev_iterations(e) - it0, 1);
	ck_assert_int_eq(posts, 1); /* after the iteration that read the pipe */
	/* an iteration that dispatches nothing runs no post callback */
	ck_assert_int_eq(ev_run_once(e, 0), 0);
	ck_assert_int_eq(posts, 1);
	ck_assert_int_eq(ev_post_set(e, NULL, NULL), 0);
	ev_free(e);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* ---- lifetime ---------------------------------------------------------------- */

static void noop_timer(ev_timer_t *t, void *u)
{
}
static void noop_io(ev_io_t *w, int fd, uint32_t revents, void *u)
{
}
static void noop_sig(ev_signal_t *s, const struct signalfd_siginfo *si, void *u)
{
}
static void noop_defer(void *u)
{
}
static void noop_child(ev_child_t *c, const siginfo_t *si, void *u)
{
}

/* ev_free with everything still registered frees it all (ASan/valgrind check
 * the memory), closes every fd it opened and restores the signal mask. */
START_TEST(test_free_live)
{
	int before = fd_count(), p[2];
	pid_t pa = spawn_sleeper(), pb = spawn_sleeper();
	int fb = open_pidfd(pb);
	siginfo_t si;
	ev_t *e = new_loop();

	make_pipe(p);
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(
		    ev_timer_add(e, i % 2 ? USEC_INFINITY : USEC_PER_SEC, noop_timer, NULL, NULL),
		    0);
	ck_assert_int_eq(ev_io_add(e, p[0], EV_READ, noop_io, NULL, NULL), 0);
	ck_assert_int_eq(ev_io_add(e, p[1], EV_WRITE, noop_io, NULL, NULL), 0);
	ck_assert_int_eq(ev_signal_add(e, SIGUSR1, noop_sig, NULL, NULL), 0);
	ck_assert_int_eq(ev_child_add(e, pa, -1, noop_child, NULL, NULL), 0);
	ck_assert_int_eq(ev_child_add(e, pb, fb, noop_child, NULL, NULL), 0);
	ck_assert_int_eq(ev_set_reap_orphans(e, true), 0);
	ck_assert_int_eq(ev_defer(e, noop_defer, NULL), 0);
	ck_assert_int_ge(ev_run_once(e, 0), 1);
	ck_assert_int_eq(ev_defer(e, noop_defer, NULL), 0);
	ck_assert_ptr_null(ev_free(e));
	ck_assert(!sig_blocked(SIGUSR1));
	ck_assert(!sig_blocked(SIGCHLD));
	close(p[0]);
	close(p[1]);
	safe_close(fb);
	ck_assert_int_eq(fd_count(), before);
	kill(pa, SIGKILL);
	kill(pb, SIGKILL);
	ck_assert_int_eq(waitid(P_PID, (id_t)pa, &si, WEXITED), 0);
	ck_assert_int_eq(waitid(P_PID, (id_t)pb, &si, WEXITED), 0);
}
END_TEST

START_TEST(test_fd_count)
{
	int before = fd_count();

	for (int i = 0; i < 3; i++) {
		ev_t *e = new_loop();

		ck_assert_int_eq(ev_signal_add(e, SIGUSR2, noop_sig, NULL, NULL), 0);
		ck_assert_int_eq(ev_run_once(e, 0), 0);
		ev_free(e);
		ck_assert_int_eq(fd_count(), before);
	}
	/* every fd the loop holds is close-on-exec */
	{
		ev_t *e = new_loop();
		char path[64], target[256];
		int n = 0;

		ck_assert_int_eq(ev_signal_add(e, SIGUSR2, noop_sig, NULL, NULL), 0);
		for (int fd = 0; fd < 1024; fd++) {
			int fl = fcntl(fd, F_GETFD);
			ssize_t l;

			if (fl < 0)
				continue;
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			l = readlink(path, target, sizeof(target) - 1);
			if (l <= 0)
				continue;
			target[l] = 0;
			if (strstr(target, "io_uring") || strstr(target, "eventpoll") ||
			    strstr(target, "signalfd")) {
				ck_assert_msg(fl & FD_CLOEXEC, "%s without FD_CLOEXEC", target);
				n++;
			}
		}
		ck_assert_int_eq(n, 2);
		ev_free(e);
	}
}
END_TEST

static Suite *ev_suite(void)
{
	Suite *s = suite_create("ev");
	TCase *tc = tcase_create("ev");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, kill_leftovers);
	tcase_add_test(tc, test_backend_selection);
	tcase_add_test(tc, test_seccomp_fallback);
	tcase_add_test(tc, test_timer_order);
	tcase_add_test(tc, test_timer_many);
	tcase_add_test(tc, test_timer_heap_order);
	tcase_add_test(tc, test_timer_remove_in_callback);
	tcase_add_test(tc, test_run_exit);
	tcase_add_test(tc, test_defer);
	tcase_add_test(tc, test_io_level_read);
	tcase_add_test(tc, test_io_write_toggle);
	tcase_add_test(tc, test_io_hup);
	tcase_add_test(tc, test_io_errors);
	tcase_add_test(tc, test_io_remove_pending);
	tcase_add_test(tc, test_io_remove_readd);
	tcase_add_test(tc, test_io_remove_self);
	tcase_add_test(tc, test_io_fd_reuse);
	tcase_add_test(tc, test_io_modify_waiting);
	tcase_add_test(tc, test_io_many);
	tcase_add_test(tc, test_signal);
	tcase_add_test(tc, test_signal_pending_dropped);
	tcase_add_test(tc, test_child_pidfd);
	tcase_add_test(tc, test_child_fallback);
	tcase_add_test(tc, test_child_removed);
	tcase_add_test(tc, test_child_lost);
	tcase_add_test(tc, test_reap_orphans_pidfd);
	tcase_add_test(tc, test_reap_orphans_fallback);
	tcase_add_test(tc, test_child_fallback_mask_kept);
	tcase_add_test(tc, test_child_many_lookup);
	tcase_add_test(tc, test_idle_one_wait);
	tcase_add_test(tc, test_free_live);
	tcase_add_test(tc, test_fd_count);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(ev_suite());
}
