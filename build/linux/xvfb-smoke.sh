#!/bin/sh
# xvfb-smoke.sh: run the Linux desktop build under Xvfb long enough to show
# its window, take a screenshot and check it is not blank, check it booted
# its VM (a QEMU among its descendants), then quit it with SIGTERM (twice:
# it must quit once and cleanly, as the tray's Quit does) and check it left
# no VM behind.
#
#   build/linux/xvfb-smoke.sh <airlock-desktop> <screenshot.png>
#
# Runs from the repository root so the app finds images/out/<arch>; its
# settings, state and control socket live in a temporary home, with a
# workspace chosen there, so the VM boots. Needs Xvfb, xwininfo (x11-utils)
# and ImageMagick's import and identify.
# The first paint of WebKitGTK in Xvfb (software rendering) can take over
# ten seconds on a busy machine: screenshots are retaken until one has more
# than SMOKE_MIN_COLOURS colours (default 16), for SMOKE_TIMEOUT seconds
# (default 90), and not before SMOKE_WAIT seconds (default 8).
set -eu

bin=$(realpath "${1:?usage: xvfb-smoke.sh <airlock-desktop> <screenshot.png>}")
shot=${2:?usage: xvfb-smoke.sh <airlock-desktop> <screenshot.png>}
wait_s=${SMOKE_WAIT:-8}
timeout_s=${SMOKE_TIMEOUT:-90}
min_colours=${SMOKE_MIN_COLOURS:-16}

for tool in Xvfb xwininfo import identify; do
	command -v $tool >/dev/null || { echo "xvfb-smoke: $tool not found (apt: xvfb x11-utils imagemagick)" >&2; exit 2; }
done

tmp=$(mktemp -d)
xvfb_pid= app_pid=
cleanup() {
	[ -n "$app_pid" ] && kill -KILL "$app_pid" 2>/dev/null || true
	[ -n "$xvfb_pid" ] && kill "$xvfb_pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# Xvfb picks a free display and writes its number on fd 3.
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$tmp/display" 2>"$tmp/xvfb.log" &
xvfb_pid=$!
for _ in $(seq 50); do [ -s "$tmp/display" ] && break; sleep 0.1; done
[ -s "$tmp/display" ] || { echo "xvfb-smoke: Xvfb did not start" >&2; cat "$tmp/xvfb.log" >&2; exit 1; }
export DISPLAY=":$(cat "$tmp/display")"

mkdir -p "$tmp/home/work" "$tmp/config/airlock" "$tmp/run"
chmod 700 "$tmp/run"
printf '{"workspace": "%s"}\n' "$tmp/home/work" >"$tmp/config/airlock/settings.json"
echo "hello from the smoke test" >"$tmp/home/work/hello.txt"
[ "$(id -u)" = 0 ] && chown -R 1000:1000 "$tmp/home/work"

env HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/config" XDG_STATE_HOME="$tmp/state" \
	XDG_CACHE_HOME="$tmp/cache" XDG_RUNTIME_DIR="$tmp/run" \
	"$bin" >"$tmp/app.log" 2>&1 &
app_pid=$!

# The window is mapped once GTK and WebKit are up.
shown=
for _ in $(seq 100); do
	if xwininfo -root -tree 2>/dev/null | grep -q '"Airlock"'; then shown=1; break; fi
	kill -0 "$app_pid" 2>/dev/null || break
	sleep 0.2
done
[ -n "$shown" ] || { echo "xvfb-smoke: no Airlock window" >&2; cat "$tmp/app.log" >&2; exit 1; }
sleep "$wait_s"

mkdir -p "$(dirname "$shot")"
deadline=$(( $(date +%s) + timeout_s ))
while :; do
	kill -0 "$app_pid" 2>/dev/null || { echo "xvfb-smoke: the app exited" >&2; cat "$tmp/app.log" >&2; exit 1; }
	import -display "$DISPLAY" -window root "$shot"
	colours=$(identify -format '%k' "$shot")
	[ "$colours" -gt "$min_colours" ] && break
	if [ "$(date +%s)" -ge "$deadline" ]; then
		echo "xvfb-smoke: the window stayed blank for ${timeout_s} s ($colours colours in $shot)" >&2
		cat "$tmp/app.log" >&2
		exit 1
	fi
	sleep 2
done
# The VM and its helpers (QEMU, virtiofsd) are the app's descendants (their
# command lines name no path under $tmp: QEMU gets its files as fds).
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
vms=
for _ in $(seq 300); do
	vms=$(descendants "$app_pid")
	for p in $vms; do case $(cat /proc/$p/comm 2>/dev/null) in qemu-system-*) break 2;; esac; done
	kill -0 "$app_pid" 2>/dev/null || { echo "xvfb-smoke: the app exited" >&2; cat "$tmp/app.log" >&2; exit 1; }
	sleep 0.2
done
vms=$(for p in $vms; do case $(cat /proc/$p/comm 2>/dev/null) in qemu-system-*|virtiofsd) echo "$p";; esac; done)
[ -n "$vms" ] || { echo "xvfb-smoke: the app started no VM within 60 s" >&2; cat "$tmp/app.log" >&2; exit 1; }
echo "xvfb-smoke: window shown; screenshot $shot has $colours colours; VM processes:" \
	$(for p in $vms; do echo "$p ($(cat /proc/$p/comm 2>/dev/null))"; done)

# Quit: the app stops its VM and exits.
start=$(date +%s)
kill -TERM "$app_pid"
# A second SIGTERM (an impatient user, a session manager) must not quit twice.
sleep 0.1; kill -TERM "$app_pid" 2>/dev/null || true
for _ in $(seq 300); do kill -0 "$app_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$app_pid" 2>/dev/null; then
	echo "xvfb-smoke: the app did not quit within 30 s" >&2; cat "$tmp/app.log" >&2; exit 1
fi
wait "$app_pid" && rc=0 || rc=$?
app_pid=
echo "xvfb-smoke: quit in $(( $(date +%s) - start )) s, exit status $rc"
for vm in $vms; do
	# A zombie has ended (its new parent has not reaped it yet).
	if kill -0 "$vm" 2>/dev/null && ! grep -q '^State:.*Z' /proc/$vm/status 2>/dev/null; then echo "xvfb-smoke: VM process $vm left running" >&2; exit 1; fi
done
[ "$rc" = 0 ] || { echo "xvfb-smoke: exit status $rc" >&2; cat "$tmp/app.log" >&2; exit 1; }
