#!/bin/sh
# Install the Debian 12 packages a target needs, when they are missing.
# As root: apt-get installs them.  Otherwise: print the exact command and fail.
# Usage: scripts/deps.sh build|test|systemd|fuzz ...
set -eu

pkgs_build="gcc make pkg-config libc6-dev libcurl4-openssl-dev liburing-dev libcjson-dev
	libsystemd-dev libmicrohttpd-dev libsqlite3-dev check libseccomp-dev libyaml-dev"
pkgs_test="valgrind nginx-light openssl iproute2 util-linux procps curl ca-certificates
	man-db groff-base binutils"
pkgs_systemd="systemd-container debootstrap"
pkgs_fuzz="clang libclang-rt-14-dev"

want=""
for group in "$@"; do
	case "$group" in
	build) want="$want $pkgs_build" ;;
	test) want="$want $pkgs_build $pkgs_test" ;;
	systemd) want="$want $pkgs_systemd" ;;
	fuzz) want="$want $pkgs_fuzz" ;;
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
