"""step_model.py: the benched rates it reads, and how its terms add up."""

import json

import pytest

from megalab.predict import step_model
from megalab.runs.config import RunConfig
from megalab.jobs.running import Store

CFG = RunConfig(name="t", layers=8, hidden=2048, heads=16, vocab=32768, seq=2048, mbs=1, gbs=8)
C = {
    "gemm_eff": 0.6,
    "gemm_width": 500.0,
    "attn_eff": 0.5,
    "host_layer": 4e-3,
    "comm_call": 200e-6,
    "expert_gemm": 30e-6,
}


def _bench(store, **row):
    with open(store.path("bench"), "a") as f:
        f.write(json.dumps({"kind": "bench", "env": {"gpu_name": "NVIDIA H200"}, **row}) + "\n")


def test_rates_are_the_benched_ones_interpolated_on_log_size(tmp_path):
    store = Store(tmp_path)
    assert step_model.Rates.recorded("H200", store).source == "datasheet"
    _bench(store, bench="matmul", dtype="bf16", m=8192, tflops=780.0, gpus=1)
    for size, bw in ((1 << 20, 20.0), (1 << 24, 200.0)):
        _bench(store, bench="nccl", op="all_reduce", gpus=2, size_bytes=size, busbw_gbs=bw)
    rates = step_model.Rates.recorded("H200", store)
    # HBM not benched: datasheet
    assert rates.matmul_tflops["bf16"] == 780.0 and rates.hbm_bps == 4.8e12
    assert rates.bus_gbs("all_reduce", 2, 1 << 22) == pytest.approx(110.0)  # halfway on log size
    assert (
        rates.bus_gbs("all_reduce", 2, 1 << 10) == 20.0
        and rates.bus_gbs("all_reduce", 2, 1 << 30) == 200.0
    )
    assert rates.bus_gbs("all_reduce", 8, 1 << 24) == 200.0  # the nearest group size benched
    assert rates.bus_gbs("all_to_all", 2, 1 << 24) == 450.0  # not benched: datasheet NVLink


def test_a_small_step_waits_on_the_host_and_a_large_one_on_the_gpu():
    rates = step_model.Rates.recorded("H200", Store("/nonexistent"))
    small = step_model.combine(step_model.parts(CFG, rates), C)
    assert small["host_s"] > 0 and small["total_s"] == pytest.approx(
        8 * 8 * 4e-3 + small["optimizer_s"]
    )
    large = step_model.combine(step_model.parts(CFG.replace(mbs=8, gbs=8), rates), C)
    assert large["host_s"] == 0 and large["compute_s"] > 8 * 4e-3


def test_communication_counts_bytes_and_calls_per_axis():
    rates = step_model.Rates.recorded("H200", Store("/nonexistent"))
    tp = step_model.parts(CFG.replace(gpus=2, tp=2), rates)
    assert (
        tp["tp_calls"] == 2 * 2 * 8 * 8 and tp["tp_s"] > 0 and tp["pp_calls"] == tp["cp_calls"] == 0
    )
    pp = step_model.parts(CFG.replace(gpus=2, pp=2, vpp=2), rates)
    assert pp["pp_calls"] == 2 * 8 * 2 and pp["bubble"] == 0.5
    terms = step_model.combine(pp, C)
    assert terms["comm_by_axis_s"]["pp"] == pytest.approx(pp["pp_s"] + pp["pp_calls"] * 200e-6)


def test_moe_layouts_of_any_ep_and_etp_are_priced():
    """Expert tensor parallelism without EP (ep 1, etp 2) once divided by an all-to-all over one
    GPU."""
    from megalab.predict import calibration, search
    from megalab.runs import presets

    cal = calibration.for_search("H200")
    for gpus in (2, 4):
        found = search.search(presets.get("moe-small"), gpus, gbs=16, seq=2048, model=cal, top=50)
        assert len(found.frame()) and (found.frame()["step_s"] > 0).all()
