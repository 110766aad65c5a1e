"""megalab.jobs.peer: Megatron-LM's pretrain_gpt.py given the same RunConfig; its real logs parsed
back.

The logs in tests/data/peer/ were captured on one H200 (2026-11-24, Megatron-LM core_v0.16.1,
TE 2.11.0) by tools/gpu/plans/peer-1gpu.txt, and on two H100s (*_pp2_* and *_ep2_*)."""

import shlex
import sys
from pathlib import Path

import pytest

from megalab.jobs import launch, peer
from megalab.runs import presets

DATA = Path(__file__).parent / "data" / "peer"
GPT12 = peer.peer_config(presets.get("gpt-1.2b").replace(mbs=8, gbs=8, dropout=0.1))


def test_a_peer_config_is_its_own_record_and_old_keys_stand():
    trainer = presets.get("gpt-1.2b").replace(mbs=8, gbs=8, dropout=0.1)
    assert GPT12.label == trainer.label + "_peer" and GPT12.key != trainer.key
    assert peer.trainer_config(GPT12) == trainer
    assert GPT12.problems() == []
    assert any("init='megatron'" in p for p in GPT12.replace(init="layout_invariant").problems())
    assert any("always compiles" in p for p in GPT12.replace(compile=False).problems())


def test_the_flags_say_the_same_model_layout_and_schedule():
    cfg = peer.peer_config(
        presets.get("gpt-350m").replace(
            gpus=4,
            pp=2,
            vpp=2,
            tp=2,
            sp=True,
            tied_embeddings=False,
            position="rope",
            norm="RMSNorm",
            activation="swiglu",
            recompute="full",
            mbs=2,
            gbs=16,
            dist_opt=True,
            overlap=True,
        )
    )
    a = peer.args(cfg)
    flag = lambda name: a[a.index(name) + 1]  # noqa: E731
    assert (
        flag("--num-layers"),
        flag("--tensor-model-parallel-size"),
        flag("--pipeline-model-parallel-size"),
        # chunks, not layers per chunk
        flag("--num-virtual-stages-per-pipeline-rank"),
    ) == ("24", "2", "2", "2")
    assert (
        int(flag("--vocab-size")) + 1 == cfg.vocab
        and cfg.vocab % (int(flag("--make-vocab-size-divisible-by")) * 2) == 0
    )
    assert {
        "--sequence-parallel",
        "--swiglu",
        "--disable-bias-linear",
        "--untie-embeddings-and-output-weights",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--mock-data",
        "--no-gradient-accumulation-fusion",
    } <= set(a)
    assert flag("--recompute-granularity") == "full" and flag("--recompute-method") == "uniform"
    assert flag("--hidden-dropout") == flag("--attention-dropout") == "0.0"
    assert (
        peer.environment(cfg) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
        and peer.environment(GPT12) == {}
    )


def test_cuda_graphs_become_megatron_lm_flags():
    """--cuda-graph-impl as the trainer sets cuda_graph_impl
    (megalab.train.wiring.megatron_configs); MoE captures only attention and the router, as the
    trainer's cuda_graph_scope."""
    dense = peer.args(GPT12.replace(cuda_graphs="te"))
    assert (
        dense[dense.index("--cuda-graph-impl") + 1] == "transformer_engine"
        and "--cuda-graph-scope" not in dense
    )
    moe = peer.args(
        peer.peer_config(presets.get("olmoe-1b-7b").replace(gpus=1, mbs=1, gbs=8, cuda_graphs="te"))
    )
    assert moe[moe.index("--cuda-graph-scope") + 1 : moe.index("--cuda-graph-scope") + 4] == [
        "attn",
        "moe_router",
        "moe_preprocess",
    ]
    assert "--cuda-graph-impl" not in peer.args(GPT12)


def test_the_launcher_starts_pretrain_gpt_with_these_flags(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text("")
    cmd = launch.torchrun_command(GPT12, tmp_path / "run", peer_dir=tmp_path)
    assert cmd[cmd.index("--nproc_per_node=1") + 1] == str(tmp_path / "pretrain_gpt.py")
    assert cmd[-len(peer.args(GPT12)) :] == peer.args(GPT12)
    # what ran on the H200
    recorded = shlex.split((DATA / "gpt-1.2b_mbs8_drop0.1_peer.command").read_text())
    assert recorded[recorded.index("--nproc_per_node=1") + 2 :] == peer.args(GPT12)


def test_no_checkout_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGATRON_LM", str(tmp_path))
    with pytest.raises(peer.PeerNotFound, match=r"git clone --depth 1 --branch core_v0.16.1"):
        peer.source_dir()


def test_a_real_peer_log_parses_into_megalab_steps():
    parsed = peer.parse_log((DATA / "gpt-1.2b_mbs8_drop0.1_peer.log").read_text(), GPT12, 989.0)
    assert [s["step"] for s in parsed.steps] == list(range(30))
    first = parsed.steps[0]
    assert first["step_time_s"] == pytest.approx(2.2461) and first["loss"] == pytest.approx(
        11.14299
    )
    assert first["peer_tflops_per_gpu"] == 27.9 and first["mfu"] == pytest.approx(
        first["tflops_per_gpu"] / 989
    )
    # the later of its two reports
    assert first["mem_reserved_peak_gib"] == pytest.approx(39390.0 / 1024)
    # same embedding
    assert parsed.budget == {"kind": "budget", "peer_vocab": 51200, "peer_vocab_padding": 0}
    steady = sorted(s["step_time_s"] for s in parsed.steps[3:])[len(parsed.steps[3:]) // 2]
    assert 0.15 < steady < 0.3  # ~0.21 s on an H200


def test_the_other_real_log_too():
    cfg = peer.peer_config(presets.get("gpt-24l-2048").replace(mbs=8, gbs=16, dropout=0.1))
    parsed = peer.parse_log((DATA / "gpt-24l-2048_mbs8_drop0.1_peer.log").read_text(), cfg)
    assert len(parsed.steps) == 30 and parsed.steps[-1]["mfu"] is None
    assert all(
        s["tokens_per_s"] == pytest.approx(16 * 2048 / s["step_time_s"]) for s in parsed.steps
    )


def test_two_gpu_logs_pipeline_stages_and_experts():
    """PP 2: each stage reports its own memory, twice; the peak is the largest stage's last report.
    EP 2: the router's load_balancing_loss sits beside lm loss on each line; the loss is lm loss
    (iteration 28 is step 27: steps count from 0, as the trainer's)."""
    pp = peer.peer_config(presets.get("gpt-2.5b").replace(gpus=2, pp=2, mbs=4, gbs=8))
    parsed = peer.parse_log((DATA / "gpt-2.5b_pp2_mbs4_peer.log").read_text(), pp, 989.0)
    assert len(parsed.steps) == 30 and parsed.steps[0]["mem_allocated_peak_gib"] == pytest.approx(
        35805.93 / 1024
    )
    moe = peer.peer_config(presets.get("olmoe-like").replace(gpus=2, ep=2, mbs=1, gbs=8))
    parsed = peer.parse_log((DATA / "olmoe-like_ep2_peer.log").read_text(), moe, 989.0)
    assert parsed.steps[27]["loss"] == pytest.approx(5.346646) and parsed.steps[27][
        "step_time_s"
    ] == pytest.approx(1.0779)
    assert parsed.steps[27]["tokens_per_s"] == pytest.approx(8 * 4096 / 1.0779)


CHECKOUT = Path(__file__).parents[1] / ".peer" / "Megatron-LM"
needs_checkout = pytest.mark.skipif(
    not (CHECKOUT / "pretrain_gpt.py").exists(), reason="needs a Megatron-LM checkout in .peer/"
)


def _megatron_lm_arguments(monkeypatch):
    """Megatron-LM's megatron.training.arguments from the checkout, importable on CPU: one module of
    it imports triton (batch-invariant kernels, never used here) and is stubbed; the GPU is said to
    be a Hopper."""
    import types
    import torch

    monkeypatch.syspath_prepend(str(CHECKOUT))
    stub = types.ModuleType("megatron.core.transformer.custom_layers.batch_invariant_kernels")
    stub.enable_batch_invariant_mode = stub.disable_batch_invariant_mode = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, stub.__name__, stub)
    import megatron.training.arguments as A

    monkeypatch.setattr(A, "get_device_arch_version", lambda: 9)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return A


@needs_checkout
def test_megatron_lm_reads_every_flag_as_meant(monkeypatch, tmp_path):
    """Megatron-LM's own argparse and validate_args, on CPU, for layouts across the axes (the last
    one profiled, as `megalab peer --profile` asks)."""
    import contextlib
    import io

    A = _megatron_lm_arguments(monkeypatch)
    for c in (
        GPT12,
        presets.get("gpt-2.5b").replace(gpus=2, tp=2, sp=True, mbs=8, gbs=8),
        presets.get("gpt-1.2b").replace(gpus=2, cp=2, seq=8192, mbs=1, gbs=1, cp_comm="a2a"),
        presets.get("olmoe-like").replace(gpus=2, ep=2, mbs=1, gbs=4),
    ):
        c = peer.peer_config(c)
        profile = peer.profile_args(tmp_path) if c.experts else []
        monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *peer.args(c), *profile])
        for k, v in dict(
            RANK="0", WORLD_SIZE=str(c.gpus), LOCAL_RANK="0", **peer.environment(c)
        ).items():
            monkeypatch.setenv(k, v)
        a = A.parse_args()
        with contextlib.redirect_stdout(io.StringIO()):
            A.validate_args(a)
        assert (
            a.tensor_model_parallel_size,
            a.context_parallel_size,
            a.expert_model_parallel_size,
            a.data_parallel_size,
            a.micro_batch_size,
            a.global_batch_size,
            a.seq_length,
            a.sequence_parallel,
            a.num_experts,
        ) == (c.tp, c.cp, c.ep, c.dp, c.mbs, c.gbs, c.seq, c.sp, c.experts or None)
    assert (
        a.profile,
        a.use_pytorch_profiler,
        a.profile_step_start,
        a.profile_step_end,
        a.profile_ranks,
    ) == (True, True, 5, 8, [0])


def test_recompute_modules_and_balance_become_megatron_lm_flags():
    sel = peer.args(GPT12.replace(recompute="selective", recompute_modules="core_attn,mlp"))
    assert sel[sel.index("--recompute-modules") + 1 : sel.index("--recompute-modules") + 3] == [
        "core_attn",
        "mlp",
    ]
    moe = lambda b: peer.args(
        peer.peer_config(presets.get("olmoe-1b-7b").replace(gpus=1, mbs=1, gbs=8, moe_balance=b))
    )  # noqa: E731
    none, force, aux = moe("none"), moe("force"), moe("aux_loss")
    assert (
        none[none.index("--moe-router-load-balancing-type") + 1] == "none"
        and "--moe-aux-loss-coeff" not in none
    )
    assert (
        "--moe-router-force-load-balancing" in force
        and "--moe-router-force-load-balancing" not in aux
    )
    assert (
        aux[aux.index("--moe-router-load-balancing-type") + 1] == "aux_loss"
        and "--moe-aux-loss-coeff" in aux
    )


# TransformerConfig fields where the peer's config may differ from the trainer's, and why. One
# changes the speed, not the model: the peer accumulates weight gradients unfused (Megatron-LM needs
# Apex for the fusion), which favours the trainer. The others make no difference on the layouts
# compared (FP8 and CUDA graphs off).
ALLOWED = {
    "gradient_accumulation_fusion": "Megatron-LM needs Apex for it; the trainer gets it from TE's "
    "linears",
    "add_qkv_bias": "Megatron Core gives QKV a bias when add_bias_linear is on, set or not",
    "attention_softmax_in_fp32": "read by the local (unfused) attention only",
    "masked_softmax_fusion": "read by the local (unfused) attention only",
    "use_cpu_initialization": "the dry run builds on CPU",
    "perform_initialization": "the dry run builds on CPU",
    "fp8_amax_history_len": "FP8 off",
    "fp8_amax_compute_algo": "FP8 off",
    "cuda_graph_warmup_steps": "CUDA graphs off",
    "inference_sampling_seed": "inference only",
}


@needs_checkout
def test_the_peer_builds_the_trainers_transformer_config(monkeypatch):
    """Megatron-LM's own argparse, validate_args and core_transformer_config_from_args on the peer's
    flags give the TransformerConfig the trainer builds (megalab.train.wiring), field for field but
    ALLOWED: the side by side times one model. (MoE layouts need TE installed for Megatron-LM's
    rope-fusion check.)"""
    import contextlib
    import dataclasses
    import io
    from megalab.train import wiring

    A = _megatron_lm_arguments(monkeypatch)
    for c in (
        presets.get("gpt-1.2b").replace(gpus=2, cp=2, seq=8192, mbs=1, gbs=1),
        presets.get("gpt-2.5b").replace(gpus=2, tp=2, mbs=8, gbs=8),
        presets.get("gpt-8.3b").replace(gpus=4, tp=2, sp=True, pp=2, vpp=2, mbs=1, gbs=8),
        presets.get("gpt-1.2b").replace(
            gpus=2, tp=2, sp=True, recompute="selective", recompute_modules="mlp", mbs=8, gbs=8
        ),
    ):
        monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *peer.args(peer.peer_config(c))])
        for k, v in dict(
            RANK="0", WORLD_SIZE=str(c.gpus), LOCAL_RANK="0", **peer.environment(c)
        ).items():
            monkeypatch.setenv(k, v)
        a = A.parse_args()
        with contextlib.redirect_stdout(io.StringIO()):
            A.validate_args(a)
        theirs, ours = (
            A.core_transformer_config_from_args(a),
            wiring.megatron_configs(c, dry_run=True)[1],
        )
        name = lambda v: getattr(v, "__name__", v) if callable(v) else v  # noqa: E731  functions by name
        differ = {
            f.name
            for f in dataclasses.fields(ours)
            if f.name not in ALLOWED
            and str(name(getattr(ours, f.name))) != str(name(getattr(theirs, f.name, None)))
        }
        assert differ <= {"init_method", "output_layer_init_method"}, (c.label, differ)


def test_a_profiled_peer_run_keeps_its_kernels_as_the_trainers_do(tmp_path):
    """--profile asks pretrain_gpt.py for torch.profiler over the trainer's windows into the run
    folder; its trace becomes profile.json in the trainer's format (the record keeps it), and the
    raw trace goes."""
    import json

    flags = peer.profile_args(tmp_path)
    assert flags[
        flags.index("--profile-step-start") + 1 : flags.index("--profile-step-start") + 4 : 2
    ] == ["5", "8"]
    assert flags[-1] == str(tmp_path / peer.PEER_TRACE) and "--use-pytorch-profiler" in flags
    mlm = tmp_path / "Megatron-LM"
    mlm.mkdir()
    (mlm / "pretrain_gpt.py").write_text("")
    assert (
        launch.torchrun_command(GPT12, tmp_path, extra=["--profile"], peer_dir=mlm)[-len(flags) :]
        == flags
    )
    assert "--profile" not in launch.torchrun_command(GPT12, tmp_path, peer_dir=mlm)
    assert not peer.write_profile(tmp_path)  # no trace: nothing written
    (tmp_path / peer.PEER_TRACE).mkdir()
    # killed mid-write
    (tmp_path / peer.PEER_TRACE / "host_1.1.pt.trace.json").write_text('{"traceEvents": [')
    assert not peer.write_profile(tmp_path) and not (tmp_path / "profile.json").exists()
    steps = [
        {
            "name": f"ProfilerStep#{k}",
            "ph": "X",
            "ts": 1000 * k,
            "dur": 1000,
            "cat": "user_annotation",
        }
        for k in (5, 6, 7)
    ]
    kernels = [
        {
            "name": n,
            "ph": "X",
            "ts": 1000 * k + 100,
            "dur": 200,
            "cat": "kernel",
            "args": {"stream": 7},
        }
        for k in (5, 6, 7)
        for n in ("ncclDevKernel_SendRecv", "nvjet_gemm", "flash_fwd")
    ]
    (tmp_path / peer.PEER_TRACE / "host_1.123.pt.trace.json").write_text(
        json.dumps({"traceEvents": steps + kernels})
    )
    assert peer.write_profile(tmp_path) and not (tmp_path / peer.PEER_TRACE).exists()
    out = json.loads((tmp_path / "profile.json").read_text())
    assert out["steps"] == [5, 6, 7] and out["kernel_s_per_step"]["nccl"] == pytest.approx(
        2e-4 * 3 / 3
    )
    assert [row[0] for row in out["timeline"]["kernels"]] == ["nccl", "gemm", "attention"]


def test_the_peers_launch_to_first_step_comes_from_its_own_clock():
    """Megatron-LM stamps each iteration line with the host's local time: the first one, less the
    launch time, is the peer's startup_s (none without a launch time; earlier peer records have
    none)."""
    from datetime import datetime

    # its run folder: ...-20261126T172544Z
    text = (DATA / "gpt-2.5b_pp2_mbs4_peer.log").read_text()
    cfg = peer.peer_config(presets.get("gpt-2.5b").replace(gpus=2, pp=2, mbs=4, gbs=8))
    # local time, as the host printed it
    launched = datetime(2026, 11, 26, 17, 25, 44).timestamp()
    assert peer.parse_log(text, cfg, launched_at=launched).summary == {
        "kind": "summary",
        "startup_s": 29.92,
    }
    assert peer.parse_log(text, cfg).summary is None


def test_the_knobs_of_a_fair_pair_become_megatron_lm_flags_both_ways():
    """grad_accum_fusion: auto (each runner's own) and off give --no-gradient-accumulation-fusion,
    on drops it (Megatron-LM then needs Apex); the aux coefficient and the fp32 router are passed as
    set, the same values the trainer's TransformerConfig gets."""
    dense = peer.peer_config(GPT12)
    assert "--no-gradient-accumulation-fusion" in peer.args(dense)
    assert "--no-gradient-accumulation-fusion" in peer.args(dense.replace(grad_accum_fusion="off"))
    assert "--no-gradient-accumulation-fusion" not in peer.args(
        dense.replace(grad_accum_fusion="on")
    )
    moe = peer.peer_config(presets.get("olmoe-1b-7b").replace(gpus=1, mbs=1, gbs=8))
    plain = peer.args(moe)
    assert plain[plain.index("--moe-aux-loss-coeff") + 1] == "0.01"
    assert "--moe-router-dtype" not in plain
    tuned = peer.args(moe.replace(moe_aux_coeff=0.1, moe_router_fp32=True))
    assert tuned[tuned.index("--moe-aux-loss-coeff") + 1] == "0.1"
    assert tuned[tuned.index("--moe-router-dtype") + 1] == "fp32"
    long = peer.args(moe.replace(iters=400, lr_warmup=100))
    assert long[long.index("--lr-warmup-iters") + 1] == "100"
    assert plain[plain.index("--lr-warmup-iters") + 1] == str(min(10, moe.iters // 10))


def test_sides_say_what_a_pair_shares_and_what_not():
    """peer.sides: a fair pair (fusion off) shares model, optimizer, dropout, graphs, compile and
    the fusion; init, data, batch delivery, NaN checks and the step clock differ. With the fusion at
    auto the fusion row differs too; with --data and --init megatron those rows agree."""
    fair = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=8, gbs=8, grad_accum_fusion="off")
    t = peer.sides(fair.replace(cuda_graphs="te")).set_index("setting")
    assert list(t.columns) == ["megalab", "megatron_lm", "same"]
    differ = {"initial weights", "data", "batch delivery", "NaN checks", "step time"}
    assert set(t.index[~t["same"]]) == differ
    assert "--no-gradient-accumulation-fusion" in t.loc["weight-gradient accumulation", "megalab"]
    assert "Transformer Engine captures each transformer layer" in t.loc["CUDA graphs", "megalab"]
    assert "--grad-accum-fusion off" in t.loc["weight-gradient accumulation", "megalab"]
    both = peer.sides(fair, {"none", "te"}).set_index("setting").loc["CUDA graphs"]
    assert (
        both["megalab"].startswith("none (eager); or Transformer Engine captures") and both["same"]
    )
    assert "broadcast to the other TP ranks" in t.loc["batch delivery", "megatron_lm"]
    assert peer.fusion_equal(fair) and not peer.fusion_equal(fair.replace(grad_accum_fusion="auto"))
    auto = peer.sides(fair.replace(grad_accum_fusion="auto")).set_index("setting")
    assert not auto.loc["weight-gradient accumulation", "same"]
    assert auto.loc["CUDA graphs", "megalab"] == "none (eager)"
    alike = peer.sides(fair.replace(init="megatron", data="/d/corpus", compile=False))
    alike = alike.set_index("setting")
    assert alike.loc[["initial weights", "data"], "same"].all()
    assert not alike.loc["fused elementwise ops", "same"]
    one = peer.sides(fair.replace(gpus=1, tp=1)).set_index("setting")
    assert "broadcast" not in one.loc["batch delivery", "megatron_lm"]


def test_the_mock_datas_token_frequencies_alone_give_8_12_nats():
    """Token k occurs in the documents longer than k: frequencies falling linearly, whose entropy is
    ln 4095 + 1/2 - ln 2 (the triangular density's), below the Markov chain's ln 4096."""
    import math

    nats = peer.mock_unigram_nats()
    assert nats == pytest.approx(math.log(4095) + 0.5 - math.log(2), abs=2e-3)
    assert nats < math.log(4096) - 0.19
    # lengths 1 and 2: token 1 in half the documents, an end-of-document id in each
    third = -(1 / 3) * math.log(1 / 3) - (2 / 3) * math.log(2 / 3)
    assert peer.mock_unigram_nats(3) == pytest.approx(third)
