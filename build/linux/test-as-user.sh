#!/usr/bin/env bash
# test-as-user.sh USER PKG... -- run the tagged (e2e) Go tests of PKG... as the ordinary user USER,
# as people run Airlock: a fresh home and runtime folder of USER's own, folders USER owns, no root.
# make runs it as root (make test-user); the tests then take the paths a user's Airlock takes (the
# share served as the user with security_model=none, the task user being the user's uid, virtiofs
# refused) instead of root's.
#
# The user's go reads the module cache root filled (it must be readable by USER: .ci/run puts it
# in /var/cache/airlock-ci/gomod) and never downloads; its build cache is its own. Everything else
# the tests need comes in through the environment make passes: AIRLOCK_E2E_BIN, AIRLOCK_IMAGE_DIR,
# AIRLOCK_REQUIRE_ARM64_STANDARD, TIMEOUT, PARALLEL.
set -euo pipefail
user=${1:?usage: test-as-user.sh USER PKG...}
shift
[ "$(id -u)" = 0 ] || { echo "test-as-user.sh: must run as root (it switches to $user)" >&2; exit 2; }
id -u "$user" >/dev/null 2>&1 || { echo "test-as-user.sh: no user $user (useradd --create-home $user)" >&2; exit 2; }
[ "$(id -u "$user")" != 0 ] || { echo "test-as-user.sh: $user is root; name an ordinary user" >&2; exit 2; }

go=$(command -v go)
modcache=$(go env GOMODCACHE)
if ! runuser -u "$user" -- test -r "$modcache/cache/download" -a -x "$modcache"; then
	echo "test-as-user.sh: $user cannot read the module cache $modcache; export GOMODCACHE=/var/cache/airlock-ci/gomod (as .ci/run does) and run make again" >&2
	exit 2
fi
# Every path the tests read must be open to the user: the checkout, the binary, the images.
for p in "$PWD" "${AIRLOCK_E2E_BIN:?}" "${AIRLOCK_IMAGE_DIR:?}"; do
	runuser -u "$user" -- test -r "$p" || { echo "test-as-user.sh: $user cannot read $p" >&2; exit 2; }
done

home=$(mktemp -d /tmp/airlock-user-home.XXXXXX)
chown "$user:" "$home"
chmod 0700 "$home"
run=$home/run
install -d -o "$user" -m 0700 "$run"
trap 'rm -rf "$home"' EXIT

echo "as $user (uid $(id -u "$user")), home $home: go test ${*}"
runuser -u "$user" -- env -i \
	HOME="$home" USER="$user" LOGNAME="$user" PATH="$(dirname "$go"):/usr/local/bin:/usr/bin:/bin" \
	XDG_RUNTIME_DIR="$run" TMPDIR=/tmp LANG=C.UTF-8 \
	GOMODCACHE="$modcache" GOPROXY=off GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local GOTELEMETRY=off \
	AIRLOCK_E2E_BIN="$AIRLOCK_E2E_BIN" AIRLOCK_IMAGE_DIR="$AIRLOCK_IMAGE_DIR" \
	AIRLOCK_REQUIRE_ARM64_STANDARD="${AIRLOCK_REQUIRE_ARM64_STANDARD:-}" \
	go test -count=1 -p 1 -tags e2e -timeout "${TIMEOUT:-40m}" -parallel "${PARALLEL:-4}" -v "$@"
