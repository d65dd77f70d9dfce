"""Prepacked CPU weights (runners/packed.py): same tokens as the model's own generate(), the user's model untouched,
repacked when a weight changes, off on request."""
import pytest
import torch

from optimum_uag import assisted_generate
from optimum_uag.registry import model_state
from optimum_uag.runners import packed as packing

from helpers import tiny_llama

pytestmark = pytest.mark.skipif(not packing.supported(), reason="this torch build has no oneDNN linear")


def _big_llama(seed: int):
    """Linears large enough to be packed (>= MIN_WEIGHTS elements): hidden 512, MLP 1024, vocabulary 600."""
    return tiny_llama(600, seed, layers=2, hidden=512)


def test_packed_runner_matches_the_model_and_leaves_it_as_it_was():
    torch.manual_seed(0)
    target, draft = _big_llama(0), _big_llama(1)
    pack = packing.packed_weights(target, enabled=True)  # every eligible linear, whatever this CPU measures
    assert pack is not None and len(pack.modules) >= 5  # q/o/MLP/lm_head of each layer
    ids = torch.randint(5, 600, (2, 12))
    ref = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                          pad_token_id=0, eos_token_id=None)
    out = assisted_generate(target, draft, ids, torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                            eos_token_id=None, pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    assert all("forward" not in m.__dict__ for m in target.modules())  # swapped only inside our calls
    with torch.no_grad():
        x = torch.randn(1, 3, 512)
        plain = target.model.layers[0].mlp(x)
        with pack:
            packed = target.model.layers[0].mlp(x)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)


def test_a_changed_weight_is_repacked_and_packing_can_be_turned_off(monkeypatch):
    model = _big_llama(2)
    pack = packing.packed_weights(model, enabled=True)
    layer = model.model.layers[0].mlp.down_proj
    x = torch.randn(1, 2, layer.in_features)
    with torch.no_grad(), pack:
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # an in-place update (fine-tuning, a loaded adapter) bumps the version
        with pack:
            after = layer(x)
    torch.testing.assert_close(after, 2 * before, rtol=1e-4, atol=1e-4)

    other = _big_llama(3)
    assert packing.packed_weights(other, enabled=False) is None
    monkeypatch.setenv("OPTIMUM_UAG_PACKED_WEIGHTS", "0")
    assert packing.packed_weights(other) is None
    monkeypatch.delenv("OPTIMUM_UAG_PACKED_WEIGHTS")
    ids = torch.randint(5, 600, (1, 8))
    assisted_generate(other, None, ids, max_new_tokens=4, prompt_lookup_num_tokens=2, cpu_packed_weights=False)
    assert model_state(other).get("packed") is None  # never packed for that call
    with pytest.raises(ValueError, match="cpu_packed_weights must be True, False or None"):
        assisted_generate(other, None, ids, max_new_tokens=4, prompt_lookup_num_tokens=2, cpu_packed_weights="yes")


def test_small_or_non_float32_models_are_not_packed():
    assert packing.packed_weights(tiny_llama(300, 4)) is None  # every linear below MIN_WEIGHTS: faster unpacked
    assert packing.packed_weights(_big_llama(5).to(torch.bfloat16)) is None


def test_only_shapes_whose_packed_kernel_is_faster_here_are_packed(monkeypatch):
    """The auto policy packs a linear only where this CPU runs the packed kernel clearly faster (measured once per
    shape: on an Intel Xeon F.linear wins for SmolLM2's MLP at one row, packing for its LM head); none faster: no
    packing at all, and the target-only baseline is transformers' own generate()."""
    measured = []

    def pays(out_features, in_features):
        measured.append((out_features, in_features))
        return out_features == 600  # only the LM head (vocabulary 600) "measured" faster packed

    monkeypatch.setattr(packing, "packing_pays", pays)
    monkeypatch.setenv("OPTIMUM_UAG_SKINNY", "0")  # oneDNN's choice alone (the skinny kernel: tests/test_skinny.py)
    model = _big_llama(7)
    pack = packing.packed_weights(model)
    assert [m.weight.shape[0] for m in pack.modules] == [600]
    assert packing.packed_weights(model) is pack  # decided once per model
    assert len(packing.packed_weights(model, enabled=True).modules) > 1  # a forced pack ignores the measurement
    monkeypatch.setattr(packing, "packing_pays", lambda *shape: False)
    assert packing.packed_weights(_big_llama(8)) is None
    # every rank of a multi-process run packs the same linears (no per-rank measurement)
    monkeypatch.setattr(packing, "_several_processes", lambda: True)
    assert len(packing.packed_weights(_big_llama(9)).modules) > 1


def test_the_packing_measurement_is_made_once_per_shape():
    packing._PAYS.clear()
    first = packing.packing_pays(1024, 512)
    assert isinstance(first, bool) and (1024, 512, torch.get_num_threads()) in packing._PAYS
    packing._PAYS[(1024, 512, torch.get_num_threads())] = not first  # a cached answer is not measured again
    assert packing.packing_pays(1024, 512) is (not first)
    packing._PAYS.clear()
