"""A step-time model with six constants, for `calibration.py` to fit on the book's records.

    >>> from megalab import step_model
    >>> rates = step_model.Rates.recorded("H200")       # the machine's benched ceilings
    >>> parts = step_model.parts(cfg, rates)             # what the step is made of, constant-free
    >>> step_model.combine(parts, step_model.guesses())  # seconds per term

Where theory.step_time_estimate is a roofline (all FLOPs at one matmul rate, every byte at one bus
bandwidth), this model adds what the records show it lacks. Per GPU, for the busiest pipeline stage:

    gpu   = GEMM FLOPs / (gemm_eff·h/(h + gemm_width)·R) + attention-core FLOPs / (attn_eff·R)
          per micro-batch
            (h the hidden size: wider matrices keep the tensor cores busier, saturating at gemm_eff)
    host  = host_layer · layers per stage (4/3 of it under full recompute: one more forward)
            + expert_gemm · expert GEMMs (per-expert host work: theory.moe.expert_gemms_per_step)
    stage = max(host, gpu): the host issues kernels ahead of the GPU, so a layer waits for
    whichever is
            slower; host + gpu for MoE layers, whose router waits on the GPU every forward
            (theory.moe.host_syncs_per_step) so the host cannot run ahead
    mb    = stage + Σ over tp, cp, ep of (bytes / B(op, group, message size) + calls · comm_call)
    step  = m · mb + (p−1)/v · mb (bubble) + pp send/recv (bytes / B + calls · comm_call)
            + dp reduction (all of it; one bucket when overlapped) + optimizer bytes / HBM rate

R is the best benched matmul rate of the dtype, B the benched NCCL bus bandwidth of that collective
on that many GPUs at that message size (interpolated on log size; a point-to-point send as a two-GPU
all-gather), the HBM rate the best benched copy; without bench records, the datasheet's peak, NVLink
and HBM numbers. Bytes come from theory.comm_bytes_per_step, FLOPs from theory.flops_per_step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from megalab import theory
from megalab.theory.collectives import bus_factor
from megalab.theory.flops import spec
from megalab.theory.moe import expert_gemms_per_step, optimizer_bytes_per_step
from megalab.theory.parameters import stage_params

__all__ = ["CONSTANTS", "Rates", "parts", "combine", "guesses"]

# name -> (unit, SI scale, first guess in that unit, meaning): what calibration fits, and nothing
# else
CONSTANTS = {
    "gemm_eff": (
        "fraction of R",
        1.0,
        0.6,
        "share of the benched matmul rate R the layers' GEMMs reach at "
        "any width, their norms and elementwise kernels included",
    ),
    "gemm_width": (
        "hidden units",
        1.0,
        500.0,
        "hidden size at which the GEMMs reach half of gemm_eff: "
        "efficiency h/(h + gemm_width) of it at hidden size h",
    ),
    "attn_eff": (
        "fraction of R",
        1.0,
        0.5,
        "share of R that flash attention's QKᵀ and AV reach, forward and backward",
    ),
    "host_layer": (
        "ms",
        1e-3,
        4.0,
        "host time to issue one layer's forward and backward for one micro-batch",
    ),
    "comm_call": (
        "µs",
        1e-6,
        200.0,
        "cost of one blocking collective or send/recv beyond its bytes at the benched "
        "bandwidth: launch, and waiting for the slowest rank",
    ),
    "expert_gemm": (
        "µs",
        1e-6,
        30.0,
        "host cost of one expert GEMM (one per local expert, linear and pass)",
    ),
}
P2P = "p2p"  # a pipeline or context-parallel send/recv: timed as a two-GPU all-gather
# Megatron DDP's default bucket (max(40M, 1M·dp) parameters) when overlapping
BUCKET_PARAMS = 40_000_000
GRAD_BYTES = 4  # fp32 gradients on the wire (grad_reduce_in_fp32)


def guesses() -> dict[str, float]:
    """Each constant's first guess, in SI units: where the fit starts, and a plausible model before
    it."""
    return {name: guess * scale for name, (_, scale, guess, _) in CONSTANTS.items()}


@dataclass
class Rates:
    """One GPU model's ceilings: matmul TFLOP/s by dtype, HBM bytes/s, NCCL bus bandwidth by op,
    group size and message size (from `megalab bench` records, else the datasheet); `source` says
    which."""

    gpu: str
    matmul_tflops: dict[str, float]
    hbm_bps: float
    # log size, GB/s
    nccl: dict[tuple[str, int], tuple[list[float], list[float]]] = field(default_factory=dict)
    source: str = "datasheet"

    @classmethod
    def recorded(cls, gpu: str = "H200", store=None) -> Rates:
        """The best benched matmul and HBM copy and every NCCL point recorded on `gpu`, falling back
        to the datasheet for what the store lacks."""
        from megalab.jobs import bench
        from megalab.jobs.running import NotRecorded

        g = spec(gpu)
        rates = cls(
            g.name,
            {"bf16": g.peak_bf16_tflops, "fp8": g.peak_fp8_tflops or g.peak_bf16_tflops},
            g.hbm_tbs * 1e12,
        )
        try:
            df = bench.load(store=store, gpu=g.name)
        except NotRecorded:
            return rates
        for dtype, rows in df[df["bench"] == "matmul"].groupby("dtype"):
            rates.matmul_tflops[dtype] = float(rows["tflops"].max())
        hbm = df[df["bench"] == "hbm"]
        if len(hbm):
            rates.hbm_bps = float(hbm["gbs"].max()) * 1e9
        for (op, n), rows in df[df["bench"] == "nccl"].groupby(["op", "gpus"]):
            best = rows.groupby("size_bytes")["busbw_gbs"].max()
            rates.nccl[(op, int(n))] = (
                [math.log(s) for s in best.index],
                [float(v) for v in best.values],
            )
        if len(df):
            rates.source = "benched " + ", ".join(sorted(set(df["bench"])))
        return rates

    def bus_gbs(self, op: str, n: int, size_bytes: float) -> float:
        """Bus bandwidth (GB/s) of one `op` over `n` GPUs of `size_bytes` (nccl-tests' size): the
        benched curve of the nearest recorded group size, interpolated on log size (clamped at its
        ends); the datasheet NVLink rate when nothing is recorded. P2P reads the two-GPU
        all-gather."""
        op, n = ("all_gather", 2) if op == P2P else (op, n)
        counts = sorted(c for o, c in self.nccl if o == op)
        if not counts:
            return spec(self.gpu).nvlink_gbs
        near = max([c for c in counts if c <= n] or counts[:1])
        import numpy as np

        xs, ys = self.nccl[(op, near)]
        # clamped at both ends
        return max(float(np.interp(math.log(max(size_bytes, 1.0)), xs, ys)), 1e-3)

    def seconds(self, op: str, n: int, sent: float, calls: float) -> float:
        """Seconds to send `sent` bytes per GPU in `calls` equal collectives (nccl-tests' busbw
        definition)."""
        if sent <= 0 or calls <= 0 or n <= 1:  # a collective over one GPU moves nothing
            return 0.0
        size = sent / calls / (0.5 if op == P2P else bus_factor(op, n))
        return sent / (self.bus_gbs(op, n, size) * 1e9)


def _flops(cfg) -> tuple[float, float]:
    """(GEMM FLOPs, attention-core FLOPs) per GPU per step, recomputation included; they add up to
    theory.hardware_flops / gpus. The core is what the causal mask halves (QKᵀ and AV)."""
    causal = theory.flops_per_step(cfg, recompute=cfg.recompute)
    core = theory.flops_per_step(cfg, recompute=cfg.recompute, causal=False) - causal
    return (causal - core) / cfg.gpus, core / cfg.gpus


def _comm(cfg, rates: Rates) -> dict[str, tuple[float, float]]:
    """Per axis: (seconds at the benched bandwidth, blocking calls) per GPU per step."""
    vol = theory.comm_bytes_per_step(cfg)
    fwd, L, m = 1 + (cfg.recompute == "full"), cfg.layers // cfg.pp, cfg.num_microbatches
    out = {a: (0.0, 0.0) for a in ("tp", "cp", "ep", "pp", "dp")}
    # 2 all-reduces per pass (Shoeybi 2019 Fig. 4); SP: each one all-gather + reduce-scatter
    if cfg.tp > 1:
        calls = 2 * (fwd + 1) * L * m * (2 if cfg.sp else 1)
        op = "all_gather" if cfg.sp else "all_reduce"
        out["tp"] = (rates.seconds(op, cfg.tp, vol["tp"], calls), calls)
    if cfg.cp > 1:  # ring: cp−1 hops per pass; Ulysses: 4 all-to-alls per pass; a2a+p2p: both
        ring, a2a = (fwd + 1) * (cfg.cp - 1), 4 * (fwd + 1)
        calls = {"p2p": ring, "all_gather": ring, "a2a": a2a}.get(
            cfg.cp_comm, a2a + (fwd + 1) * (cfg.cp // 2 - 1)
        )
        op = P2P if cfg.cp_comm in ("p2p", "all_gather") else "all_to_all"
        out["cp"] = (rates.seconds(op, cfg.cp, vol["cp"], calls * L * m), calls * L * m)
    if cfg.experts and cfg.ep * cfg.etp > 1:  # dispatch and combine in every pass
        calls = 2 * (fwd + 1) * L * m
        # alltoall: all-to-all over EP (with ETP inside it too); ETP alone, or allgather: all-gather
        # over EP·ETP
        alltoall = cfg.moe_dispatcher == "alltoall" and cfg.ep > 1
        op, n = ("all_to_all", cfg.ep) if alltoall else ("all_gather", cfg.ep * cfg.etp)
        out["ep"] = (rates.seconds(op, n, vol["ep"], calls), calls)
    if cfg.pp > 1:  # an activation forward and a gradient backward per micro-batch and model chunk
        calls = 2 * m * cfg.vpp
        out["pp"] = (rates.seconds(P2P, 2, vol["pp"], calls), calls)
    # the experts' data-parallel group
    edp = cfg.gpus // (cfg.pp * cfg.ep * cfg.etp) if cfg.experts else 1
    # one message when not overlapping (Megatron: no buckets then)
    if cfg.dp * cfg.cp > 1 or edp > 1:
        op, n = ("reduce_scatter" if cfg.dist_opt else "all_reduce"), max(cfg.dp * cfg.cp, edp)
        grads = max(sum(stage_params(cfg, s)) for s in range(cfg.pp)) * GRAD_BYTES
        exposed = min(1.0, max(BUCKET_PARAMS, 1e6 * n) * GRAD_BYTES / grads) if cfg.overlap else 1.0
        # once a step: no call cost
        out["dp"] = (rates.seconds(op, n, vol["dp"], 1 + cfg.dist_opt) * exposed, 0.0)
    return out


def parts(cfg, rates: Rates) -> dict[str, float]:
    """What one step of `cfg` is made of, before any constant: FLOPs at the benched rate, layer
    micro-batches, expert GEMMs, communication seconds and calls by axis, optimizer seconds."""
    rate = rates.matmul_tflops["fp8" if cfg.fp8 else "bf16"] * 1e12
    gemm, core = _flops(cfg)
    m = cfg.num_microbatches
    out = {
        "m": float(m),
        "bubble": (cfg.pp - 1) / cfg.vpp,
        "gemm_s": gemm / rate,
        "attn_s": core / rate,
        "width": float(cfg.hidden),
        "layers": cfg.layers / cfg.pp * (4 / 3 if cfg.recompute == "full" else 1.0),
        "expert_gemms": expert_gemms_per_step(cfg) / max(m, 1),
        "moe": float(cfg.experts > 0),
        "optimizer_s": max(optimizer_bytes_per_step(cfg, s) for s in range(cfg.pp)) / rates.hbm_bps,
    }
    for axis, (seconds, calls) in _comm(cfg, rates).items():
        out[f"{axis}_s"], out[f"{axis}_calls"] = seconds, calls
    return out


def combine(p: dict, c: dict) -> dict:
    """The step's terms in seconds from `parts` (floats, or numpy arrays of many configs) and
    constants `c` in SI units: compute_s (GPU work), host_s (time the GPU waits on the host), comm_s
    (by axis in comm_by_axis_s), bubble_s, optimizer_s and total_s."""
    import numpy as np

    m = p["m"]
    gemm_eff = c["gemm_eff"] * p["width"] / (p["width"] + c["gemm_width"])
    gpu = (p["gemm_s"] / gemm_eff + p["attn_s"] / c["attn_eff"]) / m
    host = c["host_layer"] * p["layers"] + c["expert_gemm"] * p["expert_gemms"]
    stage = np.where(p["moe"] > 0, host + gpu, np.maximum(host, gpu))
    axes = {
        a: p[f"{a}_s"] + p[f"{a}_calls"] * c["comm_call"] for a in ("tp", "cp", "ep", "pp", "dp")
    }
    mb = stage + (axes["tp"] + axes["cp"] + axes["ep"]) / m
    bubble = p["bubble"] * mb
    total = m * mb + bubble + axes["pp"] + axes["dp"] + p["optimizer_s"]
    return {
        "compute_s": m * gpu,
        "host_s": m * (stage - gpu),
        "comm_s": sum(axes.values()),
        "bubble_s": bubble,
        "optimizer_s": p["optimizer_s"],
        "total_s": total,
        "comm_by_axis_s": axes,
    }
