#!/usr/bin/env bash
# One step of a recording session on the GPU host (see tools/gpu/README.md). From the project root:
#   MEGALAB_COMMIT=<sha> bash tools/gpu/host.sh <install-part|-> <command ...>
# installs a staged wheel part (lite, a, b, c; '-' for none), then runs the command with the GPU env.
# The store is $OUT, seeded with results/; new records go straight there (so they come back even if the
# call is cut off at its time limit);
# the run folders (logs, metrics, profiles; no raw traces) follow as runs.tgz.
set -u
part=$1; shift
root=/tmp/gpuenv prebuilt=.gpuwheels/tebuilt
torch_version() { python3 -c 'import torch; print(torch.__version__)'; }
# A Transformer Engine torch extension compiled on an earlier host (same torch) skips the compile:
# it travels with the lite part, and part a then only drops its share of the TE core in place.
if [ "$part" = lite ] && ls $prebuilt/transformer_engine_torch-*.whl >/dev/null 2>&1 &&
   [ "$(cat $prebuilt/torch.version)" = "$(torch_version)" ]; then
  mkdir -p $root/dist && cp $prebuilt/transformer_engine_torch-*.whl $root/dist/ && echo 0 > $root/build.rc
  echo "prebuilt Transformer Engine torch extension in place"
fi
# each part needs the earlier ones on this same host: fail at once, not after part c's 10-minute wait for
# a compile that never started (session 14 lost 590 s that way when the lite call had been refused)
need() { [ -e "$1" ] || { echo "host.sh: part $part needs $2 first ($1 is missing): an earlier call failed or" \
  "this is a fresh host; start again from part lite" >&2; exit 3; }; }
case $part in
  a) need $root/env.sh "part lite" ;;
  # a plan after part c needs Transformer Engine: session 17's parts a and b were refused (the tree over 64 MiB),
  # c stopped, and the next '-' call ran 33 plan lines to failure without TE in 133 s (LITE_ONLY=1: work that needs
  # no TE, run after part lite alone)
  -) need $root/env.sh "part lite"; [ "${LITE_ONLY:-0}" = 1 ] || need $root/te.ready "part c" ;;
  b) need $root/tecore.aa "part a" ;;
  c) need $root/tecore.aa "part a"; need $root/tecore.ab "part b" ;;
esac
if [ "$part" = a ] && [ -f $root/build.rc ]; then
  cp .gpuwheels/a/tecore.aa $root/ && echo "part a in place (prebuilt torch extension: no compile)"
elif [ "$part" != - ]; then
  bash .gpuwheels/$part/install.sh $part || exit 1
  [ "$part" = c ] && touch $root/te.ready
fi
. /tmp/gpuenv/env.sh
export MEGALAB_RESULTS=${OUT:-/tmp/out}
mkdir -p "$MEGALAB_RESULTS"
# seed the store with the committed records, so auto-mode fits and parity reuse what is recorded
# (back home, `megalab results --import` skips the records it already has); an earlier call on this host
# left its store in $kept: that copy goes first, so a plan spanning two calls does not repeat its probes;
# results/ is merged in (a later call may bring it whole, for a live reproduction)
kept=/tmp/megalab-store
cp -n $kept/*.jsonl "$MEGALAB_RESULTS"/ 2>/dev/null
python3 tools/gpu/merge_store.py results "$MEGALAB_RESULTS"  # adds what the host's copy lacks
if [ "$part" = c ] && [ ! -f $prebuilt/torch.version ]; then  # bring the compiled extension home for the next host
  cp $root/dist/transformer_engine_torch-*.whl "$MEGALAB_RESULTS"/ &&
    torch_version > "$MEGALAB_RESULTS"/torch.version
fi
"$@"
rc=$?
mkdir -p $kept && cp "$MEGALAB_RESULTS"/*.jsonl $kept/ 2>/dev/null
[ -d runs ] && tar czf "$MEGALAB_RESULTS/runs.tgz" --exclude='trace_rank*.json' --exclude=peer_trace runs
exit $rc
