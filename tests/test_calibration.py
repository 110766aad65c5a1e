"""calibration.py: the records it may use, a fit that recovers known constants, a split that is
stable and disjoint, and the report on the book's own records."""

import json
import math

import pytest
from run_records import record

from megalab.predict import calibration, step_model
from megalab.runs.config import RunConfig
from megalab.jobs.running import NotRecorded, Store

# known constants, away from step_model's first guesses, in SI units
TRUE = {
    "gemm_eff": 0.8,
    "gemm_width": 800.0,
    "attn_eff": 0.4,
    "host_layer": 2.5e-3,
    "comm_call": 120e-6,
    "expert_gemm": 20e-6,
}
BASE = RunConfig(name="t", layers=8, hidden=2048, heads=16, vocab=32768, seq=2048)


def _layouts() -> list[RunConfig]:
    """Configurations on which every constant binds: GEMM-heavy and attention-heavy steps,
    host-bound small micro-batches, TP, CP and PP runs, and MoE steps."""
    out = []
    # three widths: gemm_width is fitted on them
    for layers, hidden in ((4, 1024), (8, 2048), (12, 4096)):
        c = BASE.replace(layers=layers, hidden=hidden)
        out += [
            c.replace(mbs=8, gbs=8),
            c.replace(mbs=4, gbs=16),
            c.replace(seq=32768, mbs=1, gbs=1),
            c.replace(seq=512, mbs=1, gbs=8),
            c.replace(gpus=2, tp=2, mbs=1, gbs=8),
            c.replace(gpus=2, tp=2, sp=True, mbs=2, gbs=8),
            c.replace(gpus=2, cp=2, seq=8192, mbs=1, gbs=4),
            c.replace(gpus=4, tp=2, pp=2, mbs=1, gbs=8),
            c.replace(gpus=2, mbs=4, gbs=16),
            c.replace(experts=8, topk=2, mbs=2, gbs=4),
            c.replace(experts=16, topk=2, mbs=1, gbs=4),
        ]
    return out


def _synthetic(root, layouts=None, at="2026-01-01T00:00:00Z") -> Store:
    """A store whose step times are the model's own at TRUE (datasheet rates: no bench records)."""
    store = Store(root)
    rates = step_model.Rates.recorded("H200", store)
    for cfg in layouts or _layouts():
        rec = record(cfg, at=at)
        rec["summary"]["step_time_s"] = float(
            step_model.combine(step_model.parts(cfg, rates), TRUE)["total_s"]
        )
        store.append(rec)
    return store


def test_the_fit_recovers_the_constants_it_was_made_from(tmp_path):
    cal = calibration.calibrate(_synthetic(tmp_path))
    got = {c.name: cal.value(c.name) for c in cal.constants}
    assert got == pytest.approx(TRUE, rel=1e-3)
    # every constant was constrained by some record
    assert all(c.records > 0 for c in cal.constants)
    report = cal.report()
    assert report["after_max"].max() < 1e-3 and set(report["set"]) == {"fit", "held out"}
    assert cal.predict(_layouts()[0])["total_s"] == pytest.approx(
        cal.frame()["measured_s"].iloc[0], rel=1e-3
    )


def test_constants_are_stated_in_their_units(tmp_path):
    cal = calibration.calibrate(_synthetic(tmp_path))
    by_name = {c.name: c for c in cal.constants}
    # a handful, each with a reason
    assert list(by_name) == list(step_model.CONSTANTS) and len(by_name) <= 6
    assert by_name["host_layer"].unit == "ms" and by_name["host_layer"].value == pytest.approx(
        2.5, rel=1e-3
    )
    assert by_name["comm_call"].unit == "µs" and by_name["comm_call"].value == pytest.approx(
        120, rel=1e-3
    )
    assert all(c.meaning for c in cal.constants)


def test_the_split_is_deterministic_disjoint_and_covers_every_family(tmp_path):
    layouts = _layouts()
    first = calibration.calibrate(_synthetic(tmp_path / "a", layouts)).frame()
    # written in reverse
    again = calibration.calibrate(_synthetic(tmp_path / "b", layouts[::-1])).frame()
    side = dict(zip(first["key"], first["set"]))
    assert side == dict(zip(again["key"], again["set"])) and len(side) == len(first) == len(layouts)
    assert set(side.values()) == {"fit", "held out"}
    for fam, rows in first.groupby("family"):  # a quarter of each family, rounded up
        assert (rows["set"] == "held out").sum() == math.ceil(len(rows) / 4), fam
    assert set(first["family"]) == {"1 GPU", "DP", "TP", "PP", "CP", "EP"}


def test_only_usable_records_count_and_the_newest_wins(tmp_path):
    store = Store(tmp_path)
    cfg = BASE.replace(mbs=2, gbs=4)
    store.append(record(cfg, at="2026-01-01T00:00:00Z"))
    # iters aside: same config
    newest = store.append(record(cfg.replace(iters=10), at="2026-01-02T00:00:00Z"))
    skipped = [
        record(cfg.replace(layers=2), tags=["packed"]),
        record(cfg.replace(layers=3), tags=["profile"]),
        record(cfg.replace(layers=5), status="oom"),
        record(cfg.replace(layers=6), gpu="NVIDIA H100 80GB HBM3"),
        record(cfg.replace(layers=7, compile=False)),
        record(cfg.replace(layers=9, impl="local")),
        # a graph removes the host floor it fits
        record(cfg.replace(layers=11, cuda_graphs="te")),
        # a repeat made for another comparison
        record(cfg.replace(layers=12), tags=["graphs"]),
        # the peer pairs' unfused weight-gradient add, which the model does not price
        record(cfg.replace(layers=13, grad_accum_fusion="off")),
    ]
    for rec in skipped:
        store.append(rec)
    retracted = store.append(record(cfg.replace(layers=10)))
    with open(tmp_path / "errata.jsonl", "w") as f:
        f.write(json.dumps({"ids": [retracted["id"]], "reason": "test"}) + "\n")
    assert [r["id"] for r in calibration.usable_records(store, "H200")] == [newest["id"]]
    with pytest.raises(NotRecorded, match="1 usable H200 run record"):
        calibration.calibrate(store)


def test_case_runs_and_a_second_hosts_multi_gpu_runs_never_fit(tmp_path):
    """Chapter 07's case runs test the model, so they never fit it; a multi-GPU run of a host whose
    link probe reports another interconnect than most (session 15's 2xH200, 2.2x slower to launch)
    does not replace the reference host's record of the same configuration, nor does a newer warm-up
    run, nor a reader's live reproduction; one-GPU runs count from any host."""
    store = Store(tmp_path)
    env = lambda link: {"gpu_name": "NVIDIA H200", "gpu_count": 2, "interconnect": link}  # noqa: E731
    two = BASE.replace(gpus=2, tp=2, mbs=2, gbs=4)
    ref = [store.append(record(two.replace(layers=n), env=env("NVLink (NV18)"))) for n in (2, 3)]
    # newer, other host
    store.append(record(two.replace(layers=2), env=env("none"), at="2026-01-05T00:00:00Z"))
    one = store.append(record(BASE.replace(mbs=2, gbs=4), env=env("none")))
    store.append(record(BASE.replace(layers=4, mbs=2, gbs=4), tags=["ch07"]))
    # newer, a warm-up
    store.append(record(BASE.replace(mbs=2, gbs=4), tags=["warmup"], at="2026-01-06T00:00:00Z"))
    # newer, a reader's reproduction of a chapter
    reproduced = ["reproduction:01_data_parallel/data_parallel.2gpu.20260107T000000Z.abcd"]
    store.append(record(BASE.replace(mbs=2, gbs=4), tags=reproduced, at="2026-01-07T00:00:00Z"))
    assert calibration.reference_link(store, "H200") == "NVLink (NV18)"
    assert sorted(r["id"] for r in calibration.usable_records(store, "H200")) == sorted(
        r["id"] for r in [*ref, one]
    )


def test_families_name_the_most_specific_axis():
    assert calibration.family(BASE) == "1 GPU"
    assert calibration.family(BASE.replace(gpus=4, mbs=1, gbs=4)) == "DP"
    assert calibration.family(BASE.replace(gpus=4, tp=2, gbs=2)) == "TP"
    assert calibration.family(BASE.replace(gpus=4, tp=2, pp=2)) == "PP"
    assert calibration.family(BASE.replace(gpus=4, pp=2, cp=2)) == "CP"
    assert calibration.family(BASE.replace(experts=8)) == "EP"


def test_the_books_records_calibrate_and_report_held_out_error():
    cal = calibration.calibrate()  # the repository's results store
    report = cal.report()
    held = report[(report["set"] == "held out") & (report["family"] == "all")].iloc[0]
    assert (
        held["n"] > 0
        and math.isfinite(held["after_median"])
        and math.isfinite(held["before_median"])
    )
    assert {"1 GPU", "DP", "TP"} <= set(report["family"])
    assert "held-out median |error|" in cal.summary() and cal.gpu == "H200"
    est = cal.predict(BASE.replace(gpus=2, tp=2, mbs=2, gbs=8))
    terms = ("compute_s", "host_s", "comm_s", "bubble_s", "optimizer_s")
    assert sum(est[t] for t in terms) == pytest.approx(est["total_s"]) and 0 < est["mfu"] < 1
    assert (
        sum(est["comm_by_axis_s"].values()) == pytest.approx(est["comm_s"])
        and est["comm_by_axis_s"]["tp"] > 0
    )


def test_a_held_constant_keeps_its_value_and_constrains_nothing(tmp_path):
    """calibrate(fixed=...): gemm_width 0 is one GEMM efficiency for every width (the model before
    the width term); the other constants are still fitted, and the held one counts no records."""
    store = _synthetic(tmp_path)
    free, held = calibration.calibrate(store), calibration.calibrate(store, fixed={"gemm_width": 0})
    by_name = {c.name: c for c in held.constants}
    assert by_name["gemm_width"].value == 0 and by_name["gemm_width"].records == 0
    assert by_name["host_layer"].records > 0
    assert held.frame()["err_after"].abs().median() > free.frame()["err_after"].abs().median()


# -- one host's constants (calibrate_host) ---------------------------------------------------
HOST = {"host_layer": 1.0e-3, "comm_call": 40e-6, "expert_gemm": 8e-6}  # a faster host's


def _host_env(name: str, cpus: int = 8) -> dict:
    return {"gpu_name": "NVIDIA H200", "gpu_count": 4, "hostname": name, "cpu_count": cpus}


def _host_store(root, constants: dict, layouts=None, host="mine", graphs="none", at="2026-02-01"):
    """A store of one host's runs, timed as the model at `constants` says."""
    store = Store(root)
    rates = step_model.Rates.recorded("H200", store)
    for i, cfg in enumerate(layouts or _layouts()):
        cfg = cfg.replace(cuda_graphs=graphs)
        rec = record(cfg, env=_host_env(host), at=f"{at}T00:00:{i % 60:02d}Z")
        rec["summary"]["step_time_s"] = float(
            step_model.combine(step_model.parts(cfg, rates), constants)["total_s"]
        )
        store.append(rec)
    return store


def test_calibrate_host_refits_the_host_constants_and_keeps_the_gpus(tmp_path):
    book = calibration.calibrate(_synthetic(tmp_path / "book"))  # its constants: TRUE
    mine = _host_store(tmp_path / "mine", {**TRUE, **HOST})
    cal = calibration.calibrate_host(mine, start=book)  # the newest host: "mine"
    got = {c.name: cal.value(c.name) for c in cal.constants}
    assert {n: got[n] for n in HOST} == pytest.approx(HOST, rel=1e-3)
    gpu_side = set(TRUE) - set(calibration.HOST_CONSTANTS)
    assert {n: got[n] for n in gpu_side} == pytest.approx({n: TRUE[n] for n in gpu_side})
    by_name = {c.name: c for c in cal.constants}
    assert all(by_name[n].records == 0 for n in gpu_side) and by_name["host_layer"].records > 0
    assert set(cal.frame()["set"]) == {"fit", "held out"}


def test_host_timings_read_one_host_one_launch_and_the_median_of_repeats(tmp_path):
    store = _host_store(tmp_path, TRUE, _layouts()[:3], host="a")
    cfg = _layouts()[0]
    for t, at in ((1.0, "2026-03-01T00:00:00Z"), (3.0, "2026-03-01T00:01:00Z")):  # graphed, twice
        rec = record(cfg.replace(cuda_graphs="te"), env=_host_env("a"), at=at)
        rec["summary"]["step_time_s"] = t
        store.append(rec)
    store.append(record(cfg.replace(layers=3), env=_host_env("b", 64), at="2026-03-02T00:00:00Z"))
    host_a = "a (8 CPUs, NVIDIA H200)"
    assert len(calibration.host_timings(store, host_a)) == 3
    assert [
        (c.cuda_graphs, t, n) for c, t, n in calibration.host_timings(store, host_a, graphs=True)
    ] == [("te", 2.0, 2)]
    newest = calibration.host_timings(store)  # the newest record's host: b
    assert [c.layers for c, _, _ in newest] == [3]


def test_calibrate_host_refuses_too_few_runs(tmp_path):
    store = _host_store(tmp_path, TRUE, [BASE.replace(mbs=2, gbs=4)])
    with pytest.raises(NotRecorded, match="eager H200 configuration"):
        calibration.calibrate_host(store)


def test_interval_is_the_held_out_ratio_quantiles():
    import pandas as pd

    errs = [-0.5, -0.2, 0.0, 0.25, 1.0]  # measured/predicted: 2, 1.25, 1, 0.8, 0.5
    frame = pd.DataFrame({"set": ["held out"] * 5 + ["fit"], "err_after": errs + [9.0]})
    cal = calibration.Calibration("H200", (), step_model.Rates("H200", {"bf16": 1.0}, 1.0), frame)
    assert cal.interval(1.0) == pytest.approx((0.5, 2.0))
    assert cal.interval(0.0) == pytest.approx((1.0, 1.0))
    lo, hi = calibration.calibrate().interval(0.8)  # the book's records
    assert 0.5 < lo < 1 < hi < 2
