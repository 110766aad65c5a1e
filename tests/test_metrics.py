"""metrics.py: the trainer's JSON lines, the warm-up policy, and failure classification.

Runs over every log in tests/data: hand-made fixtures (handmade_*.txt) now, real logs captured on
the GPU host (log_ok.txt, log_oom*.txt, log_nccl_timeout.txt) -- the same assertions apply.
"""

import json
import math
from pathlib import Path

import pytest

from megalab import metrics

DATA = Path(__file__).parent / "data"
OK_LOGS = sorted(DATA.glob("*log_ok*.txt"))
OOM_LOGS = sorted(DATA.glob("*log_oom*.txt"))


def _step(i, t=0.4, loss=None, **kw):
    return {
        "kind": "step",
        "step": i,
        "loss": 10.0 - i if loss is None else loss,
        "step_time_s": t,
        "tokens_per_s": 1000 / t,
        "tflops_per_gpu": 100 / t,
        "mfu": 0.1 / t,
        "mem_allocated_peak_gib": 1.0 + i,
        "mem_reserved_peak_gib": 2.0 + i,
        **kw,
    }


def test_fixtures_are_marked():
    for path in DATA.glob("handmade_*.txt"):
        assert path.read_text().startswith("# HAND-MADE FIXTURE: replace with a real captured log")
    assert OK_LOGS and OOM_LOGS


# -- parse_line ------------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["", "[rank0]: ", "[rank3]:", "[default0]:", "  garbage >> "])
def test_parse_line_tolerates_prefix(prefix):
    line = prefix + json.dumps(_step(5)) + "\r"
    assert metrics.parse_line(line)["step"] == 5


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain text",
        "{not json",
        '{"step": 1, "loss": 2.0}',
        '{"kind": "other"}',
        "[1, 2]",
        "Namespace(a={'x': 1})",
        '["kind", "step"]',
    ],
)
def test_parse_line_ignores_non_metrics(line):
    assert metrics.parse_line(line) is None


def test_parse_log_string_or_lines_dedupes_and_sorts():
    lines = [
        json.dumps({"kind": "budget", "world_size": 2}),
        json.dumps(_step(1)),
        "noise",
        "[rank1]: " + json.dumps(_step(0)),
        json.dumps(_step(1)),
        json.dumps({"kind": "summary", "steps": 2}),
    ]
    for log in ("\n".join(lines), iter(lines)):
        p = metrics.parse_log(log)
        assert p.budget == {"kind": "budget", "world_size": 2}
        assert [s["step"] for s in p.steps] == [0, 1]
        assert p.summary["steps"] == 2


# -- summarize -------------------------------------------------------------------------------------
def test_summarize_drops_warmup_and_takes_median():
    steps = [_step(0, 5.0), _step(1, 3.0), _step(2, 2.0)] + [
        _step(i, t) for i, t in zip(range(3, 8), [0.4, 0.5, 0.41, 9.0, 0.42])
    ]
    s = metrics.summarize(steps)
    assert s["step_time_s"] == pytest.approx(0.42)  # median of 0.4 0.5 0.41 9.0 0.42
    assert s["tokens_per_s"] == pytest.approx(1000 / 0.42)
    assert s["mem_reserved_peak_gib"] == 9.0  # max over all steps, warm-up included
    assert (s["loss_first"], s["loss_last"], s["steps"]) == (10.0, 3.0, 8)
    assert s["warmup_policy"] == f"drop_first_{metrics.WARMUP_STEPS}"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_summarize_short_runs_use_last_half(n):
    steps = [_step(i, float(10 - i)) for i in range(n)]
    s = metrics.summarize(steps)
    assert s["warmup_policy"] == "last_half"
    tail = [10.0 - i for i in range(n // 2, n)]
    assert s["step_time_s"] == pytest.approx(
        sorted(tail)[len(tail) // 2] if len(tail) % 2 else sum(tail) / 2
    )


def test_summarize_empty_and_missing_fields():
    assert metrics.summarize([])["step_time_s"] is None
    s = metrics.summarize([{"kind": "step", "step": i, "loss": float("nan")} for i in range(5)])
    assert s["mfu"] is None and s["steps"] == 5


# -- real (or hand-made) logs ----------------------------------------------------------------------
@pytest.mark.parametrize("path", OK_LOGS, ids=lambda p: p.name)
def test_ok_log(path):
    text = path.read_text()
    p = metrics.parse_log(text)
    assert p.budget and p.budget["world_size"] >= 1 and p.budget["config"]
    assert len(p.steps) > metrics.WARMUP_STEPS
    assert p.summary and p.summary["env"]["gpu_name"]
    s = metrics.summarize(p.steps)
    for name in metrics.MEDIAN_FIELDS + metrics.PEAK_FIELDS:
        assert s[name] is not None and math.isfinite(s[name]) and s[name] > 0, name
    assert 0 < s["mfu"] < 1
    assert s["step_time_s"] < p.steps[0]["step_time_s"]  # the first step pays the warm-up
    assert metrics.classify_failure(text, 0, False) == ("ok", None)


@pytest.mark.parametrize("path", OOM_LOGS, ids=lambda p: p.name)
def test_oom_log(path):
    status, error = metrics.classify_failure(path.read_text(), 1, False)
    assert status == "oom"
    assert isinstance(error["rank"], int)
    assert error["alloc_gib"] > 0
    assert "out of memory" in error["message"]
    assert "OutOfMemoryError" in error["detail"] or "out of memory" in error["detail"]


def test_handmade_oom_details():
    _, error = metrics.classify_failure((DATA / "handmade_log_oom.txt").read_text(), 1, False)
    assert error["rank"] == 1 and error["alloc_gib"] == 2.0
    assert error["message"] == "CUDA out of memory on rank 1 (tried to allocate 2.00 GiB)"


def test_oom_rank_from_gpu_without_prefix():
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a "
        "total capacity"
    )
    status, error = metrics.classify_failure(text, 1, False)
    assert status == "oom" and error["rank"] == 3 and error["alloc_gib"] == 0.5


def test_oom_wins_over_the_nccl_errors_it_causes():
    text = (
        (DATA / "handmade_log_nccl.txt").read_text()
        + "\n"
        + "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 "
        "has ..."
    )
    assert metrics.classify_failure(text, 1, True)[0] == "oom"


def test_nccl_watchdog():
    status, error = metrics.classify_failure((DATA / "handmade_log_nccl.txt").read_text(), 1, False)
    assert status == "nccl_error" and error["rank"] == 2
    assert error["message"].startswith("[Rank 2] Watchdog caught collective operation timeout")


def test_real_nccl_timeout_log():
    """A real NCCL timeout on 2 H200s (tools/gpu/nccl_timeout.py: rank 1 skips an all-reduce, 15 s
    timeout): the watchdog on rank 0 is the root cause; rank 1's flight-recorder lines and the C++
    frames are echoes."""
    status, error = metrics.classify_failure((DATA / "log_nccl_timeout.txt").read_text(), 1, False)
    assert status == "nccl_error" and error["rank"] == 0
    assert error["message"].startswith("[Rank 0] Watchdog caught collective operation timeout")
    assert "OpType=ALLREDUCE" in error["message"] and "Timeout(ms)=15000" in error["message"]


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        "torch.distributed.DistBackendError: NCCL error in: ..., ncclInternalError",
    ],
)
def test_nccl_errors(line):
    assert metrics.classify_failure("[rank1]: " + line, 1, False)[0] == "nccl_error"


def test_failed_gives_last_exception_and_traceback():
    status, error = metrics.classify_failure(
        (DATA / "handmade_log_failed.txt").read_text(), 1, False
    )
    assert status == "failed"  # the benign ProcessGroupNCCL shutdown warning is not an NCCL error
    assert error["message"] == "AssertionError: torch.Size([4, 512])" and error["rank"] == 0
    lines = error["detail"].splitlines()
    assert len(lines) <= metrics.TRACEBACK_LINES and lines[-1] == error["message"]


def test_invalid_layout_reasons():
    status, error = metrics.classify_failure(
        (DATA / "handmade_log_invalid.txt").read_text(), 1, False
    )
    assert status == "invalid"
    assert error["message"].startswith("heads=16 must be divisible by tp=3")
    assert error["detail"].splitlines()[1].startswith("gpus=3 is not divisible")
    assert len(error["detail"].splitlines()) == 2


def test_timeout_and_bare_failures():
    assert metrics.classify_failure("step 3\nstep 4", None, True)[0] == "timeout"
    status, error = metrics.classify_failure("no exception printed", -9, False)
    assert status == "failed" and "signal 9" in error["message"]


# -- structured error lines of the trainer ---------------------------------------------------------
def test_structured_oom_line():
    msg = (
        "CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 139.81 GiB "
        "of "
        "which 1.2 GiB is free."
    )
    log = "\n".join(
        [
            json.dumps(_step(0)),
            json.dumps(
                {
                    "kind": "error",
                    "status": "oom",
                    "rank": 2,
                    "error_type": "OutOfMemoryError",
                    "message": msg,
                }
            ),
            "W1121 torch/distributed/elastic/multiprocessing/api.py:908] Sending process 1 "
            "closing signal",
        ]
    )
    assert len(metrics.parse_log(log).errors) == 1
    status, error = metrics.classify_failure(log, 1, False)
    assert (
        status == "oom"
        and error["rank"] == 2
        and error["alloc_gib"] == 3.5
        and error["detail"] == msg
    )


def test_an_oom_record_keeps_where_it_ran_out():
    """A real log (session 13): megatron-core's MLP checkpoint re-entering its own backward without
    end; the trainer's innermost frames say so, and the record keeps them."""
    status, error = metrics.classify_failure(
        (DATA / "log_oom_mlp_recompute.txt").read_text(), 1, False
    )
    assert status == "oom" and error["alloc_gib"] == pytest.approx(0.047)
    assert any(
        "tensor_parallel/random.py" in frame and "backward" in frame for frame in error["where"]
    )
    assert (
        metrics.oom_held_gib(error["detail"]) == 127.68
        and metrics.oom_held_gib("no allocator message") is None
    )


def test_a_peer_oom_keeps_the_allocators_numbers():
    """A real log (session 24): Megatron-LM's pretrain_gpt.py, gpt2-xl at micro-batch 19 on one
    H100, out of memory in its third step's backward: the request, what PyTorch held and what its
    cache held unusable."""
    status, error = metrics.classify_failure(
        (DATA / "peer" / "gpt2-xl_mbs19_oom_peer.log").read_text(), 1, False
    )
    assert status == "oom" and error["rank"] == 0 and error["alloc_gib"] == pytest.approx(0.15)
    assert (
        metrics.oom_held_gib(error["detail"]) == 73.13
        and metrics.oom_cached_gib(error["detail"]) == 3.48
    )
    assert metrics.oom_cached_gib("no allocator message") is None


def test_structured_invalid_line_keeps_every_reason():
    reasons = (
        "tp=3 does not divide heads=16: pick tp from 1, 2, 4, 8, 16\ngpus=2 is not "
        "divisible by tp*pp*cp=3"
    )
    log = "\n".join(
        [
            json.dumps({"kind": "error", "status": "invalid", "message": reasons}),
            "InvalidLayout: " + reasons.splitlines()[0],
        ]
    )
    status, error = metrics.classify_failure(log, 2, False)
    assert (
        status == "invalid"
        and error["message"] == reasons.splitlines()[0]
        and error["detail"] == reasons
    )


def test_params_lines_of_a_dry_run():
    log = "\n".join(
        json.dumps(
            {
                "kind": "params",
                "rank": r,
                "tp_rank": r,
                "pp_rank": 0,
                "ep_rank": 0,
                "params": 100 + r,
                "init_checksum": None,
            }
        )
        for r in range(2)
    )
    assert [p["params"] for p in metrics.parse_log(log).params] == [100, 101]


def test_real_failed_log_names_the_exception():
    """log_failed.txt: captured on the 4xH200 host (megatron-core 0.16.1 MoE router without TE,
    fixed since)."""
    text = (DATA / "log_failed.txt").read_text()
    status, error = metrics.classify_failure(text, 1, False)
    assert status == "failed"
    assert "te_general_gemm" in error["message"]


def test_kernel_timeline_keeps_one_profiled_step():
    """From a Chrome trace: kernels inside ProfilerStep#7's window, categorised, times from the
    first."""
    trace = {
        "traceEvents": [
            {"name": "ProfilerStep#6", "ph": "X", "ts": 0, "dur": 1000, "cat": "user_annotation"},
            {
                "name": "ProfilerStep#7",
                "ph": "X",
                "ts": 1000,
                "dur": 1000,
                "cat": "user_annotation",
            },
            {
                "name": "sm90_xmma_gemm_bf16",
                "cat": "kernel",
                "ts": 500,
                "dur": 100,
                "args": {"stream": 7},
            },
            {
                "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                "cat": "kernel",
                "ts": 1300,
                "dur": 50,
                "args": {"stream": 23},
            },
            {
                "name": "nvjet_hsh_128x256",
                "cat": "kernel",
                "ts": 1100,
                "dur": 200,
                "args": {"stream": 7},
            },
            {
                "name": "flash_fwd_kernel",
                "cat": "kernel",
                "ts": 2500,
                "dur": 10,
                "args": {"stream": 7},
            },
        ]
    }
    t = metrics.kernel_timeline(trace, 7)
    assert t["step"] == 7 and t["columns"] == ["category", "start_ms", "duration_ms", "stream"]
    assert t["kernels"] == [["gemm", 0.0, 0.2, 7], ["nccl", 0.2, 0.05, 23]]
    with pytest.raises(ValueError, match="ProfilerStep#9"):
        metrics.kernel_timeline(trace, 9)


@pytest.mark.parametrize(
    "name, kind",
    [
        ("ncclKernel_AllGather", "nccl"),
        ("cutlass_80_tensorop", "gemm"),
        ("fmha_cutlassF", "attention"),
        ("flash_bwd", "attention"),
        ("vectorized_elementwise_kernel", "other"),
    ],
)
def test_kernel_category(name, kind):
    assert metrics.kernel_category(name) == kind


def test_kernel_seconds_count_kernels_only():
    """Profiler annotations (ProfilerStep#N, nccl:all_reduce ranges) are not kernels: not
    counted."""
    trace = {
        "traceEvents": [
            {
                "name": "ProfilerStep#5",
                "ph": "X",
                "ts": 0,
                "dur": 1000,
                "cat": "gpu_user_annotation",
            },
            {"name": "ProfilerStep#5", "ph": "X", "ts": 0, "dur": 1000, "cat": "user_annotation"},
            {
                "name": "ProfilerStep#6",
                "ph": "X",
                "ts": 1000,
                "dur": 1000,
                "cat": "user_annotation",
            },
            {"name": "nccl:all_reduce", "cat": "gpu_user_annotation", "ts": 100, "dur": 500},
            {
                "name": "ncclDevKernel_AllReduce",
                "cat": "kernel",
                "ts": 200,
                "dur": 100,
                "args": {"stream": 23},
            },
            {
                "name": "sm90_xmma_gemm",
                "cat": "kernel",
                "ts": 1200,
                "dur": 300,
                "args": {"stream": 7},
            },
        ]
    }
    s = metrics.kernel_seconds(trace, [5, 6])
    assert s == {"nccl": 50e-6, "gemm": 150e-6, "attention": 0.0, "other": 0.0}


def test_import_times_from_the_hosts_profile():
    """The import profile captured on the 4xH200 host (results/probes, lines >= 50 ms kept)."""
    from megalab.machine.env import repo_root

    text = (repo_root() / "results/probes/importtime-torch-megatron-te.txt").read_text()
    t = metrics.import_times(text)
    # TE, then JAX inside Megatron's import
    assert t["megatron.core"] > t["transformer_engine"] > t["jax"] > 0.5
    assert 2.0 < t["torch"] < 6.0
    assert metrics.import_times(
        ["noise", "import time:       514 |    9856107 | megatron.core"]
    ) == {"megatron.core": 9.856107}


def test_nccl_allocation_failure_is_oom():
    """A real fit probe on one H200 (gpt-1.2b, mbs 30): the GPU was full when NCCL asked for 4
    bytes, and the log says "NCCL error ... unhandled cuda error ... Failed to CUDA calloc async 4
    bytes". Out of memory: the fit must read it as "does not fit", not as a crash that says nothing
    about memory."""
    text = (DATA / "log_nccl_alloc.txt").read_text()
    status, error = metrics.classify_failure(text, 1, False)
    assert status == "oom" and error["message"].startswith("CUDA out of memory")
    assert "Failed to CUDA calloc" in error["detail"]
    assert metrics.is_oom_text(text) and not metrics.is_oom_text(
        (DATA / "log_nccl_timeout.txt").read_text()
    )
