"""tools/gpu/plan_cost.py: a plan's device minutes from what recorded runs cost."""

import importlib.util
import sys
from pathlib import Path

from megalab.records.store import Store
from megalab.runs.flags import config_to_args

_spec = importlib.util.spec_from_file_location(
    "plan_cost", Path(__file__).parents[1] / "tools/gpu/plan_cost.py"
)
cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost)
sys.path.insert(0, str(Path(__file__).parent))


def test_a_line_costs_its_nearest_recorded_run(tmp_path):
    """The same configuration (iterations and knobs aside) costs its start-up + iters x its step +
    the teardown; at another batch or graph setting, the step is scaled; unmatched, UNKNOWN_S; a
    peer line costs as the trainer's."""
    from run_records import CFG, record

    store = Store(tmp_path / "results")
    store.append(record(CFG, summary={**record(CFG)["summary"], "startup_s": 30.0}))
    step = record(CFG)["summary"]["step_time_s"]
    plan = tmp_path / "plan.txt"
    same = CFG.replace(iters=40, grad_accum_fusion="off")
    lines = [
        f"g! {' '.join(config_to_args(same))}",
        f"g! {' '.join(config_to_args(CFG.replace(gbs=16, cuda_graphs='te')))}",
        f"g! {' '.join(config_to_args(CFG.replace(layers=8)))}",
        f"side! peer {' '.join(config_to_args(same))}",
        f"g! {' '.join(config_to_args(same))} --profile",
    ]
    plan.write_text("\n".join(lines) + "\n")
    rows = cost.estimate(str(plan), store=store, gpu="H200")
    assert [how for *_, how in rows] == ["=", "~", "?", "=", "="]
    want = 30.0 + 40 * step + cost.TEARDOWN_S
    assert abs(rows[0][2] - want) < 1e-9 and abs(rows[3][2] - want) < 1e-9
    scaled = 30.0 + CFG.iters * step * 2 * cost.GRAPH_SPEEDUP + cost.TEARDOWN_S
    assert abs(rows[1][2] - scaled) < 1e-9
    assert rows[2][2] == cost.UNKNOWN_S
    assert abs(rows[4][2] - (30.0 + 40 * step * cost.PROFILE_FACTOR + cost.TEARDOWN_S)) < 1e-9


def test_a_run_that_stops_on_a_tight_median_costs_its_fewest_steps(tmp_path):
    from megalab.metrics import WARMUP_STEPS
    from megalab.records.timings import MIN_TIMED
    from run_records import CFG, record

    store = Store(tmp_path / "results")
    store.append(record(CFG, summary={**record(CFG)["summary"], "startup_s": 30.0}))
    step = record(CFG)["summary"]["step_time_s"]
    plan = tmp_path / "plan.txt"
    plan.write_text(f"g! {' '.join(config_to_args(CFG.replace(iters=40, stop_when_tight=True)))}\n")
    [(_, _, seconds, how)] = cost.estimate(str(plan), store=store, gpu="H200")
    assert how == "=" and seconds == 30.0 + (WARMUP_STEPS + MIN_TIMED) * step + cost.TEARDOWN_S
