"""Where do gpt-350m's one-step loss spikes come from? The trainer, with one probe added.

    torchrun --standalone --nproc_per_node=1 tools/gpu/spikes.py --preset gpt-350m --impl local \
        --mbs 4 --gbs 16 --iters 50 --lr 1e-4 > spikes.log

On the local spec at lr 1e-4 the single-GPU loss jumps by 2-5 nats at steps 10 and 28, bit for bit
in repeats, and every layout jumps at the same steps; the step after, the loss is back on its trend.
The probe tells a batch-made spike (one odd sequence) from a weight-made one (every sequence):

    {"kind": "samples", "step", "microbatch", "mean": [per-sequence mean loss],
     "max": [per-sequence max]}
    {"kind": "update", "step", "rel": {group: |dW| / |W|}, "norm": {group: |W|}}

`update` is the optimizer step's relative change per parameter group (embeddings, norms, attention,
MLP, output layer): weights read before the step's forward pass and after its line. Everything else
is `python -m megalab.train`.
"""

import sys

from megalab.train import loop
from megalab.train.log import emit
from megalab.train.probes import Probe

GROUPS = (
    "word_embeddings",
    "position_embeddings",
    "layernorm",
    "linear_qkv",
    "linear_proj",
    "linear_fc1",
    "linear_fc2",
    "output_layer",
    "final_layernorm",
)


def group_of(name: str) -> str:
    found = [g for g in GROUPS if g in name]
    return found[-1] if found else "other"


class Spikes(Probe):
    """Per-sequence losses of every micro-batch, and the optimizer step's relative change per
    group."""

    def start(self, run):
        from megatron.core.utils import get_attr_wrapped_model

        self.cfg, self.calls, self.before = run.cfg, 0, None
        self.last = {id(m) for m in run.model if get_attr_wrapped_model(m, "post_process")}
        self.params = [(group_of(n), p) for m in run.model for n, p in m.named_parameters()]

    def before_step(self, step):
        self.before = [p.detach().float().clone() for _, p in self.params]

    def after_forward(self, model, output):
        # the per-token losses [b, s] GPTModel returns on the last stage
        if id(model) not in self.last:
            return
        per_token = output.detach().float()
        step, k = divmod(self.calls, self.cfg.num_microbatches)
        self.calls += 1
        emit(
            {
                "kind": "samples",
                "step": step,
                "microbatch": k,
                "mean": per_token.mean(dim=1).tolist(),
                "max": per_token.max(dim=1).values.tolist(),
            }
        )

    def after_step(self, step):
        rel, norm = {}, {}
        for (g, p), b in zip(self.params, self.before):
            rel[g] = rel.get(g, 0.0) + float((p.detach().float() - b).pow(2).sum())
            norm[g] = norm.get(g, 0.0) + float(b.pow(2).sum())
        emit(
            {
                "kind": "update",
                "step": step,
                "rel": {g: (rel[g] / norm[g]) ** 0.5 if norm[g] else 0.0 for g in rel},
                "norm": {g: v**0.5 for g, v in norm.items()},
            }
        )


if __name__ == "__main__":
    loop.main(sys.argv[1:], probes=[Spikes()])
