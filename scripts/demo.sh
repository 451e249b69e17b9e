#!/bin/sh
# `make demo`: lessor (the reference API) on a temporary database and lessee
# (the worker daemon) working a mix of real runs: successes, a failure, a
# retry, a timeout, and a crashing workflow that trips the poison-pill
# breaker.  A live summary every second; everything is cleaned up at the end.
# BUILD=build/default (set by make); PROTOCOL=conductor runs
# scripts/demo_conductor.sh instead (the same tour on the Conductor emulator),
# PROTOCOL=camunda7 scripts/demo_camunda7.sh (on the Camunda 7 emulator).
set -eu
BUILD=${BUILD:-build/default}
case ${PROTOCOL:-native} in
native) ;;
conductor) exec "$(dirname "$0")/demo_conductor.sh" ;;
camunda7) exec "$(dirname "$0")/demo_camunda7.sh" ;;
*) echo "demo: PROTOCOL is native, conductor or camunda7, not '$PROTOCOL'" >&2; exit 2 ;;
esac
LESSOR="$(pwd)/$BUILD/lessor"
. "$(dirname "$0")/demo_common.sh"
demo_need "$LESSOR" "$LESSEE"

step "lessor: the reference orchestration API, on a temporary SQLite database"
echo "demo-token-$(date +%s)" > "$tmp/token"
chmod 600 "$tmp/token"
"$LESSOR" serve --db "$tmp/lessor.db" --listen 127.0.0.1:0 --ready-fd 3 \
	--token-file "$tmp/token" --retry-base 1s 3>"$tmp/ready" 2>"$tmp/lessor.log" &
server_pid=$!
wait_for "$tmp/ready" . lessor "$server_pid"
url="http://$(head -n1 "$tmp/ready")"
echo "serving $url (token in $tmp/token)"
lessor() { "$LESSOR" "$@" --url "$url" --token-file "$tmp/token"; }

step "the workflows this worker runs (lessee.conf)"
mkdir -p "$tmp/bin"
cat > "$tmp/bin/hello" <<'SH'
#!/bin/sh
# The run's input JSON is on stdin; what is written to $LESSEE_RESULT_FILE becomes its output.
read -r input || true
echo "hello from run $LESSEE_RUN_ID (attempt $LESSEE_ATTEMPT), input $input"
sleep 1
printf '{"greeting":"hello","run":"%s"}\n' "$LESSEE_RUN_ID" > "$LESSEE_RESULT_FILE"
SH
cat > "$tmp/bin/flaky" <<'SH'
#!/bin/sh
# Exit 75 (EX_TEMPFAIL) asks for a retry; the second attempt succeeds.
echo "attempt $LESSEE_ATTEMPT"
[ "$LESSEE_ATTEMPT" -ge 2 ] || { echo "not yet: temporary failure" >&2; exit 75; }
echo "fine now"
SH
cat > "$tmp/bin/compile" <<'SH'
#!/bin/sh
echo "compiling..."
echo "error: main.c:42: expected ';'" >&2
exit 2
SH
cat > "$tmp/bin/slow" <<'SH'
#!/bin/sh
echo "this takes a while (deadline in ${LESSEE_DEADLINE_MS}ms)"
trap 'echo "got SIGTERM, ignoring it"' TERM
while :; do sleep 1; done
SH
cat > "$tmp/bin/crashy" <<'SH'
#!/bin/sh
echo "about to crash"
kill -SEGV $$
SH
chmod 755 "$tmp"/bin/*
cat > "$tmp/lessee.conf" <<CONF
[api]
url = $url
token_file = $tmp/token
request_timeout = 10s

[worker]
id = demo-worker
concurrency = 4
lease_ttl = 30s
lease_refresh = 5s
long_poll = 5s
kill_grace = 1s
max_consecutive_failures = 3
failure_cooldown = 3s
spool_dir = $tmp/spool
run_dir = $tmp/run

[status]
listen = 127.0.0.1:0

[log]
level = info
format = logfmt

[workflow.hello]
command = $tmp/bin/hello

[workflow.flaky]
command = $tmp/bin/flaky

[workflow.compile]
command = $tmp/bin/compile

[workflow.slow]
command = $tmp/bin/slow
timeout = 2s

[workflow.crashy]
command = $tmp/bin/crashy
CONF
sed -n '/^\[workflow/,$p' "$tmp/lessee.conf"
check_config

step "enqueue a mix of runs"
for i in 1 2 3 4 5 6; do lessor enqueue --workflow hello --input "{\"n\":$i}" >/dev/null; done
lessor enqueue --workflow flaky --max-attempts 3 >/dev/null
lessor enqueue --workflow compile --max-attempts 1 >/dev/null
lessor enqueue --workflow slow --max-attempts 1 >/dev/null
for i in 1 2 3 4; do lessor enqueue --workflow crashy --max-attempts 1 >/dev/null; done
for i in 7 8; do lessor enqueue --workflow hello --input "{\"n\":$i}" >/dev/null; done
lessor list

step "start lessee (4 slots)"
start_lessee

step "live: queue counts each second (lessor stats), and lessee's own words"
count() { lessor stats | awk -v k="$1" '$1 == k { print $2 }'; }
t=0
while :; do
	sleep 1
	t=$((t + 1))
	p=$(count pending) r=$(count running) s=$(count succeeded) f=$(count failed)
	printf "${bold}t=%2ds${plain}  pending %-2s running %-2s succeeded %-2s failed %-2s\n" \
		"$t" "$p" "$r" "$s" "$f"
	show_new_log
	show_status_once
	[ "$p" = 0 ] && [ "$r" = 0 ] && break
	[ "$t" -lt 60 ] || { echo "demo: runs did not finish in 60 s" >&2; exit 1; }
done

show_metrics

step "every run is done: SIGTERM drains lessee (exit code 0 expected)"
drain_lessee

step "results"
lessor list
first_hello=$(lessor list --workflow hello --json | sed -n 's/.*"id":[ 	]*"\([^"]*\)".*/\1/p' | tail -n1)
slow_id=$(lessor list --workflow slow --json | sed -n 's/.*"id":[ 	]*"\([^"]*\)".*/\1/p' | head -n1)
step "a timed-out run (lessor show $slow_id)"
lessor show "$slow_id" | grep -E '^(status|outcome|reason|signal|error|attempt):'
step "its log, shipped while it ran (lessor log $slow_id)"
lessor log "$slow_id"
step "a successful run's log and output (lessor show $first_hello)"
lessor log "$first_hello"
lessor show "$first_hello" | grep -E '^output:'
[ "$rc" = 0 ] || { echo "demo: lessee exited with $rc" >&2; exit 1; }
printf "\n${bold}demo done${plain}: lessor and lessee stopped, %s removed\n" "$tmp"
