"""The performance page's tables: the comparison group ch02.tp in words, the side-by-side pairs with
Megatron-LM, the fair pair perf.peer, the outside reference of the
megatron-tutorials series, loss parity and startup (the committed records, and small frames made
here)."""

import pandas as pd
import pytest
from megalab.book.chapters import ch00_know_your_machine as ch00
from megalab.book.chapters import performance as perf
from megalab.book.chapters import performance_parity as parity
from megalab.book.chapters import performance_peer as perf_peer
from megalab.records import timings
from megalab.runs import presets


def test_the_published_numbers():
    """vuiseng9/megatron-tutorials, 02-tp-sp.md: weak scaling R1-R3 (209, 273, 310 ms) and strong
    scaling R12 (200 ms), global batch 8 = micro-batch 8, sequence 1024, 8×H100 80 GB."""
    assert perf.TUTORIALS_MS == {
        ("gpt-1.2b", 1): 209.0,
        ("gpt-1.2b", 2): 200.0,
        ("gpt-2.5b", 2): 273.0,
        ("gpt-4.2b", 4): 310.0,
    }
    assert perf.TUTORIALS.startswith("https://github.com/vuiseng9/megatron-tutorials/")
    assert perf.TUTORIALS.endswith("/02-tp-sp.md")


def test_host_per_kernel_divides_what_graphs_remove():
    cost = {"eager_ms": 300.0, "graphs_ms": 100.0}
    assert perf.host_per_kernel(cost, 2000) == pytest.approx(100.0)
    with pytest.raises(ValueError, match="positive"):
        perf.host_per_kernel(cost, 0)


def _frame(rows):
    """A side_by_side-like frame: (cfg, ours_ms, peer_ms, sitting_at)."""
    return pd.DataFrame(
        [
            {
                "cfg": c,
                "ours_ms": o,
                "peer_ms": p,
                "ratio": o / p,
                "ratio_lo": o / p - 0.05,
                "ratio_hi": o / p + 0.05,
                "sitting_at": at,
            }
            for c, o, p, at in rows
        ]
    )


def test_pairs_name_hosts_and_the_fusion():
    base = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=8, gbs=8)
    f = _frame(
        [
            (base, 90.0, 100.0, "2026-01-01T00:00:00Z"),
            (base.replace(cuda_graphs="te"), 40.0, 50.0, "2026-01-03T00:00:00Z"),
            (base, 103.0, 100.0, "2026-01-03T00:00:00Z"),
        ]
    )
    p = perf.pairs({"2 × H100": f}, fusion_from="2026-01-02T00:00:00Z")
    assert list(p["host"]) == [1, 2, 2] and list(p["gpus"].unique()) == ["2 × H100"]
    assert list(p["launch"]) == ["eager", "CUDA graphs", "eager"]
    assert list(p["fusion_equal"]) == [True, False, False]
    assert list(p["apart"]) == [True, True, False]  # 0.98-1.08 crosses 1
    assert set(p["configuration"]) == {"gpt-1.2b, TP 2"}
    fig = perf.pair_bars(p)
    assert [t.name for t in fig.data[:2]] == ["eager", "CUDA graphs"]
    assert list(fig.data[1].y) == ["gpt-1.2b, TP 2, CUDA graphs · 2 × H100 VM 2"]
    assert perf.pair_rows(p)[0] == "gpt-1.2b, TP 2 · 2 × H100 VM 1"


def test_anchor_table_matches_configurations_by_model_and_tp():
    base = presets.get("gpt-4.2b").replace(gpus=4, tp=4, mbs=8, gbs=8)
    f = _frame(
        [
            (base, 400.0, 440.0, "a"),
            (base, 500.0, 540.0, "b"),
            (base.replace(cuda_graphs="te"), 200.0, 220.0, "b"),
            (base.replace(tp=1, cp=4), 600.0, 650.0, "b"),  # not a TP configuration there
        ]
    )
    t = perf.anchor_table({"4 × H200": f})
    assert len(t) == 1
    row = t.iloc[0]
    assert row["configuration"] == "gpt-4.2b, TP 4" and row["tutorials_ms"] == 310.0
    assert (row["peer_eager_lo"], row["peer_eager_hi"]) == (440.0, 540.0)
    assert (row["peer_graphs_ms"], row["ours_graphs_ms"]) == (220.0, 200.0)
    assert 0.1 < row["tutorials_mfu"] < 0.3


# -- the committed records
# --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def group():
    return timings.group(None, "ch02.tp", "H200")


def test_mfu_table_reads_the_group_in_words(group):
    m = perf.mfu_table(group)
    assert len(m) == len(group) and m["configuration"].iloc[0] == "gpt-1.2b, 1 GPU"
    assert set(m["launch"]) == {"eager", "CUDA graphs"}
    assert m["busy"].notna().sum() == 1 and m["busy"].max() > 0.9  # the profiled graphed step
    eager = m[m["launch"] == "eager"]
    assert eager["mfu"].max() < m.loc[m["launch"] != "eager", "mfu"].min()


def test_the_eager_step_spends_far_more_than_a_launch_per_kernel(group):
    runs, prof = timings.group_runs(None, "ch02.tp", "H200")
    from megalab.records.profiles import gpu_busy

    per_kernel = perf.host_per_kernel(ch00.host_cost(group), gpu_busy(prof["profile"])["kernels"])
    assert per_kernel > 5 * ch00.host_probe()["eager_launch_host_us"]


def test_side_by_side_pairs_as_recorded():
    frames = {
        "1 × H200": timings.side_by_side(None, "H200", gpus=1),
        "4 × H200": timings.side_by_side(None, "H200", gpus=4, by_sitting=True),
    }
    p = perf.pairs(frames)
    assert p.loc[p["gpus"] == "1 × H200", "fusion_equal"].all()
    assert not p.loc[p["gpus"] == "4 × H200", "fusion_equal"].any()
    graphed = p[p["launch"] == "CUDA graphs"]
    assert len(graphed) == 2 and (graphed["ratio"] < 1).all()
    t = perf.anchor_table(frames)
    assert list(t["configuration"]) == ["gpt-1.2b, 1 GPU", "gpt-4.2b, TP 4"]


def test_parity_and_startup_from_the_records():
    from megalab import results

    records = results.load()
    checked = parity.parity_checks(records, results.Store().errata())
    table = parity.parity_table(checked)
    assert set(table["verdict"]) <= {"passes", "fails", "set aside", "no reference"}
    stable = parity.stable_parity(checked)
    assert stable and all(p.passes for _, p in stable)
    curves = parity.parity_curves(stable)
    assert next(iter(curves)) == "1 GPU" and len(curves) == len(stable) + 1
    te = parity.stable_parity(checked, impl="te")
    fig = parity.parity_gaps(stable + te)
    assert len(fig.data) == 1 + len(stable) + len(te)  # the band, then one line per layout
    assert [t.name for t in fig.data if t.showlegend is not False][1:] == [
        "Megatron Core's plain layers",
        "Transformer Engine layers",
    ]
    assert max(abs(v) for t in fig.data[1:] for v in t.y) < min(p.band for _, p in stable + te)
    phases = perf.startup_phases(records)
    assert list(phases["phase"]) == list(perf.PHASES.values()) and phases.attrs["runs"] > 0
    assert len(perf.startup_seconds(records)) >= phases.attrs["runs"]


# -- the fair pair (perf.peer)
# ------------------------------------------------------------------------------
def _pair_store(tmp_path, fusion="off", commit="fair000", day="2030-01-01", sides=None):
    """One recording of perf.peer: ours and the peer's, eager and graphed, alternated twice."""
    from megalab.jobs.peer import peer_config
    from megalab.records.store import Store

    from run_records import record

    ours = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=8, gbs=8, grad_accum_fusion=fusion)
    pairs = [ours.replace(cuda_graphs=g) for g in ("none", "te")]
    cfgs = [x for c in pairs for x in (c, peer_config(c))]
    store = Store(tmp_path)
    for i, c in enumerate(cfgs * 2):
        if sides and c.runner not in sides:
            continue
        ms = (300.0 if c.cuda_graphs == "none" else 120.0) * (1.1 if c.runner != "megalab" else 1)
        rec = record(c, at=f"{day}T00:{i:02d}:00Z", git_commit=commit, tags=["group.perf.peer"])
        rec["env"] = {"gpu_name": "NVIDIA H200", "gpu_count": 2, "hostname": "vm", "cpu_count": 32}
        rec["series"]["step_time_s"] = [1.0] * 3 + [ms / 1e3 * (1 + 0.001 * k) for k in range(20)]
        rec["series"]["step"] = list(range(23))
        rec["series"]["loss"] = [10.0 - 0.1 * k for k in range(23)]
        store.append(rec)
    return store


def test_the_fair_pair_is_read_only_from_runs_with_the_fusion_equal(tmp_path):
    """A newer recording of perf.peer with the fusion at auto (on for the trainer, off for the
    peer) is never read; per launch mode, ours / peer with its interval; a side missing is an
    error."""
    store = _pair_store(tmp_path)
    _pair_store(tmp_path, fusion="auto", commit="fused00", day="2030-02-01")
    g = perf_peer.peer_group(store, "H200")
    assert g.attrs["commit"] == "fair000" and len(g) == 4
    pair = perf_peer.peer_pair(g)
    assert list(pair["launch"]) == ["eager", "CUDA graphs"]
    assert pair["ratio"].round(3).tolist() == [0.909, 0.909] and pair["apart"].all()
    assert (pair["ratio_lo"] <= pair["ratio"]).all() and (pair["ratio"] <= pair["ratio_hi"]).all()
    assert pair["less"].round(3).tolist() == [0.091, 0.091]
    runs = perf_peer.peer_runs(store, "H200")
    assert list(runs["side"][:2]) == ["this trainer", "Megatron-LM"] and len(runs) == 8
    assert list(perf_peer.peer_losses(runs)) == [
        "this trainer, eager",
        "Megatron-LM, eager",
        "this trainer, CUDA graphs",
        "Megatron-LM, CUDA graphs",
    ]
    assert len(perf_peer.peer_figure(g).data) == 2
    with pytest.raises(LookupError, match="lacks megatron-lm"):
        perf_peer.peer_group(_pair_store(tmp_path / "one", sides={"megalab"}), "H200")


def test_the_recorded_fair_pair():
    """The committed perf.peer group: one host and commit, the fusion off on both sides, three
    rounds; ours the shorter step in both modes, every run apart; the graphed trainer profiled."""
    g = perf_peer.peer_group(None, "H200")
    assert all(c.grad_accum_fusion == "off" for c in g["cfg"]) and set(g["runs"]) == {3}
    pair = perf_peer.peer_pair(g)
    assert (pair["ratio_hi"] < 1).all() and pair["apart"].all()
    assert pair["ours_busy"].notna().sum() == 1 and 0.7 < pair["ours_busy"].max() < 1
