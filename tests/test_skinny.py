"""The skinny linear kernel (runners/skinny.py, kernels/skinny.c): F.linear's values on every shape, a row's result
independent of the block it came in, verify blocks routed to it inside optimum-uag's forwards with the tokens of the
model's own generate(), and a machine without a compiler keeping its kernels with one warning."""
import warnings

import pytest
import torch

from optimum_uag import assisted_generate
from optimum_uag.runners import packed as packing
from optimum_uag.runners import skinny

from helpers import skip_or_fail_in_ci, tiny_llama

pytestmark = pytest.mark.skipif(skinny.instruction_set() is None, reason="the kernel needs AVX-512F or AVX2 + FMA")


@pytest.fixture
def built():
    """The kernel built here (a machine without a C compiler skips, except in CI, where it fails)."""
    if not skinny.available():
        skip_or_fail_in_ci(f"the skinny kernel could not be built: {skinny._STATE.get('error')}")

def _same_tokens(target, draft, ids, new_tokens: int, k: int) -> torch.Tensor:
    """Target-only greedy and assisted_generate (a fixed chain of k) on `ids`: the same tokens (returned)."""
    ref = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new_tokens,
                          pad_token_id=0, eos_token_id=None)
    out = assisted_generate(target, draft, ids, torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                            num_assistant_tokens=k, draft_policy="fixed", eos_token_id=None, pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    return ref


ISAS = [isa for isa in ("avx512", "avx2") if skinny.instruction_set() == "avx512" or isa == "avx2"]
SHAPES = [(576, 576, False), (100, 37, True), (49, 130, True), (1000, 64, False), (7, 3, True)]


@pytest.mark.parametrize("isa", ISAS)
def test_the_kernel_equals_f_linear_and_a_row_does_not_depend_on_its_block(isa, built):
    lib = skinny.load(isa)
    gen = torch.Generator().manual_seed(0)
    for out_features, in_features, has_bias in SHAPES:
        weight = torch.randn(out_features, in_features, generator=gen)
        bias = torch.randn(out_features, generator=gen) if has_bias else None
        kernel = skinny.SkinnyWeight(weight, bias, lib=lib)
        for rows in (1, 2, 3, 4, 5, 8, 9, 13, 17, 33):
            x = torch.randn(2, rows, in_features, generator=gen)
            got = kernel(x)
            assert got.shape == (2, rows, out_features)
            torch.testing.assert_close(got, torch.nn.functional.linear(x, weight, bias), rtol=1e-5, atol=1e-4)
            alone = torch.stack([torch.cat([kernel(x[b, r:r + 1]) for r in range(rows)]) for b in range(2)])
            assert torch.equal(alone, got), (out_features, in_features, rows)  # bit for bit, whatever the block
        with pytest.raises(RuntimeError, match="takes float32 CPU inputs of width"):
            kernel(torch.randn(1, 4, in_features + 1))
        # the kernel writes exactly rows x out_features floats: a guard region after the output stays untouched
        rows = 9
        x = torch.randn(rows, in_features, generator=gen)
        y = torch.full((rows * out_features + 64,), 7.0)
        lib.skinny_linear(x.data_ptr(), rows, in_features, kernel.packed.data_ptr(), out_features,
                          None if bias is None else kernel.bias.data_ptr(), y.data_ptr(), 2)
        assert torch.equal(y[-64:], torch.full((64,), 7.0))
        torch.testing.assert_close(y[:-64].view(rows, out_features), torch.nn.functional.linear(x, weight, bias),
                                   rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("isa", ISAS)
def test_bf16_weights_equal_f_linear_on_the_rounded_weights_and_rows_do_not_depend_on_their_block(isa, built):
    """A draft's copy in bfloat16 (`SkinnyWeight(..., bf16=True)`): the weights rounded to nearest even, everything
    else float32: F.linear's values on the rounded weights, half the bytes, and a row's result independent of its
    block as in float32."""
    lib = skinny.load(isa)
    gen = torch.Generator().manual_seed(1)
    for out_features, in_features, has_bias in SHAPES:
        weight = torch.randn(out_features, in_features, generator=gen)
        bias = torch.randn(out_features, generator=gen) if has_bias else None
        kernel = skinny.SkinnyWeight(weight, bias, lib=lib, bf16=True)
        full = skinny.SkinnyWeight(weight, bias, lib=lib)
        assert kernel.nbytes * 2 == full.nbytes
        rounded = weight.to(torch.bfloat16).float()
        for rows in (1, 2, 3, 4, 5, 8, 9, 13, 17, 33):
            x = torch.randn(2, rows, in_features, generator=gen)
            got = kernel(x)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, torch.nn.functional.linear(x, rounded, bias), rtol=1e-5, atol=1e-4)
            alone = torch.stack([torch.cat([kernel(x[b, r:r + 1]) for r in range(rows)]) for b in range(2)])
            assert torch.equal(alone, got), (out_features, in_features, rows)
            if rows == 4:
                assert not torch.equal(got, full(x))  # (the rounding is there: not the float32 copy)
        rows = 9  # exactly rows x out_features floats written: a guard region after the output stays untouched
        x = torch.randn(rows, in_features, generator=gen)
        y = torch.full((rows * out_features + 64,), 7.0)
        lib.skinny_linear_bf16(x.data_ptr(), rows, in_features, kernel.packed.data_ptr(), out_features,
                               None if bias is None else kernel.bias.data_ptr(), y.data_ptr(), 2)
        assert torch.equal(y[-64:], torch.full((64,), 7.0))
    # rounding to nearest even, as torch's own conversion, NaN and infinities kept
    special = torch.tensor([[1.0, -2.5, 3.0e38, 3.4e38, float("inf"), float("-inf"), 1.00390625, 1.01171875, 1e-40]])
    probe = skinny.SkinnyWeight(special.T.contiguous(), lib=lib, bf16=True)  # (one output per value, input 1)
    torch.testing.assert_close(probe(torch.ones(1, 1)), special.to(torch.bfloat16).float(), rtol=0, atol=0)
    nan = skinny.SkinnyWeight(torch.full((3, 1), float("nan")), lib=lib, bf16=True)
    assert torch.isnan(nan(torch.ones(1, 1))).all()


def test_inputs_the_kernel_does_not_take_go_to_the_linears_own_kernel(built):
    weight = torch.nn.Parameter(torch.randn(96, 64))
    fallback_calls = []

    def fallback(x):
        fallback_calls.append(x.dtype)
        return torch.nn.functional.linear(x, weight.to(x.dtype))

    kernel = skinny.SkinnyWeight(weight, fallback=fallback)
    with torch.no_grad():
        kernel(torch.randn(6, 64))  # float32, no autograd: the kernel
        assert kernel(torch.randn(6, 64, dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert fallback_calls == [torch.bfloat16]
    out = kernel(torch.randn(6, 64))  # autograd on, the weight requires grad: its gradient must reach it
    out.sum().backward()
    assert weight.grad is not None and fallback_calls[-1] == torch.float32


def test_a_changed_weight_or_bias_is_repacked_for_the_kernel_too(monkeypatch, built):
    model = tiny_llama(600, 2, layers=2, hidden=512)
    monkeypatch.setattr(packing, "packing_pays", lambda *shape: False)  # the skinny kernel alone
    pack = packing.PackedWeights(model, measured=True, use_skinny=True)
    layer = model.model.layers[0].mlp.down_proj
    assert layer in pack.skinny and not pack.onednn
    calls = []
    real_call = skinny.SkinnyWeight.__call__
    monkeypatch.setattr(skinny.SkinnyWeight, "__call__", lambda self, x: calls.append(1) or real_call(self, x))
    x = torch.randn(1, 6, layer.in_features)  # a block: the skinny kernel's rows
    with torch.no_grad(), pack:
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2.0)
        with pack:
            after = layer(x)
    assert len(calls) == 2
    torch.testing.assert_close(after, 2 * before, rtol=1e-5, atol=1e-4)
    biased = model.model.layers[0].mlp.up_proj
    biased.bias = torch.nn.Parameter(torch.zeros(biased.out_features))  # a bias given after packing, then replaced
    pack = packing.PackedWeights(model, measured=True, use_skinny=True)
    h = torch.randn(1, 6, biased.in_features)
    with torch.no_grad():
        with pack:
            zero = biased(h)
        biased.bias = torch.nn.Parameter(torch.ones(biased.out_features))
        with pack:
            one = biased(h)
    torch.testing.assert_close(one, zero + 1, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("few", [False, True])
def test_blocks_run_on_the_skinny_kernel_and_the_tokens_stay_the_models_own(few, monkeypatch, built):
    """few=True: steps and small verifies (1-3 rows) on the kernel too (`skinny_pays(..., few=True)`)."""
    target, draft = tiny_llama(600, 0, layers=2, hidden=512), tiny_llama(600, 1, layers=2, hidden=512)
    # whatever this CPU measures
    monkeypatch.setattr(packing, "skinny_pays", lambda *shape, few=False, on=few: on or not few)
    pack = packing.packed_weights(target)  # the pack assisted_generate() uses
    assert pack is not None and pack.skinny and pack.skinny_few == (pack.skinny if few else set())
    assert not pack.onednn & pack.skinny_few  # (no oneDNN copy where the kernel serves 1-3 rows)
    installed = []  # (rows of the forward, linears on the skinny kernel)
    real_install = pack._install

    def install(rows):
        real_install(rows)
        installed.append((rows, sum(isinstance(m.__dict__.get("forward"), skinny.SkinnyWeight)
                                    for m in pack.modules)))

    monkeypatch.setattr(pack, "_install", install)
    lib, kernel_rows = skinny.library(), []
    real_linear = lib.skinny_linear
    monkeypatch.setattr(lib, "skinny_linear", lambda *a: kernel_rows.append(a[1]) or real_linear(*a))
    ids = torch.randint(5, 600, (2, 12))
    ref = _same_tokens(target, draft, ids, 24, 4)
    blocks = [n for rows, n in installed if rows is not None and skinny.MIN_ROWS <= rows <= skinny.MAX_ROWS]
    assert blocks and all(n == len(pack.skinny) for n in blocks)  # verify blocks: every chosen linear
    assert kernel_rows and max(kernel_rows) >= skinny.MIN_ROWS  # and the kernel itself ran (not the fallback)
    assert all(n == (len(pack.skinny) if few else 0) for rows, n in installed
               if rows is not None and rows < skinny.MIN_ROWS)
    assert all("forward" not in m.__dict__ for m in target.modules())

    # transformers' generate() under the pack (the target-only path): each forward chooses by its input's rows
    installed.clear()
    kernel_rows.clear()
    with pack:
        again = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=6,
                                pad_token_id=0, eos_token_id=None)
    assert torch.equal(again, ref[:, :18])
    # the prefill (2 x 12), a step (2 x 1)
    assert (24, len(pack.skinny)) in installed and (2, len(pack.skinny) if few else 0) in installed
    assert (kernel_rows.count(2) >= 5 * len(pack.skinny)) == few  # the 5 steps' rows on the kernel, or not
    assert all("forward" not in m.__dict__ for m in target.modules()) and not target._forward_pre_hooks


@pytest.mark.parametrize("bf16", ["1", "0"])
def test_a_feature_heads_linears_run_in_bf16_and_the_tokens_stay_the_targets_own(bf16, monkeypatch, built):
    """A draft's pack (`packed_weights(head, bf16=True)`, the default for a feature head on a CPU): every eligible
    linear on the skinny kernel with bfloat16 weights for 1-64 rows, unmeasured; OPTIMUM_UAG_DRAFT_BF16=0: the
    float32 policy. Either way the tokens are target-only greedy's."""
    from optimum_uag.testing.heads import untrained_head

    monkeypatch.setenv("OPTIMUM_UAG_DRAFT_BF16", bf16)
    monkeypatch.setattr(packing, "skinny_pays", lambda *shape, few=False: False)  # (the float32 policy: MKL)
    target = tiny_llama(600, 6, layers=2, hidden=512)
    head = untrained_head(target, None, seed=1)
    lib = skinny.library()
    calls = {"bf16": 0, "fp32": 0}
    real = {"bf16": lib.skinny_linear_bf16, "fp32": lib.skinny_linear}

    def counted(name):
        def run(*args):
            calls[name] += 1
            return real[name](*args)
        return run

    monkeypatch.setattr(lib, "skinny_linear_bf16", counted("bf16"))
    monkeypatch.setattr(lib, "skinny_linear", counted("fp32"))
    _same_tokens(target, head, torch.randint(5, 600, (2, 10)), 20, 3)
    pack = packing.packed_weights(head, bf16=packing.draft_bf16())
    eligible = {m for m in head.modules() if packing._skinny_eligible(m)}
    if bf16 == "1":
        assert pack.bf16 and pack.skinny == pack.skinny_few == eligible and not pack.onednn
        assert calls["bf16"] > 0 and calls["fp32"] == 0  # (the target's linears: measured slower, on MKL)
    else:
        assert pack is None or (not pack.bf16 and not pack.skinny)
        assert calls["bf16"] == 0


def test_off_by_environment_and_only_where_it_measures_faster(monkeypatch, built):
    monkeypatch.setenv("OPTIMUM_UAG_SKINNY", "0")
    assert not skinny.available()
    assert not packing.PackedWeights(tiny_llama(600, 3, hidden=512), use_skinny=True).skinny
    monkeypatch.delenv("OPTIMUM_UAG_SKINNY")
    monkeypatch.setattr(packing, "packing_pays", lambda *shape: False)
    monkeypatch.setattr(packing, "skinny_pays",
                        lambda out_features, in_features, packed, few=False: out_features == 1024 and not few)
    pack = packing.packed_weights(tiny_llama(600, 4, hidden=512))  # the measured policy: the MLP's 1024-row linears
    assert pack is not None and {m.weight.shape[0] for m in pack.skinny} == {1024} and not pack.onednn
    assert not pack.skinny_few  # (blocks only: 1-3 rows measured slower here)
    assert packing.packed_weights(tiny_llama(300, 5)) is None  # every linear below SKINNY_MIN_WEIGHTS


def test_without_a_compiler_the_linears_keep_their_kernels_with_one_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(skinny, "_STATE", {})
    monkeypatch.setenv("OPTIMUM_UAG_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model with no linear the kernel could take never builds it, nor warns
        assert packing.packed_weights(tiny_llama(300, 7)) is None
        assert packing.packed_weights(tiny_llama(600, 8, hidden=512).to(torch.bfloat16)) is None
    assert skinny._STATE == {}
    with pytest.warns(UserWarning, match="skinny linear kernel is not available here.*no C compiler"):
        assert skinny.library() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert not skinny.available()
        target = tiny_llama(600, 6, hidden=512)
        pack = packing.PackedWeights(target, use_skinny=True)
        assert not pack.skinny
        ids = torch.randint(5, 600, (1, 10))
        ref = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                              pad_token_id=0, eos_token_id=None)
        out = assisted_generate(target, None, ids, max_new_tokens=12, do_sample=False, prompt_lookup_num_tokens=4,
                                eos_token_id=None, pad_token_id=0)
        assert torch.equal(out.sequences, ref)


def test_a_kernel_build_is_cached_per_source_and_flags(monkeypatch, tmp_path, built):
    monkeypatch.setenv("OPTIMUM_UAG_KERNEL_CACHE", str(tmp_path))
    first = skinny._build("avx2")
    assert first.parent == tmp_path and first.exists()
    stamp = first.stat().st_mtime_ns
    assert skinny._build("avx2") == first and first.stat().st_mtime_ns == stamp  # not built again
    serial = skinny._build("avx2", threaded=False)  # other flags: another file
    source = tmp_path / "skinny.c"
    source.write_text(skinny.SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(skinny, "SOURCE", source)
    changed = skinny._build("avx2")  # another source: another file
    assert len({first, serial, changed}) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, serial.name, changed.name, "skinny.c"])
    assert skinny.load("avx2", threaded=False).threaded is False


def test_the_kernel_shares_torchs_openmp_pool_whatever_other_packages_load():
    torch_lib = "/env/site-packages/torch/lib"
    torchs = f"{torch_lib}/libgomp.so.1"
    sklearns = "/env/site-packages/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0"
    assert skinny._threaded([torchs], torch_lib)
    assert skinny._threaded([sklearns, torchs], torch_lib)  # another package's renamed runtime: not ours to share
    assert not skinny._threaded([f"{torch_lib}/libgomp-a34b3233.so.1"], torch_lib)  # torch's own renamed one
    assert not skinny._threaded([f"{torch_lib}/libiomp5.so"], torch_lib)
    assert not skinny._threaded(["/usr/lib/libomp.so"], torch_lib)  # torch's runtime elsewhere: every one decides
    assert skinny._threaded(["/usr/lib/x86_64-linux-gnu/libgomp.so.1"], torch_lib)
    assert skinny._threaded() == skinny._threaded(skinny._openmp_runtimes())  # this process, as loaded


@pytest.mark.parametrize("model_type", ["qwen2", "opt", "gpt_neox", "gpt_bigcode", "persimmon", "phi", "starcoder2",
                                        "mistral"])
def test_other_architectures_with_every_linear_on_the_kernel_keep_their_tokens(model_type, monkeypatch, built):
    """Biases (Qwen2's q/k/v, OPT's, GPT-BigCode's fused multi-query qkv, Persimmon's, Phi's), other MLPs and
    projections (nn.Linear only: Falcon's and GPT-2's own linear classes keep their kernels): tiny float32
    models with every linear on the skinny kernel for blocks (the size floor lifted), drafting every round; the
    greedy tokens equal the model's own generate() (its output layer scaled so that no two logits are within
    rounding of each other)."""
    from optimum_uag.testing.architectures import Unbuildable, tiny_model

    monkeypatch.setattr(packing, "SKINNY_MIN_WEIGHTS", 0)
    monkeypatch.setattr(packing, "skinny_pays", lambda *shape, few=False: True)
    try:
        target = tiny_model(model_type, 300, 0, dtype=torch.float32)
        draft = tiny_model(model_type, 300, 1, dtype=torch.float32)
    except Unbuildable as err:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {err}")
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(30.0)
    pack = packing.packed_weights(target)
    assert pack is not None and len(pack.skinny) >= 4, model_type
    lib, kernel_calls = skinny.library(), []
    real_linear = lib.skinny_linear
    monkeypatch.setattr(lib, "skinny_linear", lambda *a: kernel_calls.append(a[1]) or real_linear(*a))
    ids = torch.randint(5, 300, (1, 9), generator=torch.Generator().manual_seed(3))
    ref = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                          min_new_tokens=16)
    out = assisted_generate(target, draft, ids, max_new_tokens=16, do_sample=False, num_assistant_tokens=4,
                            draft_policy="fixed")
    assert torch.equal(out.sequences, ref), model_type
    assert kernel_calls and max(kernel_calls) >= skinny.MIN_ROWS
