"""Where does a profiled step's time go? A summary of one step of a torch.profiler Chrome trace.

    python3 tools/gpu/trace_top.py RUN_DIR [--step 7] [--top 15] > RUN_DIR/trace_top.json

Prints one JSON object: the step's wall time, the time at least one kernel was running (busy), the
kernel count, the top kernels by total time (name, calls, ms), and the CUDA runtime calls by total
time (launches, synchronizations, copies: a host that waits on the GPU every layer shows up here),
and the CPU ops by self time. Reads trace_rank0.json
from RUN_DIR (the trainer's --profile writes it; recording tarballs leave it out, so run this on the
host).
"""

import argparse
import collections
import json
import os


def self_times(events, top: int) -> list:
    """CPU ops by self time (their duration minus that of the ops nested in them, thread by thread):
    where the host's time goes, not counting what an op calls."""
    own, calls = collections.Counter(), collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "python_function", "cuda_runtime"):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        stack = []  # open ops: [end, name]
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= e["ts"]:
                stack.pop()
            if stack:
                own[stack[-1][1]] -= e["dur"] / 1e3
            name = e["name"][:90]
            own[name] += e["dur"] / 1e3
            calls[name] += 1
            stack.append([e["ts"] + e["dur"], name])
    return [[name, calls[name], round(ms, 3)] for name, ms in own.most_common(top)]


def summary(trace: dict, step: int, top: int) -> dict:
    events = trace.get("traceEvents", trace)
    window = [e for e in events if e.get("name") == f"ProfilerStep#{step}" and "dur" in e]
    if not window:
        raise SystemExit(f"no ProfilerStep#{step} in the trace")
    t0, t1 = window[0]["ts"], window[0]["ts"] + window[0]["dur"]
    inside = [e for e in events if t0 <= e.get("ts", -1) <= t1 and "dur" in e]
    kernels = sorted((e for e in inside if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    busy, end = 0.0, None
    for e in kernels:  # union of kernel intervals, any stream
        s, f = e["ts"], e["ts"] + e["dur"]
        if end is None or s > end:
            busy += f - s
            end = f
        elif f > end:
            busy += f - end
            end = f

    def table(rows):
        total, calls = collections.Counter(), collections.Counter()
        for e in rows:
            total[e["name"][:90]] += e["dur"] / 1e3
            calls[e["name"][:90]] += 1
        return [[name, calls[name], round(ms, 3)] for name, ms in total.most_common(top)]

    return {
        "cpu_self": self_times(inside, top),
        "step": step,
        "wall_ms": window[0]["dur"] / 1e3,
        "kernel_busy_ms": round(busy / 1e3, 3),
        "kernels": len(kernels),
        "kernel_sum_ms": round(sum(e["dur"] for e in kernels) / 1e3, 3),
        "top_kernels": table(kernels),
        "runtime": table([e for e in inside if e.get("cat") == "cuda_runtime"]),
        "cpu_ops": table([e for e in inside if e.get("cat") == "cpu_op"]),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--step", type=int, default=7)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    with open(os.path.join(a.run_dir, "trace_rank0.json")) as f:
        print(json.dumps(summary(json.load(f), a.step, a.top), indent=1))
