"""Theory against the papers' published numbers (table or equation cited in each test), and
parameter counts against what Megatron Core 0.16.1 actually builds on CPU."""

import json
import math
import socket

import pytest

from megalab import theory
from megalab.runs import presets
from megalab.runs.config import RunConfig

# Shoeybi et al. 2019, Table 1 (vocab 51200, seq 1024): (heads, hidden, layers, published params)
SHOEYBI = {
    "1.2B": (16, 1536, 40, 1.2e9),
    "2.5B": (20, 1920, 54, 2.5e9),
    "4.2B": (24, 2304, 64, 4.2e9),
    "8.3B": (32, 3072, 72, 8.3e9),
}
GPT3 = RunConfig(name="gpt-175b", layers=96, hidden=12288, heads=96, vocab=51200, seq=2048)


def gpt(**kw):
    return RunConfig(name="t", layers=4, hidden=64, heads=4, vocab=1024, seq=32).replace(**kw)


# -- parameters -----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SHOEYBI)
def test_params_shoeybi_table1(size):
    """Shoeybi et al. 2019, Table 1: 1.2B, 2.5B, 4.2B, 8.3B within 3%."""
    a, h, L, published = SHOEYBI[size]
    cfg = RunConfig(name=size, layers=L, hidden=h, heads=a, vocab=51200, seq=1024)
    assert theory.params(cfg)["total"] == pytest.approx(published, rel=0.03)


def test_params_classic_closed_form():
    """Narayanan et al. 2021 §3.2 (approximately 12·L·h² + V·h): exact closed form with
    biases/norms."""
    L, h, V, s = 4, 64, 1024, 32
    cfg = gpt(vocab=V)
    per_layer = 12 * h * h + 13 * h  # QKV 3h²+3h, proj h²+h, fc1 4h²+4h, fc2 4h²+h, 2 LayerNorms 4h
    assert theory.params(cfg)["total"] == L * per_layer + V * h + s * h + 2 * h


def test_params_per_rank_layout():
    """Megatron rank order tp-cp-ep-dp-pp: stage = rank // (tp·cp·dp); tied copy on the last
    stage."""
    cfg = gpt(gpus=8, tp=2, pp=2)
    per_rank = theory.params_per_rank(cfg)
    assert (
        len(per_rank) == 8
        and per_rank[:4] == [per_rank[0]] * 4
        and per_rank[4:] == [per_rank[4]] * 4
    )
    first, last = theory.params_per_stage(cfg)
    h, V = 64, 1024
    # positions on the first stage, final LayerNorm on the last
    assert first - last == 32 * h - 2 * h
    untp = cfg.replace(tp=1, gpus=4)
    # + the tied copy
    assert sum(theory.params_per_stage(untp)) == theory.params(untp)["total"] + V * h


def test_vocab_not_padded_per_tp():
    """The vocabulary is the one the trainer builds: cfg.vocab, the same for every tp."""
    assert theory.params(gpt(vocab=50304, tp=4, gpus=4))["embedding"] == 50304 * 64


def test_moe_active_params():
    cfg = gpt(experts=8, topk=2, activation="swiglu", norm="RMSNorm")
    p = theory.params(cfg)
    assert p["total"] - p["active"] == 4 * 6 * 3 * 64 * 256  # 4 layers × 6 idle experts × 3·h·ffn


# -- FLOPs ----------------------------------------------------------------------------------------
def test_flops_narayanan_eq3():
    """Narayanan et al. 2021 eq. (3): 72·B·s·L·h²(1 + s/6h + V/12hL); full recompute
    96·(…+V/16hL)."""
    cfg = GPT3.replace(gbs=1536)
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    model = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    hardware = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * h * L))
    assert theory.flops_per_step(cfg, causal=False) == pytest.approx(model, rel=1e-12)
    assert theory.flops_per_step(cfg, recompute="full", causal=False) == pytest.approx(
        hardware, rel=1e-12
    )


def test_flops_megatron_causal():
    """Megatron-LM core_v0.16.1 num_floating_point_operations halves QKᵀ/AV for the causal mask."""
    cfg = gpt(gbs=8)
    B, s, L, h, V = 8, 32, 4, 64, 1024
    causal = 72 * B * s * L * h**2 * (1 + s / (12 * h) + V / (12 * h * L))
    assert theory.flops_per_step(cfg) == pytest.approx(causal, rel=1e-12)


def test_flops_gqa_swiglu_moe_general_form():
    """The general per-token form (GQA kv projections, SwiGLU 3 matrices, topk experts)."""
    h, a, g, ffn, s, L, V = 64, 8, 2, 96, 32, 2, 1024
    cfg = gpt(
        layers=L,
        heads=a,
        query_groups=g,
        ffn=ffn,
        activation="swiglu",
        norm="RMSNorm",
        experts=4,
        topk=2,
        moe_ffn=48,
        gbs=2,
    )
    attn = 2 * h * (h + 2 * h * g / a) + 2 * h * h + 2 * h * s
    mlp = 2 * 3 * h * 48 * 2
    assert theory.flops_per_step(cfg) == pytest.approx(2 * s * (3 * L * (attn + mlp) + 6 * h * V))


def test_training_time_narayanan_eq4():
    """Narayanan et al. 2021 §5.1, eq. (4) ≈ 8TP/(nX): GPT-3 175B on 300B tokens, 1024 A100s at
    140 TFLOP/s ≈ 34 days; from our hardware FLOPs (full recompute) per token."""
    per_token = theory.flops_per_step(GPT3.replace(gbs=1), recompute="full", causal=False) / 2048
    days = 300e9 * per_token / (1024 * 140e12) / 86400
    assert days == pytest.approx(34, rel=0.05)


def test_mfu_and_tflops():
    cfg = gpt(gbs=8, gpus=2)
    t = theory.flops_per_step(cfg) / 2 / 494.5e12  # half the H200 peak per GPU
    assert theory.tflops_per_gpu(cfg, t) == pytest.approx(494.5)
    assert theory.mfu(cfg, t, gpu="NVIDIA H200") == pytest.approx(0.5)


# -- memory ---------------------------------------------------------------------------------------
def test_zero_rajbhandari_fig1():
    """Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, Nd = 64, K = 12: 120 → 31.4 → 16.6 → 1.9 GB."""
    gb = [theory.zero_memory(7.5e9, 64, stage) / 1e9 for stage in range(4)]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


def test_activations_korthikanti_table2():
    """Korthikanti et al. 2022, Table 2, per layer in units of s·b·h (GPT-3 175B, t = 8; trained
    with dropout, whose 1-byte masks are in the 34)."""
    cfg = GPT3.replace(tp=8, gpus=8, impl="local", dropout=0.1)
    sbh, t, a, s, h = 2048 * 1 * 12288, 8, 96, 2048, 12288
    unit = lambda **kw: theory.activation_bytes_per_layer(cfg.replace(**kw), "materialized") / sbh
    assert unit(tp=1, gpus=1) == pytest.approx(34 + 5 * a * s / h)
    assert unit() == pytest.approx(10 + 24 / t + 5 * a * s / (h * t))
    assert unit(sp=True) == pytest.approx((34 + 5 * a * s / h) / t)
    assert unit(recompute="selective") == pytest.approx(10 + 24 / t)
    assert unit(sp=True, recompute="selective") == pytest.approx(34 / t)
    assert unit(recompute="full") == pytest.approx(2)
    # §5 / Fig. 7: sequence parallelism + selective recomputation cut activations ~5× versus TP
    # alone
    assert unit() / unit(sp=True, recompute="selective") == pytest.approx(5, rel=0.1)


def test_without_dropout_no_masks_are_kept():
    """At dropout 0 PyTorch's dropout returns its input: the two 1-byte hidden-dropout masks of
    Table 2's 34 are not kept (34 -> 32 units of s·b·h per layer), and SP splits the 8 that
    remain."""
    cfg = GPT3.replace(impl="te")
    sbh = 2048 * 12288
    with_dropout = theory.activation_bytes_per_layer(cfg.replace(dropout=0.1)) / sbh
    assert with_dropout == pytest.approx(34) and theory.activation_bytes_per_layer(
        cfg
    ) / sbh == pytest.approx(32)
    sp = cfg.replace(tp=8, gpus=8, sp=True)
    assert theory.activation_terms(sp)["replicated"] / sbh == pytest.approx(8 / 8)


def test_flash_attention_drops_scores():
    cfg = GPT3.replace(tp=8, gpus=8)
    assert theory.memory(cfg)["attention"] == "flash"
    assert theory.activation_bytes_per_layer(cfg) == theory.activation_bytes_per_layer(
        cfg, "materialized", recompute="selective"
    )


def test_model_state_megatron_bytes_per_param():
    """Megatron-LM theoretical_memory_usage.py: 18 bytes/param; 6 + 12/d with the distributed
    optimizer."""
    cfg = gpt(gpus=4, mbs=1, gbs=4)
    n = theory.params_per_stage(cfg)[0]
    m = theory.memory(cfg)
    assert (m["weights"] + m["grads"] + m["optimizer"]) * 2**30 == pytest.approx(18 * n)
    m = theory.memory(cfg.replace(dist_opt=True))
    assert (m["weights"] + m["grads"] + m["optimizer"]) * 2**30 == pytest.approx((6 + 12 / 4) * n)


def test_pipeline_in_flight():
    """1F1B: stage 0 holds min(pp, m) micro-batches of L/pp layers; interleaved: Megatron's penalty
    L·(1 + (pp−1)/(pp·v)) (theoretical_memory_usage.py; Narayanan et al. 2021 §2.2.2)."""
    cfg = gpt(layers=16, gpus=4, pp=4, gbs=16)
    assert theory.layers_in_flight(cfg) == 16
    assert theory.layers_in_flight(cfg.replace(gbs=2)) == 8
    assert theory.layers_in_flight(cfg, stage=3) == 4
    assert theory.layers_in_flight(cfg.replace(vpp=2)) == pytest.approx(16 * (1 + 3 / 8))


def test_memory_fits_and_stage():
    cfg = gpt(gpus=2, pp=2, gbs=4)
    m = theory.memory(cfg, gpu="H100")
    assert m["capacity"] == 80 and m["fits"] and m["stage"] in (0, 1)


# -- bubble, communication, plan ------------------------------------------------------------------
def test_bubble_fraction_narayanan():
    """Narayanan et al. 2021 §2.2: (p−1)/m; interleaved (p−1)/(v·m)."""
    cfg = gpt(layers=8, gpus=4, pp=4, gbs=8)
    assert theory.bubble_fraction(cfg) == pytest.approx(3 / 8)
    assert theory.bubble_fraction(cfg.replace(vpp=2)) == pytest.approx(3 / 16)
    assert theory.bubble_fraction(cfg.replace(pp=1)) == 0


def test_comm_tp_four_allreduces_per_layer():
    """Shoeybi et al. 2019 §3: 2 all-reduces forward + 2 backward per layer. SP: each all-reduce
    becomes a reduce-scatter + all-gather of the same bytes, and the backward pass all-gathers the
    two column-parallel inputs again (Korthikanti et al. 2022 §4.2.2): 1.25x TP's bytes, which
    chapter 3's profiled TP 2 + SP step shows as about 6 more NCCL kernels per layer than TP's, not
    4."""
    cfg = gpt(gpus=4, tp=4, gbs=2)
    ar = 2 * 3 / 4 * 32 * 1 * 64 * 2  # ring all-reduce of (s, b, h) bf16 over 4 GPUs
    assert theory.comm_bytes_per_step(cfg)["tp"] == pytest.approx(4 * ar * 4 * 2)
    ag = 3 / 4 * 32 * 1 * 64 * 2  # ring all-gather of the same activation: half an all-reduce
    assert theory.comm_bytes_per_step(cfg.replace(sp=True))["tp"] == pytest.approx(
        (4 * ar + 2 * ag) * 4 * 2
    )
    assert theory.comm_bytes_per_step(cfg.replace(sp=True))["tp"] == pytest.approx(
        1.25 * theory.comm_bytes_per_step(cfg)["tp"]
    )
    assert theory.comm_bytes_per_step(cfg.replace(recompute="full"))["tp"] == pytest.approx(
        6 * ar * 4 * 2
    )


def test_comm_dp_allreduce_and_dist_opt():
    """Ring all-reduce 2(d−1)/d of fp32 grads; distributed optimizer RS(fp32) + AG(bf16):
    6(d−1)/d."""
    cfg = gpt(gpus=4, gbs=4)
    n = theory.params(cfg)["total"]
    assert theory.comm_bytes_per_step(cfg)["dp"] == pytest.approx(2 * 3 / 4 * 4 * n)
    assert theory.comm_bytes_per_step(cfg.replace(dist_opt=True))["dp"] == pytest.approx(
        3 / 4 * 6 * n
    )
    assert theory.comm_bytes_per_step(cfg.replace(gpus=1))["total"] == 0


def test_comm_pp_cp_ep_nonzero_only_when_used():
    c = theory.comm_bytes_per_step(gpt(gpus=2, pp=2, gbs=4))
    assert c["pp"] == 2 * 32 * 64 * 2 * 4 and c["cp"] == c["ep"] == 0
    c = theory.comm_bytes_per_step(gpt(gpus=2, cp=2, gbs=2))
    assert c["cp"] == 3 * 1 * 2 * 16 * 64 * 2 * 4 * 2  # 3 hops·(cp−1) × KV(2·s/cp·b·h·2B) × L × m
    c = theory.comm_bytes_per_step(gpt(gpus=2, ep=2, experts=4, gbs=2))
    assert c["ep"] > 0 and c["total"] == pytest.approx(sum(v for k, v in c.items() if k != "total"))


def test_plan_payload():
    cfg = gpt(gpus=4, tp=2, pp=2, mbs=2, gbs=8)
    p = theory.plan(cfg, gpu="H200")
    assert p["layout"] == "TP(2)·PP(2)·CP(1)·EP(1)·DP(1)" and p["world_size"] == 4
    assert set(p["memory_gib"]) >= {"weights", "grads", "optimizer", "activations", "total"}
    est = p["step_time_estimate"]
    assert est["total_s"] == pytest.approx(est["compute_s"] + est["bubble_s"] + est["comm_s"])
    json.dumps(p)  # the CLI prints it as JSON


# -- Megatron Core 0.16.1 builds the model we count -----------------------------------------------
def _build_counts(cfgs):
    """On this rank: parameters of the model Megatron Core builds for each cfg (local spec, CPU)."""
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    counts = []
    for cfg in cfgs:
        ps.initialize_model_parallel(
            cfg.tp,
            cfg.pp,
            cfg.vpp if cfg.vpp > 1 else None,
            context_parallel_size=cfg.cp,
            expert_model_parallel_size=cfg.ep,
            expert_tensor_parallel_size=cfg.etp,
        )
        moe = (
            dict(
                num_moe_experts=cfg.experts,
                moe_router_topk=cfg.topk,
                moe_ffn_hidden_size=cfg.moe_ffn_size,
            )
            if cfg.experts
            else {}
        )
        tc = TransformerConfig(
            num_layers=cfg.layers,
            hidden_size=cfg.hidden,
            num_attention_heads=cfg.heads,
            num_query_groups=cfg.groups,
            ffn_hidden_size=cfg.ffn_size,
            normalization=cfg.norm,
            add_bias_linear=theory.has_bias(cfg),
            gated_linear_unit=cfg.activation == "swiglu",
            activation_func=F.silu if cfg.activation == "swiglu" else F.gelu,
            tensor_model_parallel_size=cfg.tp,
            pipeline_model_parallel_size=cfg.pp,
            virtual_pipeline_model_parallel_size=cfg.vpp if cfg.vpp > 1 else None,
            expert_model_parallel_size=cfg.ep,
            expert_tensor_parallel_size=cfg.etp,
            use_cpu_initialization=True,
            pipeline_dtype=torch.float32,
            **moe,
        )
        spec = get_gpt_layer_local_spec(num_experts=cfg.experts or None, normalization=cfg.norm)
        n = 0
        for v in range(cfg.vpp):
            vp = v if cfg.vpp > 1 else None
            model = GPTModel(
                tc,
                spec,
                vocab_size=cfg.vocab,
                max_sequence_length=cfg.seq,
                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
                share_embeddings_and_output_weights=cfg.tied_embeddings,
                vp_stage=vp,
                position_embedding_type="learned_absolute" if cfg.position == "learned" else "rope",
            )
            n += sum(p.numel() for p in model.parameters())
        counts.append(n)
        ps.destroy_model_parallel()
    return counts


def _worker(rank, world, port, cfgs, out):
    from megalab.train import imports

    imports.load_less()  # Megatron's import without torch._dynamo's, as the trainer imports it
    import torch

    # Tied embeddings with pp > 1: Megatron all-reduces the last stage's copy after `.cuda()`
    # (language_module.setup_embeddings_and_output_layer); on CPU keep the tensor where it is.
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.distributed.init_process_group(
        "gloo", world_size=world, rank=rank, init_method=f"tcp://127.0.0.1:{port}"
    )
    counts = _build_counts(cfgs)
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(counts, f)
    torch.distributed.destroy_process_group()


LLAMA = dict(norm="RMSNorm", activation="swiglu", position="rope", tied_embeddings=False)
MOE = dict(experts=4, topk=2, moe_ffn=48, **LLAMA)
# One world of 2 gloo processes builds them all; dp=2 layouts stand for the one-GPU model.
MEGATRON_CASES = {
    "dense": gpt(layers=2, gpus=2),  # GPT: LayerNorm, gelu, biases, learned positions, tied
    # GQA, SwiGLU, RoPE, untied
    "llama": gpt(layers=2, gpus=2, heads=8, query_groups=2, ffn=96, **LLAMA),
    "moe": gpt(layers=2, gpus=2, **MOE),
    "tp2": gpt(gpus=2, tp=2, vocab=1000),  # not a multiple of 128·tp: built as is
    "pp2_vpp2": gpt(gpus=2, pp=2, vpp=2),  # tied copy of the embeddings on the last stage
    "llama_tp2": gpt(gpus=2, tp=2, heads=8, query_groups=2, ffn=96, **LLAMA),
    "llama_pp2": gpt(gpus=2, pp=2, **LLAMA),
    "moe_ep2": gpt(gpus=2, layers=2, ep=2, **MOE),
    "moe_etp2": gpt(gpus=2, layers=2, etp=2, **MOE),
    # LayerNorm/gelu experts with biases
    "moe_bias_ep2": gpt(gpus=2, layers=2, ep=2, experts=4, topk=2),
}


@pytest.fixture(scope="module")
def megatron_counts(tmp_path_factory):
    """Per case, the per-rank parameter counts Megatron Core builds (2 gloo processes on CPU)."""
    pytest.importorskip("megatron.core")
    import torch.multiprocessing as mp

    out, cfgs = tmp_path_factory.mktemp("megatron"), list(MEGATRON_CASES.values())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(2, port, cfgs, str(out)), nprocs=2)
    per_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return {name: [per_rank[r][i] for r in range(2)] for i, name in enumerate(MEGATRON_CASES)}


@pytest.mark.megatron
@pytest.mark.parametrize("case", ["dense", "llama", "moe"])
def test_params_equal_megatron(megatron_counts, case):
    """Whole-model count equals Megatron Core's GPTModel (local spec; TE fuses norms: same
    count)."""
    cfg = MEGATRON_CASES[case]
    assert megatron_counts[case] == [theory.params(cfg)["total"]] * 2


@pytest.mark.megatron
@pytest.mark.parametrize("case", list(MEGATRON_CASES))
def test_params_per_rank_equal_megatron(megatron_counts, case):
    """TP shards, PP(×VPP) stages with the tied-embedding copy, GQA with tp, EP and ETP experts,
    biases."""
    assert megatron_counts[case] == theory.params_per_rank(MEGATRON_CASES[case])


def test_hardware_flops_recompute_order():
    cfg = gpt(gbs=4)
    none, sel, full = (theory.flops_per_step(cfg, recompute=r) for r in (None, "selective", "full"))
    assert none < sel < full and math.isclose(theory.model_flops(cfg), none)


def test_comm_by_axis_adds_up_to_the_step_estimates_exposed_communication():
    """search reads the roofline's communication per axis from theory.comm_by_axis_s: the same
    bytes, bandwidth fallback and overlap rule as step_time_estimate's comm_s."""
    for overlap in (False, True):
        # dp 2
        cfg = presets.get("gpt-1.2b").replace(gpus=8, tp=2, pp=2, mbs=2, gbs=16, overlap=overlap)
        for bw in (None, 200.0):
            by_axis = theory.comm_by_axis_s(cfg, "H200", bus_bw=bw)
            assert (
                set(by_axis) == {"tp", "dp", "cp", "pp", "ep"} and (by_axis["dp"] == 0.0) == overlap
            )
            assert sum(by_axis.values()) == pytest.approx(
                theory.step_time_estimate(cfg, "H200", bus_bw=bw)["comm_s"]
            )


def test_layout_words_names_the_axes_above_one():
    """The prose name of a layout: TP (+ SP), PP, VPP, CP, EP in that order, only those above 1;
    else DP or `alone`."""
    from megalab.runs import presets

    c = presets.get("gpt-350m")
    assert (
        theory.layout_words(c.replace(gpus=4, tp=2, sp=True, pp=2, vpp=3))
        == "TP 2 + SP × PP 2 × VPP 3"
    )
    assert theory.layout_words(c.replace(gpus=4, cp=2, ep=2, experts=4)) == "CP 2 × EP 2"
    assert (
        theory.layout_words(c.replace(gpus=2)) == "DP 2"
        and theory.layout_words(c, alone="1 GPU") == "1 GPU"
    )
