#!/bin/sh
# make check-deb, inside the container: PID 1 is systemd and this runs as
# lessee-test.service (its drop-in lessee-test-deb.conf).  The .deb that make
# deb built is installed with dpkg, then lessor and lessee run from it as the
# package's services, lessee working runs lessor gives it; then the package is
# removed and purged.  Results: TAP in /results/results.tap, the journal in
# /results/journal.txt (as tests/systemd/suite.sh).
set -u

R=/results
TAP=$R/results.tap
T=/opt/lessee-test
DEB=/opt/lessee-deb/lessee.deb
U=lessee.service
export LESSOR_URL=http://127.0.0.1:8080 LESSOR_ADMIN_TOKEN_FILE=/var/lib/lessor/admin-token
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0 PATH=/usr/sbin:/usr/bin:/sbin:/bin

date +%s.%N >$R/t_start

WHY=/run/lessee-test.why
fail() { printf '%s\n' "$*" >>"$WHY"; return 1; }
note() { printf 'note: %s\n' "$*" >>"$WHY"; }
prop() { systemctl show -p "$1" --value "${2:-$U}"; }
wait_until() { # SECONDS COMMAND...: poll every 0.1 s until COMMAND succeeds
	_ticks=$(($1 * 10))
	shift
	until "$@" >/dev/null 2>&1; do
		_ticks=$((_ticks - 1))
		[ "$_ticks" -gt 0 ] || return 1
		sleep 0.1
	done
}
run_field() { lessor show "$1" | sed -n "s/^$2: *//p"; }
run_is() { [ "$(run_field "$1" status)" = "$2" ]; }

n=0
failed=0
check() { # NAME FUNCTION: one case, one TAP line
	n=$((n + 1))
	: >"$WHY"
	t0=$(date +%s.%N)
	if "$2"; then res=ok; else res="not ok"; fi
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	echo "$res $n - $1 (${secs}s)" | tee -a "$TAP"
	if [ "$res" != ok ]; then
		failed=$((failed + 1))
		[ -s "$WHY" ] || echo "(no reason recorded)" >>"$WHY"
		{
			echo "journal of lessor.service and $U during the case:"
			journalctl -q --no-pager -o short-monotonic -u lessor.service -u "$U" \
				--since "@${t0%.*}" | tail -n 25
		} >>"$WHY"
	fi
	sed 's/^/# /' "$WHY" | tee -a "$TAP"
}

# ---- the cases

# dpkg -i with only what the rootfs has: the package's dependencies are there.
# Daemons in /usr/sbin, units in systemd's directory, the user made by the
# postinst (systemd-sysusers), /etc/lessee by systemd-tmpfiles, nothing enabled.
case_install() {
	out=$(dpkg -i "$DEB" 2>&1) || fail "dpkg -i: $out" || return
	for f in /usr/sbin/lessee /usr/sbin/lessor; do
		[ -x "$f" ] || fail "no $f" || return
	done
	for u in lessee.service lessee@.service lessor.service; do
		[ -f "/lib/systemd/system/$u" ] || fail "no /lib/systemd/system/$u" || return
		out=$(systemd-analyze verify --man=no "/lib/systemd/system/$u" 2>&1) && [ -z "$out" ] ||
			fail "systemd-analyze verify $u: $out" || return
	done
	getent passwd lessee | grep -q '^lessee:x:[0-9]*:[0-9]*:[^:]*:/var/lib/lessee:' ||
		fail "the postinst made no lessee user: $(getent passwd lessee)" || return
	[ "$(stat -c '%a %U' /etc/lessee)" = "755 root" ] || fail "/etc/lessee: $(stat -c '%a %U' /etc/lessee)" || return
	for u in lessee.service lessor.service; do
		st=$(systemctl is-enabled "$u" 2>&1)
		[ "$st" = disabled ] || fail "$u is $st after install" || return
		! systemctl is-active -q "$u" || fail "$u started by the install" || return
	done
	[ -r /usr/share/doc/lessee/operations.md ] || fail "no /usr/share/doc/lessee/operations.md" || return
	note "$(dpkg-query -W -f='${Package} ${Version} ${Installed-Size} KiB' lessee)"
}

# The shipped configuration runs nothing: with the API's URL and its token
# (/etc/lessee/api-token, the unit's LoadCredential=, made by case_lessor) the
# unit still refuses to start (exit 78, not restarted) until a workflow is
# configured.
case_unconfigured() {
	printf '[api]\nurl = http://127.0.0.1:8080\n' >/etc/lessee/lessee.conf.d/10-url.conf 2>/dev/null ||
		{ mkdir -p /etc/lessee/lessee.conf.d && printf '[api]\nurl = http://127.0.0.1:8080\n' \
			>/etc/lessee/lessee.conf.d/10-url.conf; }
	out=$(lessee --check-config 2>&1)
	[ $? -eq 78 ] || fail "lessee --check-config with the shipped file: $out" || return
	echo "$out" | grep -q 'no \[workflow' || fail "no reason given: $out" || return
	! timeout 30 systemctl start "$U" 2>/dev/null || fail "lessee.service started unconfigured" || return
	[ "$(prop ExecMainStatus)" = 78 ] || fail "ExecMainStatus=$(prop ExecMainStatus)" || return
	rm -f /etc/lessee/lessee.conf.d/10-url.conf
	systemctl reset-failed "$U"
}

# lessor.service from the package: its first start makes the token files; a
# worker token is added the documented way (a line, systemctl reload).
case_lessor() {
	timeout 30 systemctl start lessor.service ||
		fail "lessor.service: $(systemctl status lessor.service --no-pager 2>&1 | tail -n 5)" || return
	wait_until 10 lessor stats || fail "lessor does not answer on $LESSOR_URL" || return
	[ -s /var/lib/lessor/admin-token ] || fail "no admin token made" || return
	token=$(od -An -N24 -tx1 /dev/urandom | tr -dc 0-9a-f)
	printf 'deb-worker %s\n' "$token" >>/var/lib/lessor/worker-tokens &&
		timeout 30 systemctl reload lessor.service || fail "systemctl reload lessor failed" || return
	wait_until 10 lessor_reloaded || fail "lessor did not reload its tokens" || return
	(umask 077 && echo "$token" >/etc/lessee/api-token)
}
lessor_reloaded() {
	journalctl -q --no-pager -u lessor.service -o cat | grep -q 'reloaded the tokens: 1 worker'
}

# lessee.service from the package, configured by a drop-in (the API, the
# test's workflows): start waits for READY=1, runs lessor gives it succeed
# under the worker token's name, in a run directory on disk.
case_lessee() {
	install -D -m 0644 "$T/test-lessee.conf" /etc/lessee/lessee.conf.d/50-test.conf ||
		fail "cannot install the drop-in" || return
	timeout 30 systemctl start "$U" || fail "systemctl start $U: Result=$(prop Result)" || return
	[ "$(prop ActiveState)/$(prop SubState)" = active/running ] ||
		fail "after start: $(prop ActiveState)/$(prop SubState)" || return
	id=$(lessor enqueue --workflow sleep --input 3) || fail "lessor enqueue failed" || return
	wait_until 10 run_is "$id" running || fail "run $id: $(run_field "$id" status)" || return
	wait_until 5 run_dir_there || fail "no run directory under /var/cache/lessee/runs: $(ls -lR /var/cache/lessee 2>&1)" || return
	fs=$(stat -f -c %T /var/cache/lessee/runs)
	[ "$fs" != tmpfs ] || fail "the run directory is on a tmpfs" || return
	note "run directory $(ls -d /var/cache/lessee/runs/lessee-*/*) on $fs"
	wait_until 20 run_is "$id" succeeded || fail "run $id: $(run_field "$id" status)" || return
	lessor show "$id" | grep -q 'deb-worker' || fail "not claimed as deb-worker: $(lessor show "$id")" || return
	timeout 70 systemctl stop "$U" || fail "stop failed" || return
	[ "$(prop Result)" = success ] || fail "Result=$(prop Result) after stop"
}
run_dir_there() { ls -d /var/cache/lessee/runs/lessee-*/* >/dev/null 2>&1; }

# dpkg -r leaves the configuration (a conffile), dpkg -P takes it too.
case_remove() {
	systemctl stop lessor.service
	out=$(dpkg -r lessee 2>&1) || fail "dpkg -r: $out" || return
	[ ! -e /usr/sbin/lessee ] && [ ! -e /lib/systemd/system/lessee.service ] ||
		fail "dpkg -r left the daemon or its unit" || return
	[ -f /etc/lessee/lessee.conf ] || fail "dpkg -r removed the configuration" || return
	out=$(dpkg -P lessee 2>&1) || fail "dpkg -P: $out" || return
	[ ! -e /etc/lessee/lessee.conf ] || fail "dpkg -P left /etc/lessee/lessee.conf" || return
	! dpkg-query -W lessee >/dev/null 2>&1 || fail "still known to dpkg: $(dpkg-query -W lessee)"
}

echo "1..$(grep -c '^check ' "$0")" >"$TAP"
check "dpkg -i: daemons in /usr/sbin, units verify, user and /etc/lessee made, nothing enabled" case_install
check "lessor.service from the package: token files made at first start, reload" case_lessor
check "the shipped lessee.conf runs nothing: exit 78, the unit does not start" case_unconfigured
check "lessee.service from the package: READY, a run succeeds, run directory on disk" case_lessee
check "dpkg -r keeps the configuration, dpkg -P removes it" case_remove

journalctl -b --no-pager -o short-monotonic >$R/journal.txt 2>&1
date +%s.%N >$R/t_end
rc=0
[ "$failed" -eq 0 ] || rc=1
systemctl --no-block exit "$rc"
exit "$rc"
