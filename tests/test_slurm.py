"""slurm.py: the sbatch script `megalab slurm` writes, read as text, then submitted to a real Slurm.

The last test starts a one-node Slurm cluster on localhost (tools/slurm-local.sh: munged, slurmctld,
slurmd; Debian's slurm-wlm and munge are installed when CI=true), submits the script's CPU mode as
two tasks on that node (two torchrun agents meeting at a rendezvous on localhost, as two nodes
would), waits for it, and reads the job's log and node 0's record. It skips, saying why, where Slurm
cannot be installed or started.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megalab.jobs import slurm
from megalab.runs.config import InvalidLayout, RunConfig
from megalab.records.store import Store

ROOT = Path(__file__).resolve().parents[1]
CFG = RunConfig(
    name="gpt-test",
    layers=4,
    hidden=256,
    heads=4,
    gpus=2,
    tp=2,
    mbs=2,
    gbs=8,
    iters=5,
    impl="local",
)
TINY = RunConfig(
    name="tiny",
    layers=2,
    hidden=64,
    heads=4,
    vocab=1024,
    seq=32,
    impl="local",
    gpus=2,
    mbs=1,
    gbs=2,
    iters=1,
)


def test_script_runs_megalab_run_on_every_node():
    cfg = CFG.replace(gpus=16, tp=4, pp=2, gbs=16)
    text = slurm.script(cfg, nodes=2, partition="gpu", account="lab", time="00:30:00")
    assert text.startswith("#!/bin/bash\n")
    for s in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab",
        "#SBATCH --time=00:30:00",
        "export NCCL_NVLS_ENABLE=0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
        "NVSHMEM_DISABLE_NVLS=1",
        """srun bash -c 'exec "$@" --nnodes "$SLURM_NTASKS" --node-rank "$SLURM_PROCID"' megalab""",
        "python3 -m megalab run",
        "--tp 4 --pp 2",
        "--mode live --timeout 1740 --json",
        '--rdzv-endpoint "$head:29500"',
    ):
        assert s in text, s
    # the trainer alone would record nothing
    assert "--dry-run" not in text and "megalab.train" not in text
    with pytest.raises(ValueError, match="make them equal"):
        slurm.script(cfg, nodes=2, gpus_per_node=4)


def test_cpu_mode_asks_for_no_gpu_and_dry_runs():
    text = slurm.script(CFG, nodes=2, cpu=True)
    assert "--gpus-per-node" not in text and "--dry-run" in text and "CPU: a dry run" in text


@pytest.mark.parametrize(
    "time, seconds",
    [
        ("30", 1800),
        ("1:30", 90),
        ("01:00:00", 3600),
        ("2-0", 172800),
        ("1-02:03", 93780),
        ("1-00:00:01", 86401),
    ],
)
def test_time_limits_in_slurm_formats(time, seconds):
    assert slurm.time_limit_s(time) == seconds


@pytest.mark.parametrize("time", ["banana", "1:2:3:4", "-5", "00:00:00", "1h"])
def test_a_time_limit_slurm_cannot_read_is_refused(time):
    with pytest.raises(slurm.InvalidSlurmOption, match="time"):
        slurm.script(CFG, nodes=1, time=time)


def test_the_run_stops_a_minute_before_the_job():
    assert "--timeout 60 " in slurm.script(CFG, nodes=1, time="1")  # never below a minute
    assert "--timeout 86340 " in slurm.script(CFG, nodes=1, time="1-00:00:00")


def test_every_value_is_quoted_and_shell_words_are_refused():
    cfg = CFG.replace(gpus=2, tp=2, data="/data/my corpus")
    assert "--data '/data/my corpus'" in slurm.script(cfg, nodes=1, partition="gpu", account="lab")
    for bad in ({"partition": "gpu\nrm -rf ~"}, {"account": "a;b"}, {"time": "$(reboot)"}):
        with pytest.raises(slurm.InvalidSlurmOption, match="cannot stand in an sbatch script"):
            slurm.script(cfg, nodes=1, **bad)
    with pytest.raises(InvalidLayout, match="cannot name a run folder"):
        slurm.script(cfg.replace(name="x/../../y"), nodes=1)


# -- a real Slurm
# ------------------------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path_factory):
    """SLURM_CONF of a one-node Slurm on localhost, stopped afterwards; skips where one cannot
    start."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("a local Slurm cluster needs Linux and root (slurmd starts jobs as their user)")
    where = tmp_path_factory.mktemp("slurm")
    tool = [str(ROOT / "tools" / "slurm-local.sh")]
    started = subprocess.run(
        [*tool, "start", str(where)], capture_output=True, text=True, timeout=240
    )
    if started.returncode != 0:
        subprocess.run([*tool, "stop", str(where)], timeout=30)
        pytest.skip(
            started.stderr.strip().splitlines()[-1]
            if started.stderr.strip()
            else "slurm did not start"
        )
    try:
        yield str(where / "slurm.conf")
    finally:
        subprocess.run([*tool, "stop", str(where)], timeout=30)


def test_the_script_runs_under_sbatch_and_node_0_records_every_node(cluster, tmp_path):
    from megalab import cli

    job = tmp_path / "job.sh"
    with open(job, "w") as out, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        from megalab.runs.flags import config_to_args

        assert (
            cli.main(
                ["slurm", *config_to_args(TINY), "--nodes", "2", "--cpu", "--time", "00:05:00"]
            )
            == 0
        )
    venv_bin = os.path.dirname(sys.executable)  # `python3` in the script: this interpreter's
    env = {
        **os.environ,
        "SLURM_CONF": cluster,
        "PATH": f"{venv_bin}:{os.environ['PATH']}:/usr/sbin",
        "PYTHONPATH": str(ROOT / "lib"),
        "MEGALAB_RUNS": str(tmp_path / "runs"),
        "MEGALAB_RESULTS": str(tmp_path / "results"),
    }
    log = tmp_path / "slurm.log"
    # one node here: its two tasks stand for the script's two nodes (task = node rank, SLURM_PROCID)
    submit = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", f"--output={log}", str(job)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=30,
    )
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.strip().split(";")[0]
    deadline = time.time() + 180
    while time.time() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id], capture_output=True, text=True, env=env
        )
        if not queued.stdout.strip():
            break
        time.sleep(0.5)
    else:
        subprocess.run(["scancel", job_id], env=env)
        pytest.fail(
            f"job {job_id} still queued or running after 180 s: "
            f"{log.read_text() if log.exists() else ''}"
        )
    state = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env
    ).stdout
    text = log.read_text()
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state + text[-3000:]

    # each node's --json object
    nodes = [
        json.JSONDecoder().raw_decode(text, i)[0]
        for i in range(len(text))
        if text.startswith("{\n", i) and (i == 0 or text[i - 1] == "\n")
    ]
    assert len(nodes) == 2 and all(n["status"] == "ok" for n in nodes), text[-3000:]
    first = next(n for n in nodes if n["record"])
    assert sum(bool(n["record"]) for n in nodes) == 1  # node 0 only
    # node 0 holds global rank 0
    assert first["budget"] and [p["rank"] for p in first["params"]] == [0]
    (record,) = Store(Path(first["record"]).parent).load()
    assert record["key"] == TINY.key and record["tags"] == ["dry-run"] and len(record["nodes"]) == 2
    assert all(n["python"] and n["hostname"] for n in record["nodes"])
    assert not (tmp_path / "results").exists()  # a dry run never joins the book's store
    assert len(list((tmp_path / "runs").iterdir())) == 2  # a run folder per node
