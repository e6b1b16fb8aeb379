#!/bin/sh
# Let an amd64 Linux host run arm64 programs, so the image builder can debootstrap the arm64
# standard image (its second stage runs arm64 dpkg and maintainer scripts in a chroot):
# qemu-user-static's qemu-aarch64 entry in binfmt_misc, enabled, with the F flag (the emulator
# is opened at registration, so it works inside a chroot that lacks it). Run as root after
# apt-get install qemu-user-static binfmt-support; make deps and .ci/run call it. Idempotent.
set -eu
d=/proc/sys/fs/binfmt_misc
[ "$(uname -m)" = aarch64 ] && exit 0
if [ ! -e "$d/status" ]; then
	echo "mounting binfmt_misc on $d"
	mount -t binfmt_misc binfmt_misc "$d"
fi
[ "$(cat "$d/status")" = enabled ] || echo 1 > "$d/status"
update-binfmts --enable qemu-aarch64 2>/dev/null || update-binfmts --import qemu-aarch64
# registered but switched off in the kernel (echo 0 > the entry): update-binfmts calls it enabled
if [ -e "$d/qemu-aarch64" ] && ! grep -q '^enabled' "$d/qemu-aarch64"; then echo 1 > "$d/qemu-aarch64"; fi
if ! grep -q '^enabled' "$d/qemu-aarch64" 2>/dev/null || ! grep -q '^flags: .*F' "$d/qemu-aarch64"; then
	echo "arm64 emulation: $d/qemu-aarch64 is not enabled with the F flag (apt-get install qemu-user-static binfmt-support)" >&2
	exit 1
fi
