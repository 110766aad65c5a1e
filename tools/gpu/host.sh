#!/usr/bin/env bash
# One step of a recording session on the GPU host (see tools/gpu/README.md). From the project root:
#   MEGALAB_COMMIT=<sha> bash tools/gpu/host.sh <install-part|-> <command ...>
# installs a staged wheel part (lite, a, b, c; '-' for none), runs the command with the GPU env,
# then sends back the new records and the run folders through $OUT.
set -u
part=$1; shift
if [ "$part" != - ]; then bash .gpuwheels/$part/install.sh $part || exit 1; fi
. /tmp/gpuenv/env.sh
export MEGALAB_RESULTS=/tmp/megalab-results
mkdir -p $MEGALAB_RESULTS
"$@"
rc=$?
out=${OUT:-/tmp/out}; mkdir -p "$out"
cp $MEGALAB_RESULTS/*.jsonl "$out"/ 2>/dev/null
tar czf "$out/runs.tgz" runs 2>/dev/null
exit $rc
