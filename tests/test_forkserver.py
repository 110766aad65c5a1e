"""megalab.jobs.forkserver: ranks forked from a warm server keep spawn's semantics (torchrun's
variables, the first failure's code, signals, output), the server is reused and replaced when
stale, the client falls back to spawn when it cannot be used, and the trainer trains the same."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from megalab.jobs import forkserver, launch


@pytest.fixture(scope="module")
def env():
    """The clients' environment: a socket directory of this module's (short: a Unix socket's path
    has 108 bytes), whose servers are stopped at the end."""
    where = tempfile.mkdtemp(prefix="mfs")
    out = {**launch.child_env(), forkserver.DIR: where, forkserver.IDLE: "120"}
    yield out
    pid = forkserver.ping(forkserver.socket_path(out))
    if pid:
        os.kill(pid, signal.SIGTERM)
    time.sleep(1.5)  # the server notices within a second and removes its socket
    shutil.rmtree(where, ignore_errors=True)


def _client(env, tmp_path, nproc, code: str, wait=True, **kw):
    """Run `code` as every rank under the fork-server client (a real process)."""
    env = {**env, "OUT": str(tmp_path), "MEGALAB_LAUNCH_T": repr(time.time()), **kw}
    cmd = [sys.executable, "-m", "megalab.jobs.forkserver", f"--nproc={nproc}", "--", "-c", code]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if wait:
        proc.wait(timeout=120)
    return proc


VARIABLES = (
    "import os, sys, json, time; r = os.environ['RANK']; "
    "json.dump({**{k: os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', "
    "'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'MEGALAB_SPAWNED')}, "
    "'python_s': time.time() - float(os.environ['MEGALAB_LAUNCH_T']), "
    "'torch_loaded': 'torch' in sys.modules, 'cwd': os.getcwd()}, "
    "open(os.path.join(os.environ['OUT'], r + '.json'), 'w')); print('rank', r)"
)


def _ranks(tmp_path, nproc):
    return [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(nproc)]


def test_each_rank_gets_torchruns_variables_and_writes_to_the_clients_stdout(env, tmp_path):
    proc = _client(env, tmp_path, 3, VARIABLES)
    assert proc.returncode == 0, proc.stderr.read().decode()
    got = _ranks(tmp_path, 3)
    assert [g["RANK"] for g in got] == [g["LOCAL_RANK"] for g in got] == ["0", "1", "2"]
    assert {g["WORLD_SIZE"] for g in got} == {g["LOCAL_WORLD_SIZE"] for g in got} == {"3"}
    assert len({g["MASTER_PORT"] for g in got}) == 1 and got[0]["MASTER_ADDR"] == "127.0.0.1"
    assert all(g["torch_loaded"] and g["cwd"] == os.getcwd() for g in got)
    assert sorted(proc.stdout.read().decode().split("\n")[:3]) == ["rank 0", "rank 1", "rank 2"]


def test_a_second_run_forks_from_the_same_warm_server(env, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    assert _client(env, first, 2, VARIABLES).returncode == 0
    pid = forkserver.ping(forkserver.socket_path(env))
    assert _client(env, second, 2, VARIABLES).returncode == 0
    assert pid and forkserver.ping(forkserver.socket_path(env)) == pid
    third = tmp_path / "c"  # another world size: the same server
    third.mkdir()
    assert _client(env, third, 3, VARIABLES).returncode == 0
    assert forkserver.ping(forkserver.socket_path(env)) == pid
    assert {g["WORLD_SIZE"] for g in _ranks(third, 3)} == {"3"}
    # launch to the rank's Python, torch already imported: a fresh interpreter and the client
    assert max(g["python_s"] for g in _ranks(second, 2)) < 2.0


def test_the_first_failing_rank_ends_the_run_with_its_code(env, tmp_path):
    code = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(7)\ntime.sleep(120)"
    t0 = time.monotonic()
    proc = _client(env, tmp_path, 3, code)
    assert proc.returncode == 7 and time.monotonic() - t0 < 30


def _pids_of_ranks(tmp_path, nproc):
    deadline = time.monotonic() + 60
    while len(list(tmp_path.iterdir())) < nproc and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)
    return [int((tmp_path / str(r)).read_text()) for r in range(nproc)]


def _gone(pids):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


SLEEPER = (
    "import os, time; open(os.path.join(os.environ['OUT'], os.environ['RANK']), 'w')"
    ".write(str(os.getpid())); time.sleep(120)"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_to_the_client_stops_its_ranks(env, tmp_path, sig):
    proc = _client(env, tmp_path, 2, SLEEPER, wait=False)
    pids = _pids_of_ranks(tmp_path, 2)
    proc.send_signal(sig)
    expected = -signal.SIGKILL if sig == signal.SIGKILL else 128 + sig  # kill -9: nothing said
    assert proc.wait(timeout=30) == expected
    assert _gone(pids)  # the server saw the client's socket close


def test_a_stale_socket_is_replaced(env, tmp_path):
    path = forkserver.socket_path(env)
    assert _client(env, tmp_path, 1, "pass").returncode == 0
    old = forkserver.ping(path)
    os.kill(old, signal.SIGKILL)  # its socket stays behind, with nobody listening
    time.sleep(0.2)
    assert os.path.exists(path) and forkserver.ping(path) is None
    proc = _client(env, tmp_path, 1, "print('ok')")
    assert proc.returncode == 0 and proc.stdout.read() == b"ok\n"
    assert forkserver.ping(path) not in (None, old)


def test_an_idle_server_exits_and_removes_its_socket(env, tmp_path):
    where = tempfile.mkdtemp(prefix="mfi")  # a server of its own, started idle-short
    env = {**env, forkserver.DIR: where, forkserver.IDLE: "1"}
    path = forkserver.socket_path(env)
    try:
        assert _client(env, tmp_path, 4, "pass").returncode == 0
        deadline = time.monotonic() + 15
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(path) and forkserver.ping(path) is None
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _refusing(path):
    """A listener on `path` that closes every connection: a server that fails mid-protocol."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    pid = os.fork()
    if pid == 0:
        while True:
            listener.accept()[0].close()
    listener.close()
    return pid


@pytest.mark.parametrize("failure", ["no socket directory", "a protocol error"])
def test_the_client_falls_back_to_spawn(env, tmp_path, failure):
    where = tempfile.mkdtemp(prefix="mfs")
    if failure == "no socket directory":
        (tmp_path / "file").write_text("")
        env = {**env, forkserver.DIR: str(tmp_path / "file" / "x")}
        refusing = None
    else:
        env = {**env, forkserver.DIR: where}
        refusing = _refusing(forkserver.socket_path(env))
    try:
        proc = _client(env, tmp_path, 2, VARIABLES)
    finally:
        if refusing:
            os.kill(refusing, signal.SIGKILL)
            os.waitpid(refusing, 0)
        shutil.rmtree(where)
    said = proc.stderr.read().decode().strip().splitlines()
    assert proc.returncode == 0 and said[-1].endswith("starting the ranks as spawn does"), said
    assert len(said) == 1 and [g["RANK"] for g in _ranks(tmp_path, 2)] == ["0", "1"]
    assert not any(g["torch_loaded"] for g in _ranks(tmp_path, 2))  # spawn's fresh interpreters


def test_one_node_runs_under_the_forkserver_where_asked(monkeypatch):
    monkeypatch.setenv(launch.LAUNCHER, "forkserver")
    cmd = launch.one_node(2, ["-m", "megalab.train"])
    assert cmd == [sys.executable, "-m", "megalab.jobs.forkserver", "--nproc=2", "--"] + cmd[-2:]


def test_the_trainer_trains_the_same_through_the_forkserver(env, tmp_path):
    """test_train_cpu's CPU harness (its worker patches torch.cuda in each rank only): the same
    losses and grad norms as the fresh torchrun run of the same layout."""
    from megalab import metrics
    from megalab.runs.flags import config_to_args

    import test_train_cpu
    from test_train_cpu import LOOP, cpu_train

    cfg = LOOP.replace(gpus=2, tp=2)
    worker = [test_train_cpu.__file__, "--run-dir", str(tmp_path), *config_to_args(cfg)]
    cmd = [sys.executable, "-m", "megalab.jobs.forkserver", "--nproc=2", "--", *worker]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    parsed = metrics.parse_log(out.stdout)
    fresh = cpu_train(2, cfg)
    for key in ("loss", "grad_norm"):
        assert [s[key] for s in parsed.steps] == [s[key] for s in fresh.steps]
    marks = parsed.summary["startup_marks_s"]
    assert 0 <= marks["python"] <= marks["imports"] <= marks["first_step"]
    assert parsed.summary["env"]["launcher"] == "forkserver"  # the record's env.launcher


def test_a_launched_dry_run_goes_through_the_forkserver(env, tmp_path, monkeypatch):
    """launch -> one_node -> `-m megalab.train --dry-run` forked from the warm server."""
    from megalab import theory
    from test_train_cpu import LLAMA

    monkeypatch.setenv(launch.LAUNCHER, "forkserver")
    monkeypatch.setenv(forkserver.DIR, env[forkserver.DIR])
    cfg = LLAMA.replace(gpus=2, tp=2)
    outcome = launch.launch(cfg, runs_root=tmp_path, progress=False, dry_run=True, timeout_s=300)
    log = (outcome.run_dir / "log.txt").read_text()
    assert outcome.status == "ok" and "spawn does" not in log, log[-4000:]
    rows = sorted(outcome.parsed.params, key=lambda r: r["rank"])
    assert [r["params"] for r in rows] == theory.params_per_rank(cfg)
    assert forkserver.ping(forkserver.socket_path(launch.child_env())) is not None
