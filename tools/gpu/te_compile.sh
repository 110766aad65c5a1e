#!/usr/bin/env bash
# Start compiling Transformer Engine's torch extension in the background (from .gpuwheels/asrc: its source and
# cudnn-frontend's headers), so the TE core's parts can arrive meanwhile; part c waits for /tmp/gpuenv/build.rc.
set -euo pipefail
root=/tmp/gpuenv
mkdir -p $root && cp .gpuwheels/asrc/* $root/
cd $root && tar xzf transformer_engine_torch-*.tar.gz && tar xzf cudnn_frontend_include.tgz
cudnn_inc=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "include"))')
CPLUS_INCLUDE_PATH=$root/include:$cudnn_inc NVTE_PYTORCH_FORCE_BUILD=TRUE MAX_JOBS=$(nproc) \
  setsid nohup bash -c "cd $root/transformer_engine_torch-*/ && python3 -m pip wheel -q --no-build-isolation --no-deps -w $root/dist . > $root/build.log 2>&1; echo \$? > $root/build.rc" \
  > /dev/null 2>&1 < /dev/null &
echo "compiling the Transformer Engine torch extension (log: $root/build.log)"
