#!/bin/sh
# post-build.sh: finish a macOS build of Airlock.app after `wails build`.
#
#   build/darwin/post-build.sh <Airlock.app | Airlock.app/Contents/MacOS/Airlock> [image-dir]
#
# 1. Copies the guest image (images/out/<arch>/: Image or vmlinux,
#    initramfs.cpio, manifest.json) into Contents/Resources/images/<arch>/,
#    where vm/vz.BundleImageDir finds it at run time.
# 2. Signs again with build/darwin/entitlements.plist: Wails signs without
#    them, and without com.apple.security.virtualization the framework
#    refuses every VM. Helpers in Contents/MacOS are signed first, the
#    bundle last (no --deep).
#
# Environment: AIRLOCK_SIGN_IDENTITY (default "-", ad hoc; a "Developer ID
# Application: ..." identity for distribution), ARCH (default: uname -m).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
entitlements="$here/entitlements.plist"
identity=${AIRLOCK_SIGN_IDENTITY:--}

target=${1:?usage: post-build.sh <Airlock.app or its executable> [image-dir]}
case "$target" in
*.app | *.app/) app=${target%/} ;;
*.app/Contents/MacOS/*) app=${target%%.app/Contents/MacOS/*}.app ;;
*) echo "post-build.sh: $target is not an app bundle or its executable" >&2; exit 2 ;;
esac
[ -d "$app/Contents/MacOS" ] || { echo "post-build.sh: $app has no Contents/MacOS" >&2; exit 2; }

arch=${ARCH:-$(uname -m)}
case "$arch" in arm64 | aarch64) arch=arm64 ;; x86_64 | amd64) arch=amd64 ;; esac
images=${2:-$root/images/out}
src="$images/$arch"
dst="$app/Contents/Resources/images/$arch"
[ -f "$src/manifest.json" ] || { echo "post-build.sh: no guest image in $src (make image-all)" >&2; exit 1; }
mkdir -p "$dst"
for f in manifest.json initramfs.cpio Image vmlinux; do
	if [ -f "$src/$f" ]; then cp "$src/$f" "$dst/$f"; fi
done
echo "post-build.sh: guest image ($arch) -> $dst"

# A real identity signs for notarization: a secure timestamp is required.
timestamp=
if [ "$identity" != "-" ]; then timestamp=--timestamp; fi

main=$(defaults read "$app/Contents/Info" CFBundleExecutable)
for f in "$app"/Contents/MacOS/*; do
	if [ "$(basename "$f")" != "$main" ] && [ -f "$f" ] && [ -x "$f" ]; then
		codesign --force --options runtime $timestamp --entitlements "$entitlements" --sign "$identity" "$f"
	fi
done
codesign --force --options runtime $timestamp --entitlements "$entitlements" --sign "$identity" "$app"
codesign --verify --strict --verbose=2 "$app"
if ! codesign -d --entitlements - "$app" 2>/dev/null | grep -q com.apple.security.virtualization; then
	echo "post-build.sh: $app lacks the virtualization entitlement after signing" >&2
	exit 1
fi
echo "post-build.sh: signed $app with $(basename "$entitlements") (identity $identity)"
