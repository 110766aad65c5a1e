"""The trainer's data: the same global batch in every layout, a known loss floor, real data round
trip."""

import hashlib
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from megalab import data
from megalab.runs.config import RunConfig

CFG = RunConfig(layers=2, hidden=64, heads=4, vocab=1024, seq=32, gbs=16, mbs=1, gpus=1)


def _global_batch_from_ranks(cfg, step: int) -> torch.Tensor:
    """Every dp rank's micro-batches of `step`, put back in global sample order."""
    src = data.Synthetic(cfg.seed, cfg.vocab, cfg.seq)
    rows = {}
    for r in range(cfg.dp):
        it = data.microbatches(cfg, r, src, first_step=step)
        for k in range(cfg.num_microbatches):
            b = next(it)
            window = torch.cat([b["tokens"], b["labels"][:, -1:]], dim=1)
            for i, j in enumerate(data.sample_ids(step, k, r, cfg.mbs, cfg.dp, cfg.gbs)):
                rows[int(j)] = window[i]
    return torch.stack([rows[j] for j in sorted(rows)])


@pytest.mark.parametrize("dp", [1, 2, 4])
@pytest.mark.parametrize("mbs", [1, 2, 4])
def test_global_batch_is_layout_independent(dp, mbs):
    cfg = CFG.replace(gpus=dp, mbs=mbs)
    for step in (0, 3):
        assert torch.equal(
            _global_batch_from_ranks(cfg, step), data.synthetic_global_batch(CFG, step)
        )


def test_sample_order_is_megatrons_sampler():
    # MegatronPretrainingSampler: blocks of mbs*dp samples, rank r takes slice [r*mbs, (r+1)*mbs)
    assert data.sample_ids(step=1, k=0, dp_rank=1, mbs=2, dp=2, gbs=8).tolist() == [10, 11]
    assert data.sample_ids(step=1, k=1, dp_rank=0, mbs=2, dp=2, gbs=8).tolist() == [12, 13]


def test_batch_fields():
    b = next(data.microbatches(CFG.replace(mbs=2, gbs=2), 0, data.Synthetic(1, 1024, 32)))
    assert b["tokens"].shape == b["labels"].shape == b["position_ids"].shape == (2, 32)
    assert torch.equal(b["tokens"][:, 1:], b["labels"][:, :-1])
    assert b["loss_mask"].dtype == torch.float32 and bool((b["loss_mask"] == 1).all())
    assert b["attention_mask"] is None and torch.equal(b["position_ids"][1], torch.arange(32))


@pytest.fixture(scope="module")
def one_process_group(tmp_path_factory):
    """Megatron's CP split reads the group only once torch.distributed is up: a 1-process gloo
    group."""
    if not torch.distributed.is_initialized():
        store = tmp_path_factory.mktemp("pg") / "store"
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{store}", rank=0, world_size=1
        )
    yield
    torch.distributed.destroy_process_group()


class _Group:  # what get_batch_on_this_cp_rank asks of a process group
    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


@pytest.mark.parametrize("cp", [1, 2])
def test_context_parallel_shards_reassemble(cp, one_process_group):
    from megatron.core.utils import get_batch_on_this_cp_rank

    full = data.batch_from_windows(data.synthetic_global_batch(CFG, 0))
    parts = [
        get_batch_on_this_cp_rank(
            {k: (v.clone() if v is not None else None) for k, v in full.items()},
            cp_group=_Group(cp, r),
        )
        for r in range(cp)
    ]
    s = CFG.seq // (2 * cp)  # 2*cp chunks; rank r holds chunks r and 2cp-1-r (causal load balance)
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        chunks = [None] * (2 * cp)
        for r, p in enumerate(parts):
            assert p[key].shape[1] == CFG.seq // cp
            chunks[r], chunks[2 * cp - 1 - r] = p[key][:, :s], p[key][:, s:]
        assert torch.equal(torch.cat(chunks, dim=1), full[key])


def test_markov_chain_has_the_documented_loss_floor():
    assert data.LOSS_FLOOR == pytest.approx(math.log(4))
    src = data.Synthetic(CFG.seed, 50304, 256)
    assert src.active == 4096
    w = src.windows(np.arange(512))
    prev, nxt = w[:, :-1].ravel(), w[:, 1:].ravel()
    for tok in np.unique(prev)[:50]:  # every successor is one of the K, each about 1/K of the time
        follow = nxt[prev == tok]
        assert set(follow.tolist()) <= set(src.successors(int(tok)).tolist())
    # conditional entropy estimated over all transitions: ln K (sampling noise only)
    pairs = prev * src.active + nxt
    _, pair_counts = np.unique(pairs, return_counts=True)
    _, prev_counts = np.unique(prev, return_counts=True)
    n = len(prev)
    h = (
        -(pair_counts * np.log(pair_counts)).sum() / n
        + (prev_counts * np.log(prev_counts)).sum() / n
    )
    assert h == pytest.approx(data.LOSS_FLOOR, abs=0.05)
    assert len(np.unique(src.successors(7))) == data.K


def test_same_batch_in_another_process():
    code = (
        "import hashlib; from megalab import data; from megalab.runs.config import RunConfig; "
        "c = RunConfig(vocab=1024, seq=32, gbs=16); "
        "print(hashlib.sha256(data.synthetic_global_batch(c, 5).numpy().tobytes()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = hashlib.sha256(data.synthetic_global_batch(CFG, 5).numpy().tobytes()).hexdigest()
    assert out.stdout.strip() == here


def test_prepare_data_round_trip(tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    docs = ["hello world", "Megatron ✓ bytes", "x" * 300]
    src = tmp_path / "corpus.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    summary = data.prepare_data(str(src), str(tmp_path / "out" / "corpus"))
    assert summary["documents"] == 3 and summary["eod"] == 256
    ds = IndexedDataset(str(tmp_path / "out" / "corpus"))
    tok = data.ByteTokenizer()
    assert len(ds) == 3
    for i, text in enumerate(docs):
        ids = ds[i]
        assert ids[-1] == tok.eod and tok.detokenize(ids) == text

    cfg = CFG.replace(seq=16, gbs=4, data=str(tmp_path / "out" / "corpus"))
    indexed = data.Indexed(cfg.data, cfg, num_samples=8, cache_dir=str(tmp_path / "cache"))
    b = next(data.microbatches(cfg.replace(mbs=2), 0, indexed))
    assert b["tokens"].shape == (2, 16) and torch.equal(b["tokens"][:, 1:], b["labels"][:, :-1])
    assert int(b["tokens"].max()) <= 256 and b["attention_mask"] is None
