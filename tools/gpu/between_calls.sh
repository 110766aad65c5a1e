#!/usr/bin/env bash
# Between two chained device calls (the machine goes back 30 s after a call): import the newest call's
# records, keep its run logs, and write the next plan from what the chapters still miss. Seconds, not minutes.
#   bash tools/gpu/between_calls.sh PLAN "chNN GPUS" ["chNN GPUS" ...]     e.g. "ch06 2" "ch04 4"
# Each "chNN GPUS" adds `megalab experiments chNN --gpus GPUS --pending --missing --host-gpus $HOST_GPUS`
# (HOST_GPUS, default 4: the host's width, so timed runs get their `!`). Prints how many jobs the plan holds.
set -euo pipefail
plan=$1; shift
device=${DEVICE_DIR:-/work/.device}
megalab=${MEGALAB:-.venv/bin/megalab}
newest=$(ls -td "$device"/*/ 2>/dev/null | head -1 || true)
if [ -n "$newest" ] && [ -f "$newest/runs.jsonl" ]; then
  "$megalab" results --import "$newest/runs.jsonl" | tail -1
  [ -f "$newest/runs.tgz" ] && cp "$newest/runs.tgz" "/tmp/runs-$(basename "$newest").tgz"
fi
{ echo "# written by tools/gpu/between_calls.sh from what the records still miss: $*"
  for item in "$@"; do
    set -- $item
    "$megalab" experiments "$1" --gpus "$2" --pending --missing --host-gpus "${HOST_GPUS:-4}"
  done
} > "$plan"
grep -vc '^#\|^wait' "$plan" || true
