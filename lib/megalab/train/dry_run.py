"""The trainer's --dry-run (gloo on CPU): count each rank's parameters, check the layout-invariant
init (small models), print the budget, stop. Megatron Core cannot run a forward pass on CPU."""

from megalab import theory
from megalab.train import log
from megalab.train.weights import init_layout_invariant


def report(cfg, chunks, device, per_rank: list, rank: int) -> None:
    """Count (and, for small models, run the layout-invariant init on CPU), then stop."""
    from megatron.core import parallel_state as ps

    small = theory.params(cfg)["total"] <= 50_000_000
    checksum = (
        init_layout_invariant(chunks, cfg, device)
        if cfg.init == "layout_invariant" and small
        else None
    )
    log.emit(
        {
            "kind": "params",
            "rank": rank,
            "tp_rank": ps.get_tensor_model_parallel_rank(),
            "pp_rank": ps.get_pipeline_model_parallel_rank(),
            "ep_rank": ps.get_expert_model_parallel_rank(),
            "params": sum(p.numel() for c in chunks for p in c.parameters()),
            "init_checksum": checksum,
        }
    )
    if rank == 0:
        log.emit(log.budget(cfg, per_rank))
