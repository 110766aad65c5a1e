"""Train a GPT with Megatron Core 0.16.1: one file, read top to bottom.

    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --pp 2 --mbs 4 --gbs 64
    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --sp --dist-opt --overlap ...
    torchrun --nproc_per_node=2 -m megalab.train --layers 4 --hidden 128 --heads 4 --vocab 1024 \\
        --seq 64 --impl local --tp 2 --dry-run            # CPU: build the shards, count, exit

Flags: every RunConfig field (megalab.flags.add_config_args), plus --run-dir DIR (where --profile
writes), --dry-run (gloo on CPU: build every model chunk, print parameter counts, exit 0; Megatron
cannot run a forward pass on CPU) and --profile (torch.profiler trace of steps 5-7 on every rank, a
kernel-time table by category, and step 3's forward and backward passes per pipeline stage in
schedule.json; needs --iters >= 8). --gpus defaults to the torchrun world size. An MoE run also writes
routing.json: the tokens each expert received, per layer.

Output is the metrics protocol of megalab.metrics, one JSON object per line: a budget line
(rank 0) before step 0, a step line every step and a summary line at the end (rank 0 too: the loss
of the last pipeline stage reaches it in the per-step max-reduction). Errors are one JSON line too:
{"kind": "error", "status": "invalid"|"oom", ...}, exit code 2 (invalid) or 1 (oom).

This file is the run: flags, process groups, model, data, loss, loop. RunConfig -> Megatron's config
objects, DDP and optimizer (Megatron-LM's setup_model_and_optimizer) is megalab.wiring; the lines
written and the numbers gathered for them are megalab.train_log.

Layout-invariant init (--init layout_invariant, the default). Megatron draws each rank's weights
from a generator seeded per (pp, tp) rank, so two layouts start from different weights and their
loss curves are not comparable step by step. We re-draw every parameter from a generator seeded by
(seed, global parameter name) - layer number and expert number made global - generate the full
unsharded tensor and keep this rank's slice. Together with data that depends only on the global
sample number (megalab.data) and a vocabulary that is not padded per tp (cfg.vocab is used as
is; Megatron only needs it divisible by tp), every layout trains the same model on the same
batches, up to floating-point reduction order (megalab.weights). --init megatron keeps Megatron's own init.

CUDA_DEVICE_MAX_CONNECTIONS=1 is set (before CUDA starts) when tp > 1 or cp > 1: with one hardware
queue, kernels start in issue order, so the TP/SP communication Megatron issues before a GEMM runs
before it and overlaps with it (Megatron-LM asserts it on Hopper). It costs DP-overlap freedom.
(megalab.wiring.environment holds it, with the MoE grouped-GEMM switch.)
"""

import argparse
import contextlib
import faulthandler
import importlib.util
import os
import sys
import time
from functools import partial

from megalab import data, theory
from megalab.runs.config import InvalidLayout
from megalab.runs.flags import add_config_args, config_from_args
from megalab.train_log import (CHUNKS, CLOCK, GIB, SCHEDULE_STEP, RouterCounts, all_gather, budget, clock_chunks, emit,
                               is_oom, max_over_ranks, nodes_line, peak_tflops, profiler, reduced_loss, step_line, where,
                               write_schedule)
from megalab.weights import init_layout_invariant
# train() calls build_training by this module's name: tools/gpu/spikes.py swaps in a probing one
from megalab.wiring import (build_training, copy_mlp_bias_under_recompute, environment, fork_rng_for_local_capture,
                            graph_capture, guard_empty_grouped_gemm, guard_empty_permutation, megatron_configs,
                            patch_moe_router_without_te, wire_schedule, with_wgrad_fusion)

_T0 = time.time()  # start-up clock (torch and Megatron load later); $MEGALAB_LAUNCH_T wins if set
_LAUNCH = float(os.environ.get("MEGALAB_LAUNCH_T", _T0))


# -- config ---------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = add_config_args(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--run-dir", default=None, help="folder for --profile output (default: cwd)")
    p.add_argument("--dry-run", action="store_true", help="CPU + gloo: build the shards, count, exit")
    p.add_argument("--profile", action="store_true", help="torch.profiler trace of steps 5-7 (rank 0), and step "
                   "3's forward and backward passes per pipeline stage (schedule.json)")
    return p.parse_args(argv)


def checked_config(args):
    """RunConfig from the flags, gpus = world size; InvalidLayout says what to change."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cfg = config_from_args(args)
    if args.gpus is None:
        cfg = cfg.replace(gpus=world)
    problems = cfg.problems(te_available=importlib.util.find_spec("transformer_engine") is not None)
    if cfg.gpus != world:
        problems.append(f"gpus={cfg.gpus} but torchrun started {world} processes: pass --nproc_per_node={cfg.gpus}")
    if problems:
        raise InvalidLayout("\n".join(problems))
    return cfg


# -- initialize_distributed -----------------------------------------------------------------------
def initialize_distributed(cfg, parallel: dict, dry_run: bool):
    """torch.distributed (NCCL on GPU, gloo on CPU) and Megatron's parallel groups; returns the device."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    if dry_run:
        torch.distributed.init_process_group("gloo")
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl")  # lazy: each group's NCCL starts at its first collective
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (router, loss) on tensor cores
    ps.initialize_model_parallel(**parallel)  # groups in Megatron's default order tp-cp-ep-dp-pp
    # Megatron-LM's _set_random_seed: a seed per pipeline stage; the tracker forks tp/ep streams
    seed = cfg.seed + 100 * ps.get_pipeline_model_parallel_rank()
    torch.manual_seed(seed)
    if not dry_run:  # CUDA graphs replay dropout from Transformer Engine's graph-safe generator
        model_parallel_cuda_manual_seed(seed, te_rng_tracker=cfg.cuda_graphs != "none")
    return device


# -- model_provider -------------------------------------------------------------------------------
def model_provider(cfg, config, pre_process: bool, post_process: bool, vp_stage):
    """One GPTModel chunk: Transformer Engine layers (impl te) or Megatron's local ones."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_layer_local_spec, get_gpt_layer_with_transformer_engine_spec)

    experts = cfg.experts or None
    if cfg.impl == "te":  # TE reads the norm type from config.normalization; fuses it into the next GEMM
        spec = get_gpt_layer_with_transformer_engine_spec(experts, moe_grouped_gemm=bool(experts), qk_layernorm=False)
    else:
        spec = get_gpt_layer_local_spec(experts, moe_grouped_gemm=False, qk_layernorm=False, normalization=cfg.norm)
    return GPTModel(
        config, spec, vocab_size=cfg.vocab, max_sequence_length=cfg.seq,
        pre_process=pre_process, post_process=post_process, parallel_output=True,
        share_embeddings_and_output_weights=cfg.tied_embeddings,
        position_embedding_type="rope" if cfg.position == "rope" else "learned_absolute",
        vp_stage=vp_stage)


@contextlib.contextmanager
def _cuda_stays_on_cpu():
    """Dry run only: Megatron moves the tied output-layer copy with .cuda() (language_module.py)."""
    import torch
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self
    try:
        yield
    finally:
        torch.Tensor.cuda = cuda


def build_chunks(cfg, config, dry_run: bool) -> list:
    """One model chunk per virtual stage, as Megatron-LM's get_model (vp_stage tells each its layers)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    chunks = []
    for i in range(cfg.vpp):
        vp = i if cfg.vpp > 1 else None
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp)
        with _cuda_stays_on_cpu() if dry_run else contextlib.nullcontext():
            chunk = model_provider(cfg, config, pre, post, vp)
        for p in chunk.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(p)
        if not dry_run:
            chunk.cuda(torch.cuda.current_device())  # norms and position embeddings start on CPU
        chunks.append(chunk)
    return chunks


# -- get_data_iterator ----------------------------------------------------------------------------
def get_data_iterator(cfg, device, n_chunks: int):
    """Per model chunk: this dp rank's micro-batches if the chunk embeds tokens or computes the loss, else None."""
    from megatron.core import parallel_state as ps

    vps = [i if cfg.vpp > 1 else None for i in range(n_chunks)]
    needs = [ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=v)
             or ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=v) for v in vps]
    if cfg.data:
        source = data.Indexed(cfg.data, cfg, cfg.iters * cfg.gbs, is_built_on_rank=lambda: any(needs))
    else:
        source = data.Synthetic(cfg.seed, cfg.vocab, cfg.seq)
    dp_rank = ps.get_data_parallel_rank()  # replica index among dp (cp ranks of a replica read alike)
    its = [data.microbatches(cfg, dp_rank, source, device) if n else None for n in needs]
    return its if cfg.vpp > 1 else its[0]


# Activation memory, measured: bytes allocated between the start of a step's first forward pass and its
# loss, on the rank that computes the loss (pp = 1: every rank). Chapter 03 differences two depths.
ACTIVATIONS: dict = {}


# -- forward_step_func ----------------------------------------------------------------------------
def loss_func(loss_mask, output_tensor):
    """Summed token loss, token count, and the pair for logging (pretrain_gpt.py's 3-tuple form).

    Megatron's schedule divides the sum by the token count and by num_microbatches
    (calculate_per_token_loss=False); DDP averages gradients over dp*cp.
    """
    import torch
    ACTIVATIONS.setdefault("loss", torch.cuda.memory_allocated())  # the first micro-batch's forward is done
    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def forward_step_func(data_iterator, model):
    """Next micro-batch (first/last stage) through the chunk; middle stages take the p2p input."""
    import torch
    from megatron.core.utils import get_batch_on_this_cp_rank
    which = CLOCK.forward(CHUNKS.get(id(model), 0))  # the measured schedule (--profile, one step): else None
    if data_iterator is None:  # not the last stage: the loss function is never called
        out, loss = model(None, None, None), None
    else:
        batch = get_batch_on_this_cp_rank(next(data_iterator))  # (b, s/cp): 2 of 2*cp sequence chunks
        ACTIVATIONS.setdefault("start", torch.cuda.memory_allocated())  # host-side counter: no sync
        out = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"], loss_mask=batch["loss_mask"])
        loss = partial(loss_func, batch["loss_mask"])
    CLOCK.after_forward(which, out)
    return out, loss


# -- main -----------------------------------------------------------------------------------------
def main(argv=None) -> None:
    faulthandler.enable()  # a crash in native code (SIGSEGV) prints every thread's Python stack to the log
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = checked_config(args)
    except InvalidLayout as e:  # before anything starts: no process group, no CUDA
        if rank == 0:
            emit({"kind": "error", "status": "invalid", "rank": rank, "message": str(e)})
            print(f"InvalidLayout: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        sys.exit(2)
    if not args.dry_run:  # read when the CUDA context is created and when Transformer Engine loads
        os.environ.update(environment(cfg))
    if not cfg.compile:  # read when Megatron's import loads torch._dynamo: its jit_fuser ops then run eagerly
        os.environ["TORCH_COMPILE_DISABLE"] = "1"
    try:
        train(cfg, args, rank)
    except Exception as e:
        if not is_oom(e):
            raise
        # one line per rank, then die at once: peers may hang in NCCL until torchrun kills them; where it
        # ran out (the innermost frames) says which allocation, when the numbers say it should have fit
        emit({"kind": "error", "status": "oom", "rank": rank, "error_type": "OutOfMemoryError",
              "message": str(e)[:500], "where": where(e)})
        sys.stderr.flush()
        os._exit(1)


def train(cfg, args, rank: int) -> None:
    since_launch = lambda: round(time.time() - _LAUNCH, 2)  # noqa: E731
    startup = {"python": round(_T0 - _LAUNCH, 2)}  # where launch-to-first-step goes (seconds since launch)
    # Transformer Engine imports JAX, when it is installed, only to look for TE's JAX extension: 0.9 s of
    # one process's imports on the reference host (results/probes/importtime-*). This trainer is PyTorch only.
    sys.modules.setdefault("jax", None)
    import torch
    from megatron.core import parallel_state as ps

    parallel, config, ddp_config, optim_config = megatron_configs(cfg, args.dry_run)
    startup["imports"] = since_launch()
    device = initialize_distributed(cfg, parallel, args.dry_run)
    startup["process_groups"] = since_launch()
    if nodes := nodes_line():  # several nodes: node 0 records the run, with each node's machine
        emit(nodes)
    patch_moe_router_without_te(cfg)
    copy_mlp_bias_under_recompute(cfg)
    fork_rng_for_local_capture(cfg)
    if not args.dry_run:
        guard_empty_grouped_gemm(cfg)
        guard_empty_permutation(cfg)
    chunks = with_wgrad_fusion(config, lambda: build_chunks(cfg, config, args.dry_run))
    n_params = sum(p.numel() for c in chunks for p in c.parameters())
    per_rank = [int(n) for n in all_gather(n_params, device, "int64")]

    if args.dry_run:  # count (and, for small models, run the layout-invariant init on CPU), then stop
        small = theory.params(cfg)["total"] <= 50_000_000
        checksum = init_layout_invariant(chunks, cfg, device) if cfg.init == "layout_invariant" and small else None
        emit({"kind": "params", "rank": rank, "tp_rank": ps.get_tensor_model_parallel_rank(),
              "pp_rank": ps.get_pipeline_model_parallel_rank(), "ep_rank": ps.get_expert_model_parallel_rank(),
              "params": n_params, "init_checksum": checksum})
        if rank == 0:
            emit(budget(cfg, per_rank))
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        return

    startup["model"] = since_launch()
    model, optimizer, scheduler = build_training(cfg, chunks, config, ddp_config, optim_config, device)
    startup["training_state"] = since_launch()
    after_first_step = wire_schedule(config, model, optimizer, ddp_config)
    capture_graphs = graph_capture(cfg, config, model, optimizer, ddp_config)  # cuda_graphs te: before step 1
    data_iterator = get_data_iterator(cfg, device, len(model))
    from megatron.core.optimizer_param_scheduler import get_canonical_lr_for_logging
    from megatron.core.pipeline_parallel import get_forward_backward_func
    forward_backward_func = get_forward_backward_func()  # no pipelining, 1F1B, or interleaved 1F1B

    prof = profiler(args.run_dir or ".", rank) if args.profile else None
    routing = RouterCounts(model, cfg.experts) if cfg.experts and cfg.cuda_graphs == "none" else None
    if args.profile:
        clock_chunks(model)
    if rank == 0:
        emit(budget(cfg, per_rank))
    if prof is not None:
        prof.start()
    for m in model:
        m.train()
    startup_s, peak = None, peak_tflops()
    startup["loop"] = since_launch()
    # -- the loop: zero_grad -> forward_backward_func (ends with finalize_model_grads) -> step -> log ----
    for step in range(cfg.iters):
        capture_graphs(step)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        ACTIVATIONS.clear()
        timed = args.profile and step == SCHEDULE_STEP
        if timed:
            CLOCK.start()
        losses = forward_backward_func(
            forward_step_func=forward_step_func, data_iterator=data_iterator, model=model,
            num_microbatches=cfg.num_microbatches, seq_length=cfg.seq, micro_batch_size=cfg.mbs,
            decoder_seq_length=cfg.seq, forward_only=False)
        if timed:  # every rank's passes to rank 0; a failure costs the schedule, not the run
            gathered = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, (ps.get_pipeline_model_parallel_rank(), CLOCK.stop()))
            if rank == 0:
                write_schedule(args.run_dir or ".", step, [t for _, t in gathered], [p for p, _ in gathered])
        lr = get_canonical_lr_for_logging(optimizer.param_groups)
        _, grad_norm, _ = optimizer.step()  # CPU-GPU sync point inside Megatron: the clip norm's .item()
        scheduler.step(increment=1)
        torch.cuda.synchronize()
        step_time = time.perf_counter() - t0
        if step == 0:
            startup_s = time.time() - _LAUNCH
            startup["first_step"] = round(startup_s, 2)
            after_first_step()
        act = ACTIVATIONS["loss"] - ACTIVATIONS["start"] if len(ACTIVATIONS) == 2 else None
        loss, *mem = max_over_ranks(device, reduced_loss(losses), act)  # reduced_loss: on the last stage only
        if rank == 0:
            emit(step_line(cfg, step, loss, grad_norm, lr, step_time, mem, peak))
        if routing is not None:
            routing.step()
        if prof is not None:
            prof.step()

    if prof is not None:
        prof.stop()
    capture_graphs.release()  # as Megatron-LM's train() does before it ends (session 18's graphed runs hung at exit)
    if routing is not None:
        routing.write(args.run_dir or ".", rank)
    alloc = all_gather(torch.cuda.max_memory_allocated() / GIB, device)
    reserved = all_gather(torch.cuda.max_memory_reserved() / GIB, device)
    if rank == 0:
        from megalab.machine import env
        emit({"kind": "summary", "steps": cfg.iters, "startup_s": startup_s, "startup_marks_s": startup,
              "mem_allocated_peak_gib_per_rank": alloc, "mem_reserved_peak_gib_per_rank": reserved,
              "env": env.fingerprint()})
    if cfg.cuda_graphs != "none":  # session 18: every graphed run hung past this point until killed; all is said
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
