"""tools/gpu/pack.py's plan reader and its --resume bookkeeping (the runs themselves need a GPU host)."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("pack", Path(__file__).parents[1] / "tools/gpu/pack.py")
pack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pack)

PLAN = """# a comment
warmup! --preset gpt-1.2b --gpus 2 --tp 2

side! peer --preset gpt2-xl --gpus 2 --dist-opt
wait
fit --vary mbs --preset gpt2-xl   # one GPU
"""


def test_jobs_carry_their_line_numbers_and_skip_the_done_ones(tmp_path):
    plan = tmp_path / "plan.txt"
    plan.write_text(PLAN)
    jobs = list(pack._jobs(plan))
    assert [(n, tag, gpus) for n, tag, gpus, _ in jobs] == [(2, "warmup!", 2), (4, "side!", 2), (5, "wait", 0),
                                                            (6, "fit", 1)]
    assert jobs[1][3][0] == "peer"
    assert [n for n, *_ in pack._jobs(plan, done={2, 4})] == [5, 6]


def test_progress_is_kept_per_plan_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(pack, "PROGRESS", str(tmp_path / "progress"))
    assert pack.read_done("plans/a.txt") == set()
    pack.mark_done("plans/a.txt", 2)
    pack.mark_done("plans/a.txt", 7)
    assert pack.read_done("other/a.txt") == {2, 7} and pack.read_done("plans/b.txt") == set()
