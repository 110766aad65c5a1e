import json

import pandas as pd

from megalab.book.chapters import hardware as hw


def _prov():
    row = dict(
        gpu_name="NVIDIA H200",
        interconnect="NVLink (NV18)",
        driver="580",
        cuda="13.0",
        torch="2.11.0",
        megatron_core="0.16.1",
        transformer_engine="2.11.0",
        python="3.12.3",
    )
    return pd.DataFrame(
        [
            row
            | {
                "git_commit": "a",
                "records": 3,
                "gpus": [2],
                "first": "2026-11-21T19:24:36Z",
                "last": "2026-11-21T19:25:14Z",
            },
            row
            | {
                "git_commit": "b",
                "records": 4,
                "gpus": [4],
                "first": "2026-11-22T10:00:00Z",
                "last": "2026-11-23T10:00:00Z",
            },
            row
            | {
                "gpu_name": "NVIDIA H100 80GB HBM3",
                "git_commit": "c",
                "records": 2,
                "gpus": [1],
                "first": "2026-11-20T00:00:00Z",
                "last": "2026-11-20T01:00:00Z",
            },
        ]
    )


def test_environments_merge_commits_and_say_the_constant_columns_once():
    env = hw.environments(_prov())
    assert list(env["GPU"]) == ["H100 80GB HBM3", "H200"]  # oldest first, no vendor prefix
    assert list(env["Records"]) == [2, 7] and list(env["GPUs seen"]) == ["1", "2, 4"]
    assert (
        list(env["First"]) == ["2026-11-20", "2026-11-21"] and env["Last"].iloc[1] == "2026-11-23"
    )
    assert "CUDA" not in env.columns and "git_commit" not in env.columns
    assert env.attrs["same"].startswith("GPU-to-GPU link NVLink (NV18), Driver 580, CUDA 13.0")


def test_set_aside_names_each_reason_in_one_clause_without_commits():
    notes = {
        "r1": "made before the fix (wiring.x, commit b4b9ab0): the bug. More.",
        "r2": "made before the fix (wiring.x, commit b4b9ab0): the bug. More.",
        "r3": "node 1 of a launch (tools/x.sh, commit 44f6e65) failed: by design",
    }
    t = hw.set_aside(notes)
    assert list(t["Why the records were set aside"]) == [
        "Made before the fix",
        "Node 1 of a launch failed",
    ]
    assert list(t["Records"]) == [2, 1]


def test_hosts_table_puts_each_probed_host_in_a_column(tmp_path):
    probe = {
        "cpu_model": "Xeon",
        "cpu_count": 32,
        "vm": True,
        "gpu": "NVIDIA H200",
        "gpu_count": 2,
        "nccl": "2.28.9",
        "torch": "2.11.0",
        "eager_launch_host_us": 6.3,
        "graph_kernel_wall_us": 0.85,
        "topo": "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n",
    }
    rel = tmp_path / hw.PROBES["2 × H200 host"]
    rel.parent.mkdir(parents=True)
    rel.write_text(json.dumps(probe))
    hosts = hw.probes(tmp_path)
    assert list(hosts) == ["2 × H200 host"] and hosts["2 × H200 host"]["links"] == ["NV18"]
    html = hw.hosts_table(hosts).to_html()
    assert "2 × NVIDIA H200" in html and "6.3 µs" in html and "32" in html


def test_the_constant_columns_line_is_wrapped_for_a_narrow_page():
    import pandas as pd

    from megalab.book.chapters import hardware as hw

    env = pd.DataFrame({"x": [1]})
    env.attrs["same"] = ", ".join(f"Part {i} version 1.{i}.0" for i in range(12))
    text = hw.same_text(env, "Every run", width=60)
    assert text.startswith("Every run: Part 0") and text.endswith("1.11.0.")
    assert max(len(line) for line in text.splitlines()) <= 60 and "\n" in text
