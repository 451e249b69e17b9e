#!/bin/sh
# `make demo PROTOCOL=conductor`: the tour of scripts/demo.sh with lessee
# speaking Conductor's task API ([api] protocol = conductor) to the Conductor
# emulator (tests/conductor/conductor_emu, docs/conductor.md) instead of
# lessor: successes with output, a failure Conductor retries as a new task, a
# terminal error it does not retry, a timeout, a run kept alive past its
# task's responseTimeoutSeconds, a task cancelled on the server while it runs,
# and a crashing workflow that trips the breaker; key/secret auth on.  A live
# summary every second; everything is cleaned up at the end.
# BUILD=build/default (set by make).
set -eu
BUILD=${BUILD:-build/default}
EMU="$(pwd)/$BUILD/tests/conductor/conductor_emu"
command -v curl >/dev/null 2>&1 || { echo "demo: needs curl" >&2; exit 1; }

. "$(dirname "$0")/demo_common.sh"
demo_need "$EMU" "$LESSEE"

step "the Conductor emulator: Conductor's task API, in memory (not Conductor itself)"
echo "demo-secret-$(date +%s)" > "$tmp/key-secret"
chmod 600 "$tmp/key-secret"
"$EMU" --ready-fd 3 --auth-key-id demo-key --auth-secret-file "$tmp/key-secret" \
	3>"$tmp/ready" 2>"$tmp/emu.log" &
server_pid=$!
wait_for "$tmp/ready" . "the emulator" "$server_pid"
url="http://$(head -n1 "$tmp/ready")"
echo "serving $url (key demo-key, secret in $tmp/key-secret: POST /api/token, X-Authorization)"
emu() { # METHOD PATH [JSON]
	if [ $# -ge 3 ]; then
		curl -fsS -X "$1" -H 'Content-Type: application/json' -d "$3" "$url$2"
	else
		curl -fsS -X "$1" "$url$2"
	fi
}
# POST /emu/tasks: schedule tasks (each in a one-task workflow): prints the first id
schedule() {
	emu POST /emu/tasks "$1" | sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p'
}

step "the workflows this worker runs (lessee.conf): each polls its task type"
mkdir -p "$tmp/bin"
cat > "$tmp/bin/hello" <<'SH'
#!/bin/sh
# The task's inputData is on stdin; what is written to $LESSEE_RESULT_FILE becomes its outputData.
read -r input || true
echo "hello from task $LESSEE_RUN_ID, input $input"
sleep 1
printf '{"greeting":"hello","task":"%s"}\n' "$LESSEE_RUN_ID" > "$LESSEE_RESULT_FILE"
SH
cat > "$tmp/bin/flaky" <<SH
#!/bin/sh
# Fails the first time (FAILED: Conductor schedules a retry, a new task id), then works.
if [ ! -e "$tmp/flaky.once" ]; then
	touch "$tmp/flaky.once"
	echo "not yet: temporary failure" >&2
	exit 75
fi
echo "fine now (task \$LESSEE_RUN_ID)"
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
cat > "$tmp/bin/long" <<'SH'
#!/bin/sh
# 5 s of work for a task whose responseTimeoutSeconds is 2: alive only by
# lessee's keep-alive (IN_PROGRESS + extendLease every lease_refresh).
for i in 1 2 3 4 5; do echo "step $i of 5"; sleep 1; done
SH
cat > "$tmp/bin/cancelme" <<'SH'
#!/bin/sh
echo "waiting to be cancelled on the server"
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
protocol = conductor
url = $url
key_id = demo-key
key_secret_file = $tmp/key-secret
request_timeout = 10s

[worker]
id = demo-worker
concurrency = 4
lease_ttl = 30s
# below every task's responseTimeoutSeconds (2 s for "long")
lease_refresh = 1s
# Conductor refuses a long poll above 5 s
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
terminal_exit_codes = 2

[workflow.slow]
command = $tmp/bin/slow
timeout = 2s

[workflow.long]
command = $tmp/bin/long

[workflow.cancelme]
command = $tmp/bin/cancelme

[workflow.crashy]
command = $tmp/bin/crashy
CONF
sed -n '/^\[api\]/,/^request_timeout/p;/^\[workflow/,$p' "$tmp/lessee.conf"
check_config

step "schedule a mix of tasks (POST /emu/tasks: the emulator's test control)"
for i in 1 2 3 4 5 6; do
	schedule "{\"taskType\":\"hello\",\"inputData\":{\"n\":$i},\"retryCount\":0}" >/dev/null
done
schedule '{"taskType":"flaky","retryCount":2,"retryDelaySeconds":0}' >/dev/null
schedule '{"taskType":"compile","retryCount":3,"retryDelaySeconds":0}' >/dev/null
schedule '{"taskType":"slow","retryCount":0}' >/dev/null
long_id=$(schedule '{"taskType":"long","responseTimeoutSeconds":2,"retryCount":0}')
cancel_id=$(schedule '{"taskType":"cancelme","retryCount":0}')
schedule '{"taskType":"crashy","retryCount":0,"count":4}' >/dev/null
for i in 7 8; do
	schedule "{\"taskType\":\"hello\",\"inputData\":{\"n\":$i},\"retryCount\":0}" >/dev/null
done
emu GET '/emu/tasks?format=text' | cut -c1-110

step "start lessee (4 slots)"
start_lessee

step "live: tasks by status each second (GET /emu/counts), and lessee's own words"
count() { emu GET /emu/counts | awk -v k="$1" '$1 == k { print $2 }'; }
t=0 cancelled=0
while :; do
	sleep 1
	t=$((t + 1))
	q=$(count SCHEDULED) r=$(count IN_PROGRESS) c=$(count COMPLETED)
	f=$(( $(count FAILED) + $(count FAILED_WITH_TERMINAL_ERROR) + $(count TIMED_OUT) ))
	x=$(count CANCELED)
	printf "${bold}t=%2ds${plain}  scheduled %-2s in progress %-2s completed %-2s failed %-2s cancelled %-2s\n" \
		"$t" "$q" "$r" "$c" "$f" "$x"
	show_new_log
	if [ "$cancelled" = 0 ] &&
		emu GET "/emu/tasks/$cancel_id" | grep -q '"status":"IN_PROGRESS"'; then
		cancelled=1
		say "      (cancelling task $cancel_id on the server: POST /emu/tasks/$cancel_id/cancel)"
		emu POST "/emu/tasks/$cancel_id/cancel" '{}' >/dev/null
	fi
	show_status_once
	[ "$q" = 0 ] && [ "$r" = 0 ] && break
	[ "$t" -lt 60 ] || { echo "demo: tasks did not finish in 60 s" >&2; exit 1; }
done

show_metrics

step "every task is done: SIGTERM drains lessee (exit code 0 expected)"
drain_lessee

step "results (GET /emu/tasks?format=text): a retry is a new task id"
emu GET '/emu/tasks?format=text' | cut -c1-150
step "the task kept alive past its 2 s responseTimeoutSeconds, and its log (GET /emu/tasks/$long_id?format=text)"
emu GET "/emu/tasks/$long_id?format=text" | grep -E '^(status|extendLeases|updates|log:)' | sed 's/^/  /'
step "the same task through Conductor's own API, with a token (GET /api/tasks/$long_id)"
token=$(emu POST /api/token "{\"keyId\":\"demo-key\",\"keySecret\":\"$(cat "$tmp/key-secret")\"}" |
	sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
curl -fsS -H "X-Authorization: $token" "$url/api/tasks/$long_id" | cut -c1-200
echo
first_hello=$(emu GET '/emu/tasks?taskType=hello&format=text' | head -n1 | cut -d' ' -f1)
step "a successful task's outputData (from its result file) and log"
emu GET "/emu/tasks/$first_hello?format=text" | grep -E '^(status|outputData|log:)' | sed 's/^/  /'
[ "$rc" = 0 ] || { echo "demo: lessee exited with $rc" >&2; exit 1; }
printf "\n${bold}demo done${plain}: the emulator and lessee stopped, %s removed\n" "$tmp"
