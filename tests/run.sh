#!/bin/sh
# Run every Check binary under both loop backends (io_uring, then epoll).
#   BUILD=build/default tests/run.sh [name-filter]
#   VALGRIND=1 runs each test process, and the daemons the tests start, under valgrind.
#   BACKENDS="epoll" limits the backends.
set -u
BUILD=${BUILD:-build/default}
filter=${1:-}
BACKENDS=${BACKENDS:-"io_uring epoll"}
top=$(pwd)

export LESSEE_BIN="$top/$BUILD/lessee"
export LESSOR_BIN="$top/$BUILD/lessor"
export LESSEE_TEST_AUX="$top/$BUILD/tests/aux"
export LESSEE_SRCDIR="$top"
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
wrap=""
if [ -n "${VALGRIND:-}" ]; then
	# --child-silent-after-fork: valgrind runs a spawned child as a fork until its
	# execve; one that fails before (lib/exec's spawn errors) is no leak of ours.
	wrap="valgrind -q --child-silent-after-fork=yes --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --track-fds=no"
	export LESSEE_WRAP="$wrap"
	export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10}
	export CK_FORK=no
fi

tests=$(ls "$BUILD"/tests/unit/check_* "$BUILD"/tests/integration/check_* 2>/dev/null |
	grep -v '\.[od]$' | grep -- "$filter")
[ -n "$tests" ] || { echo "run.sh: no tests match '$filter'" >&2; exit 1; }

failed=""
total=0
start=$(date +%s)
for backend in $BACKENDS; do
	for t in $tests; do
		total=$((total + 1))
		name="$(basename "$t") [$backend]"
		t0=$(date +%s)
		LESSEE_IO_BACKEND=$backend $wrap "$t"
		rc=$?
		t1=$(date +%s)
		if [ $rc -eq 0 ]; then
			echo "PASS $name ($((t1 - t0))s)"
		elif [ $rc -eq 77 ]; then
			echo "SKIP $name"
		else
			echo "FAIL $name (exit $rc)"
			failed="$failed\n  $name"
		fi
	done
done
echo "ran $total test binaries in $(( $(date +%s) - start ))s"
if [ -n "$failed" ]; then
	printf "FAILED:$failed\n"
	exit 1
fi
echo "all passed"
