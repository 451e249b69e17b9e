#!/bin/sh
# `make demo PROTOCOL=camunda7`: the tour of scripts/demo.sh with lessee
# taking Camunda 7 external tasks ([api] protocol = camunda7) from the Camunda
# 7 emulator (tests/camunda7/camunda7_emu, docs/camunda7.md) instead of
# lessor: successes with typed variables, a run that asks to be retried (exit
# 75: retries count down, then an incident), a failure that is an incident at
# once with the tail of its output, a BPMN error, a timeout, a run kept alive
# past its lockDuration by extendLock, a process cancelled while its task
# runs, and a crashing workflow that trips the breaker; HTTP basic auth on.
# A live summary every second; everything is cleaned up at the end.
# BUILD=build/default (set by make).
set -eu
BUILD=${BUILD:-build/default}
EMU="$(pwd)/$BUILD/tests/camunda7/camunda7_emu"
command -v curl >/dev/null 2>&1 || { echo "demo: needs curl" >&2; exit 1; }

. "$(dirname "$0")/demo_common.sh"
demo_need "$EMU" "$LESSEE"

step "the Camunda 7 emulator: the external-task REST API, in memory (not an engine)"
echo "demo-pass-$(date +%s)" > "$tmp/password"
chmod 600 "$tmp/password"
"$EMU" --ready-fd 3 --basic-user demo --basic-password-file "$tmp/password" \
	3>"$tmp/ready" 2>"$tmp/emu.log" &
server_pid=$!
wait_for "$tmp/ready" . "the emulator" "$server_pid"
root="http://$(head -n1 "$tmp/ready")"
url="$root/engine-rest"
echo "serving $url (HTTP basic: user demo, password in $tmp/password)"
emu() { # METHOD PATH [JSON]
	if [ $# -ge 3 ]; then
		curl -fsS -X "$1" -H 'Content-Type: application/json' -d "$3" "$root$2"
	else
		curl -fsS -X "$1" "$root$2"
	fi
}
# POST /emu/tasks: external tasks of a topic (each in a process of its own): prints the first id
schedule() {
	emu POST /emu/tasks "$1" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p'
}
field() { # JSON key: a string or number field of a flat answer
	sed -n "s/.*\"$2\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$1" | head -n1
}

step "the workflows this worker runs (lessee.conf): each fetches its topic"
mkdir -p "$tmp/bin"
cat > "$tmp/bin/hello" <<'SH'
#!/bin/sh
# The task's variables are on stdin as one JSON object; the result file's
# keys become process variables (typed: String, Integer, Json, ...).
read -r input || true
echo "hello from task $LESSEE_RUN_ID (business key $LESSEE_BUSINESS_KEY), variables $input"
sleep 1
printf '{"greeting":"hello","n_seen":%s}\n' "$(echo "$input" | sed -n 's/.*"n":\([0-9]*\).*/\1/p')" \
	> "$LESSEE_RESULT_FILE"
SH
cat > "$tmp/bin/flaky" <<'SH'
#!/bin/sh
# Asks to be tried again (exit 75): the engine's retries count down to an incident.
echo "not yet: temporary failure (attempt $LESSEE_ATTEMPT)" >&2
exit 75
SH
cat > "$tmp/bin/compile" <<'SH'
#!/bin/sh
echo "compiling..."
echo "error: main.c:42: expected ';'" >&2
exit 2
SH
cat > "$tmp/bin/reserve" <<'SH'
#!/bin/sh
# A business error for the process to handle: a BPMN error, not a failure.
echo '{"bpmn_error":{"code":"OUT_OF_STOCK","message":"sku A-1 is sold out"}}' > "$LESSEE_RESULT_FILE"
SH
cat > "$tmp/bin/slow" <<'SH'
#!/bin/sh
echo "this takes a while (deadline in ${LESSEE_DEADLINE_MS}ms)"
trap 'echo "got SIGTERM, ignoring it"' TERM
while :; do sleep 1; done
SH
cat > "$tmp/bin/long" <<'SH'
#!/bin/sh
# 6 s of work under a 3 s lock: alive only by lessee's extendLock.
for i in 1 2 3 4 5 6; do echo "step $i of 6"; sleep 1; done
SH
cat > "$tmp/bin/cancelme" <<'SH'
#!/bin/sh
echo "waiting for the process to be cancelled"
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
protocol = camunda7
url = $url
user = demo
password_file = $tmp/password
request_timeout = 10s

[worker]
id = demo-worker
concurrency = 4
# lockDuration of every fetch and extension
lease_ttl = 3s
lease_refresh = 1s
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
retries = 2
retry_backoff = 1s

[workflow.compile]
command = $tmp/bin/compile

[workflow.reserve]
command = $tmp/bin/reserve
topic = reserve-stock

[workflow.slow]
command = $tmp/bin/slow
timeout = 2s
retries = 1

[workflow.long]
command = $tmp/bin/long

[workflow.cancelme]
command = $tmp/bin/cancelme

[workflow.crashy]
command = $tmp/bin/crashy
retries = 1
CONF
sed -n '/^\[api\]/,/^request_timeout/p;/^\[workflow/,$p' "$tmp/lessee.conf"
check_config

step "create a mix of external tasks (POST /emu/tasks: the emulator's test control)"
for i in 1 2 3 4 5 6; do
	schedule "{\"topicName\":\"hello\",\"businessKey\":\"order-$i\",\"variables\":{\"n\":{\"type\":\"Integer\",\"value\":$i}}}" >/dev/null
done
flaky_id=$(schedule '{"topicName":"flaky"}')
compile_id=$(schedule '{"topicName":"compile"}')
reserve_id=$(schedule '{"topicName":"reserve-stock"}')
schedule '{"topicName":"slow"}' >/dev/null
long_id=$(schedule '{"topicName":"long"}')
cancel_id=$(schedule '{"topicName":"cancelme"}')
schedule '{"topicName":"crashy","count":4}' >/dev/null
for i in 7 8; do
	schedule "{\"topicName\":\"hello\",\"businessKey\":\"order-$i\",\"variables\":{\"n\":{\"type\":\"Integer\",\"value\":$i}}}" >/dev/null
done
emu GET /emu/counts | tr '\n' ' '
echo

step "start lessee (4 slots)"
start_lessee
grep -o 'camunda7: workerId [^"]*' "$tmp/lessee.log" | head -n1 | sed 's/^/  /'

step "live: tasks by state each second (GET /emu/counts), and lessee's own words"
count() { emu GET /emu/counts | awk -v k="$1" '$1 == k { print $2 }'; }
t=0 cancelled=0
while :; do
	sleep 1
	t=$((t + 1))
	a=$(count AVAILABLE) l=$(count LOCKED) w=$(count FAILED) c=$(count COMPLETED)
	i=$(count INCIDENT) b=$(count BPMN_ERROR) d=$(count DELETED)
	printf "${bold}t=%2ds${plain}  available %-2s locked %-2s waiting to retry %-2s completed %-2s incident %-2s bpmn error %-2s cancelled %-2s\n" \
		"$t" "$a" "$l" "$w" "$c" "$i" "$b" "$d"
	show_new_log
	if [ "$cancelled" = 0 ] && emu GET "/emu/tasks/$cancel_id" | grep -q '"state":"LOCKED"'; then
		cancelled=1
		say "      (cancelling the process of task $cancel_id: POST /emu/tasks/$cancel_id/cancel)"
		emu POST "/emu/tasks/$cancel_id/cancel" '{}' >/dev/null
	fi
	show_status_once
	# the breaker holds the last crashy tasks back: done when nothing is locked or waiting
	if [ "$l" = 0 ] && [ "$w" = 0 ] && [ "$t" -ge 8 ]; then break; fi
	[ "$t" -lt 60 ] || { echo "demo: tasks did not finish in 60 s" >&2; exit 1; }
done

show_metrics

step "SIGTERM drains lessee (exit code 0 expected)"
drain_lessee

show() { # title id keys...
	title=$1 id=$2
	shift 2
	step "$title (GET /emu/tasks/$id)"
	emu GET "/emu/tasks/$id" > "$tmp/task.json"
	for k in "$@"; do
		printf '  %-16s %s\n' "$k" "$(field "$tmp/task.json" "$k")"
	done
}
show "retried twice (exit 75), then an incident" "$flaky_id" state retries errorMessage
show "a failure: an incident at once, with the tail of its output" "$compile_id" \
	state retries errorMessage errorDetails
show "a BPMN error" "$reserve_id" state code message
show "kept alive past its 3 s lock by extendLock" "$long_id" state extendLock
step "a run's output is in lessee's own log (the engine has none)"
grep 'msg="output: ' "$tmp/lessee.log" | head -n 3 | sed -e 's/^ts=[^ ]* //' | cut -c1-150 | sed 's/^/  /'
[ "$rc" = 0 ] || { echo "demo: lessee exited with $rc" >&2; exit 1; }
printf "\n${bold}demo done${plain}: the emulator and lessee stopped, %s removed\n" "$tmp"
