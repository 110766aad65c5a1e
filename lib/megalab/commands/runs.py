"""`megalab run`, `peer`, `fit`, `parity`, `slurm` and `prepare-data`: training a configuration, on
this machine's GPUs (or on CPU for --dry-run), with Megatron-LM's own script, or on a cluster's
nodes."""

from __future__ import annotations

import sys

from megalab.commands.shared import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    BadArgument,
    validated_config,
    fmt,
    to_json,
    table,
)


def cmd_run(ns) -> int:
    cfg = validated_config(ns)
    _check_nodes(cfg, ns)
    if ns.dry_run:
        return _dry_run(cfg, ns)
    from megalab.jobs.running import run

    launch_kw = {}
    if ns.nnodes > 1:
        launch_kw.update(nnodes=ns.nnodes, node_rank=ns.node_rank, rdzv_endpoint=ns.rdzv_endpoint)
    result = run(
        cfg,
        mode=ns.mode,
        tags=ns.tag,
        timeout_s=ns.timeout,
        progress=not ns.json,
        quiet=ns.json,
        launch_kw=launch_kw,
        profile=ns.profile,
    )  # other lookups skip profiled records
    return _show(result, ns)


def cmd_peer(ns) -> int:
    """The same configuration trained by Megatron-LM's pretrain_gpt.py (megalab.jobs.peer), recorded
    tagged "peer"."""
    from megalab.jobs import peer
    from megalab.jobs.running import run

    cfg = peer.peer_config(validated_config(ns)).validate()
    if ns.mode != "cached":
        peer.source_dir(ns.megatron_lm)  # no checkout: say how to get one before anything starts
    launch_kw = {"peer_dir": ns.megatron_lm} if ns.megatron_lm else None
    result = run(
        cfg,
        mode=ns.mode,
        tags=ns.tag,
        timeout_s=ns.timeout,
        progress=False,
        quiet=ns.json,
        launch_kw=launch_kw,
        profile=ns.profile,
    )
    return _show(result, ns)


def _show(result, ns) -> int:
    """A run's record as a short table (or JSON); the exit status says whether it trained."""
    if ns.json:
        print(to_json({**result.record, "source": result.source}))
    else:
        shown = {"status": result.status, "source": result.source, "summary": result.summary}
        if result.error:
            shown["error"] = result.error.get("message")
        shown["run_dir"] = result.record.get("run_dir")
        print(table(shown))
    return EXIT_OK if result.ok else EXIT_RUN_FAILED


def _check_nodes(cfg, ns) -> None:
    if ns.node_rank >= ns.nnodes:
        raise BadArgument(
            f"--node-rank {ns.node_rank} with --nnodes {ns.nnodes}: ranks go from 0 to "
            f"{ns.nnodes - 1}"
        )
    if ns.nnodes > 1 and not ns.rdzv_endpoint:
        raise BadArgument(f"--nnodes {ns.nnodes} needs --rdzv-endpoint host:port of node 0")
    if cfg.gpus % ns.nnodes:
        raise BadArgument(
            f"gpus={cfg.gpus} does not split over --nnodes {ns.nnodes}: make gpus a multiple of it"
        )


def _dry_run(cfg, ns) -> int:
    """The trainer with --dry-run on CPU (gloo): model shards built, parameters counted per rank.
    Over several nodes, node 0 keeps the record a live run would append (every node's machine under
    "nodes") in a store of its own, <run folder>/results: it measured nothing, so it never joins the
    book's store."""
    from megalab.jobs.launch import launch

    nodes = (
        dict(nnodes=ns.nnodes, node_rank=ns.node_rank, rdzv_endpoint=ns.rdzv_endpoint)
        if ns.nnodes > 1
        else {}
    )
    outcome = launch(cfg, timeout_s=ns.timeout, progress=False, dry_run=True, **nodes)
    parsed = outcome.parsed
    kept = _keep_dry_record(cfg, outcome, ns) if nodes and ns.node_rank == 0 else None
    if ns.json:
        print(
            to_json(
                {
                    "status": outcome.status,
                    "error": outcome.error,
                    "run_dir": str(outcome.run_dir),
                    "budget": parsed.budget,
                    "params": parsed.params,
                    "nodes": parsed.nodes,
                    "record": str(kept) if kept else None,
                }
            )
        )
    elif outcome.ok:
        print(f"{cfg.label}: dry run on CPU (gloo), {len(parsed.params)} rank(s)")
        print(f"{'rank':>4} {'tp':>3} {'pp':>3} {'ep':>3} {'params':>15}  init_checksum")
        for p in sorted(parsed.params, key=lambda p: p.get("rank", 0)):
            print(
                f"{p.get('rank', '?'):>4} {p.get('tp_rank', '?'):>3} {p.get('pp_rank', '?'):>3} "
                f"{p.get('ep_rank', '?'):>3} {p.get('params', 0):>15,}  {p.get('init_checksum')}"
            )
        if parsed.budget:
            b = parsed.budget
            print(
                f"layout {b.get('layout')}, {b.get('params_total', 0):,} parameters in total, "
                f"predicted memory {fmt(b.get('predicted_mem_gib'))} GiB per GPU"
            )
        print(f"log: {outcome.run_dir / 'log.txt'}")
        if kept:
            print(f"record ({len(parsed.nodes)} nodes): {kept}")
    else:
        print(f"dry run {outcome.status}: {(outcome.error or {}).get('message')}", file=sys.stderr)
        print((outcome.error or {}).get("detail") or "", file=sys.stderr)
        print(f"log: {outcome.run_dir / 'log.txt'}", file=sys.stderr)
    return EXIT_OK if outcome.ok else EXIT_RUN_FAILED


def _keep_dry_record(cfg, outcome, ns):
    """Node 0's record of a dry run over several nodes, appended to <run folder>/results; returns
    that file."""
    from megalab.machine.env import git_commit
    from megalab.records.schema import make_record
    from megalab.records.store import Store

    store = Store(outcome.run_dir / "results")
    store.append(make_record(cfg, outcome, git_commit=git_commit(), tags=["dry-run", *ns.tag]))
    return store.path()


def cmd_fit(ns) -> int:
    from megalab.jobs.sweep import fit

    if ns.lo > ns.hi:
        raise BadArgument(f"--lo {ns.lo} is above --hi {ns.hi}: pass lo <= hi")
    out = fit(
        validated_config(ns),
        vary=ns.vary,
        lo=ns.lo,
        hi=ns.hi,
        mode=ns.mode,
        step=ns.step,
        timeout_s=ns.timeout,
        tags=ns.tag,
    )
    print(out.table.to_string(index=False))
    print(f"largest {ns.vary} that fits: {out.largest}")
    return EXIT_OK


def cmd_parity(ns) -> int:
    from megalab.jobs.sweep import parity

    out = parity(
        validated_config(ns), mode=ns.mode, repeats=ns.repeats, timeout_s=ns.timeout, tags=ns.tag
    )
    print(out.series.to_string(index=False))
    print(repr(out))
    return EXIT_OK if out.passes else EXIT_RUN_FAILED


def cmd_slurm(ns) -> int:
    from megalab.jobs import slurm

    print(
        slurm.script(
            validated_config(ns),
            ns.nodes,
            ns.gpus_per_node,
            partition=ns.partition,
            time=ns.time,
            account=ns.account,
            cpu=ns.cpu,
        ),
        end="",
    )
    return EXIT_OK


def cmd_prepare_data(ns) -> int:
    from megalab.data import prepare_data

    out = prepare_data(ns.input, ns.output_prefix, tokenizer=ns.tokenizer)
    if out is not None:
        print(to_json(out))
    return EXIT_OK
