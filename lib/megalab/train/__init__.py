"""The trainer: `python -m megalab.train ...` or `torchrun ... -m megalab.train ...` (flags:
loop.py).

    loop         the run, read top to bottom: Megatron's building blocks and a ~20-line loop
    batch        several runs in one torchrun launch (`-m megalab.train.batch runs.jsonl`)
    teardown     between two runs of one process: Megatron's and TE's state reset, memory freed
    wiring       RunConfig -> Megatron Core's configs, DDP, optimizer (the one long-name mapping)
    log          the metrics lines (budget, step, summary) and the collectives behind them
    hooks        the Probe protocol: where in the loop a measurement may act
    probes       optional measurements hooked into the loop; stage_clock is one of them
    workarounds  upstream bugs patched by one call, each with its versions and when to delete it
    imports      less to import before the first step (JAX hidden, torch.compile lazy)
    weights      the layout-invariant init
    parent       each rank dies with its torchrun (the parent-death signal)
    args, dry_run  the command line; --dry-run's report on CPU

Importing the package starts neither torch nor CUDA.
"""
