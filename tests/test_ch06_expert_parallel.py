"""Chapter 06's runs: the recorded ones keep their keys and are answered; the trainer's change is reachable."""
import pytest

import megalab
from megalab.book import chapters, recording, specs
from megalab.records import profiles
from megalab.book.chapters.ch06_expert_parallel import FUSIONS_AT
from megalab.runs.config import RunConfig

RECORDED = {"5404654363680c5c", "3b546200a489c8ab", "853fb2d327a48cde", "51de521bd37c8e86",  # dense twin; 64/128/256
            "2547fb3793f1b282", "bd59030cef75eecb",                                       # profiled: MoE, dense
            "3bc45a38c6ca2919", "edc5f2b11cdda44e", "5828b876cb1ba84b", "9db47d8076b9d5ab",  # micro-batch 2, 4
            "5a2396e3748dbd44", "215e6c5d9955a53d",                                       # moe-small EP 4 parity
            # two GPUs (session 12): DP, DP + ZeRO, EP, expert counts, dispatchers, ETP, profile, routing, parity
            "2532ac06eeea43d2", "3043c0689cec52bc", "3192cefec48c4f15", "553c2644377849bf", "5ff187f60cb42406",
            "6d953af9b783c979", "6e206ba3b25c6807", "8199203668e1cf30", "8afc6f196556ce45", "a642c90d799574ae",
            "af133b1118ed4547", "b174b0c45070d93c", "bfa166a485260bd9", "f518d9ff15d71223", "fadb2cabcc9fe713",
            # two GPUs (session 13): top-2 alltoall; the expert-count fit searches, EP and DP + ZeRO
            "3ae12886aab0857f", "8ed85accc3ed444d", "d858ebce25a67eb9",
            "f1ca48d183c285fc",                                                           # session 16: top-2 allgather
            # four GPUs (session 19): DP, DP + ZeRO (64 experts), EP 4 (64), its profiled step, EP 4 at 128 and 256,
            # DP + ZeRO at 128
            "02cc1e0b2ec6de74", "338ae99714aa151d", "5d24a878bdb96051", "655cf154d4c0d912", "b80cdd5077f8761f",
            "bb35bab4e8edbed6", "f9789288f96bdfcf",
            # four GPUs (session 20): DP + ZeRO at 256, allgather at 64/128/256, top-2 with both dispatchers, ETP 4,
            # forced and no balancing, the two fit searches, the parity
            "6cb80c8f570c5620", "d21a3e371cc1b3b8", "6a7dd65af9f96b36", "9934dc96a07bace4", "0a33b2b27290a38e",
            "2452637904e4a2ef", "1e42138e7c313b2d", "a818252a4d611e8a", "55c08db081db2a2e", "ac77274a97c9676f",
            "d6c8b14f6ba6d81c", "0813b4801339b852",
            "f06ab1d780c6f408"}                                                           # session 22: ETP 2 x EP 2


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_are_the_recorded_configs(gpus):
    assert {_cfg(i).key for i in specs.items(chapters.runs("ch06", gpus))} == RECORDED
    assert not {_cfg(i).key for i in specs.items(chapters.pending("ch06", gpus))} & RECORDED


def test_the_store_answers_every_run():
    for gpus in (2, 4):
        assert recording.plan("ch06", gpus=gpus, missing_only=True) == []
        assert recording.plan("ch06", gpus=gpus, gpu="H100", missing_only=True) == []


def test_at_four_gpus_every_layout_is_read_and_at_eight_every_one_queued():
    """Sessions 19, 20 and 22 recorded the four-GPU layouts (ETP 2 x EP 2, issue 23's ask, in session 22); the fits
    found 576 (EP 4) and 304 (DP + ZeRO) experts; at two GPUs the layout has no ETP x EP; 8 GPUs wait whole."""
    from megalab.book.chapters.ch06_expert_parallel import pending
    four = chapters.runs("ch06", 2)["layouts"][4]
    assert [(c.etp, c.ep, c.gpus) for c in four["etp_ep"]] == [(2, 2, 4)] and pending(4) == {}
    assert chapters.runs("ch06", 2)["layouts"][2]["etp_ep"] == []
    whole = {_cfg(i).key for i in specs.items(pending(4, recorded=True))}
    assert whole == {_cfg(i).key for i in specs.items(four)}
    assert recording.plan("ch06", 4, pending=True, missing_only=True) == []
    assert len(recording.plan("ch06", 8, pending=True)) > 0
    fits = {name: f.run("cached", quiet=True).largest for name, f in four["fit_experts"].items()}
    assert fits == {"EP": 576, "DP + dist. optimizer": 304}
    assert four["parity"][0].run("cached", quiet=True).passes
    assert set(pending(8)) == set(pending(8, recorded=True))


def test_micro_batch_sweep_keeps_the_global_batch():
    ch = chapters.runs("ch06", 2)
    for name in ("micro_batch", "micro_batch_dense"):
        assert {c.gbs for c in ch[name].values()} == {4} and sorted(ch[name]) == [1, 2, 4]
    assert ch["micro_batch"][1] == ch["one_gpu"][64] and ch["micro_batch_dense"][1] == ch["dense_equal_active"]


def test_the_older_trainer_is_reachable():
    """Newest records are the fused trainer's; the ones before FUSIONS_AT answer 'before' for the same configs."""
    ch = chapters.runs("ch06", 2)
    moe, dense = (p.cfg for p in ch["profile_one_gpu"])
    for cfg, profiled in ((moe, True), (dense, True), (ch["one_gpu"][64], False), (ch["dense_equal_active"], False),
                          (ch["one_gpu"][128], False)):
        old = profiles.made_before(cfg, FUSIONS_AT, profiled=profiled)
        assert old["recorded_at"] < FUSIONS_AT and old["status"] == "ok"
    new = ch["profile_one_gpu"][0].run("cached", quiet=True).record
    assert new["recorded_at"] >= FUSIONS_AT
    assert profiles.gpu_busy(new["profile"])["kernels"] < profiles.gpu_busy(
        profiles.made_before(moe, FUSIONS_AT, profiled=True)["profile"])["kernels"]


def test_both_top2_runs_are_recorded_and_nothing_at_two_gpus_is_queued():
    """The top-2 allgather run failed three times in TE 2.11 on zero tokens (sessions 12, 13 and 15); with
    megalab.train.workarounds' guards it trained (session 16): both dispatchers' top-2 runs are read at two GPUs and
    nothing there is queued; the expert-count fit searches (steps of 8 experts per EP rank) are read too."""
    from megalab.book.chapters.ch06_expert_parallel import pending
    assert pending(2) == {}
    two = chapters.runs("ch06", 2)["layouts"][2]
    assert set(two["dispatcher_topk"]) == {"alltoall", "allgather"}
    for cfg in two["dispatcher_topk"].values():
        assert cfg.topk == 2 and megalab.run(cfg, "cached", quiet=True).status == "ok"
    ep, zo = two["fit_experts"]["EP"], two["fit_experts"]["DP + dist. optimizer"]
    assert (ep.vary, ep.step, ep.cfg.ep, zo.step, zo.cfg.dist_opt) == ("experts", 16, 2, 8, True)
    assert ep.window[0] <= ep.predicted <= ep.window[1] and ep.predicted % 16 == 0
    assert (ep.run("cached", quiet=True).largest, zo.run("cached", quiet=True).largest) == (288, 224)
    assert set(pending(2, recorded=True)) >= {"dp", "ep", "routing", "parity", "dispatcher_topk", "fit_experts"}


# issue 24's chapter-06 rows of the seed tutorial's 8xH100 table, to record on 8 GPUs at global batch 32:
# (experts, ep, etp, distributed optimizer); DP 8 throughout (tp = pp = cp = 1). DP at 128 and 256 experts is read
# as the chapter's DP rows at those counts are: with the distributed optimizer (without it 256 experts cannot fit)
SEED_ROWS_8 = [(64, 1, 1, False), (64, 1, 1, True), (64, 8, 1, False),
               (128, 1, 1, True), (128, 8, 1, False), (256, 1, 1, True), (256, 8, 1, False),
               (256, 4, 2, False), (256, 2, 4, False)]


def test_every_seed_row_is_queued_at_eight_gpus_and_valid():
    """Each seed row is a plain timed run of pending(8) (top-8, alltoall, auxiliary loss), one Megatron accepts:
    with ETP, expert DP = 8 / (ep * etp)."""
    from megalab.book.chapters.ch06_expert_parallel import pending
    timed = [i for i in specs.items(pending(8)) if isinstance(i, RunConfig)]
    for experts, ep, etp, dist_opt in SEED_ROWS_8:
        found = [c for c in timed if (c.experts, c.ep, c.etp, c.dp, c.dist_opt, c.gbs, c.gpus) ==
                 (experts, ep, etp, 8, dist_opt, 32, 8) and (c.topk, c.moe_dispatcher, c.moe_balance) ==
                 (8, "alltoall", "aux_loss")]
        assert found, f"no pending(8) run for {experts} experts, EP {ep} x ETP {etp}, dist_opt={dist_opt}"
        assert all(c.problems() == [] for c in found)
