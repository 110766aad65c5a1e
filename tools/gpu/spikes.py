"""Where do gpt-350m's one-step loss spikes come from? The trainer, with two probes added.

    torchrun --standalone --nproc_per_node=1 tools/gpu/spikes.py --preset gpt-350m --impl local \
        --mbs 4 --gbs 16 --iters 50 --lr 1e-4 > spikes.log

On the local spec at lr 1e-4 the single-GPU loss jumps by 2-5 nats at steps 10 and 28, bit for bit in
repeats, and every layout jumps at the same steps; the step after, the loss is back on its trend.
Two probes tell a batch-made spike (one odd sequence) from a weight-made one (every sequence):

    {"kind": "samples", "step", "microbatch", "mean": [per-sequence mean loss], "max": [per-sequence max]}
    {"kind": "update", "step", "rel": {group: |dW| / |W|}, "norm": {group: |W|}}

`update` is the optimizer step's relative change per parameter group (embeddings, norms, attention,
MLP, output layer), taken around `optimizer.step()`. Everything else is `python -m megalab.train`.
"""
import json
import sys

import torch

from megalab import train

GROUPS = ("word_embeddings", "position_embeddings", "layernorm", "linear_qkv", "linear_proj",
          "linear_fc1", "linear_fc2", "output_layer", "final_layernorm")


def group_of(name: str) -> str:
    found = [g for g in GROUPS if g in name]
    return found[-1] if found else "other"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


calls = {"n": 0}
loss_func = train.loss_func


def probing_loss_func(loss_mask, output_tensor):
    per_token = output_tensor.detach().float()  # [b, s]: the per-token losses GPTModel returns
    cfg = probing_loss_func.cfg
    step, k = divmod(calls["n"], cfg.num_microbatches)
    calls["n"] += 1
    emit({"kind": "samples", "step": step, "microbatch": k, "mean": per_token.mean(dim=1).tolist(),
          "max": per_token.max(dim=1).values.tolist()})
    return loss_func(loss_mask, output_tensor)


build_training = train.build_training


def probing_build_training(cfg, chunks, *args, **kw):
    model, optimizer, scheduler = build_training(cfg, chunks, *args, **kw)
    probing_loss_func.cfg = cfg
    params = [(group_of(n), p) for m in model for n, p in m.named_parameters()]
    step_fn, steps = optimizer.step, {"n": 0}

    def step():
        before = [p.detach().float().clone() for _, p in params]
        out = step_fn()
        rel, norm = {}, {}
        for (g, p), b in zip(params, before):
            rel[g] = rel.get(g, 0.0) + float((p.detach().float() - b).pow(2).sum())
            norm[g] = norm.get(g, 0.0) + float(b.pow(2).sum())
        emit({"kind": "update", "step": steps["n"],
              "rel": {g: (rel[g] / norm[g]) ** 0.5 if norm[g] else 0.0 for g in rel},
              "norm": {g: v ** 0.5 for g, v in norm.items()}})
        steps["n"] += 1
        return out

    optimizer.step = step
    return model, optimizer, scheduler


train.loss_func = probing_loss_func
train.build_training = probing_build_training

if __name__ == "__main__":
    train.main()
