#!/usr/bin/env bash
# MathJax 3 for the HTML book, so formulas render offline: the tex-chtml bundle, its CHTML fonts and the
# TeX extensions it may load, unpacked from the npm package into .mathjax/ (git-ignored, ~3 MB). The
# megalab.book.reproduce Sphinx extension copies .mathjax/ to _build/html/_static/mathjax/. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${MATHJAX_VERSION:-3.2.2}
[ -f .mathjax/tex-chtml.js ] && [ "$(cat .mathjax/VERSION 2>/dev/null)" = "$VERSION" ] && exit 0
command -v npm >/dev/null 2>&1 || {
  echo "mathjax-setup: npm is needed once to fetch MathJax $VERSION (Debian/Ubuntu: apt install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mathjax@$VERSION" >/dev/null)
tar -xzf "$tmp"/mathjax-"$VERSION".tgz -C "$tmp" package/LICENSE package/es5/tex-chtml.js \
    package/es5/output/chtml package/es5/input/tex/extensions package/es5/ui
rm -rf .mathjax.new && mkdir -p .mathjax.new
cp -r "$tmp"/package/es5/. .mathjax.new/ && cp "$tmp"/package/LICENSE .mathjax.new/
echo "$VERSION" > .mathjax.new/VERSION
rm -rf .mathjax && mv .mathjax.new .mathjax
echo "MathJax $VERSION in .mathjax/"
