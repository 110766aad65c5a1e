"""results.py: answering a configuration (megalab.run) from the store, and the store names it
re-exports."""

import shlex
from pathlib import Path

import pytest

from megalab import metrics
from megalab.jobs import running as results
from megalab.jobs.launch import RunOutcome
from megalab.jobs.running import NotRecorded, Store

from run_records import CFG
from run_records import record as _record


# -- megalab.run -----------------------------------------------------------------------------------
def test_not_recorded_message_has_the_command(tmp_path):
    with pytest.raises(NotRecorded) as info:
        results.run(CFG, mode="cached", store=tmp_path)
    msg = str(info.value)
    assert "megalab run " in msg and msg.endswith("--mode live")
    args = shlex.split(msg[msg.index("megalab run ") :])[2:-2]
    import argparse

    from megalab.runs.flags import add_config_args, config_from_args

    ns = add_config_args(argparse.ArgumentParser()).parse_args(args)
    assert config_from_args(ns) == CFG  # the command records exactly this configuration


@pytest.mark.parametrize(
    "records, local, expected",
    [
        (
            [("NVIDIA H200", "2025-01")],
            ("NVIDIA H200", 0, False),
            "cached",
        ),  # this hardware's record
        # GPUs here, no record from them
        ([("NVIDIA H100", "2025-01")], ("NVIDIA H200", 4, False), "live"),
        # CPU machine: the reference
        ([("NVIDIA H100", "2025-01")], (None, 0, False), "reference"),
        # too few GPUs, nothing recorded
        ([], ("NVIDIA H200", 1, False), NotRecorded),
        ([], ("NVIDIA H200", 2, False), "live"),
    ],
)
def test_auto_selection(tmp_path, records, local, expected):
    store = Store(tmp_path)
    for gpu, at in records:
        store.append(_record(gpu=gpu, at=at))
    if expected is NotRecorded:
        with pytest.raises(NotRecorded):
            results.select(CFG, "auto", store, *local)
    else:
        assert results.select(CFG, "auto", store, *local)[0] == expected


def test_auto_needs_te_for_te_layouts(tmp_path):
    cfg = CFG.replace(impl="te")
    with pytest.raises(NotRecorded):
        results.select(cfg, "auto", Store(tmp_path), "NVIDIA H200", 4, False)
    assert results.select(cfg, "auto", Store(tmp_path), "NVIDIA H200", 4, True)[0] == "live"


def test_cached_returns_newest_of_any_status(tmp_path, capsys):
    store = Store(tmp_path)
    store.append(_record(at="2025-01-01T00:00:00Z"))
    oom = store.append(_record(status="oom", at="2025-02-01T00:00:00Z"))
    r = results.run(CFG, mode="cached", store=store)
    assert r.source == "cached" and r.record["id"] == oom["id"] and r.status == "oom" and not r.ok
    assert r.config == CFG and r.env["gpu_name"] == "NVIDIA H200"
    assert capsys.readouterr().out == ""  # a record read back prints no per-run line
    assert CFG.label in r.describe() and "oom" in r.describe()


def test_a_reference_answer_says_so(tmp_path, capsys, monkeypatch):
    store = Store(tmp_path)
    store.append(_record(at="2025-01-01T00:00:00Z"))
    monkeypatch.setattr(results, "_local_hardware", lambda: (None, 0, False))
    r = results.run(CFG, mode="auto", store=store)
    assert r.source == "reference" and "not measured here" in capsys.readouterr().out


def test_live_records_failures_too(tmp_path, monkeypatch):
    from megalab.jobs import launch

    log = (Path(__file__).parent / "data" / "handmade_log_oom.txt").read_text()
    outcome = RunOutcome(
        *metrics.classify_failure(log, 1, False), metrics.parse_log(log), tmp_path / "run", 1
    )
    monkeypatch.setattr(launch, "launch", lambda cfg, **kw: outcome)
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", 4, True))
    r = results.run(CFG, mode="live", store=tmp_path, tags=["x"], quiet=True)
    assert r.source == "live" and r.status == "oom" and r.error["rank"] == 1
    [rec] = Store(tmp_path).load()
    assert (
        rec["status"] == "oom" and rec["tags"] == ["x"] and rec["run_dir"] == str(tmp_path / "run")
    )
    assert rec["predicted"]  # theory numbers are stored beside the measurement


def test_store_names_are_re_exported():
    """`results.Store`, `results.load(...)` and friends are the store's and the records' own
    objects."""
    from megalab.records import schema as records, store

    for name in (
        "Store",
        "load",
        "find",
        "import_records",
        "matches",
        "default_root",
        "RUNS",
        "BENCH",
        "ERRATA",
    ):
        assert getattr(results, name) is getattr(store, name), name
    for name in ("to_frame", "make_record", "utc_now"):
        assert getattr(results, name) is getattr(records, name), name


def test_a_transient_failure_never_hides_a_settled_record(tmp_path):
    """ok/oom/invalid answer a lookup; a later timeout does not replace them, and auto retries
    it."""
    from megalab.runs import presets
    from megalab.jobs.running import Store, select

    cfg = presets.get("gpt-tiny").replace(impl="local")
    store = Store(tmp_path)
    env = {"gpu_name": "NVIDIA H200"}
    ok = store.append(
        {"key": cfg.key, "status": "ok", "env": env, "recorded_at": "2026-01-01T00:00:00Z"}
    )
    store.append(
        {"key": cfg.key, "status": "timeout", "env": env, "recorded_at": "2026-01-02T00:00:00Z"}
    )
    store.append(
        {
            "key": cfg.key,
            "status": "ok",
            "env": env,
            "tags": ["profile"],
            "recorded_at": "2026-01-03T00:00:00Z",
        }
    )
    assert select(cfg, "cached", store, None, 0, False)[1]["id"] == ok["id"]
    assert select(cfg, "auto", store, "NVIDIA H200", 1, False)[1]["id"] == ok["id"]
    only_timeout = Store(tmp_path / "t")
    only_timeout.append(
        {"key": cfg.key, "status": "timeout", "env": env, "recorded_at": "2026-01-02T00:00:00Z"}
    )
    assert select(cfg, "cached", only_timeout, None, 0, False)[1]["status"] == "timeout"
    assert select(cfg, "auto", only_timeout, "NVIDIA H200", 1, False)[0] == "live"


def test_lookups_by_gpu_model_prefer_unpacked_and_separate_profiled_runs(tmp_path):
    """gpu="H100" reads only H100 records (datasheet name matching); a run alone on its host wins
    over a newer packed one; profile=True reads only profiled records, other lookups never do."""
    from megalab.runs import presets
    from megalab.jobs.running import Store, select

    cfg = presets.get("gpt-tiny").replace(impl="local")
    store = Store(tmp_path)
    h100 = store.append(
        {
            "key": cfg.key,
            "status": "ok",
            "env": {"gpu_name": "NVIDIA H100 80GB HBM3"},
            "recorded_at": "2026-01-01T00:00:00Z",
        }
    )
    alone = store.append(
        {
            "key": cfg.key,
            "status": "ok",
            "env": {"gpu_name": "NVIDIA H200"},
            "tags": ["ch01"],
            "recorded_at": "2026-01-02T00:00:00Z",
        }
    )
    store.append(
        {
            "key": cfg.key,
            "status": "ok",
            "env": {"gpu_name": "NVIDIA H200"},
            "tags": ["ch01", "packed"],
            "recorded_at": "2026-01-03T00:00:00Z",
        }
    )
    prof = store.append(
        {
            "key": cfg.key,
            "status": "ok",
            "env": {"gpu_name": "NVIDIA H200"},
            "tags": ["profile"],
            "recorded_at": "2026-01-04T00:00:00Z",
        }
    )
    assert select(cfg, "cached", store, None, 0, False, gpu="H100")[1]["id"] == h100["id"]
    assert select(cfg, "cached", store, None, 0, False, gpu="H200")[1]["id"] == alone["id"]
    assert select(cfg, "cached", store, None, 0, False, profile=True)[1]["id"] == prof["id"]
    # auto on an H100 machine: its own record, whatever reference GPU the caller names
    assert (
        select(cfg, "auto", store, "NVIDIA H100 80GB HBM3", 1, False, gpu="H200")[1]["id"]
        == h100["id"]
    )
    with pytest.raises(NotRecorded):
        select(cfg, "cached", store, None, 0, False, gpu="A100")


def test_frame_marks_live_results_as_yours():
    from megalab.jobs.running import Result, frame
    from run_records import record

    df = frame([Result(record(), "cached"), Result(record(), "live")])
    assert list(df["source"]) == ["reference", "yours"] and df["tp"].tolist() == [2, 2]


def test_same_gpu_model():
    from megalab.records.store import same_gpu_model

    assert same_gpu_model("NVIDIA H200", "H200") and not same_gpu_model("NVIDIA H200", "H100")
    assert same_gpu_model("Mystery GPU", "mystery gpu") and not same_gpu_model(None, "H200")


def test_frame_puts_the_reference_beside_a_readers_run(tmp_path):
    from megalab.jobs.running import Result, Store, frame
    from run_records import record

    store = Store(tmp_path)
    ref = store.append(record(gpu="NVIDIA H200"))
    mine = Result(record(gpu="NVIDIA A100-SXM4-80GB"), "live")
    df = frame([mine], reference_gpu="H200", store=store)
    assert list(df["source"]) == ["yours", "reference"] and df["id"].iloc[1] == ref["id"]
    assert list(frame([Result(ref, "cached")], reference_gpu="H200", store=store)["source"]) == [
        "reference"
    ]


def test_trained_counts_a_run_that_hung_only_at_exit():
    """records.trained: ok, or a timeout whose trainer printed its summary (every step done; session
    18's CUDA-graph runs and session 17's cut-off pipeline run); a timeout mid-run, an OOM or a
    failure did not train."""
    from megalab.records.schema import trained

    cfg = {"iters": 20}
    done = {"steps": 20, "startup_marks_s": {"first_step": 21.2}}
    assert trained({"status": "ok", "summary": {}, "config": cfg})
    assert trained({"status": "timeout", "summary": done, "config": cfg})
    assert not trained({"status": "timeout", "summary": {"steps": 17}, "config": cfg})
    # no summary line
    assert not trained({"status": "timeout", "summary": {"steps": 20}, "config": cfg})
    assert not trained({"status": "oom", "summary": done, "config": cfg})


def test_a_repeat_made_for_another_comparison_answers_only_where_nothing_else_does(tmp_path):
    """results.select reads a configuration's own record before a newer repeat tagged with
    REPEAT_TAGS (session 19's graph pairs repeat chapter 3's TP 4 + SP step without graphs; session
    21's plan repeats chapter 6's layouts as a spread), and reads the repeat where it is the only
    record; a packed record still yields to one run alone."""
    store = Store(tmp_path)
    own = store.append(_record(at="2025-01-01T00:00:00Z"))
    store.append(_record(at="2025-03-01T00:00:00Z", tags=["graphs"]))
    spread = store.append(_record(at="2025-04-01T00:00:00Z", tags=["spread"]))
    assert results.run(CFG, mode="cached", store=store, quiet=True).record["id"] == own["id"]
    assert (
        results.run(CFG, mode="cached", store=store, quiet=True, exclude=[own["id"]]).record["id"]
        == spread["id"]
    )
    packed = store.append(_record(at="2025-05-01T00:00:00Z", tags=["packed"]))
    assert results.run(CFG, mode="cached", store=store, quiet=True).record["id"] == own["id"]
    assert (
        results.run(CFG, mode="cached", store=store, quiet=True, exclude=[own["id"]]).record["id"]
        == packed["id"]
    )


def test_a_lease_warm_up_answers_only_where_nothing_else_does(tmp_path):
    """A plan's warm-up run (records.WARMUP_TAG) repeats a chapter's configuration as the lease's
    first, slow run: the chapter's own record answers before it, however new the warm-up."""
    store = Store(tmp_path)
    own = store.append(_record(at="2025-01-01T00:00:00Z"))
    warm = store.append(_record(at="2025-06-01T00:00:00Z", tags=["warmup"]))
    assert results.run(CFG, mode="cached", store=store, quiet=True).record["id"] == own["id"]
    assert (
        results.run(CFG, mode="cached", store=store, quiet=True, exclude=[own["id"]]).record["id"]
        == warm["id"]
    )
