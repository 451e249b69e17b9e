#!/bin/sh
# make check-systemd: lessee under a real systemd, booted as PID 1 in a
# systemd-nspawn container, driven through systemctl inside it (docs/systemd.md).
#
#   BUILD=build/default STAGE=<make install DESTDIR> tests/systemd/run.sh
#   BUILD=build/default DEB=<the .deb of make deb> tests/systemd/run.sh
#
# With DEB (make check-deb) the container gets the package instead of the
# staged tree, at /opt/lessee-deb/lessee.deb, and runs deb-suite.sh (dpkg -i,
# lessor and lessee as the package's services, dpkg -r/-P) instead of suite.sh.
#
# The rootfs (debootstrap minbase bookworm) is cached under $LESSEE_ROOTFS_CACHE
# (default /var/cache/lessee-test-rootfs), keyed by suite and package list.
# The container sees the staged `make install` tree read-only at /usr/local (and
# whole at /opt/lessee-stage), this directory at /opt/lessee-test, and writes
# its results, console and journal to $BUILD/check-systemd/; tests/aux/snoop,
# built here against libc alone, is at /opt/lessee-aux.
# Needs root.  Exit status: 0 every case passed, 1 otherwise.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-build/default}
DEB=${DEB:-}
[ -n "$DEB" ] || STAGE=${STAGE:?STAGE must name a make install DESTDIR (use make check-systemd)}
cache=${LESSEE_ROOTFS_CACHE:-/var/cache/lessee-test-rootfs}
case "$BUILD" in /*) out=$BUILD/check-systemd ;; *) out=$top/$BUILD/check-systemd ;; esac
aux=$out/aux # tests/aux/snoop, for the secrets case, against libc only
suite=bookworm
# lessee's and lessor's runtime libraries, systemd itself, and the tools the
# cases use (procps: /bin/kill of ExecReload=; curl: the status endpoint).
pkgs="systemd systemd-sysv dbus libcurl4 liburing2 libcjson1 libmicrohttpd12 libsqlite3-0 libpq5
	libsystemd0 ca-certificates procps curl"
machine=lessee-test-$$
boot_limit=300 # seconds for the whole container run; the cases have their own

die() {
	echo "check-systemd: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (systemd-nspawn, debootstrap)"
for p in "${STAGE:-}" "$DEB" "$here" "$out"; do
	case "$p" in *:*) die "path '$p' contains ':' (systemd-nspawn --bind cannot take it)" ;; esac
done
if [ -n "$DEB" ]; then
	[ -f "$DEB" ] || die "no package $DEB (use make check-deb)"
	DEB=$(cd "$(dirname "$DEB")" && pwd)/$(basename "$DEB")
	out=$out-deb
	# the package, and lessee-test.service running deb-suite.sh
	binds="--bind-ro=$DEB:/opt/lessee-deb/lessee.deb
		--bind-ro=$here/lessee-test-deb.conf:/etc/systemd/system/lessee-test.service.d/deb.conf"
else
	[ -x "$STAGE/usr/local/sbin/lessee" ] && [ -x "$STAGE/usr/local/sbin/lessor" ] ||
		die "$STAGE holds no make install tree"
	binds="--bind-ro=$STAGE/usr/local:/usr/local --bind-ro=$STAGE:/opt/lessee-stage"
fi

# The Debian mirror this machine's apt uses, for bookworm (not -security).
debian_mirror() {
	{
		cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '$1 == "deb" { sub(/\[[^]]*\] */, ""); if ($3 == "'$suite'") print $2 }'
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -e "$f" ] || continue
			awk 'BEGIN { RS = ""; FS = "\n" }
			{
				types = uris = suites = ""; enabled = "yes"
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^Types:/) types = " " substr($i, 7) " "
					else if ($i ~ /^URIs:/) uris = substr($i, 6)
					else if ($i ~ /^Suites:/) suites = " " substr($i, 8) " "
					else if ($i ~ /^Enabled:/) enabled = substr($i, 9)
				}
				gsub(/[ \t]+/, " ", suites); gsub(/[ \t]+/, " ", types)
				if (enabled ~ /no/ || types !~ / deb / || suites !~ / '$suite' /) next
				split(uris, u, " "); for (k in u) if (u[k] != "") { print u[k]; break }
			}' "$f"
		done
	} | head -n 1
}

# Prints the cached rootfs for $suite + $pkgs, building it on first use.  One
# rootfs is kept; the downloaded packages are kept too, for the next build.
rootfs() {
	key=$(printf '%s\n' "minbase $suite" $pkgs | sha256sum | cut -c1-16)
	dir=$cache/rootfs-$suite-$key
	if [ ! -e "$dir/ok" ]; then
		mirror=${LESSEE_DEBIAN_MIRROR:-$(debian_mirror)}
		mirror=${mirror:-http://deb.debian.org/debian}
		echo "check-systemd: building the $suite rootfs from $mirror (once; cached in $dir)" >&2
		rm -rf "$cache"/rootfs-*
		mkdir -p "$cache/debs" "$dir.tmp"
		t0=$(date +%s)
		debootstrap --variant=minbase --cache-dir="$cache/debs" \
			--include="$(echo $pkgs | tr ' ' ',')" \
			"$suite" "$dir.tmp/root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
			die "debootstrap failed, see $cache/debootstrap.log"
		rm -rf "$dir".tmp/root/var/cache/apt/archives/*.deb "$dir".tmp/root/var/lib/apt/lists/*
		: >"$dir.tmp/ok"
		mv "$dir.tmp" "$dir"
		echo "check-systemd: rootfs built in $(($(date +%s) - t0)) s" >&2
	fi
	echo "$dir/root"
}

# systemd-nspawn --keep-unit outside a systemd host leaves empty payload/ and
# supervisor/ cgroups in its own cgroup (v2 and name=systemd hierarchies), and
# its lock and propagation directories in /run/systemd/nspawn.
nspawn_cgroups() {
	while IFS=: read -r id ctl path; do
		case "$id:$ctl" in
		0:)
			for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do
				[ -e "$m/cgroup.controllers" ] && { echo "$m${path%/}"; break; }
			done
			;;
		*:name=systemd) echo "/sys/fs/cgroup/systemd${path%/}" ;;
		esac
	done </proc/self/cgroup
}

cleanup_nspawn() {
	for cg in $(nspawn_cgroups); do
		for d in "$cg/payload" "$cg/supervisor"; do
			[ ! -d "$d" ] || find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done
	done
	p=/run/systemd/nspawn/propagate/$machine
	if [ -d "$p" ] && ! grep -q " $p" /proc/self/mountinfo; then
		rm -rf --one-file-system "$p"
	fi
	rmdir /run/systemd/nspawn/propagate /run/systemd/nspawn/locks /run/systemd/nspawn 2>/dev/null || true
}

mkdir -p "$cache"
# One run at a time: the cache is built once, and nspawn's cgroups are shared.
exec 9>"$cache/.lock"
flock 9
root=$(rootfs)

rm -rf "$out"
mkdir -p "$out/results" "$aux"
version=$(sed -n 's/^VERSION *:= *//p' "$top/Makefile")
${CC:-cc} -std=gnu11 -D_GNU_SOURCE -DLESSEE_VERSION="\"$version\"" -O2 -o "$aux/snoop" \
	"$top/tests/aux/snoop.c" || die "cannot build snoop"
trap cleanup_nspawn EXIT
trap 'exit 130' INT TERM
cleanup_nspawn # a killed earlier run

start=$(date +%s.%N)
rc=0
timeout -k 10 $boot_limit systemd-nspawn -q -D "$root" -M "$machine" \
	--volatile=overlay --register=no --keep-unit --private-network --console=pipe \
	$binds \
	--bind-ro="$here:/opt/lessee-test" --bind-ro="$aux:/opt/lessee-aux" \
	--bind-ro="$here/lessee-test.service:/etc/systemd/system/lessee-test.service" \
	--bind="$out/results:/results" \
	-b systemd.wants=lessee-test.service >"$out/console.log" 2>&1 || rc=$?
end=$(date +%s.%N)

tap=$out/results/results.tap
[ -s "$tap" ] || die "no results (container exit status $rc); see $out/console.log"
# TAP in, PASS/FAIL out; the diagnostics of a failed case follow it.
bad=0
awk '
	/^1\.\./ { plan = substr($0, 4) }
	/^ok / { sub(/^ok [0-9]+ - /, ""); printf "PASS  %s\n", $0; n++; failing = 0 }
	/^not ok / { sub(/^not ok [0-9]+ - /, ""); printf "FAIL  %s\n", $0; n++; bad++; failing = 1 }
	/^#/ { if (failing || /^# note: /) printf "      %s\n", substr($0, 3) }
	END {
		if (plan == "" || n != plan + 0) { printf "FAIL  only %d of %d cases ran\n", n, plan; bad++ }
		exit (bad > 0)
	}' "$tap" || bad=1

# Figures: boot = nspawn start to the first case; cases; shutdown.
if [ -s "$out/results/t_start" ] && [ -s "$out/results/t_end" ]; then
	awk -v s="$start" -v f="$(cat "$out/results/t_start")" -v l="$(cat "$out/results/t_end")" \
		-v e="$end" 'BEGIN {
		printf "check-systemd: boot %.2f s, cases %.1f s, shutdown %.2f s, total %.1f s\n",
			f - s, l - f, e - l, e - s }'
fi
if [ "$rc" -ne 0 ] || [ "$bad" -ne 0 ]; then
	echo "check-systemd: FAILED (container exit status $rc); console $out/console.log," \
		"journal $out/results/journal.txt" >&2
	exit 1
fi
echo "check-systemd: all cases passed"
