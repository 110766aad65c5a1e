#!/usr/bin/env bash
# Set up .venv for megalab on this machine. Idempotent: a second call only checks.
#  - reuses an installed torch (the venv sees the system site-packages);
#  - never pulls CUDA wheels onto a machine without an NVIDIA GPU: without torch it installs a CPU build
#    (TORCH_SPEC, default torch==2.13.0, from the PyTorch CPU index when that index is reachable);
#  - installs megalab in editable mode with its notebook/book stack (JupyterLab with jupyterlab-myst) and
#    test tools.
# On a GPU machine, tools/gpu-setup.sh (make gpu-setup) installs Transformer Engine as well. MathJax for the
# HTML book comes with `make book` (tools/mathjax-setup.sh), not here: `make lab` does not need it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv || {
    echo "setup: '$PY -m venv' failed: install the venv module (Debian/Ubuntu: apt install python3-venv)" >&2; exit 1; }
fi
. .venv/bin/activate
stamp=.venv/.megalab-setup
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && python -c "import megalab, torch, megatron.core, jupyterlab_myst" 2>/dev/null; then
  exit 0
fi
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  if nvidia-smi -L >/dev/null 2>&1; then
    python -m pip install -q "${TORCH_SPEC:-torch}"
  elif curl -fsI --max-time 5 https://download.pytorch.org/whl/cpu/ >/dev/null 2>&1; then
    python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}" --index-url https://download.pytorch.org/whl/cpu \
      --extra-index-url https://pypi.org/simple
  else  # no CPU index: take what pip resolves, unless it would bring CUDA libraries along
    report=$(mktemp)
    python -m pip install -q --dry-run --ignore-installed --report "$report" "${TORCH_SPEC:-torch==2.13.0}"
    if python -c "import json,sys; sys.exit(any(i['metadata']['name'].startswith('nvidia') for i in json.load(open('$report'))['install']))"; then
      python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
    else
      echo "setup: this machine has no NVIDIA GPU and pip would install a CUDA build of torch (gigabytes)." >&2
      echo "       Install a CPU build first (https://pytorch.org, 'CPU'), or set TORCH_SPEC, then run make again." >&2
      exit 1
    fi
  fi
fi
python -m pip install -q -e ".[test]"
python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (megalab)" >/dev/null
touch "$stamp"
python -c "import torch, megatron.core as m; print('megalab set up: torch', torch.__version__, '| megatron-core', m.__version__)"
