"""specs.Group.run: a comparison group read from the records, or measured on this machine as the
plan records it (warm-up, configurations alternated, profiled run) and then read as this
recording; under a quick reproduction, one round, resumed where it stopped. Launches are faked."""

import pytest

from megalab.book import beside
from megalab.book.specs import Group
from megalab.jobs import reproduction
from megalab.jobs import running as results
from megalab.records import WARMUP_TAG, reproductions
from megalab.records.store import NotRecorded, Store

from run_records import CFG, record

GROUP = Group("t.g", [CFG, CFG.replace(mbs=4)], profiled=1)


@pytest.fixture
def live(tmp_path, monkeypatch):
    """(store, launches): a fake launcher that records each run it is asked for, tagged as asked;
    launches.stop = n raises Ctrl-C at the n-th launch."""
    store = Store(tmp_path)
    launches = []
    launches_stop = {"at": None}

    def fake(cfg, store, tags, timeout_s, progress, launch_kw=None):
        profiled = "--profile" in (launch_kw or {}).get("extra", [])
        launches.append((cfg.mbs, cfg.iters, WARMUP_TAG in tags, profiled))
        if len(launches) == launches_stop["at"]:
            raise KeyboardInterrupt
        at = f"2026-01-01T00:{len(launches):02d}:00Z"
        return results.Result(store.append(record(cfg, tags=list(tags), at=at)), "live")

    monkeypatch.setattr(results, "_live", fake)
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 2, True))
    return store, launches, launches_stop


def _recorded(store, at="2025-01-01T00:00:00Z"):
    """The book's recording of the group (an earlier commit than the runs measured here)."""
    for cfg in (*GROUP.configs, *GROUP.configs):
        store.append(record(cfg, tags=[GROUP.tag], at=at, git_commit="0ld"))


def _quick(store):
    """The book's recording, and a quick reproduction "q" that marks the group (and its warm-up)."""
    _recorded(store)
    keys = [c.key for c in GROUP.quick_runs()]
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    store.append(reproductions.make("q", "p", 2, "auto", "started", env, True, quick_keys=keys))


def test_live_measures_as_the_plan_records_and_reads_this_recording(live):
    store, launches, _ = live
    _recorded(store)  # an older recording: set aside by the newer one
    df = GROUP.run("live", store=store)
    assert launches == [
        (2, 20, True, False),  # the warm-up: the widest configuration at ITERS steps
        (2, CFG.iters, False, False),
        (4, CFG.iters, False, False),
        (2, CFG.iters, False, False),
        (4, CFG.iters, False, False),
        (4, CFG.iters, False, True),  # the profiled run
    ]
    assert list(df["runs"]) == [2, 2]
    newest = {r["id"] for r in store.load("run") if r["recorded_at"].startswith("2026")}
    assert {r["id"] for _, r in results_of(store)} <= newest


def results_of(store):
    from megalab.records.timings import group_runs

    return group_runs(store, GROUP.name, "H200")[0]


def test_cached_and_auto_read_the_records_and_launch_nothing(live):
    store, launches, _ = live
    with pytest.raises(NotRecorded):
        GROUP.run("cached", store=store)
    _recorded(store)
    assert list(GROUP.run("cached", store=store)["runs"]) == [2, 2]
    assert list(GROUP.run("auto", store=store)["runs"]) == [2, 2]  # this GPU model's recording
    assert launches == []


def test_too_few_gpus_read_the_reference(live, monkeypatch):
    store, launches, _ = live
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 1, True))
    _recorded(store)
    assert list(GROUP.run("live", store=store)["runs"]) == [2, 2]
    assert launches == []


def test_a_quick_reproduction_measures_one_round_and_resumes(live):
    store, launches, stop = live
    _quick(store)
    stop["at"] = 3  # Ctrl-C while the second configuration runs
    with reproduction.active("q"), pytest.raises(KeyboardInterrupt):
        GROUP.run("auto", store=store)
    assert [m for m, *_ in launches] == [2, 2, 4]
    launches.clear()
    stop["at"] = None
    with reproduction.active("q"):
        df = GROUP.run("auto", store=store)
    # no second warm-up (the host ran this reproduction's runs), the measured one read back
    assert launches == [(4, CFG.iters, False, False), (4, CFG.iters, False, True)]
    assert list(df["runs"]) == [2, 2] and list(beside.yours(df, store)["runs"]) == [1, 1]
    mine = store.load("run", tag=reproductions.tag("q"))
    assert len(mine) == 4 and all(r["config"]["stop_when_tight"] for r in mine)  # tight-stopping


def test_the_books_recording_answers_outside_the_reproduction(live):
    store, _, _ = live
    _quick(store)
    with reproduction.active("q"):  # one round each: the book's answers, the reader's beside
        assert list(beside.yours(GROUP.run("auto", store=store), store)["runs"]) == [1, 1]
    assert list(GROUP.run("cached", store=store)["runs"]) == [2, 2]  # the book's, still
    cfg = GROUP.configs[0]
    assert "0ld" == results.run(cfg, "cached", store=store, quiet=True).record["git_commit"]


def test_a_configuration_two_groups_share_is_timed_in_each(live):
    """Within a reproduction a run is read back rather than launched again, but a group's run
    only from a record of that group: the other group's run of the same configuration was timed
    in another sequence."""
    store, launches, _ = live
    other = Group("t.h", [CFG, CFG.replace(mbs=8)], profiled=1)
    _recorded(store)
    for cfg in (*other.configs, *other.configs):
        store.append(record(cfg, tags=[other.tag], at="2025-01-01T00:00:00Z", git_commit="0ld"))
    keys = [c.key for g in (GROUP, other) for c in g.quick_runs()]
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    store.append(reproductions.make("q", "p", 2, "auto", "started", env, True, quick_keys=keys))
    with reproduction.active("q"):
        GROUP.run("auto", store=store)
        launches.clear()
        mine = beside.yours(other.run("auto", store=store), store)
    assert [m for m, *_ in launches] == [2, 8, 8]  # CFG (mbs 2) timed again, in this group
    assert list(mine["runs"]) == [1, 1]
