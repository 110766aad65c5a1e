"""Run a plan of `megalab run` jobs on this host's GPUs, several at once on disjoint GPUs.

    python3 tools/gpu/pack.py tools/gpu/plans/smoke.txt [--gpus 4] [--timeout 300] [--serial]

A plan file has one job per line: `<tag> <megalab run flags>`, or `<tag> <subcommand> <flags>` for
another megalab subcommand such as fit (blank lines and # comments skipped). A tag ending in `!`
runs its job alone on the host (a timing baseline); a line `wait` starts nothing more until every
job started so far has finished (parity after its reference runs). fit and parity run in auto mode,
so probes and reference runs already recorded here are read back, not repeated. `megalab
experiments` prints these plans.
Each job asks for cfg.gpus GPUs; jobs are started greedily, each with its own CUDA_VISIBLE_DEVICES,
so four 1-GPU jobs or two 2-GPU jobs share the host. Records get the plan's tag plus "packed" when
the job shared the host with another one: timings that a chapter quotes come from `--serial` plans.
Every outcome (ok, oom, failed, ...) is a record; the pack never stops on a failed job.
With --resume, a plan run again on the same host (chained calls) skips the lines whose job exited 0
in an earlier call; a line that failed (an OOM too: it is cheap to record again, and a job that died
of a broken install must not count as done), was cut off by --hard-end or never started runs again,
once: a line that failed TRIES times on this host is skipped (session 15 re-ran a failing line and
four OOMs). A line counts as the same only with the same number and text: a plan edited between
calls runs its changed lines. --resume also skips a run line whose run the results store already
holds, recorded on this host since its boot through any plan (`recorded_lines`: same tag and
configuration, as many lines as there are such records; lent hosts share one hostname, so the
record's boot id tells them apart).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time


# survives between chained calls on one host, not onto a new one
PROGRESS = "/tmp/megalab-plan-done"
# a line that failed this often on this host is not run again by --resume
TRIES = 2
# --hard-end cuts each run's time limit, but a fit or parity line is several runs: one still going
# this long past the hard end is interrupted (session 18's last call ran a fit search past its own
# limit: no tarball came back)
HARD_END_SLACK_S = 5
STOP_GRACE_S = 15


def _lines(path):
    """(line number, its text less comment and blanks) of each line of a plan."""
    for number, line in enumerate(open(path), 1):
        yield number, line.split("#", 1)[0].strip()


def _jobs(path, done=None):
    """(line number, tag, GPUs, flags) of each job, less those in done ({line number: its text})."""
    done = done or {}
    for number, line in _lines(path):
        if line and done.get(number) != line:
            if line == "wait":
                yield number, "wait", 0, []
                continue
            tag, *flags = shlex.split(line)
            gpus = 1
            if "--gpus" in flags:
                gpus = int(flags[flags.index("--gpus") + 1])
            yield number, tag, gpus, flags


def progress_file(plan: str) -> str:
    """One file per plan (by its full path) in PROGRESS."""
    return os.path.join(PROGRESS, os.path.abspath(plan).strip("/").replace("/", "__") + ".done")


def _rows(path: str) -> list[tuple[int, str]]:
    """(line number, line text) of each row a progress file holds; none when it does not exist."""
    try:
        rows = [row.split("\t", 1) for row in open(path).read().splitlines() if "\t" in row]
    except FileNotFoundError:
        return []
    return [(int(n), text) for n, text in rows]


def read_done(plan: str) -> dict[int, str]:
    """{line number: line text} of the plan's lines that finished on this host."""
    return dict(_rows(progress_file(plan)))


def mark_done(plan: str, number: int, failed: bool = False) -> None:
    """Note that line `number` finished (or, with failed, that it failed) on this host."""
    line = dict(_lines(plan))[number]
    os.makedirs(PROGRESS, exist_ok=True)
    with open(progress_file(plan) + (".failed" if failed else ""), "a") as f:
        f.write(f"{number}\t{line}\n")


def read_given_up(plan: str) -> dict[int, str]:
    """{line number: line text} of the plan's lines that failed TRIES times on this host, as they
    read now."""
    now = dict(_lines(plan))
    counts: dict[int, int] = {}
    for n, text in _rows(progress_file(plan) + ".failed"):
        if now.get(n) == text:
            counts[n] = counts.get(n, 0) + 1
    return {n: now[n] for n, c in counts.items() if c >= TRIES}


def _sub(flags: list[str]) -> tuple[str, list[str]]:
    """(subcommand, its flags) of a job: `run` unless the line names another (fit, parity, peer)."""
    return ("run", flags) if flags[0].startswith("--") else (flags[0], flags[1:])


def recorded_lines(plan: str, store=None, boot: str | None = None) -> dict[int, str]:
    """{line number: line text} of the plan's run and peer lines whose run the store (default: the
    checkout's results/) already holds: an ok record made on this host since its boot (its env's
    boot_id equals `boot`, default this host's: lent hosts all call themselves "vm", and the store
    holds the book's earlier recordings) with the line's tag and configuration, profiled where the
    line profiles, not packed where the line runs alone, whichever plan recorded it. A line that
    appears n times (a group's rounds) is matched by up to n records, first lines first. On this
    host only: a comparison group compares runs of one host, and a warm-up warms its own. fit and
    parity lines (several runs each) are left to the progress file."""
    from collections import Counter

    from megalab.machine.env import boot_id
    from megalab.records.store import as_store

    boot = boot or boot_id()
    have, alone = Counter(), Counter()
    for r in as_store(store).load("run", status="ok"):
        if boot is None or (r.get("env") or {}).get("boot_id") != boot:
            continue
        tags = set(r.get("tags") or ())
        for t in tags:
            have[(t, r.get("key"), "profile" in tags)] += 1
            alone[(t, r.get("key"), "profile" in tags)] += "packed" not in tags
    text = dict(_lines(plan))
    out = {}
    for number, tag, cfg, profile in run_lines(plan):
        k = (tag.rstrip("!"), cfg.key, profile)
        counts = alone if tag.endswith("!") else have
        if counts[k] > 0:
            have[k] -= 1
            alone[k] -= 1
            out[number] = text[number]
    return out


def run_lines(plan: str):
    """(line number, tag, RunConfig, profiled) of each `run` and `peer` line of the plan; a peer
    line's config is the same run made by Megatron-LM (jobs.peer)."""
    import argparse

    from megalab.runs.flags import add_config_args, config_from_args

    parser = add_config_args(argparse.ArgumentParser(allow_abbrev=False))
    parser.add_argument("--profile", action="store_true")
    for number, tag, _, flags in _jobs(plan):
        if tag == "wait" or _sub(flags)[0] not in ("run", "peer"):
            continue
        sub, words = _sub(flags)
        ns, _ = parser.parse_known_args(words)
        cfg = config_from_args(ns)
        if sub == "peer":
            cfg = cfg.replace(runner="megatron-lm", init="megatron")
        yield number, tag, cfg, ns.profile


def cut_off(elapsed_s: float, timeout_s: float, full_timeout_s: float) -> bool:
    """Whether --hard-end cut a job off: its timeout was shorter than the plan's own, and nearly
    used up."""
    return timeout_s < full_timeout_s and elapsed_s >= timeout_s - 5


def finished(
    returncode: int,
    elapsed_s: float,
    timeout_s: float,
    full_timeout_s: float,
    one_run: bool = False,
) -> bool:
    """A job counts as done when it exited 0 and was not cut off by --hard-end. One run (`run`,
    `peer`) that --hard-end cut off exits 1 (its record says timeout), so its 0 is enough: session
    25's run that trained to the end 5 s past its shortened timeout counted as cut off and ran
    again, 175 s of the lease. A fit or parity line is several runs, and one cut off can still leave
    the line's exit 0, so there the timing decides."""
    return returncode == 0 and (one_run or not cut_off(elapsed_s, timeout_s, full_timeout_s))


def ctrl_c_restored() -> None:
    """A job's SIGINT back to the default before it starts, so that Python turns it into
    KeyboardInterrupt (`stop`): a plan started as a shell's background job (`cmd &`) inherits SIGINT
    ignored, and its jobs would ignore `stop`'s interrupt until the kill (session 20 found it in
    this module's test, run in the background)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(proc, grace_s: float = STOP_GRACE_S) -> None:
    """Interrupt a job as Ctrl-C would (megalab's launcher then stops its ranks), and kill it if it
    lingers."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument(
        "--gpus", type=int, default=None, help="GPUs of this host (default: nvidia-smi's count)"
    )
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--serial", action="store_true", help="one job at a time (for timings)")
    p.add_argument("--deadline", type=float, help="start no job after this many seconds")
    p.add_argument(
        "--hard-end",
        type=float,
        help="no run may last past this many seconds: each job's --timeout "
        "is cut to the time left (set it under the call's limit, so the tarball is still written)",
    )
    p.add_argument(
        "--resume", action="store_true", help="skip the lines an earlier call on this host finished"
    )
    args = p.parse_args(argv)
    if args.gpus is None:
        try:
            smi = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True
            ).stdout.strip()
        except OSError:  # no driver tools on this machine
            smi = ""
        args.gpus = len(smi.splitlines()) or 4
    done = read_done(args.plan) if args.resume else {}
    recorded = recorded_lines(args.plan) if args.resume else {}
    if recorded:
        print(
            f"resume: {len(recorded)} line(s) of {args.plan} recorded on this host (any plan)",
            flush=True,
        )
    done = {**recorded, **done}
    given_up = read_given_up(args.plan) if args.resume else {}
    for number, line in given_up.items():
        print(f"SKIP line {number}: failed {TRIES} times on this host: {line}", flush=True)
    finished_before, done = len(done), {**done, **given_up}
    for path in (progress_file(args.plan), progress_file(args.plan) + ".failed"):
        if not args.resume and os.path.exists(path):
            os.remove(path)
    todo = list(_jobs(args.plan, done))
    if finished_before:
        print(
            f"resume: {finished_before} line(s) of {args.plan} already finished on this host",
            flush=True,
        )
    free = list(range(args.gpus))
    # (process, its GPUs, what, start time, solo, line number, its timeout, one run)
    running: list[tuple] = []
    start = time.time()
    while todo or running:
        if args.deadline and todo and time.time() - start > args.deadline:
            print(f"deadline: {len(todo)} job(s) not started", flush=True)
            todo = []
        for job in list(todo):
            number, tag, gpus, flags = job
            if tag == "wait":
                if not running:
                    todo.remove(job)
                    continue
                break
            solo = tag.endswith("!") or args.serial
            tag = tag.rstrip("!")
            if gpus > args.gpus:
                print(f"SKIP {tag}: needs {gpus} GPUs", flush=True)
                todo.remove(job)
                continue
            if solo and running:
                break  # a solo job waits for the host to empty, and nothing starts beside it
            if len(free) >= gpus and not any(r[4] for r in running):
                mine, free = free[:gpus], free[gpus:]
                packed = not args.serial and not (solo or gpus == args.gpus)
                # run, fit and parity alike
                tags = ["--tag", tag] + (["--tag", "packed"] if packed else [])
                timeout = args.timeout
                if args.hard_end:
                    timeout = max(30, min(timeout, args.hard_end - (time.time() - start)))
                # e.g. "fit --vary mbs ..."
                sub, flags = [_sub(flags)[0]], _sub(flags)[1]
                # a timing repeats; fit/parity reuse
                mode = "live" if sub in (["run"], ["peer"]) else "auto"
                cmd = [
                    sys.executable,
                    "-m",
                    "megalab",
                    *sub,
                    *flags,
                    "--mode",
                    mode,
                    "--timeout",
                    f"{timeout:.0f}",
                    *tags,
                ]
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, mine))}
                log = open(f"/tmp/pack-{len(running)}-{int(time.time() * 1000)}.log", "w")
                proc = subprocess.Popen(
                    cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=ctrl_c_restored
                )
                running.append(
                    (
                        proc,
                        mine,
                        " ".join(flags),
                        time.time(),
                        solo,
                        number,
                        timeout,
                        mode == "live",
                    )
                )
                todo.remove(job)
                print(
                    f"[{time.time() - start:6.1f}s] start {tag} on GPUs {mine}: {' '.join(flags)}",
                    flush=True,
                )
        time.sleep(0.5)
        for item in list(running):
            proc, mine, what, t0, _, number, timeout, one_run = item
            if (
                args.hard_end
                and proc.poll() is None
                and time.time() - start > args.hard_end + HARD_END_SLACK_S
            ):
                print(f"[{time.time() - start:6.1f}s] hard end: interrupting {what}", flush=True)
                stop(proc)
            if proc.poll() is not None:
                running.remove(item)
                free = sorted(free + mine)
                elapsed = time.time() - t0
                if finished(proc.returncode, elapsed, timeout, args.timeout, one_run):
                    mark_done(args.plan, number)
                # failed on its own: one more try, then given up
                elif not cut_off(elapsed, timeout, args.timeout):
                    mark_done(args.plan, number, failed=True)
                print(
                    f"[{time.time() - start:6.1f}s] done rc={proc.returncode} in "
                    f"{time.time() - t0:.0f}s: {what}",
                    flush=True,
                )
    print(f"plan {args.plan} finished in {time.time() - start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
