#!/usr/bin/env bash
# One step of a recording session on the GPU host (see tools/gpu/README.md). From the project root:
#   MEGALAB_COMMIT=<sha> bash tools/gpu/host.sh <install-part|-> <command ...>
# installs a staged wheel part (lite, a, b, c; '-' for none), then runs the command with the GPU env.
# The store is $OUT, seeded with results/; new records go straight there (so they come back even if the
# call is cut off at its time limit);
# the run folders (logs, metrics, profiles; no raw traces) follow as runs.tgz.
set -u
part=$1; shift
if [ "$part" != - ]; then bash .gpuwheels/$part/install.sh $part || exit 1; fi
. /tmp/gpuenv/env.sh
export MEGALAB_RESULTS=${OUT:-/tmp/out}
mkdir -p "$MEGALAB_RESULTS"
# seed the store with the committed records, so auto-mode fits and parity reuse what is recorded
# (back home, `megalab results --import` skips the records it already has)
cp -n results/*.jsonl "$MEGALAB_RESULTS"/ 2>/dev/null
"$@"
rc=$?
[ -d runs ] && tar czf "$MEGALAB_RESULTS/runs.tgz" --exclude='trace_rank*.json' runs
exit $rc
