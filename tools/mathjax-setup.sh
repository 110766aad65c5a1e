#!/usr/bin/env bash
# MathJax 3 for the HTML book, so formulas render offline: the tex-chtml bundle, its CHTML fonts and the
# TeX extensions it may load, unpacked from MathJax's published release tarball into .mathjax/ (git-ignored,
# ~3 MB). The megalab.book.reproduce Sphinx extension copies .mathjax/ to _build/html/_static/mathjax/. Idempotent.
# No npm needed: the tarball is downloaded with curl (or Python when curl is missing) and checked by sha256.
#   MATHJAX_URL=file:///path/mathjax-3.2.2.tgz tools/mathjax-setup.sh   # a mirror or a local copy
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.2.2
SHA256=1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09  # mathjax-3.2.2.tgz as published
URL=${MATHJAX_URL:-https://registry.npmjs.org/mathjax/-/mathjax-$VERSION.tgz}
[ -f .mathjax/tex-chtml.js ] && [ "$(cat .mathjax/VERSION 2>/dev/null)" = "$VERSION" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tgz=$tmp/mathjax-$VERSION.tgz
if command -v curl >/dev/null 2>&1; then
  curl -fsSL --retry 2 --max-time 120 -o "$tgz" "$URL" || { echo "mathjax-setup: could not download $URL" >&2; exit 1; }
else
  "${PYTHON:-python3}" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
    "$URL" "$tgz" || { echo "mathjax-setup: could not download $URL" >&2; exit 1; }
fi
got=$("${PYTHON:-python3}" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$tgz")
if [ "$got" != "$SHA256" ]; then
  echo "mathjax-setup: $URL has sha256 $got, not MathJax $VERSION's $SHA256: not unpacked" >&2; exit 1
fi
tar -xzf "$tgz" -C "$tmp" package/LICENSE package/es5/tex-chtml.js \
    package/es5/output/chtml package/es5/input/tex/extensions package/es5/ui
rm -rf .mathjax.new && mkdir -p .mathjax.new
cp -r "$tmp"/package/es5/. .mathjax.new/ && cp "$tmp"/package/LICENSE .mathjax.new/
echo "$VERSION" > .mathjax.new/VERSION
rm -rf .mathjax && mv .mathjax.new .mathjax
echo "MathJax $VERSION in .mathjax/"
