#!/bin/sh
# Run each libFuzzer harness for FUZZ_TIME seconds (or, when FUZZ_RUNS is set,
# until that many executions if that comes first), one after the other
# (make fuzz builds them under build/fuzz first).
#   FUZZ_TIME=60 BUILD=build/fuzz scripts/fuzz.sh claim conf_load ...
# Each starts from its seed corpus fuzz/corpus/<name>/ (copied into
# $BUILD/corpus/<name>/, which keeps what it finds between runs), with
# fuzz/<name>.dict when there is one.  A crash leaves its input in
# $BUILD/artifacts/<name>/; keep it as fuzz/regress/<name>/<sha1> with the fix,
# and check_fuzz_regress replays it under make check.
# Prints executions, coverage (cov: edges, ft: features) and crashes per
# harness; exits 1 when any harness crashed or did not answer --version and
# --help.
set -u
BUILD=${BUILD:-build/fuzz}
FUZZ_TIME=${FUZZ_TIME:-60}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# The harnesses that need files (conf_load, lessor_api's database) put them
# under TMPDIR: a tmpfs when there is one, a fresh directory per harness.
tmproot=${FUZZ_TMPDIR:-$( [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")}

# Every program of ours answers --version and --help (docs/operations.md);
# libFuzzer ignores flags with two dashes, so a harness that did not would
# start fuzzing here and be killed.
answers() {
	v=$(timeout -s KILL 10 "$1" --version 2>/dev/null) &&
		h=$(timeout -s KILL 10 "$1" --help 2>/dev/null) &&
		echo "$v" | grep -q "^fuzz/$2 [0-9]" && echo "$h" | grep -q '^usage: '
}

failed=""
table=""
for name in "$@"; do
	bin="$BUILD/fuzzers/$name"
	if ! answers "$bin" "$name"; then
		echo "  $name: does not answer --version and --help"
		failed="$failed $name"
		table="$table$name: does not answer --version and --help (FAILED)
"
		continue
	fi
	corpus="$BUILD/corpus/$name"
	art="$BUILD/artifacts/$name"
	log="$BUILD/logs/$name.log"
	mkdir -p "$corpus" "$art" "$(dirname "$log")"
	[ -d "fuzz/corpus/$name" ] && cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
	set -- -max_total_time="$FUZZ_TIME" -print_final_stats=1 -timeout=10 \
		-rss_limit_mb=2048 -artifact_prefix="$art/"
	[ -n "${FUZZ_RUNS:-}" ] && set -- "$@" -runs="$FUZZ_RUNS"
	[ -f "fuzz/$name.dict" ] && set -- "$@" -dict="fuzz/$name.dict"
	[ -f "fuzz/$name.options" ] && set -- "$@" $(cat "fuzz/$name.options")
	echo "FUZZ $name (${FUZZ_TIME}s)"
	tmp=$(mktemp -d "$tmproot/lessee-fuzz.XXXXXX")
	TMPDIR="$tmp" "$bin" "$@" "$corpus" >"$log" 2>&1
	rc=$?
	rm -rf "$tmp"
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+' "$log" | tail -1)
	cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
	crashes=$(ls "$art" | grep -c -E '^(crash|leak|timeout|oom)-')
	if [ $rc -ne 0 ]; then
		failed="$failed $name"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*property failed|artifact_prefix|Test unit written)' \
			"$log" | head -8
		echo "  see $log"
	fi
	secs=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p')
	line=$(printf '%-14s execs %-10s exec/s %-7s cov %-6s ft %-7s crashes %s%s' "$name" \
		"${execs:-?}" "${secs:-?}" "${cov:-?}" "${ft:-?}" "$crashes" \
		"$([ $rc -ne 0 ] && echo ' (FAILED)')")
	echo "  $line"
	table="$table$line
"
done
echo "---- fuzz summary (${FUZZ_TIME}s each)"
printf '%s' "$table"
if [ -n "$failed" ]; then
	echo "FAILED:$failed" >&2
	exit 1
fi
