"""megalab.train.workarounds without a GPU: every entry documented, each patch acting only where the
bug is."""

from types import SimpleNamespace

from megalab.train import workarounds


def test_every_workaround_names_its_bug_versions_and_when_to_delete_it():
    names = [w.name for w in workarounds.WORKAROUNDS]
    assert len(names) == len(set(names)) >= 5
    for w in workarounds.WORKAROUNDS:
        assert len(w.bug) > 40 and w.delete_when.strip() and w.runs in {"always", "gpu", "dry_run"}
        assert any(lib in w.versions for lib in ("megatron-core", "transformer-engine")), w.name
        assert any(ch.isdigit() for ch in w.versions) and callable(w.patch), w.name


def test_one_call_applies_what_the_run_needs(monkeypatch):
    """apply() runs every entry meant for the run's kind (a GPU run or a dry run), each deciding
    from the config whether the bug is there; nothing is patched for a config that meets none."""
    calls = []
    fake = tuple(
        workarounds.Workaround(
            lambda cfg, n=n: calls.append(n), "bug", "megatron-core 0.16.1", "never", runs=n
        )
        for n in ("always", "gpu", "dry_run")
    )
    monkeypatch.setattr(workarounds, "WORKAROUNDS", fake)
    workarounds.apply(object())
    assert calls == ["always", "gpu"]
    calls.clear()
    workarounds.apply(object(), dry_run=True)
    assert calls == ["always", "dry_run"]


def test_a_dense_run_without_recompute_or_graphs_patches_nothing():
    """The patches act only where the bug is: gpt-350m without experts, recompute or graphs meets
    none."""
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.transformer.mlp import MLP
    from megatron.core.transformer.moe import token_dispatcher
    from megalab import presets

    before = (
        MLP.forward,
        schedules.create_cudagraphs,
        token_dispatcher.permute,
        token_dispatcher.unpermute,
    )
    cfg = presets.get("gpt-350m")
    for w in workarounds.WORKAROUNDS:
        if w.runs != "dry_run":
            w.patch(cfg)
    assert (
        MLP.forward,
        schedules.create_cudagraphs,
        token_dispatcher.permute,
        token_dispatcher.unpermute,
    ) == before


def test_local_capture_forks_the_tp_rng_under_sequence_parallelism(monkeypatch):
    """Megatron's local capture runs outside TransformerBlock's TP RNG fork: under SP the wrapper
    forks around it, as TE's capture does; without SP, or with TE's capture,
    schedules.create_cudagraphs stays Megatron's."""
    import contextlib
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel import random
    from megalab import presets
    from megalab.train.workarounds import fork_rng_for_local_capture

    calls = []
    monkeypatch.setattr(schedules, "create_cudagraphs", lambda: calls.append("capture") or "graphs")
    real = schedules.create_cudagraphs

    class Tracker:
        @contextlib.contextmanager
        def fork(self):
            calls.append("fork")
            yield
            calls.append("join")

    monkeypatch.setattr(random, "get_cuda_rng_tracker", Tracker)
    c = presets.get("gpt-350m").replace(gpus=2, tp=2)
    for cfg in (
        c.replace(cuda_graphs="local"),
        c.replace(sp=True, cuda_graphs="te"),
        c.replace(sp=True),
    ):
        fork_rng_for_local_capture(cfg)
        assert schedules.create_cudagraphs is real
    fork_rng_for_local_capture(c.replace(sp=True, cuda_graphs="local"))
    # a second run in the process: one wrapper
    fork_rng_for_local_capture(c.replace(sp=True, cuda_graphs="local"))
    assert schedules.create_cudagraphs() == "graphs" and calls == ["fork", "capture", "join"]


def test_grouped_gemm_with_every_group_empty_skips_the_kernel_and_zeroes_like_te():
    """TE 2.11's CUTLASS grouped GEMM crashes when no group has work (TE pull request 3037): the
    guard answers such calls itself, as TE's loop over empty groups would, and passes every other
    call through."""
    import torch
    from megalab import presets
    from megalab.train.workarounds import guard_empty_grouped_gemm

    calls = []
    tex = SimpleNamespace(te_general_grouped_gemm=lambda *a: calls.append(a) or "real")
    moe = presets.get("olmoe-like")
    guard_empty_grouped_gemm(moe.replace(impl="local"), tex)  # no CUTLASS switch: nothing to guard
    assert not hasattr(tex.te_general_grouped_gemm, "skips_empty")
    guard_empty_grouped_gemm(moe, tex)
    guard_empty_grouped_gemm(moe, tex)  # idempotent: wrapped once
    gemm = tex.te_general_grouped_gemm
    empty, x = torch.empty(0, 4), torch.ones(3, 4)
    # weight gradients of two experts that received no token (not accumulated): zeroed, kernel
    # skipped
    wgrads, dbias = [torch.ones(4, 4), torch.ones(4, 4)], [torch.ones(4), torch.ones(4)]
    # workspace, size, accumulate, split accumulator, SMs
    tail = ([torch.empty(0)], 0, False, False, 0)
    out = gemm(
        [empty, empty],
        True,
        [empty, empty],
        False,
        wgrads,
        0,
        [0, 0],
        dbias,
        0,
        False,
        [torch.empty(0)] * 2,
        True,
        *tail,
    )
    assert out is dbias and not calls
    assert all(float(t.abs().sum()) == 0 for t in wgrads + dbias)
    # accumulating into main_grad: left as they are
    main_grads = [torch.ones(4, 4)]
    gemm(
        [empty],
        True,
        [empty],
        False,
        main_grads,
        0,
        [0],
        [torch.empty(0)],
        0,
        False,
        [torch.empty(0)],
        True,
        [torch.empty(0)],
        0,
        True,
        False,
        0,
    )
    assert float(main_grads[0].sum()) == 16 and not calls
    # one group with tokens: TE's own kernel runs
    assert (
        gemm([x, empty], True, [x, empty], False, None, 0, [3, 0], [], 0, False, [], False, *tail)
        == "real"
    )
    assert len(calls) == 1


def test_fused_unpermute_of_no_token_gives_the_zeros_the_unfused_path_gives(monkeypatch):
    """TE 2.11's fused unpermute returns an empty tensor for zero tokens (the allgather dispatcher
    then fails on a rank whose experts got none): the guard answers with restore_shape's zeros, tied
    to the graph."""
    import torch
    from megatron.core.transformer.moe import token_dispatcher
    from megalab import presets
    from megalab.train.workarounds import guard_empty_permutation

    # restored after the test
    monkeypatch.setattr(token_dispatcher, "unpermute", token_dispatcher.unpermute)
    monkeypatch.setattr(token_dispatcher, "permute", token_dispatcher.permute)
    guard_empty_permutation(presets.get("olmoe-like"))
    guard_empty_permutation(presets.get("olmoe-like"))  # wrapped once
    unpermute = token_dispatcher.unpermute
    assert unpermute.empty_ok
    empty = torch.empty(0, 8, requires_grad=True)
    out = unpermute(empty, torch.empty(0, dtype=torch.long), torch.Size([5, 8]), fused=True)
    assert out.shape == (5, 8) and not out.any()
    out.sum().backward()
    assert empty.grad is not None and empty.grad.shape == (0, 8)
    # tokens present (and the unfused path): Megatron's own unpermute, unchanged
    tokens, order = torch.arange(6.0).view(3, 2), torch.tensor([2, 0, 1])
    assert torch.equal(unpermute(tokens, order, torch.Size([3, 2])), tokens[[1, 2, 0]])


def test_fused_permute_to_no_token_takes_the_unfused_path(monkeypatch):
    """TE 2.11's fused permute to zero output tokens has a backward that reads a ctx.probs its
    forward never set (the top-2 EP 2 allgather run): such calls go through Megatron's unfused
    permute, whose backward is an ordinary index_select's. A count on the GPU is not read (no sync
    per dispatch)."""
    import torch
    from megatron.core.transformer.moe import token_dispatcher
    from megalab import presets
    from megalab.train.workarounds import guard_empty_permutation

    seen = []

    def spy(tokens, routing_map, *args, num_out_tokens=None, fused=False, **kwargs):
        seen.append(fused)
        return real(
            tokens, routing_map, *args, num_out_tokens=num_out_tokens, fused=False, **kwargs
        )

    real = token_dispatcher.permute
    monkeypatch.setattr(token_dispatcher, "permute", spy)
    monkeypatch.setattr(token_dispatcher, "unpermute", token_dispatcher.unpermute)
    guard_empty_permutation(presets.get("olmoe-like"))
    permute = token_dispatcher.permute
    tokens = torch.randn(4, 8, requires_grad=True)
    # no token routed to this rank's 2 experts
    nobody = torch.zeros(4, 2, dtype=torch.bool)
    out, _, order = permute(tokens, nobody, num_out_tokens=nobody.sum(0).sum(), fused=True)
    assert out.shape == (0, 8) and seen == [False]
    out.sum().backward()
    assert tokens.grad is not None and not tokens.grad.any()
    some = torch.tensor([[True, False], [False, True], [False, False], [True, False]])
    # tokens present: fused, as asked
    permute(tokens, some, num_out_tokens=3, fused=True)
    permute(tokens, nobody, num_out_tokens=0, fused=True)  # a Python int zero: unfused
    assert seen == [False, True, False]
