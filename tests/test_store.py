"""store.py: an append-only store that survives concurrent writers and kill -9, read tolerantly."""

import json
import multiprocessing
import os
import signal
import time
import warnings

import pytest

from megalab.records.schema import to_frame
from megalab.records.store import Store, load

from run_records import CFG
from run_records import record as _record


# -- append / load ---------------------------------------------------------------------------------
def test_append_load_roundtrip_and_schema(tmp_path):
    store = Store(tmp_path)
    rec = store.append(_record())
    assert (tmp_path / "runs.jsonl").read_bytes().count(b"\n") == 1
    [back] = store.load()
    assert back == rec
    for name in (
        "schema",
        "id",
        "key",
        "label",
        "config",
        "status",
        "error",
        "summary",
        "series",
        "predicted",
        "env",
        "git_commit",
        "recorded_at",
        "tags",
        "run_dir",
    ):
        assert name in back
    assert back["key"] == CFG.key and back["label"] == CFG.label and back["schema"] == 1
    assert back["summary"]["step_time_s"] == 0.5 and back["series"]["loss"][0] == 10.0
    assert store.load(kind="bench") == []


def test_bench_records_go_to_bench_file(tmp_path):
    store = Store(tmp_path)
    store.append({"kind": "bench", "name": "matmul", "tflops": 780.0})
    assert not (tmp_path / "runs.jsonl").exists()
    assert store.load("bench")[0]["tflops"] == 780.0


def test_non_finite_numbers_become_null(tmp_path):
    store = Store(tmp_path)
    store.append({"status": "ok", "summary": {"loss_last": float("nan"), "x": float("inf")}})
    line = (tmp_path / "runs.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line
    assert store.load()[0]["summary"] == {"loss_last": None, "x": None}


def test_append_never_truncates(tmp_path):
    store = Store(tmp_path)
    for i in range(3):
        store.append({"n": i})
    before = (tmp_path / "runs.jsonl").read_bytes()
    store.append({"n": 3})
    after = (tmp_path / "runs.jsonl").read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 4


def _writer(root, worker, n):
    store = Store(root)
    for i in range(n):
        store.append({"worker": worker, "i": i, "pad": "x" * (4096 * (1 + i % 5))})


def test_concurrent_writers(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 50)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    raw = (tmp_path / "runs.jsonl").read_bytes().split(b"\n")
    assert raw[-1] == b""
    lines = [json.loads(x) for x in raw[:-1]]  # every line is one valid record
    assert len(lines) == 400
    assert {(r["worker"], r["i"]) for r in lines} == {(w, i) for w in range(8) for i in range(50)}
    assert len({r["id"] for r in lines}) == 400


def test_readers_never_see_half_a_record(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 30)) for w in range(4)]
    for p in procs:
        p.start()
    store, seen = Store(tmp_path), 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn line would raise here
        while any(p.is_alive() for p in procs) or seen < 120:
            seen = len(store.load())
    assert seen == 120


def test_torn_last_line_is_isolated_and_reported(tmp_path):
    store = Store(tmp_path)
    store.append({"n": 0})
    with open(tmp_path / "runs.jsonl", "ab") as f:  # what a writer killed mid-write leaves behind
        f.write(b'{"n": 1, "pad": "xxxx')
    with pytest.warns(UserWarning, match=r"runs.jsonl:2"):
        assert [r["n"] for r in store.load()] == [0]
    store.append({"n": 2})
    lines = (tmp_path / "runs.jsonl").read_bytes().split(b"\n")
    assert lines[1] == b'{"n": 1, "pad": "xxxx' and json.loads(lines[2])["n"] == 2
    with pytest.warns(UserWarning):
        assert [r["n"] for r in store.load()] == [0, 2]


def test_a_read_parses_each_state_of_the_file_once_and_sees_every_change(tmp_path):
    """Reads are cached per file content: a second read of the same bytes parses nothing, while an
    append, a torn line or a rewrite to other bytes of the same size is read afresh; a record handed
    out is a copy, so a caller's new key does not reach the next read."""
    import megalab.records.store as store_module

    store = Store(tmp_path)
    store.append({"n": 0})
    first = store.load()
    first[0]["mine"] = True
    calls = []
    real = store_module._lines
    store_module._lines = lambda data: calls.append(len(data)) or real(data)
    try:
        assert store.load() == [{k: v for k, v in first[0].items() if k != "mine"}] and calls == []
        store.append({"n": 1})
        assert [r["n"] for r in store.load()] == [0, 1] and len(calls) == 1
        path = tmp_path / "runs.jsonl"
        # same size, other content
        path.write_bytes(path.read_bytes().replace(b'"n":1,', b'"n":7,'))
        assert [r["n"] for r in store.load()] == [0, 7] and len(calls) == 2
        with open(path, "ab") as f:
            f.write(b'{"n": 8, "pad": "xx')
        with pytest.warns(UserWarning, match=r"runs.jsonl:3"):
            assert [r["n"] for r in store.load()] == [0, 7]
    finally:
        store_module._lines = real


def test_a_wrongly_typed_record_is_skipped_with_its_line_and_reason(tmp_path, capsys):
    from megalab import cli

    store = Store(tmp_path)
    good = _record()
    bad = {**_record(), "config": {**good["config"], "tp": "2"}, "id": "hand-edited"}
    for r in (good, bad, {**_record(), "status": 3, "id": "x"}):
        store.append(r)
    with pytest.warns(
        UserWarning,
        match=r"runs.jsonl:2: config field 'tp' should be int.*runs.jsonl:3: field 'status'",
    ):
        assert [r["id"] for r in store.load()] == [good["id"]]
    assert cli.main(["results", "--store", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("megalab results: warning: skipped 2 ") and len(err.splitlines()) == 1


def _big_writer(root):
    store = Store(root)
    store.append({"n": "first"})
    while True:
        store.append({"n": "big", "pad": "y" * (8 << 20)})


def test_kill_9_mid_write(tmp_path):
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_big_writer, args=(str(tmp_path),))
    p.start()
    path = tmp_path / "runs.jsonl"
    deadline = time.time() + 20
    while time.time() < deadline and (not path.exists() or path.stat().st_size < (12 << 20)):
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    torn = not path.read_bytes().endswith(b"\n")  # almost always: an 8 MiB write cut by SIGKILL
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = Store(tmp_path).load()
    assert torn == any("torn or invalid" in str(w.message) for w in caught)
    assert before[0]["n"] == "first" and all(r["n"] in ("first", "big") for r in before)
    Store(tmp_path).append({"n": "after"})  # the dead writer's lock is gone with it
    raw = path.read_bytes()
    # on its own line
    assert raw.endswith(b"\n") and json.loads(raw.split(b"\n")[-2])["n"] == "after"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        after = Store(tmp_path).load()
    assert after[: len(before)] == before and after[-1]["n"] == "after"


# -- import ----------------------------------------------------------------------------------------
_BENCH = {
    "schema": 1,
    "kind": "bench",
    "bench": "nccl",
    "env": {"gpu_name": "NVIDIA H200", "gpu_count": 4},
    "recorded_at": "2025-01-01T00:00:00Z",
}


def test_import_twice_adds_nothing_new(tmp_path):
    other = Store(tmp_path / "host")
    a, b = other.append(_record()), other.append(_record(status="oom"))
    other.append(_BENCH)
    with open(other.path(), "a") as f:
        f.write(json.dumps({k: v for k, v in _record(status="failed").items() if k != "id"}) + "\n")
    mine = Store(tmp_path / "mine")
    mine.append(a)  # already present: must not be duplicated or overwritten
    assert mine.import_records(other.path()) == 2
    assert mine.import_records(other.path()) == 0
    assert mine.import_records(other.path("bench")) == 1
    assert mine.import_records(other.path("bench")) == 0
    ids = [r["id"] for r in mine.load()]
    assert len(ids) == len(set(ids)) == 3 and {a["id"], b["id"]} <= set(ids)


def _lines(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("{not json", r"not JSON"),
        (json.dumps([1, 2]), r"JSON object"),
        ({"status": "ok", "label": "no id"}, r"field 'schema' is missing"),
        ({**_record(), "schema": 2}, r"schema=2"),
        ({**_record(), "status": "great"}, r"status='great'"),
        ({**_record(), "tags": "t"}, r"'tags' should be a list"),
        ({**_record(), "summary": None}, r"'summary' should be an object"),
        ({**_record(), "key": "0" * 16}, r"is not its config's key"),
        ({**_record(), "config": {**_record()["config"], "wings": 2}}, r"unknown RunConfig field"),
        ({**_record(), "config": {**_record()["config"], "tp": "2"}}, r"'tp' should be int"),
        (
            {**_record(), "config": {**_record()["config"], "name": "../../etc"}},
            r"name='../../etc'",
        ),
        ({**_BENCH, "env": "H200"}, r"'env' should be an object"),
        (
            {**_record(), "summary": {**_record()["summary"], "step_time_s": "fast"}},
            r"summary 'step_time_s' should be",
        ),
        (
            {**_record(), "summary": {**_record()["summary"], "mfu": -0.3}},
            r"summary 'mfu' should be",
        ),
        (
            {**_record(), "series": {**_record()["series"], "loss": [7.1, "x"]}},
            r"series 'loss' should be",
        ),
        (
            {**_record(), "summary": {**_record()["summary"], "step_time_s": None}},
            r"an ok run needs",
        ),
        # nesting and numbers the readers cannot use, text a terminal would act on, fields chapters
        # rely on
        (
            '{"schema": 1, "predicted": ' + "[" * 500 + "]" * 500 + "}",
            r"nested deeper than 32 levels",
        ),
        ("[" * 10_000 + "]" * 10_000, r"not JSON \(RecursionError\)"),
        ('{"schema": 1, "summary": {"steps": ' + "9" * 500 + "}}", r"whole number beyond 2\*\*63"),
        (
            {**_record(), "env": {**_record()["env"], "hostname": "\x1b]0;pwned\x07"}},
            r"env.hostname holds a control",
        ),
        ({**_record(), "label": "a\x1b[2Jb"}, r"label holds a control character"),
        ({**_record(), "tags": ["ok", "\x1b[8m"]}, r"tags\[1\] holds a control character"),
        ({**_record(), "git_commit": "abc\n123"}, r"git_commit holds a control character"),
        ({**_record(), "run_dir": "runs/\x9b31m"}, r"run_dir holds a control character"),
        (
            {**_record(), "error": {"message": "\x1b[31mboom"}},
            r"error.message holds a control character",
        ),
        (
            {**_record(status="invalid"), "config": {**_record()["config"], "name": "\x1b[2J"}},
            r"cannot name a run folder",
        ),
        ({**_BENCH, "env": {}}, r"env.gpu_name is missing"),
        ({**_BENCH, "recorded_at": "not a date"}, r"recorded_at='not a date' is not a UTC time"),
        (
            {**_BENCH, "env": {"gpu_name": "H200", "gpu_count": "many"}},
            r"env.gpu_count=\"many\" should be a number",
        ),
        ({**_record(), "env": {"gpu_count": 4}}, r"env.gpu_name is missing"),
    ],
)
def test_import_refuses_the_whole_file_with_file_line_reasons(tmp_path, bad, reason):
    from megalab.records.store import ImportRefused

    src = _lines(tmp_path / "in.jsonl", _record(), bad, _record(status="oom"))
    mine = Store(tmp_path / "mine")
    with pytest.raises(ImportRefused, match=reason) as err:
        mine.import_records(src)
    assert str(err.value).startswith(f"{src}:2: ")
    assert not mine.path().exists() and not mine.path("bench").exists()  # nothing imported


def test_import_of_a_missing_or_empty_file_is_refused(tmp_path):
    from megalab.records.store import ImportRefused

    with pytest.raises(ImportRefused, match="no such file"):
        Store(tmp_path).import_records(tmp_path / "nope.jsonl")
    with pytest.raises(ImportRefused, match="holds no records"):
        Store(tmp_path).import_records(_lines(tmp_path / "empty.jsonl", ""))


def test_every_committed_record_passes_the_import_check():
    from pathlib import Path

    from megalab.records.schema import record_problems

    root = Path(__file__).resolve().parents[1] / "results"
    for name in ("runs.jsonl", "bench.jsonl"):
        for n, line in enumerate((root / name).read_text().splitlines(), 1):
            assert record_problems(json.loads(line)) == [], f"{name}:{n}"


# -- find / filters / frame ------------------------------------------------------------------------
def test_find_newest_first_and_filters(tmp_path):
    store = Store(tmp_path)
    old = store.append(_record(at="2025-01-01T00:00:00Z"))
    new = store.append(
        _record(status="oom", at="2025-06-01T00:00:00Z", gpu="NVIDIA H100 80GB HBM3")
    )
    store.append(_record(cfg=CFG.replace(mbs=4, gbs=16)))
    assert [r["id"] for r in store.find(CFG)] == [new["id"], old["id"]]
    assert [r["id"] for r in store.find(CFG.key, gpu_name="nvidia h200")] == [old["id"]]
    assert [r["id"] for r in store.find(CFG, exclude=[new["id"]])] == [old["id"]]
    assert len(store.load(tp=2)) == 3 and len(store.load(mbs=4)) == 1
    assert (
        len(store.load(status=("ok", "oom"))) == 3 and len(store.load(gpu_name="NVIDIA H200")) == 2
    )
    assert len(store.load(label=lambda s: "mbs4" in s)) == 1 and len(store.load(tag="t")) == 3
    assert load(store=tmp_path, status="oom")[0]["id"] == new["id"]


def test_find_by_gpu_model_and_profiling(tmp_path):
    store = Store(tmp_path)
    plain = store.append(_record(gpu="NVIDIA H200"))
    profiled = store.append(_record(gpu="H200", tags=["t", "profile"], at="2025-12-01T00:00:00Z"))
    store.append(_record(gpu="NVIDIA H100 80GB HBM3"))
    assert [r["id"] for r in store.find(CFG, gpu_model="H200")] == [profiled["id"], plain["id"]]
    assert [r["id"] for r in store.find(CFG, gpu_model="H200", profiled=False)] == [plain["id"]]
    assert [r["id"] for r in store.find(CFG, profiled=True)] == [profiled["id"]]


def test_to_frame_columns(tmp_path):
    frame = to_frame([_record(), _record(status="oom")])
    for col in (
        "label",
        "key",
        "status",
        "model",
        "tp",
        "pp",
        "dp",
        "mbs",
        "gbs",
        "num_microbatches",
        "step_time_s",
        "mfu",
        "mem_reserved_peak_gib",
        "loss_last",
        "gpu_name",
        "predicted_memory_gib_total",
        "predicted_flops_per_step",
        "error",
    ):
        assert col in frame.columns, col
    assert list(frame.columns[:3]) == ["label", "key", "status"]
    assert frame["dp"].tolist() == [1, 1] and frame["num_microbatches"].tolist() == [4, 4]
    assert frame["status"].tolist() == ["ok", "oom"] and frame["error"].isna().tolist() == [
        True,
        False,
    ]


def test_to_frame_fills_fields_added_after_a_record():
    """A record made before `compile` existed ran compiled: the frame says so, not NaN."""
    old = _record()
    del old["config"]["compile"]
    frame = to_frame([old, _record(cfg=CFG.replace(compile=False))])
    assert frame["compile"].tolist() == [True, False]


def test_default_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "x"))
    assert Store().root == tmp_path / "x"


def test_errata_retract_records_without_touching_them(tmp_path):
    """An erratum hides a record from lookups; runs.jsonl itself is never rewritten."""
    store = Store(tmp_path)
    kept = store.append(
        {"key": "k", "label": "x", "recorded_at": "2026-01-01T00:00:00Z", "status": "ok"}
    )
    bad = store.append(
        {"key": "k", "label": "x", "recorded_at": "2026-01-02T00:00:00Z", "status": "ok"}
    )
    before = (tmp_path / "runs.jsonl").read_bytes()
    (tmp_path / "errata.jsonl").write_text(json.dumps({"ids": [bad["id"]], "reason": "bug"}) + "\n")
    assert store.errata() == {bad["id"]: "bug"}
    assert [r["id"] for r in store.find("k")] == [kept["id"]]
    assert (tmp_path / "runs.jsonl").read_bytes() == before


def test_provenance_groups_records_by_environment_and_commit():
    from megalab.records.schema import provenance

    env = {"gpu_name": "NVIDIA H200", "gpu_count": 4, "driver": "580", "torch": "2.11.0"}
    recs = [
        {"env": env, "git_commit": "a" * 40, "recorded_at": "2026-11-21T19:00:00Z"},
        {
            "env": {**env, "gpu_count": 1},
            "git_commit": "a" * 40,
            "recorded_at": "2026-11-21T19:05:00Z",
        },
        {
            "env": {**env, "transformer_engine": "2.11.0"},
            "git_commit": "b" * 40,
            "recorded_at": "2026-11-21T20:00:00Z",
        },
    ]
    df = provenance(recs)
    assert list(df["records"]) == [2, 1]
    assert df.loc[0, "gpus"] == [1, 4] and df.loc[0, "transformer_engine"] == "not installed"
    assert df.loc[1, "git_commit"] == "b" * 12 and df.loc[1, "first"] == "2026-11-21T20:00:00Z"


def test_a_profiled_run_keeps_its_kernel_timeline(tmp_path):
    """make_record embeds the run folder's profile.json (written by the trainer's profiler)."""
    import json
    from megalab import metrics
    from megalab.jobs.launch import RunOutcome
    from megalab.records.schema import make_record
    from run_records import CFG

    (tmp_path / "profile.json").write_text(
        json.dumps(
            {
                "steps": [5, 6, 7],
                "kernel_s_per_step": {"nccl": 0.1},
                "timeline": {"step": 7, "kernels": []},
            }
        )
    )
    rec = make_record(
        CFG, RunOutcome("ok", None, metrics.Parsed(None, [], None), tmp_path, 0), env={}
    )
    assert rec["profile"]["timeline"]["step"] == 7
    plain = make_record(
        CFG, RunOutcome("ok", None, metrics.Parsed(None, [], None), tmp_path / "none", 0), env={}
    )
    assert "profile" not in plain


def test_provenance_keeps_the_dirty_mark():
    from megalab.records.schema import _short_commit

    assert _short_commit("44f6e65+dirty") == "44f6e65+dirty"
    assert _short_commit("aefba359cb84d00d1e2f") == "aefba359cb84" and _short_commit(None) == ""


# -- hostile lines, files that are not regular, a full disk
# ----------------------------------------------
def test_a_line_the_readers_cannot_use_is_skipped_not_a_traceback(tmp_path):
    store = Store(tmp_path)
    good = store.append(_record())
    with open(store.path(), "a") as f:
        # RecursionError in json
        f.write("[" * 10_000 + "]" * 10_000 + "\n")
        # OverflowError in a float
        f.write(json.dumps({**_record(), "summary": {"steps": 10**500}}) + "\n")
        f.write(
            json.dumps({**_record(), "predicted": {"x": json.loads("[" * 500 + "]" * 500)}}) + "\n"
        )
    with pytest.warns(
        UserWarning, match=r"skipped 3 .*:2: not JSON \(RecursionError\).*:3: holds a whole number"
    ):
        assert [r["id"] for r in store.load()] == [good["id"]]
    with pytest.warns(UserWarning, match="nested deeper than 32 levels"):
        assert [r["id"] for r in store.stream()] == [good["id"]]


def test_writes_refuse_a_symlink_or_fifo_and_never_follow_it(tmp_path):
    from megalab.records.store import StoreUnusable

    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    for name in ("runs.jsonl", "runs.jsonl.lock"):
        root = tmp_path / name.replace(".", "_")
        root.mkdir()
        (root / name).symlink_to(victim)
        with pytest.raises(StoreUnusable, match="a symbolic link"):
            Store(root).append(_record())
    assert victim.read_text() == "someone else's file\n"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "f").mkdir()
    os.mkfifo(tmp_path / "f" / "runs.jsonl")
    with pytest.raises(StoreUnusable, match="a FIFO"):  # refused, not hung
        Store(tmp_path / "f").append(_record())


def test_a_full_disk_imports_nothing_and_leaves_no_torn_line(tmp_path):
    """The kernel's file size limit (RLIMIT_FSIZE) writes part of the batch, then fails, as a full
    disk does."""
    import subprocess
    import sys
    from pathlib import Path

    mine = Store(tmp_path / "mine")
    mine.append(_record())
    before = mine.path().read_bytes()
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(_record()) + "\n" for _ in range(100)))
    code = f"""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 5000}, {len(before) + 5000}))
from megalab.records.store import Store, StoreUnusable
try:
    Store({str(tmp_path / "mine")!r}).import_records({str(src)!r})
except StoreUnusable as exc:
    print("refused:", exc)
"""
    lib = Path(__file__).resolve().parents[1] / "lib"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(lib)},
    )
    assert "refused:" in out.stdout and "nothing was written" in out.stdout, out.stderr
    assert mine.path().read_bytes() == before  # all or nothing


def test_a_live_run_that_the_store_refuses_keeps_its_record_in_its_run_folder(
    tmp_path, monkeypatch
):
    from megalab import launch, results
    from megalab.jobs.launch import RunOutcome
    from megalab.metrics import Parsed
    from megalab.records.store import StoreUnusable

    steps = [{"kind": "step", "step": i, "loss": 9.0 - i, "step_time_s": 0.25} for i in range(5)]
    outcome = RunOutcome(
        "ok",
        None,
        Parsed(None, steps, {"env": {"gpu_name": "NVIDIA H200", "gpu_count": 4}}),
        tmp_path,
        0,
    )
    monkeypatch.setattr(launch, "launch", lambda cfg, **kw: outcome)
    store = Store(tmp_path / "store")

    def full(record):
        raise StoreUnusable(f"{store.path()}: No space left on device: nothing was written")

    monkeypatch.setattr(store, "append", full)
    with pytest.raises(
        StoreUnusable, match=r"record is kept in .*record.jsonl: import it with `megalab results"
    ):
        results._live(CFG, store, [], 60, False)
    kept = Store(tmp_path / "other")
    assert kept.import_records(tmp_path / "record.jsonl") == 1 and kept.load()[0]["key"] == CFG.key


def test_provenance_says_a_multi_gpu_link_of_none_was_not_read():
    """A 2-GPU fingerprint saying "none" was made before env read NV# links: it reads "not read";
    one GPU and no link is simply "none"; a link read stays as recorded."""
    from megalab.records.schema import LINK_NOT_READ, provenance

    def rec(link, gpus, at):
        env = {"gpu_name": "H200", "interconnect": link, "gpu_count": gpus}
        return {"env": env, "git_commit": "a" * 40, "recorded_at": at}

    df = provenance(
        [
            rec("none", 2, "2026-11-26T00:00:00Z"),
            rec("none", 1, "2026-11-27T00:00:00Z"),
            rec("NVLink (NV18)", 2, "2026-11-28T00:00:00Z"),
        ]
    )
    assert list(df["interconnect"]) == [LINK_NOT_READ, "none", "NVLink (NV18)"]
