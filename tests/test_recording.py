"""megalab.book.recording: the GPU host's plan, printed from the chapters' run definitions."""

from megalab.book import recording


def _tags(lines):
    return [line.split()[0] for line in lines if line != "wait"]


def test_a_host_wider_than_the_plan_times_its_runs_alone():
    """On a 4-GPU host pack.py would start a second 2-GPU job beside a timed one: with host_gpus the
    timed runs get the solo mark ('!'); profiled runs, fits, parity and its reference runs still
    share the host. Without it, nothing changes."""
    plain = recording.plan("ch06", gpus=2, pending=True)
    wide = recording.plan("ch06", gpus=2, pending=True, host_gpus=4)
    assert len(plain) == len(wide) and all(not t.endswith("!") for t in _tags(plain))
    for line in wide:
        words = line.split()
        if line == "wait":
            continue
        timed = (
            words[1] not in ("fit", "parity")
            and "--profile" not in words
            and "-ref" not in words[0]
        )
        assert words[0].endswith("!") == timed, line
    assert recording.plan("ch06", gpus=2, pending=True, host_gpus=2) == plain
