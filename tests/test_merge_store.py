"""tools/gpu/merge_store.py: a GPU host's store gains the checkout's records it lacks, and keeps
every record it made."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("merge_store", ROOT / "tools/gpu/merge_store.py")
merge_store = importlib.util.module_from_spec(spec)
spec.loader.exec_module(merge_store)


def _write(path: Path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_merge_appends_only_what_the_store_lacks_and_keeps_its_own(tmp_path):
    src, dst = tmp_path / "results", tmp_path / "store"
    src.mkdir()
    dst.mkdir()
    _write(src / "runs.jsonl", [{"id": "a"}, {"id": "b"}])
    _write(src / "bench.jsonl", [{"id": "m"}])
    _write(src / "errata.jsonl", [{"ids": ["a"]}])
    _write(dst / "runs.jsonl", [{"id": "b", "host": "made here"}, {"id": "c"}])
    added = merge_store.merge(src, dst)
    assert added == {"bench.jsonl": 1, "errata.jsonl": 1, "runs.jsonl": 1}
    runs = [json.loads(x) for x in (dst / "runs.jsonl").read_text().splitlines()]
    assert [r["id"] for r in runs] == ["b", "c", "a"] and runs[0]["host"] == "made here"
    assert merge_store.merge(src, dst) == {"bench.jsonl": 0, "errata.jsonl": 0, "runs.jsonl": 0}
