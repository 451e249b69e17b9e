/* lessee: parse options, load the configuration, wire the modules, run the loop. */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "ev/ev.h"
#include "exec/exec.h"
#include "log/log.h"
#include "obs/heartbeat.h"
#include "obs/notify.h"
#include "obs/procmetrics.h"
#include "obs/status.h"
#include "obs/status_cli.h"
#include "proto/driver.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/worker.h"

#define EXIT_USAGE 2
#define EXIT_CONFIG 78

extern char **environ;

struct opts {
	const char *config;
	bool check_config;
	bool status_cmd; /* `lessee status` */
	bool json;
	bool healthz; /* `lessee status --healthz` */
	bool help;
	struct conf_override overrides[64];
	size_t n_overrides;
	char *owned[64];
};

struct daemon {
	ev_t *ev;
	worker_t *worker;
	notify_t *notify;
	status_t *status;
	heartbeat_t *heartbeat;
	procmetrics_t *proc;
	struct opts *opts;
	ev_timer_t *status_timer; /* the next status refresh, when one is owed */
	usec_t status_at;         /* the last refresh */
	struct worker_info status_seen;
	metric_t *m_orphans;
	metric_t *m_wakeups;
	uint64_t orphans_seen;    /* ev_orphans_reaped() when last looked at */
	uint64_t iterations_seen; /* ev_iterations() when last looked at */
	int exit_code;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: lessee [OPTIONS]\n"
		"       lessee status [--json|--healthz] [-c FILE]   (see lessee status --help)\n"
		"Claim runs from an orchestration API under leases and execute them.\n"
		"`lessee status` asks the running daemon (its [status] listen address) what it\n"
		"is doing and prints it as tables, or the raw JSON with --json; --healthz only\n"
		"asks whether it is alive (/healthz), for container health checks.\n\n"
		"  -c, --config FILE        configuration file (default %s, plus FILE.d/*.conf)\n"
		"      --check-config       validate, print the effective configuration, exit\n"
		"      --set SECTION.KEY=V  override one setting (repeatable)\n"
		"      --api-url URL        = --set api.url=URL\n"
		"      --concurrency N      = --set worker.concurrency=N\n"
		"      --worker-id ID       = --set worker.id=ID\n"
		"      --tags T1,T2         = --set worker.tags=T1,T2\n"
		"      --log-level LEVEL    = --set log.level=LEVEL (error warning notice info debug)\n"
		"      --log-format FMT     = --set log.format=FMT (auto logfmt json journal)\n"
		"  -h, --help               this text (`lessee status --help`: the status command's)\n"
		"  -V, --version            version\n\n"
		"Signals: TERM/INT drain (twice: hard stop), QUIT hard stop now, HUP reload.\n"
		"Exit codes: 0 clean, 1 runtime failure, 2 usage, 78 configuration error.\n"
		"See lessee(8) and lessee.conf(5).\n",
		CONF_DEFAULT_PATH);
}

static int add_override(struct opts *o, const char *origin, const char *key, const char *val)
{
	char *s;

	if (o->n_overrides >= ELEMENTSOF(o->overrides))
		return -E2BIG;
	if (key ? asprintf(&s, "%s=%s", key, val) < 0 : !(s = strdup(val)))
		return -ENOMEM;
	o->owned[o->n_overrides] = s;
	o->overrides[o->n_overrides++] = (struct conf_override){.origin = origin, .setting = s};
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_CHECK = 256, O_SET, O_URL, O_CONC, O_ID, O_TAGS, O_LEVEL, O_FORMAT, O_VERSION,
	       O_JSON, O_HEALTHZ };
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"check-config", no_argument, NULL, O_CHECK},
		{"set", required_argument, NULL, O_SET},
		{"api-url", required_argument, NULL, O_URL},
		{"concurrency", required_argument, NULL, O_CONC},
		{"worker-id", required_argument, NULL, O_ID},
		{"tags", required_argument, NULL, O_TAGS},
		{"log-level", required_argument, NULL, O_LEVEL},
		{"log-format", required_argument, NULL, O_FORMAT},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, O_VERSION},
		{"json", no_argument, NULL, O_JSON},
		{"healthz", no_argument, NULL, O_HEALTHZ},
		{0},
	};
	static const struct {
		int opt;
		const char *flag, *key;
	} flag_keys[] = {
		{O_SET, "--set", NULL},
		{O_URL, "--api-url", "api.url"},
		{O_CONC, "--concurrency", "worker.concurrency"},
		{O_ID, "--worker-id", "worker.id"},
		{O_TAGS, "--tags", "worker.tags"},
		{O_LEVEL, "--log-level", "log.level"},
		{O_FORMAT, "--log-format", "log.format"},
	};
	int c;

	while ((c = getopt_long(argc, argv, "c:hV", longopts, NULL)) >= 0) {
		switch (c) {
		case 'c':
			o->config = optarg;
			continue;
		case O_CHECK:
			o->check_config = true;
			continue;
		case O_JSON:
			o->json = true;
			continue;
		case O_HEALTHZ:
			o->healthz = true;
			continue;
		case 'h':
			o->help = true; /* `lessee status --help` has its own */
			continue;
		case 'V':
		case O_VERSION:
			printf("lessee %s\n", LESSEE_VERSION);
			exit(EXIT_SUCCESS);
		case '?':
			return -EINVAL;
		}
		for (size_t i = 0; i < ELEMENTSOF(flag_keys); i++)
			if (flag_keys[i].opt == c &&
			    add_override(o, flag_keys[i].flag, flag_keys[i].key, optarg) < 0)
				return -E2BIG;
	}
	if (optind < argc && streq(argv[optind], "status")) {
		o->status_cmd = true;
		optind++;
	}
	if (o->check_config && o->status_cmd) {
		fprintf(stderr, "lessee: --check-config does not go with the status command\n");
		return -EINVAL;
	}
	if (o->help) {
		if (o->status_cmd)
			status_cli_usage(stdout);
		else
			usage(stdout);
		exit(EXIT_SUCCESS);
	}
	if (optind < argc) {
		fprintf(stderr, "lessee: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if ((o->json || o->healthz) && !o->status_cmd) {
		fprintf(stderr, "lessee: --%s goes with the status command\n",
			o->json ? "json" : "healthz");
		return -EINVAL;
	}
	if (o->json && o->healthz) {
		fprintf(stderr, "lessee: --json and --healthz exclude each other\n");
		return -EINVAL;
	}
	return 0;
}

static int load_conf(const struct opts *o, const char *worker_id, struct conf **ret)
{
	struct conf_source src = {
		.path = o->config,
		.env = environ,
		.overrides = o->overrides,
		.n_overrides = o->n_overrides,
		.default_worker_id = worker_id,
		/* `lessee status` only needs the listen address: a command gone
		 * missing under a running daemon must not stop it from asking */
		.check_files = !o->status_cmd,
	};
	_cleanup_free_ char *err = NULL;
	int r = conf_load(&src, ret, &err);

	if (r < 0 && !err)
		log_error("configuration: %s", strerror(-r));
	/* every error, one a line */
	for (char *line = err, *nl; r < 0 && line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		log_error("configuration: %.*s", nl ? (int)(nl - line) : (int)strlen(line), line);
	}
	return r;
}

/* A run as our own uid can read our credential and spool and signal us; one
 * as root can read anything.  Not a configuration error (a development setup,
 * a container without capabilities), but said at each start, reload and
 * --check-config.  f NULL: to the log. */
static void shared_uid_warnings(const struct conf *c, FILE *f)
{
	uid_t self = geteuid();

	for (size_t i = 0; i < c->n_workflows; i++) {
		const struct conf_workflow *wf = &c->workflows[i];
		uid_t uid = wf->user ? wf->uid : self;
		_cleanup_free_ char *msg = NULL;
		int n;

		if (uid != self && uid != 0)
			continue;
		n = asprintf(&msg,
			     uid == self ? "workflow.%s runs as the daemon's own user (uid %u): its runs "
					   "can read the daemon's credential and spool and signal it; "
					   "set worker.run_user (docs/operations.md, Security)"
					 : "workflow.%s runs as root (uid %u): its runs can read "
					   "everything the host has, the daemon's credential included",
			     wf->name, (unsigned)uid);
		if (n < 0)
			continue;
		if (f)
			fprintf(f, "lessee: warning: %s\n", msg);
		else
			log_warning("configuration: %s", msg);
	}
}

static void conf_warnings(const struct conf *c, FILE *f)
{
	for (char **w = c->warnings; *w; w++)
		if (f)
			fprintf(f, "lessee: warning: %s\n", *w);
		else
			log_warning("configuration: %s", *w);
	shared_uid_warnings(c, f);
}

static void update_status(struct daemon *d)
{
	struct worker_info i;
	char rep[32] = "";

	worker_get_info(d->worker, &i);
	if (i.reporting)
		snprintf(rep, sizeof(rep), ", %u reporting", i.reporting);
	d->status_seen = i;
	/* X/Y: execution slots in use (runs whose child is gone report outside them) */
	notify_status(d->notify, "%u/%u runs, %llu done%s%s%s%s", i.slots_busy, i.slots,
		      (unsigned long long)i.runs_done, rep,
		      i.phase == WORKER_DRAINING ? ", draining"
		      : i.phase == WORKER_STOPPING ? ", stopping"
						   : "",
		      i.phase == WORKER_RUNNING && !i.api_ready ? ", API not reachable" : "",
		      i.spool_pending ? ", results spooled" : "");
}

/* The loop counts the orphans it reaps; the metric and the log follow it
 * (at each status tick and at each scrape). */
static void sync_orphans(struct daemon *d)
{
	uint64_t n = ev_orphans_reaped(d->ev);

	if (n == d->orphans_seen)
		return;
	metric_add(d->m_orphans, (double)(n - d->orphans_seen));
	log_debug("reaped %llu orphaned processes (%llu in all)",
		  (unsigned long long)(n - d->orphans_seen), (unsigned long long)n);
	d->orphans_seen = n;
}

/* The loop's wake-ups, for the metric (an idle daemon should have few). */
static void sync_wakeups(struct daemon *d)
{
	uint64_t n = ev_iterations(d->ev);

	metric_add(d->m_wakeups, (double)(n - d->iterations_seen));
	d->iterations_seen = n;
}

static void on_status_timer(ev_timer_t *t, void *userdata)
{
	struct daemon *d = userdata;

	d->status_at = ev_now(d->ev);
	update_status(d);
	sync_orphans(d);
}

/* What the status line shows, or the orphan count, changed since it was last
 * refreshed. */
static bool status_stale(struct daemon *d)
{
	struct worker_info i;
	const struct worker_info *o = &d->status_seen;

	worker_get_info(d->worker, &i);
	return i.phase != o->phase || i.runs_in_flight != o->runs_in_flight ||
	       i.slots_busy != o->slots_busy || i.reporting != o->reporting ||
	       i.slots != o->slots || i.runs_done != o->runs_done ||
	       i.api_ready != o->api_ready || i.spool_pending != o->spool_pending ||
	       ev_orphans_reaped(d->ev) != d->orphans_seen;
}

/* After every loop iteration that did something: write the lines it logged
 * (one write per turn), refresh the status when it
 * changed, at most once a second.  No periodic tick: an idle daemon's loop
 * sleeps until a timer is due (a long poll's end, the watchdog) or an event
 * arrives. */
static void on_loop_post(ev_t *e, void *userdata)
{
	struct daemon *d = userdata;

	log_flush(); /* what this turn logged, in one write */
	if (ev_timer_armed(d->status_timer) || !status_stale(d))
		return;
	ev_timer_arm_at(d->status_timer, MAX(d->status_at + USEC_PER_SEC, ev_now(e)));
}

static void on_term(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct daemon *d = userdata;

	log_notice("received %s", strsignal((int)si->ssi_signo));
	notify_stopping(d->notify);
	worker_drain(d->worker);
	update_status(d);
}

static void on_quit(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct daemon *d = userdata;

	log_notice("received SIGQUIT: hard stop now");
	notify_stopping(d->notify);
	worker_hard_stop(d->worker, true);
}

/* Runs hold fds: a thousand need more than the usual soft limit of 1024.
 * Take what the hard limit allows (runs get the soft limit we started with
 * back); the worker lowers a concurrency whose fds do not fit even so. */
static void raise_fd_limit(void)
{
	struct rlimit rl = {0};
	int r = exec_nofile_raise(&rl);

	if (r < 0)
		log_warning("cannot raise the file descriptor limit (RLIMIT_NOFILE): %s, ignoring",
		            strerror(-r));
}

static void on_hup(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct daemon *d = userdata;
	struct conf *next = NULL;

	log_notice("received SIGHUP: reloading the configuration");
	notify_reloading(d->notify);
	if (load_conf(d->opts, worker_conf(d->worker)->worker.id, &next) < 0)
		log_error("reload failed: keeping the running configuration");
	else if (conf_warnings(next, NULL), false)
		;
	else if (worker_reload(d->worker, next) < 0)
		log_error("reload could not be applied: keeping the running configuration");
	notify_ready(d->notify);
}

/* Test hook (LESSEE_TEST_HOOKS=1): SIGUSR2 wedges the loop, for watchdog tests. */
static void on_stall(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	log_warning("SIGUSR2 test hook: stalling the event loop");
	for (;;)
		pause();
}

static void on_worker_exit(worker_t *w, int code, void *userdata)
{
	struct daemon *d = userdata;

	d->exit_code = code;
	ev_exit(d->ev, code);
}

static void on_first_iteration(void *userdata)
{
	struct daemon *d = userdata;

	notify_ready(d->notify);
	update_status(d);
}


/* ---- status endpoint and heartbeat (lib/obs knows the worker only through these) */

static int obs_metrics(struct buf *out, void *userdata)
{
	struct daemon *d = userdata;

	sync_orphans(d);
	sync_wakeups(d);
	procmetrics_update(d->proc);
	return metrics_render(worker_metrics(d->worker), out);
}

static int obs_status_json(struct buf *out, void *userdata)
{
	struct daemon *d = userdata;

	return worker_status_json(d->worker, out);
}

static bool obs_ready(const char **ret_reason, void *userdata)
{
	struct daemon *d = userdata;

	*ret_reason = worker_not_ready_reason(d->worker);
	return *ret_reason == NULL;
}

static bool obs_heartbeat_healthy(void *userdata)
{
	const char *why;

	return obs_ready(&why, userdata);
}

static int obs_start(struct daemon *d, const struct conf *c)
{
	const struct status_handlers h = {
		.metrics = obs_metrics,
		.status_json = obs_status_json,
		.ready = obs_ready,
		.userdata = d,
	};
	int r;

	if (c->status.listen_addr_len > 0) {
		r = status_new(d->ev, (const struct sockaddr *)&c->status.listen_addr,
			       c->status.listen_addr_len, &h, NULL, &d->status);
		if (r < 0)
			return log_errno(LOG_ERR, r, "status endpoint: cannot listen on %s: %s",
					 c->status.listen, strerror(-r));
		log_info("status endpoint on port %u (listen = %s)", (unsigned)status_port(d->status),
			 c->status.listen);
	}
	if (c->status.heartbeat_url) {
		const struct heartbeat_opts o = {
			.url = c->status.heartbeat_url,
			.interval = c->status.heartbeat_interval,
			.ca_file = c->api.ca_file,
			.healthy = obs_heartbeat_healthy,
			.userdata = d,
		};

		r = heartbeat_new(d->ev, &o, &d->heartbeat);
		if (r < 0)
			return log_errno(LOG_ERR, r, "heartbeat: %s", strerror(-r));
	}
	return 0;
}

/* `lessee status [--json|--healthz]`: exit 0, or 1 when the daemon cannot tell us. */
static int run_status_cli(const struct conf *c, const struct opts *o)
{
	_cleanup_free_ char *base = NULL;

	if (c->status.listen_addr_len == 0) {
		fprintf(stderr, "lessee status: the status endpoint is disabled ([status] listen is empty)\n");
		return EXIT_FAILURE;
	}
	if (status_cli_base_url((const struct sockaddr *)&c->status.listen_addr,
				c->status.listen_addr_len, &base) < 0)
		return EXIT_FAILURE;
	if (o->healthz)
		return status_cli_healthz(base, stdout, stderr) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
	return status_cli_run(base, o->json, stdout, stderr) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* Signals whose default action ends a process and that lessee has no use
 * for: a stray one (a log rotation script's SIGUSR1) must not kill the daemon
 * silently, its runs left without an owner until their leases expire. */
static const int stray_signals[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPWR, SIGSTKFLT};

static void on_stray(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata)
{
	(void)s;
	(void)userdata;
	log_notice("received SIG%s: ignored (lessee drains on SIGTERM or SIGINT, stops on "
	           "SIGQUIT, reloads on SIGHUP)",
	           sigabbrev_np((int)si->ssi_signo));
}

static int add_signals(struct daemon *d)
{
	bool hooks = streq_ptr(getenv("LESSEE_TEST_HOOKS"), "1");
	int r = 0;

	r = r < 0 ? r : ev_signal_add(d->ev, SIGTERM, on_term, d, NULL);
	r = r < 0 ? r : ev_signal_add(d->ev, SIGINT, on_term, d, NULL);
	r = r < 0 ? r : ev_signal_add(d->ev, SIGQUIT, on_quit, d, NULL);
	r = r < 0 ? r : ev_signal_add(d->ev, SIGHUP, on_hup, d, NULL);
	for (size_t i = 0; i < ELEMENTSOF(stray_signals) && r >= 0; i++)
		r = ev_signal_add(d->ev, stray_signals[i],
		                  hooks && stray_signals[i] == SIGUSR2 ? on_stall : on_stray, d,
		                  NULL);
	return r;
}

/* What a run leaves behind (a daemonized grandchild, a double fork) is
 * re-parented to us rather than to init: as PID 1 of a container by the
 * kernel, elsewhere because we ask to be a subreaper.  Either way we reap it,
 * so that no zombie accumulates where no init would. */
static int setup_reaping(struct daemon *d)
{
	bool pid1 = getpid() == 1;
	int r;

	d->m_orphans = metrics_counter(worker_metrics(d->worker), "lessee_orphans_reaped_total",
				       "Orphaned processes left by runs and reaped by lessee", NULL);
	if (!d->m_orphans)
		return -ENOMEM;
	metric_add(d->m_orphans, 0);
	d->m_wakeups = metrics_counter(worker_metrics(d->worker), "lessee_loop_wakeups_total",
				       "Times the event loop woke up (iterations)", NULL);
	if (!d->m_wakeups)
		return -ENOMEM;
	if (!pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		log_warning("cannot become a child subreaper: %m; orphans of runs go to init, "
			    "ignoring");
		return 0;
	}
	r = ev_set_reap_orphans(d->ev, true);
	if (r < 0)
		return r;
	log_info("reaping orphaned processes (%s)", pid1 ? "running as PID 1" : "child subreaper");
	return 0;
}

static int run_daemon(struct opts *o, struct conf *conf)
{
	struct daemon d = {.opts = o, .exit_code = EXIT_FAILURE};
	bool logged = false;
	int r;

	r = ev_new(&d.ev, NULL);
	if (r < 0) {
		conf_free(conf);
		return log_errno(LOG_ERR, r, "cannot create the event loop: %s", strerror(-r)), 1;
	}
	if (ev_backend_reason(d.ev))
		log_notice("event loop: %s (io_uring unavailable: %s)", ev_backend(d.ev),
			   ev_backend_reason(d.ev));
	else
		log_info("event loop: %s", ev_backend(d.ev));
	r = worker_new(d.ev, conf, on_worker_exit, &d, &d.worker);
	if (r >= 0)
		r = procmetrics_new(worker_metrics(d.worker), &d.proc);
	if (r >= 0)
		r = setup_reaping(&d);
	if (r >= 0)
		r = notify_new(d.ev, &d.notify);
	if (r >= 0 && (r = obs_start(&d, worker_conf(d.worker))) < 0)
		logged = true;
	if (r >= 0)
		r = add_signals(&d);
	if (r >= 0)
		r = ev_timer_add(d.ev, USEC_INFINITY, on_status_timer, &d, &d.status_timer);
	if (r >= 0)
		r = ev_post_set(d.ev, on_loop_post, &d);
	if (r >= 0)
		r = worker_start(d.worker);
	if (r >= 0)
		r = ev_defer(d.ev, on_first_iteration, &d);
	if (r >= 0) {
		log_set_buffered(true);
		r = ev_run(d.ev);
		log_set_buffered(false);
	}
	if (r < 0 && !logged)
		log_error("fatal: %s", strerror(-r));
	ev_post_set(d.ev, NULL, NULL);
	ev_timer_del(d.status_timer);
	heartbeat_free(d.heartbeat);
	status_free(d.status); /* its callbacks use the worker */
	worker_free(d.worker);
	procmetrics_free(d.proc);
	notify_free(d.notify);
	ev_free(d.ev);
	return r < 0 ? EXIT_FAILURE : d.exit_code;
}

/* A stop or reload signal that arrives while we start up waits for the loop
 * (signalfd) instead of killing us with its default action.  Dispositions go
 * back to default: an ignored signal (a shell's background job ignores
 * SIGINT and SIGQUIT) would be discarded before it reached the signalfd. */
static void block_signals(void)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGQUIT, SIGHUP};
	sigset_t ss;

	sigemptyset(&ss);
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
		sigaddset(&ss, sigs[i]);
	for (size_t i = 0; i < ELEMENTSOF(stray_signals); i++)
		sigaddset(&ss, stray_signals[i]);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
		signal(sigs[i], SIG_DFL);
	for (size_t i = 0; i < ELEMENTSOF(stray_signals); i++)
		signal(stray_signals[i], SIG_DFL);
	/* a write past RLIMIT_FSIZE (the spool, a run's files) fails with EFBIG */
	signal(SIGXFSZ, SIG_IGN);
}

/* A directory of ours that others may write, without the sticky bit (a
 * Kubernetes emptyDir is 0777): a run could rename our spool or the run
 * directories away and put its own in their place.  Taken back. */
static void tighten_dir(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & S_ISVTX) || !(st.st_mode & (S_IWGRP | S_IWOTH)))
		return;
	if (chmod(path, st.st_mode & 07755) < 0)
		log_warning("%s is writable by others (mode %04o) and cannot be changed: %m", path,
			    (unsigned)(st.st_mode & 07777));
	else
		log_notice("%s was writable by others (mode %04o): now %04o", path,
			   (unsigned)(st.st_mode & 07777), (unsigned)(st.st_mode & 07755));
}

static void tighten_dirs(const struct conf *c)
{
	const char *dirs[] = {c->worker.spool_dir, c->worker.run_dir};

	for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
		_cleanup_free_ char *parent = strdup(dirs[i]);
		char *slash = parent ? strrchr(parent, '/') : NULL;

		tighten_dir(dirs[i]);
		if (slash && slash != parent) {
			*slash = '\0';
			tighten_dir(parent);
		}
	}
}

/* spool_dir and run_dir, made at start (loading the configuration makes
 * nothing): one the daemon cannot make or write stops it here, not as a
 * spawn_error per run that opens the breaker, or a result with nowhere to
 * spool.  The spool is the daemon's alone (0700); run_dir must be
 * traversable by a run dropped to another user, as run.c makes its
 * lessee-<pid> level (0711). */
static int make_dir(const char *key, const char *path, mode_t mode)
{
	struct stat st;
	int q = mkdir_p(path, mode);

	if (q >= 0 && stat(path, &st) < 0)
		q = -errno;
	if (q >= 0 && !S_ISDIR(st.st_mode))
		q = -ENOTDIR;
	if (q < 0) {
		log_error("worker.%s %s: cannot create it: %s", key, path, strerror(-q));
		return q;
	}
	if (access(path, W_OK | X_OK) < 0) {
		q = -errno;
		log_error("worker.%s %s: the daemon cannot write it: %s", key, path, strerror(-q));
		return q;
	}
	return 0;
}

static int make_dirs(const struct conf *c)
{
	int q = make_dir("spool_dir", c->worker.spool_dir, 0700);

	return q < 0 ? q : make_dir("run_dir", c->worker.run_dir, 0711);
}

/* libcurl copies our request headers, the Authorization one among them, into
 * buffers of its own (a header list per request, the request it sends) and
 * frees them without wiping: the token would stay in freed memory until
 * something happens to reuse it.  Its allocations go through these, so what
 * it frees is zeroed first.  malloc_usable_size() is the whole block (under
 * ASan and valgrind, exactly what was asked for). */
static void wiping_free(void *p)
{
	if (!p)
		return;
	explicit_bzero(p, malloc_usable_size(p));
	free(p);
}

static void *wiping_realloc(void *p, size_t n)
{
	size_t old;
	void *q;

	if (!p)
		return malloc(n);
	old = malloc_usable_size(p);
	if (n <= old && n > 0)
		return p;
	q = malloc(n ? n : 1);
	if (!q)
		return NULL;
	memcpy(q, p, old < n ? old : n);
	wiping_free(p);
	return q;
}

/* Before anyone else initializes libcurl (lib/http does it once, later). */
static int curl_wiping_init(void)
{
	return curl_global_init_mem(CURL_GLOBAL_DEFAULT, malloc, wiping_free, wiping_realloc,
				    strdup, calloc) == CURLE_OK
		       ? 0
		       : -ENOMEM;
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	struct conf *conf = NULL;
	/* First of all: until this, a process of our uid may read our memory
	 * (/proc/PID/mem, environ, fd) and ptrace us, and a run is such a process
	 * unless it drops to another user.  Non-dumpable, /proc/PID/ belongs to
	 * root and only CAP_SYS_PTRACE passes.  Runs are dumpable again: execve
	 * resets it for them. */
	int dumpable = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ? -errno : 0;
	int wiping = curl_wiping_init();
	int r;

	/* one program name in every message, getopt's included, whatever the path */
	argv[0] = (char *)"lessee";
	block_signals();
	log_setup("lessee", LOG_FORMAT_AUTO, LOG_INFO);
	if (parse_args(argc, argv, &o) < 0) {
		usage(stderr);
		r = EXIT_USAGE;
		goto out;
	}
	if (load_conf(&o, NULL, &conf) < 0) {
		r = EXIT_CONFIG;
		goto out;
	}
	if (!ev_backend_known(getenv("LESSEE_IO_BACKEND"))) {
		log_error("configuration: LESSEE_IO_BACKEND=%s is not a loop backend: io_uring or "
			  "epoll (unset: io_uring, else epoll)",
			  getenv("LESSEE_IO_BACKEND"));
		conf_free(conf);
		r = EXIT_CONFIG;
		goto out;
	}
	if (!drv_find(conf->api.protocol)) {
		/* conf knows every protocol's name; this build may lack the driver */
		log_error("configuration: api.protocol = %s: this lessee has no driver for it",
			  conf->api.protocol);
		conf_free(conf);
		r = EXIT_CONFIG;
		goto out;
	}
	if (o.status_cmd) {
		r = run_status_cli(conf, &o);
		conf_free(conf);
		goto out;
	}
	if (o.check_config) {
		conf_warnings(conf, stderr); /* stdout stays loadable INI */
		r = conf_print(conf, stdout) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
		conf_free(conf);
		goto out;
	}
	log_setup("lessee", conf->log.format, conf->log.level);
	log_set_worker_id(conf->worker.id);
	if (wiping < 0)
		log_warning("libcurl would not take a wiping allocator: copies of the token it frees "
			    "stay in memory");
	if (dumpable < 0)
		log_warning("cannot make the daemon non-dumpable: %s; runs as its user can read "
			    "its memory",
			    strerror(-dumpable));
	conf_warnings(conf, NULL);
	if (!conf->api.token && !conf->api.key_id)
		log_warning("no API credentials configured (%s): requests are sent without "
			    "authentication",
			    streq(conf->api.protocol, "conductor")
			        ? "api.key_id and api.key_secret_file"
			        : "api.token_file, or the api-token credential");
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	if (make_dirs(conf) < 0) {
		conf_free(conf);
		r = EXIT_CONFIG;
		goto out;
	}
	tighten_dirs(conf);
	log_info("lessee %s starting: api=%s protocol=%s concurrency=%u workflows=%zu",
		 LESSEE_VERSION, conf->api.url, drv_find(conf->api.protocol)->name,
		 conf->worker.concurrency, conf->n_workflows);
	r = run_daemon(&o, conf);
out:
	for (size_t i = 0; i < o.n_overrides; i++)
		free(o.owned[i]);
	return r;
}
