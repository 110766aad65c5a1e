"""Chapter 04's runs: the store answers every one at each GPU count (the H100's 80 GB search, the CP
2 records and CP 4's hierarchical a2a+p2p included, a profiled step of each comm type among them);
the queued ones wait for the CP degrees not recorded yet, and at 8 GPUs for the seed tutorial's CP
table."""

import pytest

import megalab
from megalab.book import chapters, recording, specs
from megalab.runs import presets
from megalab.book.chapters.ch04_context_parallel import (
    HIERARCHICAL,
    PROFILED_COMM,
    RECORDED_CP,
    RECORDED_HIERARCHICAL,
)
from megalab.runs.config import RunConfig
from megalab.book.specs import ITERS, Fit, Parity, Profiled


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


def test_the_80gb_search_is_recorded_and_belongs_to_the_h100_plan():
    fit = chapters.runs("ch04", 2)["fit_seq_80gb"]
    assert isinstance(fit, Fit) and fit.gpu == "H100" and fit.vary == "seq"
    # the same one-GPU search
    assert fit.cfg == chapters.runs("ch04", 2, gpu="H100")["fit_seq"][1].cfg
    h100 = recording.plan("ch04", gpus=2, gpu="H100")
    assert (
        len(h100) == 1
        and " fit " in f" {h100[0]} "
        and not any(line in recording.plan("ch04", 2) for line in h100)
    )
    assert recording.plan("ch04", gpus=2, gpu="H100", pending=True) == []


def test_cp2_is_recorded_whole():
    ch = chapters.runs("ch04", 2)
    assert set(ch["fit_seq"]) == {1, 2} and [c.cp for c in ch["strong"] + ch["weak"]] == [2, 2]
    assert {k: [c.seq for c in v] for k, v in ch["comm"].items()} == {
        k: [8192, 16384, 32768] for k in ("p2p", "all_gather", "a2a")
    }
    assert all(
        isinstance(p, Profiled) and p.cfg.cp == 2 and p.cfg.seq == 16384 for p in ch["profile"]
    )
    assert (
        [p.cfg.cp_comm for p in ch["profile"]]
        == ["p2p", "all_gather", "a2a"]
        == list(PROFILED_COMM)
    )
    assert isinstance(ch["parity_long"][0], Parity) and ch["parity_long"][0].cfg.seq == 16384
    comm = {c.key for cs in ch["comm"].values() for c in cs}
    # strong and weak points are comm runs
    assert {c.key for c in ch["strong"] + ch["weak"]} <= comm


def test_cp4_records_the_hierarchical_type_beside_the_other_three():
    comm = chapters.runs("ch04", 4)["comm"]
    assert RECORDED_HIERARCHICAL == (4,) and list(comm) == [
        "p2p",
        "all_gather",
        "a2a",
        HIERARCHICAL,
    ]
    assert all(
        [c.seq for c in cs] == [8192, 16384, 32768] and {c.cp for c in cs} == {4}
        for cs in comm.values()
    )
    assert [c.key for c in comm[HIERARCHICAL]] == [
        c.replace(cp_comm=HIERARCHICAL).key for c in comm["p2p"]
    ]
    assert HIERARCHICAL not in chapters.runs("ch04", 2)["comm"]
    for c in comm[HIERARCHICAL]:  # recorded on 4x H200, each run alone on the host
        r = megalab.run(c, "cached", quiet=True)
        assert (
            r.status == "ok"
            and r.summary["step_time_s"] > 0
            and len(r.summary["mem_allocated_peak_gib_per_rank"]) == 4
        )


def test_cp8_queues_the_hierarchical_type_and_not_cp4s():
    queued = chapters.pending("ch04", 8)["comm"][HIERARCHICAL]
    assert [(c.cp, c.seq) for c in queued] == [(8, 8192), (8, 16384), (8, 32768)]
    assert (
        chapters.runs("ch04", 8)["comm"][HIERARCHICAL]
        == chapters.runs("ch04", 4)["comm"][HIERARCHICAL]
    )


def test_every_profiled_cp2_step_keeps_each_ranks_times():
    # the newest record answers: the p2p profile's second record is the one with per-rank data
    for p in chapters.runs("ch04", 2)["profile"]:
        prof = p.run("cached", quiet=True).record["profile"]
        assert set(prof["ranks"]) == {"0", "1"} and all(
            r["attention"] > 0 for r in prof["ranks"].values()
        )
        assert len(prof["schedule"]["rank_seconds"]) == 2 and all(
            t["F"] > 0 and t["B"] > 0 for t in prof["schedule"]["rank_seconds"]
        )


def test_every_profiled_cp4_step_keeps_all_four_ranks():
    for p in chapters.runs("ch04", 4)["profile"]:
        prof = p.run("cached", quiet=True).record["profile"]
        assert p.cfg.cp == 4 and set(prof["ranks"]) == {"0", "1", "2", "3"}
        assert all(r["attention"] > 0 for r in prof["ranks"].values())


# The seed tutorial's 8xH100 CP table (issue 24), written out here rather than from the module's
# helper: gpt-1.2b, global batch 8; CP 1/2/4/8 at 4k tokens; CP 8 with each comm type at 4k and 16k.
# (cp, cp_comm, seq).
SEED_ROWS = [(cp, "p2p", 4096) for cp in (1, 2, 4, 8)] + [
    (8, kind, seq) for kind in ("p2p", "all_gather", "a2a") for seq in (4096, 16384)
]


def _seed_row(cp, kind, seq) -> RunConfig:
    # all 8 sequences in one micro-batch on cp GPUs: what makes CP 1 run out of memory on 80 GB
    return presets.get("gpt-1.2b").replace(
        iters=ITERS, gpus=cp, cp=cp, cp_comm=kind, seq=seq, mbs=8, gbs=8
    )


def _seed_keys(gpus) -> set:
    queued = chapters.pending("ch04", gpus)
    return {c.key for c in specs.items({k: queued.get(k, []) for k in ("seed_cp", "seed_comm")})}


def test_cp8_queues_every_seed_row_not_recorded():
    queued = {_cfg(i).key for i in specs.items(chapters.pending("ch04", 8))}
    recorded = {_cfg(i).key for i in specs.items(chapters.runs("ch04", 8))}
    # the table, row by row, and nothing else
    assert _seed_keys(8) == {_seed_row(*row).key for row in SEED_ROWS}
    for row in SEED_ROWS:
        cfg = _seed_row(*row)
        assert cfg.problems() == [], (row, cfg.problems())
        assert cfg.key in queued or (cfg.key in recorded and recording.is_recorded(cfg)), row
    # the seed's CP 8 host only: the 2- and 4-GPU plans keep theirs
    assert all(not _seed_keys(g) for g in (1, 2, 4))


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_ask_only_for_recorded_cp_and_pending_keeps_the_rest(gpus):
    recorded = {_cfg(i).key for i in specs.items(chapters.runs("ch04", gpus))}
    # the seed's table at global batch 8: its CP 1, 2 and 4 rows are queued too
    seed = _seed_keys(gpus)
    assert {
        _cfg(i).cp for i in specs.items(chapters.runs("ch04", gpus)) if not isinstance(i, Parity)
    } <= {1, *(c for c in RECORDED_CP if c <= gpus)}
    for item in specs.items(chapters.pending("ch04", gpus)):
        cfg = _cfg(item)
        cfg.validate()
        queued_profile = isinstance(item, Profiled) and cfg.cp_comm not in PROFILED_COMM
        queued_hierarchical = cfg.cp_comm == HIERARCHICAL and cfg.cp not in RECORDED_HIERARCHICAL
        assert cfg.key in seed or (
            cfg.cp > 1 and (cfg.cp not in RECORDED_CP or queued_profile or queued_hierarchical)
        )
        assert cfg.gpus <= gpus
        assert cfg.key not in recorded


def test_hidden_counts_the_ring_time_that_compute_overlaps():
    # the ring's NCCL kernel on stream 26 runs 0-4 ms; attention covers 1-2 ms and 3-6 ms (two
    # streams); the all-reduce on the compute stream at 10-12 ms overlaps nothing
    from megalab.records import profiles

    cols = ["category", "start_ms", "duration_ms", "stream"]
    prof = {
        "timeline": {
            "step": 7,
            "columns": cols,
            "kernels": [
                ["nccl", 0.0, 4.0, 26],
                ["attention", 1.0, 1.0, 7],
                ["attention", 3.0, 3.0, 14],
                ["gemm", 6.0, 4.0, 7],
                ["nccl", 10.0, 2.0, 7],
            ],
        }
    }
    assert list(profiles.nccl_streams(prof)) == [26, 7]
    ring = profiles.hidden(prof, 26, ("attention",))
    assert ring == pytest.approx(
        {"comm_ms": 4.0, "hidden_ms": 2.0, "exposed_ms": 2.0, "share": 0.5}
    )
    assert profiles.hidden(prof, 7, ("attention", "gemm", "other"))["share"] == 0.0
