"""megalab.theory.moe against the papers' published counts and the traffic and work Megatron Core
0.16.1's MoE layers do; and chapter 06's runs: the store answers `runs`, `pending` scales with the
GPU count."""

import pytest

from megalab import theory
from megalab.book import chapters, specs
from megalab.runs import presets
from megalab.runs.config import RunConfig
from megalab.theory import moe

# h 1024, 16 layers, seq 4096, 64 experts top-8, ffn 1024
OLMOE = presets.get("olmoe-like").replace(mbs=1, gbs=4)
TOKENS = 4096 * 1024 * 2  # one micro-batch of bf16 tokens, bytes


def test_active_params_olmoe_table1_and_mixtral():
    """Muennighoff et al. 2024 (OLMoE), Table 1: 1.3B active of 6.9B; Jiang et al. 2024 (Mixtral),
    §2: 13B of 47B."""
    olmoe, mixtral = (
        theory.params(presets.get("olmoe-1b-7b")),
        theory.params(presets.get("mixtral-8x7b")),
    )
    assert olmoe["active"] == pytest.approx(1.3e9, rel=0.02) and olmoe["total"] == pytest.approx(
        6.9e9, rel=0.01
    )
    assert mixtral["active"] == pytest.approx(13e9, rel=0.01) and mixtral["total"] == pytest.approx(
        47e9, rel=0.01
    )


def test_a_dense_mlp_of_topk_experts_has_the_active_params_and_the_flops():
    """The chapter's dense twin: ffn = topk·moe_ffn. Same FLOPs; active params differ by the router
    only."""
    dense = chapters.expert_parallel()["dense_equal_active"]
    assert theory.model_flops(dense) == theory.model_flops(OLMOE)
    assert theory.params(OLMOE)["active"] - theory.params(dense)["total"] == 16 * moe.router_params(
        OLMOE
    )
    assert moe.active_fraction(OLMOE) == pytest.approx(0.169, abs=1e-3)


def test_dispatch_bytes_alltoall_allgather_and_expert_tp():
    """alltoall: (ep−1)/ep of topk copies, dispatch + combine, forward + backward; allgather: (n−1)
    copies over n = ep·etp; expert TP all-gathers the routed tokens: (etp−1)·topk copies. Ratio
    alltoall/allgather = topk/n."""
    ep2 = OLMOE.replace(gpus=2, ep=2, gbs=8)
    assert moe.dispatch_bytes(ep2) == 4 * 0.5 * 8 * TOKENS
    assert moe.dispatch_bytes(ep2.replace(moe_dispatcher="allgather")) == 4 * 1 * TOKENS
    assert moe.dispatch_bytes(ep2, forward_passes=2) == 6 * 0.5 * 8 * TOKENS
    etp2 = OLMOE.replace(gpus=2, etp=2, gbs=8)
    assert moe.dispatch_bytes(etp2) == 4 * 1 * 8 * TOKENS
    # tp_ep group = etp·ep
    assert moe.dispatch_bytes(etp2.replace(moe_dispatcher="allgather")) == 4 * 1 * TOKENS
    for n, k in ((2, 2), (4, 2), (8, 8)):
        c = OLMOE.replace(gpus=n, ep=n, gbs=4 * n, topk=k)
        ratio = moe.dispatch_bytes(c) / moe.dispatch_bytes(c.replace(moe_dispatcher="allgather"))
        assert ratio == pytest.approx(k / n)
    c = theory.comm_bytes_per_step(etp2)
    assert c["ep"] == moe.dispatch_bytes(etp2) * 16 * 4 and c["dp"] > 0


def test_tokens_and_gemms_per_expert():
    """4096·8/64 = 512 rows per expert GEMM on one GPU; EP 2 halves the local experts and doubles
    their rows; 64 experts × 2 linears × 3 passes × 16 layers × 4 micro-batches GEMMs per step."""
    assert moe.tokens_per_expert(OLMOE) == 512
    ep2 = OLMOE.replace(gpus=2, ep=2, gbs=8)
    assert (
        moe.tokens_per_expert(ep2) == 1024
        and moe.tokens_per_expert(OLMOE.replace(gpus=2, etp=2, gbs=8)) == 1024
    )
    assert moe.expert_gemms_per_step(OLMOE) == 64 * 2 * 3 * 16 * 4
    assert moe.expert_gemms_per_step(ep2) == moe.expert_gemms_per_step(OLMOE) // 2
    assert moe.expert_gemms_per_step(OLMOE.replace(recompute="full")) == 64 * 2 * 4 * 16 * 4
    # mean of fc1 (2·512·1024·2048) and fc2
    assert moe.expert_gemm_flops(OLMOE) == 512 * 1024 * 3 * 1024
    dense = chapters.expert_parallel()["dense_equal_active"]
    assert moe.expert_gemms_per_step(dense) == 0 and moe.host_syncs_per_step(dense) == 0


def test_host_syncs_per_step():
    """3 waits per MoE layer forward unfused (1 device-to-host copy + 2 masked_select), 1 with
    permute fusion (the trainer's with Transformer Engine, the default for a TE config)."""
    assert moe.host_syncs_per_step(OLMOE, permute_fusion=False) == 3 * 16 * 4
    assert (
        moe.host_syncs_per_step(OLMOE) == 16 * 4
        and moe.host_syncs_per_step(OLMOE.replace(impl="local")) == 3 * 16 * 4
    )
    assert moe.host_syncs_per_step(OLMOE, permute_fusion=True) == 16 * 4
    assert (
        moe.host_syncs_per_step(OLMOE.replace(moe_dispatcher="allgather"), permute_fusion=True)
        == 2 * 16 * 4
    )
    assert (
        moe.host_syncs_per_step(OLMOE.replace(recompute="full"), permute_fusion=False)
        == 2 * 3 * 16 * 4
    )


def test_optimizer_and_expert_weight_traffic_follow_total_params():
    n = theory.params(OLMOE)["total"]
    assert moe.optimizer_bytes_per_step(OLMOE) == (4 + 4 + 28 + 6) * n
    dp2 = OLMOE.replace(gpus=2, gbs=8, dist_opt=True)
    assert moe.optimizer_bytes_per_step(dp2) == pytest.approx(8 * n + 34 * n / 2)
    expert = theory.params(OLMOE)["experts"]
    # wgrad accumulates into main_grad in place
    assert moe.expert_weight_bytes_per_step(OLMOE) == 12 * expert * 4
    assert (
        moe.expert_weight_bytes_per_step(OLMOE.replace(gpus=2, ep=2, gbs=8)) == 12 * expert / 2 * 4
    )


@pytest.mark.parametrize(
    "kw",
    [
        {},
        dict(gpus=2, gbs=8),
        dict(gpus=2, gbs=8, dist_opt=True),
        dict(gpus=2, gbs=8, ep=2),
        dict(gpus=2, gbs=8, etp=2),
        dict(gpus=4, gbs=16, ep=2, dist_opt=True),
    ],
)
def test_memory_by_part_adds_up_to_theory_memory(kw):
    cfg = OLMOE.replace(**kw)
    parts = moe.memory_by_part(cfg, "H200")
    assert parts["dense state"] + parts["expert state"] + parts["activations"] == pytest.approx(
        parts["total"]
    )
    assert parts["total"] == pytest.approx(theory.memory(cfg)["total"])


def test_largest_experts_brackets_the_one_gpu_records():
    """Recorded on one H200: 128 experts ran, 256 ran out of memory. EP 2 holds twice the experts
    per GPU."""
    one = moe.largest_experts(OLMOE, "H200")
    assert 128 <= one < 256 and one % 8 == 0
    assert moe.largest_experts(OLMOE.replace(gpus=2, ep=2, gbs=8), "H200") >= 2 * one
    assert moe.largest_experts(OLMOE, "H100") < one


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_chapter_runs_are_recorded_and_pending_scales(gpus):
    """runs(): only what the store answers; pending(): valid layouts up to `gpus`, none above."""
    from megalab.book import recording

    for item in specs.items(chapters.expert_parallel(gpus)):
        assert recording.is_recorded(item)
    queued = list(specs.items(chapters.pending("ch06", gpus)))
    assert bool(queued) == (gpus > 4)  # one, two and four GPUs: every run is recorded
    for item in queued:
        cfg = item if isinstance(item, RunConfig) else item.cfg
        cfg.validate()
        assert cfg.gpus <= gpus
    # the layouts the notebook predicts at `gpus` (at 4, EP 4 itself is recorded, not queued)
    if gpus > 2:
        from megalab.book.chapters.ch06_expert_parallel import pending

        assert pending(gpus, recorded=True)["ep"][-1].ep == gpus
