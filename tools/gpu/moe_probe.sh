#!/usr/bin/env bash
# Try MoE settings on one GPU: each variant a profiled 10-step run of the OLMoE-like model (as chapter 06's
# one-GPU step), its metrics lines and trace summary (tools/gpu/trace_top.py) written to $OUT/probe/.
#   bash tools/gpu/moe_probe.sh cutlass permute router all local [runs/<recorded run dir> ...]
# A run dir argument summarises an already profiled run (the recorded baseline) instead of running one.
set -u
out=${OUT:-/tmp/out}/probe; mkdir -p "$out"
flags=(--preset olmoe-like --mbs 1 --gbs 4 --iters 10 --profile)
for v in "$@"; do
  case $v in
    cutlass) env=(NVTE_USE_CUTLASS_GROUPED_GEMM=1) extra=() ;;
    permute) env=(MEGALAB_PROBE=moe_permute_fusion=true) extra=() ;;
    router)  env=(MEGALAB_PROBE=moe_router_fusion=true) extra=() ;;
    all)     env=(NVTE_USE_CUTLASS_GROUPED_GEMM=1 MEGALAB_PROBE=moe_permute_fusion=true,moe_router_fusion=true) extra=() ;;
    wgrad)   env=(NVTE_USE_CUTLASS_GROUPED_GEMM=1 MEGALAB_PROBE=moe_permute_fusion=true,moe_router_fusion=true,gradient_accumulation_fusion=true) extra=() ;;
    dense-wgrad) env=(MEGALAB_PROBE=gradient_accumulation_fusion=true) extra=(--experts 0 --ffn 8192) ;;
    local)   env=(MEGALAB_PROBE_NONE=1) extra=(--impl local) ;;
    */*)     python3 tools/gpu/trace_top.py "$v" --top 25 > "$out/$(basename "$v").top.json" 2>&1; continue ;;
    *) echo "unknown variant $v"; exit 2 ;;
  esac
  d=/tmp/probe/$v; mkdir -p "$d"
  env "${env[@]}" timeout 240 torchrun --standalone --nproc_per_node=1 tools/gpu/moe_probe.py "${flags[@]}" "${extra[@]}" \
    --run-dir "$d" > "$out/$v.log" 2>&1
  echo "$v rc=$?"; grep -h '"summary"' "$out/$v.log" | cut -c1-400
  python3 tools/gpu/trace_top.py "$d" --top 25 > "$out/$v.top.json" 2>&1
done
tar czf "${OUT:-/tmp/out}/probe.tgz" -C "$out" . && rm -rf "$out"   # one file: a call brings back few
