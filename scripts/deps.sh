#!/bin/sh
# Install the Debian 12 packages a target needs, when they are missing.
# As root: apt-get installs them.  Otherwise: print the exact command and fail.
# Usage: scripts/deps.sh build|test|systemd|deb|fuzz|bench ...
# Only make deps, check, demo, bench, bench-report, chaos, check-systemd and deb call it:
# make, make build and make install never install packages.
set -eu

pkgs_build="gcc make pkg-config libc6-dev libcurl4-openssl-dev liburing-dev libcjson-dev
	libsystemd-dev libmicrohttpd-dev libsqlite3-dev libpq-dev check libseccomp-dev libyaml-dev"
pkgs_test="valgrind nginx-light openssl iproute2 util-linux procps curl ca-certificates
	man-db groff-base binutils chromium prometheus postgresql
	libfuse3-dev fuse3 strace"
# Node.js and npm (the browser test's playwright-core) from Debian, unless the
# machine already has a node with its own npm (a nodejs build that bundles npm
# conflicts with Debian's npm package).
pkgs_node="nodejs npm"
pkgs_systemd="systemd-container debootstrap"
# make deb: dpkg-buildpackage with debhelper (debian/control's Build-Depends
# are pkgs_build), and lintian to judge the result.
pkgs_deb="debhelper dpkg-dev fakeroot lintian"
pkgs_fuzz="clang libclang-rt-14-dev"
# make bench-report: gnuplot draws docs/performance/*.{png,svg}.
pkgs_bench="gnuplot-nox"

want=""
for group in "$@"; do
	case "$group" in
	build) want="$want $pkgs_build" ;;
	test)
		want="$want $pkgs_build $pkgs_test"
		command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
			want="$want $pkgs_node"
		;;
	systemd) want="$want $pkgs_systemd" ;;
	deb) want="$want $pkgs_deb" ;;
	fuzz) want="$want $pkgs_fuzz" ;;
	bench) want="$want $pkgs_bench" ;;
	*) echo "deps.sh: unknown group '$group'" >&2; exit 2 ;;
	esac
done

missing=""
for p in $want; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
	echo "Missing Debian packages:$missing" >&2
	echo "Install them as root with:" >&2
	echo "  apt-get update && $cmd" >&2
	exit 1
fi
echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have empty package lists; update only when needed.
if ! apt-get install -y --no-install-recommends $missing >/dev/null 2>&1; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends $missing
fi
