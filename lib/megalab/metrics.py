"""The metrics protocol between the trainer and everything that reads its output, in one place.

The trainer (`python -m megalab.train`) prints one JSON object per line on stdout. torchrun may put
a prefix such as `[rank0]:` in front; the parser takes the text from the first `{`. Lines that are
not JSON, or JSON without a known "kind", are ordinary log output and are ignored. Raw SI numbers
only: seconds, tokens, bytes in GiB (2**30), TFLOP/s (1e12 FLOP/s), fractions (not percent).

budget   rank 0, once, before step 0 -- what the run is about to do:
    {"kind": "budget", "layout": "TP(2)·PP(2)·CP(1)·EP(1)·DP(1)", "world_size": 4,
     "params_total": int, "params_per_rank": [int, ...], "tokens_per_step": int,
     "predicted_mem_gib": float, "num_microbatches": int, "config": {RunConfig dict}}
step     rank 0 (the last pipeline stage's loss reaches it), every step:
    {"kind": "step", "step": 10, "loss": 7.91, "grad_norm": 1.2, "lr": 3e-4,
     "step_time_s": 0.412, "tokens_per_s": 3.97e5, "tflops_per_gpu": 412.0, "mfu": 0.417,
     "mem_allocated_peak_gib": 21.3, "mem_reserved_peak_gib": 23.0}     (memory: max over ranks)
    tflops_per_gpu = theory.flops_per_step(cfg) / step_time_s / world_size / 1e12 (model FLOPs,
    recomputation not counted); mfu = tflops_per_gpu * 1e12 / peak dense bf16 FLOP/s of the GPU.
summary  same rank, once, at the end:
    {"kind": "summary", "steps": N, "startup_s": float (launch to the end of the first step),
     "startup_marks_s": {"python": .., "imports": .., "process_groups": .., "model": ..,
                         "training_state": .., "loop": .., "first_step": ..}
                         (seconds since launch when each phase ended),
     "mem_allocated_peak_gib_per_rank": [..], "mem_reserved_peak_gib_per_rank": [..],
     "env": {megalab.machine.env.fingerprint()}}
error    any rank, when it stops on a known failure (the trainer then exits non-zero):
    {"kind": "error", "status": "invalid" | "oom", "rank": int, "message": str}
params   every rank, --dry-run only (CPU, gloo: shards are built, nothing is trained):
    {"kind": "params", "rank": int, "tp_rank": int, "pp_rank": int, "ep_rank": int, "params": int,
     "init_checksum": float | None}
nodes    rank 0 of a run over several nodes, once, before the model is built (a dry run too):
    {"kind": "nodes", "nodes": [{megalab.env.fingerprint()} of each node, in node order]}

Warm-up policy (declared here only): the first WARMUP_STEPS steps pay for CUDA context creation,
NCCL communicator set-up, allocator growth and autotuning, so they are dropped and the median of
the remaining steps is reported (the median ignores the odd step slowed by a neighbour's job).
A run with at most WARMUP_STEPS steps keeps its last half instead, and says so in "warmup_policy"
(`after_warmup`: the routing counts of an MoE run keep the same steps).

`classify_failure` turns a failed run's log into a status (oom, nccl_error, timeout, failed,
invalid) and a small error dict {"message", "rank", "detail"}: failures are results, not exceptions.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

KINDS = ("budget", "step", "summary", "error", "params", "nodes")
WARMUP_STEPS = 3
MEDIAN_FIELDS = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu")
PEAK_FIELDS = ("mem_allocated_peak_gib", "mem_reserved_peak_gib")
# the max over steps too; present only where measured (probes.ActivationMemory: the rank computing
# the loss)
MEASURED_FIELDS = ("act_gib",)
STATUSES = ("ok", "oom", "nccl_error", "timeout", "failed", "invalid")
TRACEBACK_LINES = 15

_DECODER = json.JSONDecoder()


# -- parsing ---------------------------------------------------------------------------------------
def parse_line(text: str) -> dict | None:
    """The metrics object on this log line, or None for ordinary output (any prefix before `{`)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        obj, _ = _DECODER.raw_decode(text, start)  # tolerates trailing text such as "\r"
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and obj.get("kind") in KINDS else None


@dataclass
class Parsed:
    """The metrics lines of one run: budget, steps (in step order), summary, errors, params (dry
    run), nodes."""

    budget: dict | None = None
    steps: list[dict] = field(default_factory=list)
    summary: dict | None = None
    errors: list[dict] = field(default_factory=list)
    params: list[dict] = field(default_factory=list)
    # every node's machine, when the run spanned several
    nodes: list[dict] = field(default_factory=list)


def parse_log(log: str | Iterable[str]) -> Parsed:
    """Collect the metrics lines of a whole log (a string, or an iterable of lines)."""
    lines = log.splitlines() if isinstance(log, str) else log
    out = Parsed()
    seen: set = set()
    for line in lines:
        obj = parse_line(line)
        if obj is None:
            continue
        if obj["kind"] == "step":
            if obj.get("step") in seen:  # a step printed twice (two ranks) counts once
                continue
            seen.add(obj.get("step"))
            out.steps.append(obj)
        elif obj["kind"] == "budget" and out.budget is None:
            out.budget = obj
        elif obj["kind"] == "summary":
            out.summary = obj
        elif obj["kind"] == "error":
            out.errors.append(obj)
        elif obj["kind"] == "params":
            out.params.append(obj)
        elif obj["kind"] == "nodes" and isinstance(obj.get("nodes"), list):
            out.nodes = [n for n in obj["nodes"] if isinstance(n, dict)]
    out.steps.sort(key=lambda s: (s.get("step") is None, s.get("step") or 0))
    return out


# -- summary ---------------------------------------------------------------------------------------
def _finite(values) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def after_warmup(items: list, step_of=lambda s: s.get("step", 0)) -> tuple[list, str]:
    """The items the warm-up policy keeps, and the policy's name: those of step WARMUP_STEPS on (by
    step number: lines can be missing), or the last half when there are too few steps to drop the
    warm-up."""
    after = [s for s in items if step_of(s) >= WARMUP_STEPS]
    if after:
        return after, f"drop_first_{WARMUP_STEPS}"
    return items[len(items) // 2 :], "last_half"


def summarize(steps: list[dict]) -> dict:
    """Median speed after warm-up, peak memory over all steps, first and last loss."""
    kept, policy = after_warmup(steps)
    out: dict = {}
    for name in MEDIAN_FIELDS:
        vals = _finite(s.get(name) for s in kept)
        out[name] = statistics.median(vals) if vals else None
    for name in PEAK_FIELDS + MEASURED_FIELDS:
        vals = _finite(s.get(name) for s in steps)
        out[name] = max(vals) if vals else None
    out["loss_first"] = steps[0].get("loss") if steps else None
    out["loss_last"] = steps[-1].get("loss") if steps else None
    out["steps"] = len(steps)
    out["warmup_policy"] = policy
    return out


# -- failure classification ------------------------------------------------------------------------
_PREFIX = re.compile(r"^\s*\[(?:default)?rank(\d+)\]:\s?")
# NCCL allocates its own buffers: on a full GPU it fails with "Failed to CUDA calloc async 4 bytes"
# inside an "unhandled cuda error" (tests/data/log_nccl_alloc.txt, a fit probe on one H200): out of
# memory, not NCCL
_OOM = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
    r"CUBLAS_STATUS_ALLOC_FAILED|Cuda failure 'out of memory'|cudaErrorMemoryAllocation|"
    r"Failed to CUDA (?:calloc|malloc|host alloc)"
)
_NCCL = re.compile(
    r"Watchdog caught collective operation timeout|NCCL error|\bnccl[A-Z]\w*Error\b|"
    r"DistBackendError|NCCL communicator was aborted|ProcessGroupNCCL.*(?:[Ww]atchdog|"
    r"timed out|Timeout\(ms\)|aborted|Exception raised)"
)
_INVALID = re.compile(r"\bInvalidLayout\b:?\s*(.*)")
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$")
_ROOT_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank")
_GPU = re.compile(r"\bGPU (\d+)\b")
_RANK_WORD = re.compile(r"\bRank (\d+)\b")
_ALLOC = re.compile(r"Tried to allocate ([\d.]+) ([KMGT]i?B)")
_HELD = re.compile(r"Of the allocated memory ([\d.]+) ([KMGT]i?B) is allocated by PyTorch")
_CACHED = re.compile(r"([\d.]+) ([KMGT]i?B) is reserved by PyTorch but unallocated")
_UNITS = {
    "KiB": 2**-20,
    "MiB": 2**-10,
    "GiB": 1.0,
    "TiB": 2**10,
    "KB": 2**-20,
    "MB": 2**-10,
    "GB": 1.0,
    "TB": 2**10,
}
_LOG_LINE = re.compile(r"^\[?[WEI]\d{4} |^Traceback|^\s*File ")  # glog-style lines of torch/NCCL
_GLOG = re.compile(r"^\[[WEI]\d{4} [^\]]*\]\s*")
_TORCHRUN_NOISE = ("ChildFailedError", "torch.distributed.elastic")


def is_oom_text(text: str) -> bool:
    """Does this error text say the GPU ran out of memory (PyTorch's allocator, cuBLAS or NCCL)?"""
    return bool(_OOM.search(text))


def _split(line: str) -> tuple[int | None, str]:
    m = _PREFIX.match(line)
    return (int(m.group(1)), line[m.end() :]) if m else (None, line)


def _first(pattern: re.Pattern, lines: list[str]) -> int | None:
    return next((i for i, ln in enumerate(lines) if pattern.search(ln)), None)


def _rank(raw_line: str, text: str, fallback: re.Pattern | None = None) -> int | None:
    rank, _ = _split(raw_line)
    if rank is None and fallback is not None and (m := fallback.search(text)):
        rank = int(m.group(1))
    return rank


def _tail(lines: list[str], end: int) -> str:
    """The traceback leading to line `end`: from its 'Traceback' header, at most TRACEBACK_LINES
    lines."""
    start = max(0, end - TRACEBACK_LINES + 1)
    for i in range(end, start - 1, -1):
        if lines[i].lstrip().startswith("Traceback (most recent call last)"):
            start = i
            break
    return "\n".join(lines[start : end + 1])


def _continuation(raw: list[str], i: int) -> list[str]:
    """The further lines of a multi-line exception message printed at raw[i] (same rank prefix)."""
    rank, out = _split(raw[i])[0], []
    for line in raw[i + 1 : i + 1 + TRACEBACK_LINES]:
        r, body = _split(line)
        if r != rank or not body.strip() or _LOG_LINE.match(body):
            break
        out.append(body.strip())
    return out


def _gib(m: re.Match | None) -> float | None:
    """GiB from a (number, unit) match of the allocator's message."""
    return round(float(m.group(1)) * _UNITS[m.group(2)], 3) if m else None


def _oom_message(rank, text: str) -> tuple[str, float | None]:
    m = _ALLOC.search(text)
    where = f" on rank {rank}" if rank is not None else ""
    what = f" (tried to allocate {m.group(1)} {m.group(2)})" if m else ""
    return f"CUDA out of memory{where}{what}", _gib(m)


def oom_held_gib(text: str) -> float | None:
    """GiB that PyTorch held when an allocation failed, from the allocator's message ("Of the
    allocated memory X GiB is allocated by PyTorch"): what the run had built up, where `alloc_gib`
    is only the last request."""
    return _gib(_HELD.search(text or ""))


def oom_cached_gib(text: str) -> float | None:
    """GiB the allocator held in its cache but could not hand out when an allocation failed, from
    its message ("X GiB is reserved by PyTorch but unallocated"): free memory in pieces too small
    for the request."""
    return _gib(_CACHED.search(text or ""))


def _reported(e: dict) -> dict:
    """The error dict for a structured {"kind": "error"} line of the trainer."""
    text = str(e.get("message") or "")
    rank = e.get("rank")
    if e.get("status") == "oom":
        if rank is None and (m := _GPU.search(text)):
            rank = int(m.group(1))
        message, alloc = _oom_message(rank, text)
        # the innermost frames, where the trainer gives them
        where = {"where": e["where"]} if e.get("where") else {}
        return {"message": message, "rank": rank, "alloc_gib": alloc, "detail": text, **where}
    return {
        "message": text.splitlines()[0] if text else e.get("status"),
        "rank": rank,
        "detail": text,
    }


def classify_failure(
    log_text: str, returncode: int | None, timed_out: bool = False
) -> tuple[str, dict | None]:
    """(status, error) for a finished run; ("ok", None) when it exited 0 in time.

    Root cause first: an invalid layout, then an out-of-memory on any rank (the other ranks then
    fail in collectives, so NCCL errors are usually the echo of an OOM), then NCCL errors, then the
    time limit, then any other exception.
    """
    if returncode == 0 and not timed_out:
        return "ok", None
    raw = log_text.splitlines()
    errors = [e for e in (parse_line(ln) for ln in raw) if e and e["kind"] == "error"]
    for status in ("invalid", "oom"):  # the trainer said what went wrong: trust it over the text
        if (e := next((e for e in errors if e.get("status") == status), None)) is not None:
            return status, _reported(e)
    raw = [ln for ln in raw if parse_line(ln) is None]
    lines = [_split(ln)[1] for ln in raw]
    if (i := _first(_INVALID, lines)) is not None:
        message = _INVALID.search(lines[i]).group(1).strip() or "invalid layout"
        return "invalid", {
            "message": message,
            "rank": _split(raw[i])[0],
            "detail": "\n".join([message, *_continuation(raw, i)]),
        }
    if (i := _first(_OOM, lines)) is not None:
        line = lines[i].strip()
        rank = _rank(raw[i], line, _GPU)
        message, alloc = _oom_message(rank, line)
        return "oom", {
            "message": message,
            "rank": rank,
            "alloc_gib": alloc,
            "detail": _tail(lines, i),
        }
    if (i := _first(_NCCL, lines)) is not None:
        line = lines[i].strip()
        return "nccl_error", {
            "message": _GLOG.sub("", line)[:300],
            "rank": _rank(raw[i], line, _RANK_WORD),
            "detail": "\n".join(lines[i : i + TRACEBACK_LINES]),
        }
    tail = "\n".join(lines[-TRACEBACK_LINES:])
    if timed_out:
        return "timeout", {
            "message": "the run passed its time limit and was stopped",
            "rank": None,
            "detail": tail,
        }
    exc = [
        j
        for j, ln in enumerate(lines)
        if _EXC.match(ln.strip()) and not any(n in ln for n in _TORCHRUN_NOISE)
    ]
    root = re.search(_ROOT_RANK, log_text)
    if exc:
        j = exc[-1]
        rank = _split(raw[j])[0]
        return "failed", {
            "message": lines[j].strip()[:300],
            "rank": rank if rank is not None else (int(root.group(1)) if root else None),
            "detail": _tail(lines, j),
        }
    signal = (
        f" (killed by signal {-returncode})"
        if isinstance(returncode, int) and returncode < 0
        else ""
    )
    return "failed", {
        "message": f"the trainer exited with code {returncode}{signal}",
        "rank": int(root.group(1)) if root else None,
        "detail": tail,
    }


# -- profiler traces -------------------------------------------------------------------------------
KERNEL_CATEGORIES = ("nccl", "gemm", "attention", "other")
TIMELINE_COLUMNS = ["category", "start_ms", "duration_ms", "stream"]


def kernel_category(kernel: str) -> str:
    """nccl (communication), gemm (matrix multiplies), attention (flash / fused attention), or
    other."""
    k = kernel.lower()
    return (
        "nccl"
        if "nccl" in k
        else "attention"
        if any(s in k for s in ("flash", "fmha", "attn", "sdpa", "softmax"))
        else "gemm"
        if any(s in k for s in ("gemm", "cutlass", "nvjet", "xmma", "cublas"))
        else "other"
    )


def _step_kernels(trace, step: int) -> list:
    """Kernel events that start inside the ProfilerStep#<step> window of a Chrome trace, by start
    time."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    window = [e for e in events if e.get("name") == f"ProfilerStep#{step}" and "dur" in e]
    if not window:
        raise ValueError(f"no ProfilerStep#{step} in the trace: profile that step")
    t0, t1 = window[0]["ts"], window[0]["ts"] + window[0]["dur"]
    return sorted(
        (e for e in events if e.get("cat") == "kernel" and t0 <= e.get("ts", -1) <= t1),
        key=lambda e: e["ts"],
    )


def kernel_seconds(trace: dict, steps) -> dict:
    """Seconds of GPU kernels per step by category, averaged over `steps`, from the kernel events of
    a Chrome trace. (torch's key_averages() also counts profiler annotations such as ProfilerStep#N
    and nccl:* ranges as device time, pytorch#130730: records made before this function
    over-count.)"""
    steps = list(steps)
    out = dict.fromkeys(KERNEL_CATEGORIES, 0.0)
    for step in steps:
        for e in _step_kernels(trace, step):
            out[kernel_category(e["name"])] += e.get("dur", 0) / 1e6 / len(steps)
    return out


def kernel_timeline(trace: dict, step: int) -> dict:
    """The GPU kernels of one profiled step from a Chrome trace (torch.profiler's export): kernels
    that start inside the step's `ProfilerStep#<step>` window, as [category, start_ms, duration_ms,
    stream], times relative to the first kernel. Small enough (a few thousand rows) to keep in a
    record."""
    kernels = _step_kernels(trace, step)
    first = kernels[0]["ts"] if kernels else 0
    rows = [
        [
            kernel_category(e["name"]),
            round((e["ts"] - first) / 1e3, 4),
            round(e.get("dur", 0) / 1e3, 4),
            (e.get("args") or {}).get("stream"),
        ]
        for e in kernels
    ]
    return {"step": step, "columns": TIMELINE_COLUMNS, "kernels": rows}


# -- python -X importtime --------------------------------------------------------------------------
_IMPORTTIME = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| *(\S+)")  # self | cumulative | module


def import_times(text: str | Iterable[str]) -> dict[str, float]:
    """{module: cumulative seconds} from `python -X importtime` output (stderr; other lines
    ignored).

    Cumulative time includes the module's own imports, so a package's entry is what importing it
    cost at the point where it was first imported. Where a module appears twice, the larger entry
    wins.
    """
    lines = text.splitlines() if isinstance(text, str) else text
    out: dict[str, float] = {}
    for line in lines:
        m = _IMPORTTIME.match(line)
        if m:
            out[m.group(2)] = max(out.get(m.group(2), 0.0), int(m.group(1)) / 1e6)
    return out
