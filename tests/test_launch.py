"""launch.py: the torchrun command line, the child's environment, streaming, timeouts
(the sbatch script: test_slurm.py).

The trainer is replaced by small Python scripts (the real one needs GPUs), so these tests exercise
the launcher itself: run folder, log capture, metrics parsing, classification, process-group kill.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from megalab.jobs import launch
from megalab.runs.config import InvalidLayout, RunConfig

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
DATA = Path(__file__).parent / "data"


def test_a_one_node_megalab_run_starts_without_torchruns_agent(monkeypatch):
    cmd = launch.torchrun_command(CFG, "runs/x", extra=["--profile"])
    assert cmd[:5] == [sys.executable, "-m", "megalab.jobs.spawn", "--nproc=2", "--"]
    assert cmd[5:7] == ["-m", "megalab.train"] and cmd[-3:] == ["--run-dir", "runs/x", "--profile"]
    assert cmd[7 : cmd.index("--run-dir")] == launch._config_args(CFG)


def test_torchrun_command_single_node(monkeypatch):
    monkeypatch.setenv(launch.LAUNCHER, "torchrun")  # the way back to torchrun
    cmd = launch.torchrun_command(CFG, "runs/x")
    assert cmd[:5] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
    ]
    i = cmd.index("megalab.train")
    assert cmd[i - 1] == "-m" and cmd[-2:] == ["--run-dir", "runs/x"]
    assert cmd[i + 1 : cmd.index("--run-dir")] == launch._config_args(CFG)


def test_torchrun_command_multi_node():
    cfg = CFG.replace(gpus=8, tp=2)
    cmd = launch.torchrun_command(
        cfg, "r", nnodes=2, node_rank=1, rdzv_endpoint="node0", extra=["--profile"]
    )
    for flag in (
        "--nnodes=2",
        "--nproc_per_node=4",
        "--node-rank=1",
        "--rdzv-backend=static",
        "--rdzv-endpoint=node0:29500",
        f"--rdzv-id={cfg.key}",
    ):
        assert flag in cmd
    assert "--standalone" not in cmd and cmd[-1] == "--profile"
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        launch.torchrun_command(cfg, "r", nnodes=2)
    with pytest.raises(ValueError, match="multiple of nnodes"):
        launch.torchrun_command(cfg, "r", nnodes=3, rdzv_endpoint="h:1")


def test_child_env_forces_multicast_off(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = launch.child_env({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "FOO": "bar"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert (
        env["NVSHMEM_DISABLE_NVLS"] == "1"
        and env["PYTHONUNBUFFERED"] == "1"
        and env["FOO"] == "bar"
    )
    assert env["PYTHONPATH"].split(os.pathsep) == [str(launch.LIB_DIR), "/elsewhere"]


def test_checks_before_spawning(tmp_path, monkeypatch):
    monkeypatch.setattr(launch.subprocess, "Popen", lambda *a, **k: pytest.fail("spawned"))
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)  # also on a GPU host
    with pytest.raises(InvalidLayout):
        launch.launch(CFG.replace(tp=3), runs_root=tmp_path)
    with pytest.raises(
        launch.NotEnoughGPUs, match=r"needs 2 GPU\(s\) on this machine, which has 0"
    ):
        launch.launch(CFG, runs_root=tmp_path)  # this machine has no GPU
    assert not list(tmp_path.iterdir())


# -- launch with a fake trainer --------------------------------------------------------------------
@pytest.fixture
def fake(monkeypatch):
    """Make launch() run `python -c SCRIPT` instead of torchrun, on this GPU-less machine."""
    monkeypatch.setattr(launch, "check", lambda cfg, nproc=None: None)
    monkeypatch.setattr(launch, "KILL_GRACE_S", 1)

    def use(script):
        monkeypatch.setattr(
            launch,
            "torchrun_command",
            lambda cfg, run_dir, **kw: [sys.executable, "-c", script, *kw.get("extra", ())],
        )

    return use


def _steps(n):
    return [
        json.dumps(
            {"kind": "step", "step": i, "loss": 9.0 - i, "step_time_s": 0.1, "tflops_per_gpu": 50.0}
        )
        for i in range(n)
    ]


def test_launch_ok_writes_run_folder(tmp_path, fake):
    lines = [
        "hello from rank 0",
        *("[rank0]: " + s for s in _steps(5)),
        json.dumps({"kind": "summary", "steps": 5}),
    ]
    fake(
        "import os, sys, time\nassert os.environ['NCCL_NVLS_ENABLE'] == '0'\n"
        "assert 0 <= time.time() - float(os.environ['MEGALAB_LAUNCH_T']) < 60\n"
        f"print('\\n'.join({lines!r}))\nprint('a warning', file=sys.stderr)"
    )
    out = launch.launch(CFG, runs_root=tmp_path, progress=False)
    assert out.status == "ok" and out.ok and out.returncode == 0 and out.error is None
    assert out.run_dir.parent == tmp_path and out.run_dir.name.startswith(CFG.label + "-")
    assert RunConfig.from_json((out.run_dir / "config.json").read_text()) == CFG
    log = (out.run_dir / "log.txt").read_text()
    assert "hello from rank 0" in log and "a warning" in log  # stdout and stderr, together
    assert len((out.run_dir / "metrics.jsonl").read_text().splitlines()) == 6
    assert [s["step"] for s in out.parsed.steps] == list(range(5)) and out.parsed.summary[
        "steps"
    ] == 5


def test_launch_progress_bar(tmp_path, fake, capsys):
    fake(f"print('\\n'.join({_steps(5)!r}))")
    out = launch.launch(CFG, runs_root=tmp_path, progress=True)
    assert out.ok
    assert "5/5" in capsys.readouterr().err  # tqdm in a terminal


def test_launch_oom_is_a_result(tmp_path, fake):
    log = DATA / "handmade_log_oom.txt"
    fake(f"import sys\nsys.stderr.write(open({str(log)!r}).read())\nsys.exit(1)")
    out = launch.launch(CFG, runs_root=tmp_path, progress=False)
    assert out.status == "oom" and out.error["rank"] == 1 and out.returncode == 1


def test_launch_exit_0_without_steps_is_failed(tmp_path, fake):
    fake("print('nothing')")
    out = launch.launch(CFG, runs_root=tmp_path, progress=False)
    assert out.status == "failed" and "no steps" in out.error["message"]


def test_timeout_kills_the_whole_group(tmp_path, fake):
    pidfile = tmp_path / "grandchild.pid"
    fake(
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\ntime.sleep(60)"
    )
    t0 = time.time()
    out = launch.launch(CFG, runs_root=tmp_path / "runs", progress=False, timeout_s=1.5)
    assert out.status == "timeout" and time.time() - t0 < 20
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _alive(pid)  # the grandchild (a "rank") ignored SIGTERM and still died


def test_a_run_that_hangs_after_its_summary_is_kept_as_trained(tmp_path, fake, monkeypatch):
    """Session 18: both CUDA-graph captures trained all 20 steps, printed the summary, then hung at
    exit until the time limit (300 s each). The launcher now stops such a run EXIT_GRACE_S after the
    summary: status ok."""
    monkeypatch.setattr(launch, "EXIT_GRACE_S", 1)
    lines = [
        *_steps(5),
        json.dumps({"kind": "summary", "steps": 5, "startup_marks_s": {"first_step": 9.0}}),
    ]
    fake(f"import time\nprint('\\n'.join({lines!r}), flush=True)\ntime.sleep(60)")
    t0 = time.time()
    out = launch.launch(CFG, runs_root=tmp_path / "runs", progress=False, timeout_s=30)
    assert out.status == "ok" and out.error is None and time.time() - t0 < 20
    assert out.parsed.summary["exit_hung_s"] == 1 and len(out.parsed.steps) == 5


def test_a_peer_run_that_hangs_after_megatron_lm_is_done_is_kept_too(tmp_path, fake, monkeypatch):
    monkeypatch.setattr(launch, "EXIT_GRACE_S", 1)
    fake(
        "import time\nprint('[after training is done] datetime: 2026-11-27 04:00:00', "
        "flush=True)\ntime.sleep(60)"
    )
    out = launch.launch(CFG, runs_root=tmp_path / "runs", progress=False, timeout_s=30)
    assert out.parsed.summary["exit_hung_s"] == 1 and out.status != "timeout"


def test_a_run_that_hangs_before_its_summary_times_out(tmp_path, fake, monkeypatch):
    monkeypatch.setattr(launch, "EXIT_GRACE_S", 1)
    fake(f"import time\nprint('\\n'.join({_steps(3)!r}), flush=True)\ntime.sleep(60)")
    out = launch.launch(CFG, runs_root=tmp_path / "runs", progress=False, timeout_s=2)
    assert out.status == "timeout" and out.parsed.summary is None


def _alive(pid):
    try:  # a killed orphan may linger as a zombie until init reaps it: that is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except (FileNotFoundError, IndexError):
        return False


def test_dry_run_passes_the_flag(tmp_path, fake):
    fake("import sys\nprint('args', sys.argv[1:])")
    out = launch.launch(CFG, runs_root=tmp_path, progress=False, dry_run=True)
    assert out.ok and "--dry-run" in (out.run_dir / "log.txt").read_text()


def test_run_dirs_are_unique(tmp_path):
    a, b = launch.new_run_dir(CFG, tmp_path), launch.new_run_dir(CFG, tmp_path)
    assert a != b and a.is_dir() and b.is_dir()


def test_a_dataset_with_more_token_ids_than_the_vocab_is_refused_before_launch(tmp_path):
    """The check reads PREFIX.json from `megalab prepare-data`: no torchrun, no device-side
    assert."""
    import json

    import pytest

    from megalab.runs import presets
    from megalab.runs.config import InvalidLayout
    from megalab.jobs.launch import _check_data

    prefix = str(tmp_path / "corpus")
    (tmp_path / "corpus.bin").write_bytes(b"")
    (tmp_path / "corpus.json").write_text(json.dumps({"vocab_size": 128256}))
    cfg = presets.get("gpt-350m").replace(data=prefix)
    with pytest.raises(InvalidLayout, match="--vocab 128256"):
        _check_data(cfg)
    _check_data(cfg.replace(vocab=128256))  # fits: no error
    with pytest.raises(InvalidLayout, match="not found"):
        _check_data(cfg.replace(data=str(tmp_path / "missing")))


@pytest.mark.parametrize(
    "name", ["../up", ".hidden", "a/b", "a b", "x$(id)", "a..b", "", "tab\there"]
)
def test_a_run_name_outside_the_safe_set_is_refused(name):
    assert any("cannot name a run folder" in p for p in CFG.replace(name=name).problems())


def test_safe_run_names_pass():
    for name in ("gpt-1.2b", "llama3_8b", "custom", "A.b-c_9"):
        assert not any("name=" in p for p in CFG.replace(name=name).problems())


# -- the launcher's death or SIGTERM stops torchrun and every rank
# ---------------------------------------
def _gone(pid: int, within_s: float = 10) -> bool:
    """The process has exited (a zombie waiting for a reaper counts as gone)."""
    end = time.time() + within_s
    while time.time() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.1)
    return False


def _python(code: str, tmp_path) -> subprocess.Popen:
    lib, tests = Path(launch.__file__).parents[2], Path(__file__).parent  # lib/megalab/jobs/
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{lib}{os.pathsep}{tests}"},
    )


def _wait_for(path: Path, within_s: float = 30) -> str:
    end = time.time() + within_s
    while time.time() < end:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_kill_9_of_the_launcher_stops_torchrun(tmp_path):
    parent = _python(
        """
        import os, sys, time
        from megalab import launch
        sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
        child = launch.popen(sleeper, dict(os.environ))
        open("child.pid", "w").write(f"{child.pid}\\n")
        time.sleep(120)
    """,
        tmp_path,
    )
    child = int(_wait_for(tmp_path / "child.pid"))
    parent.kill()
    parent.wait()
    assert _gone(child), "torchrun outlived the launcher killed with -9"


FAKE_TORCHRUN = """
import os, signal, subprocess, sys, time
# the worst torchrun: deaf to SIGTERM, its rank in a session of its own
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
rank = subprocess.Popen(sleeper, start_new_session=True)
open("rank.pid", "w").write(f"{rank.pid}\\n")
print("rank started", flush=True)
time.sleep(120)
"""


def test_sigterm_stops_every_rank_and_the_run_is_recorded_as_a_timeout(tmp_path):
    (tmp_path / "fake_torchrun.py").write_text(FAKE_TORCHRUN)
    parent = _python(
        f"""
        import sys
        from megalab import launch
        from run_records import CFG
        launch.KILL_GRACE_S = 1
        launch.check = lambda cfg, nproc=None: None
        fake = {str(tmp_path / "fake_torchrun.py")!r}
        launch.torchrun_command = lambda cfg, run_dir, **kw: [sys.executable, fake]
        out = launch.launch(CFG, runs_root="runs", progress=False)
        print(out.status, out.error["message"], flush=True)
    """,
        tmp_path,
    )
    rank = int(_wait_for(tmp_path / "rank.pid"))
    time.sleep(0.5)
    parent.send_signal(signal.SIGTERM)
    out, _ = parent.communicate(timeout=60)
    assert out.startswith("timeout the run was stopped by SIGTERM"), out
    assert _gone(rank), "a rank outlived the run stopped by SIGTERM"


def test_an_inherited_local_rank_does_not_reach_the_ranks(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    env = launch.child_env()
    assert "LOCAL_RANK" not in env and "WORLD_SIZE" not in env and env["NCCL_NVLS_ENABLE"] == "0"


def test_a_notebook_starts_runs_from_the_warm_server_and_the_rest_spawn(monkeypatch):
    """JupyterLab and `megalab reproduce` (notebook kernels) fork ranks from the warm server; the
    book's recordings (a plain process) spawn them; MEGALAB_LAUNCHER wins, checked early."""
    monkeypatch.delenv(launch.LAUNCHER, raising=False)
    assert launch.launcher() == "spawn"
    monkeypatch.setattr(launch, "_in_notebook", lambda: True)
    assert launch.launcher() == "forkserver"
    assert launch.one_node(2, ["-m", "megalab.train"])[2] == "megalab.jobs.forkserver"
    monkeypatch.setenv(launch.LAUNCHER, "spawn")
    assert launch.launcher() == "spawn"
    monkeypatch.setenv(launch.LAUNCHER, "fork")
    with pytest.raises(ValueError, match="pick one of spawn, torchrun, forkserver"):
        launch.one_node(2, ["-m", "megalab.train"])
