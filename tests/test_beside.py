"""megalab.book.beside: a reader's reproduction on fewer GPUs than the book's re-measures part of a
comparison group; the book's recording answers for the page, the reader's points beside it. The
chapter 01 and 02 notebooks run as `megalab reproduce chNN --mode live --quick --gpus 2` ran them
on a 2-GPU H200 host, against the committed records of those reproductions (no GPU: their runs are
read back, the ones they had not reached are faked)."""

import copy
import json
import shutil
import uuid
from pathlib import Path

import pytest

from megalab.book import beside
from megalab.book.specs import Group
from megalab.jobs import reproduction
from megalab.jobs import running as results
from megalab.records import reproductions
from megalab.records.store import NotRecorded, Store

from run_records import CFG, record

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "book" / "02_tensor_parallel" / "tensor_parallel.ipynb"
# the quick reproduction of chapter 02 on 2x H200 whose notebook failed on a TP 4 row
CH02_2GPU = "02_tensor_parallel/tensor_parallel.2gpu.20261129T005932Z.1d06"
CH01 = ROOT / "book" / "01_data_parallel" / "data_parallel.ipynb"
CH01_2GPU = "01_data_parallel/data_parallel.2gpu.20261129T011125Z.14da"  # interrupted

WIDE = CFG.replace(gpus=4, tp=4)
GROUP = Group("t.g", [CFG, CFG.replace(mbs=4), WIDE], profiled=1)  # the book's, on 4 GPUs
NARROW = Group("t.g", [CFG, CFG.replace(mbs=4)], profiled=1)  # a 2-GPU reader's


def _fake_launches(monkeypatch, gpus: int) -> list:
    """This machine has `gpus` H200s; a launch appends the newest ok record of its configuration
    (or a synthetic one) under the tags asked. Returns the keys launched."""
    launched = []

    def fake(cfg, store, tags, timeout_s, progress, launch_kw=None):
        launched.append(cfg.key)
        same = [r for r in store.find(cfg) if r.get("status") == "ok"]
        r = copy.deepcopy(same[0]) if same else record(cfg)
        r.update(id=uuid.uuid4().hex, tags=list(tags), recorded_at="2027-01-01T00:00:00Z")
        return results.Result(store.append(r), "live")

    monkeypatch.setattr(results, "_live", fake)
    monkeypatch.setattr(results, "_local_hardware", lambda: ("NVIDIA H200", gpus, True))
    return launched


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The book's recording of GROUP (4 GPUs), and a quick reproduction "q" on 2 GPUs that marks
    NARROW's runs."""
    s = Store(tmp_path)
    for cfg in (*GROUP.configs, *GROUP.configs):
        s.append(record(cfg, tags=[GROUP.tag], at="2025-01-01T00:00:00Z", git_commit="0ld"))
    keys = [c.key for c in NARROW.quick_runs()]
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 2}
    s.append(reproductions.make("q", "p", 2, "auto", "started", env, True, quick_keys=keys))
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path))
    return s


def test_a_partial_reproduction_gives_way_to_the_books_recording(store, monkeypatch):
    launched = _fake_launches(monkeypatch, 2)
    with reproduction.active("q"):
        g = NARROW.run("auto", store=store)
        mine = beside.yours(g)
        said = beside.note(g)
    assert WIDE.key not in launched and len(launched) == 4  # warm-up, each once, the profiled
    assert list(g["runs"]) == [2, 2, 2] and beside.partial(g)  # the book's: two rounds, 4 GPUs
    assert g.attrs["not_remeasured"] == [WIDE.label]
    assert list(mine["runs"]) == [1, 1] and not beside.partial(mine)
    layers = "plain (non-TE) layers, eager, global batch 8"
    assert said.startswith(f"Your GPUs re-measured gpt-test, TP 2, {layers} (500 ms a step, the ")
    assert f"did not: gpt-test, TP 4, {layers}." in said


def test_a_quick_reproduction_of_the_whole_group_stands_beside_the_books(store, monkeypatch):
    """Once each is too thin for the page's claims (the book alternated two rounds): the book's
    recording answers, the reader's beside it; a full live reproduction, as many rounds as the
    book's, is the reader's own."""
    _fake_launches(monkeypatch, 4)
    keys = [c.key for c in GROUP.quick_runs()]
    env = {"gpu_name": "NVIDIA H200", "gpu_count": 4}
    store.append(reproductions.make("w", "p", 4, "auto", "started", env, True, quick_keys=keys))
    with reproduction.active("w"):
        g = GROUP.run("auto", store=store)
        said = beside.note(g)
    assert list(g["runs"]) == [2, 2, 2] and beside.partial(g) and not g.attrs["not_remeasured"]
    assert list(beside.yours(g)["runs"]) == [1, 1, 1] and g.attrs["yours"]["rounds"] == 1
    assert "Each was timed once, where the book alternated them over 2 rounds." in said
    store.append(reproductions.make("f", "p", 4, "live", "started", env, False))
    with reproduction.active("f"):
        g = GROUP.run("live", store=store)
    assert list(g["runs"]) == [2, 2, 2] and not beside.partial(g)
    assert beside.yours(g) is None and beside.note(g) == ""


def test_a_run_wider_than_the_reproductions_gpus_is_read_not_launched(store, monkeypatch):
    launched = _fake_launches(monkeypatch, 4)  # a 4-GPU machine, a reproduction on 2 of them
    with reproduction.active("q"):
        got = results.run(WIDE, "live", store=store, quiet=True)  # even asked live
        with pytest.raises(NotRecorded):
            results.run(WIDE.replace(mbs=8), "live", store=store, quiet=True)
        assert list(NARROW.run("auto", store=store)["runs"]) == [2, 2, 2]  # 2 GPUs: NARROW's
    assert got.source == "cached" and got.record["git_commit"] == "0ld"
    assert WIDE.key not in launched and len(launched) == 4


def _cells(path: Path):
    """(cell id, source) of a notebook's code cells; the parameters cell with what a live quick
    reproduction on 2 GPUs injects."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            src = "".join(cell["source"])
            if "parameters" in cell["metadata"].get("tags", []):
                src += '\nmode = "auto"\ngpus = 2\nquick = True\n'
            yield cell.get("id"), src


def _execute(notebook: Path, reproduction_id: str, tmp_path, monkeypatch) -> tuple[dict, set, list]:
    """Run `notebook`'s cells in this process under the committed reproduction, on a copy of the
    store: (the namespace, the keys it had measured, the keys launched now)."""
    shutil.copytree(ROOT / "results", tmp_path / "results")
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    ran = Store(tmp_path / "results").load("run", tag=reproductions.tag(reproduction_id))
    launched = _fake_launches(monkeypatch, 2)
    ns: dict = {}
    with reproduction.active(reproduction_id):
        for cell, src in _cells(notebook):
            exec(compile(src, f"{notebook.name}:{cell}", "exec"), ns)
    return ns, {r["key"] for r in ran}, launched


def test_chapter_02_on_two_gpus_shows_the_books_points_and_yours(tmp_path, monkeypatch, capsys):
    """Its 7 runs read back, not launched; what it had not measured yet (the TP 2 parity, the
    2-GPU TP-against-DP group) faked. The page's numbers are the book's TP 4 recording; the
    reader's TP 1 and TP 2 stand beside them."""
    from megalab.book.chapters import ch02_analysis as ch02
    from megalab.records.timings import group

    ns, ran, launched = _execute(NOTEBOOK, CH02_2GPU, tmp_path, monkeypatch)
    assert len(ran) == 6 and not ran & set(launched)  # one of the six profiled too
    tp = ns["tp"]
    assert tp.attrs["not_remeasured"] == [c.label for c in tp["cfg"] if c.tp == 4]
    book = ch02.strong_scaling(group(None, "ch02.tp", "H200"))
    assert list(ns["st"]["median_ms"]) == list(book["median_ms"])  # the page reads the book's
    bars = ch02.beside_paper(ns["st"], "speedup", "paper_speedup")
    assert list(bars.loc[bars["who"] == beside.YOURS, "layout"]) == ["1 GPU", "TP 2"]
    out = capsys.readouterr().out
    assert out.count("Your GPUs re-measured") == 2
    assert "(148 ms a step, the book's 147 ms)" in out  # gpt-1.2b on one GPU, graphed
    assert "did not: gpt-1.2b, TP 4, global batch 8; gpt-4.2b, TP 4, global batch 8." in out


def test_chapter_01_on_two_gpus_shows_the_books_points(tmp_path, monkeypatch, capsys):
    """Chapter 01's quick reproduction on 2x H200, interrupted after 12 runs: the rest faked. Its
    weak-scaling figure reads the book's DP 4 point; the reader's DP 1 and DP 2 are said beside."""
    ns, ran, launched = _execute(CH01, CH01_2GPU, tmp_path, monkeypatch)
    assert len(ran) == 10 and len(launched) == 6  # the groups it had not reached: strong, overlap
    assert list(ns["wk"]["GPUs"]) == [1, 2, 4] and ns["group"].attrs["not_remeasured"]
    out = capsys.readouterr().out
    assert out.count("Your GPUs re-measured") == 3
    assert "gpt2-xl, DP 2, global batch 32 (415 ms a step, the book's 410 ms)" in out
