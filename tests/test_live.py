"""book/live.py and jobs/reproduction.py: a live reproduction resumes where it stopped, records how
long it took, re-measures only the defining points with --quick, and estimates its time from the
records. Launches are faked (launch.launch), as in test_results; papermill runs the "notebook" in
this process so the fake reaches it."""

import json
from pathlib import Path

import pytest

from megalab import metrics
from megalab.book import live, reproduce
from megalab.jobs import launch, reproduction
from megalab.jobs import running as results
from megalab.jobs.launch import RunOutcome
from megalab.records import reproductions
from megalab.records.store import Store

from run_records import CFG
from run_records import record as _record

SEQS = (512, 1024, 2048, 4096)  # the notebook's runs, in order
PAGE = "00_know_your_machine/know"


def _steps(n=5):
    return [{"kind": "step", "step": i, "loss": 9.0 - i, "step_time_s": 0.5} for i in range(n)]


@pytest.fixture
def book(tmp_path, monkeypatch):
    """A one-page book whose notebook runs CFG at each of SEQS through megalab.run; returns
    (root, launches): the seq of every launch, and a setter for the launch that is interrupted."""
    import papermill

    (tmp_path / "results").mkdir()
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/00_know_your_machine/know\n"
    )
    (tmp_path / "book/00_know_your_machine").mkdir(parents=True)
    params = {"cell_type": "code", "source": 'mode = "auto"\ngpus = 4\n'}
    params["metadata"] = {"tags": ["parameters"]}
    (tmp_path / "book/00_know_your_machine/know.ipynb").write_text(json.dumps({"cells": [params]}))
    monkeypatch.setattr("megalab.machine.env.local_gpus", lambda: ("NVIDIA H200", 2))
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 2, True))
    launches, stop = [], {"at": None}

    def fake_launch(cfg, **kw):
        launches.append(cfg.seq)
        if len(launches) == stop["at"]:
            raise KeyboardInterrupt  # the reader's Ctrl-C while this run trains
        summary = {"startup_s": 20.0}
        return RunOutcome("ok", None, metrics.Parsed(None, _steps(), summary), None, 0)

    def execute_notebook(src, out, parameters, **kw):
        for seq in SEQS:
            results.run(CFG.replace(seq=seq), parameters["mode"], quiet=True)
        Path(out).write_text(json.dumps({"cells": [], "metadata": {}}))

    monkeypatch.setattr(launch, "launch", fake_launch)
    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    monkeypatch.setattr(results, "_predict", lambda cfg, gpu: {})
    return tmp_path, launches, stop


def test_an_interrupted_reproduction_goes_on_where_it_stopped(book, capsys):
    root, launches, stop = book
    stop["at"] = 3  # Ctrl-C during the third run
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root) == 130
    assert launches == [512, 1024, 2048]
    launches.clear()
    stop["at"] = None
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root) == 0
    assert launches == [2048, 4096]  # the two measured before the interrupt are read back
    err = capsys.readouterr().err
    assert "resuming 00_know_your_machine/know.2gpu." in err
    assert "launch to first step: median 20.0 s over 4 runs" in err  # both executions' runs
    ends = [r for r in reproductions.load() if r["event"] != "started"]
    assert [(r["event"], r["launched"], r["read_back"]) for r in ends] == [
        ("interrupted", 2, 0),
        ("finished", 2, 2),
    ]
    assert len({r["reproduction"] for r in reproductions.load()}) == 1
    took = reproductions.wall_time(PAGE, gpus=2)
    assert took.measured and took.seconds == pytest.approx(sum(r["seconds"] for r in ends))
    assert (took.launched, took.executions, took.gpu_name) == (4, 2, "NVIDIA H200")
    assert took.launch_s == 20.0 and "launch to first step 20 s, the median" in str(took)
    assert reproductions.wall_time("00_know_your_machine").seconds == took.seconds  # the chapter
    # finished: the same command starts a new reproduction, --fresh too
    launches.clear()
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root, fresh=True) == 0
    assert launches == list(SEQS)


def test_fresh_starts_over_an_unfinished_reproduction(book):
    root, launches, stop = book
    stop["at"] = 2
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root) == 130
    launches.clear()
    stop["at"] = None
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root, fresh=True) == 0
    assert launches == list(SEQS)


def test_a_cached_reproduction_records_nothing(book):
    root, launches, _ = book
    Store().append(_record(CFG.replace(seq=512)))  # one answer; the others are not recorded
    reproduce.reproduce(["00"], mode="cached", root=root)
    assert launches == [] and reproductions.load() == []


def test_repeats_get_their_own_record_and_a_run_asked_again_is_read_back(tmp_path):
    store = Store(tmp_path)
    tag = reproductions.tag("r1")
    first = store.append(_record(tags=[tag], at="2025-01-01T00:00:00Z"))
    second = store.append(_record(tags=[tag], at="2025-01-02T00:00:00Z"))
    store.append(_record(at="2025-01-03T00:00:00Z"))  # not this reproduction's
    within = reproduction.Context("r1")
    assert within.measured(CFG, store)["id"] == first["id"]  # oldest first
    assert within.measured(CFG, store)["id"] == second["id"]
    # asked again (two lists share it, several parities share a reference): read back, oldest first
    assert within.measured(CFG, store)["id"] == first["id"]
    assert within.measured(CFG, store, exclude=[first["id"]])["id"] == second["id"]
    assert within.measured(CFG, store, exclude=[first["id"], second["id"]]) is None  # launched


def test_quick_launches_only_the_defining_points(tmp_path, monkeypatch):
    store = Store(tmp_path)
    reference = store.append(_record(CFG.replace(seq=512)))
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    keys = [CFG.replace(seq=1024).key]
    store.append(
        reproductions.make("q", "p", 2, "live", "started", env, quick=True, quick_keys=keys)
    )
    launched = []
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 2, True))
    monkeypatch.setattr(results, "_live", lambda cfg, *a, **k: launched.append(cfg.seq))
    with reproduction.active("q"):
        assert results.run(CFG.replace(seq=512), "live", store=store).record == reference
        results.run(CFG.replace(seq=1024), "live", store=store, quiet=True)
        results.run(CFG.replace(seq=2048), "live", store=store, quiet=True)  # nothing recorded
        store.append(_record(CFG.replace(seq=1024)))  # the book's record, on this GPU model
        results.run(CFG.replace(seq=1024), "auto", store=store, quiet=True)  # measured again
    assert launched == [1024, 2048, 1024]
    assert reproduction.current() is None  # outside the block, nothing changes


def test_the_chapters_defining_points_carry_their_settings():
    from megalab.book import chapters, specs

    assert live.quick_keys("planner", 2) == []
    keys = live.quick_keys("04_context_parallel/context_parallel", 2)
    every = {c.key for c in chapters.runs("ch04", 2)["seq_1gpu"]} | {
        c.key for rs in chapters.runs("ch04", 2)["comm"].values() for c in rs
    }
    grouped = {
        c.key
        for g in specs.groups(chapters.runs("ch04", 2))
        for c in (g.warmup, *g.configs, *g.quick_runs())  # as recorded; as a quick one times it
    }
    assert grouped <= set(keys)  # timed like the figure that reads them: the group's settings
    assert (
        keys and set(keys) < every | {c.key for c in chapters.runs("ch04", 2)["strong"]} | grouped
    )
    assert set(live.quick_keys("01_data_parallel/data_parallel", 4)) >= {
        c.key for c in chapters.runs("ch01", 4)["weak"]
    }


def test_the_estimate_costs_what_the_reproduction_launches(tmp_path):
    from megalab.book import chapters, eta
    from megalab.records.costs import Costs

    store = Store(tmp_path)

    one = chapters.runs("ch04", 2)["seq_1gpu"][2]  # 8k tokens: a defining point
    store.append({**_record(one), "summary": {"startup_s": 30.0, "step_time_s": 0.5}})
    est = live.estimate("04_context_parallel/context_parallel", 2, store=store)
    quick = eta.launches("04_context_parallel/context_parallel", 2, True, Costs(store))
    assert est.quick_s == pytest.approx(eta.PAGE_S + sum(x.seconds for x in quick))
    assert est.quick_runs == len(quick) and one.key in {x.key for x in quick}
    assert est.counted >= 1 and f"{est.counted} of its {est.runs} runs" in str(est)
    assert est.full_s > est.quick_s
    assert live.estimate("planner", 2, store=store) is None


def test_wall_time_is_never_made_up(tmp_path):
    took = reproductions.wall_time("04_context_parallel", gpus=4, store=tmp_path)
    assert not took.measured and took.seconds is None and "not yet measured" in str(took)


def test_wall_time_reads_as_one_wrapped_sentence():
    took = reproductions.WallTime(
        "02_tensor_parallel", 4, seconds=1260, gpu_name="NVIDIA H200", launched=4, read_back=9
    )
    text = str(took)
    assert text.startswith("Full live reproduction on 4 × NVIDIA H200: 21 minutes")
    assert text.endswith(".") and max(len(line) for line in text.splitlines()) <= 88
    waiting = str(reproductions.WallTime("02_tensor_parallel", 4, quick=True))
    assert "megalab reproduce 02_tensor_parallel --mode live --quick" in " ".join(waiting.split())


def test_an_estimate_quotes_a_reproduction_measured_on_another_gpu_count():
    """Chapter 2's page (4 GPUs) estimates its quick reproduction there, and quotes the one measured
    on 1×H200 (results/): its minutes to one decimal under ten, its runs and launch median."""
    text = " ".join(str(live.time_to_reproduce("02_tensor_parallel", 4, quick=True)).split())
    assert text.startswith("Quick live reproduction on 4 × H200: about ")
    assert (
        "Measured: Quick live reproduction on 1 × NVIDIA H200: 1.5 minutes (3 runs launched" in text
    )
    full = str(live.time_to_reproduce("02_tensor_parallel", 4))
    assert "Measured" not in full  # the full one on 1 GPU launched nothing: all read from records


@pytest.mark.parametrize(
    "change, says",
    [
        ({"mode": "cached"}, "mode='cached'"),
        ({"seconds": -1.0}, "seconds=-1.0"),
        ({"event": "finished", "seconds": None}, "needs its seconds"),
        ({"gpus": True}, "field 'gpus'"),
        ({"launched": -2}, "launched=-2"),
    ],
)
def test_a_bad_reproduction_record_is_refused_early(change, says):
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    args = {"mode": "live", "event": "finished", "seconds": 1.0, "gpus": 2, **change}
    with pytest.raises(reproductions.InvalidReproduction, match=says.replace("(", r"\(")):
        reproductions.make(
            "r", "p", args.pop("gpus"), args.pop("mode"), args.pop("event"), env, **args
        )


def test_the_store_keeps_reproductions_apart_and_imports_them(tmp_path):
    from megalab.records import record_problems

    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    rec = reproductions.make("r", "p", 2, "live", "finished", env, seconds=3.0, launched=1)
    assert record_problems(rec) == []
    Store(tmp_path / "a").append(rec)
    assert (tmp_path / "a" / "reproductions.jsonl").exists()
    assert not (tmp_path / "a" / "runs.jsonl").exists()
    assert Store(tmp_path / "b").import_records(tmp_path / "a" / "reproductions.jsonl") == 1
    assert reproductions.load(tmp_path / "b")[0]["seconds"] == 3.0
    (tmp_path / "c.jsonl").write_text(json.dumps({**rec, "seconds": "3"}) + "\n")
    from megalab.records.store import ImportRefused

    with pytest.raises(ImportRefused, match="seconds"):
        Store(tmp_path / "b").import_records(tmp_path / "c.jsonl")


def test_a_quick_wall_time_counts_only_for_todays_defining_points(tmp_path):
    store = Store(tmp_path)
    page = "04_context_parallel/context_parallel"
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 4}
    for rid, keys in (("old", ["k1"]), ("new", live.quick_keys(page, 4))):
        store.append(
            reproductions.make(rid, page, 4, "auto", "started", env, True, quick_keys=keys)
        )
        store.append(reproductions.make(rid, page, 4, "auto", "finished", env, True, seconds=60.0))
    assert (
        reproductions.wall_time("04_context_parallel", None, quick=True, store=store).seconds == 60
    )
    took = live.wall_time("04_context_parallel", None, quick=True, store=store)
    assert took.measured and took.executions == 1
    store.append(reproductions.make("x", page, 4, "auto", "started", env, True, quick_keys=["k"]))
    store.append(reproductions.make("x", page, 4, "auto", "finished", env, True, seconds=9.0))
    assert live.wall_time("04_context_parallel", None, quick=True, store=store).seconds == 60


def test_time_to_reproduce_is_measured_or_estimated_from_the_records():
    """Without a recorded reproduction, "How to reproduce" gives the estimate from the recorded
    runs (worded as one; on 4 GPUs when the page takes any count), never "not yet measured" and
    never a made-up time."""
    said = str(live.time_to_reproduce("03_sequence_parallel", 2, quick=True))
    e = live.estimate("03_sequence_parallel", 2)
    assert "estimated from the recorded runs" in said and "not yet" not in said
    assert f"about {e.quick_s / 60:.0f} minutes" in said and "2 × H200" in said
    assert all(len(line) <= 88 for line in said.splitlines())
    full = " ".join(str(live.time_to_reproduce("03_sequence_parallel", None)).split())
    e4 = live.estimate("03_sequence_parallel", 4)
    assert f"Full live reproduction on 4 × H200: about {e4.full_s / 60:.0f} minutes" in full


def _live(store, page="06_expert_parallel", gpus=2, mode="live", quick=False, rid="w1"):
    return live.Live(
        id=rid,
        page=page,
        gpus=gpus,
        mode=mode,
        quick=quick,
        env={"gpu_name": "NVIDIA H200", "gpu_count": gpus},
        store=store,
        read_back=0,
        resumed=False,
        t0=0.0,
    )


def test_measured_ahead_are_the_shareable_runs_outside_the_groups(tmp_path, monkeypatch):
    """Ahead of chapter 6 on 2 GPUs: eager megalab runs of at most 2 GPUs, each once, none of a
    comparison group (timed alone, fresh); a quick reproduction takes only defining points; a run
    this reproduction measured is not measured again."""
    from megalab.book import chapters
    from megalab.book.specs import groups

    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 2, True))
    store = Store(tmp_path)
    cfgs = live.ahead(_live(store))
    grouped = {c.key for g in groups(chapters.runs("ch06", 2)) for c in g.configs}
    assert cfgs and len({c.key for c in cfgs}) == len(cfgs)
    assert all(c.gpus <= 2 and c.cuda_graphs == "none" and c.runner == "megalab" for c in cfgs)
    assert not grouped & {c.key for c in cfgs}
    quick = live.ahead(_live(store, quick=True))
    defining = {k for k in live.quick_keys("06_expert_parallel", 2)}
    assert {c.key for c in quick} <= defining
    store.append(_record(cfgs[0], tags=[reproductions.tag("w1")]))
    assert cfgs[0].key not in {c.key for c in live.ahead(_live(store))}
    # auto mode on a machine whose GPU model has the records: nothing to launch
    for c in cfgs:
        store.append(_record(c))
    assert live.ahead(_live(store, mode="auto", rid="w2")) == []


def test_runs_measured_ahead_are_read_back_by_the_notebook(tmp_path, monkeypatch):
    """warm launches the shareable runs through one launch_many and records them as the
    reproduction's; megalab.run inside the reproduction then reads them back, launching nothing."""
    from megalab.jobs import reuse

    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 2, True))
    monkeypatch.setattr(results, "_predict", lambda cfg, gpu: {})
    store = Store(tmp_path)
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path))
    run = _live(store)
    cfgs = live.ahead(run)[:3]
    monkeypatch.setattr(live, "ahead", lambda r: cfgs)
    batches = []

    def fake_many(many, timeout_s=None, **kw):
        batches.append([c.key for c in many])
        summary = {"startup_s": 2.0}
        return [RunOutcome("ok", None, metrics.Parsed(None, _steps(), summary), None, 0)] * len(
            many
        )

    def no_launch(cfg, **kw):
        raise AssertionError(f"launched {cfg.label}: it was measured ahead")

    monkeypatch.setattr(reuse, "launch_many", fake_many)
    monkeypatch.setattr(launch, "launch", no_launch)
    found = live.warm(run)
    assert batches == [[c.key for c in cfgs]] and [r.status for r in found] == ["ok"] * 3
    assert all(reproductions.tag("w1") in r.record["tags"] for r in found)
    with reproduction.active("w1"):
        again = [results.run(c, "live", quiet=True, store=store) for c in cfgs]
    assert [r.record["id"] for r in again] == [r.record["id"] for r in found]


def test_no_reuse_turns_the_shared_launches_off(book, monkeypatch):
    """--no-reuse: nothing is measured ahead; by default warm runs before the notebook."""
    import argparse

    p = argparse.ArgumentParser()
    live.add_args(p)
    assert p.parse_args([]).reuse and not p.parse_args(["--no-reuse"]).reuse
    root, launches, _ = book
    warmed = []
    monkeypatch.setattr(live, "warm", lambda run, timeout_s=None: warmed.append(run.id) or [])
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root, reuse=False) == 0
    assert warmed == [] and launches == list(SEQS)
    assert reproduce.reproduce(["00"], mode="live", force=True, root=root, fresh=True) == 0
    assert len(warmed) == 1


def test_a_run_nothing_answers_is_not_measured_ahead(tmp_path, monkeypatch):
    """On a machine without the GPUs, a configuration with no record is left to the notebook
    (which says NotRecorded), not a crash of the warm-up."""
    monkeypatch.setattr(results, "_local_hardware", lambda: (None, 0, False))
    assert results.would_launch([CFG], "auto", Store(tmp_path)) == [False]
