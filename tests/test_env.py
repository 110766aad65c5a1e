"""env.py: the machine fingerprint stored with every record; works without a GPU."""

import pytest

from megalab.machine import env

TOPO_H200 = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\tSYS\t0-63\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\tSYS\t0-63\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\tSYS\t64-127\t1\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \tSYS\t64-127\t1\t\tN/A
NIC0\tSYS\tSYS\tSYS\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks
"""
TOPO_PCIE = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-31\t0
GPU1\tPHB\t X \t0-31\t0
"""


@pytest.mark.parametrize(
    "text, expected",
    [
        (TOPO_H200, "NVLink (NV18)"),
        (TOPO_PCIE, "PCIe"),
        ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-31\n", "none"),
        ("", "unknown"),
        (None, "unknown"),
        ("No devices were found", "unknown"),
    ],
)
def test_parse_topology(text, expected):
    assert env.parse_topology(text) == expected


def test_an_underlined_two_gpu_matrix_is_nvlink():
    """nvidia-smi underlines the header row (ANSI escapes) on 2xH200 NV18 hosts: it still reads as
    NVLink."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "topo_2xh200_nv18.txt").read_text()
    assert "\x1b[4mGPU0" in text
    assert env.parse_topology(text) == "NVLink (NV18)"
    assert env.parse_topology(text.replace("NV18", "PHB")) == "PCIe"
    assert env.parse_topology("\t\x1b[4mGPU0\tCPU Affinity\x1b[0m\nGPU0\t X \t0-31\n") == "none"


def test_parse_gpu_query():
    rows = env.parse_gpu_query("NVIDIA H200, 143771, 580.95.05\nNVIDIA H200, 143771, 580.95.05\n")
    assert len(rows) == 2 and rows[0] == {
        "name": "NVIDIA H200",
        "mem_gib": 140.4,
        "driver": "580.95.05",
    }


def test_fingerprint_on_this_machine():
    fp = env.fingerprint()
    for key in (
        "gpu_name",
        "gpu_count",
        "gpu_mem_gib",
        "interconnect",
        "driver",
        "cuda",
        "torch",
        "megatron_core",
        "transformer_engine",
        "python",
        "hostname",
        "cpu_count",
    ):
        assert key in fp
    assert fp["torch"] and fp["python"] and fp["hostname"] and fp["cpu_count"] >= 1
    if fp["gpu_count"] == 0:
        assert fp["gpu_name"] is None and fp["interconnect"] is None


def test_fingerprint_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(env, "_smi", lambda *a: None)
    fp = env.fingerprint()
    assert fp["gpu_count"] == 0 and fp["gpu_name"] is None and fp["driver"] is None


def test_fingerprint_with_gpus(monkeypatch):
    answers = {"topo": TOPO_H200}
    monkeypatch.setattr(
        env, "_smi", lambda *a: answers.get(a[0], "NVIDIA H200, 143771, 580.95.05\n" * 4)
    )
    monkeypatch.setattr(env, "_torch_info", lambda: (4, "13.0"))
    fp = env.fingerprint()
    assert (fp["gpu_name"], fp["gpu_count"], fp["cuda"]) == ("NVIDIA H200", 4, "13.0")
    assert fp["interconnect"] == "NVLink (NV18)"


def test_git_commit(monkeypatch):
    monkeypatch.setenv("MEGALAB_COMMIT", "deadbeef")
    assert env.git_commit() == "deadbeef"
    monkeypatch.delenv("MEGALAB_COMMIT")
    commit = env.git_commit()
    assert commit is None or len(commit) == 40


def test_a_rank_records_what_started_it(monkeypatch):
    """env.launcher: the mark spawn or the fork-server leaves in each rank, torchrun's own run id,
    or None outside a rank (the value "1" is spawn's mark before it named itself)."""
    for name in ("MEGALAB_SPAWNED", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    assert env.launcher() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert env.launcher() == "torchrun"
    for mark, said in (("spawn", "spawn"), ("forkserver", "forkserver"), ("1", "spawn")):
        monkeypatch.setenv("MEGALAB_SPAWNED", mark)
        assert env.launcher() == said
    assert env.fingerprint()["launcher"] == "spawn"
