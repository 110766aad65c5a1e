"""Chapter 06's runs: the ones it reads are the same at every GPU count (tests/test_chapters.py: the
store answers them); the trainer's change is reachable."""

import pytest

import megalab
from megalab.book import chapters, specs
from megalab.records import profiles
from megalab.book.chapters.ch06_expert_parallel import FUSIONS_AT
from megalab.runs.config import RunConfig


def _cfg(item) -> RunConfig:
    return item if isinstance(item, RunConfig) else item.cfg


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_are_the_same_at_every_gpu_count(gpus):
    """The notebook reads the layouts of every recorded GPU count whatever `gpus` is; none of them
    is queued."""
    read = {_cfg(i).key for i in specs.items(chapters.runs("ch06", gpus))}
    assert read == {_cfg(i).key for i in specs.items(chapters.runs("ch06", 2))}
    assert not {_cfg(i).key for i in specs.items(chapters.pending("ch06", gpus))} & read


def test_the_four_gpu_layouts_and_what_eight_queue():
    """The four-GPU layouts hold ETP 2 x EP 2 (at two GPUs the layout has no ETP x EP), and are the
    four-GPU plan less what it queues; the fits found 576 (EP 4) and 304 (DP + ZeRO) experts; 8 GPUs
    queue their plan whole."""
    from megalab.book.chapters.ch06_expert_parallel import pending

    four = chapters.runs("ch06", 2)["layouts"][4]
    assert [(c.etp, c.ep, c.gpus) for c in four["etp_ep"]] == [(2, 2, 4)]
    assert chapters.runs("ch06", 2)["layouts"][2]["etp_ep"] == []
    whole = {_cfg(i).key for i in specs.items(pending(4, recorded=True))}
    assert whole - {_cfg(i).key for i in specs.items(pending(4))} == {
        _cfg(i).key for i in specs.items(four)
    }
    fits = {name: f.run("cached", quiet=True).largest for name, f in four["fit_experts"].items()}
    assert fits == {"EP": 576, "DP + dist. optimizer": 304}
    assert four["parity"][0].run("cached", quiet=True).passes
    assert set(pending(8)) == set(pending(8, recorded=True))


def test_micro_batch_sweep_keeps_the_global_batch():
    ch = chapters.runs("ch06", 2)
    for name in ("micro_batch", "micro_batch_dense"):
        assert {c.gbs for c in ch[name].values()} == {4} and sorted(ch[name]) == [1, 2, 4]
    assert (
        ch["micro_batch"][1] == ch["one_gpu"][64]
        and ch["micro_batch_dense"][1] == ch["dense_equal_active"]
    )


def test_the_older_trainer_is_reachable():
    """Newest records are the fused trainer's; the ones before FUSIONS_AT answer 'before' for the
    same configs."""
    ch = chapters.runs("ch06", 2)
    moe, dense = (p.cfg for p in ch["profile_one_gpu"])
    for cfg, profiled in (
        (moe, True),
        (dense, True),
        (ch["one_gpu"][64], False),
        (ch["dense_equal_active"], False),
        (ch["one_gpu"][128], False),
    ):
        old = profiles.made_before(cfg, FUSIONS_AT, profiled=profiled)
        assert old["recorded_at"] < FUSIONS_AT and old["status"] == "ok"
    new = ch["profile_one_gpu"][0].run("cached", quiet=True).record
    assert new["recorded_at"] >= FUSIONS_AT
    assert (
        profiles.gpu_busy(new["profile"])["kernels"]
        < profiles.gpu_busy(profiles.made_before(moe, FUSIONS_AT, profiled=True)["profile"])[
            "kernels"
        ]
    )


def test_both_top2_runs_are_recorded_and_nothing_at_two_gpus_is_queued():
    """The top-2 allgather run failed three times in TE 2.11 on zero tokens (sessions 12, 13 and
    15); with megalab.train.workarounds' guards it trained (session 16): both dispatchers' top-2
    runs are read at two GPUs and nothing there is queued; the expert-count fit searches (steps of 8
    experts per EP rank) are read too."""
    from megalab.book.chapters.ch06_expert_parallel import pending

    assert pending(2) == {}
    two = chapters.runs("ch06", 2)["layouts"][2]
    assert set(two["dispatcher_topk"]) == {"alltoall", "allgather"}
    for cfg in two["dispatcher_topk"].values():
        assert cfg.topk == 2 and megalab.run(cfg, "cached", quiet=True).status == "ok"
    ep, zo = two["fit_experts"]["EP"], two["fit_experts"]["DP + dist. optimizer"]
    assert (ep.vary, ep.step, ep.cfg.ep, zo.step, zo.cfg.dist_opt) == ("experts", 16, 2, 8, True)
    assert ep.window[0] <= ep.predicted <= ep.window[1] and ep.predicted % 16 == 0
    assert (ep.run("cached", quiet=True).largest, zo.run("cached", quiet=True).largest) == (
        288,
        224,
    )
    assert set(pending(2, recorded=True)) >= {
        "dp",
        "ep",
        "routing",
        "parity",
        "dispatcher_topk",
        "fit_experts",
    }


# issue 24's chapter-06 rows of the seed tutorial's 8xH100 table, to record on 8 GPUs at global
# batch 32: (experts, ep, etp, distributed optimizer); DP 8 throughout (tp = pp = cp = 1). DP at 128
# and 256 experts is read as the chapter's DP rows at those counts are: with the distributed
# optimizer (without it 256 experts cannot fit)
SEED_ROWS_8 = [
    (64, 1, 1, False),
    (64, 1, 1, True),
    (64, 8, 1, False),
    (128, 1, 1, True),
    (128, 8, 1, False),
    (256, 1, 1, True),
    (256, 8, 1, False),
    (256, 4, 2, False),
    (256, 2, 4, False),
]


def test_every_seed_row_is_queued_at_eight_gpus_and_valid():
    """Each seed row is a plain timed run of pending(8) (top-8, alltoall, auxiliary loss), one
    Megatron accepts: with ETP, expert DP = 8 / (ep * etp)."""
    from megalab.book.chapters.ch06_expert_parallel import pending

    timed = [i for i in specs.items(pending(8)) if isinstance(i, RunConfig)]
    for experts, ep, etp, dist_opt in SEED_ROWS_8:
        found = [
            c
            for c in timed
            if (c.experts, c.ep, c.etp, c.dp, c.dist_opt, c.gbs, c.gpus)
            == (experts, ep, etp, 8, dist_opt, 32, 8)
            and (c.topk, c.moe_dispatcher, c.moe_balance) == (8, "alltoall", "aux_loss")
        ]
        assert found, (
            f"no pending(8) run for {experts} experts, EP {ep} x ETP {etp}, dist_opt={dist_opt}"
        )
        assert all(c.problems() == [] for c in found)


def _neutral(cfg: RunConfig) -> RunConfig:
    """cfg with what ch06's groups vary set aside: the layout (ep, etp, distributed optimizer,
    dispatcher) and the balance."""
    return cfg.replace(ep=1, etp=1, dist_opt=False, moe_dispatcher="alltoall", moe_balance="force")


def test_the_aux_group_varies_only_layout_and_balance():
    """ch06.ep-aux (issue 44 item 4): DP 2 + distributed optimizer, EP 2 with both dispatchers and
    ETP 2 with the auxiliary loss at 0.01, then EP 2 and ETP 2 forced; distinct, valid on a 2x H200
    host with TE, fitting an H200, and otherwise ch06.ep's runs (olmoe-like, mbs 4, gbs 8, TE CUDA
    graphs). ETP 2 at TP 1 on 2 GPUs: expert TP x EP x PP = 2 tiles the world (Megatron Core's
    initialize_model_parallel), attention stays data-parallel. Two rounds, ETP 2 with the loss
    profiled."""
    from megalab import theory
    from megalab.book.chapters.ch06_expert_parallel import AUX_COEFF

    found = chapters.runs("ch06", 2)["groups"]
    forced, aux = found["ep"], found["ep_aux"]
    assert (aux.name, aux.tag, aux.rounds) == ("ch06.ep-aux", "group.ch06.ep-aux", 2)
    assert [(c.dist_opt, c.ep, c.etp, c.moe_dispatcher, c.moe_balance) for c in aux.configs] == [
        (True, 1, 1, "alltoall", "aux_loss"),
        (False, 2, 1, "alltoall", "aux_loss"),
        (False, 2, 1, "allgather", "aux_loss"),
        (False, 1, 2, "alltoall", "aux_loss"),
        (False, 2, 1, "alltoall", "force"),
        (False, 1, 2, "alltoall", "force"),
    ]
    assert len({c.key for c in aux.configs}) == len(aux.configs) <= 6
    assert {_neutral(c) for c in (*aux.configs, *forced.configs)} == {_neutral(forced.configs[0])}
    assert {c.moe_aux_coeff for c in aux.configs} == {AUX_COEFF} == {0.01}
    assert (
        aux.configs[aux.profiled].etp == 2 and aux.configs[aux.profiled].moe_balance == "aux_loss"
    )
    assert forced.configs[2] in aux.configs  # EP 2 forced: the bridge to ch06.ep
    for c in aux.configs:
        c.validate(gpus_available=2, te_available=True, gpu_name="H200")
        assert (c.gpus, c.tp, c.mbs, c.gbs, c.iters) == (2, 1, 4, 8, specs.GROUP_ITERS)
        assert c.cuda_graphs == "te" and theory.plan(c)["memory_gib"]["fits"], c.label
        assert c.gpus % (c.etp * c.ep * c.pp) == 0


def test_the_aux_group_is_planned_as_one_block_and_recorded_by_its_tag(tmp_path):
    """`megalab experiments ch06 --gpus 2 --host-gpus 2 --missing` prints ch06.ep-aux as one block
    (warm-up, A..F twice, the profiled ETP run) after ch06.ep's; records tagged ch06.ep-aux settle
    it and leave ch06.ep open, though both groups time EP 2 forced."""
    from megalab.book import recording
    from megalab.jobs.running import Store
    from run_records import record

    found = chapters.runs("ch06", 2)["groups"]
    forced, aux = found["ep"], found["ep_aux"]
    store = Store(tmp_path)
    plan = lambda: recording.plan("ch06", 2, missing_only=True, store=store, host_gpus=2)  # noqa: E731
    block, at = aux.plan_lines(), len(forced.plan_lines())
    assert plan()[at : at + len(block)] == block
    timed = [line for line in block if line.startswith(aux.tag + "! ")]
    assert block[0].startswith("warmup! ") and len(timed) == 2 * len(aux.configs) + 1
    assert block[-1] == timed[aux.profiled] + " --profile" and " --etp 2 " in block[-1]
    for i, c in enumerate(aux.configs * aux.rounds):
        store.append(record(c, tags=[aux.tag], at=f"2030-01-01T00:{i:02d}:00Z"))
    assert not recording.is_recorded(aux, store)  # no profiled run
    store.append(
        record(aux.configs[aux.profiled], tags=[aux.tag, "profile"], at="2030-01-01T00:30:00Z")
    )
    assert recording.is_recorded(aux, store) and not recording.is_recorded(forced, store)
    left = plan()
    assert left[:at] == forced.plan_lines() and not any(x.startswith(aux.tag) for x in left)


def test_the_routing_lesson_runs_eager_so_its_runs_record_routing():
    """The router's hook does not fire on a CUDA-graph replay: a lesson that reads routing refuses
    graphed MoE runs before any GPU time is spent, and ch06.routing's runs are eager."""
    from megalab.book.specs import Lesson
    from megalab.train.probes import counts_routing

    from megalab.book.chapters import ch06_expert_parallel as ch06

    lesson = ch06.runs(gpus=2)["lessons"]["routing"]
    assert lesson.needs == ("routing",) and all(counts_routing(c) for c in lesson.configs)
    graphed = [c.replace(cuda_graphs="te") for c in lesson.configs]
    with pytest.raises(ValueError, match="records no routing.*cuda_graphs='none'"):
        Lesson("ch06.routing", graphed, needs=("routing",))
    with pytest.raises(ValueError, match="only 'routing'"):
        Lesson("ch06.routing", lesson.configs, needs=("experts",))
