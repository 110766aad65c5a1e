"""cli.py: `megalab ...` exit codes and output, called in-process through main([...])."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from megalab import cli
from megalab.jobs import running as results
from megalab.runs.config import RunConfig
from megalab.runs.flags import config_to_args
from megalab.jobs.launch import RunOutcome
from megalab.metrics import Parsed

CFG = RunConfig(
    name="gpt-test", layers=4, hidden=256, heads=4, gpus=2, tp=2, mbs=2, gbs=8, impl="local"
)
ARGS = config_to_args(CFG)


@pytest.fixture
def store(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()  # $MEGALAB_RESULTS must name a folder that is there
    monkeypatch.setenv("MEGALAB_RESULTS", str(tmp_path / "results"))
    return results.Store(tmp_path / "results")


def _add(store, cfg=CFG, status="ok"):
    steps = [{"kind": "step", "step": i, "loss": 9.0 - i, "step_time_s": 0.25} for i in range(5)]
    outcome = RunOutcome(status, None, Parsed(None, steps, None), None, 0)
    return store.append(
        results.make_record(cfg, outcome, env={"gpu_name": "NVIDIA H200", "gpu_count": 4})
    )


def test_plan_json(capsys):
    assert (
        cli.main(
            [
                "plan",
                "--preset",
                "gpt-1.2b",
                "--gpus",
                "2",
                "--tp",
                "2",
                "--mbs",
                "4",
                "--gbs",
                "16",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    for key in (
        "params_total",
        "flops_per_step",
        "memory_gib",
        "bubble_fraction",
        "comm_bytes_per_step",
    ):
        assert key in plan


def test_plan_table(capsys):
    assert cli.main(["plan", *ARGS]) == 0
    out = capsys.readouterr().out
    assert out.startswith(CFG.label) and "params_total" in out


def test_invalid_layout_exit_2(capsys):
    assert cli.main(["plan", "--heads", "16", "--gpus", "4", "--tp", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    reasons = captured.err.splitlines()[1:]
    assert reasons and any("tp=3" in r for r in reasons)


def test_bad_arguments_exit_2(capsys):
    assert cli.main(["plan", "--tp", "two"]) == 2
    assert cli.main(["no-such-command"]) == 2


def test_run_cached_not_recorded_exit_3(store, capsys):
    assert cli.main(["run", *ARGS, "--mode", "cached"]) == 3
    assert "megalab run " + " ".join(ARGS) + " --mode live" in capsys.readouterr().err


def test_run_cached(store, capsys):
    rec = _add(store)
    assert cli.main(["run", *ARGS, "--mode", "cached", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["id"] == rec["id"] and out["source"] == "cached"
    assert cli.main(["run", *ARGS, "--mode", "cached"]) == 0
    assert "step_time_s" in capsys.readouterr().out


def test_run_live_not_enough_gpus_exit_2(store, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)  # also on a GPU host
    assert cli.main(["run", *ARGS, "--mode", "live"]) == 2
    assert "needs 2 GPU(s) on this machine, which has 1" in capsys.readouterr().err


def test_results_listing(store, capsys):
    _add(store)
    _add(store, CFG.replace(mbs=4, gbs=16), status="oom")
    assert cli.main(["results"]) == 0
    out = capsys.readouterr().out
    assert CFG.label in out and "oom" in out and len(out.strip().splitlines()) == 3
    assert cli.main(["results", "--label", "mbs4", "--json"]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert rec["status"] == "oom"
    assert cli.main(["results", "--status", "ok", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert cli.main(["results", "--key", "nope"]) == 0
    assert "no records" in capsys.readouterr().out


def test_results_import(store, tmp_path, capsys):
    other = results.Store(tmp_path / "host")
    _add(other), _add(other)
    assert cli.main(["results", "--import", str(other.path())]) == 0
    assert cli.main(["results", "--import", str(other.path())]) == 0
    assert "imported 0 new" in capsys.readouterr().out.splitlines()[-1]
    assert len(store.load()) == 2


def test_env_json(capsys):
    assert cli.main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "gpu_count" in info and "git_commit" in info


def test_slurm(capsys):
    assert (
        cli.main(
            ["slurm", *config_to_args(CFG.replace(gpus=8)), "--nodes", "2", "--partition", "p"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        out.startswith("#!/bin/bash")
        and "#SBATCH --nodes=2" in out
        and "#SBATCH --gpus-per-node=4" in out
    )


def test_lazy_subcommands_are_dispatched(monkeypatch, capsys):
    import types

    import megalab.jobs.bench  # noqa: F401  (so that the fakes below are undone to the real modules)

    calls = {}
    monkeypatch.setitem(
        sys.modules,
        "megalab.book.reproduce",
        types.SimpleNamespace(
            reproduce=lambda chapters, mode, gpus, force, **live: (
                calls.setdefault("reproduce", (chapters, mode, gpus, force)) and 0
            ),
            page_names=lambda: ["planner"],
        ),
    )
    monkeypatch.setitem(
        sys.modules,
        "megalab.data",
        types.SimpleNamespace(
            prepare_data=lambda i, o, tokenizer: (
                calls.setdefault("data", (i, o, tokenizer)) and {"documents": 1}
            )
        ),
    )
    monkeypatch.setitem(
        sys.modules,
        "megalab.jobs.bench",
        types.SimpleNamespace(main=lambda argv: calls.setdefault("bench", argv) and 0),
    )
    import megalab.jobs

    monkeypatch.setattr(megalab.jobs, "bench", sys.modules["megalab.jobs.bench"])
    assert cli.main(["reproduce", "tp", "pp", "--mode", "cached", "--gpus", "4", "--force"]) == 0
    assert cli.main(["prepare-data", "--input", "a.jsonl", "--output-prefix", "out/a"]) == 0
    assert cli.main(["bench", "--gpus", "2"]) == 0
    assert calls == {
        "reproduce": (["tp", "pp"], "cached", 4, True),
        "data": ("a.jsonl", "out/a", "byte"),
        "bench": ["--gpus", "2"],
    }


def test_python_dash_m(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "megalab", "plan", *ARGS, "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(Path(cli.__file__).parents[1]), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["world_size"] == 2


def test_run_dry_run_on_cpu(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEGALAB_RUNS", str(tmp_path / "runs"))
    tiny = CFG.replace(layers=2, hidden=64, heads=2, vocab=512, seq=32, gbs=4)
    assert cli.main(["run", *config_to_args(tiny), "--dry-run", "--timeout", "240"]) == 0, (
        capsys.readouterr()
    )
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0].startswith(tiny.label) and len([ln for ln in out if ln.strip()[:1].isdigit()]) == 2
    )
    assert store.load() == []  # a dry run is not a measurement


# -- every mistake in tests/data/bad_inputs.py: exit 2, one short reason up front, no traceback
# ---------
def _table():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bad_inputs", Path(__file__).parent / "data" / "bad_inputs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BAD = _table()


def _write_files(folder: Path) -> None:
    from run_records import record

    for name, body in BAD.FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
            continue
        if body[:1] in (("dir",), ("fifo",)) or (isinstance(body, tuple) and body[0] == "link"):
            {
                "dir": path.mkdir,
                "fifo": lambda: os.mkfifo(path),
                "link": lambda: path.symlink_to(body[1]),
            }[body[0]]()
            if body[0] == "link" and name.endswith(".lock"):
                # the store file itself is regular: its lock is not
                path.with_suffix("").write_text("")
            continue
        if isinstance(body, tuple):
            changes = dict(body[1])
            bad = record()
            bad["config"] = {**bad["config"], **changes.pop("config", {})}
            bad.update(changes)
            body = "".join(json.dumps(r) + "\n" for r in (record(), bad, record(status="oom")))
        path.write_text(body)


def test_the_table_of_bad_inputs_is_long_and_has_no_repeats():
    argvs = [tuple(argv) for argv, _ in BAD.BAD_INPUTS]
    assert len(argvs) >= 120 and len(set(argvs)) == len(argvs)


@pytest.mark.parametrize(
    "argv, reason", BAD.BAD_INPUTS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_a_mistake_ends_in_exit_2_with_its_reason_up_front(
    argv, reason, store, tmp_path, capsys, monkeypatch
):
    _write_files(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    # NAME=value first: the command's environment
    while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0], re.S):
        name, value = argv.pop(0).split("=", 1)
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err
    head = err.splitlines()[:3]  # the reason comes first, not the usage
    assert head and head[0].startswith("megalab"), err
    assert re.search(reason, "\n".join(head)), err
    # one line; argparse's add where help is; several problems come one a line
    lines = err.splitlines()
    assert (
        len(lines) == 1
        or lines[1:] == [f"({lines[0].split(': ')[0]} --help lists the options)"]
        or (
            lines[0].endswith(":")
            and len(lines) >= 3
            and all(line.startswith("  ") for line in lines[1:])
        )
    ), err
    assert len(err) < 600, err
    assert not store.path().exists()  # a refused import wrote nothing


def test_mistakes_in_a_real_process_print_no_traceback(tmp_path):
    for argv in (
        ["plan", "--tp", "two"],
        ["experiments", "ch99"],
        ["results", "--import", str(tmp_path / "x")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "megalab", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).parents[1])},
        )
        assert (
            done.returncode == 2
            and "Traceback" not in done.stderr
            and done.stderr.startswith("megalab")
        )


def test_version_presets_and_chapters(capsys):
    from megalab import __version__
    from megalab.runs import presets

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"megalab {__version__}"
    assert cli.main(["--version"]) == 0
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in presets.names()) and "Shoeybi" in out
    assert cli.main(["presets", "--json"]) == 0
    assert [r["preset"] for r in json.loads(capsys.readouterr().out)] == presets.names()
    assert cli.main(["chapters"]) == 0
    out = capsys.readouterr().out
    assert "ch01  01_data_parallel" in out and "planner" in out


def test_every_option_has_help():
    parser = cli.build_parser()
    for name, sub in parser.commands.items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, (
                    f"megalab {name} {action.option_strings or action.dest} has no help"
                )


def test_experiments_take_every_spelling_of_a_chapter(capsys):
    outputs = []
    for name in ("ch01", "01", "1", "01_data_parallel", "data_parallel"):
        assert cli.main(["experiments", name]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] and all(out == outputs[0] for out in outputs)


def test_every_command_prints_its_help():
    """argparse formats help strings with %: a '%' in a field's doc must not crash `--help`."""
    parser = cli.build_parser()
    assert "run" in parser.commands
    for name, sub in parser.commands.items():
        assert sub.format_help().startswith("usage: megalab " + name), name
