#!/bin/sh
# post-build.sh: finish a macOS build of Airlock.app after `wails build`.
#
#   build/darwin/post-build.sh <Airlock.app | Airlock.app/Contents/MacOS/Airlock> [image-dir]
#
# 1. Copies the airlock command (AIRLOCK_HELPER_BIN, default bin/airlock,
#    built on the Mac with cgo: `make airlock`) to
#    Contents/Helpers/airlock. The app runs its VM there (`airlock serve`,
#    app/desktop/helper.go): the app itself cannot link Apple's
#    Virtualization framework beside Wails (vm/platform/withvz). Not in
#    Contents/MacOS: the Mac's disk ignores case, and "airlock" there is
#    the app's "Airlock". Apple lists Contents/Helpers for helper tools
#    (TN2206, nested code); Wails writes only Contents/MacOS and
#    Contents/Resources.
# 2. Copies the guest image (images/out/<arch>/: Image or vmlinux,
#    initramfs.cpio, manifest.json) into Contents/Resources/images/<arch>/,
#    where the helper finds it (sandbox.ImageSearchPathFor:
#    ../Resources/images from its folder).
# 3. Signs from the inside out (no --deep, which gives every item the same
#    entitlements): the helper with build/darwin/entitlements.plist
#    (without com.apple.security.virtualization the framework refuses
#    every VM) and its own identifier; then the bundle without
#    entitlements: the app runs no VM. Wails signs ad hoc with --deep and
#    no entitlements (v2.16.0 pkg/commands/build/build.go), so this signs
#    again.
#
# Environment: AIRLOCK_SIGN_IDENTITY (default "-", ad hoc; a "Developer ID
# Application: ..." identity for distribution), ARCH (default: uname -m),
# AIRLOCK_HELPER_BIN (default: bin/airlock of this checkout).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
entitlements="$here/entitlements.plist"
identity=${AIRLOCK_SIGN_IDENTITY:--}
helper_bin=${AIRLOCK_HELPER_BIN:-$root/bin/airlock}
helper_id=com.airlock-sandbox.airlock.helper

target=${1:?usage: post-build.sh <Airlock.app or its executable> [image-dir]}
case "$target" in
*.app | *.app/) app=${target%/} ;;
*.app/Contents/MacOS/*) app=${target%%.app/Contents/MacOS/*}.app ;;
*) echo "post-build.sh: $target is not an app bundle or its executable" >&2; exit 2 ;;
esac
[ -d "$app/Contents/MacOS" ] || { echo "post-build.sh: $app has no Contents/MacOS" >&2; exit 2; }
[ -f "$helper_bin" ] || { echo "post-build.sh: no airlock command at $helper_bin: build it on this Mac with \`make airlock\` (or set AIRLOCK_HELPER_BIN)" >&2; exit 1; }

arch=${ARCH:-$(uname -m)}
case "$arch" in arm64 | aarch64) arch=arm64 ;; x86_64 | amd64) arch=amd64 ;; esac
images=${2:-$root/images/out}
src="$images/$arch"
dst="$app/Contents/Resources/images/$arch"
[ -f "$src/manifest.json" ] || { echo "post-build.sh: no guest image in $src (make image-all)" >&2; exit 1; }

helper="$app/Contents/Helpers/airlock"
mkdir -p "$app/Contents/Helpers"
cp "$helper_bin" "$helper"
chmod 755 "$helper"
echo "post-build.sh: helper $helper_bin -> $helper"

mkdir -p "$dst"
for f in manifest.json initramfs.cpio Image vmlinux; do
	if [ -f "$src/$f" ]; then cp "$src/$f" "$dst/$f"; fi
done
echo "post-build.sh: guest image ($arch) -> $dst"

# A real identity signs for notarization: a secure timestamp is required.
timestamp=
if [ "$identity" != "-" ]; then timestamp=--timestamp; fi

codesign --force --options runtime $timestamp --identifier "$helper_id" --entitlements "$entitlements" --sign "$identity" "$helper"
codesign --force --options runtime $timestamp --sign "$identity" "$app"
codesign --verify --strict --verbose=2 "$app"
if ! codesign -d --entitlements - "$helper" 2>/dev/null | grep -q com.apple.security.virtualization; then
	echo "post-build.sh: $helper lacks the virtualization entitlement after signing" >&2
	exit 1
fi
echo "post-build.sh: signed $helper with $(basename "$entitlements") and $app (identity $identity)"
