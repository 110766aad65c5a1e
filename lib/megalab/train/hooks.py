"""The Probe protocol: the points of the loop where a measurement may act (megalab.train.probes).

configure(cfg, config)            before the model is built: may change Megatron's TransformerConfig
start(run)                        model and optimizer built, before step 0 (`run`: a Run)
before_step(step)                 after zero_grad, right before forward_backward_func (inside the
step's time) before_forward(model)             a micro-batch enters forward_step_func (model: the
chunk) after_forward(model, output)      the chunk returned (output: per-token losses on the last
stage) after_step(step)                  the step's line is out
stop()                            after the loop, on every rank
"""

from dataclasses import dataclass


@dataclass
class Run:
    """What a probe may read once the run is built."""

    cfg: object
    rank: int
    run_dir: str
    model: list  # this rank's model chunks (DDP-wrapped)
    optimizer: object
    config: object  # Megatron's TransformerConfig
    ddp_config: object


class Probe:
    """The hooks the loop calls; a probe overrides the ones it needs."""

    def configure(self, cfg, config) -> None: ...
    def start(self, run: Run) -> None: ...
    def before_step(self, step: int) -> None: ...
    def before_forward(self, model) -> None: ...
    def after_forward(self, model, output) -> None: ...
    def after_step(self, step: int) -> None: ...
    def stop(self) -> None: ...


class Probes(Probe):
    """Several probes as one: each hook calls theirs in order."""

    def __init__(self, probes: list):
        self.probes = list(probes)

    def configure(self, cfg, config) -> None:
        for p in self.probes:
            p.configure(cfg, config)

    def start(self, run: Run) -> None:
        for p in self.probes:
            p.start(run)

    def before_step(self, step: int) -> None:
        for p in self.probes:
            p.before_step(step)

    def before_forward(self, model) -> None:
        for p in self.probes:
            p.before_forward(model)

    def after_forward(self, model, output) -> None:
        for p in self.probes:
            p.after_forward(model, output)

    def after_step(self, step: int) -> None:
        for p in self.probes:
            p.after_step(step)

    def stop(self) -> None:
        for p in self.probes:
            p.stop()
