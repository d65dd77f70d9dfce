"""Coverage: every decoder-only architecture transformers registers, tiny and random, against its own generate().

For each model_type of MODEL_FOR_CAUSAL_LM_MAPPING (plus a few variants with other code paths): greedy ids with
(a) a draft of the same architecture, (b) a Llama draft sharing the vocabulary, (c) a draft of the same
architecture with a different tokenizer (UAG), batch 1 and a left-padded batch of 2, must equal the target's own
`model.generate()` of each prompt alone. Architectures transformers cannot build tiny or generate with are
skipped with the reason; architectures optimum-uag refuses must be refused with a clear ValueError, and only where
transformers' own assisted generation fails too (its count is the floor).
"""
import warnings

import pytest
import torch
import transformers

from optimum_uag import assisted_generate
from optimum_uag.runners import runner_kind
from optimum_uag.testing.architectures import Unbuildable, causal_lm_types, tiny_model

from helpers import byte_level_bpe, pad_batch, sentencepiece_bpe, tiny_llama

TEXTS = ["def add(a, b):\n    return", "café = 'naïve'"]
NEW = 10


def _target_only(model, ids):
    return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                          min_new_tokens=NEW)


# Architectures transformers' own assisted generation runs that optimum-uag refuses (by name, with the reason).
KNOWN_GAPS: dict[str, str] = {}  # none on transformers 4.55 and 5.25


def _build(model_type, vocab, seed):
    """float64 (no argmax ties), else float32 where transformers' own generate() cannot run in float64."""
    last = None
    for dtype in (torch.float64, torch.float32):
        model = tiny_model(model_type, vocab, seed, dtype=dtype)
        try:
            _target_only(model, torch.tensor([[5, 6, 7]]))
            return model
        except Exception as err:  # noqa: BLE001
            last = err
    pytest.skip(f"transformers cannot generate with tiny {model_type}: {type(last).__name__}: {str(last)[:120]}")


def _prompts_and_references(target, tok, model_type):
    """TEXTS as a left-padded batch (ids, mask), each prompt alone (rows) and the target's own greedy continuation
    of each (refs); skips where transformers' own generate() fails on them (nothing to match)."""
    ids, mask = pad_batch(tok, TEXTS)
    rows = [ids[b, int((mask[b] == 0).sum()):][None] for b in range(len(TEXTS))]
    try:
        refs = [_target_only(target, r)[0, r.shape[1]:] for r in rows]
    except Exception as err:  # noqa: BLE001
        pytest.skip(f"transformers cannot generate with tiny {model_type} on the test prompts: {type(err).__name__}")
    return ids, mask, rows, refs


def _hf_assisted_ok(target, draft, ids) -> bool:
    try:
        out = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                              do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW)
    except Exception:  # noqa: BLE001
        return False
    return torch.equal(out, _target_only(target, ids))


@pytest.mark.slow
@pytest.mark.parametrize("model_type", causal_lm_types())
def test_architecture_greedy_matches_target(model_type):
    warnings.filterwarnings("ignore")
    tok, dtok = byte_level_bpe(), sentencepiece_bpe()
    try:
        target = _build(model_type, len(tok), 0)
        same = tiny_model(model_type, len(tok), 1, dtype=target.dtype)
        cross = tiny_model(model_type, len(dtok), 2, dtype=target.dtype)
    except Unbuildable as err:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {err}")
    llama = tiny_llama(len(tok), 3).to(target.dtype)
    ids, mask, rows, refs = _prompts_and_references(target, tok, model_type)
    drafts = {"same-arch": (same, {}), "llama": (llama, {}),
              "uag": (cross, dict(tokenizer=tok, assistant_tokenizer=dtok))}
    try:
        assisted_generate(target, llama, rows[0], max_new_tokens=2)
    except ValueError as err:
        assert "cannot be run by optimum-uag" in str(err) and type(target).__name__ in str(err)
        if model_type in KNOWN_GAPS:
            pytest.xfail(f"{model_type}: {KNOWN_GAPS[model_type]}")
        assert not _hf_assisted_ok(target, same, rows[0]), f"transformers runs {model_type} assisted; we refuse: {err}"
        return
    for name, (draft, kwargs) in drafts.items():
        for inputs, attention in ((rows[0], None), (ids, mask)):
            out = assisted_generate(target, draft, inputs, attention, max_new_tokens=NEW, num_assistant_tokens=3,
                                    **kwargs).sequences
            for b in range(inputs.shape[0]):
                if torch.equal(out[b, inputs.shape[1]:], refs[b]):
                    continue
                # no xfail here: where transformers' own assisted generation fails too, ours must still be exact
                where = (model_type, name, tuple(inputs.shape), runner_kind(target), runner_kind(draft))
                raise AssertionError(f"{where}: output differs from the target's own generate()")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", causal_lm_types())
def test_architecture_feature_head_matches_target(model_type):
    """A feature head (EAGLE) for every architecture: init_head builds one for any target (attention-free ones such as
    Mamba, per-layer configs such as Gemma 4, embeddings narrower than the hidden states such as ELECTRA's, LM heads
    that read another width), and every runner kind gives it the target's features, the per-row and stepwise
    runners included. Greedy ids at batch 1 and on a left-padded batch of 2 (the defaults: adaptive policy, the
    device's tree where the runner takes a tree mask; and a draft every round, draft_policy="fixed") must equal each
    prompt's own generate(), and the head must have drafted where it was made to."""
    from optimum_uag.testing.heads import untrained_head

    warnings.filterwarnings("ignore")
    tok = byte_level_bpe()
    try:
        target = _build(model_type, len(tok), 0)
    except Unbuildable as err:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {err}")
    ids, mask, rows, refs = _prompts_and_references(target, tok, model_type)
    head = untrained_head(target, name=model_type)
    try:
        assisted_generate(target, head, rows[0], max_new_tokens=2)
    except ValueError as err:  # refused for every draft (the test above checks transformers fails there too)
        assert "cannot be run by optimum-uag" in str(err) and type(target).__name__ in str(err)
        return
    for inputs, attention, opts in ((rows[0], None, {}), (ids, mask, {}), (ids, mask, dict(draft_policy="fixed"))):
        out = assisted_generate(target, head, inputs, attention, max_new_tokens=NEW, **opts)
        for b in range(inputs.shape[0]):
            assert torch.equal(out.sequences[b, inputs.shape[1]:], refs[b]), \
                (model_type, tuple(inputs.shape), runner_kind(target))
        if opts:
            assert out.metrics.draft_forwards > 0 and out.metrics.draft_tokens > 0


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["gpt2", "electra", "mamba", "bloom", "deepseek_v2", "falcon_h1", "opt-project-out"])
def test_a_head_trains_for_other_architectures(model_type, tmp_path):
    """train-draft's pipeline (features, training, save, load) for targets unlike Llama: LayerNorm layers with other
    names (GPT-2), embeddings narrower than the hidden states and an LM head that reads them (ELECTRA), no attention
    (Mamba), the per-row runner (BLOOM), a model that cannot take a padded batch (transformers' tiny DeepSeek-V2:
    features row by row), a hybrid (Falcon-H1), features projected to another width than hidden_size (OPT-350m's
    project_out). The trained head drafts, an LM head of its own is trained (never frozen random rows), and greedy
    ids equal the target's own."""
    from optimum_uag.engine.drafters import load_feature_head
    from optimum_uag.training.feature import extract_features, train_feature_head

    warnings.filterwarnings("ignore")
    tok = byte_level_bpe()
    overrides = {}
    if model_type == "opt-project-out":  # (OPT-350m: 512-wide embeddings and outputs around 1024-wide layers)
        model_type, overrides = "opt", dict(word_embed_proj_dim=16)
    if model_type not in causal_lm_types():
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    if model_type in ("mamba", "falcon_h1") and not hasattr(transformers.DynamicCache, "activate_past_recording"):
        pytest.skip("recurrent targets run from transformers 5.25 (refused before: tested above)")
    try:
        target = (tiny_model(model_type, len(tok), 0, dtype=torch.float32, **overrides) if overrides else
                  _build(model_type, len(tok), 0).float())
    except Unbuildable as err:
        pytest.skip(f"transformers cannot build a tiny {model_type}: {err}")
    try:
        assisted_generate(target, tiny_llama(len(tok), 3), torch.tensor([[5, 6, 7]]), max_new_tokens=2)
    except ValueError as err:  # (recurrent targets before transformers 5.25: refused for any draft, tested above)
        pytest.skip(str(err)[:200])
    texts = [f"sample {i}: " + TEXTS[i % 2] for i in range(12)]
    seqs = [tok(t * 4)["input_ids"][:40] for t in texts]
    extract_features(target, seqs, tmp_path / "features", log=lambda m: None)
    result = train_feature_head(target, tmp_path / "features", tmp_path / "head", target_name=model_type, minutes=0.05,
                                steps=2, window=16, batch_size=2, holdout=0.25, log=lambda m: None)
    assert result["steps"] > 0
    head = load_feature_head(tmp_path / "head")
    with torch.no_grad():
        width = target(input_ids=torch.tensor([[1, 2]]), output_hidden_states=True).hidden_states[-1].shape[-1]
    assert head.config["hidden_size"] == width
    if head.lm_head is not None and target.get_output_embeddings().in_features != width:
        assert result["lm_head"] == "trained"  # (its rows are not the target's: learned, not frozen random rows)
    ids = torch.tensor([seqs[0][:10]])
    out = assisted_generate(target, head, ids, max_new_tokens=NEW, draft_policy="fixed")
    assert torch.equal(out.sequences, _target_only(target, ids)) and out.metrics.draft_tokens > 0


def test_a_target_whose_generate_derives_positions_from_content_is_refused_by_name():
    """transformers 4's XLM-RoBERTa-XL generate() numbers positions from padding_idx + 1 and skips pad-id tokens
    (its prepare_inputs_for_generation); every runner passes 0, 1, 2, ...: as a target it is refused by name (its
    runner probes alone could not tell: they compare against a loop with explicit positions). transformers 5
    passes 0, 1, 2, ... itself: exact there. As an assistant it only proposes, and the output is exact."""
    warnings.filterwarnings("ignore")
    target = tiny_model("xlm-roberta-xl", 300, 0, dtype=torch.float64)
    llama = tiny_llama(300, 3).to(torch.float64)
    ids = torch.tensor([[5, 6, 7, 8]])
    if transformers.__version__.startswith("4."):
        with pytest.raises(ValueError, match="XLMRobertaXLForCausalLM cannot be run by optimum-uag as a target: its "
                                             "own generate\\(\\) passes other position ids"):
            assisted_generate(target, llama, ids, max_new_tokens=4)
    else:
        out = assisted_generate(target, llama, ids, max_new_tokens=8, num_assistant_tokens=3).sequences
        assert torch.equal(out, _target_only(target, ids)[:, :12])
    out = assisted_generate(llama, target, ids, max_new_tokens=8, num_assistant_tokens=3).sequences
    assert torch.equal(out, llama.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                           max_new_tokens=8, min_new_tokens=8))


# ------------------------------------------------------------------------------------------ sampling
# transformers 5 moved CTRL and GIT to the standard cache API: they run on the static runner there (stated, so that
# any other change of runner still fails here)
KINDS_ON_TRANSFORMERS_5 = {"ctrl": "static", "git": "static"}


@pytest.mark.slow
@pytest.mark.parametrize("model_type,kind", [("gpt2", "static"), ("ctrl", "dynamic"), ("bloom", "per_row"),
                                             ("git", "stepwise")])
def test_speculative_sampling_matches_target_on_every_runner_kind(model_type, kind):
    """One chi-square test per runner kind: the first two sampled tokens follow the target's own distribution.
    Where the model no longer picks that kind (transformers 5), the kind is pinned after its own probe passed, so
    every runner keeps its sampling test on both transformers versions."""
    from test_engine import _chi2, _joint_first_two
    from optimum_uag.engine.sampling import LogitsWarper
    from optimum_uag.runners.registry import RUNNERS, _probe, model_state, select_runner

    vocab, n = 6, 2000
    target, draft = tiny_model(model_type, vocab, 0), tiny_model(model_type, vocab, 1)
    natural = kind if transformers.__version__.startswith("4.") else KINDS_ON_TRANSFORMERS_5.get(model_type, kind)
    assert select_runner(target) == natural
    if natural != kind:
        with torch.inference_mode():
            assert _probe(target, RUNNERS[kind]) is None
        model_state(target)["runner"] = (kind, True)
    prompt = torch.tensor([[3, 4, 5, 3]])
    with torch.no_grad():  # a temperature that makes the target's next-token distribution peaked, not deterministic
        temperature = float(target(prompt).logits[0, -1].std()) / 1.5
    expected = _joint_first_two(target, prompt, LogitsWarper(temperature))
    torch.manual_seed(7)
    out = assisted_generate(target, draft, prompt.repeat(n, 1), max_new_tokens=2, do_sample=True, top_k=0,
                            temperature=temperature, num_assistant_tokens=3)
    assert runner_kind(target) == kind
    samples = (out.sequences[:, 4] * vocab + out.sequences[:, 5]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.accepted_tokens > 0


def test_the_position_probe_runs_the_models_own_generate_never_the_launchers_drafting(monkeypatch):
    """The probe above calls the target's own generate(); under the launcher a routed generate() without
    assistant_model would draft with --assistant_model, i.e. re-enter the engine for the same model (recursion).
    The probe's call goes to the original generate() directly."""
    import optimum_uag
    from optimum_uag import patch
    from optimum_uag.runners.registry import select_runner

    calls = []
    monkeypatch.setattr(patch, "_launch_assistant", lambda model: calls.append(model))
    was = optimum_uag.is_enabled()
    optimum_uag.enable()
    try:
        target = tiny_llama(300, 4)
        assert select_runner(target) == "static"
        assert calls == []
        target.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=1)  # an ordinary call does ask it
        assert calls == [target]
    finally:
        if not was:
            optimum_uag.disable()


@pytest.mark.skipif(not hasattr(transformers.DynamicCache, "activate_past_recording"),
                    reason="recurrent caches roll back from transformers 5.25 (Cache.activate_past_recording)")
def test_recurrent_targets_and_drafts_stay_exact_over_long_generations(monkeypatch):
    """Mamba as target and as draft (same vocabulary, a copy of the target that is always accepted, and a UAG pair)
    for 260 new tokens: the record of past states is trimmed in place (RECORD_LIMIT), rollbacks crop to a
    recorded state, and a rollback before the record (the UAG draft re-reads its text) feeds the kept tokens anew;
    every output equals the target's own generate()."""
    import copy

    from optimum_uag.runners import own_cache

    counts = {"trim": 0, "restart": 0, "crop": 0}
    for name, key in (("_trim_record", "trim"), ("_restart", "restart")):
        original = getattr(own_cache.OwnCacheRunner, name)

        def spy(self, *args, _original=original, _key=key):
            counts[_key] += 1
            return _original(self, *args)

        monkeypatch.setattr(own_cache.OwnCacheRunner, name, spy)
    crop = own_cache.crop
    monkeypatch.setattr(own_cache, "crop", lambda *a: (counts.__setitem__("crop", counts["crop"] + 1), crop(*a))[1])
    warnings.filterwarnings("ignore")
    tok, dtok = byte_level_bpe(), sentencepiece_bpe()
    target = tiny_model("mamba", len(tok), 0)
    pairs = {"copy": (copy.deepcopy(target), {}), "other": (tiny_model("mamba", len(tok), 1), {}),
             "uag": (tiny_model("mamba", len(dtok), 2), dict(tokenizer=tok, assistant_tokenizer=dtok))}
    ids = tok(TEXTS[0], return_tensors="pt").input_ids
    new = 260
    ref = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                          min_new_tokens=new)
    for name, (draft, kwargs) in pairs.items():
        out = assisted_generate(target, draft, ids, max_new_tokens=new, num_assistant_tokens=4, **kwargs)
        assert torch.equal(out.sequences, ref), name
        assert runner_kind(target) in ("per_row", "stepwise")  # stepwise: its multi-token blocks differ slightly
    # as a draft for a Llama target (and the target's own output unchanged)
    llama = tiny_llama(len(tok), 3).to(target.dtype)
    ref = llama.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new)
    assert torch.equal(assisted_generate(llama, target, ids, max_new_tokens=new, num_assistant_tokens=4).sequences, ref)
    assert counts["trim"] > 0 and counts["restart"] > 0 and counts["crop"] > 0, counts
