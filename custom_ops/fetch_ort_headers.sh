#!/bin/sh
# Fetch the ONNX Runtime 1.21 C/C++ headers from Debian's libonnxruntime-dev
# (suite trixie) into $1 (default: custom_ops/build/ort), without installing
# anything system-wide.  See DESIGN.md §4.  Prints the include directory.
set -eu
DEST=${1:-$(dirname "$0")/build/ort}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
INC="$DEST/usr/include/onnxruntime"
if [ -f "$INC/onnxruntime_c_api.h" ]; then echo "$INC"; exit 0; fi

# Take the Debian mirror from this machine's own apt sources.
MIRROR=${DEBIAN_MIRROR:-}
if [ -z "$MIRROR" ]; then
  MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | grep -v '^[[:space:]]*#' | grep -Eo 'https?://[^ ]*/debian/?' | grep -v security | head -n1 || true)
fi
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

APT="$DEST/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
echo "deb [signed-by=$KEYRING] $MIRROR trixie main" > "$APT/sources.list"
OPTS="-oDir::Etc::SourceList=$APT/sources.list -oDir::Etc::SourceParts=/dev/null \
 -oDir::State::Lists=$APT/lists -oDir::Cache=$APT/cache -oAPT::Sandbox::User=root -qq"
# shellcheck disable=SC2086
apt-get $OPTS update >&2
# shellcheck disable=SC2086
(cd "$APT" && apt-get $OPTS download libonnxruntime-dev >&2)
dpkg -x "$APT"/libonnxruntime-dev_*.deb "$DEST"
test -f "$INC/onnxruntime_c_api.h"
echo "$INC"
