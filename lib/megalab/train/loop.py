"""Train a GPT with Megatron Core 0.16.1: one file, read top to bottom.

    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --pp 2 --mbs 4 --gbs 64
    torchrun --nproc_per_node=4 -m megalab.train --preset gpt-1.2b --tp 2 --sp --dist-opt --overlap
    torchrun --nproc_per_node=2 -m megalab.train --layers 4 --hidden 128 --heads 4 --vocab 1024 \\
        --seq 64 --impl local --tp 2 --dry-run    # CPU: build the shards, count, exit (train.args)

Output is the metrics protocol of megalab.metrics, one JSON object per line: a budget line
(rank 0) before step 0, a step line every step and a summary line at the end (rank 0 too: the loss
of the last pipeline stage reaches it in the per-step max-reduction). Errors are one JSON line too:
{"kind": "error", "status": "invalid"|"oom", ...}, exit code 2 (invalid) or 1 (oom).

This file is the run; the modules beside it are listed in megalab.train's docstring.

Every layout trains the same model on the same batches (--init layout_invariant, the default):
weights drawn per global parameter name (megalab.train.weights), data per global sample number
(megalab.data), a vocabulary not padded per tp. --init megatron keeps Megatron's own init.
CUDA_DEVICE_MAX_CONNECTIONS=1 is set before CUDA starts when tp > 1 or cp > 1 (wiring.environment).
"""

import faulthandler
import os
import sys
import time
from functools import partial

from megalab import data
from megalab.runs.config import InvalidLayout
from megalab.train import dry_run, imports, log, wiring, workarounds
from megalab.train import probes as measure
from megalab.train.args import checked_config, parse_args
from megalab.train.parent import die_with_parent
from megalab.train.weights import init_layout_invariant

_T0 = time.time()  # start-up clock (torch and Megatron load later); $MEGALAB_LAUNCH_T wins if set
_LAUNCH = float(os.environ.get("MEGALAB_LAUNCH_T", _T0))


# -- initialize_distributed -----------------------------------------------------------------------
def initialize_distributed(cfg, parallel: dict, dry_run: bool):
    """torch.distributed (NCCL on GPU, gloo on CPU) and Megatron's parallel groups; returns the
    device."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if dry_run:
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(device)
        # fp32 leftovers (router, loss) on tensor cores
        torch.backends.cuda.matmul.allow_tf32 = True
    if not torch.distributed.is_initialized():  # kept by a reused process (train.batch)
        torch.distributed.init_process_group("gloo" if dry_run else "nccl")  # NCCL: lazy, per group
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
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )

    experts = cfg.experts or None
    # TE reads the norm type from config.normalization; fuses it into the next GEMM
    if cfg.impl == "te":
        spec = get_gpt_layer_with_transformer_engine_spec(
            experts, moe_grouped_gemm=bool(experts), qk_layernorm=False
        )
    else:
        spec = get_gpt_layer_local_spec(
            experts, moe_grouped_gemm=False, qk_layernorm=False, normalization=cfg.norm
        )
    return GPTModel(
        config,
        spec,
        vocab_size=cfg.vocab,
        max_sequence_length=cfg.seq,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=True,
        share_embeddings_and_output_weights=cfg.tied_embeddings,
        position_embedding_type="rope" if cfg.position == "rope" else "learned_absolute",
        vp_stage=vp_stage,
    )


def build_chunks(cfg, config, dry_run: bool) -> list:
    """One model chunk per virtual stage, as Megatron-LM's get_model (vp_stage tells each its
    layers)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    chunks = []
    for i in range(cfg.vpp):
        vp = i if cfg.vpp > 1 else None
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp)
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp)
        chunk = model_provider(cfg, config, pre, post, vp)
        for p in chunk.parameters():
            tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(p)
        if not dry_run:
            chunk.cuda(torch.cuda.current_device())  # norms and position embeddings start on CPU
        chunks.append(chunk)
    return chunks


# -- get_data_iterator ----------------------------------------------------------------------------
def get_data_iterator(cfg, device, n_chunks: int):
    """Per model chunk: this dp rank's micro-batches if the chunk embeds tokens or computes the
    loss, else None."""
    from megatron.core import parallel_state as ps

    vps = [i if cfg.vpp > 1 else None for i in range(n_chunks)]
    needs = [
        ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=v)
        or ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=v)
        for v in vps
    ]
    if cfg.data:
        source = data.Indexed(
            cfg.data, cfg, cfg.iters * cfg.gbs, is_built_on_rank=lambda: any(needs)
        )
    else:
        source = data.Synthetic(cfg.seed, cfg.vocab, cfg.seq)
    # replica index among dp (cp ranks of a replica read alike)
    dp_rank = ps.get_data_parallel_rank()
    its = [data.microbatches(cfg, dp_rank, source, device) if n else None for n in needs]
    return its if cfg.vpp > 1 else its[0]


# -- forward_step_func ----------------------------------------------------------------------------
def loss_func(loss_mask, output_tensor):
    """Summed token loss, token count, and the pair for logging (pretrain_gpt.py's 3-tuple form).
    Megatron's schedule divides the sum by the token count and num_microbatches; DDP averages
    gradients over dp*cp."""
    import torch

    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    logged = torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])
    return loss, num_tokens, {"lm loss": logged}


def forward_step_func(data_iterator, model, probes=measure.Probe()):
    """Next micro-batch (first/last stage) through the chunk; middle stages take the p2p input."""
    from megatron.core.utils import get_batch_on_this_cp_rank

    probes.before_forward(model)
    if data_iterator is None:  # not the last stage: the loss function is never called
        out, loss = model(None, None, None), None
    else:
        # (b, s/cp): 2 of 2*cp sequence chunks
        batch = get_batch_on_this_cp_rank(next(data_iterator))
        tokens, mask = batch["tokens"], batch["loss_mask"]
        out = model(tokens, batch["position_ids"], None, labels=batch["labels"], loss_mask=mask)
        loss = partial(loss_func, batch["loss_mask"])
    probes.after_forward(model, out)
    return out, loss


# -- main -----------------------------------------------------------------------------------------
def main(argv=None, probes: list | None = None) -> None:
    """Run the trainer; `probes` adds measurements to the trainer's own (megalab.train.probes)."""
    die_with_parent()  # SIGTERM when torchrun dies, even by kill -9: no orphaned rank keeps its GPU
    # a crash in native code (SIGSEGV) prints every thread's Python stack to the log
    faulthandler.enable()
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = checked_config(args)
    except InvalidLayout as e:  # before anything starts: no process group, no CUDA
        if rank == 0:
            log.emit({"kind": "error", "status": "invalid", "rank": rank, "message": str(e)})
            print(f"InvalidLayout: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        sys.exit(2)
    if not args.dry_run:  # read when the CUDA context is created and when Transformer Engine loads
        os.environ.update(wiring.environment(cfg))
    # read when Megatron's import loads torch._dynamo: its jit_fuser ops then run eagerly
    if not cfg.compile:
        os.environ["TORCH_COMPILE_DISABLE"] = "1"
    try:
        train(cfg, args, rank, probes or [])
        import torch

        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    except Exception as e:
        if not log.is_oom(e):
            raise
        # one line per rank, then die at once: peers may hang in NCCL until torchrun kills them;
        # where it ran out (the innermost frames) says which allocation, when the numbers say it
        # should have fit
        log.emit(log.oom_line(rank, e))
        sys.stderr.flush()
        os._exit(1)


def train(cfg, args, rank: int, extra_probes: list, launched=_LAUNCH, startup=None) -> None:
    """One run; a reused process (train.batch) times it from `launched`, its own start."""
    since_launch = lambda: round(time.time() - launched, 2)  # noqa: E731
    startup = startup or {"python": round(_T0 - launched, 2)}  # launch to first step (s since)
    imports.load_less()  # JAX hidden, torch.compile lazy: less to import before the first step
    import torch

    activations = measure.ActivationMemory()  # every step line reports it
    probes = measure.Probes([activations, *measure.for_run(cfg, args.profile), *extra_probes])
    parallel, config, ddp_config, optim_config = wiring.megatron_configs(cfg, args.dry_run)
    probes.configure(cfg, config)
    startup["imports"] = since_launch()
    device = initialize_distributed(cfg, parallel, args.dry_run)
    startup["process_groups"] = since_launch()
    log.emit_nodes()  # several nodes: node 0 records the run, with each node's machine
    workarounds.apply(cfg, args.dry_run)
    chunks = wiring.with_wgrad_fusion(config, lambda: build_chunks(cfg, config, args.dry_run))
    n_params = sum(p.numel() for c in chunks for p in c.parameters())
    per_rank = [int(n) for n in log.all_gather(n_params, device, "int64")]
    if args.dry_run:
        return dry_run.report(cfg, chunks, device, per_rank, rank)

    startup["model"] = since_launch()
    if cfg.init == "layout_invariant":
        init_layout_invariant(chunks, cfg, device)
    model, optimizer, scheduler = wiring.build_training(
        cfg, chunks, config, ddp_config, optim_config
    )
    startup["training_state"] = since_launch()
    after_first_step = wiring.wire_schedule(config, model, optimizer, ddp_config)
    run = measure.Run(cfg, rank, args.run_dir or ".", model, optimizer, config, ddp_config)
    data_iterator = get_data_iterator(cfg, device, len(model))
    from megatron.core.optimizer_param_scheduler import get_canonical_lr_for_logging
    from megatron.core.pipeline_parallel import get_forward_backward_func

    forward_backward_func = get_forward_backward_func()  # no pipelining, 1F1B, or interleaved 1F1B
    if rank == 0:
        # layout, parameters per rank, tokens per step, predicted memory
        log.emit(log.budget(cfg, per_rank))
    probes.start(run)
    for m in model:
        m.train()
    startup_s, peak = None, log.peak_tflops()
    startup["loop"] = since_launch()
    stop = measure.TightStop(cfg.stop_when_tight, device)  # off: every one of cfg.iters steps
    # -- the loop: zero_grad -> forward_backward_func (finalize_model_grads) -> step -> report
    for step in range(cfg.iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        probes.before_step(step)
        losses = forward_backward_func(
            forward_step_func=partial(forward_step_func, probes=probes),
            data_iterator=data_iterator,
            model=model,
            num_microbatches=cfg.num_microbatches,
            seq_length=cfg.seq,
            micro_batch_size=cfg.mbs,
            decoder_seq_length=cfg.seq,
            forward_only=False,
        )
        lr = get_canonical_lr_for_logging(optimizer.param_groups)
        # CPU-GPU sync point inside Megatron: the clip norm's .item()
        _, grad_norm, _ = optimizer.step()
        scheduler.step(increment=1)
        torch.cuda.synchronize()
        step_time = time.perf_counter() - t0
        if step == 0:
            startup_s = time.time() - launched
            startup["first_step"] = round(startup_s, 2)
            after_first_step()
        # loss: last stage's
        loss, *mem = log.max_over_ranks(device, log.reduced_loss(losses), activations.bytes())
        if rank == 0:
            log.emit(log.step_line(cfg, step, loss, grad_norm, lr, step_time, mem, peak))
        probes.after_step(step)
        if stop.after(step_time):  # the median's 95% interval within ±2%
            break
    probes.stop()
    alloc = log.all_gather(torch.cuda.max_memory_allocated() / log.GIB, device)
    reserved = log.all_gather(torch.cuda.max_memory_reserved() / log.GIB, device)
    if rank == 0:
        log.emit(log.summary_line(cfg, startup_s, startup, alloc, reserved))
    # a graphed run can hang past this point until killed; all is said
    if cfg.cuda_graphs != "none":
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
