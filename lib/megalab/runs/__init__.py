"""Runs: what a run is and how it starts.

    axes          the parallel axes: short name, Megatron's names, group order, what each must divide
    config        RunConfig, one run in one frozen dataclass; layout_rules, why Megatron would refuse it
    shapes        named model shapes from the papers; presets turns one into a RunConfig
    flags         RunConfig <-> command-line flags
    launch        start the trainer under torchrun and keep what it printed
    peer          the same RunConfig given to Megatron-LM's own pretrain_gpt.py
    running       run(cfg, mode): live, from the records, or the reference record
    sweep         questions of several runs: the largest batch that fits, loss parity
"""
