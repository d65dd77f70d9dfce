"""The Gaudi path under the HPU emulator: optimum-habana's own Gaudi model classes, run on CPU.

adapt_transformers_to_gaudi() patches transformers for the rest of the process, so these tests run last
(conftest orders them) and every plain-transformers reference is computed before the emulator starts.
"""
import importlib
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

import optimum_uag
from optimum_uag import assisted_generate
from optimum_uag.engine.sampling import LogitsWarper
from optimum_uag.testing import gaudi_classes
from optimum_uag.testing.hpu_emulator import HPUEmulator, FusedRMSNorm, FusedSDPA, RotaryPosEmbeddingHelperV2

from helpers import pad_batch, tiny_llama, tiny_neox
from test_engine import _chi2, _joint_first_two
from test_translation import small_pair

pytestmark = pytest.mark.gaudi
GAUDI = dict(lazy_mode=True, hpu_graphs=True, static_shapes=True, reuse_cache=True)
N_SAMPLES = 6000


def _sharp(model, head, scale):
    with torch.no_grad():
        getattr(model, head).weight.mul_(scale)
    return model


@pytest.fixture(scope="module")
def plain(embedded, prompts):
    """Everything computed with plain transformers, before optimum-habana patches the process."""
    (target, tok), (_, atok) = embedded["target"], embedded["assistant"]
    ids4, mask4 = pad_batch(tok, prompts[:4])
    ids1, mask1 = pad_batch(tok, prompts[4:5])
    # the same batch with three more pad columns: another prompt length (another prefill graph), same tokens
    ids4p = torch.cat([torch.full((4, 3), tok.pad_token_id), ids4], 1)
    mask4p = torch.cat([torch.zeros(4, 3, dtype=mask4.dtype), mask4], 1)
    with torch.no_grad():
        ref = {
            "ids4": ids4, "mask4": mask4, "ids1": ids1, "mask1": mask1, "ids4p": ids4p, "mask4p": mask4p,
            "greedy4p": target.generate(ids4p, attention_mask=mask4p, max_new_tokens=24, do_sample=False),
            "greedy4": target.generate(ids4, attention_mask=mask4, max_new_tokens=24, do_sample=False),
            "greedy1": target.generate(ids1, attention_mask=mask1, max_new_tokens=24, do_sample=False),
            "logits": target(ids4, attention_mask=mask4).logits,
        }
    from test_feature_drafter import make_head

    ref["feature_head"] = make_head(target, 300)  # and its acceptance on the plain target (same features)
    ref["feature_accepted"] = {b: assisted_generate(target, ref["feature_head"], ref[f"ids{b}"], ref[f"mask{b}"],
                                                    max_new_tokens=24, num_assistant_tokens=3).metrics.accepted_tokens
                               for b in (1, 4)}
    ref["tree_accepted"] = {b: assisted_generate(target, ref["feature_head"], ref[f"ids{b}"], ref[f"mask{b}"],
                                                 max_new_tokens=24, draft_tree=True,
                                                 draft_policy="fixed").metrics.accepted_tokens  # a tree every round
                            for b in (1, 4)}
    from test_feature_drafter import make_fused_head

    ref["fused_head"] = make_fused_head(target, 300, layers=(2, 5))  # EAGLE-3's fused features: layers 2, 5 + norm
    ref["fused_accepted"] = {b: assisted_generate(target, ref["fused_head"], ref[f"ids{b}"], ref[f"mask{b}"],
                                                  max_new_tokens=24, draft_tree=True,
                                                  draft_policy="fixed").metrics.accepted_tokens
                             for b in (1, 4)}
    tt, dt = small_pair()
    tiny = {
        "same": (_sharp(tiny_llama(8, 0, layers=1, hidden=16), "lm_head", 4.0),
                 _sharp(tiny_llama(8, 1, layers=1, hidden=16), "lm_head", 1.0)),
        "cross": (_sharp(tiny_llama(len(tt), 0, layers=1, hidden=16), "lm_head", 4.0),
                  # hidden 32: optimum-habana's GPT-NeoX mishandles an odd rotary width (head 4 x rotary_pct 0.25)
                  _sharp(tiny_neox(len(dt), 1, hidden=32), "embed_out", 1.0)),
    }
    prompt = torch.tensor([[1, 2, 3]])
    ref["expected"] = {name: _joint_first_two(t, prompt, LogitsWarper()) for name, (t, _) in tiny.items()}
    ref["tiny"] = {name: tuple((m.config, m.state_dict()) for m in pair) for name, pair in tiny.items()}
    ref["tokenizers"] = (tok, atok, tt, dt)
    ref["classes"] = {}  # every Gaudi causal-LM class's plain twin, and its greedy output (see test_every_gaudi_class)
    for model_type in gaudi_classes.CHECKED:
        try:
            ref["classes"][model_type] = gaudi_classes.plain_reference(model_type)
        except Exception as err:  # noqa: BLE001 - transformers itself cannot build / run it: said by the test
            ref["classes"][model_type] = f"{type(err).__name__}: {str(err)[:200]}"
    return ref


@pytest.fixture(scope="module")
def emu(plain):
    with HPUEmulator() as emulator:
        import optimum_uag.gaudi

        optimum_uag.gaudi.enable()
        yield emulator
    optimum_uag.disable()


@pytest.fixture(scope="module")
def gaudi_models(emu, embedded):
    """The embedded family loaded again, now as optimum-habana's Gaudi classes."""
    from optimum_uag import embedded_models

    paths = embedded_models()
    models = {}
    for name in ("target", "assistant", "assistant_same_tokenizer"):
        config = AutoConfig.from_pretrained(paths[name])
        models[name] = _gaudi_class(config).from_pretrained(paths[name], torch_dtype=torch.float32).eval()
    for name, model in models.items():
        emu.name(model, name)
    return models


def _gaudi_class(config):
    """The class adapt_transformers_to_gaudi() put in transformers' module (AutoModel may have cached the plain one)."""
    module = importlib.import_module(f"transformers.models.{config.model_type}.modeling_{config.model_type}")
    return getattr(module, config.architectures[0] if config.architectures else {
        "llama": "LlamaForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}[config.model_type])


def _habanas_own_greedy(target, ids, mask, config):
    """optimum-habana's own static-shape generate() (optimum-uag's routing switched off), 24 greedy tokens."""
    optimum_uag.disable()
    try:
        return target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, lazy_mode=True,
                               hpu_graphs=True, generation_config=config)
    finally:
        optimum_uag.enable()


def _gaudi_copy(config, state):
    model = _gaudi_class(config)(config)
    model.load_state_dict(state)
    return model.eval()


def test_models_are_gaudi_classes(gaudi_models):
    assert type(gaudi_models["target"]).__name__ == "GaudiLlamaForCausalLM"
    assert type(gaudi_models["assistant"]).__name__ == "GaudiGPTNeoXForCausalLM"
    from optimum_uag.gaudi import cache_mechanism

    assert cache_mechanism(gaudi_models["target"]) == "reuse_cache"
    assert cache_mechanism(gaudi_models["assistant"]) == "token_idx"


# ------------------------------------------------------------------------------------------------- kernels
def test_emulated_kernels_match_reference_math():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    mask = torch.zeros(2, 1, 5, 7)
    mask[..., -1] = float("-inf")
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = (q @ kk.transpose(-1, -2)) / 8 ** 0.5 + mask
    assert torch.allclose(FusedSDPA.apply(q, k, v, mask, 0.0, False, None), scores.softmax(-1) @ vv, atol=1e-5)
    x, w = torch.randn(3, 16), torch.randn(16)
    assert torch.allclose(FusedRMSNorm.apply(x, w, 1e-6), w * x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt(),
                          atol=1e-5)
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    expected, _ = apply_rotary_pos_emb(q, q, cos, sin)
    assert torch.allclose(RotaryPosEmbeddingHelperV2.apply(q, cos.unsqueeze(1), sin.unsqueeze(1)), expected, atol=1e-6)


def test_gaudi_llama_logits_match_plain_llama(plain, gaudi_models):
    target = gaudi_models["target"]
    with torch.no_grad():
        eager = target(plain["ids4"], attention_mask=plain["mask4"], lazy_mode=True).logits
        fused = target(plain["ids4"], attention_mask=plain["mask4"], use_flash_attention=True, lazy_mode=True).logits
    live = plain["mask4"].bool()  # padded positions' logits are meaningless in both
    assert (eager - plain["logits"])[live].abs().max() < 1e-4
    assert (fused - plain["logits"])[live].abs().max() < 1e-4


# ------------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("draft", ["same", "cross"])
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_generate_equals_target_on_gaudi_classes(plain, gaudi_models, draft, batch):
    tok, atok, _, _ = plain["tokenizers"]
    target = gaudi_models["target"]
    extra = dict(assistant_model=gaudi_models["assistant_same_tokenizer"]) if draft == "same" else dict(
        assistant_model=gaudi_models["assistant"], tokenizer=tok, assistant_tokenizer=atok)
    ids, mask = plain[f"ids{batch}"], plain[f"mask{batch}"]
    out = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, num_assistant_tokens=4,
                          **extra, **GAUDI)
    assert torch.equal(out, plain[f"greedy{batch}"])
    assert optimum_uag.last_metrics().accepted_tokens > 0


def test_greedy_with_fused_sdpa_equals_target(plain, gaudi_models):
    """use_flash_attention=True: the verify/decode attention goes through (emulated) FusedSDPA with our mask."""
    out = gaudi_models["target"].generate(plain["ids4"], attention_mask=plain["mask4"], max_new_tokens=24,
                                          do_sample=False, assistant_model=gaudi_models["assistant_same_tokenizer"],
                                          use_flash_attention=True, **GAUDI)
    assert torch.equal(out, plain["greedy4"])


@pytest.mark.parametrize("draft", ["same", "cross"])
def test_sampling_matches_target_distribution_on_gaudi_classes(plain, emu, draft):
    (tcfg, tstate), (dcfg, dstate) = plain["tiny"][draft]
    target, assistant = _gaudi_copy(tcfg, tstate), _gaudi_copy(dcfg, dstate)
    assert type(target).__name__.startswith("Gaudi") and type(assistant).__name__.startswith("Gaudi")
    _, _, tt, dt = plain["tokenizers"]
    extra = dict(tokenizer=tt, assistant_tokenizer=dt) if draft == "cross" else {}
    vocab = target.config.vocab_size
    torch.manual_seed(1234)
    out = assisted_generate(target, assistant, torch.tensor([[1, 2, 3]]).repeat(N_SAMPLES, 1), max_new_tokens=2,
                            do_sample=True, top_k=0, num_assistant_tokens=3, eos_token_id=None, **extra, **GAUDI)
    samples = (out.sequences[:, 3] * vocab + out.sequences[:, 4]).numpy()
    assert _chi2(samples, plain["expected"][draft], N_SAMPLES) > 0.01
    assert out.metrics.accepted_tokens > 0


def test_embedded_sampling_batch_runs_on_gaudi_classes(plain, gaudi_models):
    tok, atok, _, _ = plain["tokenizers"]
    torch.manual_seed(0)
    out = assisted_generate(gaudi_models["target"], gaudi_models["assistant"], plain["ids4"], plain["mask4"],
                            tokenizer=tok, assistant_tokenizer=atok, max_new_tokens=16, do_sample=True,
                            temperature=0.7, eos_token_id=None, **GAUDI)
    assert out.sequences.shape == (4, plain["ids4"].shape[1] + 16)


# ---------------------------------------------------------------------------------- graphs and mark_step
@pytest.mark.parametrize("draft", ["same", "cross"])
def test_graph_captures_are_bounded_and_independent_of_max_new_tokens(plain, emu, gaudi_models, draft):
    tok, atok, _, _ = plain["tokenizers"]
    name = "assistant_same_tokenizer" if draft == "same" else "assistant"
    extra = dict(tokenizer=tok, assistant_tokenizer=atok) if draft == "cross" else {}
    captured = []
    for max_new in (16, 128):
        emu.reset_counters(clear_graphs=True)
        out = assisted_generate(gaudi_models["target"], gaudi_models[name], plain["ids4"], plain["mask4"],
                                max_new_tokens=max_new, do_sample=False, eos_token_id=None, **extra, **GAUDI)
        assert out.sequences.shape[1] == plain["ids4"].shape[1] + max_new
        captured.append(dict(emu.captures))
    assert captured[0] == captured[1]
    assert captured[0]["target"] <= 2  # prefill + verify
    assert captured[0][name] <= 3  # prefill + decode (+ the fixed-width re-read / re-feed)


def test_one_mark_step_per_model_step_once_graphs_are_captured(plain, emu, gaudi_models):
    kwargs = dict(max_new_tokens=24, do_sample=False, eos_token_id=None, **GAUDI)
    args = (gaudi_models["target"], gaudi_models["assistant_same_tokenizer"], plain["ids4"], plain["mask4"])
    assisted_generate(*args, **kwargs)  # captures
    emu.reset_counters()
    out = assisted_generate(*args, **kwargs)  # replays only: no Python runs inside the models
    assert sum(emu.captures.values()) == 0
    m = out.metrics
    assert emu.mark_steps == m.target_forwards + m.draft_forwards
    assert m.target_forwards == m.target_calls  # one verify forward per round


def test_gaudi_knobs_on_a_plain_model_are_refused():
    with pytest.raises(ValueError, match="Gaudi model"):
        assisted_generate(tiny_llama(8, 0), tiny_llama(8, 1), torch.tensor([[1, 2]]), max_new_tokens=2,
                          hpu_graphs=True)


# ------------------------------------------------------------------------------------------------ the runner
@pytest.mark.parametrize("arch", ["llama", "neox"])
def test_runner_rollback_and_compaction_match_full_recompute(emu, arch):
    """Random blocks, per-row rollbacks and forced compactions: every logit equals a no-cache forward."""
    from optimum_uag.gaudi import GaudiModelRunner

    model = tiny_llama(50, 3, layers=2, hidden=32) if arch == "llama" else tiny_neox(50, 3, hidden=32)
    model = _gaudi_copy(model.config, model.state_dict())
    gen = torch.Generator().manual_seed(0)
    batch, max_len, pad = 3, 24, torch.tensor([0, 2, 4])
    runner = GaudiModelRunner(model, batch, max_len, pad, lazy_mode=True, columns=30)
    rows = [[] for _ in range(batch)]  # logical token stream of each row (slot-indexed, pads included)
    lengths = torch.zeros(batch, dtype=torch.long)
    width = 6  # the prefill
    for step in range(30):
        tokens = torch.randint(1, 50, (batch, width), generator=gen)
        back = torch.randint(0, 3, (batch,), generator=gen) if step else torch.zeros(batch, dtype=torch.long)
        start = (lengths - back).clamp_min(0)
        start = torch.where(start + width > max_len, pad + 1, start)  # a long rollback when a row is full
        logits = runner.forward(tokens, start)
        for b in range(batch):
            rows[b] = rows[b][: int(start[b])] + tokens[b].tolist()
            for i in range(width):
                slot = int(start[b]) + i
                if slot < int(pad[b]):
                    continue
                context = torch.tensor([rows[b][int(pad[b]) : slot + 1]])
                with torch.no_grad():
                    expected = model(context, use_cache=False).logits[0, -1]
                assert torch.allclose(logits[b, i], expected, atol=1e-4), (arch, step, b, i)
        lengths = start + width
        width = [1, 4, 2][step % 3]
    assert runner.compactions >= 2


def test_at_batch_one_a_slot_is_its_column_and_nothing_is_compacted(emu):
    """Issue 29, finding 9: rolled-back columns are reused (the next block goes right after the last column a row
    still holds), so at batch 1 a cache as wide as the capacity + the verify block never compacts, over a
    generation of many rounds with random acceptance; every logit equals a no-cache forward."""
    from optimum_uag.gaudi import GaudiModelRunner

    model = tiny_llama(50, 3, layers=2, hidden=32)
    model = _gaudi_copy(model.config, model.state_dict())
    gen = torch.Generator().manual_seed(0)
    max_len = 70
    # the prompt's bucket padding (8 columns here) shifts every slot's column by as much: the margin covers it
    runner = GaudiModelRunner(model, 1, max_len, torch.tensor([0]), lazy_mode=True, columns=max_len + 8)
    stream, start, width = [], 0, 8  # the prompt, then verify blocks of 5 (the last token + 4 drafts)
    while start + 5 <= max_len:
        tokens = torch.randint(1, 50, (1, width), generator=gen)
        logits = runner.forward(tokens, torch.tensor([start]))
        stream = stream[:start] + tokens[0].tolist()
        with torch.no_grad():
            expected = model(torch.tensor([stream]), use_cache=False).logits[0, start:]
        torch.testing.assert_close(logits[0], expected.float(), atol=1e-4, rtol=1e-4)
        accepted = width if width > 5 else int(torch.randint(0, 5, (1,), generator=gen)) + 1
        start, width = start + accepted, 5
    assert runner.compactions == 0 and runner.calls > 15


def test_the_kv_cache_is_upstreams_plus_the_verify_columns(plain, emu, gaudi_models):
    """Issue 29, finding 9 / item 3: the target's KV cache against optimum-habana's own target-only generate() for
    the same request (reuse_cache, static shapes): the same bytes per column, and no more columns than upstream's
    plus the verify block (K + 2) and the MARGIN (rounded to it). It was a power of two >= 1.5 x the capacity."""
    from optimum_uag.gaudi.runner import MARGIN, _kv_caches, _live, own_cache_bytes

    target = gaudi_models["target"]
    config = target.generation_config
    config.static_shapes, config.reuse_cache, config.bucket_size = True, True, -1
    _habanas_own_greedy(target, plain["ids4"], plain["mask4"], config)
    theirs = own_cache_bytes(target)
    their_columns = _live(_kv_caches(target)[0][0]).cache.shape[2]
    assert theirs > 0 and their_columns == plain["ids4"].shape[1] + 24
    out = assisted_generate(target, gaudi_models["assistant_same_tokenizer"], plain["ids4"], plain["mask4"],
                            max_new_tokens=24, do_sample=False, num_assistant_tokens=3, draft_policy="fixed", **GAUDI)
    assert torch.equal(out.sequences, plain["greedy4"])
    ours = out.metrics.target_cache_bytes
    per_column = theirs // their_columns
    assert ours % per_column == 0
    assert their_columns < ours // per_column <= their_columns + (3 + 2) + 2 * MARGIN - 1, (ours, theirs)
    assert own_cache_bytes(target) == theirs  # upstream's own tensors are back in its KVCache modules


def test_assisted_equals_optimum_habanas_own_static_generate(plain, emu, gaudi_models):
    """The target-only reference here is optimum-habana's own GaudiGenerationMixin greedy loop (static shapes,
    reuse_cache, HPU graphs), not ours."""
    target = gaudi_models["target"]
    config = target.generation_config
    config.static_shapes, config.reuse_cache, config.bucket_size, config.trim_logits = True, True, -1, True
    own = _habanas_own_greedy(target, plain["ids4"], plain["mask4"], config)
    assert torch.equal(own, plain["greedy4"])
    out = target.generate(plain["ids4"], attention_mask=plain["mask4"], max_new_tokens=24, do_sample=False,
                          lazy_mode=True, hpu_graphs=True, generation_config=config,
                          assistant_model=gaudi_models["assistant_same_tokenizer"])
    assert torch.equal(out, own)


def test_emulated_graph_replay_reuses_captured_tensors(emu):
    """As habana's wrap_in_hpu_graph: a replay copies inputs into the capture's inputs and refills its outputs."""
    from optimum_uag.testing.hpu_emulator import wrap_in_hpu_graph

    layer = wrap_in_hpu_graph(torch.nn.Linear(3, 2))
    x1, x2 = torch.ones(1, 3), torch.zeros(1, 3)
    first = layer(x1).detach().clone()
    out1 = layer(x1)  # replay
    out2 = layer(x2)  # replay: same output object, refilled; x1 (the captured input) now holds x2's values
    assert out1 is out2 and torch.equal(x1, x2)
    assert not torch.equal(out2, first)


@pytest.mark.parametrize("draft", ["same", "cross"])
def test_hpu_graphs_do_not_change_sampled_tokens(plain, emu, draft):
    """Same seed, with and without HPU graphs: identical samples (graph replays overwrite captured inputs and
    outputs; nothing the loop still holds may be one of them)."""
    (tcfg, tstate), (dcfg, dstate) = plain["tiny"][draft]
    _, _, tt, dt = plain["tokenizers"]
    extra = dict(tokenizer=tt, assistant_tokenizer=dt) if draft == "cross" else {}
    outs = []
    for graphs in (False, True):
        torch.manual_seed(5)
        out = assisted_generate(_gaudi_copy(tcfg, tstate), _gaudi_copy(dcfg, dstate),
                                torch.tensor([[1, 2, 3]]).repeat(64, 1), max_new_tokens=6, do_sample=True, top_k=0,
                                num_assistant_tokens=3, eos_token_id=None, lazy_mode=True, hpu_graphs=graphs, **extra)
        outs.append(out.sequences)
    assert torch.equal(outs[0], outs[1])


def test_runner_takes_over_a_cache_optimum_habana_allocated(emu, gaudi_models):
    """optimum-habana's own generate() allocates the same KVCache modules with its prompt length; a later
    GaudiModelRunner of the same shape must take them over (KVCache.allocate asserts on a changed length)."""
    from optimum_uag.gaudi import GaudiModelRunner

    target = gaudi_models["target"]
    target.allocate_kv_cache(2, 128, 7)  # what optimum-habana's generate does (reuse_cache, prompt length 7)
    runner = GaudiModelRunner(target, 2, 40, torch.zeros(2, dtype=torch.long), columns=128)
    logits = runner.forward(torch.tensor([[5, 6, 7], [8, 9, 10]]), torch.zeros(2, dtype=torch.long))
    with torch.no_grad():
        expected = target(torch.tensor([[5, 6, 7], [8, 9, 10]]), lazy_mode=False).logits
    runner.close()
    assert torch.allclose(logits, expected, atol=1e-4)


def test_plain_transformers_assistant_on_gaudi(plain, gaudi_models):
    """An assistant architecture optimum-habana does not adapt (OLMo) runs on transformers' StaticCache runner."""
    from transformers import OlmoConfig, OlmoForCausalLM

    target = gaudi_models["target"]
    torch.manual_seed(0)
    draft = OlmoForCausalLM(OlmoConfig(vocab_size=target.config.vocab_size, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=1, num_attention_heads=4, max_position_embeddings=512)).eval()
    assert not type(draft).__module__.startswith("optimum.habana")
    out = assisted_generate(target, draft, plain["ids4"], plain["mask4"], max_new_tokens=24, do_sample=False, **GAUDI)
    assert torch.equal(out.sequences, plain["greedy4"])


# ------------------------------------------------------------------ fidelity findings (faithful graph replay)
def test_token_idx_draft_keeps_its_cache_across_calls(plain, emu, gaudi_models):
    """Finding 4: a GPT-NeoX (token_idx) draft under HPU graphs; each call used to pass a new `past` tuple, which a
    replay copied over the captured one: from the second call on the draft saw only the prompt + the last token."""
    tok, atok, _, _ = plain["tokenizers"]
    metrics = []
    for _ in range(3):
        out = assisted_generate(gaudi_models["target"], gaudi_models["assistant"], plain["ids4"], plain["mask4"],
                                tokenizer=tok, assistant_tokenizer=atok, max_new_tokens=24, do_sample=False,
                                **GAUDI)
        assert torch.equal(out.sequences, plain["greedy4"])
        metrics.append((out.metrics.accepted_tokens, out.metrics.target_calls))
    assert metrics[0] == metrics[1] == metrics[2]


def test_reuse_cache_target_survives_batch_shape_changes(plain, emu, gaudi_models):
    """Finding 1: the KV cache is reallocated when the batch shape changes; a graph captured on an earlier
    call of the same shape must not replay on a cache tensor the Python side no longer uses."""
    target, draft = gaudi_models["target"], gaudi_models["assistant_same_tokenizer"]
    config = target.generation_config
    config.static_shapes, config.reuse_cache, config.bucket_size, config.trim_logits = True, True, -1, True
    for batch in ("4", "1", "4p", "1", "4"):  # 4p: batch 4 again (same verify graph), another prompt length
        out = assisted_generate(target, draft, plain[f"ids{batch}"], plain[f"mask{batch}"], max_new_tokens=24,
                                do_sample=False, **GAUDI)
        assert torch.equal(out.sequences, plain[f"greedy{batch}"]), batch
        # optimum-habana's own generate() on the same wrapped model, as the CLI alternates
        own = _habanas_own_greedy(target, plain["ids1"], plain["mask1"], config)
        assert torch.equal(own, plain["greedy1"])


def test_plain_model_wrapped_in_hpu_graphs_stays_exact(plain, emu, gaudi_models):
    """Finding 2: a plain transformers draft wrapped in HPU graphs (as the CLI wraps every model): its cache
    object and write slots reach the forward through attributes, frozen at capture."""
    from transformers import OlmoConfig, OlmoForCausalLM

    from optimum_uag.gaudi.device import graph_wrapped

    target = gaudi_models["target"]
    torch.manual_seed(0)
    draft = OlmoForCausalLM(OlmoConfig(vocab_size=target.config.vocab_size, hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=1, num_attention_heads=4, max_position_embeddings=512)).eval()
    emu.name(draft, "olmo")
    graph_wrapped(draft)
    accepted = []
    for _ in range(2):
        emu.reset_counters()
        out = assisted_generate(target, draft, plain["ids4"], plain["mask4"], max_new_tokens=24, do_sample=False,
                                **GAUDI)
        assert torch.equal(out.sequences, plain["greedy4"])
        accepted.append(out.metrics.accepted_tokens)
        assert emu.mark_steps >= out.metrics.draft_forwards  # the plain draft's lazy graphs are closed too
    assert accepted[0] == accepted[1]
    assert emu.captures.get("olmo", 0) == 0  # it runs outside HPU graphs (bypass), never re-captured per call


@pytest.mark.parametrize("draft", ["same", "cross"])
def test_lazy_mode_graphs_do_not_grow_with_the_number_of_steps(plain, emu, gaudi_models, draft):
    """Finding 5: in lazy mode (no HPU graphs) the ops between two mark_steps form one graph; a Python int that
    changes every step (a slice offset, `write + offsets`) makes a new graph per step. Longer generation must
    not need more distinct graphs. A cache compaction (once the write column reaches the end of a model's cache)
    adds its own graphs: at most two per model, target and draft (measured: +2 same, +3 cross for 4x the steps;
    before the fix the cross draft's per-row writes added a graph every few steps: 19 -> 27 for 2.5x)."""
    tok, atok, _, _ = plain["tokenizers"]
    name = "assistant_same_tokenizer" if draft == "same" else "assistant"
    extra = dict(tokenizer=tok, assistant_tokenizer=atok) if draft == "cross" else {}
    counts = []
    for max_new in (24, 100):
        with emu.counting_lazy_graphs() as lazy:
            out = assisted_generate(gaudi_models["target"], gaudi_models[name], plain["ids4"], plain["mask4"],
                                    max_new_tokens=max_new, do_sample=False, eos_token_id=None, lazy_mode=True,
                                    hpu_graphs=False, **extra)
        counts.append((len(lazy.graphs), lazy.segments))
        assert out.metrics.target_calls > 3
    (few, steps_few), (many, steps_many) = counts
    assert steps_many > 3 * steps_few and many <= few + 4, counts


def test_cli_baseline_runs_with_optimum_habanas_generation_config(emu, gaudi_models):
    """Finding 6: the flags optimum-uag's own loop does not need still reach the target-only baseline, built as
    optimum-habana's run_generation.py builds it (setup_generation_config), without touching the model's."""
    from optimum_uag.cli import build_parser, upstream_generation_config

    model = gaudi_models["target"]
    args = build_parser().parse_args(["--bucket_size", "16", "--bucket_internal", "--trim_logits",
                                      "--attn_softmax_bf16", "--limit_hpu_graphs", "--reduce_recompile",
                                      "--reuse_cache", "--use_flash_attention", "--no-ignore_eos"])
    config = upstream_generation_config(model, args)
    assert config.static_shapes and config.reuse_cache and config.bucket_size == 16 and config.bucket_internal
    assert config.trim_logits and config.attn_softmax_bf16 and config.limit_hpu_graphs and config.reduce_recompile
    assert config.use_flash_attention and config.ignore_eos is False
    assert getattr(model.generation_config, "bucket_size", -1) != 16


@pytest.mark.slow
def test_fp8_inc_gaudi_target_with_reuse_cache(plain, emu, gaudi_models, tmp_path, monkeypatch):
    """Finding 3's setting: an INC FP8 (QDQ on CPU) quantized Gaudi Llama with reuse_cache, measured then
    quantized; assisted output == the quantized target's own (optimum-habana's static-shape generate). INC
    patches KVCache modules only on HPU (here they stay KVCache); the runner reads a PatchedKVCache's live
    `orig_mod` (runner._live), which only a Gaudi run can exercise."""
    from optimum_uag.quantization import finalize_measurements, quantize_model

    monkeypatch.chdir(tmp_path)
    configs = Path(__file__).resolve().parents[1] / "habana_configs" / "quantization_config"
    config = AutoConfig.from_pretrained(gaudi_models["target"].name_or_path)
    load = lambda: _gaudi_class(config).from_pretrained(gaudi_models["target"].name_or_path,  # noqa: E731
                                                        torch_dtype=torch.float32).eval()
    gaudi = dict(static_shapes=True, reuse_cache=True, lazy_mode=True, hpu_graphs=False, do_sample=False)
    measured = quantize_model(load(), configs / "maxabs_measure_qdq.json")
    measured.generate(plain["ids4"], attention_mask=plain["mask4"], max_new_tokens=8, **gaudi)
    finalize_measurements(measured)
    quantized = quantize_model(load(), configs / "maxabs_quant_qdq.json")
    expected = quantized.generate(plain["ids4"], attention_mask=plain["mask4"], max_new_tokens=24, **gaudi)
    out = assisted_generate(quantized, gaudi_models["assistant_same_tokenizer"], plain["ids4"], plain["mask4"],
                            max_new_tokens=24, **gaudi)
    assert torch.equal(out.sequences, expected)
    assert out.metrics.tau > 1.5


@pytest.mark.parametrize("batch", [1, 4])
def test_feature_head_on_gaudi_target_equals_target(plain, emu, gaudi_models, batch):
    """A feature head reads the Gaudi target's hidden states from its static-shape verify forwards (HPU graphs,
    reuse_cache, prompt blocks bucketed): greedy output equals the target's, target captures stay bounded."""
    from optimum_uag.engine.config import DEFAULT_TREE

    target, head = gaudi_models["target"], plain["feature_head"]
    captured, width = [], DEFAULT_TREE.nodes + 1
    for max_new in (16, 24):
        emu.reset_counters(clear_graphs=True)
        out = assisted_generate(target, head, plain[f"ids{batch}"], plain[f"mask{batch}"], max_new_tokens=max_new,
                                do_sample=False, num_assistant_tokens=3, **GAUDI)
        assert torch.equal(out.sequences, plain[f"greedy{batch}"][:, : out.sequences.shape[1]])
        captured.append(emu.captures.get("target", 0))
    assert captured[0] == captured[1] <= 2  # prefill + verify
    # the features read back from the replayed graphs are the target's: the same drafts as on the plain target
    assert out.metrics.accepted_tokens == plain["feature_accepted"][batch] > 0


@pytest.mark.parametrize("batch", [1, 4])
def test_feature_head_tree_on_gaudi_target_equals_target(plain, emu, gaudi_models, batch):
    """Draft trees on the Gaudi runner (reuse_cache): one [root, nodes] verify block per round with a tree mask
    over the cache columns, the rejected nodes hidden by the slot map (no key / value moves): greedy output equals
    the target's, the target's graph captures are the prefill and the one tree bucket whatever max_new_tokens,
    and the accepted tokens equal the plain target's with the same tree (the same features and verdicts)."""
    from optimum_uag.engine.config import DEFAULT_TREE

    target, head = gaudi_models["target"], plain["feature_head"]
    captured, width = [], DEFAULT_TREE.nodes + 1
    for max_new in (16, 24):
        emu.reset_counters(clear_graphs=True)
        out = assisted_generate(target, head, plain[f"ids{batch}"], plain[f"mask{batch}"], max_new_tokens=max_new,
                                do_sample=False, draft_tree=True, **GAUDI)
        assert torch.equal(out.sequences, plain[f"greedy{batch}"][:, : out.sequences.shape[1]])
        captured.append(emu.captures.get("target", 0))
        assert out.metrics.tree_rounds == out.metrics.target_calls - 1 and (batch, width) in out.metrics.target_shapes
    assert captured[0] == captured[1] <= 2  # prefill + the tree bucket
    assert out.metrics.accepted_tokens == plain["tree_accepted"][batch] > 0


@pytest.mark.parametrize("batch", [1, 4])
def test_fused_feature_head_on_gaudi_target_equals_target(plain, emu, gaudi_models, batch):
    """A head with fused features (EAGLE-3) on the Gaudi runner: optimum-habana's models return no hidden_states, so
    pre-hooks on the fused decoder layers copy their inputs, beside the final norm's hook, into one buffer per block
    shape inside the captured graphs. Greedy output equals the target's, captures stay the prefill and the tree
    bucket, and the accepted tokens equal the plain target's (the same layers' features, read back from replays)."""
    target, head = gaudi_models["target"], plain["fused_head"]
    captured = []
    for max_new in (16, 24):
        emu.reset_counters(clear_graphs=True)
        out = assisted_generate(target, head, plain[f"ids{batch}"], plain[f"mask{batch}"], max_new_tokens=max_new,
                                do_sample=False, draft_tree=True, draft_policy="fixed", **GAUDI)
        assert torch.equal(out.sequences, plain[f"greedy{batch}"][:, : out.sequences.shape[1]])
        captured.append(emu.captures.get("target", 0))
    assert captured[0] == captured[1] <= 2
    assert out.metrics.accepted_tokens == plain["fused_accepted"][batch] > 0
    # graphs kept across calls: a plain head captures first, then the fused one at the same block shapes. Its graphs
    # are its own (the layers are a graph key), not the plain head's replays, which write into another buffer
    emu.reset_counters(clear_graphs=True)
    opts = dict(max_new_tokens=24, do_sample=False, draft_tree=True, draft_policy="fixed", **GAUDI)
    out = assisted_generate(target, plain["feature_head"], plain[f"ids{batch}"], plain[f"mask{batch}"], **opts)
    assert out.metrics.accepted_tokens == plain["tree_accepted"][batch]
    out = assisted_generate(target, head, plain[f"ids{batch}"], plain[f"mask{batch}"], **opts)
    assert out.metrics.accepted_tokens == plain["fused_accepted"][batch]
    out = assisted_generate(target, plain["feature_head"], plain[f"ids{batch}"], plain[f"mask{batch}"], **opts)
    assert out.metrics.accepted_tokens == plain["tree_accepted"][batch]


def test_uag_draft_window_slides_on_gaudi(plain, emu, gaudi_models):
    """A cross-tokenizer Gaudi draft with a short context: its window slides (a fresh runner for the draft) while
    the first one is still open in the call; the old one is closed first, so the call neither refuses "already
    runs in this generate() call" nor loses exactness."""
    import copy

    tok, atok = plain["tokenizers"][:2]
    source = gaudi_models["assistant"]
    config = copy.deepcopy(source.config)
    config.max_position_embeddings = 40  # prompt (~20-30 draft tokens) + 24 new: the window must slide
    short = _gaudi_copy(config, source.state_dict())
    emu.name(short, "assistant")
    out = assisted_generate(gaudi_models["target"], short, plain["ids1"], plain["mask1"], max_new_tokens=24,
                            do_sample=False, tokenizer=tok, assistant_tokenizer=atok, num_assistant_tokens=3, **GAUDI)
    assert torch.equal(out.sequences, plain["greedy1"][:, : out.sequences.shape[1]])


# ------------------------------------------------------------- upstream generate()'s own arguments (issue 22)
def test_upstream_iteration_times_and_profiler_are_filled(plain, emu, gaudi_models):
    """optimum-habana's run_generation.py passes profiler= and iteration_times= to generate() and reads
    iteration_times[0] as the first-token latency: both work, one entry / profiler step per round."""
    calls, times = [], []

    class Profiler:  # the interface of upstream's HabanaProfile
        def start(self):
            calls.append("start")

        def step(self):
            calls.append("step")

        def stop(self):
            calls.append("stop")

    out = gaudi_models["target"].generate(plain["ids1"], attention_mask=plain["mask1"], max_new_tokens=12,
                                          do_sample=False, assistant_model=gaudi_models["assistant_same_tokenizer"],
                                          iteration_times=times, profiler=Profiler(), **GAUDI)
    metrics = optimum_uag.last_metrics()
    assert torch.equal(out, plain["greedy1"][:, : out.shape[1]])
    # per generated token, as upstream counts them (its "rest token latency" is the mean of times[1:]), not per round
    assert len(times) == metrics.generated_tokens == 12 > metrics.target_calls and all(t > 0 for t in times)
    assert calls == ["start"] + ["step"] * 12 + ["stop"]
    gaudi_models["target"].generate(plain["ids1"], attention_mask=plain["mask1"], max_new_tokens=4, do_sample=False,
                                    assistant_model=gaudi_models["assistant_same_tokenizer"], profiler=None, **GAUDI)


def test_softmax_knobs_reach_the_target_forwards(plain, emu, gaudi_models):
    """attn_softmax_bf16 / flash_attention_fast_softmax change the target-only baseline's logits upstream: our
    forwards get them where upstream's do (causal-mask mode stays off: our mask is explicit)."""
    target = gaudi_models["target"]
    seen = []
    hook = target.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    try:
        assisted_generate(target, gaudi_models["assistant_same_tokenizer"], plain["ids1"], plain["mask1"],
                          max_new_tokens=6, do_sample=False, lazy_mode=True, static_shapes=True, reuse_cache=True,
                          use_flash_attention=True, attn_softmax_bf16=True, flash_attention_fast_softmax=True)
    finally:
        hook.remove()
    assert seen and all(kw.get("attn_softmax_bf16") is True and kw.get("flash_attention_causal_mask") is False
                        for kw in seen)
    # issue 29, finding 7: upstream's Llama uses the fast softmax for q_len > 1 only (the prompt), so its target-only
    # decode never does: our verify blocks (K+1 tokens) must not either
    prompt = [kw for kw in seen if kw["input_ids"].shape[1] >= 16]  # (prompt blocks: multiples of 16)
    later = [kw for kw in seen if kw["input_ids"].shape[1] < 16]
    assert prompt and all(kw.get("flash_attention_fast_softmax") is True for kw in prompt)
    assert later and all(kw.get("flash_attention_fast_softmax") is False and
                         kw.get("flash_attention_recompute") is False for kw in later)


def test_lazy_mode_defaults_to_off_as_upstream_and_graphs_need_it(plain, emu, gaudi_models):
    args = (gaudi_models["target"], gaudi_models["assistant_same_tokenizer"], plain["ids1"], plain["mask1"])
    with pytest.raises(ValueError, match="hpu_graphs=True needs lazy_mode=True"):
        assisted_generate(*args, max_new_tokens=4, hpu_graphs=True, static_shapes=True, reuse_cache=True)
    emu.reset_counters()
    out = assisted_generate(*args, max_new_tokens=6, do_sample=False, static_shapes=True, reuse_cache=True)
    assert emu.mark_steps == 0  # upstream's default generate(lazy_mode=False): no mark_step per forward
    assert torch.equal(out.sequences, plain["greedy1"][:, : out.sequences.shape[1]])


def test_multi_card_runs_turn_on_lazy_collectives(monkeypatch):
    """As optimum-habana's examples/text-generation/utils.py setup_env: WORLD_SIZE > 0 sets
    PT_HPU_ENABLE_LAZY_COLLECTIVES=true before habana_frameworks loads (HPU graphs + DeepSpeed hang without it)."""
    from optimum_uag import distributed

    monkeypatch.delenv("PT_HPU_ENABLE_LAZY_COLLECTIVES", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    distributed.prepare_env()
    assert "PT_HPU_ENABLE_LAZY_COLLECTIVES" not in __import__("os").environ
    monkeypatch.setenv("WORLD_SIZE", "2")
    distributed.prepare_env()
    assert __import__("os").environ["PT_HPU_ENABLE_LAZY_COLLECTIVES"] == "true"
    monkeypatch.setenv("PT_HPU_ENABLE_LAZY_COLLECTIVES", "false")  # a user's own choice is kept
    distributed.prepare_env()
    assert __import__("os").environ["PT_HPU_ENABLE_LAZY_COLLECTIVES"] == "false"


def test_a_prompt_longer_than_the_free_room_stays_inside_the_rope_table(emu):
    """optimum-habana's Llama sizes its RoPE table by the past length the runner reports (columns - block length);
    a prefill longer than columns - max_len used to index past it (IndexError on CPU, garbage from FusedRoPE on an
    HPU). Long prompts now run in chunks: every logit equals a no-cache forward."""
    from optimum_uag.gaudi import GaudiModelRunner

    model = tiny_llama(50, 3, layers=2, hidden=32)
    model = _gaudi_copy(model.config, model.state_dict())
    runner = GaudiModelRunner(model, 1, 52, torch.tensor([0]), lazy_mode=True, columns=72)  # room: 20 columns
    tokens = torch.randint(1, 50, (1, 48), generator=torch.Generator().manual_seed(1))
    logits = runner.forward(tokens, torch.tensor([0]))
    with torch.no_grad():
        expected = model(tokens, use_cache=False).logits
    torch.testing.assert_close(logits, expected.float(), atol=1e-4, rtol=1e-4)
    # chunks of a power of two <= (columns - first slot) / 2: 32 at slot 0, 16 at slot 32
    assert {length for _, length in runner.shapes} == {32, 16}


def test_a_long_prompt_never_builds_a_mask_over_the_budget(emu, monkeypatch):
    """Issue 29, finding 10: the runner's explicit (B, 1, L, columns) mask in the model's dtype (a 32k prompt at
    batch 8: 16 GiB in bf16, where upstream's causal FusedSDPA builds none) is bounded: a prompt whose mask would
    exceed MASK_BYTES runs in chunks of a power of two; every logit still equals a no-cache forward."""
    from optimum_uag.gaudi import GaudiModelRunner, runner as gaudi_runner

    model = tiny_llama(50, 3, layers=2, hidden=32)
    model = _gaudi_copy(model.config, model.state_dict())
    runner = GaudiModelRunner(model, 2, 200, torch.tensor([0, 5]), lazy_mode=True)
    budget = 2 * runner.columns * 4 * 40  # 40 rows of float32 at batch 2: chunks of 32 (MASK_ROWS lowered to 8)
    monkeypatch.setattr(gaudi_runner, "MASK_BYTES", budget)
    monkeypatch.setattr(gaudi_runner, "MASK_ROWS", 8)
    masks = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: masks.append(kw["attention_mask"]), with_kwargs=True)
    tokens = torch.randint(1, 50, (2, 112), generator=torch.Generator().manual_seed(3))
    try:
        logits = runner.forward(tokens, torch.tensor([0, 0]))
    finally:
        hook.remove()
    assert len(masks) == 4 and max(m.numel() * m.element_size() for m in masks) <= budget
    with torch.no_grad():
        expected = model(tokens[1:, 5:], use_cache=False).logits
        first = model(tokens[:1], use_cache=False).logits
    torch.testing.assert_close(logits[1:, 5:], expected.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[:1], first.float(), atol=1e-4, rtol=1e-4)


def test_the_rope_table_covers_the_cache_width_before_any_graph(emu, monkeypatch):
    """As upstream's generate(): update_sincos_cache(seq_len=columns) when the width exceeds
    max_position_embeddings, so the table is not rebuilt inside a forward (a lazy graph / HPU-graph capture)."""
    from optimum_uag.gaudi import GaudiModelRunner

    config = tiny_llama(50, 3, layers=1, hidden=32).config
    config.max_position_embeddings = 64
    model = _gaudi_copy(config, tiny_llama(50, 3, layers=1, hidden=32).state_dict())
    grown = []
    monkeypatch.setattr(type(model), "update_sincos_cache", lambda self, seq_len: grown.append(seq_len),
                        raising=False)
    GaudiModelRunner(model, 1, 60, torch.tensor([0]), lazy_mode=True, columns=128)
    assert grown == [128]


# ------------------------------------------- HPU graphs of our own, never the user's model (issue 22, 2 and 12)
def _fresh(model):
    return _gaudi_copy(model.config, model.state_dict())


def test_hpu_graphs_leave_the_users_model_unwrapped(plain, emu, gaudi_models):
    """Finding 2: wrapping changes a module for good (habana's wrapper replaces its forward); a later call with
    hpu_graphs=False would still replay. optimum-uag wraps a step module of its own, kept with the pooled cache."""
    target = _fresh(gaudi_models["target"])
    emu.name(target, "fresh")
    forward = target.forward
    out = assisted_generate(target, gaudi_models["assistant_same_tokenizer"], plain["ids4"], plain["mask4"],
                            max_new_tokens=24, do_sample=False, **GAUDI)
    assert torch.equal(out.sequences, plain["greedy4"])
    assert emu.captures["fresh"] > 0
    assert "clear_cache" not in target.__dict__ and target.forward == forward
    emu.reset_counters()
    out = assisted_generate(target, gaudi_models["assistant_same_tokenizer"], plain["ids4"], plain["mask4"],
                            max_new_tokens=24, do_sample=False, lazy_mode=True, hpu_graphs=False)
    assert torch.equal(out.sequences, plain["greedy4"])
    assert emu.replays.get("fresh", 0) == 0 and emu.captures.get("fresh", 0) == 0


def test_models_the_caller_wrapped_are_not_wrapped_again(plain, emu, gaudi_models):
    """Upstream's run_generation.py wraps target and assistant before generate(hpu_graphs=True); habana's wrapper
    has no already-wrapped guard (the emulator now refuses a nested capture): our step calls a wrapped model with
    bypass_hpu_graphs=True, and optimum-habana's own generate() still replays the caller's graphs."""
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    target, draft = _fresh(gaudi_models["target"]), _fresh(gaudi_models["assistant_same_tokenizer"])
    for model in (target, draft):
        hpu.wrap_in_hpu_graph(model)
    emu.name(target, "wrapped target")
    for _ in range(2):
        out = assisted_generate(target, draft, plain["ids4"], plain["mask4"], max_new_tokens=24, do_sample=False,
                                **GAUDI)
        assert torch.equal(out.sequences, plain["greedy4"])
    own = _habanas_own_greedy(target, plain["ids1"], plain["mask1"], target.generation_config)
    assert torch.equal(own, plain["greedy1"])


def test_token_idx_cache_is_not_a_graph_input(plain, emu, gaudi_models):
    """Finding 12: a GPT-NeoX (token_idx) model's `past` passed as an argument is a graph input, which habana's
    copy_to copies onto itself on every replay (the whole KV cache). Our step holds it as an attribute."""
    tok, atok, _, _ = plain["tokenizers"]
    emu.reset_counters()
    out = assisted_generate(gaudi_models["target"], gaudi_models["assistant"], plain["ids4"], plain["mask4"],
                            tokenizer=tok, assistant_tokenizer=atok, max_new_tokens=24, do_sample=False, **GAUDI)
    assert torch.equal(out.sequences, plain["greedy4"])
    assert emu.replays["assistant"] > 0 and emu.self_copy_bytes == 0


def test_a_token_idx_target_is_refused_with_the_reason(plain, emu, gaudi_models):
    """Finding 12: a token_idx class verifies K+1 tokens in K+1 forwards (its mask is causal only without a past):
    assisted generation cannot beat target-only there, so it is refused, naming what works."""
    neox = gaudi_models["assistant"]
    ids = torch.tensor([[5, 6, 7, 8]])
    with pytest.raises(ValueError, match="K\\+1 sequential forwards.*reuse_cache"):
        assisted_generate(neox, _fresh(neox), ids, max_new_tokens=8, do_sample=False, **GAUDI)


def test_disabled_tensor_cache_stays_exact(plain, emu, gaudi_models, monkeypatch):
    """PT_HPUGRAPH_DISABLE_TENSOR_CACHE=1 (upstream's utils.py sets it with limit_hpu_graphs): replays read the new
    call's inputs and never refill the captured ones; outputs stay the target's."""
    tok, atok, _, _ = plain["tokenizers"]
    monkeypatch.setenv("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", "1")
    emu.reset_counters(clear_graphs=True)
    for _ in range(2):
        out = assisted_generate(gaudi_models["target"], gaudi_models["assistant"], plain["ids4"], plain["mask4"],
                                tokenizer=tok, assistant_tokenizer=atok, max_new_tokens=24, do_sample=False, **GAUDI)
        assert torch.equal(out.sequences, plain["greedy4"])
    assert emu.replays["target"] > 0


def test_pooled_caches_are_freed_on_request_and_with_the_model(plain, emu, gaudi_models):
    """Finding 7: the KV caches, graphs and feature buffers pooled for a model go with free_caches(model), and with
    the model itself (the registry is weak; the emulator keeps no graph alive)."""
    import gc
    import weakref

    from optimum_uag.gaudi import free_caches
    from optimum_uag.registry import model_state

    def pooled(model):
        out = assisted_generate(model, gaudi_models["assistant_same_tokenizer"], plain["ids1"], plain["mask1"],
                                max_new_tokens=8, do_sample=False, **GAUDI)
        assert torch.equal(out.sequences, plain["greedy1"][:, : out.sequences.shape[1]])
        return [weakref.ref(t) for tensors in model_state(model)["kv_pool"].values() for t in tensors]

    target = _fresh(gaudi_models["target"])
    refs = pooled(target)
    free_caches(target)
    gc.collect()
    assert refs and not any(r() is not None for r in refs)
    assert "kv_pool" not in model_state(target) and "graph_steps" not in model_state(target)
    refs = pooled(target)  # and it runs again, exactly
    del target
    gc.collect()
    assert not any(r() is not None for r in refs)


def test_the_feature_head_keeps_its_shapes_across_prompt_lengths_and_lengths_of_generation(plain, emu, gaudi_models):
    """Issue 29, finding 12: the head's cache was sized from prompt + max_new_tokens and its first catch-up was as
    wide as the prompt: outside HPU graphs each new prompt length compiled new lazy-mode graphs. Both are bucketed
    now: two prompt lengths in one bucket and two max_new_tokens give the head the same shapes (and still the target's
    tokens)."""
    from optimum_uag.engine.drafters import feature

    target, head = gaudi_models["target"], plain["feature_head"]
    widths = []
    original = feature.FeatureDrafter.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        widths.append(self.columns)

    shapes = []
    for ids, mask, greedy, max_new in (("ids4", "mask4", "greedy4", 24), ("ids4p", "mask4p", "greedy4p", 20)):
        assert -(-plain[ids].shape[1] // 16) == -(-plain["ids4"].shape[1] // 16)  # one prompt bucket
        feature.FeatureDrafter.__init__ = recording
        try:
            out = assisted_generate(target, head, plain[ids], plain[mask], max_new_tokens=max_new, do_sample=False,
                                    num_assistant_tokens=3, **GAUDI)
        finally:
            feature.FeatureDrafter.__init__ = original
        assert torch.equal(out.sequences, plain[greedy][:, : out.sequences.shape[1]])
        shapes.append(set(out.metrics.draft_shapes))
    assert shapes[0] == shapes[1] and widths[0] == widths[1], (shapes, widths)


def test_feature_buffers_outlive_the_call_that_captured_them(plain, emu, gaudi_models):
    """A graph captured in one call writes the target's features into the buffer that existed at capture: the
    buffers are pooled with the cache, so a second call (graphs replayed, none captured) reads real features."""
    target, head = gaudi_models["target"], plain["feature_head"]
    emu.reset_counters(clear_graphs=True)
    for _ in range(2):
        out = assisted_generate(target, head, plain["ids4"], plain["mask4"], max_new_tokens=24, do_sample=False,
                                num_assistant_tokens=3, **GAUDI)
        assert torch.equal(out.sequences, plain["greedy4"])
        assert out.metrics.accepted_tokens == plain["feature_accepted"][4]


# ---------------------------------------------- optimum-habana's run_generation.py through our engine (finding 4)
@pytest.mark.parametrize("flags,draft", [([], "assistant_same_tokenizer"),
                                        (["--limit_hpu_graphs", "--bucket_internal", "--bucket_size", "16"],
                                         "assistant_same_tokenizer"),
                                        ([], "assistant"), (["--dataset_path"], "assistant_same_tokenizer"),
                                        (["--max_input_tokens", "16", "--use_flash_attention", "--no-ignore_eos"],
                                         "assistant_same_tokenizer")],
                         ids=["graphs", "no-tensor-cache", "uag", "dataset", "flash-max-input"])
def test_upstream_run_generation_sequence_through_the_launcher(tmp_path, flags, draft):
    """`python -m optimum_uag.gaudi.launch SCRIPT` runs a script making run_generation.py's calls in its order
    (setup_env's adapt_transformers_to_gaudi() after our enable(), both models wrapped in HPU graphs, upstream's
    generation config and generate() arguments, batch 2); generate(assistant_model=...) reaches our engine and
    equals optimum-habana's own target-only generate(). With --limit_hpu_graphs --bucket_internal upstream's
    setup_env sets PT_HPUGRAPH_DISABLE_TENSOR_CACHE=1. A draft with another tokenizer (issue 29, finding 5): upstream
    passes generate() no tokenizers; the launcher loads them from the two model paths, and UAG runs. Upstream's
    --dataset_name path (finding 8) calls generate() without assistant_model: the launcher's --assistant_model drafts.
    Finding 14: upstream's --max_input_tokens tokenization (prompts padded to 16) with --use_flash_attention (fast
    softmax on, as upstream defaults it) and --no-ignore_eos (the others run upstream's default ignore_eos=True)."""
    import json
    import subprocess
    import sys

    from optimum_uag import embedded_models

    paths = embedded_models()
    here = Path(__file__).parent
    out = tmp_path / "report.json"
    env = {k: v for k, v in __import__("os").environ.items() if k != "PT_HPUGRAPH_DISABLE_TENSOR_CACHE"}
    done = subprocess.run([sys.executable, str(here / "emulated_launch.py"), str(here / "upstream_calls.py"),
                           "--model_name_or_path", str(paths["target"]), "--assistant_model",
                           str(paths[draft]), "--batch_size", "2", "--use_hpu_graphs",
                           "--output", str(out), *flags], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["routed"] and report["target_calls"] < 24
    assert report["sequences"] == report["reference"] and len(report["sequences"]) == 2
    assert report["first_token_time"] > 0 and report["captures"]["GraphStep"] > 0


def test_the_launcher_moves_an_assistant_left_on_the_cpu(monkeypatch):
    """Issue 29, finding 2: optimum-habana's multi-card setup_distributed_model loads the assistant and never moves
    it to the device; under the launcher it is moved to the target's device (the engine refused it before). Outside
    the launcher the mismatch stays the engine's error naming the fix. (The emulator keeps every tensor on the CPU: the target
    here only reports an HPU device.)"""
    from optimum_uag import patch

    class OnHpu:
        device = torch.device("hpu")

    assistant = tiny_llama(8, 1, layers=1, hidden=16)
    moved = []
    monkeypatch.setattr(assistant, "to", lambda device: moved.append(device) or assistant)
    monkeypatch.setitem(patch._LAUNCH, "launched", False)
    assert patch._place_assistant(OnHpu(), assistant) is assistant and moved == []
    monkeypatch.setitem(patch._LAUNCH, "launched", True)
    assert patch._place_assistant(OnHpu(), assistant) is assistant and moved == [torch.device("hpu")]
    moved.clear()
    assert patch._place_assistant(assistant, assistant) is assistant and moved == []  # a CPU target: nothing to do


def test_a_gaudi_llama_runs_past_a_capped_max_position_embeddings(plain, emu):
    """Issue 29, finding 4: upstream's multi-card loader caps a Llama's max_position_embeddings at 8192 and its
    generate() extends the RoPE tables to the request (update_sincos_cache); ours did refuse prompt + max_new_tokens
    beyond the cap. Here the cap is 16 and the request 27 positions: exact against the class's own output."""
    import copy

    ref = copy.copy(plain["classes"]["llama"])
    ref["config"] = copy.deepcopy(ref["config"])
    ref["config"].max_position_embeddings = 16
    target = gaudi_classes.gaudi_instance(ref)
    draft = gaudi_classes.gaudi_instance(plain["classes"]["llama"])
    assert gaudi_classes.PROMPT.shape[1] + gaudi_classes.NEW > 16
    out = assisted_generate(target, draft, gaudi_classes.PROMPT, gaudi_classes.MASK, max_new_tokens=gaudi_classes.NEW,
                            do_sample=False, pad_token_id=0, num_assistant_tokens=3, **GAUDI)
    assert torch.equal(out.sequences, gaudi_classes.own_greedy(target))


def test_launcher_usage_errors(tmp_path):
    from optimum_uag.gaudi.launch import main

    assert main([]) == 2
    assert main([str(tmp_path / "missing.py")]) == 2


def test_routing_holds_when_upstream_adapts_again_and_for_direct_mixin_classes(plain, emu, gaudi_models):
    """Finding 4: upstream's setup_env calls adapt_transformers_to_gaudi() (GenerationMixin.generate =
    GaudiGenerationMixin.generate) after our enable(); Baichuan, ChatGLM and MiniCPM3 inherit GaudiGenerationMixin
    directly, so GenerationMixin's generate() is not theirs. Both reach the engine."""
    from optimum.habana.transformers.generation import GaudiGenerationMixin
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    from optimum_uag import patch

    target, draft = gaudi_models["target"], gaudi_models["assistant_same_tokenizer"]
    adapt_transformers_to_gaudi()
    patch._LAST["metrics"] = None
    out = target.generate(plain["ids4"], attention_mask=plain["mask4"], assistant_model=draft, max_new_tokens=24,
                          do_sample=False, lazy_mode=True, hpu_graphs=True)
    assert torch.equal(out, plain["greedy4"]) and patch.last_metrics() is not None

    direct_class = type("DirectMixinLlama", (type(target), GaudiGenerationMixin), {})
    assert direct_class.generate is GaudiGenerationMixin.__dict__["generate"]  # MRO: not GenerationMixin's
    direct = _fresh(target)
    direct.__class__ = direct_class
    patch._LAST["metrics"] = None
    out = direct.generate(plain["ids4"], attention_mask=plain["mask4"], assistant_model=draft, max_new_tokens=24,
                          do_sample=False, lazy_mode=True, hpu_graphs=True)
    assert torch.equal(out, plain["greedy4"]) and patch.last_metrics() is not None


def test_limit_and_clear_hpu_graphs_and_bucket_size_are_honoured(plain, emu, gaudi_models):
    """Finding 7: upstream's limit_hpu_graphs runs the prompt's forward outside graphs (_get_hpu_graphs_kwargs:
    bypass_hpu_graphs for the first token), clear_hpu_graphs_cache drops the graphs at the end of the call, and
    bucket_size sets the cache width's multiple (else of the runner's 32-column margin)."""
    from optimum_uag.engine import loop
    from optimum_uag.gaudi.runner import GaudiModelRunner

    target, draft = _fresh(gaudi_models["target"]), gaudi_models["assistant_same_tokenizer"]
    emu.name(target, "limited")

    def run(**knobs):
        emu.reset_counters()
        out = assisted_generate(target, draft, plain["ids4"], plain["mask4"], max_new_tokens=24, do_sample=False,
                                **{**GAUDI, **knobs})
        assert torch.equal(out.sequences, plain["greedy4"])
        return emu.captures.get("limited", 0)

    plain_captures = run()
    target_free = _fresh(gaudi_models["target"])
    emu.name(target_free, "limited")
    target = target_free
    limited = run(limit_hpu_graphs=True)
    assert limited == plain_captures - 1  # the prompt's graph is not captured
    assert run(limit_hpu_graphs=True) == 0  # graphs kept across calls ...
    assert run(limit_hpu_graphs=True, clear_hpu_graphs_cache=True) == 0  # upstream clears only without reuse_cache
    assert run(limit_hpu_graphs=True) == 0
    clearing = dict(limit_hpu_graphs=True, clear_hpu_graphs_cache=True, reuse_cache=False, bucket_internal=True)
    from optimum_uag.gaudi import options

    options._WARNED.clear()  # the warning is once per process
    with pytest.warns(UserWarning, match="bucket_internal"):
        assert run(**clearing) == 0
    assert run(limit_hpu_graphs=True) == limited  # ... until clear_hpu_graphs_cache dropped them

    runner = GaudiModelRunner(_fresh(gaudi_models["target"]), 2, 100, torch.zeros(2, dtype=torch.long),
                              bucket_size=48)
    assert runner.columns == 144  # 100 + the 32-column margin -> three buckets of 48 (else 160: multiples of 32)
    with pytest.raises(ValueError, match="bucket_size must be an int"):
        assisted_generate(target, draft, plain["ids1"], plain["mask1"], max_new_tokens=4, bucket_size="16", **GAUDI)
    assert loop is not None


@pytest.mark.parametrize("arch", ["llama", "neox"])
def test_compaction_and_prefill_copy_on_fp8_kv_caches(emu, arch):
    """Finding 13: under INC's FP8 quantization the KV caches are float8_e4m3fn; our compaction (a gather) and the
    token_idx prefill copy (index_copy_) move their bits (a uint8 view): bit-identical to doing it in fp32 and
    converting, where gather / index_copy_ on float8 are not even implemented (CPU)."""
    from optimum_uag.gaudi import GaudiModelRunner
    from optimum_uag.gaudi.runner import _kv_caches, _live

    fp8 = torch.float8_e4m3fn
    model = tiny_llama(50, 3, layers=2, hidden=32) if arch == "llama" else tiny_neox(50, 3, hidden=32)
    model = _gaudi_copy(model.config, model.state_dict())
    pad = torch.tensor([0, 2])
    runner = GaudiModelRunner(model, 2, 24, pad, lazy_mode=True, columns=30)
    gen = torch.Generator().manual_seed(1)
    runner.forward(torch.randint(1, 50, (2, 6), generator=gen), torch.zeros(2, dtype=torch.long))
    for start in ([6, 8], [5, 7], [7, 6], [6, 9]):
        runner.forward(torch.randint(1, 50, (2, 1), generator=gen), torch.tensor(start))

    def tensors():
        if arch == "llama":
            return [_live(c).cache for pair in _kv_caches(model) for c in pair]
        return [t for pair in runner.past for t in pair]

    def set_tensors(new):
        if arch == "llama":
            for module, tensor in zip([_live(c) for pair in _kv_caches(model) for c in pair], new):
                module.cache = tensor
        else:
            runner.past = tuple(zip(new[::2], new[1::2]))

    full, slots = [t.clone() for t in tensors()], runner.slot_of.clone()
    set_tensors([t.to(fp8) for t in full])
    runner._compact()
    got = [t.view(torch.uint8).clone() for t in tensors()]
    assert all(t.dtype == fp8 for t in tensors())
    set_tensors(full)
    runner.slot_of = slots
    runner._compact()
    assert all(torch.equal(g, t.to(fp8).view(torch.uint8)) for g, t in zip(got, tensors()))
    runner.close()
    if arch == "neox":  # the prefill is copied into a caller-allocated cache: an fp8 one too
        prompt = torch.randint(1, 50, (2, 6), generator=gen)
        fresh = GaudiModelRunner(model, 2, 24, pad, lazy_mode=True, columns=32)
        fresh.forward(prompt, torch.zeros(2, dtype=torch.long))
        reference = [t.clone() for pair in fresh.past for t in pair]
        fresh.close()
        fp8_runner = GaudiModelRunner(model, 2, 24, pad, lazy_mode=True, columns=40)
        fp8_runner.past = tuple((k.to(fp8), v.to(fp8)) for k, v in fp8_runner.past)
        fp8_runner.forward(prompt, torch.zeros(2, dtype=torch.long))
        for ref, got in zip(reference, [t for pair in fp8_runner.past for t in pair]):
            assert torch.equal(got[:, :, :16].view(torch.uint8), ref[:, :, :16].to(fp8).view(torch.uint8))


def test_the_target_as_its_own_assistant_is_refused_on_gaudi(plain, emu, gaudi_models):
    """One Gaudi model cannot hold two sequences in its static cache (its KVCache modules, the pooled tensors): the
    target passed as its own assistant is a clear error, and the model still works afterwards."""
    target = gaudi_models["target"]
    with pytest.raises(ValueError, match="the target itself.*copy.deepcopy"):
        assisted_generate(target, target, plain["ids1"], plain["mask1"], max_new_tokens=8, do_sample=False, **GAUDI)
    out = assisted_generate(target, gaudi_models["assistant_same_tokenizer"], plain["ids1"], plain["mask1"],
                            max_new_tokens=24, do_sample=False, **GAUDI)
    assert torch.equal(out.sequences, plain["greedy1"])


# ------------------------------------------------------------------------------------------------ every class
def test_the_class_list_is_every_class_optimum_habana_installs(plain, emu):
    """GAUDI_MODEL_TYPES is every causal-LM model type whose class adapt_transformers_to_gaudi() replaced."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    replaced = set()
    for model_type, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        folder = {"gemma3_text": "gemma3"}.get(model_type, model_type)
        try:
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        except Exception:  # noqa: BLE001 - a model needing an optional dependency: not a Gaudi class either
            continue
        cls = getattr(module, name if isinstance(name, str) else name[0], None)
        if cls is not None and type(cls) is type and cls.__name__.startswith("Gaudi"):
            replaced.add({"gemma3": "gemma3_text"}.get(model_type, model_type))  # (Gemma3ForCausalLM: gemma3_text)
    listed = set(gaudi_classes.GAUDI_MODEL_TYPES)
    assert replaced <= listed, sorted(replaced - listed)
    # DeepSeek's classes keep transformers' names (optimum-habana's own modeling files): listed, found by name
    assert listed - replaced <= {"deepseek_v2", "deepseek_v3"}, sorted(listed - replaced)


# what each class does under the emulator on this stack (optimum-habana 1.21.2, transformers 4.55): a change is a
# finding either way (docs/gaudi.md's table is generated from the same check: scripts/gaudi_table.py)
EXACT_BOTH = {"llama", "qwen2", "qwen3", "gemma", "mistral-nowindow", "falcon-7b-layout", "falcon-40b-layout",
              "qwen2_moe", "qwen3_moe"}  # (the MoE classes through the emulator's torch.ops.hpu.mixture_of_experts)
EXACT_DRAFT_ONLY = {"gpt_neox", "gpt_neo", "gpt2", "mllama"}  # token_idx classes: refused as targets (K+1 sequential
# forwards)


@pytest.mark.parametrize("model_type", gaudi_classes.CHECKED)
def test_every_gaudi_class_is_exact_or_refused_by_name(plain, emu, model_type):
    """Issue 29: each causal-LM class optimum-habana ships, as target and as draft: the target's own greedy output,
    or a ValueError naming the class (never a crash from inside, never silent wrong tokens). Each class that runs as
    a target also runs a feature head's draft tree exactly (its features, its tree mask over the cache columns)."""
    ref = plain["classes"][model_type]
    if isinstance(ref, str):
        pytest.skip(f"transformers cannot build a tiny {model_type}: {ref}")
    result = gaudi_classes.check(ref, plain["classes"]["llama"])
    for role in ("target", "draft"):
        assert result[role] in ("exact", "refused"), (model_type, role, result)
    expected_target = "exact" if model_type in EXACT_BOTH else "refused"
    expected_draft = "exact" if model_type in EXACT_BOTH | EXACT_DRAFT_ONLY else "refused"
    assert (result["target"], result["draft"]) == (expected_target, expected_draft), result
    if expected_target == "exact":  # and a feature head's draft tree on it: its features, its tree mask
        assert result["head"] == "exact", result
    if model_type.startswith("deepseek"):  # refused for what it is, not for whatever its forward raises first
        assert "3D latent cache" in result["reason_draft"], result
    if model_type in EXACT_BOTH:  # the class itself computes transformers' model, but for a known upstream bug
        from optimum_uag.gaudi.runner import UPSTREAM_DIFFERS

        assert result["matches_transformers"] is (result["class"] not in UPSTREAM_DIFFERS), result


def test_a_runner_that_fails_to_start_leaves_the_model_as_it_was(plain, emu, monkeypatch):
    """Review finding: a failure after the KV tensors and the KVCache update() were swapped in (a graph wrapper, the
    RoPE table) puts back what was there, so optimum-habana's own generate() and the next runner find the model as
    it was."""
    from optimum_uag.gaudi import device as hpu
    from optimum_uag.gaudi.runner import GaudiModelRunner, _kv_caches, _live

    model = gaudi_classes.gaudi_instance(plain["classes"]["qwen2"])
    modules = [_live(c) for pair in _kv_caches(model) for c in pair]
    assert modules and all(m.cache is None and "update" not in vars(m) for m in modules)

    def broken(*args, **kwargs):
        raise RuntimeError("graph wrapper failed")

    with monkeypatch.context() as patch:
        patch.setattr(hpu, "GraphStep", broken)
        with pytest.raises(RuntimeError, match="graph wrapper failed"):
            GaudiModelRunner(model, 2, 24, torch.tensor([0, 2]), lazy_mode=True)
    assert all(m.cache is None and "update" not in vars(m) for m in modules)
    runner = GaudiModelRunner(model, 2, 24, torch.tensor([0, 2]), lazy_mode=True)  # not "already runs"
    assert all(vars(m).get("update") is not None for m in modules)  # (Qwen2's KVCache: ours while open)
    runner.close()
    assert all("update" not in vars(m) for m in modules)


def test_pooled_caches_and_their_graphs_are_bounded(plain, emu):
    """Issue 29, finding 9: a long-lived process serving mixed shapes keeps at most POOLED caches per model; the
    least recently used goes with its HPU graphs, and a shape used again keeps its cache (the graphs read it)."""
    from optimum_uag.gaudi.cache import POOLED, _pool
    from optimum_uag.gaudi.runner import GaudiModelRunner
    from optimum_uag.registry import model_state

    model = gaudi_classes.gaudi_instance(plain["classes"]["qwen2"])
    lengths = [24, 60, 140, 300, 700, 1500]  # each over twice the last: no pooled cache is wide enough to share
    keys, cleared = [], []
    for i, max_len in enumerate(lengths):
        runner = GaudiModelRunner(model, 1, max_len, torch.tensor([0]), lazy_mode=True, hpu_graphs=True)
        assert len(_pool(model)) <= POOLED  # the peak, while a runner is open
        keys.append((runner.mechanism, 1, runner.columns, runner.dtype))
        step = model_state(model)["graph_steps"][keys[-1]]
        step.clear_cache = (lambda key: lambda: cleared.append(key))(keys[-1])  # (a graph wrapper's own method)
        runner.close()
        assert len(_pool(model)) == min(i + 1, POOLED)
        if i == 1:  # the first shape again: kept, now the most recently used
            again = GaudiModelRunner(model, 1, lengths[0], torch.tensor([0]), lazy_mode=True, hpu_graphs=True)
            assert again.columns == keys[0][2] and len(_pool(model)) == 2
            again.close()
    assert len(set(keys)) == len(lengths)
    # evicted least recently used first: keys[1] (keys[0] was used again after it), then keys[0]
    assert cleared == [keys[1], keys[0]], cleared
    assert set(_pool(model)) == set(keys[2:]) == set(model_state(model)["graph_steps"])


def test_sliding_window_refusal_reads_the_layer_types(plain, emu):
    """A window is refused only where a layer uses it (Qwen2's layer_types), and only past the window."""
    from transformers import Qwen2Config

    from optimum_uag.gaudi.runner import refusal

    model = gaudi_classes.gaudi_instance(plain["classes"]["qwen2"])
    base = model.config.to_dict()
    for sliding, max_window_layers, refused in ((False, 0, False), (True, 0, True), (True, 99, False)):
        model.config = Qwen2Config(**{**base, "use_sliding_window": sliding, "sliding_window": 16,
                                      "max_window_layers": max_window_layers, "layer_types": None})
        reason = refusal(model, 40)
        assert (reason is not None) is refused, (sliding, max_window_layers, model.config.layer_types)
        assert refusal(model, 16) is None  # within the window
        if refused:
            assert "GaudiQwen2ForCausalLM" in reason and "16 tokens" in reason
