"""Chapter 00's tables and figures over small bench frames, and its host numbers over the committed
records."""

import json

import pandas as pd
import pytest

from megalab.book.chapters import ch00_know_your_machine as ch00
from megalab.runs import presets

TOPO = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tNV18\t0-63\nGPU1\tNV18\t X \t0-63\n\n"
    "Legend:\n  SYS  = Connection traversing PCIe\n  NV#  = Connection traversing a bonded set of "
    "# NVLinks\n"
)


def _hbm():
    rows = [
        ("2026-01-01", 1 << 24, 4300.0),
        ("2026-01-02", 1 << 24, 4200.0),
        ("2026-01-02", 1 << 26, 3600.0),
        ("2026-01-02", 1 << 32, 4270.0),
    ]
    return pd.DataFrame(
        [
            {
                "bench": "hbm",
                "dtype": "bf16",
                "gpus": 1,
                "recorded_at": t,
                "size_bytes": s,
                "gbs": g,
            }
            for t, s, g in rows
        ]
    )


def _nccl():
    rows = []
    for gpus in (2, 4):
        for op, bw in (("all_reduce", 330.0), ("all_to_all", 300.0)):
            for size, f in ((1 << 20, 0.1), (1 << 30, 1.0)):
                rows.append(
                    {
                        "bench": "nccl",
                        "op": op,
                        "dtype": "bf16",
                        "gpus": gpus,
                        "size_bytes": size,
                        "busbw_gbs": bw * f,
                        "correct": True,
                        "recorded_at": "2026-01-01",
                    }
                )
    return pd.DataFrame(rows)


def test_latest_points_keeps_the_newest_recording_of_each_point():
    pts = ch00.latest_points(_hbm())
    assert len(pts) == 3
    assert ch00.copy_tbs(pts, 1 << 24) == pytest.approx(4.2)  # the newer 16 MiB copy
    assert ch00.copy_tbs(_hbm(), 1 << 32) == pytest.approx(4.27)
    with pytest.raises(KeyError, match="megalab bench --only hbm"):
        ch00.copy_tbs(_hbm(), 1 << 20)


def test_hbm_figure_shades_the_sizes_that_fit_in_l2():
    fig = ch00.hbm_figure(_hbm(), peak_tbs=4.8)
    rect = fig.layout.shapes[-1]
    # source and destination together fill L2
    assert rect.x1 == pytest.approx(ch00.L2_MB * 1e6 / 2)
    assert rect.x0 < 1 << 24 < rect.x1 < 1 << 26


def test_collective_table_has_worded_headers_and_whole_numbers():
    t = ch00.collective_table(_nccl()).data.set_index("collective")
    assert list(t.columns) == ["2 GPUs (GB/s)", "4 GPUs (GB/s)"]
    assert list(t.index) == ["all-reduce", "all-to-all"]
    assert t.loc["all-reduce", "4 GPUs (GB/s)"] == 330
    assert ch00.bus_gbs(_nccl(), "all_to_all", 2, 1 << 20) == pytest.approx(30.0)


def test_probe_checks_counts_all_reduce_probes_only():
    df = _nccl()
    df.loc[0, "correct"] = False
    t = ch00.probe_checks(df).data.set_index("GPUs")
    assert list(t.columns) == ["all-reduce probes", "every probe correct"]
    assert t.loc[2, "all-reduce probes"] == 4 and t.loc[2, "every probe correct"] == "no"
    assert t.loc[4, "every probe correct"] == "yes"


def test_links_reads_nvlink_counts_from_topo_and_ignores_the_legend():
    assert ch00.links(TOPO) == ["NV18"]
    assert ch00.links("") == []


def test_host_probe_reads_the_store_file(tmp_path):
    (tmp_path / ch00.PROBE).parent.mkdir(parents=True)
    probe = {
        "cpu_model": "Xeon",
        "cpu_count": 8,
        "vm": False,
        "gpu": "NVIDIA H200",
        "gpu_count": 2,
        "nccl": "2.28.9",
        "torch": "2.11.0",
        "eager_launch_host_us": 7.0,
        "graph_kernel_wall_us": 1.0,
        "topo": TOPO,
    }
    (tmp_path / ch00.PROBE).write_text(json.dumps(probe))
    got = ch00.host_probe(tmp_path)
    assert got["links"] == ["NV18"]
    t = ch00.host_table(got).data.set_index("")
    assert list(t.columns) == ["reference host"]
    assert t.loc["virtual machine or bare metal", "reference host"] == "bare metal"
    assert t.loc["host time per eager kernel launch", "reference host"] == "7.0 µs"


def test_a_store_without_the_probe_reads_the_committed_one(tmp_path, monkeypatch):
    """A fresh store (a GPU host's recording sets MEGALAB_RESULTS to one) holds no probes: the
    book's committed results/ answers; with no checkout either, the error names both places."""
    assert ch00.host_probe(tmp_path)["links"] == ch00.host_probe()["links"]
    monkeypatch.setattr("megalab.machine.env.repo_root", lambda: None)
    with pytest.raises(FileNotFoundError, match="run tools/gpu/host_probe.py on that host"):
        ch00.host_probe(tmp_path)


def test_yours_reads_the_launch_point_just_measured_here():
    launch = {
        "bench": "launch",
        "recorded_at": "2026-01-02",
        "eager_launch_host_us": 4.0,
        "graph_kernel_wall_us": 0.5,
        "env": {"gpu_name": "NVIDIA H100", "gpu_count": 8, "torch": "2.11.0"},
        "host": {
            "cpu_model": "EPYC",
            "cpu_count": 128,
            "vm": False,
            "nccl": "2.27.3",
            "topology": TOPO,
        },
    }
    df = pd.DataFrame([{**launch, "source": "reference"}, {**launch, "source": "yours"}])
    mine = ch00.yours(df)
    assert mine["links"] == ["NV18"] and mine["cpu_count"] == 128
    probe = {**mine, "cpu_model": "Xeon", "vm": True}
    t = ch00.host_table(probe, mine).data.set_index("")
    assert list(t.columns) == ["reference host", "your host"]
    assert t.loc["CPU", "your host"] == "EPYC" and t.loc["GPUs", "your host"] == "8 × NVIDIA H100"
    assert ch00.yours(df.assign(source="reference")) is None
    assert ch00.yours(_hbm().assign(source="yours")) is None


def test_the_committed_probe_is_the_4xh200_host():
    probe = ch00.host_probe()
    assert probe["gpu_count"] == 4 and probe["vm"] and probe["links"] == ["NV18"]
    assert probe["eager_launch_host_us"] > probe["graph_kernel_wall_us"]


def _group():
    base = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=8, gbs=8)
    rows = [
        (base.replace(cuda_graphs="te"), 110.0, [109.0, 111.0], 0.97),
        (base, 330.0, [360.0, 300.0], None),
        (base.replace(tp=4, gpus=4, cuda_graphs="te"), 90.0, [90.0, 90.0], None),
    ]
    df = pd.DataFrame(
        [
            {"cfg": c, "median_ms": m, "lo_ms": m - 5, "hi_ms": m + 5, "run_ms": r, "gpu_busy": b}
            for c, m, r, b in rows
        ],
        index=[c.label for c, *_ in rows],
    )
    df.attrs.update(name="ch02.tp", gpu_busy=0.97, profiled=rows[0][0].label)
    return df


def test_host_cost_is_the_step_graphs_remove_per_layer_and_micro_batch():
    cost = ch00.host_cost(_group())
    assert cost["layers"] == 40 and cost["micro_batches"] == 1
    assert cost["host_ms_per_layer"] == pytest.approx((330 - 110) / 40)
    assert cost["busy"] == 0.97 and cost["busy_cfg"].cuda_graphs == "te"
    assert not cost["eager_busy_measured"]
    fig = ch00.host_figure(cost)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.x[0] for t in bars] == ["eager", "CUDA graphs"]
    # whiskers from the fastest run's median to the slowest's, around the pooled median
    assert (bars[0].error_y.array[0], bars[0].error_y.arrayminus[0]) == (30.0, 30.0)
    assert (bars[1].error_y.array[0], bars[1].error_y.arrayminus[0]) == (1.0, 1.0)
    assert "_tp" not in (fig.layout.title.text or "")
    with pytest.raises(KeyError, match="no eager and graphed"):
        ch00.host_cost(_group(), tp=4)


def test_host_cost_of_the_recorded_group():
    from megalab.records import timings

    cost = ch00.host_cost(timings.group(None, ch00.GROUP, "H200"))
    assert cost["eager_ms"] > 2 * cost["graphs_ms"]
    assert cost["busy"] >= 0.7


def test_recordings_table_reads_links_from_the_probe_where_the_record_says_none():
    env = {"gpu_name": "NVIDIA H200", "interconnect": "none", "driver": "1", "cuda": "13.0"}
    rec = {"env": {**env, "torch": "2.11.0", "gpu_count": 2}, "recorded_at": "2026-11-26T19:16"}
    t = ch00.recordings_table([rec], {2: {"links": ["NV18"]}}).data
    assert t.loc[0, "Links between GPUs"] == "NVLink (NV18), from the host probe"
    assert t.loc[0, "GPU"] == "H200" and t.loc[0, "Recorded on"] == "2026-11-26"
    assert ch00.recordings_table([rec], {}).data.loc[0, "Links between GPUs"] == "not recorded"


def test_host_table_takes_several_reference_hosts():
    probe = ch00.host_probe()
    two = ch00.host_probe(name=ch00.PROBE_2)
    t = ch00.host_table({"4×H200 host": probe, "2×H200 host": two}).data.set_index("")
    assert list(t.columns) == ["4×H200 host", "2×H200 host"]
    assert t.loc["GPU-to-GPU links", "2×H200 host"] == "NV18"
