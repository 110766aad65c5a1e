"""Between two runs of one process (megalab.train.batch): release what a run leaves behind, so the
next run starts as it would in a fresh process.

    teardown(keep=[control])   # after the run's model, optimizer and buffers are out of reach
    leftovers()                # the Megatron state still set: [] after teardown

The world process group stays (and the groups in `keep`); everything else a run sets up goes:
Megatron Core 0.16.1's parallel state (destroy_model_parallel, which drops the group handles and
the global memory buffer but leaves its NCCL groups registered with torch: their communicators hold
GPU memory outside the caching allocator, so they are destroyed here), the microbatch calculator,
the rerun state machine, the RNG tracker (initialize_rng_tracker keeps the first tracker's class
otherwise: Megatron's or Transformer Engine's), the CUDA-graph registries, the sequence-parallel
module cache (keyed by id(model): a new model at a freed model's address would find the old one's
modules), the MoE logging tracker, the 1F1B overlap streams, Transformer Engine's FP8 state and
torch.compile's compiled code (its cache limit per function would leave later runs eager). Then gc,
cuBLAS's workspaces freed, the CUDA cache emptied and the peak-memory counters reset: the next run's
peaks are its own.

What cannot be reset stays, and is why a reused run says so in its record: the CUDA context, the
kernels already loaded, Transformer Engine's workspaces, the environment read before CUDA
started (megalab.jobs.reuse groups runs by it) and the workarounds patched once per process
(megalab.train.workarounds).
"""

import gc
import sys

# parallel_state's globals that a run sets (groups, their ranks, sizes, the memory buffer): None (or
# empty) in a fresh process. destroy_model_parallel (Megatron Core 0.16.1) leaves the *_GLOBAL_RANKS
# lists and the intra-partial data-parallel groups set; teardown clears them (the next
# initialize_model_parallel would overwrite them). Delete that part when destroy_model_parallel
# resets them itself.
PARALLEL_STATE_SUFFIXES = (
    "_RANKS",
    "_GROUP",
    "_GROUPS",
    "_GLOO",
    "_BUFFER",
    "_list",
    "_SIZE",
    "_RANK",
)
# other modules -> their globals that a run sets; each None (or empty, or False) in a fresh process
STATE = {
    "megatron.core.num_microbatches_calculator": ("_GLOBAL_NUM_MICROBATCHES_CALCULATOR",),
    "megatron.core.rerun_state_machine": ("_GLOBAL_RERUN_STATE_MACHINE",),
    "megatron.core.tensor_parallel.random": (
        "_CUDA_RNG_STATE_TRACKER",
        "_CUDA_RNG_STATE_TRACKER_INITIALIZED",
    ),
    "megatron.core.transformer.cuda_graphs": ("_IS_GRAPH_CAPTURING", "_IS_GRAPH_WARMUP"),
    "megatron.core.transformer.utils": ("_sequence_parallel_attr_cache",),
    "megatron.core.transformer.moe.moe_utils": ("_MOE_LAYER_WISE_LOGGING_TRACKER",),
    "megatron.core.pipeline_parallel.utils": ("_COMP_STREAM", "_COMM_STREAM"),
}


def teardown(keep=()) -> None:
    """Destroy Megatron's parallel state and every process group but the world and `keep`, reset
    the state Megatron Core and Transformer Engine keep in their modules, release memory."""
    import torch
    from megatron.core import num_microbatches_calculator, parallel_state, rerun_state_machine
    from megatron.core.pipeline_parallel import utils as pipeline_utils
    from megatron.core.tensor_parallel import random
    from megatron.core.transformer import cuda_graphs
    from megatron.core.transformer import utils as transformer_utils
    from megatron.core.transformer.moe import moe_utils

    parallel_state.destroy_model_parallel()
    for name in _parallel_state_names():
        value = getattr(parallel_state, name)
        setattr(parallel_state, name, {} if isinstance(value, dict) else None)
    dist = torch.distributed
    if dist.is_initialized():  # new_group was called on every rank alike: all destroy alike
        mine = [g for g in dist.distributed_c10d._world.pg_map if g is not dist.GroupMember.WORLD]
        for group in mine:
            if group not in keep:
                dist.destroy_process_group(group)
    num_microbatches_calculator.destroy_num_microbatches_calculator()
    rerun_state_machine.destroy_rerun_state_machine()
    random._CUDA_RNG_STATE_TRACKER, random._CUDA_RNG_STATE_TRACKER_INITIALIZED = None, False
    cuda_graphs.delete_cuda_graphs()  # runners, records, the graphs' memory pool
    cuda_graphs._IS_GRAPH_CAPTURING = cuda_graphs._IS_GRAPH_WARMUP = False
    transformer_utils._sequence_parallel_attr_cache = None
    moe_utils._MOE_LAYER_WISE_LOGGING_TRACKER.clear()
    pipeline_utils._COMP_STREAM = pipeline_utils._COMM_STREAM = None
    _reset_transformer_engine()
    if "torch._dynamo" in sys.modules:  # compiled code and its per-function cache limit: anew
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        # cuBLAS keeps a workspace per (handle, stream) in the caching allocator: a run on other
        # streams left them allocated (the GPU check found a reused PP 2 run's peaks 1% higher)
        torch._C._cuda_clearCublasWorkspaces()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _reset_transformer_engine() -> None:
    """Transformer Engine's FP8 state (amax histories, the autocast depth), where it is
    installed."""
    for module in ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch.fp8"):
        try:
            manager = __import__(module, fromlist=["FP8GlobalStateManager"]).FP8GlobalStateManager
        except (ImportError, AttributeError):
            continue
        if hasattr(manager, "reset"):
            manager.reset()
        return


def _parallel_state_names() -> list[str]:
    """The module globals of parallel_state named as a run's groups, ranks and buffers are."""
    from megatron.core import parallel_state

    return [
        n
        for n in vars(parallel_state)
        if n.startswith("_") and not n.startswith("__") and n.endswith(PARALLEL_STATE_SUFFIXES)
    ]


def leftovers(keep=()) -> list[str]:
    """ "module.NAME" of each global in STATE that is still set (not None, empty or False), and
    "process groups" when a group other than the world is still registered with torch."""
    import importlib

    import torch

    state = {"megatron.core.parallel_state": _parallel_state_names(), **STATE}
    out = [
        f"{module}.{name}"
        for module, names in state.items()
        for name in names
        if getattr(importlib.import_module(module), name, None)
    ]
    dist = torch.distributed
    if dist.is_initialized():
        world = dist.GroupMember.WORLD
        groups = [g for g in dist.distributed_c10d._world.pg_map if g is not world]
        out += ["process groups"] if [g for g in groups if g not in keep] else []
    return out
