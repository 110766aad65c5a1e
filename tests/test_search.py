"""search.py: the layout search keeps what Megatron's rules allow and theory says fits, ranked by
predicted time."""

import json
import re

import pytest

from megalab import cli, theory
from megalab.runs import presets
from megalab.predict import search
from megalab.runs.config import InvalidLayout
from megalab.jobs.running import Store

GPT8 = presets.get("gpt-8.3b")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty results store (no bench records: the datasheet rates), also the CLI's default."""
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path))
    return Store(tmp_path)


def _bench(store, **row):
    with open(store.path("bench"), "a") as f:
        f.write(json.dumps({"kind": "bench", "env": {"gpu_name": "NVIDIA H200"}, **row}) + "\n")


def test_every_candidate_is_valid_fits_and_is_counted(store):
    found = search.search(GPT8, 4, gbs=32, seq=2048, top=None, store=store)
    assert found.ranked == len(found) > 0
    assert (
        found.enumerated == found.invalid + found.too_big + found.ranked
        and found.invalid
        and found.too_big
    )
    for c in found:
        assert c.cfg.problems() == [] and c.cfg.validate() is c.cfg
        assert (
            theory.memory(c.cfg, "H200")["fits"]
            and c.mem_gib == theory.memory(c.cfg, "H200")["total"]
        )
        assert (c.cfg.gpus, c.cfg.gbs, c.cfg.seq) == (
            4,
            32,
            2048,
        ) and c.cfg.tp * c.cfg.pp * c.cfg.cp * c.cfg.dp == 4
        assert (c.cfg.layers, c.cfg.hidden, c.cfg.heads) == (GPT8.layers, GPT8.hidden, GPT8.heads)


def test_a_layout_the_rules_refuse_never_appears(store):
    """gpt-small has 12 heads: tp=8 does not divide them (TransformerConfig), so 8 GPUs never see
    tp=8."""
    found = search.search(presets.get("gpt-small"), 8, gbs=16, top=None, store=store)
    assert found.invalid and {c.cfg.tp for c in found} == {1, 2, 4}
    assert all(c.cfg.tp > 1 for c in found if c.cfg.sp)
    # interleaving's rule
    assert all(c.cfg.num_microbatches % c.cfg.pp == 0 for c in found if c.cfg.vpp > 1)
    pinned = search.search(presets.get("gpt-small"), 8, gbs=16, tp=8, store=store)
    assert len(pinned) == 0 and pinned.invalid == pinned.enumerated > 0


def test_memory_filter_follows_theory_on_one_gpu(store):
    """gpt-8.3b on one H200: 18 bytes per parameter leave no room for a micro-batch's activations
    unless full recompute keeps only each layer's input (theory.memory); gpt-22b does not fit at
    all."""
    found = search.search(GPT8, 1, gbs=32, seq=2048, top=None, store=store)
    fits = {
        (mbs, rc)
        for mbs in (1, 2, 4, 8, 16, 32)
        for rc in search.RECOMPUTE
        if theory.memory(GPT8.replace(seq=2048, gbs=32, mbs=mbs, recompute=rc), "H200")["fits"]
    }
    assert {(c.cfg.mbs, c.cfg.recompute) for c in found} == fits
    assert fits and {rc for _, rc in fits} == {"full"}
    assert found.too_big == found.enumerated - len(fits) and found.invalid == 0
    none = search.search(presets.get("gpt-22b"), 1, gbs=8, store=store)
    assert len(none) == 0 and none.too_big == none.enumerated
    assert "no layout of gpt-22b is predicted to fit on 1x H200" in none.table()


def test_ranked_by_predicted_step_time_deterministically(store):
    first = search.search(GPT8, 8, gbs=32, seq=2048, top=50, store=store)
    again = search.search(GPT8, 8, gbs=32, seq=2048, top=50, store=store)
    assert [c.cfg for c in first] == [c.cfg for c in again] and first.frame().equals(again.frame())
    times = [c.step_s for c in first]
    assert times == sorted(times) and [c.rank for c in first] == list(range(1, 51))
    assert first[0].why == "" and all(c.why for c in first[1:])
    # the split is step_time_estimate's, at the datasheet rates (the store holds no bench)
    for c in first:
        est = theory.step_time_estimate(c.cfg, "H200")
        assert c.step_s == est["total_s"] and c.mfu == est["mfu"]
        assert c.compute_s + c.bubble_s + c.comm_s == pytest.approx(c.step_s)
        assert sum(c.comm_by_axis_s.values()) == pytest.approx(c.comm_s)
    assert "datasheet" in first.rates


def test_why_names_the_term_that_loses(store):
    found = search.search(
        GPT8,
        4,
        gbs=32,
        seq=2048,
        tp=1,
        pp=4,
        vpp=(1, 6),
        cp=1,
        mbs=1,
        dist_opt=False,
        top=None,
        store=store,
    )
    why = {(c.cfg.vpp, c.cfg.recompute): c.why for c in found}
    assert why[(6, "none")] == ""
    # in all: net of its fewer sends
    assert re.fullmatch(r"bubble \+\d+ ms(, \+\d+ ms in all)?", why[(1, "none")])
    # the step it loses by, where other terms add to the largest
    assert re.fullmatch(
        r"recompute \+3\d% FLOPs \(\+\d+ ms\)(, \+\d+ ms in all)?", why[(6, "full")]
    )
    mbs = search.search(
        GPT8, 2, gbs=32, seq=2048, tp=1, pp=1, cp=1, recompute="full", dist_opt=True, store=store
    )
    # mbs does not change the estimate
    assert re.fullmatch(r"same time, needs \d+\.\d GiB more", mbs[1].why)


def test_measured_rates_rank_when_recorded_on_this_gpu_model(store):
    _bench(store, bench="matmul", dtype="bf16", m=8192, tflops=500.0, gpus=1)
    _bench(
        store,
        bench="matmul",
        dtype="bf16",
        m=8192,
        tflops=900.0,
        gpus=1,
        env={"gpu_name": "NVIDIA H100 80GB HBM3"},
    )
    _bench(
        store,
        bench="nccl",
        op="all_reduce",
        dtype="bf16",
        gpus=2,
        size_bytes=1 << 30,
        busbw_gbs=100.0,
    )
    found = search.search(GPT8, 4, gbs=32, seq=2048, top=5, store=store)
    assert (
        "matmul 500 TFLOP/s measured" in found.rates
        and "bus 100 GB/s measured (all-reduce over 2 GPUs" in found.rates
    )
    for c in found:
        assert (
            c.step_s
            == theory.step_time_estimate(c.cfg, "H200", matmul_tflops=500.0, bus_bw=100.0)[
                "total_s"
            ]
        )


def test_a_recorded_layout_is_marked_measured(store):
    from run_records import record

    best = search.search(GPT8, 2, gbs=32, seq=2048, top=3, store=store)
    assert not any(c.measured for c in best)
    # iters do not change a step
    store.append(record(best[1].cfg.replace(iters=20)))
    # another GPU model: not this search's
    store.append(record(best[2].cfg, gpu="NVIDIA H100 80GB HBM3"))
    marked = search.search(GPT8, 2, gbs=32, seq=2048, top=3, store=store)
    assert [c.measured for c in marked] == [False, True, False] and marked[
        1
    ].measured_s == pytest.approx(0.5)
    assert marked.frame()["measured"].tolist() == [False, True, False]


def test_limits_and_the_model_are_checked(store):
    with pytest.raises(
        search.UnknownAxis, match="the search does not vary tpp: limit one of tp, pp"
    ):
        search.search(GPT8, 2, gbs=8, tpp=2, store=store)
    with pytest.raises(InvalidLayout, match="gpus=0 must be at least 1"):
        search.search(GPT8, 0, gbs=8, store=store)
    with pytest.raises(InvalidLayout, match="heads=7 does not divide hidden"):
        search.search(GPT8.replace(heads=7), 2, gbs=8, store=store)
    assert {c.cfg.tp for c in search.search(GPT8, 4, gbs=8, tp=2, top=None, store=store)} == {2}


def test_moe_models_search_expert_parallelism(store):
    found = search.search(presets.get("moe-small"), 4, gbs=8, top=None, store=store)
    assert {c.cfg.ep for c in found} > {1} and all(c.cfg.sp for c in found if c.cfg.tp > 1)
    assert {c.cfg.ep for c in search.search(GPT8, 4, gbs=8, top=None, store=store)} == {1}


def test_cli_prints_the_ranked_table(store, capsys):
    argv = [
        "plan",
        "--search",
        "--preset",
        "gpt-8.3b",
        "--gpus",
        "2",
        "--gbs",
        "32",
        "--seq",
        "2048",
        "--top",
        "4",
    ]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpt-8.3b on 2x H200, gbs 32, seq 2048: ") and "ranked" in out[0]
    assert out[1].startswith("predicted by an uncalibrated roofline")  # said with every ranking
    assert out[2].split()[:3] == ["#", "layout", "mbs"] and out[2].endswith("why not first")
    assert [line.split()[0] for line in out[3:]] == ["1", "2", "3", "4"] and "TP(" in out[3]
    assert cli.main([*argv, "--tp", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["candidates"]) == 4 and all(
        "TP(2)" in c["layout"] for c in shown["candidates"]
    )


def test_a_calibrated_model_ranks_when_given(store, tmp_path):
    """model= ranks by the model's predict(cfg); without it the ranking is the roofline's,
    unchanged."""
    from test_calibration import _synthetic

    from megalab.predict import calibration

    cal = calibration.calibrate(_synthetic(tmp_path / "records"))
    found = search.search(GPT8, 2, gbs=32, seq=2048, top=20, store=store, model=cal)
    for c in found:
        est = cal.predict(c.cfg)
        assert c.step_s == est["total_s"] and c.comm_by_axis_s == est["comm_by_axis_s"]
        assert c.other_s == {"host": est["host_s"], "optimizer": est["optimizer_s"]}
    assert [c.step_s for c in found] == sorted(c.step_s for c in found)
    assert found.rates == cal.summary() and found.table().splitlines()[1] == search.CALIBRATED
    assert {"host_s", "optimizer_s"} <= set(found.frame().columns)
    plain = search.search(GPT8, 2, gbs=32, seq=2048, top=20, store=store)
    assert plain.caveat == search.CAVEAT and "host_s" not in plain.frame().columns
    with pytest.raises(ValueError, match="calibrated on H200, the search is for H100"):
        search.search(GPT8, 2, gpu="H100", gbs=32, seq=2048, store=store, model=cal)


def test_a_recorded_out_of_memory_run_caps_what_the_search_trusts(store):
    """theory.memory under-counted chapter 07's MoE model (EP 2 predicted at 122 GiB ran out of
    memory on a 141 GiB H200): a recorded OOM of the same model on the same GPU model caps the
    search at its prediction. Another model's OOM, another GPU model's and a retracted record leave
    the ranking alone."""
    from run_records import record

    free = search.search(GPT8, 2, gbs=32, seq=2048, top=None, store=store)
    assert free.memory_cap is None and "ran out of memory" not in free.summary()
    mems = sorted(c.mem_gib for c in free)
    # a mid-ranked prediction
    oom = next(c.cfg for c in free if c.mem_gib == mems[len(mems) // 2])
    # another model
    store.append(record(presets.get("gpt2-xl").replace(mbs=64, gbs=64), status="oom"))
    # another card
    store.append(record(oom, status="oom", gpu="NVIDIA H100 80GB HBM3"))
    retracted = record(oom, status="oom")
    store.append(retracted)
    with open(store.root / "errata.jsonl", "a") as f:
        f.write(json.dumps({"ids": [retracted["id"]], "reason": "test"}) + "\n")
    assert search.search(GPT8, 2, gbs=32, seq=2048, top=None, store=store).ranked == free.ranked
    # same model, another batch and sequence
    store.append(record(oom.replace(seq=1024, gbs=16), status="oom"))
    cap = theory.memory(oom.replace(seq=1024, gbs=16), "H200")["total"]
    capped = search.search(GPT8, 2, gbs=32, seq=2048, top=None, store=store)
    assert capped.memory_cap == pytest.approx(cap) and all(c.mem_gib < cap for c in capped)
    assert (
        capped.ranked == sum(m < cap for m in mems)
        and capped.too_big == free.too_big + free.ranked - capped.ranked
    )
    assert f"at or above {cap:.1f} GiB" in capped.summary()
