"""Tokens for the trainer: a synthetic corpus with a known loss floor, or a Megatron indexed
dataset.

Both sources are addressed by a global sample number j = step*gbs + b, so the global batch of a
step is the same set of sequences whatever the layout (dp, cp, pp, mbs): loss curves of different
layouts can be compared step by step.

Sample order. Within a step, data-parallel rank r takes, for its micro-batch k, the samples

    step*gbs + k*(mbs*dp) + r*mbs + [0, mbs)

which is Megatron-LM's `MegatronPretrainingSampler` (megatron/training/datasets/data_samplers.py):
it cuts the stream into blocks of mbs*dp and hands rank r the r-th slice of each block. (Giving each
rank a contiguous gbs/dp range would train on the same global batch too; we follow Megatron.)
Context parallelism does not change which samples a rank reads: the trainer cuts each sequence
with Megatron's `get_batch_on_this_cp_rank`. Tensor- and pipeline-parallel ranks of one replica
read the same samples (Megatron-LM broadcasts them over tp; we regenerate them, which is cheaper).

Synthetic corpus. A first-order Markov chain over A = min(vocab, 4096) token ids: every token has
K = 4 distinct successors, each with probability 1/4. It is built as a random walk h_t on Z_A with
steps drawn from 4 distinct offsets, shown through a random permutation: token x_t = perm[h_t].
Then x_{t+1} = perm[perm^-1[x_t] + d_k], so the successor table is random-looking, but a whole
sequence is one cumulative sum: generating a step's batch is vectorised numpy (a few ms for
256 x 2049 tokens), with no corpus held in memory and no sequence ever repeated. Every label has
the previous token in its context, so the best possible loss is exactly ln 4 = 1.386 nats per
token (`LOSS_FLOOR`) at every position, including the first.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

K = 4  # successors per token
ACTIVE_MAX = 4096  # the chain uses at most this many token ids
LOSS_FLOOR = math.log(K)  # nats per predicted token: entropy of a uniform choice among K

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# -- sample order ---------------------------------------------------------------------------------
def sample_ids(step: int, k: int, dp_rank: int, mbs: int, dp: int, gbs: int) -> np.ndarray:
    """Global sample numbers of micro-batch k on data-parallel rank dp_rank
    (MegatronPretrainingSampler)."""
    start = step * gbs + k * mbs * dp + dp_rank * mbs
    return np.arange(start, start + mbs, dtype=np.int64)


# -- synthetic corpus -----------------------------------------------------------------------------
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a counter-based hash, so sample j never depends on other samples."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


class Synthetic:
    """The Markov-chain corpus of a seed and vocabulary; `windows(ids)` gives samples of seq+1
    tokens."""

    def __init__(self, seed: int, vocab: int, seq: int):
        self.seed, self.seq = seed, seq
        self.active = min(vocab, ACTIVE_MAX)
        rng = np.random.default_rng([seed, 0x5EED])
        self.perm = rng.permutation(self.active).astype(np.int64)
        # K distinct non-zero offsets mod A, so the K successors of a token are distinct
        self.offsets = rng.choice(np.arange(1, self.active), size=K, replace=False).astype(np.int64)

    def successors(self, token: int) -> np.ndarray:
        """The K tokens that may follow `token` (for tests and for the book's explanation)."""
        inv = np.empty_like(self.perm)
        inv[self.perm] = np.arange(self.active)
        return np.sort(self.perm[(inv[token] + self.offsets) % self.active])

    def windows(self, ids: np.ndarray) -> np.ndarray:
        """int64 [len(ids), seq+1]: the token windows of global samples `ids`."""
        ids = np.asarray(ids, dtype=np.uint64)
        n, t = len(ids), self.seq + 1
        key = _mix(ids * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(self.seed & 0xFFFFFFFF))
        counters = key[:, None] + np.arange(t, dtype=np.uint64)[None, :]
        r = _mix(counters)
        choice = (r >> np.uint64(33)) % np.uint64(K)  # step k of the walk, uniform in [0, K)
        start = (r[:, :1] >> np.uint64(7)) % np.uint64(self.active)
        steps = self.offsets[choice.astype(np.int64)]
        steps[:, 0] = start[:, 0].astype(np.int64)  # h_0 = random start
        h = np.cumsum(steps, axis=1) % self.active
        return self.perm[h].reshape(n, t)


def synthetic_global_batch(cfg, step: int):
    """torch.int64 [gbs, seq+1]: every sequence of step `step`, in global sample order."""
    import torch

    src = Synthetic(cfg.seed, cfg.vocab, cfg.seq)
    ids = np.arange(step * cfg.gbs, (step + 1) * cfg.gbs, dtype=np.int64)
    return torch.from_numpy(src.windows(ids))


# -- batches --------------------------------------------------------------------------------------
def batch_from_windows(windows):
    """Megatron's batch dict from int64 windows [b, seq+1] (tokens, labels, loss mask,
    positions)."""
    import torch

    w = torch.as_tensor(windows, dtype=torch.int64)
    b, s = w.shape[0], w.shape[1] - 1
    return {
        "tokens": w[:, :-1].contiguous(),
        "labels": w[:, 1:].contiguous(),
        "loss_mask": torch.ones(b, s, dtype=torch.float32),
        "attention_mask": None,  # causal mask type: TE / local attention build the mask
        "position_ids": torch.arange(s, dtype=torch.int64).unsqueeze(0).expand(b, s).contiguous(),
    }


class Indexed:
    """A Megatron GPTDataset over an indexed dataset prefix; `batch(ids)` collates samples `ids`."""

    def __init__(
        self,
        prefix: str,
        cfg,
        num_samples: int,
        is_built_on_rank=lambda: True,
        cache_dir: str | None = None,
    ):
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder,
        )
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

        tok = tokenizer_for(prefix)
        config = GPTDatasetConfig(
            random_seed=cfg.seed,
            sequence_length=cfg.seq,
            blend=([prefix], None),
            split="100,0,0",
            tokenizer=tok,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            create_attention_mask=False,
            path_to_cache=cache_dir,
            mid_level_dataset_surplus=0.005,
        )
        # collective: rank 0 builds (and caches the index files) first, then the others
        self.dataset = BlendedMegatronDatasetBuilder(
            GPTDataset, [num_samples, None, None], is_built_on_rank, config
        ).build()[0]

    def batch(self, ids: np.ndarray) -> dict:
        import torch

        items = [self.dataset[int(j)] for j in ids]
        out = {
            k: torch.stack([it[k] for it in items])
            for k in ("tokens", "labels", "loss_mask", "position_ids")
        }
        out["attention_mask"] = None
        return out


def microbatches(cfg, dp_rank: int, source, device=None, first_step: int = 0):
    """Endless iterator over this dp rank's micro-batches, step after step, in Megatron's order.

    `source` is a `Synthetic` or an `Indexed`; tensors go to `device` (pinned, non-blocking copy).
    """
    step = first_step
    while True:
        for k in range(cfg.num_microbatches):
            ids = sample_ids(step, k, dp_rank, cfg.mbs, cfg.dp, cfg.gbs)
            b = (
                batch_from_windows(source.windows(ids))
                if isinstance(source, Synthetic)
                else source.batch(ids)
            )
            if device is not None and getattr(device, "type", device) != "cpu":
                b = {
                    n: (t.pin_memory().to(device, non_blocking=True) if t is not None else None)
                    for n, t in b.items()
                }
            yield b
        step += 1


# -- preparing a real corpus ----------------------------------------------------------------------
class ByteTokenizer:
    """Bytes 0..255 and an end-of-document token 256: needs no download, vocab 257."""

    vocab_size = 257
    eod = 256
    unique_identifiers = {"class": "ByteTokenizer"}

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids) -> str:
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


class _HFTokenizer:
    """A Hugging Face tokenizer from a local path, shaped like Megatron's tokenizer."""

    def __init__(self, path: str):
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise ImportError(
                f"tokenizer={path!r} needs the `transformers` package: pip install transformers, "
                "or use tokenizer='byte'"
            ) from e
        self._tok = AutoTokenizer.from_pretrained(path)
        self.vocab_size = len(self._tok)
        self.eod = self._tok.eos_token_id
        self.unique_identifiers = {"class": "HF", "path": str(path)}

    def tokenize(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False)["input_ids"]

    def detokenize(self, ids) -> str:
        return self._tok.decode(list(ids))


def _tokenizer(name: str):
    return ByteTokenizer() if name == "byte" else _HFTokenizer(name)


def tokenizer_for(prefix: str):
    """The tokenizer a prefix was prepared with (read from PREFIX.json, written by prepare_data)."""
    meta = Path(prefix + ".json")
    name = json.loads(meta.read_text())["tokenizer"] if meta.exists() else "byte"
    return _tokenizer(name)


class BadCorpus(ValueError):
    """The corpus to tokenize is missing or a line is not a JSON object with text; the message says
    where."""


def _text(line: str, key: str, where: str) -> str:
    try:
        doc = json.loads(line)
    except ValueError:
        raise BadCorpus(
            f"{where}: not JSON: each line must be an object like {{\"{key}\": \"...\"}}"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), str):
        raise BadCorpus(
            f"{where}: no text in field {key!r}: each line must be an object like "
            f"{{\"{key}\": \"...\"}}"
        )
    return doc[key]


def prepare_data(
    input_jsonl: str, output_prefix: str, tokenizer: str = "byte", text_key: str = "text"
) -> dict:
    """Tokenize a JSON-lines file into Megatron's indexed dataset (PREFIX.bin/.idx, + PREFIX.json).

    Each document ends with the tokenizer's end-of-document token, as Megatron-LM's
    tools/preprocess_data.py --append-eod does. Returns the summary also written to PREFIX.json.
    """
    import warnings

    # importing Megatron warns that its optimizers fall back: none is used here
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
        from megatron.core.datasets.indexed_dataset import (
            DType,
            IndexedDatasetBuilder,
            get_bin_path,
            get_idx_path,
        )
    if not Path(input_jsonl).is_file():
        raise BadCorpus(
            f"{input_jsonl}: no such file: pass a JSON Lines file with a {text_key!r} field per "
            f"line"
        )
    if tokenizer != "byte" and not Path(tokenizer).exists():
        raise BadCorpus(
            f"tokenizer {tokenizer!r}: pass 'byte' or the folder of a Hugging Face tokenizer"
        )
    tok = _tokenizer(tokenizer)
    try:
        Path(output_prefix).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a folder of the prefix should be, a read-only disk
        raise BadCorpus(
            f"--output-prefix {output_prefix}: cannot make its folder ({exc.strerror}): pass a "
            f"prefix "
            f"in a folder you can write"
        ) from None
    # written whole, then renamed: no half dataset under the prefix
    part = f"{output_prefix}.part{os.getpid()}"
    try:
        builder = IndexedDatasetBuilder(
            get_bin_path(part), dtype=DType.optimal_dtype(tok.vocab_size)
        )
        docs = tokens = 0
        with open(input_jsonl, "rb") as f:
            for n, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BadCorpus(
                        f"{input_jsonl}:{n}: not UTF-8 (byte {raw[exc.start]:#04x} at column "
                        f"{exc.start + 1})"
                        f": convert the file (e.g. iconv -f latin1 -t utf-8)"
                    ) from None
                if not line.strip():
                    continue
                ids = tok.tokenize(_text(line, text_key, f"{input_jsonl}:{n}")) + [tok.eod]
                builder.add_document(np.asarray(ids, dtype=np.int64), [len(ids)])
                docs, tokens = docs + 1, tokens + len(ids)
        builder.finalize(get_idx_path(part))
        os.replace(get_bin_path(part), get_bin_path(output_prefix))
        os.replace(get_idx_path(part), get_idx_path(output_prefix))
    finally:
        for leftover in (get_bin_path(part), get_idx_path(part)):
            Path(leftover).unlink(missing_ok=True)
    summary = {
        "prefix": output_prefix,
        "tokenizer": tokenizer,
        "vocab_size": tok.vocab_size,
        "eod": tok.eod,
        "documents": docs,
        "tokens": tokens,
    }
    Path(output_prefix + ".json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
