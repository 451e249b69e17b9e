# The parts every `make demo` tour shares (scripts/demo.sh,
# demo_conductor.sh, demo_camunda7.sh), sourced after BUILD is set: a
# temporary directory removed at the end with the server and lessee stopped,
# the output's style, waiting for a process to say it is up, lessee started
# with its status port found, and lessee's log lines worth showing.
# shellcheck shell=sh

LESSEE="$(pwd)/$BUILD/lessee"

# demo_need BINARY... : each is built, else say how to build it
demo_need() {
	for b in "$@"; do
		[ -x "$b" ] || { echo "demo: $b is not built (run make demo${PROTOCOL:+ PROTOCOL=$PROTOCOL})" >&2; exit 1; }
	done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lessee-demo.XXXXXX")
chmod 755 "$tmp"
server_pid="" lessee_pid=""
cleanup() {
	for p in $lessee_pid $server_pid; do
		if kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p" 2>/dev/null || true
			wait "$p" 2>/dev/null || true
		fi
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -t 1 ]; then bold='\033[1m' dim='\033[2m' plain='\033[0m'; else bold='' dim='' plain=''; fi
step() { printf "\n${bold}== %s${plain}\n" "$*"; }
say() { printf "${dim}%s${plain}\n" "$*"; }

wait_for() { # file pattern what pid
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 200 ] || ! kill -0 "$4" 2>/dev/null; then
			echo "demo: $3 did not start:" >&2
			cat "$1" >&2
			exit 1
		fi
		sleep 0.05
	done
}

# lessee --check-config on $tmp/lessee.conf, its complaint shown when it has one
check_config() {
	if ! "$LESSEE" --config "$tmp/lessee.conf" --check-config >"$tmp/check.log" 2>&1; then
		echo "demo: this lessee does not accept the configuration above:" >&2
		sed 's/^/  /' "$tmp/check.log" >&2
		exit 1
	fi
	say "(lessee --check-config: the configuration is valid)"
}

# lessee on $tmp/lessee.conf (status.listen = 127.0.0.1:0): sets lessee_pid
# and status_port, and writes the port into the file for `lessee status`
start_lessee() {
	"$LESSEE" --config "$tmp/lessee.conf" 2>"$tmp/lessee.log" &
	lessee_pid=$!
	wait_for "$tmp/lessee.log" "status endpoint on port" lessee "$lessee_pid"
	status_port=$(sed -n 's/.*status endpoint on port \([0-9]*\).*/\1/p' "$tmp/lessee.log" | head -n1)
	sed -i "s/^listen = 127.0.0.1:0$/listen = 127.0.0.1:$status_port/" "$tmp/lessee.conf"
	say "lessee pid $lessee_pid, status endpoint http://127.0.0.1:$status_port/"
}

# lessee's notable log lines since the last call (seen: lines shown so far)
seen=0
show_new_log() {
	n=$(wc -l < "$tmp/lessee.log")
	if [ "$n" -gt "$seen" ]; then
		sed -n "$((seen + 1)),${n}p" "$tmp/lessee.log" | grep -E 'level=(warning|notice|error)|reported' |
			sed -e 's/^ts=[^ ]* //' -e 's/ worker_id=demo-worker//' | cut -c1-150 | sed 's/^/      /'
		seen=$n
	fi
}

# `lessee status` once, at the fourth second (t: seconds so far)
shown_status=0
show_status_once() {
	if [ "$shown_status" = 0 ] && [ "$t" -ge 4 ]; then
		shown_status=1
		step "lessee status (what the daemon says about itself, mid-run)"
		"$LESSEE" status --config "$tmp/lessee.conf" || true
		echo
	fi
}

# runs finished by workflow and outcome, and the breakers (those not 0)
show_metrics() {
	command -v curl >/dev/null 2>&1 || return 0
	step "lessee's metrics: runs finished by workflow and outcome (curl /metrics)"
	curl -s "http://127.0.0.1:$status_port/metrics" |
		grep -E '^lessee_(runs_finished_total|workflow_blocked)' | grep -v ' 0$' || true
}

# SIGTERM: lessee drains and exits; sets rc
drain_lessee() {
	kill -TERM "$lessee_pid"
	rc=0
	wait "$lessee_pid" || rc=$?
	lessee_pid=""
	tail -n 2 "$tmp/lessee.log" | sed -e 's/^ts=[^ ]* //' | cut -c1-150
	echo "lessee exited with $rc"
}
