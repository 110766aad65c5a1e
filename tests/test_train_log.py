"""megalab.train_log without a process group: the lines the trainer writes."""
import json

from megalab import metrics, presets
from megalab.train_log import step_line


def test_step_line_is_the_metrics_protocol():
    cfg = presets.get("gpt-1.2b").replace(mbs=8, gbs=8)
    line = step_line(cfg, 5, 8.3, 1.2, 3e-4, 0.2, [30.0, 32.0], 989.0)
    parsed = metrics.parse_line(json.dumps(line))
    assert parsed["kind"] == "step" and parsed["tokens_per_s"] == 8 * 1024 / 0.2
    assert abs(parsed["mfu"] - parsed["tflops_per_gpu"] / 989.0) < 1e-12


def test_step_line_reports_measured_activations_only_where_measured():
    import math
    cfg = presets.get("gpt-tiny")
    with_act = step_line(cfg, 3, 1.0, 0.5, 1e-4, 0.1, [2.0, 3.0, 0.25], 989.0)
    without = step_line(cfg, 3, 1.0, 0.5, 1e-4, 0.1, [2.0, 3.0, -math.inf], 989.0)
    assert with_act["act_gib"] == 0.25 and without["act_gib"] is None
    assert metrics.summarize([with_act])["act_gib"] == 0.25 and metrics.summarize([without])["act_gib"] is None
