"""megalab.book.frame: layouts in words, the In Megatron-LM box printed from the peer's flags,
tables."""

import math

import pandas as pd
import pytest

from megalab.book import frame
from megalab.jobs import peer
from megalab.runs import presets
from megalab.runs.axes import AXES

XL = presets.get("gpt2-xl")
MOE = presets.get("moe-small")
GPT = presets.get("gpt-1.2b")  # 16 heads: TP 2 and 4 split them


@pytest.mark.parametrize(
    "cfg, words",
    [
        (XL, "1 GPU"),
        (XL.replace(gpus=4), "DP 4"),
        (XL.replace(gpus=4, dist_opt=True), "DP 4 + distributed optimizer"),
        (XL.replace(gpus=2, tp=2), "TP 2"),
        (XL.replace(gpus=2, tp=2, sp=True), "TP 2 + SP"),
        (XL.replace(gpus=4, tp=2), "TP 2 × DP 2"),
        (XL.replace(gpus=2, pp=2, vpp=4), "PP 2 × VPP 4"),
        (XL.replace(gpus=2, cp=2, cp_comm="all_gather"), "CP 2 (all-gather)"),
        (XL.replace(gpus=2, cp=2), "CP 2"),
        (MOE.replace(gpus=8, ep=4, etp=2), "EP 4 × ETP 2"),
        (MOE.replace(gpus=4, ep=4), "EP 4"),
        (MOE.replace(gpus=8, ep=2), "EP 2 × DP 4"),
        (XL.replace(recompute="full"), "1 GPU + full recomputation"),
        (XL.replace(recompute="selective"), "1 GPU + selective recomputation"),
        (
            XL.replace(recompute="selective", recompute_modules="mlp"),
            "1 GPU + selective recomputation (MLP)",
        ),
        (XL.replace(gpus=4, tp=4, sp=True, cuda_graphs="te"), "TP 4 + SP, CUDA graphs"),
        (XL.replace(gpus=4, dist_opt=True, overlap=True), "DP 4 + distributed optimizer + overlap"),
    ],
)
def test_describe_says_the_layout_in_words(cfg, words):
    assert frame.describe(cfg) == words


def test_describe_names_the_model_and_batch_only_when_asked():
    cfg = presets.get("gpt-1.2b").replace(gpus=2, tp=2, mbs=4, gbs=8)
    assert frame.describe(cfg, model=True) == "gpt-1.2b, TP 2"
    assert frame.describe(cfg, batch=True) == "TP 2, micro-batch 4, global batch 8"


def test_describe_is_never_a_run_key():
    cfg = XL.replace(gpus=8, tp=2, pp=2, vpp=2, cp=2, sp=True, dist_opt=True, recompute="full")
    words = frame.describe(cfg)
    assert words == "TP 2 + SP × PP 2 × VPP 2 × CP 2 + distributed optimizer + full recomputation"
    assert "_" not in words and cfg.label not in words


DP4 = XL.replace(gpus=4, mbs=4, gbs=64, dist_opt=True, overlap=True)
TP4 = GPT.replace(
    gpus=4, tp=4, sp=True, mbs=4, gbs=16, recompute="selective", recompute_modules="mlp"
)


def test_box_flags_are_the_peers_own():
    for cfg in (
        DP4,
        TP4,
        MOE.replace(gpus=4, ep=4, mbs=1, gbs=8, moe_dispatcher="allgather"),
        XL.replace(gpus=4, pp=2, vpp=2, cp=2, cp_comm="a2a", cuda_graphs="te", mbs=1, gbs=8),
    ):
        argv = peer.args(peer.peer_config(cfg))
        for flag, values in frame.box_flags(cfg):
            at = argv.index(flag)
            assert argv[at + 1 : at + 1 + len(values)] == values, flag
        shown = {f for f, _ in frame.box_flags(cfg)}
        # not the model's shape
        assert "--num-layers" not in shown and "--hidden-size" not in shown
        assert {"--micro-batch-size", "--global-batch-size"} <= shown


def test_box_leaves_out_sizes_of_one_and_keeps_what_the_layout_sets():
    flags = dict(frame.box_flags(DP4))
    assert "--tensor-model-parallel-size" not in flags and "--cp-comm-type" not in flags
    assert {
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    } <= set(flags)
    flags = dict(frame.box_flags(TP4))
    assert flags["--tensor-model-parallel-size"] == ["4"] and "--sequence-parallel" in flags
    assert flags["--recompute-modules"] == ["mlp"]


def test_megatron_box_is_a_myst_admonition_with_commands_flag_list_and_environment():
    box = frame.megatron_box({"DP 4 + distributed optimizer": DP4, "TP 4 + SP": TP4})
    text = box.data
    assert text.startswith(":::{admonition} In Megatron-LM") and text.rstrip().endswith(":::")
    assert "torchrun --nproc-per-node 4 pretrain_gpt.py" in text
    # TP needs it (wiring.environment)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 \\\ntorchrun" in text
    assert (
        "- `--use-distributed-optimizer` "
        "(`DistributedDataParallelConfig.use_distributed_optimizer`):" in text
    )
    assert "`ModelParallelConfig.tensor_model_parallel_size`" in text
    # the model named, the label said once
    assert "**TP 4 + SP**: gpt-1.2b on 4 GPUs" in text
    assert "(TP 4 + SP + selective" not in text
    assert "- `--num-layers`" not in text  # the list keeps the layout flags
    for block in text.split("```bash\n")[1:]:
        assert all(len(line) <= frame.WIDTH for line in block.split("```")[0].splitlines())
    html = box._repr_html_()  # JupyterLab's view: no MyST markup
    assert (
        "<li>" in html and "<pre><code" in html and ":::" not in html and "{admonition}" not in html
    )
    with pytest.raises(ValueError, match="at least one layout"):
        frame.megatron_box({})


@pytest.mark.parametrize(
    "cfg",
    [
        DP4,
        TP4,
        MOE.replace(gpus=4, ep=4, cuda_graphs="te"),
        XL.replace(gpus=4, pp=2, vpp=2, cp=2, cp_comm="a2a", fp8=True, mbs=1, gbs=8),
    ],
)
def test_the_command_is_the_peers_whole_argv_one_group_a_line(cfg):
    text = frame.command(cfg)
    lines = text.split(" \\\n")
    assert all(len(line) <= frame.WIDTH and "\\" not in line for line in lines)
    assert lines[-1].strip().startswith("--tokenizer-type") and "--mock-data" in lines[-1]
    argv = " ".join(lines).split()
    shown = frame._pairs(argv[argv.index("pretrain_gpt.py") + 1 :])
    peers = [
        (f, [frame._value(v) for v in vs])
        for f, vs in frame._pairs(peer.args(peer.peer_config(cfg)))
    ]
    assert sorted(shown) == sorted(peers)  # every flag, regrouped
    groups = [frame._group(line.split()[0]) for line in lines[len(peer.environment(cfg)) + 1 :]]
    assert groups == sorted(groups, key=list(frame.GROUPS).index)  # one group after the other
    assert {"model", "sequence", "batch", "precision", "data"} <= set(groups)


def test_float_arguments_are_short():
    assert frame._value("2.9999999999999997e-05") == "3e-05"
    assert (
        frame._value("0.0003") == "0.0003"
        and frame._value("1024") == "1024"
        and frame._value("p2p") == "p2p"
    )


def test_every_shown_flag_has_its_megatron_core_argument_and_a_line():
    assert set(frame.AXIS_DOES) == {a.short for a in AXES if a.flag}
    for flag, (mcore, does) in frame.FLAGS.items():
        assert flag.startswith("--") and mcore and does


@pytest.mark.parametrize(
    "cfg",
    [
        GPT.replace(
            gpus=4, tp=2, sp=True, dist_opt=True, overlap=True, recompute="full", impl="local"
        ),
        GPT.replace(
            gpus=4,
            pp=2,
            vpp=2,
            cp=2,
            cp_comm="a2a",
            recompute="selective",
            cuda_graphs="local",
            mbs=1,
            gbs=8,
        ),
        MOE.replace(gpus=4, ep=2, etp=2, moe_dispatcher="allgather", impl="local"),
    ],
)
def test_the_table_names_the_megatron_core_fields_the_trainer_sets(cfg):
    from megalab.train.wiring import megatron_configs

    _, model, ddp, _ = megatron_configs(cfg, dry_run=True)
    configs = {
        "TransformerConfig": model,
        "DistributedDataParallelConfig": ddp,
        "ModelParallelConfig": model,
    }
    checked = 0
    for flag, values in frame.box_flags(cfg):
        mcore = (
            frame.FLAGS[flag][0]
            if flag in frame.FLAGS
            else f"ModelParallelConfig.{frame.SIZE_FLAGS[flag].mcore}"
        )
        owner, _, field = mcore.partition(".")
        if owner in configs:
            assert hasattr(configs[owner], field), mcore
            checked += 1
    assert checked >= 3


def test_every_environment_variable_the_peer_sets_is_explained():
    for cfg in (TP4, MOE.replace(gpus=4, ep=4), XL.replace(gpus=2, cp=2)):
        for k in peer.environment(cfg):
            assert frame.ENV_DOES[k], k


def test_table_words_units_rounding_and_no_nan():
    df = pd.DataFrame(
        {
            "label": ["a_tp1", "b_tp2"],
            "step_time_s": [0.123456, float("nan")],
            "mfu": [0.412345, 0.5],
            "gpus": [1, 4],
        }
    )
    styler = frame.table(
        df, {"gpus": "GPUs", "step_time_s": ("Step (ms)", 1e3), "mfu": ("MFU (%)", 100)}
    )
    html = styler.to_html()
    assert list(styler.data.columns) == ["GPUs", "Step (ms)", "MFU (%)"]
    assert (
        "123" in html
        and "123.456" not in html
        and "41.2" in html
        and "NaN" not in html
        and "nan" not in html
    )
    assert "–" in html and "a_tp1" not in html
    missing = frame.table(df, {"step_time_s": "Step (s)"}, missing="not profiled").to_html()
    assert "not profiled" in missing and "–" not in missing
    assert math.isclose(styler.data["Step (ms)"].iloc[0], 123.456)
    assert "{:,.3f}" not in str(frame.table(df, {"mfu": "MFU"}, digits={"MFU": 1}).to_html())
    assert ">0.4<" in frame.table(df, {"mfu": "MFU"}, digits={"MFU": 1}).to_html()
    with pytest.raises(KeyError, match="no column 'nope'"):
        frame.table(df, {"nope": "Nope"})


def test_rewritten_lists_chapters_by_number():
    assert frame.REWRITTEN and all(len(c) == 2 and c.isdigit() for c in frame.REWRITTEN)
