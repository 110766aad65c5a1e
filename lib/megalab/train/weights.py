"""Layout-invariant initialisation: every layout starts from the same weights.

Megatron draws each rank's weights from a generator seeded per (pp, tp) rank, so two layouts start
from different weights and their loss curves cannot be compared step by step.
`init_layout_invariant` re-draws every parameter from a generator seeded by (seed, global parameter
name) - layer and expert numbers made global - generates the full unsharded tensor and keeps this
rank's slice. With data that depends only on the global sample number (megalab.data) and a
vocabulary not padded per tp, every layout trains the same model on the same batches, up to
floating-point reduction order.
"""

import hashlib
import math
import re

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_LOCAL_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")  # SequentialMLP (local spec)
_GROUPED_EXPERT = re.compile(r"(\.linear_fc[12]\.(?:weight|bias))(\d+)$")  # TEGroupedMLP: weight0..
_COLUMN = re.compile(
    r"(linear_qkv|linear_fc1)\.weight\d*$|word_embeddings\.weight$|^output_layer\.weight$"
)
_ROW = re.compile(r"(linear_proj|linear_fc2)\.weight\d*$")


def global_name(name: str, chunk, cfg, ep_rank: int, tied: bool) -> str:
    """Parameter name as in the unsharded, unpipelined model: global layer and expert numbers."""
    m = _LAYER.match(name)
    if m:  # TransformerLayer.layer_number is global (pipeline and virtual offsets) and 1-based
        name = (
            f"decoder.layers.{chunk.decoder.layers[int(m.group(1))].layer_number - 1}."
            + name[m.end() :]
        )
    off = ep_rank * (cfg.experts // cfg.ep)
    name = _LOCAL_EXPERT.sub(lambda e: f".local_experts.{int(e.group(1)) + off}.", name)
    name = _GROUPED_EXPERT.sub(lambda e: f"{e.group(1)}{int(e.group(2)) + off}", name)
    return "embedding.word_embeddings.weight" if tied and name == "output_layer.weight" else name


def init_layout_invariant(chunks, cfg, device) -> float:
    """Re-draw every parameter from (seed, global name); returns this rank's share of a checksum.

    Weights ~ N(0, 0.02); linear_proj and linear_fc2 ~ N(0, 0.02/sqrt(2L)) (Megatron's
    scaled_init_method_normal); norms 1; biases 0. The full tensor is drawn, then this rank's
    slice kept: dim 0 for column-parallel (QKV, fc1, embeddings, output layer), dim 1 for
    row-parallel (proj, fc2), over tp (etp for experts). SwiGLU's fc1 is [gate; up] at tp=1 and
    [gate_r; up_r] on tp rank r. Megatron's QKV is grouped per query group, so a contiguous row
    slice is what each rank holds (attention.py). The checksum sums each unique weight once
    (replicas on tp/dp/cp ranks and the tied output copy are skipped): its sum over ranks is the
    same for every layout.
    """
    import torch
    from megatron.core import parallel_state as ps

    tp, tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    etp, etp_rank = ps.get_expert_tensor_parallel_world_size(), ps.get_expert_tensor_parallel_rank()
    ep_rank = ps.get_expert_model_parallel_rank()
    replica = ps.get_data_parallel_rank(with_context_parallel=True) == 0
    expert_replica = ps.get_expert_data_parallel_rank() == 0
    std, out_std = 0.02, 0.02 / math.sqrt(2 * cfg.layers)
    checksum = 0.0
    for chunk in chunks:
        for name, p in chunk.named_parameters():
            gname = global_name(name, chunk, cfg, ep_rank, cfg.tied_embeddings)
            expert = ".experts." in name
            t, r = (etp, etp_rank) if expert else (tp, tp_rank)
            dim = 0 if _COLUMN.search(name) else 1 if _ROW.search(name) else None
            with torch.no_grad():
                if re.search(r"bias\d*$", name):
                    p.zero_()
                elif p.dim() == 1 and "norm" in name:
                    p.fill_(1.0)
                elif p.dim() == 2:
                    full_shape = list(p.shape)
                    if dim is not None:
                        full_shape[dim] *= t
                    seed = int.from_bytes(
                        hashlib.sha256(f"{cfg.seed}/{gname}".encode()).digest()[:8], "little"
                    )
                    g = torch.Generator(device=device).manual_seed(seed & (2**63 - 1))
                    full = torch.randn(full_shape, generator=g, device=device, dtype=torch.float32)
                    full *= out_std if _ROW.search(name) else std
                    if dim is None:
                        shard = full
                    elif "linear_fc1.weight" in name and cfg.activation == "swiglu":
                        gate, up = full.chunk(2, dim=0)
                        shard = torch.cat([gate.chunk(t, dim=0)[r], up.chunk(t, dim=0)[r]], dim=0)
                    else:
                        shard = full.chunk(t, dim=dim)[r]
                    if tuple(shard.shape) != tuple(p.shape):
                        raise RuntimeError(
                            f"layout-invariant init: {name} holds {tuple(p.shape)} but the "
                            f"slice of {gname} {tuple(full_shape)} is {tuple(shard.shape)}"
                        )
                    p.copy_(shard)
                else:
                    raise RuntimeError(
                        f"layout-invariant init has no rule for {name} {tuple(p.shape)}"
                    )
            unique = (expert_replica if expert else replica) and (dim is not None or r == 0)
            if (
                p.dim() == 2
                and unique
                and not (name == "output_layer.weight" and cfg.tied_embeddings)
            ):
                checksum += float(p.detach().double().sum())
    return checksum
