#!/bin/sh
# make check-systemd, inside the container: PID 1 is systemd and this runs as
# lessee-test.service.  Each case drives the shipped lessee.service (installed
# by `make install`, changed only by the drop-ins below) through systemctl and
# checks one promise lessee makes to systemd; docs/systemd.md says which.
# Results: TAP in /results/results.tap, the journal in /results/journal.txt.
# The container's exit status (systemctl exit) is 0 when every case passed.
set -u

R=/results
TAP=$R/results.tap
T=/opt/lessee-test
STAGE=/opt/lessee-stage
U=lessee.service
UNITS=/usr/local/lib/systemd/system
RUNTIME_DROPINS=/run/systemd/system/$U.d
# lessor.service's admin token, made by its first start (ExecStartPre=)
export LESSOR_URL=http://127.0.0.1:8080 LESSOR_ADMIN_TOKEN_FILE=/var/lib/lessor/admin-token
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0 PATH=/usr/local/sbin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin

date +%s.%N >$R/t_start

# ---- helpers

WHY=/run/lessee-test.why
fail() { # MESSAGE: the reason of the current case; returns 1 for `|| fail ... || return`
	printf '%s\n' "$*" >>"$WHY"
	return 1
}
note() { printf 'note: %s\n' "$*" >>"$WHY"; }

prop() { systemctl show -p "$1" --value "${2:-$U}"; }
is_prop() { [ "$(prop "$1")" = "$2" ]; }

wait_until() { # SECONDS COMMAND...: poll every 0.1 s until COMMAND succeeds
	_ticks=$(($1 * 10))
	shift
	until "$@" >/dev/null 2>&1; do
		_ticks=$((_ticks - 1))
		[ "$_ticks" -gt 0 ] || return 1
		sleep 0.1
	done
}

# lessee's own journal lines (MESSAGE only) of one invocation of the unit
journal_of() { journalctl -q --no-pager -o cat _SYSTEMD_INVOCATION_ID="$1"; }
journal_of_has() { journal_of "$1" | grep -Eq "$2"; }
# systemd's structured messages about one invocation, e.g. UNIT_RESULT=watchdog
manager_said() { journalctl -q --no-pager -o cat INVOCATION_ID="$1" "$2" | grep -q .; }

# The unit is unloaded once inactive (its Result= with it): the journal keeps it.
UNIT_SUCCESS=7ad2d189f7e94e70a38c781354912448 # systemd's "Deactivated successfully"
ended_clean() {
	manager_said "$1" MESSAGE_ID=$UNIT_SUCCESS &&
		! journalctl -q --no-pager -o export INVOCATION_ID="$1" | grep -q '^UNIT_RESULT='
}

start_unit() { timeout 30 systemctl start "$U"; }
stop_unit() { timeout 70 systemctl stop "$U"; }
ensure_running() {
	systemctl is-active -q "$U" || start_unit || fail "cannot start $U: $(prop Result)"
}
with_dropin() { # NAME CONTENT FUNCTION: FUNCTION under a runtime drop-in, then none, unit stopped
	mkdir -p "$RUNTIME_DROPINS"
	printf '%s\n' "$2" >"$RUNTIME_DROPINS/$1.conf"
	systemctl daemon-reload
	"$3"
	_r=$?
	rm -f "$RUNTIME_DROPINS/$1.conf"
	systemctl daemon-reload
	stop_unit
	return $_r
}

usec() { systemd-analyze timespan "$1" | awk 'NR == 2 { print $2 }'; } # its line "μs: N"
status_text() { prop StatusText; }
status_matches() { status_text | grep -Eq "$1"; }
status_done() { status_text | sed -n 's/^[0-9]*\/[0-9]* runs, \([0-9]*\) done.*/\1/p'; }

metric() { # NAME{LABELS}: its value from lessee's status endpoint
	curl -sf --max-time 5 http://127.0.0.1:9464/metrics | awk -v m="$1" '$1 == m { print $2 }'
}
metric_is() { [ "$(metric "$1")" = "$2" ]; }
metric_at_least() { v=$(metric "$1") && [ -n "$v" ] && [ "${v%.*}" -ge "$2" ]; }

enqueue() { # SECONDS COUNT: COUNT runs of the sleep workflow; prints their ids
	_i=0
	while [ "$_i" -lt "$2" ]; do
		lessor enqueue --workflow sleep --input "$1" || return 1
		_i=$((_i + 1))
	done
}
run_field() { lessor show "$1" | sed -n "s/^$2: *//p"; }
runs_are() { # STATUS ID...
	_s=$1
	shift
	for _id; do [ "$(run_field "$_id" status)" = "$_s" ] || return 1; done
}
runs_summary() { for _id; do printf '%s=%s ' "$_id" "$(run_field "$_id" status)"; done; }

n=0
failed=0
check() { # NAME FUNCTION: one case, one TAP line
	n=$((n + 1))
	: >"$WHY"
	t0=$(date +%s.%N)
	if "$2"; then res=ok; else res="not ok"; fi
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	echo "$res $n - $1 (${secs}s)" | tee -a "$TAP"
	if [ "$res" != ok ]; then
		failed=$((failed + 1))
		[ -s "$WHY" ] || echo "(no reason recorded)" >>"$WHY"
		{
			echo "systemctl status $U:"
			systemctl status "$U" --no-pager -n 0 2>&1
			echo "journal of $U during the case:"
			journalctl -q --no-pager -o short-monotonic -u "$U" --since "@${t0%.*}" | tail -n 25
		} >>"$WHY"
	fi
	sed 's/^/# /' "$WHY" | tee -a "$TAP"
}

# ---- the cases

# Every shipped unit passes systemd-analyze verify without a word: it exits 0
# on warnings, so any output is a failure.  (No man pages are installed, so
# their check is off.)
case_verify() {
	nunits=0
	for f in "$UNITS"/*.service; do
		out=$(systemd-analyze verify --man=no "$f" 2>&1) && [ -z "$out" ] ||
			fail "systemd-analyze verify ${f##*/}: $out" || return
		nunits=$((nunits + 1))
	done
	[ "$nunits" -ge 3 ] || fail "only $nunits units installed in $UNITS" || return
	note "$nunits units"
}

# 2.5: the capabilities to run jobs as lessee-run cost 1.0 of it (see the unit).
case_security() {
	out=$(systemd-analyze security --offline=yes --threshold=25 --no-pager "$UNITS/$U" 2>&1) ||
		fail "exposure above 2.5: $(echo "$out" | tail -n 1)" || return
	note "$(echo "$out" | sed -n 's/.*Overall exposure level for \(.*\)/\1/p')"
}

# The shipped sysusers and tmpfiles files were applied at boot; the
# configuration is the shipped lessee.conf plus a test drop-in; lessor runs as
# its shipped unit; the API token is a credential of both units.
case_setup() {
	getent passwd lessee | grep -q '^lessee:x:[0-9]*:[0-9]*:[^:]*:/var/lib/lessee:' ||
		fail "systemd-sysusers did not create the lessee user: $(getent passwd lessee)" || return
	perm=$(stat -c '%a %U:%G' /etc/lessee 2>&1)
	[ "$perm" = "755 root:root" ] || fail "systemd-tmpfiles: /etc/lessee is '$perm'" || return
	install -m 0644 "$STAGE/etc/lessee/lessee.conf" /etc/lessee/lessee.conf &&
		install -D -m 0644 "$T/test-lessee.conf" /etc/lessee/lessee.conf.d/50-test.conf &&
		install -D -m 0644 "$T/test-timings.conf" "/etc/systemd/system/$U.d/50-test.conf" ||
		fail "cannot install the test configuration" || return
	token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
	(
		umask 077
		echo "$token" >/etc/lessee/api-token
	)
	out=$(lessee --check-config 2>&1) || fail "lessee --check-config: $out" || return
	systemctl daemon-reload
	timeout 30 systemctl start lessor.service ||
		fail "lessor.service: $(systemctl status lessor.service --no-pager 2>&1 | tail -n 5)" || return
	lessor_worker_token "$token" || return
	wait_until 10 lessor stats || fail "lessor does not answer on $LESSOR_URL" || return
}

# lessor.service's first start made its token files (an admin token, no
# worker); TOKEN becomes lessee's worker token the documented way: a line in
# worker-tokens, then systemctl reload (SIGHUP rereads it).
lessor_worker_token() {
	[ -s /var/lib/lessor/admin-token ] && [ -e /var/lib/lessor/worker-tokens ] ||
		fail "lessor.service's first start made no token files: $(ls -l /var/lib/lessor/)" || return
	printf 'test-worker %s\n' "$1" >>/var/lib/lessor/worker-tokens &&
		timeout 30 systemctl reload lessor.service ||
		fail "systemctl reload lessor.service failed" || return
	wait_until 10 lessor_reloaded ||
		fail "lessor did not reload: $(journalctl -q --no-pager -u lessor.service -o cat | tail -n 3)"
}
lessor_reloaded() {
	journalctl -q --no-pager -u lessor.service -o cat | grep -q 'reloaded the tokens: 1 worker'
}

# Type=notify: `systemctl start` returns once lessee sent READY=1, which it
# does from its running loop after logging its status endpoint.  In the
# journal (one socket, so in causal order) that line comes before systemd's
# "Started"; after start the unit is active and the daemon answers at once.
# (A failure before READY makes start fail: see the exit-78 case.)
case_start() {
	systemctl stop "$U"
	start_unit || fail "systemctl start failed: Result=$(prop Result)" || return
	st="$(prop ActiveState)/$(prop SubState)"
	[ "$st" = active/running ] || fail "right after start: $st" || return
	json=$(lessee status --json 2>&1) || fail "lessee status right after start: $json" || return
	echo "$json" | grep -Eq '"phase":[[:space:]]*"running"' || fail "not running: $json" || return
	inv=$(prop InvocationID)
	order=$(journalctl -q --no-pager -o cat _SYSTEMD_INVOCATION_ID="$inv" + INVOCATION_ID="$inv" |
		grep -oE '^(status endpoint|Started lessee\.service)' | tr '\n' '|')
	[ "$order" = "status endpoint|Started lessee.service|" ] || fail "journal order: $order"
}

# STATUS= from the loop every second is what systemctl status shows: runs in
# flight out of the slots, and the runs done.
case_status() {
	ensure_running || return
	wait_until 5 status_matches '^0/4 runs, [0-9]+ done$' ||
		fail "idle StatusText: '$(status_text)'" || return
	done0=$(status_done)
	ids=$(enqueue 3 2) || fail "lessor enqueue failed" || return
	wait_until 10 status_matches '^2/4 runs, [0-9]+ done$' ||
		fail "StatusText never showed the 2 runs: '$(status_text)'" || return
	wait_until 20 runs_are succeeded $ids ||
		fail "runs: $(runs_summary $ids) $(for i in $ids; do lessor show "$i"; lessor log "$i"; done)" || return
	wait_until 5 status_matches "^0/4 runs, $((done0 + 2)) done\$" ||
		fail "StatusText after the runs: '$(status_text)' (was $done0 done)"
}

# Under systemd lessee's stderr is the journal (JOURNAL_STREAM matches), so it
# logs natively: entries about a run carry RUN_ID= WORKFLOW= ATTEMPT=
# WORKER_ID= and, once it ends, OUTCOME=, with PRIORITY= from the level.  The
# token never reaches the journal.
case_journal() {
	ensure_running || return
	id=$(enqueue 1 1) || fail "lessor enqueue failed" || return
	wait_until 15 runs_are succeeded "$id" || fail "run: $(runs_summary "$id")" || return
	ent=$(journalctl -q --no-pager -o export RUN_ID="$id")
	for f in WORKFLOW=sleep ATTEMPT=1 OUTCOME=succeeded PRIORITY=6 SYSLOG_IDENTIFIER=lessee; do
		echo "$ent" | grep -qx "$f" || fail "the journal entries of $id lack $f" || return
	done
	echo "$ent" | grep -q '^WORKER_ID=.' || fail "no WORKER_ID= on $id's entries" || return
	lines=$(journalctl -q --no-pager -o cat RUN_ID="$id" | wc -l)
	[ "$lines" -ge 2 ] || fail "only $lines journal entries for run $id" || return
	note "$lines entries with RUN_ID=$id"
	! journalctl -q --no-pager -o export -u "$U" | grep -qF "$(cat /etc/lessee/api-token)" ||
		fail "the API token is in the journal"
}

# The token reaches lessee only as the credential api-token
# (LoadCredential=): the configuration names no token file, and the lessee
# user cannot read /etc/lessee/api-token.  lessor requires it, so claims
# succeed; a wrong credential makes them denied.
case_credential() {
	ensure_running || return
	lessee --check-config 2>/dev/null | grep -q '^token_file = *$' ||
		fail "the effective configuration sets token_file" || return
	! runuser -u lessee -- cat /etc/lessee/api-token >/dev/null 2>&1 ||
		fail "the lessee user can read /etc/lessee/api-token" || return
	cmp -s "/run/credentials/$U/api-token" /etc/lessee/api-token ||
		fail "no credential /run/credentials/$U/api-token" || return
	! journal_of_has "$(prop InvocationID)" 'no API token' || fail "lessee says it has no token" || return
	metric_at_least 'lessee_claims_total{result="runs"}' 1 ||
		fail "no successful claim: $(metric 'lessee_claims_total{result="runs"}')" || return
	# absent, or 0 where the daemon exports every known label value from the start
	denied=$(metric 'lessee_claims_total{result="denied"}')
	[ -z "$denied" ] || [ "$denied" = 0 ] || fail "claims were denied: $denied" || return
	# Control: a wrong credential is refused by lessor; the right one again works.
	good=$(cat /etc/lessee/api-token)
	echo "wrong$good" >/etc/lessee/api-token
	wrong_credential
	r=$?
	echo "$good" >/etc/lessee/api-token
	[ $r -eq 0 ] || return $r
	systemctl restart "$U" || fail "restart with the right credential failed" || return
	wait_until 15 runs_are succeeded "$id" || fail "run after the fix: $(runs_summary "$id")"
}
wrong_credential() {
	systemctl restart "$U" || fail "restart with the wrong credential failed" || return
	id=$(enqueue 1 1) || fail "lessor enqueue failed" || return
	wait_until 10 metric_at_least 'lessee_claims_total{result="denied"}' 1 ||
		fail "a wrong credential was not denied" || return
	runs_are pending "$id" || fail "run with a wrong credential: $(runs_summary "$id")"
}

# systemctl stop with runs in flight: lessee gets SIGTERM alone (KillMode=mixed),
# says "draining" in STATUS=, lets the runs finish (a SIGTERM would fail them),
# reports them, and exits 0 before TimeoutStopSec.
case_drain() {
	ensure_running || return
	inv=$(prop InvocationID)
	ids=$(enqueue 4 3) || fail "lessor enqueue failed" || return
	wait_until 10 runs_are running $ids || fail "runs: $(runs_summary $ids)" || return
	wait_until 5 status_matches '^3/4 runs' || fail "StatusText: '$(status_text)'" || return
	systemctl stop --no-block "$U"
	wait_until 5 status_matches '^3/4 runs, [0-9]+ done, draining$' ||
		fail "StatusText while stopping: '$(status_text)'" || return
	is_prop ActiveState deactivating || fail "while draining: $(prop ActiveState)" || return
	wait_until 60 is_prop ActiveState inactive || fail "still $(prop ActiveState) after 60 s" || return
	ended_clean "$inv" || fail "systemd: $(journalctl -q -o cat INVOCATION_ID="$inv")" || return
	journal_of_has "$inv" '^drain done after' || fail "lessee did not finish its drain" || return
	runs_are succeeded $ids || fail "runs after the stop: $(runs_summary $ids)" || return
	for id in $ids; do
		out=$(run_field "$id" output)
		echo "$out" | grep -q '"slept": *4' || fail "run $id output: $out" || return
		! lessor log "$id" | grep -q 'got SIGTERM' || fail "run $id got SIGTERM" || return
	done
}

# The shipped values: systemd's stop timeout must outlast the drain lessee is
# configured for plus kill_grace, or a long stop ends in SIGKILL for the daemon
# and its runs, unreported and unreleased.  (The shipped file runs no
# workflow: one is added, as an operator must.)
case_stop_timeout() {
	eff=$(lessee --check-config --config "$STAGE/etc/lessee/lessee.conf" \
		--set api.url=http://127.0.0.1 --set workflow.w.command=/bin/true 2>&1) ||
		fail "shipped lessee.conf: $eff" || return
	drain=$(echo "$eff" | sed -n 's/^drain_timeout = //p')
	grace=$(echo "$eff" | sed -n 's/^kill_grace = //p')
	for u in lessee.service lessee@.service; do
		tss=$(sed -n 's/^TimeoutStopSec=//p' "$UNITS/$u")
		note "$u: TimeoutStopSec=$tss; lessee.conf: drain_timeout = $drain, kill_grace = $grace"
		[ "$tss" != infinity ] || continue
		[ "$drain" != infinity ] ||
			fail "$u: TimeoutStopSec=$tss, but drain_timeout is infinity" || return
		[ $(($(usec "$drain") + $(usec "$grace"))) -lt "$(usec "$tss")" ] ||
			fail "$u: drain_timeout + kill_grace >= TimeoutStopSec" || return
	done
}

# WATCHDOG=1 comes from a loop timer: while the loop turns the watchdog is fed;
# once the loop is wedged (SIGUSR2 with LESSEE_TEST_HOOKS=1) systemd kills it
# (Result=watchdog) and Restart=on-failure starts a new one.
case_watchdog() {
	systemctl stop "$U"
	with_dropin 60-test-hooks '[Service]
Environment=LESSEE_TEST_HOOKS=1' watchdog
}
watchdog() {
	start_unit || fail "start failed" || return
	wd=$(prop WatchdogUSec)
	[ "$wd" = 3s ] || fail "WatchdogUSec=$wd, the test drop-in sets 3s" || return
	pid=$(prop MainPID)
	inv=$(prop InvocationID)
	sleep 4 # longer than WatchdogSec
	[ "$(prop MainPID)" = "$pid" ] && is_prop SubState running ||
		fail "a healthy lessee was not left running ($(prop SubState), pid $(prop MainPID))" || return
	systemctl kill -s SIGUSR2 --kill-whom=main "$U"
	wait_until 10 journal_of_has "$inv" 'stalling the event loop' || fail "the test hook did not run" || return
	wait_until 10 manager_said "$inv" UNIT_RESULT=watchdog || fail "no Result=watchdog" || return
	wait_until 10 is_prop NRestarts 1 || fail "NRestarts=$(prop NRestarts)" || return
	wait_until 10 is_prop SubState running || fail "after the restart: $(prop SubState)" || return
	[ "$(prop MainPID)" != "$pid" ] && ! kill -0 "$pid" 2>/dev/null ||
		fail "pid $pid is still the main process"
}

# A configuration error is exit 78 before READY: start fails, and
# RestartPreventExitStatus=78 keeps Restart=on-failure from looping.
case_config() {
	systemctl stop "$U"
	systemctl reset-failed "$U" 2>/dev/null
	printf '[worker]\nconcurrency = 0\n' >/etc/lessee/lessee.conf.d/90-bad.conf
	config_78
	r=$?
	rm -f /etc/lessee/lessee.conf.d/90-bad.conf
	systemctl stop "$U"
	systemctl reset-failed "$U" 2>/dev/null
	return $r
}
config_78() {
	! start_unit 2>/dev/null || fail "systemctl start succeeded with a bad configuration" || return
	inv=$(prop InvocationID)
	res="$(prop Result) $(prop ExecMainStatus)"
	[ "$res" = "exit-code 78" ] || fail "Result, ExecMainStatus: $res" || return
	sleep 3 # RestartSec=1s: a restart would have come by now
	st="$(prop ActiveState) NRestarts=$(prop NRestarts)"
	[ "$st" = "failed NRestarts=0" ] || fail "after 3 s: $st" || return
	journal_of_has "$inv" 'worker\.concurrency: 0 is out of range' ||
		fail "the error is not in the journal: $(journal_of "$inv")"
}

# SystemCallFilter= without io_uring: lessee says it runs on epoll and still
# works.  Control: the same unit without the filter runs on io_uring.
case_io_uring() {
	systemctl stop "$U"
	start_unit || fail "start without the filter failed" || return
	wait_until 5 journal_of_has "$(prop InvocationID)" '^event loop: io_uring$' ||
		fail "control, no filter: $(journal_of "$(prop InvocationID)" | grep 'event loop')" || return
	with_dropin 60-no-io_uring '[Service]
SystemCallFilter=~io_uring_setup io_uring_enter io_uring_register' on_epoll
}
on_epoll() {
	systemctl restart "$U" || fail "start with the filter failed" || return
	inv=$(prop InvocationID)
	wait_until 5 journal_of_has "$inv" '^event loop: epoll \(io_uring unavailable: ' ||
		fail "journal: $(journal_of "$inv" | grep 'event loop')" || return
	note "$(journal_of "$inv" | grep '^event loop')"
	metric_is 'lessee_io_backend_info{backend="epoll"}' 1 || fail "metrics: $(metric 'lessee_io_backend_info{backend="epoll"}')" || return
	ids=$(enqueue 1 2) || fail "lessor enqueue failed" || return
	wait_until 15 runs_are succeeded $ids || fail "runs on epoll: $(runs_summary $ids)" || return
	stop_unit && ended_clean "$inv" ||
		fail "stop on epoll: $(journalctl -q -o cat INVOCATION_ID="$inv")"
}

# Delegate=yes gives lessee its cgroup subtree: it moves itself into
# <unit>/supervisor (before READY=1), each run gets <unit>/runs/<pid>/<id>.N,
# and the kill ladder ends with cgroup.kill.  A grandchild that left the
# run's process group (setsid) dies with the run's timeout; the run's cgroup
# is removed.  The mode is in the journal, `lessee status` and the metrics.
# Control: with Delegate=no lessee says it falls back to process groups.
case_cgroup() {
	systemctl stop "$U"
	start_unit || fail "start failed" || return
	inv=$(prop InvocationID)
	wait_until 5 journal_of_has "$inv" '^kill mode: cgroup' ||
		fail "journal: $(journal_of "$inv" | grep 'kill mode')" || return
	note "$(journal_of "$inv" | grep '^kill mode')"
	lessee status | grep -Eq '^kill mode +cgroup \(/sys/fs/cgroup/.*lessee\.service\)$' ||
		fail "lessee status: $(lessee status | grep 'kill mode')" || return
	metric_is 'lessee_kill_mode{mode="cgroup"}' 1 ||
		fail "lessee_kill_mode{mode=\"cgroup\"} is '$(metric 'lessee_kill_mode{mode="cgroup"}')'" || return
	grep -q '^0::/system.slice/lessee.service/supervisor$' "/proc/$(prop MainPID)/cgroup" ||
		fail "the daemon is in $(grep '^0::' "/proc/$(prop MainPID)/cgroup")" || return
	id=$(enqueue_escape) || fail "lessor enqueue failed" || return
	wait_until 10 lessor_log_has "$id" '^gpid=' || fail "no gpid in the log of $id" || return
	gpid=$(lessor log "$id" | sed -n 's/^gpid=//p' | head -n 1)
	cg=$(sed -n 's/^0:://p' "/proc/$gpid/cgroup")
	case "$cg" in
	/system.slice/lessee.service/runs/*/*) ;;
	*) fail "the grandchild $gpid is in '$cg'" || return ;;
	esac
	note "grandchild $gpid in $cg"
	wait_until 15 runs_are failed "$id" || fail "run: $(runs_summary "$id")" || return
	wait_until 5 pid_gone "$gpid" || fail "the setsid grandchild $gpid survived the run" || return
	wait_until 5 cgroup_gone "$cg" || fail "the run's cgroup $cg is still there" || return
	with_dropin 60-no-delegate '[Service]
Delegate=no' no_delegate
}
no_delegate() {
	systemctl restart "$U" || fail "start with Delegate=no failed" || return
	inv=$(prop InvocationID)
	wait_until 5 journal_of_has "$inv" '^kill mode: process group' ||
		fail "Delegate=no: $(journal_of "$inv" | grep 'kill mode')" || return
	note "$(journal_of "$inv" | grep '^kill mode')"
	lessee status --json | grep -Eq '"kill_mode":[[:space:]]*"process_group"' ||
		fail "status: $(lessee status --json)" || return
	metric_is 'lessee_kill_mode{mode="process_group"}' 1 || fail "metric with Delegate=no"
}
enqueue_escape() { lessor enqueue --workflow escape --max-attempts 1; }

# The shipped unit keeps the daemon's secrets from its runs: a run executes as
# lessee-run (sysusers, LESSEE_WORKER_RUN_USER=), not as the daemon's user,
# and without its capabilities; the daemon is not dumpable.  The run
# (tests/aux/snoop) tries the daemon's /proc/PID/{mem,maps,environ,fd},
# PTRACE_ATTACH and PTRACE_SEIZE, its own fds and capabilities, the
# credentials directory, the spool and /etc/lessee/api-token: it reaches none.
case_secrets() {
	ensure_running || return
	inv=$(prop InvocationID)
	pid=$(prop MainPID)
	run_uid=$(id -u lessee-run 2>/dev/null) || fail "sysusers made no lessee-run user" || return
	# /proc/PID itself always shows the euid; its files show root when not dumpable
	[ "$(stat -c %U "/proc/$pid/environ")" = root ] ||
		fail "/proc/$pid/environ belongs to $(stat -c %U "/proc/$pid/environ"): the daemon is dumpable" || return
	amb=$(sed -n 's/^CapAmb:[[:space:]]*//p' "/proc/$pid/status")
	note "daemon: $(grep '^Uid:' "/proc/$pid/status" | tr -s '\t ' ' '), CapAmb $amb"
	! journal_of_has "$inv" "runs as the daemon's own user" ||
		fail "lessee warns that a workflow runs as its own user" || return
	id=$(lessor enqueue --workflow snoop --max-attempts 1) || fail "lessor enqueue failed" || return
	wait_until 15 runs_are succeeded "$id" || fail "run: $(lessor show "$id"; lessor log "$id")" || return
	log=$(lessor log "$id")
	echo "$log" | grep -q "^snoop uid=$run_uid gid=" ||
		fail "the run is not lessee-run ($run_uid): $(echo "$log" | head -n 1)" || return
	echo "$log" | grep -qx 'snoop done' || fail "snoop did not finish: $log" || return
	! echo "$log" | grep -qF "$(cat /etc/lessee/api-token)" || fail "the run found the token" || return
	! echo "$log" | grep -q 'REACHED' || fail "the run reached: $(echo "$log" | grep REACHED)" || return
	note "$(echo "$log" | grep -c ': denied') probes denied, e.g. $(echo "$log" |
		grep -E '^snoop (mem|ptrace-attach|creds):' | tr '\n' ';')"
}
lessor_log_has() { lessor log "$1" | grep -q "$2"; }
pid_gone() { ! grep -qs '^State:[[:space:]]*[^Z]' "/proc/$1/status"; }
cgroup_gone() { for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do [ ! -d "$m$1" ] || return 1; done; }

echo "1..$(grep -c '^check ' "$0")" >"$TAP"
check "systemd-analyze verify: every shipped unit, no output" case_verify
check "systemd-analyze security --offline=yes --threshold=25 lessee.service" case_security
check "setup: sysusers + tmpfiles applied, lessor.service serving" case_setup
check "start waits for READY=1: active, answering" case_start
check "STATUS= in systemctl show: runs in flight, runs done" case_status
check "journald: native entries with RUN_ID= WORKFLOW= ATTEMPT= WORKER_ID= OUTCOME=" case_journal
check "token from \$CREDENTIALS_DIRECTORY (a wrong one is denied)" case_credential
check "stop with runs in flight: drains, runs succeed and are reported, clean exit" case_drain
check "shipped TimeoutStopSec= outlasts drain_timeout + kill_grace" case_stop_timeout
check "stalled loop: watchdog kills it (Result=watchdog), restarted" case_watchdog
check "bad configuration: exit 78, start fails, not restarted" case_config
check "SystemCallFilter=~io_uring_*: logs epoll, runs complete" case_io_uring
check "Delegate=yes: a cgroup per run, a setsid grandchild dies with its run" case_cgroup
check "secrets: a run is lessee-run, reaches no memory, ptrace, credential, fd or spool" case_secrets

journalctl -b --no-pager -o short-monotonic >$R/journal.txt 2>&1
date +%s.%N >$R/t_end
rc=0
[ "$failed" -eq 0 ] || rc=1
systemctl --no-block exit "$rc"
exit "$rc"
