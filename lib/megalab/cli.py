"""The `megalab` command: the same verbs as the notebooks, from a shell.

    megalab plan --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16      predict
    megalab run  --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16 --mode live
    megalab run  ... --dry-run            the model shards built on CPU (gloo), parameters per rank
    megalab results --label tp2 [--json] [--import other/runs.jsonl]
    megalab presets | chapters                 what the flags --preset and the chapter names can be
    megalab peer | env | fit | parity | experiments | slurm | prepare-data | reproduce | bench
    megalab --version

Exit codes: 0 done; 1 the run was recorded but did not finish ok (oom, failed, ...);
2 the configuration cannot run here (invalid layout, not enough GPUs) or bad arguments (one line
saying what to change, never a traceback); 3 no recorded result and no way to measure one (the
message gives the command); 130 interrupted (Ctrl-C); 141 the reader of the output went away (`|
head`).

This module is the front door: the parser (`build_parser`) and the guarded dispatch (`main`), which
turns a reader's mistake into one line and its exit status. What each subcommand does is in
`megalab.commands` (`predict`, `runs`, `records`).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from megalab import usage

# every exit status, so that megalab.cli names them all (EXIT_OK too)
from megalab.commands import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NOT_RECORDED,
    EXIT_OK,  # noqa: F401  (re-exported: cli names every exit status)
    EXIT_RUN_FAILED,
    BadArgument,
    predict,
    records,
    runs,
)

MODES = ("live", "cached", "auto")


# -- parser ----------------------------------------------------------------------------------------
def _gpu_model(text: str) -> str:
    """A GPU model megalab.machine.hardware knows ("H200", "NVIDIA H100 80GB HBM3"), as its table
    key."""
    from megalab.machine.hardware import UnknownGPU, gpu_spec

    try:
        return gpu_spec(text).name
    except UnknownGPU as exc:
        raise argparse.ArgumentTypeError(str(exc).split("; ")[0]) from None


def _version() -> str:
    from megalab import __version__

    return f"megalab {__version__}"


def build_parser() -> argparse.ArgumentParser:
    from megalab.runs.flags import add_config_args
    from megalab.jobs.launch import DEFAULT_TIMEOUT_S
    from megalab.metrics import STATUSES

    p = usage.Parser(
        prog="megalab",
        description="Train LLMs across GPUs with Megatron Core: predict, run, record, compare.",
    )
    p.add_argument(
        "--version", action="version", version=_version(), help="print megalab's version and exit"
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p.commands = sub.choices  # name -> its parser, to blame a stray argument on the right one

    def cmd(name, func, help, config=False):
        s = sub.add_parser(name, help=help, description=help)
        s.set_defaults(func=func)
        if config:
            add_config_args(s)
        return s

    def modes(s, default="auto"):
        s.add_argument(
            "--mode",
            choices=MODES,
            default=default,
            help=f"live runs on this machine's GPUs, cached reads results/, auto picks (default "
            f"{default})",
        )

    def timeout(s):
        s.add_argument(
            "--timeout",
            type=usage.seconds,
            default=DEFAULT_TIMEOUT_S,
            help=f"seconds before a run is stopped and recorded as a timeout (default "
            f"{DEFAULT_TIMEOUT_S})",
        )

    def tags(s, what):
        s.add_argument(
            "--tag", action="append", default=[], help=f"tag stored with {what} (repeatable)"
        )

    s = cmd(
        "plan",
        predict.cmd_plan,
        "predict parameters, memory, FLOPs, bubble and traffic of a configuration",
        True,
    )
    s.add_argument(
        "--gpu", type=_gpu_model, default="H200", help="GPU model to predict for (default H200)"
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument(
        "--search",
        action="store_true",
        help="rank every layout of the model on --gpus at --gbs and --seq by predicted step time "
        "(layout flags given pin their axis)",
    )
    s.add_argument(
        "--top",
        type=usage.positive_int,
        help="with --search: how many layouts to print (default 10)",
    )

    s = cmd(
        "run",
        runs.cmd_run,
        "run a configuration (live), or read its recorded result (cached)",
        True,
    )
    modes(s)
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="build the model on CPU (gloo), print parameters per rank",
    )
    timeout(s)
    tags(s, "the record")
    s.add_argument("--json", action="store_true", help="print the record as JSON")
    s.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler trace of steps 5-7 into the run folder",
    )
    s.add_argument(
        "--nnodes",
        type=usage.positive_int,
        default=1,
        help="nodes taking part (multi-node: run once per node)",
    )
    s.add_argument(
        "--node-rank",
        type=usage.count,
        default=0,
        help="this node's rank (node 0 records the result)",
    )
    s.add_argument("--rdzv-endpoint", help="host:port of the rendezvous (node 0's address)")

    s = cmd(
        "peer",
        runs.cmd_peer,
        "run a configuration with Megatron-LM's own pretrain_gpt.py (the peer)",
        True,
    )
    modes(s, default="live")
    timeout(s)
    tags(s, "the record")
    s.add_argument("--json", action="store_true", help="print the record as JSON")
    s.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler on rank 0 over the trainer's profiled steps; the record keeps its "
        "kernels",
    )
    s.add_argument(
        "--megatron-lm",
        metavar="PATH",
        help="Megatron-LM checkout at tag core_v0.16.1 (default $MEGATRON_LM, else "
        ".peer/Megatron-LM)",
    )

    s = cmd(
        "results",
        records.cmd_results,
        "list recorded results, or import records from another store file",
    )
    s.add_argument("--label", help="keep labels containing this text")
    s.add_argument("--status", choices=STATUSES, help="keep this status")
    s.add_argument(
        "--key", help="keep this config key (16 hex digits, as `megalab plan` prints it)"
    )
    s.add_argument(
        "--kind", choices=("run", "bench"), default="run", help="training runs or microbenchmarks"
    )
    s.add_argument("--store", help="results folder (default $MEGALAB_RESULTS or results/)")
    s.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        help="merge records from FILE (JSONL); a file with any bad line is refused whole",
    )
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd(
        "env", records.cmd_env, "print this machine's fingerprint (GPUs, interconnect, versions)"
    )
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd(
        "presets",
        predict.cmd_presets,
        "list the model presets that --preset takes, with their sources",
    )
    s.add_argument("--json", action="store_true", help="print JSON")

    cmd(
        "chapters",
        records.cmd_chapters,
        "list the chapters (for experiments and reproduce) and the book's pages",
    )

    s = cmd(
        "fit",
        runs.cmd_fit,
        "bisect for the largest mbs / seq / layers / experts that fits in memory",
        True,
    )
    s.add_argument(
        "--vary",
        choices=("mbs", "seq", "layers", "experts"),
        default="mbs",
        help="what to grow (default mbs)",
    )
    s.add_argument(
        "--lo", type=usage.positive_int, default=1, help="smallest value to probe (default 1)"
    )
    s.add_argument(
        "--hi", type=usage.positive_int, default=64, help="largest value to probe (default 64)"
    )
    s.add_argument(
        "--step",
        type=usage.positive_int,
        help="probe multiples of this (default: 1, 128 for seq, pp*vpp for layers, 8*ep for "
        "experts)",
    )
    modes(s)
    timeout(s)
    tags(s, "every probe")

    s = cmd(
        "parity",
        runs.cmd_parity,
        "compare the loss curve of a layout with the single-GPU run",
        True,
    )
    modes(s)
    s.add_argument(
        "--repeats",
        type=usage.positive_int,
        default=2,
        help="single-GPU repeats that measure run-to-run spread (default 2)",
    )
    timeout(s)
    tags(s, "every run")

    s = cmd(
        "experiments",
        records.cmd_experiments,
        "print a chapter's recording plan (tools/gpu/pack.py lines)",
    )
    s.add_argument(
        "chapter",
        help="ch01, 01, 1, 01_data_parallel or data_parallel (megalab chapters lists them)",
    )
    s.add_argument(
        "--gpus",
        type=usage.positive_int,
        default=4,
        help="the most GPUs the chapter scales to (default 4)",
    )
    s.add_argument(
        "--gpu",
        type=_gpu_model,
        default="H200",
        help="GPU model the plan records on (default H200)",
    )
    s.add_argument("--missing", action="store_true", help="only what results/ does not answer yet")
    s.add_argument(
        "--pending", action="store_true", help="the runs queued for the chapter's next version"
    )
    s.add_argument(
        "--host-gpus",
        type=usage.positive_int,
        default=None,
        help="GPUs of the host that runs the plan, if more than --gpus: timed runs then run alone",
    )

    s = cmd(
        "slurm",
        runs.cmd_slurm,
        "print an sbatch script that runs a configuration on several nodes",
        True,
    )
    s.add_argument("--nodes", type=usage.positive_int, required=True, help="nodes to run on")
    s.add_argument(
        "--gpus-per-node", type=usage.positive_int, help="GPUs per node (default gpus / nodes)"
    )
    s.add_argument("--partition", type=usage.safe_word, help="slurm partition (sbatch --partition)")
    s.add_argument(
        "--account", type=usage.safe_word, help="slurm account to charge (sbatch --account)"
    )
    s.add_argument(
        "--time",
        type=usage.slurm_time,
        default="01:00:00",
        help="time limit, HH:MM:SS or D-HH:MM:SS (default 01:00:00)",
    )
    s.add_argument(
        "--cpu",
        action="store_true",
        help="a cluster without GPUs: no GPU request, each node runs a dry run (nothing is "
        "trained)",
    )

    s = cmd(
        "prepare-data",
        runs.cmd_prepare_data,
        "tokenize a JSONL corpus into a Megatron indexed dataset",
    )
    s.add_argument("--input", required=True, help="JSONL file with a 'text' field per line")
    s.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    s.add_argument(
        "--tokenizer", default="byte", help="'byte' or a path to a Hugging Face tokenizer"
    )

    s = cmd(
        "reproduce",
        records.cmd_reproduce,
        "execute the book's notebooks (papermill) into _build/executed/",
    )
    from megalab.book.reproduce import page_names

    s.add_argument(
        "chapters",
        nargs="*",
        metavar="PAGE",
        help=f"pages to run (default: all): {', '.join(page_names()) or 'see megalab chapters'}; "
        "a chapter also as ch01, 01, 1 or data_parallel",
    )
    modes(s, default="cached")
    s.add_argument(
        "--gpus",
        type=usage.positive_int,
        help="GPUs available for live runs (default: all visible)",
    )
    s.add_argument(
        "--force", action="store_true", help="run again even when the executed copy is up to date"
    )
    from megalab.book import live

    live.add_args(s)

    s = cmd(
        "bench",
        records.cmd_bench,
        "microbenchmarks (matmul, HBM, NCCL); arguments go to megalab.jobs.bench",
    )
    s.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help="arguments of megalab.jobs.bench (megalab bench --help)",
    )
    return p


def _errors():
    """Errors a reader can cause, and the exit status each ends with (the message says what to
    change)."""
    from megalab.book.chapters import UnknownChapter
    from megalab.runs.config import InvalidLayout
    from megalab.data import BadCorpus
    from megalab.machine.hardware import UnknownGPU
    from megalab.machine.env import BadCommit
    from megalab.jobs.launch import BadRunsFolder, NotEnoughGPUs
    from megalab.jobs.slurm import InvalidSlurmOption
    from megalab.jobs.peer import PeerNotFound
    from megalab.book.reproduce import UnknownNotebook
    from megalab.jobs.running import NotRecorded
    from megalab.runs.shapes import UnknownPreset
    from megalab.records.store import ImportRefused, StoreUnusable
    from megalab.jobs.sweep import EmptyRange, ProbeFailed

    return (
        (InvalidLayout, EXIT_INVALID),
        (NotRecorded, EXIT_NOT_RECORDED),
        (ProbeFailed, EXIT_RUN_FAILED),
        (
            (
                NotEnoughGPUs,
                BadArgument,
                UnknownChapter,
                UnknownNotebook,
                UnknownGPU,
                UnknownPreset,
                ImportRefused,
                StoreUnusable,
                BadCommit,
                BadRunsFolder,
                InvalidSlurmOption,
                EmptyRange,
                BadCorpus,
                PeerNotFound,
            ),
            EXIT_INVALID,
        ),
    )


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, with a stray argument blamed on the subcommand it was given to."""
    ns, extra = parser.parse_known_args(argv)
    if extra:
        parser.commands[ns.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return ns


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `megalab` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # its flags belong to megalab.jobs.bench (argparse REMAINDER drops leading flags)
    if argv[:1] == ["bench"]:
        return _guarded("bench", records.cmd_bench, argparse.Namespace(args=argv[1:]))
    try:
        ns = _parse(build_parser(), argv)
    except SystemExit as e:  # argparse: --help, --version (0) or a usage error (2)
        return int(e.code or 0)
    return _guarded(ns.command, ns.func, ns)


def _guarded(command: str, func, ns) -> int:
    """Run a subcommand; a reader's mistake ends in one line (or one per problem) and its exit
    status."""
    try:
        with warnings.catch_warnings():  # a warning is one line too
            warnings.showwarning = lambda message, *_a, **_k: print(
                f"megalab {command}: warning: {message}", file=sys.stderr
            )
            return func(ns)
    except KeyboardInterrupt:
        print(f"megalab {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    # the reader stopped reading (`megalab experiments ch01 | head`): not an error of ours
    except BrokenPipeError:
        # Python's flush at exit must not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        status = next((code for kinds, code in _errors() if isinstance(exc, kinds)), None)
        if status is None:
            raise
        heading, problems = _HEADINGS.get(type(exc).__name__), str(exc).splitlines()
        if heading and len(problems) > 1:  # one line per problem under a heading
            print(f"megalab {command}: {heading}:", file=sys.stderr)
            for line in problems:
                print(f"  {line}", file=sys.stderr)
        elif heading:
            print(f"megalab {command}: {heading}: {str(exc).strip()}", file=sys.stderr)
        else:
            print(f"megalab {command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return status


_HEADINGS = {"InvalidLayout": "invalid configuration", "ImportRefused": "nothing imported"}
