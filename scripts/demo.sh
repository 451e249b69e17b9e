#!/bin/sh
# `make demo`: lessor on a temporary database on a free port; enqueue a few
# runs, play a worker by hand (curl speaks protocol v1), look at the results,
# stop, clean up.  BUILD=build/default (set by make).
set -eu
BUILD=${BUILD:-build/default}
LESSOR="$BUILD/lessor"
[ -x "$LESSOR" ] || { echo "demo: $LESSOR is not built (run make)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lessor-demo.XXXXXX")
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -t 1 ]; then bold='\033[1m' plain='\033[0m'; else bold='' plain=''; fi
step() { printf "\n${bold}== %s${plain}\n" "$*"; }
# Echo a command as a person would type it (lessor for the binary, no --url), then run it.
run() {
	line='$'
	skip=0
	for a in "$@"; do
		if [ $skip = 1 ]; then skip=0; continue; fi
		case "$a" in
		--url) skip=1; continue ;;
		"$LESSOR") a=lessor ;;
		*[!A-Za-z0-9._:/=-]*) a="'$a'" ;;
		esac
		line="$line $a"
	done
	echo "$line"
	"$@"
}

step "start lessor serve on a temporary database, port chosen by the kernel"
# --ready-fd: lessor writes its address there once it serves (no polling of the port)
"$LESSOR" serve --db "$tmp/lessor.db" --listen 127.0.0.1:0 --ready-fd 3 \
	3>"$tmp/ready" 2>"$tmp/lessor.log" &
pid=$!
i=0
until grep -q . "$tmp/ready" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "demo: lessor did not start:" >&2
		cat "$tmp/lessor.log" >&2
		exit 1
	fi
	sleep 0.05
done
url="http://$(head -n1 "$tmp/ready")"
echo "lessor is serving $url (pid $pid, database $tmp/lessor.db)"

step "enqueue three runs"
run "$LESSOR" enqueue --url "$url" --workflow build --input '{"commit":"4f2a9c1"}' --tag linux
run "$LESSOR" enqueue --url "$url" --workflow build --input '{"commit":"77b0e3d"}' \
	--max-attempts 3 --timeout 10min
run "$LESSOR" enqueue --url "$url" --workflow deploy --tag region:eu --idempotency-key deploy-42

step "the queue"
run "$LESSOR" list --url "$url"

if command -v curl >/dev/null 2>&1; then
	step "play a worker with curl: claim, ship a log chunk, complete"
	claim='{"claim_id":"demo-claim-1","worker_id":"demo-worker","max_runs":1,"lease_ttl_s":60,"workflows":["build"],"tags":["linux"]}'
	printf '$ curl -X POST %s/v1/claims -d %s\n' "$url" "'$claim'"
	answer=$(curl -s -X POST "$url/v1/claims" -H 'Content-Type: application/json' -d "$claim")
	echo "$answer"
	id=$(echo "$answer" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
	token=$(echo "$answer" | sed -n 's/.*"token":"\([0-9a-f]*\)".*/\1/p')
	log='building 4f2a9c1... ok'
	printf '$ curl -X PATCH %s/v1/runs/%s/log -H "Content-Range: bytes 0-%d/*" ...\n' \
		"$url" "$id" $((${#log}))
	printf '%s\n' "$log" | curl -s -X PATCH "$url/v1/runs/$id/log" \
		-H "Lease-Token: $token" -H "Content-Range: bytes 0-$((${#log}))/*" \
		-H 'Content-Type: application/octet-stream' --data-binary @-
	echo
	done_body="{\"token\":\"$token\",\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0,\"duration_ms\":1200,\"output\":{\"artifact\":\"app.tar.gz\"}}"
	printf '$ curl -X POST %s/v1/runs/%s/complete -d ...\n' "$url" "$id"
	curl -s -X POST "$url/v1/runs/$id/complete" -H 'Content-Type: application/json' -d "$done_body"
	echo
	step "the run, its outcome and its lease"
	run "$LESSOR" show --url "$url" "$id"
	step "its log"
	run "$LESSOR" log --url "$url" "$id"
else
	step "one run in detail (install curl to see a worker claim and complete it)"
	run "$LESSOR" show --url "$url" r-1
fi

step "cancel the deploy, then count runs by status"
run "$LESSOR" cancel --url "$url" r-3
run "$LESSOR" stats --url "$url"

step "stop lessor (SIGTERM: drains, closes the database)"
kill -TERM "$pid"
wait "$pid" && echo "lessor exited 0"
pid=""
echo "server log:"
sed 's/^/  /' "$tmp/lessor.log"
