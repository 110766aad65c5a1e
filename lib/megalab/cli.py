"""The `megalab` command: the same verbs as the notebooks, from a shell.

    megalab plan --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16      predict
    megalab run  --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16 --mode live
    megalab run  ... --dry-run            build the model shards on CPU (gloo), print parameters per rank
    megalab results --label tp2 [--json] [--import other/runs.jsonl]
    megalab presets | chapters                 what the flags --preset and the chapter names can be
    megalab peer | env | fit | parity | experiments | slurm | prepare-data | reproduce | bench
    megalab --version

Exit codes: 0 done; 1 the run was recorded but did not finish ok (oom, failed, ...);
2 the configuration cannot run here (invalid layout, not enough GPUs) or bad arguments (one line
saying what to change, never a traceback); 3 no recorded result and no way to measure one (the
message gives the command); 130 interrupted (Ctrl-C); 141 the reader of the output went away (`| head`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from megalab import usage

EXIT_OK, EXIT_RUN_FAILED, EXIT_INVALID, EXIT_NOT_RECORDED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE, as a shell reports a writer whose reader went away
MODES = ("live", "cached", "auto")


class BadArgument(ValueError):
    """An argument names something that is not there, or two arguments disagree; the message says which."""


def _fmt(v) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10_000:
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _flat(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _table(d: dict) -> str:
    rows = _flat(d)
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {_fmt(v)}" for k, v in rows)


def _json(obj) -> str:
    return json.dumps(obj, indent=2, default=str)


def _config(ns):
    """The RunConfig the flags describe, validated first in every command and mode (InvalidLayout: exit 2)."""
    from megalab.flags import config_from_args
    return config_from_args(ns).validate()


# -- subcommands -----------------------------------------------------------------------------------
def cmd_plan(ns) -> int:
    from megalab import theory
    if ns.search:
        return _search(ns)
    if ns.top is not None:
        raise BadArgument(f"--top {ns.top} ranks the layouts of --search: add --search, or drop --top")
    cfg = _config(ns)
    plan = theory.plan(cfg, ns.gpu)
    print(_json(plan) if ns.json else f"{cfg.label}  (on {ns.gpu})\n{_table(plan)}")
    return EXIT_OK


def _search(ns) -> int:
    """plan --search: the model's layouts on --gpus, fastest first; a layout flag given pins its axis."""
    from megalab import search
    from megalab.flags import config_from_args
    cfg = config_from_args(ns)  # its layout is not validated: the search tries every layout
    pinned = {axis: getattr(ns, axis) for axis in search.AXES if getattr(ns, axis, None) is not None}
    found = search.search(cfg, cfg.gpus, gpu=ns.gpu, top=ns.top or 10, **pinned)
    if ns.json:
        print(_json({"summary": found.summary(), "candidates": found.frame().to_dict("records")}))
    else:
        print(found.table())
    return EXIT_OK


def cmd_run(ns) -> int:
    cfg = _config(ns)
    if ns.dry_run:
        return _dry_run(cfg, ns)
    from megalab.results import run
    launch_kw = {}
    _check_nodes(cfg, ns)
    if ns.nnodes > 1:
        launch_kw.update(nnodes=ns.nnodes, node_rank=ns.node_rank, rdzv_endpoint=ns.rdzv_endpoint)
    result = run(cfg, mode=ns.mode, tags=ns.tag, timeout_s=ns.timeout, progress=not ns.json, quiet=ns.json,
                 launch_kw=launch_kw, profile=ns.profile)  # other lookups skip profiled records
    return _show(result, ns)


def cmd_peer(ns) -> int:
    """The same configuration trained by Megatron-LM's pretrain_gpt.py (megalab.peer), recorded tagged "peer"."""
    from megalab import peer
    from megalab.results import run
    cfg = peer.peer_config(_config(ns)).validate()
    if ns.mode != "cached":
        peer.source_dir(ns.megatron_lm)  # no checkout: say how to get one before anything starts
    launch_kw = {"peer_dir": ns.megatron_lm} if ns.megatron_lm else None
    result = run(cfg, mode=ns.mode, tags=ns.tag, timeout_s=ns.timeout, progress=False, quiet=ns.json,
                 launch_kw=launch_kw)
    return _show(result, ns)


def _show(result, ns) -> int:
    """A run's record as a short table (or JSON); the exit status says whether it trained."""
    if ns.json:
        print(_json({**result.record, "source": result.source}))
    else:
        shown = {"status": result.status, "source": result.source, "summary": result.summary}
        if result.error:
            shown["error"] = result.error.get("message")
        shown["run_dir"] = result.record.get("run_dir")
        print(_table(shown))
    return EXIT_OK if result.ok else EXIT_RUN_FAILED


def _check_nodes(cfg, ns) -> None:
    if ns.node_rank >= ns.nnodes:
        raise BadArgument(f"--node-rank {ns.node_rank} with --nnodes {ns.nnodes}: ranks go from 0 to {ns.nnodes - 1}")
    if ns.nnodes > 1 and not ns.rdzv_endpoint:
        raise BadArgument(f"--nnodes {ns.nnodes} needs --rdzv-endpoint host:port of node 0")
    if cfg.gpus % ns.nnodes:
        raise BadArgument(f"gpus={cfg.gpus} does not split over --nnodes {ns.nnodes}: make gpus a multiple of it")


def _dry_run(cfg, ns) -> int:
    """The trainer with --dry-run on CPU (gloo): model shards built, parameters counted per rank."""
    from megalab.launch import launch
    outcome = launch(cfg, timeout_s=ns.timeout, progress=False, dry_run=True)
    parsed = outcome.parsed
    if ns.json:
        print(_json({"status": outcome.status, "error": outcome.error, "run_dir": str(outcome.run_dir),
                     "budget": parsed.budget, "params": parsed.params}))
    elif outcome.ok:
        print(f"{cfg.label}: dry run on CPU (gloo), {len(parsed.params)} rank(s)")
        print(f"{'rank':>4} {'tp':>3} {'pp':>3} {'ep':>3} {'params':>15}  init_checksum")
        for p in sorted(parsed.params, key=lambda p: p.get("rank", 0)):
            print(f"{p.get('rank', '?'):>4} {p.get('tp_rank', '?'):>3} {p.get('pp_rank', '?'):>3} "
                  f"{p.get('ep_rank', '?'):>3} {p.get('params', 0):>15,}  {p.get('init_checksum')}")
        if parsed.budget:
            b = parsed.budget
            print(f"layout {b.get('layout')}, {b.get('params_total', 0):,} parameters in total, "
                  f"predicted memory {_fmt(b.get('predicted_mem_gib'))} GiB per GPU")
        print(f"log: {outcome.run_dir / 'log.txt'}")
    else:
        print(f"dry run {outcome.status}: {(outcome.error or {}).get('message')}", file=sys.stderr)
        print((outcome.error or {}).get("detail") or "", file=sys.stderr)
        print(f"log: {outcome.run_dir / 'log.txt'}", file=sys.stderr)
    return EXIT_OK if outcome.ok else EXIT_RUN_FAILED


_RESULT_COLUMNS = ["label", "status", "step_time_s", "tflops_per_gpu", "mfu", "mem_reserved_peak_gib",
                   "loss_last", "gpu_name", "recorded_at", "key"]


def cmd_results(ns) -> int:
    from megalab import results
    if ns.store and not Path(ns.store).is_dir():
        raise BadArgument(f"--store {ns.store}: no such folder: pass a results folder (one holding runs.jsonl)")
    store = results.Store(ns.store)
    if ns.import_file:
        before = len(store.load()) + len(store.load("bench"))
        added = store.import_records(ns.import_file)
        print(f"imported {added} new record(s) into {store.root} ({before} were there before)")
        return EXIT_OK
    records = store.load(ns.kind, status=ns.status, key=ns.key,
                         label=(lambda s: ns.label in (s or "")) if ns.label else None)
    if ns.json:
        print(_json(records))
        return EXIT_OK
    if not records:
        print(f"no records in {store.path(ns.kind)} match")
        return EXIT_OK
    if ns.kind == "bench":
        for r in records:
            print(json.dumps(r))
        return EXIT_OK
    frame = results.to_frame(records)
    print(frame[[c for c in _RESULT_COLUMNS if c in frame.columns]].to_string(index=False))
    return EXIT_OK


def cmd_env(ns) -> int:
    from megalab.env import fingerprint, git_commit
    info = {**fingerprint(), "git_commit": git_commit()}
    print(_json(info) if ns.json else _table(info))
    return EXIT_OK


def cmd_fit(ns) -> int:
    from megalab.sweep import fit
    if ns.lo > ns.hi:
        raise BadArgument(f"--lo {ns.lo} is above --hi {ns.hi}: pass lo <= hi")
    out = fit(_config(ns), vary=ns.vary, lo=ns.lo, hi=ns.hi, mode=ns.mode, step=ns.step, timeout_s=ns.timeout,
              tags=ns.tag)
    print(out.table.to_string(index=False))
    print(f"largest {ns.vary} that fits: {out.largest}")
    return EXIT_OK


def cmd_parity(ns) -> int:
    from megalab.sweep import parity
    out = parity(_config(ns), mode=ns.mode, repeats=ns.repeats, timeout_s=ns.timeout, tags=ns.tag)
    print(out.series.to_string(index=False))
    print(repr(out))
    return EXIT_OK if out.passes else EXIT_RUN_FAILED


def cmd_experiments(ns) -> int:
    from megalab.recording import plan
    for line in plan(ns.chapter, gpus=ns.gpus, gpu=ns.gpu, missing_only=ns.missing, pending=ns.pending):
        print(line)
    return EXIT_OK


def cmd_presets(ns) -> int:
    from megalab import presets, theory
    rows = []
    for name in presets.names():
        cfg = presets.get(name)
        rows.append({"preset": name, "params": theory.params(cfg)["total"], "layers": cfg.layers,
                     "hidden": cfg.hidden, "heads": cfg.heads, "seq": cfg.seq, "experts": cfg.experts,
                     "source": presets.source(name)})
    if ns.json:
        print(_json(rows))
        return EXIT_OK
    print(f"{'preset':<14}{'params':>9}{'layers':>7}{'hidden':>7}{'heads':>6}{'seq':>6}{'experts':>8}  source")
    for r in rows:
        print(f"{r['preset']:<14}{_si(r['params']):>9}{r['layers']:>7}{r['hidden']:>7}{r['heads']:>6}{r['seq']:>6}"
              f"{r['experts']:>8}  {r['source']}")
    return EXIT_OK


def _si(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def cmd_chapters(ns) -> int:
    from megalab import chapters
    from megalab.reproduce import notebooks
    print("chapters (megalab experiments NAME, megalab reproduce NAME; also as 01, 1 or data_parallel):")
    for key, module in chapters.CHAPTERS.items():
        print(f"  {key}  {module.__name__.rsplit('.', 1)[1][2:]}")
    print("other pages (megalab reproduce NAME):")
    for page in notebooks():
        name = page.parent.name if page.parent.name != "book" else page.stem
        if name[:2] not in {key[2:] for key in chapters.CHAPTERS}:
            print(f"  {name}")
    return EXIT_OK


def cmd_slurm(ns) -> int:
    from megalab.launch import slurm_script
    print(slurm_script(_config(ns), ns.nodes, ns.gpus_per_node, partition=ns.partition, time=ns.time,
                       account=ns.account), end="")
    return EXIT_OK


def cmd_prepare_data(ns) -> int:
    from megalab.data import prepare_data
    out = prepare_data(ns.input, ns.output_prefix, tokenizer=ns.tokenizer)
    if out is not None:
        print(_json(out))
    return EXIT_OK


def cmd_reproduce(ns) -> int:
    from megalab.reproduce import reproduce
    return int(reproduce(ns.chapters or None, ns.mode, ns.gpus, ns.force) or 0)


def cmd_bench(ns) -> int:
    from megalab import bench
    try:
        return int(bench.main(ns.args) or 0)
    except SystemExit as e:  # its own parser: --help (0) or a usage error (2)
        return int(e.code or 0)


# -- parser ----------------------------------------------------------------------------------------
def _gpu_model(text: str) -> str:
    """A GPU model megalab.hardware knows ("H200", "NVIDIA H100 80GB HBM3"), as its table key."""
    from megalab.hardware import UnknownGPU, gpu_spec
    try:
        return gpu_spec(text).name
    except UnknownGPU as exc:
        raise argparse.ArgumentTypeError(str(exc).split("; ")[0]) from None


def _version() -> str:
    from megalab import __version__
    return f"megalab {__version__}"


def build_parser() -> argparse.ArgumentParser:
    from megalab.flags import add_config_args
    from megalab.launch import DEFAULT_TIMEOUT_S
    from megalab.metrics import STATUSES

    p = usage.Parser(prog="megalab", description="Train LLMs across GPUs with Megatron Core: "
                     "predict, run, record, compare.")
    p.add_argument("--version", action="version", version=_version(), help="print megalab's version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p.commands = sub.choices  # name -> its parser, to blame a stray argument on the right one

    def cmd(name, func, help, config=False):
        s = sub.add_parser(name, help=help, description=help)
        s.set_defaults(func=func)
        if config:
            add_config_args(s)
        return s

    def modes(s, default="auto"):
        s.add_argument("--mode", choices=MODES, default=default,
                       help=f"live runs on this machine's GPUs, cached reads results/, auto picks (default {default})")

    def timeout(s):
        s.add_argument("--timeout", type=usage.seconds, default=DEFAULT_TIMEOUT_S,
                       help=f"seconds before a run is stopped and recorded as a timeout (default {DEFAULT_TIMEOUT_S})")

    def tags(s, what):
        s.add_argument("--tag", action="append", default=[], help=f"tag stored with {what} (repeatable)")

    s = cmd("plan", cmd_plan, "predict parameters, memory, FLOPs, bubble and traffic of a configuration", True)
    s.add_argument("--gpu", type=_gpu_model, default="H200", help="GPU model to predict for (default H200)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--search", action="store_true",
                   help="rank every layout of the model on --gpus at --gbs and --seq by predicted step time "
                        "(layout flags given pin their axis)")
    s.add_argument("--top", type=usage.positive_int, help="with --search: how many layouts to print (default 10)")

    s = cmd("run", cmd_run, "run a configuration (live), or read its recorded result (cached)", True)
    modes(s)
    s.add_argument("--dry-run", action="store_true", help="build the model on CPU (gloo), print parameters per rank")
    timeout(s)
    tags(s, "the record")
    s.add_argument("--json", action="store_true", help="print the record as JSON")
    s.add_argument("--profile", action="store_true", help="torch.profiler trace of steps 5-7 into the run folder")
    s.add_argument("--nnodes", type=usage.positive_int, default=1,
                   help="nodes taking part (multi-node: run once per node)")
    s.add_argument("--node-rank", type=usage.count, default=0, help="this node's rank (node 0 records the result)")
    s.add_argument("--rdzv-endpoint", help="host:port of the rendezvous (node 0's address)")

    s = cmd("peer", cmd_peer, "run a configuration with Megatron-LM's own pretrain_gpt.py (the peer)", True)
    modes(s, default="live")
    timeout(s)
    tags(s, "the record")
    s.add_argument("--json", action="store_true", help="print the record as JSON")
    s.add_argument("--megatron-lm", metavar="PATH",
                   help="Megatron-LM checkout at tag core_v0.16.1 (default $MEGATRON_LM, else .peer/Megatron-LM)")

    s = cmd("results", cmd_results, "list recorded results, or import records from another store file")
    s.add_argument("--label", help="keep labels containing this text")
    s.add_argument("--status", choices=STATUSES, help="keep this status")
    s.add_argument("--key", help="keep this config key (16 hex digits, as `megalab plan` prints it)")
    s.add_argument("--kind", choices=("run", "bench"), default="run", help="training runs or microbenchmarks")
    s.add_argument("--store", help="results folder (default $MEGALAB_RESULTS or results/)")
    s.add_argument("--import", dest="import_file", metavar="FILE",
                   help="merge records from FILE (JSONL); a file with any bad line is refused whole")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd("env", cmd_env, "print this machine's fingerprint (GPUs, interconnect, versions)")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd("presets", cmd_presets, "list the model presets that --preset takes, with their sources")
    s.add_argument("--json", action="store_true", help="print JSON")

    cmd("chapters", cmd_chapters, "list the chapters (for experiments and reproduce) and the book's pages")

    s = cmd("fit", cmd_fit, "bisect for the largest mbs / seq / layers that fits in memory", True)
    s.add_argument("--vary", choices=("mbs", "seq", "layers"), default="mbs", help="what to grow (default mbs)")
    s.add_argument("--lo", type=usage.positive_int, default=1, help="smallest value to probe (default 1)")
    s.add_argument("--hi", type=usage.positive_int, default=64, help="largest value to probe (default 64)")
    s.add_argument("--step", type=usage.positive_int,
                   help="probe multiples of this (default: 1, 128 for seq, pp*vpp for layers)")
    modes(s)
    timeout(s)
    tags(s, "every probe")

    s = cmd("parity", cmd_parity, "compare the loss curve of a layout with the single-GPU run", True)
    modes(s)
    s.add_argument("--repeats", type=usage.positive_int, default=2,
                   help="single-GPU repeats that measure run-to-run spread (default 2)")
    timeout(s)
    tags(s, "every run")

    s = cmd("experiments", cmd_experiments, "print a chapter's recording plan (tools/gpu/pack.py lines)")
    s.add_argument("chapter", help="ch01, 01, 1, 01_data_parallel or data_parallel (megalab chapters lists them)")
    s.add_argument("--gpus", type=usage.positive_int, default=4,
                   help="the most GPUs the chapter scales to (default 4)")
    s.add_argument("--gpu", type=_gpu_model, default="H200", help="GPU model the plan records on (default H200)")
    s.add_argument("--missing", action="store_true", help="only what results/ does not answer yet")
    s.add_argument("--pending", action="store_true", help="the runs queued for the chapter's next version")

    s = cmd("slurm", cmd_slurm, "print an sbatch script that runs a configuration on several nodes", True)
    s.add_argument("--nodes", type=usage.positive_int, required=True, help="nodes to run on")
    s.add_argument("--gpus-per-node", type=usage.positive_int, help="GPUs per node (default gpus / nodes)")
    s.add_argument("--partition", type=usage.safe_word, help="slurm partition (sbatch --partition)")
    s.add_argument("--account", type=usage.safe_word, help="slurm account to charge (sbatch --account)")
    s.add_argument("--time", type=usage.safe_word, default="01:00:00",
                   help="time limit, HH:MM:SS or D-HH:MM:SS (default 01:00:00)")

    s = cmd("prepare-data", cmd_prepare_data, "tokenize a JSONL corpus into a Megatron indexed dataset")
    s.add_argument("--input", required=True, help="JSONL file with a 'text' field per line")
    s.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    s.add_argument("--tokenizer", default="byte", help="'byte' or a path to a Hugging Face tokenizer")

    s = cmd("reproduce", cmd_reproduce, "execute the book's notebooks (papermill) into _build/executed/")
    from megalab.reproduce import page_names
    s.add_argument("chapters", nargs="*", metavar="PAGE",
                   help=f"pages to run (default: all): {', '.join(page_names()) or 'see megalab chapters'}; "
                        "a chapter also as ch01, 01, 1 or data_parallel")
    modes(s, default="cached")
    s.add_argument("--gpus", type=usage.positive_int, help="GPUs available for live runs (default: all visible)")
    s.add_argument("--force", action="store_true", help="run again even when the executed copy is up to date")

    s = cmd("bench", cmd_bench, "microbenchmarks (matmul, HBM, NCCL); arguments go to megalab.bench")
    s.add_argument("args", nargs=argparse.REMAINDER, help="arguments of megalab.bench (megalab bench --help)")
    return p


def _errors():
    """Errors a reader can cause, and the exit status each ends with (the message says what to change)."""
    from megalab.chapters import UnknownChapter
    from megalab.config import InvalidLayout
    from megalab.data import BadCorpus
    from megalab.hardware import UnknownGPU
    from megalab.launch import InvalidSlurmOption, NotEnoughGPUs
    from megalab.peer import PeerNotFound
    from megalab.reproduce import UnknownNotebook
    from megalab.results import NotRecorded
    from megalab.shapes import UnknownPreset
    from megalab.store import ImportRefused
    from megalab.sweep import EmptyRange, ProbeFailed
    return ((InvalidLayout, EXIT_INVALID), (NotRecorded, EXIT_NOT_RECORDED), (ProbeFailed, EXIT_RUN_FAILED),
            ((NotEnoughGPUs, BadArgument, UnknownChapter, UnknownNotebook, UnknownGPU, UnknownPreset,
              ImportRefused, InvalidSlurmOption, EmptyRange, BadCorpus, PeerNotFound), EXIT_INVALID))


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, with a stray argument blamed on the subcommand it was given to."""
    ns, extra = parser.parse_known_args(argv)
    if extra:
        parser.commands[ns.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return ns


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `megalab` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its flags belong to megalab.bench (argparse REMAINDER drops leading flags)
        return _guarded("bench", cmd_bench, argparse.Namespace(args=argv[1:]))
    try:
        ns = _parse(build_parser(), argv)
    except SystemExit as e:  # argparse: --help, --version (0) or a usage error (2)
        return int(e.code or 0)
    return _guarded(ns.command, ns.func, ns)


def _guarded(command: str, func, ns) -> int:
    """Run a subcommand; a reader's mistake ends in one line (or one per problem) and its exit status."""
    try:
        with warnings.catch_warnings():  # a warning is one line too
            warnings.showwarning = lambda message, *_a, **_k: print(f"megalab {command}: warning: {message}",
                                                                      file=sys.stderr)
            return func(ns)
    except KeyboardInterrupt:
        print(f"megalab {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader stopped reading (`megalab experiments ch01 | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit must not fail again
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        status = next((code for kinds, code in _errors() if isinstance(exc, kinds)), None)
        if status is None:
            raise
        heading = _HEADINGS.get(type(exc).__name__)
        if heading:  # one line per problem under a heading
            print(f"megalab {command}: {heading}:", file=sys.stderr)
            for line in str(exc).splitlines():
                print(f"  {line}", file=sys.stderr)
        else:
            print(f"megalab {command}: {' '.join(str(exc).split())}", file=sys.stderr)
        return status


_HEADINGS = {"InvalidLayout": "invalid configuration", "ImportRefused": "nothing imported"}
