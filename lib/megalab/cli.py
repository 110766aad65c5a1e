"""The `megalab` command: the same verbs as the notebooks, from a shell.

    megalab plan --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16      predict
    megalab run  --preset gpt-1.2b --gpus 4 --tp 2 --pp 2 --mbs 4 --gbs 16 --mode live
    megalab run  ... --dry-run            build the model shards on CPU (gloo), print parameters per rank
    megalab results --label tp2 [--json] [--import other/runs.jsonl]
    megalab env | fit | parity | slurm | prepare-data | reproduce | bench

Exit codes: 0 done; 1 the run was recorded but did not finish ok (oom, failed, ...);
2 the configuration cannot run here (invalid layout, not enough GPUs) or bad arguments;
3 no recorded result and no way to measure one (the message gives the command).
"""

from __future__ import annotations

import argparse
import json
import sys

EXIT_OK, EXIT_RUN_FAILED, EXIT_INVALID, EXIT_NOT_RECORDED = 0, 1, 2, 3
MODES = ("live", "cached", "auto")


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
    from megalab.flags import config_from_args
    return config_from_args(ns)


# -- subcommands -----------------------------------------------------------------------------------
def cmd_plan(ns) -> int:
    from megalab import theory
    cfg = _config(ns).validate()
    plan = theory.plan(cfg, ns.gpu)
    print(_json(plan) if ns.json else f"{cfg.label}  (on {ns.gpu})\n{_table(plan)}")
    return EXIT_OK


def cmd_run(ns) -> int:
    cfg = _config(ns)
    if ns.dry_run:
        return _dry_run(cfg, ns)
    from megalab.results import run
    launch_kw = {}
    if ns.nnodes > 1:
        launch_kw.update(nnodes=ns.nnodes, node_rank=ns.node_rank, rdzv_endpoint=ns.rdzv_endpoint)
    result = run(cfg, mode=ns.mode, tags=ns.tag, timeout_s=ns.timeout, progress=not ns.json, quiet=ns.json,
                 launch_kw=launch_kw, profile=ns.profile)  # other lookups skip profiled records
    if ns.json:
        print(_json({**result.record, "source": result.source}))
    else:
        shown = {"status": result.status, "source": result.source, "summary": result.summary}
        if result.error:
            shown["error"] = result.error.get("message")
        shown["run_dir"] = result.record.get("run_dir")
        print(_table(shown))
    return EXIT_OK if result.ok else EXIT_RUN_FAILED


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
    return int(bench.main(ns.args) or 0)


# -- parser ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from megalab.flags import add_config_args
    from megalab.launch import DEFAULT_TIMEOUT_S

    p = argparse.ArgumentParser(prog="megalab", description="Train LLMs across GPUs with Megatron Core: "
                                "predict, run, record, compare.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name, func, help, config=False):
        s = sub.add_parser(name, help=help, description=help)
        s.set_defaults(func=func)
        if config:
            add_config_args(s)
        return s

    s = cmd("plan", cmd_plan, "predict parameters, memory, FLOPs, bubble and traffic of a configuration", True)
    s.add_argument("--gpu", default="H200", help="GPU model to predict for (default H200)")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd("run", cmd_run, "run a configuration (live), or read its recorded result (cached)", True)
    s.add_argument("--mode", choices=MODES, default="auto", help="live | cached | auto (default)")
    s.add_argument("--dry-run", action="store_true", help="build the model on CPU (gloo), print parameters per rank")
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds before the run is stopped")
    s.add_argument("--tag", action="append", default=[], help="tag stored with the record (repeatable)")
    s.add_argument("--json", action="store_true", help="print the record as JSON")
    s.add_argument("--profile", action="store_true", help="torch.profiler trace of steps 5-7 into the run folder")
    s.add_argument("--nnodes", type=int, default=1, help="nodes taking part (multi-node: run once per node)")
    s.add_argument("--node-rank", type=int, default=0, help="this node's rank (node 0 records the result)")
    s.add_argument("--rdzv-endpoint", help="host:port of the rendezvous (node 0's address)")

    s = cmd("results", cmd_results, "list recorded results, or import records from another store file")
    s.add_argument("--label", help="keep labels containing this text")
    s.add_argument("--status", help="keep this status (ok, oom, nccl_error, timeout, failed, invalid)")
    s.add_argument("--key", help="keep this config key")
    s.add_argument("--kind", choices=("run", "bench"), default="run", help="training runs or microbenchmarks")
    s.add_argument("--store", help="results folder (default $MEGALAB_RESULTS or results/)")
    s.add_argument("--import", dest="import_file", metavar="FILE", help="merge records from FILE (JSONL)")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd("env", cmd_env, "print this machine's fingerprint (GPUs, interconnect, versions)")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = cmd("fit", cmd_fit, "bisect for the largest mbs / seq / layers that fits in memory", True)
    s.add_argument("--vary", choices=("mbs", "seq", "layers"), default="mbs")
    s.add_argument("--lo", type=int, default=1)
    s.add_argument("--hi", type=int, default=64)
    s.add_argument("--step", type=int, help="probe multiples of this (default: 1, 128 for seq, pp*vpp for layers)")
    s.add_argument("--mode", choices=MODES, default="auto")
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    s.add_argument("--tag", action="append", default=[], help="tag stored with every probe (repeatable)")

    s = cmd("parity", cmd_parity, "compare the loss curve of a layout with the single-GPU run", True)
    s.add_argument("--mode", choices=MODES, default="auto")
    s.add_argument("--repeats", type=int, default=2, help="single-GPU repeats that measure run-to-run spread")
    s.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    s.add_argument("--tag", action="append", default=[], help="tag stored with every run (repeatable)")

    s = cmd("experiments", cmd_experiments, "print a chapter's recording plan (tools/gpu/pack.py lines)")
    s.add_argument("chapter", help="ch01, ch02, ...")
    s.add_argument("--gpus", type=int, default=4, help="the most GPUs the chapter scales to (default 4)")
    s.add_argument("--gpu", default="H200", help="GPU model the plan records on (default H200)")
    s.add_argument("--missing", action="store_true", help="only what results/ does not answer yet")
    s.add_argument("--pending", action="store_true", help="the runs queued for the chapter's next version")

    s = cmd("slurm", cmd_slurm, "print an sbatch script that runs a configuration on several nodes", True)
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--gpus-per-node", type=int)
    s.add_argument("--partition")
    s.add_argument("--account")
    s.add_argument("--time", default="01:00:00")

    s = cmd("prepare-data", cmd_prepare_data, "tokenize a JSONL corpus into a Megatron indexed dataset")
    s.add_argument("--input", required=True, help="JSONL file with a 'text' field per line")
    s.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    s.add_argument("--tokenizer", default="byte", help="'byte' or a path to a Hugging Face tokenizer")

    s = cmd("reproduce", cmd_reproduce, "re-run the book's chapters")
    s.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    s.add_argument("--mode", choices=MODES, default="cached", help="cached (default) | auto | live")
    s.add_argument("--gpus", type=int, help="GPUs available for live runs")
    s.add_argument("--force", action="store_true", help="re-run even if recorded")

    s = cmd("bench", cmd_bench, "microbenchmarks (matmul, HBM, NCCL); arguments go to megalab.bench")
    s.add_argument("args", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `megalab` console script; returns the exit code."""
    from megalab.config import InvalidLayout
    from megalab.launch import NotEnoughGPUs
    from megalab.results import NotRecorded
    from megalab.sweep import ProbeFailed

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its flags belong to megalab.bench (argparse REMAINDER drops leading flags)
        return cmd_bench(argparse.Namespace(args=argv[1:]))
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        return ns.func(ns)
    except InvalidLayout as e:
        print(f"megalab {ns.command}: invalid configuration:", file=sys.stderr)
        for line in str(e).splitlines():
            print(f"  {line}", file=sys.stderr)
        return EXIT_INVALID
    except NotEnoughGPUs as e:
        print(f"megalab {ns.command}: {e}", file=sys.stderr)
        return EXIT_INVALID
    except NotRecorded as e:
        print(f"megalab {ns.command}: {e}", file=sys.stderr)
        return EXIT_NOT_RECORDED
    except ProbeFailed as e:
        print(f"megalab {ns.command}: {e}", file=sys.stderr)
        return EXIT_RUN_FAILED
