#!/bin/sh
# make bench-report [QUICK=1]: runs the benchmarks that make the figures of
# docs/performance.md, collects their figures as TSV in build/bench-report/,
# draws the plots into docs/performance/ with gnuplot, and rewrites the
# generated parts of docs/performance.md (between <!-- generated:NAME --> and
# <!-- end generated:NAME -->; everything else in it is hand-written).
#
#   scripts/bench_report.sh                 the whole set (BUILD=build/default)
#   QUICK=1 scripts/bench_report.sh         small counts: checks the pipeline
#   scripts/bench_report.sh render DIR DOC  only the markdown, from DIR/all.tsv,
#                                           DIR/machine.tsv, DIR/params.tsv
#   scripts/bench_report.sh parse-e2e       bench/e2e's stdout -> TSV rows
# (tests/unit/check_bench_report runs these two on fixtures)
#
# Every TSV row: bench, system, slots, metric, median, floor, ratio (see
# tests/helpers/benchutil.h); e2e prints a table only, parsed here (the parser
# stops the report when that table changes shape).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build/default}
OUT=${OUT:-build/bench-report}
PLOTS=${PLOTS:-docs/performance}
DOC=${DOC:-docs/performance.md}

die() {
	echo "bench-report: $*" >&2
	exit 1
}

# ------------------------------------------------------------ e2e's table

# e2e's stdout -> TSV rows: runs/s (floor beside), cpu per run per width,
# and the daemon's RSS idle and with N sleeping runs.  lessor there runs
# with --synchronous normal.  $1: the system's name (the default run's, with
# lib/exec's rows and the RSS line; another, e.g. with --prefetch and
# --no-rss, has only its own rows).
parse_e2e() {
	awk -F '[ \t]+' -v OFS='\t' -v name="${1:-}" '
	BEGIN { main = name == ""; sys = main ? "lessee + lessor (normal)" : name }
	function bad(why) { print "bench-report: e2e output: " why ": " $0 > "/dev/stderr"; err = 1; exit 1 }
	/^slots +lessee run\/s +cpu us\/run +floor run\/s +exec run\/s +vs floor +vs exec( +lessor us\/r)?$/ { intable = 1; next }
	intable && NF == 0 { intable = 0; next }
	intable {
		if ((NF != 7 && NF != 8) || $1 !~ /^[0-9]+$/) bad("unexpected row in the throughput table")
		print "e2e", sys, $1, "runs_per_s", $2, $4, ($4 > 0 ? sprintf("%.4f", $2 / $4) : "-")
		print "e2e", sys, $1, "cpu_us_per_run", $3, "-", "-"
		if (main)
			print "e2e", "lib/exec on the loop", $1, "runs_per_s", $5, $4, ($4 > 0 ? sprintf("%.4f", $5 / $4) : "-")
		rows++
		next
	}
	# where lessee'"'"'s CPU a run goes: the same work without it, measured in the bench
	/^slots +lessee +posix_spawn +lib\/exec +run files +lessee rest$/ { incpu = 1; next }
	incpu && NF == 0 { incpu = 0; next }
	incpu {
		if (NF != 6 || $1 !~ /^[0-9]+$/) bad("unexpected row in the CPU table")
		if (main) {
			print "e2e", "posix_spawn floor", $1, "cpu_us_per_run", $3, "-", "-"
			print "e2e", "lib/exec on the loop", $1, "cpu_us_per_run", $4, "-", "-"
			print "e2e", "a run'"'"'s files", $1, "cpu_us_per_run", $5, "-", "-"
		}
		next
	}
	/^daemon RSS: idle/ {
		if (!match($0, /idle [0-9]+ KiB; with [0-9]+ concurrent/)) bad("RSS line")
		split(substr($0, RSTART, RLENGTH), w, " ")
		print "e2e", "lessee + lessor (normal)", 0, "rss_kib", w[2], "-", "-"
		n = w[5]
		if (!match($0, /runs [0-9]+ KiB/)) bad("RSS line")
		split(substr($0, RSTART, RLENGTH), v, " ")
		print "e2e", "lessee + lessor (normal)", n, "rss_kib", v[2], "-", "-"
		rss = 1
	}
	END {
		if (err) exit 1
		if (rows == 0) { print "bench-report: e2e output: no throughput table" > "/dev/stderr"; exit 1 }
		if (main && !rss) { print "bench-report: e2e output: no RSS line" > "/dev/stderr"; exit 1 }
	}'
}

# ------------------------------------------------------------ markdown

# One generated fragment: the peers table in the shape of issue 15, at
# 16 slots (and lessee + lessor at 1), from all.tsv.
md_peers() {
	awk -F '\t' '
	NR > 1 { v[$1 "|" $2 "|" $3 "|" $4] = $5; r[$1 "|" $2 "|" $3 "|" $4] = $7 }
	function ratio(k) { return (k in r) && r[k] != "-" ? sprintf("%.2f", r[k]) : "—" }
	function us(k) { return (k in v) ? sprintf("%.0f µs", v[k]) : "—" }
	function mib(k) { return (k in v) ? sprintf("%.1f MiB", v[k] / 1024) : "—" }
	function row(label, b, s, w, rssk) {
		printf "| %s | %s | %s | %s |\n", label, ratio(b "|" s "|" w "|runs_per_s"),
			us(b "|" s "|" w "|cpu_us_per_run"), mib(rssk)
	}
	END {
		print "| system | runs/s ÷ floor | worker CPU per run | worker peak RSS |"
		print "|---|---|---|---|"
		row("lessee + lessor (`--synchronous normal`), 16 slots ¹", "e2e", "lessee + lessor (normal)", 16,
			"latency|lessee + lessor (full)|16|peak_rss_kib")
		row("lessee, Conductor driver ²", "conductor_peers", "lessee, conductor driver", 16,
			"conductor_peers|lessee, conductor driver|16|peak_rss_kib")
		row("Conductor official JS client ²", "conductor_peers", "Conductor official JS client", 16,
			"conductor_peers|Conductor official JS client|16|peak_rss_kib")
		row("lessee, Camunda 7 driver ³", "camunda7_peers", "lessee, camunda7 driver", 16,
			"camunda7_peers|lessee, camunda7 driver|16|peak_rss_kib")
		row("Camunda 7 official JS client ³", "camunda7_peers", "Camunda 7 official JS client", 16,
			"camunda7_peers|Camunda 7 official JS client|16|peak_rss_kib")
		row("lessee + lessor (`normal`), 1 slot ¹", "e2e", "lessee + lessor (normal)", 1, "-")
		row("lessee + lessor (`normal`), 1 slot, `prefetch = 1` ¹", "e2e",
			"lessee + lessor (normal), prefetch 1", 1, "-")
		row("graphile-worker on PostgreSQL ⁴", "graphile_peers", "graphile-worker on PostgreSQL", 16,
			"graphile_peers|graphile-worker on PostgreSQL|16|peak_rss_kib")
	}' "$1"
}

# Every figure, one table per bench, as the TSV has them.
md_figures() {
	awk -F '\t' '
	NR == 1 { next }
	$1 != last {
		if (last != "") print ""
		printf "**%s**\n\n| system | slots / N | metric | median | floor | ÷ floor |\n|---|---|---|---|---|---|\n", $1
		last = $1
	}
	{ printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7 }' "$1"
}

md_machine() {
	awk -F '\t' '{ printf "- %s: %s\n", $1, $2 }' "$1"
}

md_params() {
	awk -F '\t' '{ printf "- `%s`: %s\n", $1, $2 }' "$1"
}

# Replace each <!-- generated:NAME --> ... <!-- end generated:NAME --> block
# of DOC with DIR/NAME.md; a marker without its fragment is an error.
splice() {
	dir=$1 doc=$2
	awk -v dir="$dir" '
	/^<!-- generated:[a-z_]+ -->$/ {
		print
		name = $0
		sub(/^<!-- generated:/, "", name)
		sub(/ -->$/, "", name)
		f = dir "/" name ".md"
		n = 0
		while ((getline line < f) > 0) { print line; n++ }
		close(f)
		if (n == 0) { print "bench-report: no fragment " f > "/dev/stderr"; exit 1 }
		skip = 1
		next
	}
	/^<!-- end generated:[a-z_]+ -->$/ { skip = 0 }
	!skip { print }' "$doc" >"$doc.tmp" && mv "$doc.tmp" "$doc"
}

render() {
	dir=$1 doc=$2
	[ -s "$dir/all.tsv" ] || die "no $dir/all.tsv"
	md_peers "$dir/all.tsv" >"$dir/peers.md"
	md_figures "$dir/all.tsv" >"$dir/figures.md"
	md_machine "$dir/machine.tsv" >"$dir/machine.md"
	md_params "$dir/params.tsv" >"$dir/params.md"
	splice "$dir" "$doc"
}

case "${1:-}" in
render)
	render "$2" "$3"
	exit 0
	;;
parse-e2e)
	parse_e2e
	exit
	;;
esac

# ------------------------------------------------------------ the runs

cd "$top"
mkdir -p "$OUT" "$PLOTS"
rm -f "$OUT"/*.tsv "$OUT"/*.txt "$OUT"/*.err "$OUT"/*.md "$OUT"/*.dat "$OUT"/*.cdf

if [ -n "${QUICK:-}" ]; then
	SLOTS="1 16"
	E2E="200 2 200" LAT="--rounds 2 --samples 30 --rss 0,100,300" SPAWN="--reps 1 200 1000"
	PEERS="--runs 200 --rounds 1"
	mode="QUICK"
else
	SLOTS="1 16 64"
	E2E="3000 5 1000" LAT="--rounds 5 --samples 500 --rss 0,250,1000,2500,4000" SPAWN="--reps 3 1000 4096 10000"
	PEERS="--runs 3000 --rounds 3"
	mode="full"
fi

{
	printf 'when\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
	printf 'set\t%s (%s)\n' "$mode" "$( [ "$mode" = QUICK ] && echo 'small counts, one or two rounds: a check of the pipeline, not figures to quote' || echo 'the counts below' )"
	printf 'cores (nproc)\t%s\n' "$(nproc)"
	printf 'CPU\t%s\n' "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
	printf 'memory\t%s MiB\n' "$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)"
	printf 'kernel\t%s\n' "$(cat /proc/sys/kernel/osrelease)"
	printf 'load average at the start (1, 5, 15 min)\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
	printf 'loop backend\t%s\n' "${LESSEE_IO_BACKEND:-io_uring}"
	printf 'lessee\t%s\n' "$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)"
} >"$OUT/machine.tsv"
{
	printf 'e2e %s\tRUNS ROUNDS CONCURRENT_SLEEPS, widths 1, 16, 64\n' "$E2E"
	printf 'e2e --no-rss --prefetch 1 --widths 1 %s\tthe same at one slot, worker.prefetch = 1\n' "$E2E"
	printf 'latency %s\trounds of samples one at a time (each figure the median over the rounds), 16 slots, lessor --synchronous full; RSS steps\n' "$LAT"
	printf 'spawn_scale %s\trepetitions, N children alive at once\n' "$SPAWN"
	printf 'conductor_peers %s --concurrency W\tW in %s\n' "$PEERS" "$SLOTS"
	printf 'camunda7_peers %s --concurrency W\tW in %s\n' "$PEERS" "$SLOTS"
	printf 'graphile_peers %s --concurrency W\tW in %s\n' "$PEERS" "$SLOTS"
} >"$OUT/params.tsv"

run() {
	name=$1
	shift
	echo "bench-report: $name: $*" >&2
	if ! "$@" >"$OUT/$name.txt" 2>"$OUT/$name.err"; then
		tail -n 20 "$OUT/$name.err" >&2
		die "$name failed (its output: $OUT/$name.txt, $OUT/$name.err)"
	fi
}

export LESSEE_BIN="$top/$BUILD/lessee" LESSOR_BIN="$top/$BUILD/lessor"
export LESSEE_TEST_AUX="$top/$BUILD/tests/aux"
B=$BUILD/bench

# shellcheck disable=SC2086 # the parameter lists are words
{
	run e2e "$B/e2e" $E2E
	# one slot with a run claimed ahead (worker.prefetch, off by default)
	run e2e_prefetch "$B/e2e" --no-rss --prefetch 1 --widths 1 $E2E
	{
		printf 'bench\tsystem\tslots\tmetric\tmedian\tfloor\tratio\n'
		parse_e2e <"$OUT/e2e.txt"
		parse_e2e "lessee + lessor (normal), prefetch 1" <"$OUT/e2e_prefetch.txt"
	} >"$OUT/e2e.tsv"
	run latency "$B/latency" $LAT --tsv "$OUT/latency.tsv" --cdf "$OUT/latency.cdf"
	run spawn_scale "$B/spawn_scale" $SPAWN --only posix_spawn,io_uring,epoll \
		--tsv "$OUT/spawn_scale.tsv"
	for w in $SLOTS; do
		run "conductor_peers-$w" "$B/conductor_peers" $PEERS --concurrency "$w" \
			--tsv "$OUT/conductor_peers-$w.tsv"
		run "camunda7_peers-$w" "$B/camunda7_peers" $PEERS --concurrency "$w" \
			--tsv "$OUT/camunda7_peers-$w.tsv"
		run "graphile_peers-$w" "$B/graphile_peers" $PEERS --concurrency "$w" \
			--tsv "$OUT/graphile_peers-$w.tsv"
	done
}

# One table: the header once, then every bench's rows in the order run.
awk 'FNR == 1 && NR > 1 { next } { print }' "$OUT/e2e.tsv" "$OUT/latency.tsv" \
	"$OUT/spawn_scale.tsv" "$OUT"/conductor_peers-*.tsv "$OUT"/camunda7_peers-*.tsv \
	"$OUT"/graphile_peers-*.tsv >"$OUT/all.tsv"

# ------------------------------------------------------------ plots

# series BENCH SYSTEM METRIC COLUMN: "slots value" lines sorted by slots
# (COLUMN 5 = median, 6 = floor).
series() {
	awk -F '\t' -v b="$1" -v s="$2" -v m="$3" -v c="$4" \
		'$1 == b && $2 == s && $4 == m && $c != "-" { print $3, $c }' "$OUT/all.tsv" | sort -n
}
series e2e "lessee + lessor (normal)" runs_per_s 5 >"$OUT/runs_lessee.dat"
series e2e "lessee + lessor (normal)" runs_per_s 6 >"$OUT/runs_floor.dat"
series e2e "lessee + lessor (normal)" cpu_us_per_run 5 >"$OUT/cpu_lessee.dat"
for p in "conductor_peers|lessee, conductor driver|cond_lessee" \
	"conductor_peers|Conductor official JS client|cond_sdk" \
	"camunda7_peers|lessee, camunda7 driver|c7_lessee" \
	"camunda7_peers|Camunda 7 official JS client|c7_sdk" \
	"graphile_peers|graphile-worker on PostgreSQL|graphile"; do
	b=${p%%|*} rest=${p#*|}
	s=${rest%%|*} f=${rest#*|}
	series "$b" "$s" runs_per_s 5 >"$OUT/runs_$f.dat"
	series "$b" "$s" cpu_us_per_run 5 >"$OUT/cpu_$f.dat"
done
series latency "lessee + lessor (full)" rss_kib 5 >"$OUT/rss.dat"
series latency "lessee + lessor (full)" rss_anon_kib 5 >"$OUT/rss_anon.dat"
for c in posix_spawn io_uring epoll; do
	series spawn_scale "$c" start_us 5 >"$OUT/spawn_$c.dat"
done

command -v gnuplot >/dev/null || die "gnuplot is missing (scripts/deps.sh bench)"
for term in png svg; do
	if [ $term = png ]; then
		t="pngcairo size 800,500 font 'sans,10'"
	else
		t="svg size 800,500 font 'sans,10' background rgb 'white'"
	fi
	gnuplot <<EOF
set terminal $t
set datafile missing '-'
set key outside right top
set grid
set logscale x 2
set xlabel 'slots (concurrent runs)'
set xtics (1, 2, 4, 8, 16, 32, 64)
set xrange [0.8:80]
set output '$PLOTS/runs_per_s.$term'
set title '/bin/true runs per second against slots ($mode set)'
set ylabel 'runs/s (median)'
set logscale y
plot '$OUT/runs_floor.dat' w lp dt 2 lw 2 t 'posix\\_spawn floor', \
     '$OUT/runs_lessee.dat' w lp lw 2 t 'lessee + lessor (normal)', \
     '$OUT/runs_cond_lessee.dat' w lp t 'lessee, Conductor driver', \
     '$OUT/runs_cond_sdk.dat' w lp t 'Conductor JS client', \
     '$OUT/runs_c7_lessee.dat' w lp t 'lessee, Camunda 7 driver', \
     '$OUT/runs_c7_sdk.dat' w lp t 'Camunda 7 JS client', \
     '$OUT/runs_graphile.dat' w lp t 'graphile-worker'
set output '$PLOTS/cpu_per_run.$term'
set title 'worker CPU per run (user + system, the commands excluded; $mode set)'
set ylabel 'µs per run (median)'
plot '$OUT/cpu_lessee.dat' w lp lw 2 t 'lessee + lessor (normal)', \
     '$OUT/cpu_cond_lessee.dat' w lp t 'lessee, Conductor driver', \
     '$OUT/cpu_cond_sdk.dat' w lp t 'Conductor JS client', \
     '$OUT/cpu_c7_lessee.dat' w lp t 'lessee, Camunda 7 driver', \
     '$OUT/cpu_c7_sdk.dat' w lp t 'Camunda 7 JS client', \
     '$OUT/cpu_graphile.dat' w lp t 'graphile-worker'
unset logscale
set xtics autofreq
set autoscale x
set yrange [0:*]
set output '$PLOTS/rss.$term'
set title 'lessee memory against sleeping runs alive ($mode set)'
set xlabel 'runs alive'
set ylabel 'MiB'
plot '$OUT/rss.dat' u 1:(\$2/1024) w lp lw 2 t 'VmRSS', \
     '$OUT/rss_anon.dat' u 1:(\$2/1024) w lp lw 2 t 'RssAnon'
set output '$PLOTS/spawn_scale.$term'
set title 'starting N children that stay alive: time per start ($mode set)'
set xlabel 'N children alive'
set ylabel 'µs per start (median)'
set logscale x 10
plot '$OUT/spawn_posix_spawn.dat' w lp dt 2 lw 2 t 'posix\\_spawn floor', \
     '$OUT/spawn_io_uring.dat' w lp t 'lib/exec, io\\_uring', \
     '$OUT/spawn_epoll.dat' w lp t 'lib/exec, epoll'
unset logscale
set output '$PLOTS/latency_cdf.$term'
set title 'enqueue -> child start, one run at a time ($mode set)'
set xlabel 'ms'
set ylabel 'fraction of runs started'
set yrange [0:1]
set logscale x 10
set xtics autofreq
plot '$OUT/latency.cdf' index 0 w steps dt 2 lw 2 t 'posix\\_spawn floor', \
     '' index 1 w steps lw 2 t 'lessee + lessor (full)'
EOF
done

render "$OUT" "$DOC"
echo "bench-report: $OUT/all.tsv, $PLOTS/*.png|svg, $DOC" >&2
