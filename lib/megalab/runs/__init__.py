"""Runs: what a run is (jobs/ starts it).

axes          the parallel axes: short name, Megatron's names, group order, what each must divide
config        RunConfig, one run in one frozen dataclass; layout_rules, why Megatron would refuse it
shapes        named model shapes from the papers; presets turns one into a RunConfig
flags         RunConfig <-> command-line flags
"""
