"""tools/gpu/pack.py's plan reader and its --resume bookkeeping (the runs themselves need a GPU
host)."""

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "pack", Path(__file__).parents[1] / "tools/gpu/pack.py"
)
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
    assert [(n, tag, gpus) for n, tag, gpus, _ in jobs] == [
        (2, "warmup!", 2),
        (4, "side!", 2),
        (5, "wait", 0),
        (6, "fit", 1),
    ]
    assert jobs[1][3][0] == "peer"
    assert [
        n
        for n, *_ in pack._jobs(
            plan,
            done={
                2: "warmup! --preset gpt-1.2b --gpus 2 --tp 2",
                4: "side! peer --preset gpt2-xl --gpus 2 --dist-opt",
            },
        )
    ] == [5, 6]


def test_progress_is_kept_per_plan_and_read_back(tmp_path, monkeypatch):
    """Finished lines are kept by plan (its full path) with their text: an edited line runs
    again."""
    monkeypatch.setattr(pack, "PROGRESS", str(tmp_path / "progress"))
    a, b = tmp_path / "plans" / "a.txt", tmp_path / "other" / "a.txt"
    for plan in (a, b):
        plan.parent.mkdir()
        plan.write_text(PLAN)
    assert pack.read_done(a) == {}
    pack.mark_done(a, 2)
    pack.mark_done(a, 4)
    assert pack.read_done(a) == {
        2: "warmup! --preset gpt-1.2b --gpus 2 --tp 2",
        4: "side! peer --preset gpt2-xl --gpus 2 --dist-opt",
    }
    assert pack.read_done(b) == {}
    assert [n for n, *_ in pack._jobs(a, pack.read_done(a))] == [5, 6]
    a.write_text(PLAN.replace("--tp 2", "--tp 2 --mbs 4"))
    assert [n for n, *_ in pack._jobs(a, pack.read_done(a))] == [2, 5, 6]


def test_only_a_job_that_exited_0_within_its_own_timeout_is_done():
    assert pack.finished(0, 40, 300, 300) and pack.finished(0, 40, 120, 300)
    # failed (OOM, or a broken install): again
    assert not pack.finished(1, 40, 300, 300)
    # a fit or parity line cut off by --hard-end: again
    assert not pack.finished(0, 118, 120, 300)
    # one run exits 1 when cut off: its 0 is done (session 25)
    assert pack.finished(0, 176, 171, 300, one_run=True)
    assert not pack.finished(1, 176, 171, 300, one_run=True)


def test_a_line_that_failed_twice_on_this_host_is_given_up(tmp_path, monkeypatch):
    """--resume runs a failed line once more, then skips it (session 15 re-ran a failing line and
    four OOMs); an edited line starts counting again."""
    monkeypatch.setattr(pack, "PROGRESS", str(tmp_path / "progress"))
    plan = tmp_path / "plan.txt"
    plan.write_text(PLAN)
    pack.mark_done(plan, 4, failed=True)
    assert pack.read_given_up(plan) == {} and pack.read_done(plan) == {}
    pack.mark_done(plan, 4, failed=True)
    assert pack.read_given_up(plan) == {4: "side! peer --preset gpt2-xl --gpus 2 --dist-opt"}
    plan.write_text(PLAN.replace("--dist-opt", "--dist-opt --mbs 2"))
    assert pack.read_given_up(plan) == {}


def test_a_job_past_the_hard_end_is_interrupted_as_ctrl_c_would(tmp_path):
    """A fit line is several runs, each under the cut time limit: past --hard-end the job gets
    SIGINT (megalab's launcher stops its ranks on KeyboardInterrupt), then SIGKILL if it lingers. A
    plan started in the background inherits SIGINT ignored; its jobs start with it restored
    (pack.ctrl_c_restored), or the interrupt is lost."""
    said = tmp_path / "said"
    # as in a shell's background job (`cmd &`)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        polite = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time\ntry:\n    print('ready', flush=True)\n    time.sleep(60)\n"
                f"except KeyboardInterrupt:\n    open({str(said)!r}, 'w').write('interrupted')",
            ],
            stdout=subprocess.PIPE,
            preexec_fn=pack.ctrl_c_restored,
        )
    finally:
        signal.signal(signal.SIGINT, ignored)
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    polite.stdout.readline(), stubborn.stdout.readline()  # both are inside their sleep
    t0 = time.time()
    pack.stop(polite, grace_s=10)
    pack.stop(stubborn, grace_s=1)
    assert said.read_text() == "interrupted" and stubborn.returncode == -9 and time.time() - t0 < 10


def test_resume_skips_a_line_recorded_on_this_host_through_any_plan(tmp_path):
    """A run line is done when the store holds an ok record of its tag and configuration made on
    this host, whichever plan made it: a group's repeated line needs one record each, a profiled
    line a profiled record, a line run alone a record not packed; records of another boot (lent
    hosts share the hostname "vm"), or of none, and fit lines, do not count."""
    from megalab.records.store import Store
    from megalab.runs.flags import config_to_args
    from run_records import CFG, record

    store = Store(tmp_path / "results")
    words = " ".join(config_to_args(CFG))
    plan = tmp_path / "plan.txt"
    plan.write_text(
        f"group.ch01.x! {words}\n"  # 1: recorded
        f"group.ch01.x! {words}\n"  # 2: a second round, one record only
        f"group.ch01.x! {words} --profile\n"  # 3: no profiled record
        f"other! {words}\n"  # 4: another tag
        f"side! peer {words}\n"  # 5: the peer's record
        f"packed! {words}\n"  # 6: only a packed record
        f"ch01 fit --vary mbs {words}\n"  # 7: fit lines are the progress file's
    )
    env = {"gpu_name": "NVIDIA H200", "hostname": "vm"}
    peer = CFG.replace(runner="megatron-lm", init="megatron")
    for cfg, tags, host in (
        (CFG, ["group.ch01.x"], "here"),
        (CFG, ["group.ch01.x"], "elsewhere"),
        (CFG, ["other", "profile"], "here"),
        (peer, ["side", "peer"], "here"),
        (CFG, ["packed"], "here"),
        (CFG, ["ch01"], "here"),
    ):
        store.append(record(cfg, tags=tags, env={**env, "boot_id": host}))
    store.append(record(CFG, tags=["group.ch01.x"], env=env))  # no boot id: an earlier recording
    done = pack.recorded_lines(str(plan), store=store, boot="here")
    assert sorted(done) == [1, 5]
    assert done[1] == f"group.ch01.x! {words}"
    assert sorted(pack.recorded_lines(str(plan), store=store, boot="elsewhere")) == [1]
