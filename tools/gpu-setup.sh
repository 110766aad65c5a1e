#!/usr/bin/env bash
# Set up .venv on a GPU machine the way NVIDIA documents Transformer Engine's install (`make gpu-setup`):
#  1. check: an NVIDIA GPU (nvidia-smi -L), Python >= 3.10, and an installed CUDA build of torch, which the venv
#     reuses (--system-site-packages) and pip may not replace (a constraint pins it);
#  2. pip install --no-build-isolation "transformer_engine[pytorch]==2.11.0" (its torch extension is source
#     only: it compiles against the torch it finds, which build isolation would hide), megatron-core==0.16.1,
#     and megalab with its book stack;
#  3. print what it found and installed.
# The records in results/ were made with Python 3.12, torch 2.11.0+cu130 (CUDA 13.0), Transformer Engine
# 2.11.0 and Megatron Core 0.16.1; another torch or CUDA works but is said in a warning.
#   tools/gpu-setup.sh             check, install, report
#   tools/gpu-setup.sh --dry-run   check and print the install commands, install nothing
# Without a GPU it stops before installing anything: no CUDA wheels land on a CPU machine (`make setup` is
# the CPU path). PYTHON picks the interpreter (default python3); torch is never installed here: install
# torch 2.11.0 for CUDA 13.0 first (https://pytorch.org).
set -euo pipefail
cd "$(dirname "$0")/.."
TE=2.11.0 MCORE=0.16.1 REC_TORCH=2.11.0 REC_CUDA=13.0 REC_PYTHON=3.12
dry=0
case "${1:-}" in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "gpu-setup: unknown option $1: use --dry-run or nothing" >&2; exit 2 ;;
esac
say() { echo "gpu-setup: $*"; }
die() { echo "gpu-setup: $*" >&2; exit 2; }

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$gpus" -gt 0 ] || die "no NVIDIA GPU here (nvidia-smi -L lists none): nothing installed. For the book on CPU: make setup"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found: set PYTHON to a Python >= 3.10"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "Python $pyver: megalab needs 3.10 or newer"
torch=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")' 2>/dev/null) ||
  die "no torch in $PY: install torch $REC_TORCH for CUDA $REC_CUDA first (https://pytorch.org: pip install torch==$REC_TORCH --index-url https://download.pytorch.org/whl/cu${REC_CUDA/./}), then run this again"
read -r torch_ver torch_cuda <<<"$torch"
[ "$torch_cuda" != none ] || die "torch $torch_ver in $PY is a CPU build: Transformer Engine needs a CUDA build (torch $REC_TORCH for CUDA $REC_CUDA, https://pytorch.org)"
say "found $gpus GPU(s), Python $pyver, torch $torch_ver (CUDA $torch_cuda)"
[ "$pyver" = "$REC_PYTHON" ] || say "warning: the records were made with Python $REC_PYTHON, this is $pyver"
[ "${torch_ver%%+*}" = "$REC_TORCH" ] && [ "$torch_cuda" = "$REC_CUDA" ] ||
  say "warning: the records were made with torch $REC_TORCH+cu${REC_CUDA/./}, this is $torch_ver (CUDA $torch_cuda)"

pins=.venv/gpu-constraints.txt
steps=(
  "$PY -m venv --system-site-packages .venv"
  ".venv/bin/python -m pip install -q --upgrade pip setuptools wheel pybind11 ninja"
  ".venv/bin/python -m pip install --no-build-isolation -c $pins transformer_engine[pytorch]==$TE"
  ".venv/bin/python -m pip install -c $pins megatron-core==$MCORE -e .[test]"
)
set -f  # the steps' [pytorch] and [test] are extras, not file patterns
if [ "$dry" = 1 ]; then
  say "dry run: would pin torch==$torch_ver in $pins and run"
  printf '  %s\n' "${steps[@]}"
  exit 0
fi
[ -x .venv/bin/python ] || $PY -m venv --system-site-packages .venv
.venv/bin/python -c 'import torch' 2>/dev/null ||
  die ".venv does not see $PY's torch: remove .venv (made from another Python) and run this again"
echo "torch==$torch_ver" > "$pins"  # pip keeps the installed CUDA torch, whatever a dependency asks for
for step in "${steps[@]:1}"; do
  say "$step"
  $step
done
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (megalab)" >/dev/null
touch .venv/.megalab-setup  # tools/setup.sh (make book, make lab) takes this venv as set up
.venv/bin/python - <<'PY'
import importlib.metadata as md
import sys

import torch
import transformer_engine.pytorch  # noqa: F401  (the compiled torch extension loads)
print(f"gpu-setup: ready: Python {sys.version.split()[0]}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, "
      f"torch {torch.__version__} (CUDA {torch.version.cuda}), Transformer Engine {md.version('transformer_engine')}, "
      f"Megatron Core {md.version('megatron-core')}")
PY
