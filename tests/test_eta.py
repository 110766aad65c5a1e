"""book/eta.py: what a live reproduction launches, each launch costed from the records, against
the quick reproductions of chapters 1 and 2 recorded on 2×H200 (results/)."""

import pytest

from megalab.book import chapters, eta
from megalab.jobs.sweep import bisect
from megalab.records.costs import GAP_S, Costs
from megalab.records import reproductions
from megalab.records.store import Store

from run_records import CFG
from run_records import record as _record

# quick, on 2×H200: ch02 failed after its first comparison group (then resumed and failed at
# once); it did not finish. (ch01's of that host ran the page before it read the book's layouts
# on fewer GPUs: its plain runs were the 2-GPU chapter's, no longer what the page asks.)
QUICK = {
    "02_tensor_parallel/tensor_parallel.2gpu.20261129T005932Z.1d06": 0.2,
}


def test_a_recorded_run_costs_its_launch_its_steps_and_the_gap(tmp_path):
    store = Store(tmp_path)
    rec = _record(CFG)
    steps = rec["series"]["step_time_s"]
    store.append({**rec, "summary": {**rec["summary"], "startup_s": 20.0 + steps[0]}})
    costs = Costs(store)
    assert costs.fresh(CFG) == pytest.approx(20.0 + sum(steps) + GAP_S)
    # a configuration nobody recorded: a run of the same shape, scaled by its layers
    deeper = CFG.replace(layers=2 * CFG.layers)
    assert not costs.recorded(deeper)
    assert costs.steps_s(deeper) > costs.steps_s(CFG)


@pytest.mark.parametrize("rid", sorted(QUICK))
def test_the_estimate_predicts_the_recorded_quick_reproductions(rid, tmp_path):
    """From the records made before it started, the launches eta plans for the reproduction cost,
    together with the page, what it measured within the tolerance: each of its runs matched to a
    planned launch of the same configuration (a search's probes to the search's), none left
    over but a run it measured twice (before a run asked again was read back). Neither finished,
    so the whole quick estimate is longer still."""
    ends = [r for r in reproductions.load() if r["reproduction"] == rid and r["event"] != "started"]
    began = min(r["recorded_at"] for r in reproductions.load() if r["reproduction"] == rid)
    before = Store(tmp_path)
    src = Store()
    for r in src.load("run"):
        if r.get("recorded_at", "") < began:
            before.append(r)
    runs = [r for r in src.load("run") if reproductions.tag(rid) in r.get("tags", ())]
    page, gpus = ends[0]["page"], ends[0]["gpus"]
    planned = eta.launches(page, gpus, True, Costs(before))
    left, matched, again = list(planned), [], []
    for r in sorted(runs, key=lambda r: "fit" in r["tags"]):  # configurations first, then probes
        same = [x for x in left if x.key == r["key"]] or (
            [x for x in left if x.why == "search"] if "fit" in r["tags"] else []
        )
        if not same:  # launched again though it measured it already: now read back
            again.append(r["label"])
            assert r["key"] in {x.key for x in matched}, f"{r['label']} launched but not planned"
            continue
        matched.append(same[0])
        left.remove(same[0])
    measured = sum(r["seconds"] for r in ends)
    predicted = eta.PAGE_S + sum(x.seconds for x in matched)
    assert predicted == pytest.approx(measured, rel=QUICK[rid]), (predicted, measured)
    assert eta.estimate(page, gpus, store=before).quick_s > measured
    assert not again


def test_the_quick_plan_leaves_recorded_questions_to_the_records():
    """On 4 GPUs (the book's recording) a quick chapter 1 launches its defining points and its
    comparison groups only: every search probe and parity run is recorded."""
    planned = eta.launches("01_data_parallel/data_parallel", 4, True)
    assert {x.why for x in planned} <= {"ahead"} | {
        f"group {g.name}{p}"
        for g in chapters.runs("ch01", 4)["groups"].values()
        for p in ("", " profiled")
    }


@pytest.mark.parametrize(
    "settled, fits_below, probes",
    [({}, 3, [0, 9, 4, 2, 3]), ({0: True, 6: False}, 3, [3, 1, 2]), ({}, 0, [0])],
)
def test_bisect_probes_the_ends_then_halves(settled, fits_below, probes):
    seen = []
    found = bisect(10, settled, lambda i: seen.append(i) or i < fits_below)
    assert seen == probes and found == (fits_below - 1 if fits_below else None)


def _finished_quick_on_one_gpu() -> list[dict]:
    return [
        r
        for r in reproductions.load()
        if r["gpus"] == 1 and r["quick"] and r["event"] == "finished" and eta.chapter_of(r["page"])
    ]


def test_the_estimate_predicts_the_quick_book_on_one_gpu_from_the_warm_server(tmp_path):
    """The quick reproductions of every chapter on 1×H200, their runs forked from the warm server
    (MEGALAB_LAUNCHER=forkserver): from the records made before each started, eta plans exactly
    the runs it launched, and the book's total within 15% (each page's own PAGE_S is the 2×H200
    host's 30 s; this host's pages took 10-20 s)."""
    done = _finished_quick_on_one_gpu()
    assert {r["page"].split("/")[0][:2] for r in done} >= {f"0{i}" for i in range(1, 8)}
    src = list(Store().load("run"))
    measured = predicted = 0.0
    for i, end in enumerate(done):
        rid = end["reproduction"]
        began = min(r["recorded_at"] for r in reproductions.load() if r["reproduction"] == rid)
        before = Store(tmp_path / str(i))
        for r in src:
            if r.get("recorded_at", "") < began:
                before.append(r)
        runs = [r for r in src if reproductions.tag(rid) in r.get("tags", ())]
        planned = eta.launches(end["page"], 1, True, Costs(before, launcher="forkserver"))
        assert sorted(x.key for x in planned) == sorted(r["key"] for r in runs), rid
        # a resumed one (it failed first, on the page's bug since fixed) counts each part
        ends = [r for r in reproductions.load() if r["reproduction"] == rid]
        measured += sum(r["seconds"] for r in ends if r["event"] != "started")
        predicted += eta.PAGE_S + sum(x.seconds for x in planned)
    assert predicted == pytest.approx(measured, rel=0.15), (predicted, measured)


def test_the_warm_server_costs_a_launch_without_its_imports(tmp_path):
    """A spawned run's launch less its imports is what the fork-server's launch costs; a forked
    run (env.launcher, or imports done at once) says nothing of a fresh interpreter's launch."""
    store = Store(tmp_path)
    rec = _record(CFG)
    steps = rec["series"]["step_time_s"]
    marks = {"python": 0.5, "imports": 12.5, "first_step": 20.0 + steps[0]}
    summary = {**rec["summary"], "startup_s": 20.0 + steps[0], "startup_marks_s": marks}
    store.append({**rec, "summary": summary})
    assert Costs(store).launch_s == pytest.approx(20.0)
    assert Costs(store, launcher="forkserver").launch_s == pytest.approx(8.0)
    forked = {"python": 0.2, "imports": 0.3, "first_step": 8.0 + steps[0]}
    store.append(
        {**rec, "summary": {**summary, "startup_s": 8.0 + steps[0], "startup_marks_s": forked}}
    )
    assert Costs(store).launch_s == pytest.approx(20.0)  # the forked launch left out
    assert Costs(store, launcher="forkserver").launch_s == pytest.approx((8.0 + 7.9) / 2)
