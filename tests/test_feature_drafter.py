"""Feature-level (EAGLE-style) draft heads: exactness against target-only generate(), lossless sampling, the
reduced draft vocabulary, n-gram + head drafting, refusing a head of another target, the checkpoint layout."""
import contextlib
import json

import pytest
import torch

from optimum_uag import assisted_generate
from optimum_uag.engine.drafters import FeatureHead, load_feature_head
from optimum_uag.engine.drafters.feature_head import save_feature_head
from optimum_uag.engine.sampling import LogitsWarper
from optimum_uag.testing.heads import untrained_head

from helpers import skip_or_fail_in_ci, tiny_llama
from test_engine import _chi2, _joint_first_two, _sharp_llama, batch, reference


def make_head(model, draft_vocab: int | None, seed: int = 0) -> FeatureHead:
    return untrained_head(model, draft_vocab, seed)


def make_fused_head(model, draft_vocab: int | None, layers=(1, 3), seed: int = 0) -> FeatureHead:
    """make_head with EAGLE-3's fused features over `layers`, its fuse map away from the identity (the earlier
    layers count in every draft)."""
    head = make_head(model, draft_vocab, seed)
    head.add_fusion(list(layers))
    with torch.no_grad():
        head.fuse.weight.add_(0.002 * torch.randn_like(head.fuse.weight))
    return head.eval()


@pytest.fixture(scope="module")
def target(embedded):
    return embedded["target"]


@pytest.mark.parametrize("draft_vocab", [None, 300])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_matches_target_batch(target, prompts, draft_vocab, k):
    model, tok = target
    head = make_head(model, draft_vocab)
    ids, mask = batch(tok, prompts[:3])
    out = assisted_generate(model, head, ids, mask, max_new_tokens=24, num_assistant_tokens=k)
    assert torch.equal(out.sequences, reference(model, ids, mask, 24, tok))
    assert out.metrics.draft_tokens > 0 and out.metrics.draft_forwards > 0


def test_a_head_that_agrees_with_the_target_is_accepted(target, prompts):
    """Long repeated text through the catch-up (a 400-character prompt, one wide first block): still exact."""
    model, tok = target
    text = prompts[0] * 3
    ids, mask = batch(tok, [text[:400]])
    head = make_head(model, None)
    out = assisted_generate(model, head, ids, mask, max_new_tokens=32, num_assistant_tokens=3)
    assert torch.equal(out.sequences, reference(model, ids, mask, 32, tok))


def test_prompt_lookup_then_head_matches_target(target, prompts):
    model, tok = target
    head = make_head(model, 300)
    ids, mask = batch(tok, [p * 2 for p in prompts[:2]])
    out = assisted_generate(model, head, ids, mask, max_new_tokens=32, num_assistant_tokens=3,
                            prompt_lookup_num_tokens=6)
    assert torch.equal(out.sequences, reference(model, ids, mask, 32, tok))


@pytest.mark.parametrize("kwargs", [dict(), dict(temperature=0.7, top_k=5, top_p=0.9),
                                    dict(prompt_lookup_num_tokens=3)])
def test_sampling_matches_target_distribution(kwargs):
    """Lossless: the head's distribution (zero outside its 6-token vocabulary of 8) is a valid proposal."""
    vocab, n = 8, 6000
    model = _sharp_llama(vocab, 0, 4.0)
    head = make_head(model, 6, seed=3)
    with torch.no_grad():
        head.lm_head.weight.mul_(4.0)
    prompt = torch.tensor([[1, 2, 3, 1, 2]])
    warper = LogitsWarper(kwargs.get("temperature", 1.0), kwargs.get("top_k", 0), kwargs.get("top_p", 1.0))
    expected = _joint_first_two(model, prompt, warper)
    torch.manual_seed(4321)
    options = {key: value for key, value in kwargs.items() if key != "top_k"}
    out = assisted_generate(model, head, prompt.repeat(n, 1), max_new_tokens=3, do_sample=True,
                            num_assistant_tokens=3, eos_token_id=None, top_k=kwargs.get("top_k", 0), **options)
    samples = (out.sequences[:, 5] * vocab + out.sequences[:, 6]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.accepted_tokens > 0


def test_head_directory_as_assistant_model(target, prompts, tmp_path):
    model, tok = target
    head = make_head(model, 300)
    save_feature_head(head, tmp_path, dtype=torch.float32)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["target"]["name_or_path"] == "test-target" and config["draft_vocab_size"] == 300
    ids, mask = batch(tok, prompts[:2])
    mine = assisted_generate(model, head, ids, mask, max_new_tokens=16, num_assistant_tokens=3)
    loaded = assisted_generate(model, str(tmp_path), ids, mask, max_new_tokens=16, num_assistant_tokens=3)
    assert torch.equal(mine.sequences, loaded.sequences)
    assert mine.metrics.accepted_tokens == loaded.metrics.accepted_tokens


def test_head_of_another_target_is_refused(target, prompts):
    model, tok = target
    ids, mask = batch(tok, prompts[:1])
    other = tiny_llama(model.config.vocab_size, seed=5, hidden=32)
    with pytest.raises(ValueError, match="trained for test-target.*hidden size"):
        assisted_generate(model, make_head(other, None), ids, mask, max_new_tokens=4)
    same_shape = tiny_llama(model.config.vocab_size, seed=6, layers=model.config.num_hidden_layers,
                            hidden=model.config.hidden_size)
    same_shape.config.intermediate_size = model.config.intermediate_size
    head = make_head(model, None)
    with pytest.raises(ValueError, match="embedding table differs"):
        assisted_generate(LlamaLike(same_shape, model), head, ids, mask, max_new_tokens=4)
    fused = make_head(model, None)  # a config without the target's layer count: the fused layers are checked
    fused.config["target"].pop("num_hidden_layers")
    fused.add_fusion([2, model.config.num_hidden_layers])
    with pytest.raises(ValueError, match="it fuses layers"):
        assisted_generate(model, fused, ids, mask, max_new_tokens=4)


def LlamaLike(model, like):  # noqa: N802 - a model of `like`'s config with model's (different) weights
    from transformers import LlamaForCausalLM

    twin = LlamaForCausalLM(like.config).eval()
    with torch.no_grad():
        twin.get_input_embeddings().weight.copy_(torch.randn_like(twin.get_input_embeddings().weight))
    return twin


def test_not_a_head_path_is_refused(target, tmp_path):
    model, tok = target
    with pytest.raises(ValueError, match="not a feature-head directory"):
        assisted_generate(model, str(tmp_path), torch.tensor([[1, 2, 3]]), max_new_tokens=4)


def test_load_rejects_a_full_model_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_attention_heads": 2,
                                                       "intermediate_size": 16, "num_hidden_layers": 4}))
    with pytest.raises(ValueError, match="one decoder layer"):
        load_feature_head(tmp_path)


# ------------------------------------------------------------------------------ the reference implementation
REFERENCE = "eagle-llm==1.2.1"  # the EAGLE authors' package (SafeAILab/EAGLE), eagle/model/cnets.py


@pytest.fixture(scope="module")
def eagle_reference():
    """The reference classes, installed beside our stack without their pinned dependencies (accelerate 0.21,
    gradio 3.50, protobuf 3.19 would replace ours; cnets.py itself needs only torch + transformers)."""
    import subprocess
    import sys

    from optimum_uag.models import cache_root

    where = cache_root() / "eagle_llm-1.2.1"
    if not (where / "eagle" / "model" / "cnets.py").is_file():
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(where), REFERENCE]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            skip_or_fail_in_ci(f"cannot install {REFERENCE} (offline?): {done.stderr.strip()[-200:]}")
    sys.path.insert(0, str(where))
    try:
        from eagle.model.cnets import Model
        from eagle.model.configs import EConfig
    finally:
        sys.path.remove(str(where))
    return Model, EConfig


@torch.no_grad()
def test_reference_head_proposes_the_same_tokens(target, prompts, tmp_path, eagle_reference):
    """A head written by the reference code's own classes (state dict + config as its EaModel loads them) drafts the
    same tokens through our drafter as the reference's own cached drafting loop (Model.forward + the target's LM
    head), from the same target features."""
    from types import SimpleNamespace

    from optimum_uag.engine.drafters import FeatureDrafter
    from optimum_uag.engine.sampling import TokenSampler
    from optimum_uag.engine.state import DecodingState

    Model, EConfig = eagle_reference
    model, tok = target
    c = model.config
    config = EConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                     num_hidden_layers=1, num_attention_heads=c.num_attention_heads,
                     num_key_value_heads=c.num_key_value_heads, rms_norm_eps=c.rms_norm_eps,
                     max_position_embeddings=c.max_position_embeddings, pad_token_id=0)
    if getattr(config, "rope_scaling", None) is not None and "type" not in config.rope_scaling:
        config.rope_scaling = None  # transformers 5 fills in {"rope_type": "default"}; the reference reads None
    torch.manual_seed(0)
    ref = Model(config, bias=True).eval()
    for p in ref.parameters():
        p.normal_(0, 0.05)
    ref.embed_tokens.weight.copy_(model.get_input_embeddings().weight)
    for layer in ref.layers:
        layer.post_attention_layernorm.weight.fill_(1.0)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    config.to_json_file(str(tmp_path / "config.json"))
    head = load_feature_head(tmp_path)  # the reference layout: no optimum-uag fields, the target's LM head

    prompt, _ = batch(tok, prompts[:1])
    length, k = prompt.shape[1], 4
    out = model(prompt, output_hidden_states=True)
    feats, bonus = out.hidden_states[-1], out.logits[:, -1].argmax(-1)
    # the reference's drafting loop (eagle/model/cnets.py Model.generate with use_cache=True)
    hidden, past = ref(feats, input_ids=torch.cat([prompt[:, 1:], bonus[:, None]], 1), use_cache=True)
    want = []
    for _ in range(k):
        token = model.lm_head(hidden[:, -1]).argmax(-1)
        want.append(int(token))
        hidden, past = ref(hidden[:, -1:], input_ids=token[:, None], past_key_values=past, use_cache=True)

    capacity = length + 32
    state = DecodingState.create(prompt, torch.zeros(1, dtype=torch.long), capacity, 0, 16)
    drafter = FeatureDrafter(head, model, state, capacity, c.vocab_size, TokenSampler(None, False), None, k + 1)
    drafter.commit(state, None, SimpleNamespace(features=feats, start=torch.zeros(1, dtype=torch.long)), None)
    state.tokens[0, length] = bonus[0]
    state.length += 1
    state.generated += 1
    state.round = 1
    got = drafter.propose(state, k).tokens[0].tolist()
    assert got == want


def test_prompt_lookup_then_uag_draft_matches_target(embedded, prompts):
    """Lookup rounds between UAG rounds: the cross-tokenizer draft re-syncs from the committed text."""
    (model, tok), (draft, dtok) = embedded["target"], embedded["assistant"]
    ids, mask = batch(tok, [p * 2 for p in prompts[:2]])
    out = assisted_generate(model, draft, ids, mask, tokenizer=tok, assistant_tokenizer=dtok, max_new_tokens=32,
                            num_assistant_tokens=4, prompt_lookup_num_tokens=6)
    assert torch.equal(out.sequences, reference(model, ids, mask, 32, tok))


@pytest.mark.parametrize("kind", ["dynamic", "per_row", "stepwise"])
def test_other_runners(target, prompts, kind):
    """The model's-own-cache runner, and the per-row and stepwise runners (one row, or one token, at a time) give a
    feature head the target's features: the features of a left-padded prompt and of a 3-token block after it equal
    the static runner's at every real position, and the output is exact."""
    from optimum_uag.runners.registry import RUNNERS

    model, tok = target
    ids, mask = batch(tok, prompts[:2])
    pad = (mask == 0).sum(1)
    block = torch.tensor([[5, 6, 7], [8, 9, 10]])
    feats = {}
    with torch.no_grad():
        for name in ("static", kind):
            runner = RUNNERS[name](model, 2, ids.shape[1] + 8, pad)
            _, first = runner.forward(ids, torch.zeros(2, dtype=torch.long), logits_to_keep=1, hidden=True)
            _, then = runner.forward(block, torch.full((2,), ids.shape[1]), logits_to_keep=3, hidden=True)
            feats[name] = (first, then)
    for b in range(2):
        assert torch.allclose(feats[kind][0][b, pad[b]:], feats["static"][0][b, pad[b]:], atol=1e-4)
    assert torch.allclose(feats[kind][1], feats["static"][1], atol=1e-4)
    head = make_head(model, 300)
    with runner_kind(model, kind):
        out = assisted_generate(model, head, ids, mask, max_new_tokens=20, num_assistant_tokens=3)
    assert torch.equal(out.sequences, reference(model, ids, mask, 20, tok))
    assert out.metrics.draft_forwards > 0


@contextlib.contextmanager
def runner_kind(model, kind: str):
    """The model's runner forced to `kind` (static / dynamic / per_row / stepwise) inside the block."""
    from optimum_uag.registry import model_state
    from optimum_uag.runners.registry import select_runner

    select_runner(model)
    saved = model_state(model)["runner"]
    model_state(model)["runner"] = (kind, True)
    try:
        yield
    finally:
        model_state(model)["runner"] = saved


@pytest.mark.slow
def test_torch_compile(target, prompts):
    """Compiled static runners (inductor, default mode to keep it short) hand the head the same features."""
    model, tok = target
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:2])
    eager = assisted_generate(model, head, ids, mask, max_new_tokens=16, num_assistant_tokens=3)
    compiled = assisted_generate(model, head, ids, mask, max_new_tokens=16, num_assistant_tokens=3,
                                 torch_compile={"mode": None, "freezing": False})
    assert torch.equal(compiled.sequences, reference(model, ids, mask, 16, tok))
    assert compiled.metrics.accepted_tokens == eager.metrics.accepted_tokens


@torch.no_grad()
@pytest.mark.parametrize("fused", [False, True])
def test_cached_step_equals_the_training_unrolled_path(target, prompts, fused):
    """The head's cached drafting (step() over its static cache: true pairs first, then its own outputs fed back as
    features) computes what training's unrolled() computes for the same tokens, for several drafting steps: the
    head is trained on exactly what drafting runs."""
    model, tok = target
    head = (make_fused_head(model, 300, seed=5) if fused else make_head(model, 300, seed=5)).float()
    ids = tok(prompts[2], return_tensors="pt")["input_ids"][:, :40]
    out = model(ids, output_hidden_states=True)
    feats = out.hidden_states[-1]  # f_0 .. f_{T-1}
    if fused:  # EAGLE-3: the earlier layers' hidden states in front
        feats = torch.cat([out.hidden_states[i] for i in head.feature_layers] + [feats], -1)
    steps, length = 3, ids.shape[1] - 3
    embeds = model.get_input_embeddings()(ids[:, 1:])  # x_1 .. x_{T-1}
    unrolled = head.unrolled(feats[:, :length], embeds, steps)  # per step s: h at pairs t (guess of f_{t+s+1})
    columns = length + steps
    attn = head.attn
    cache_k = torch.zeros(1, attn.kv_heads, columns, attn.head_dim)
    cache_v = torch.zeros_like(cache_k)
    keys = torch.arange(columns)
    for t in (5, 17, length - 1):  # draft from the last true pair t, as FeatureDrafter does after its catch-up
        cache_k.zero_(), cache_v.zero_()
        slots = torch.arange(t + 1)[None]
        mask = (keys[None, :] <= slots[0, :, None])[None, None]
        hidden = head.step(feats[:, : t + 1], embeds[:, : t + 1], slots, cache_k, cache_v, slots, mask)
        h = hidden[:, -1:]
        assert torch.allclose(h[0, 0], unrolled[0][0, t], atol=1e-5)
        for s in range(1, steps):  # pair t + s: the previous output as its feature, the true token x_{t+s+1}
            slot = torch.tensor([[t + s]])
            mask = ((keys <= t) | (keys == t + s) | ((keys > t) & (keys < t + s)))[None, None, None]
            h = head.step(h, embeds[:, t + s : t + s + 1], slot, cache_k, cache_v, slot, mask)
            assert torch.allclose(h[0, 0], unrolled[s][0, t], atol=1e-5), (t, s)


def test_lookup_then_draft_widens_a_chain_only_when_an_ngram_matches():
    """A chain round verifies the draft's K tokens when no row's n-gram matches in full; the lookup's length only
    when one does (each verify token costs a batch on the CPU: 4 x 9 tokens for a chain of 3 lost at batch 4)."""
    from optimum_uag.engine.drafters.base import Drafter
    from optimum_uag.engine.drafters.combined import LookupThenDraft
    from optimum_uag.engine.drafters.lookup import PromptLookupDrafter
    from optimum_uag.engine.state import DecodingState, Proposal

    class Chain(Drafter):
        def propose(self, state, k):
            return Proposal(torch.full((state.batch_size, k), 7), valid=torch.ones(state.batch_size, k, dtype=torch.bool))

    drafter = LookupThenDraft(PromptLookupDrafter(2), Chain(), 8)
    fresh = torch.tensor([[10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25]])  # no n-gram repeats
    state = DecodingState.create(fresh, torch.zeros(2, dtype=torch.long), 32, 0, 16)
    state.round = 1
    assert drafter.propose(state, 3).tokens.shape == (2, 3)
    repeat = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
                                                                          31, 32, 33]])
    state = DecodingState.create(repeat, torch.zeros(2, dtype=torch.long), 32, 0, 16)
    state.round = 1
    mixed = drafter.propose(state, 3)
    assert mixed.tokens.shape == (2, 8)
    assert mixed.tokens[0].tolist() == [3, 4, 5, 6, 7, 8, 9, 10]  # row 0: the n-gram's continuation
    assert mixed.tokens[1, :3].tolist() == [7, 7, 7] and mixed.valid[1].tolist() == [True] * 3 + [False] * 5


def test_a_periodic_lookup_continues_a_repetition_past_the_rows_end():
    """`a b c a b` (2-gram `a b` last seen at 0): the plain continuation `c a b` ends at the row's end (the rest
    invalid); the periodic one repeats the span from the match to the end, `c a b c a b ...`, valid at any length.
    A row without a match stays invalid, and left padding is never read."""
    from optimum_uag.engine.drafters.lookup import PromptLookupDrafter
    from optimum_uag.engine.state import DecodingState

    a, b, c, pad = 5, 6, 7, 0
    ids = torch.tensor([[a, b, c, a, b], [pad, 1, 2, 3, 4], [pad, pad, a, a, a], [a, a, b, c, a]])
    state = DecodingState.create(ids, torch.tensor([0, 1, 2, 2]), 32, pad, 16)
    lookup = PromptLookupDrafter(2)
    plain = lookup.propose(state, 7)
    assert plain.tokens[0, :3].tolist() == [c, a, b] and plain.valid[0].tolist() == [True] * 3 + [False] * 4
    periodic = lookup.propose(state, 7, periodic=True)
    assert periodic.tokens[0].tolist() == [c, a, b, c, a, b, c] and periodic.valid[0].all()
    assert not periodic.valid[1].any()  # no n-gram repeats
    assert periodic.tokens[2].tolist() == [a] * 7 and periodic.valid[2].all()  # period 1 (`a a` seen at 2)
    assert not periodic.valid[3].any()  # `a` repeats only inside the row's left padding
    plain_valid, start = periodic.record
    assert plain_valid[0].tolist() == plain.valid[0].tolist()  # the plain continuation's validity, and its start
    assert start.tolist() == [2, -1, 4, -1]


# ------------------------------------------------------------------------------ fused features (EAGLE-3)
@torch.no_grad()
def test_a_fused_head_starts_as_the_same_function(target, prompts):
    """add_fusion() gives a head EAGLE-3's fused input (earlier layers + the final norm's output) as the same
    function (fuse = [0 | 0 | I]), on the first step (fused target features) and the later ones (its own H-wide
    outputs); fuse_features refuses features of another width."""
    from optimum_uag.training.feature import fused_hidden_states

    model, tok = target
    plain = make_head(model, 300, seed=3).float()
    fused = make_head(model, 300, seed=3).float()
    fused.add_fusion([2, 4])
    ids = tok(prompts[1], return_tensors="pt")["input_ids"][:, :30]
    states = model(ids, output_hidden_states=True).hidden_states
    feats = fused_hidden_states(states, [2, 4])
    hidden = model.config.hidden_size
    assert feats.shape[-1] == 3 * hidden == fused.feature_size and plain.feature_size == hidden
    assert torch.equal(feats[..., -hidden:], states[-1]) and torch.equal(feats[..., :hidden], states[2])
    embeds = model.get_input_embeddings()(ids[:, 1:])
    a = plain.unrolled(states[-1][:, :27], embeds, 3)
    b = fused.unrolled(feats[:, :27], embeds, 3)
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=1e-5)
    with pytest.raises(ValueError, match="fuses layers"):
        fused.fuse_features(feats[..., : 2 * hidden])
    fused.fuse.weight.add_(0.05 * torch.randn_like(fused.fuse.weight))  # as training moves it: the layers count
    assert not torch.allclose(fused.unrolled(feats[:, :27], embeds, 1)[0], a[0], atol=1e-3)


def test_fused_features_train_save_and_load(target, prompts, tmp_path):
    """extract_features with feature_layers writes (m + 1) H-wide shards and refuses a folder of other layers;
    train_feature_head adds the fusion to a head that had none, saves feature_layers in its config, and a head without
    fusion trains on the final norm's part of the same shards."""
    from optimum_uag.training.feature import extract_features, train_feature_head

    model, tok = target
    seqs = [tok(p * 2)["input_ids"][:48] for p in prompts[:6]]
    work = tmp_path / "features"
    extract_features(model, seqs, work, feature_layers=[2, 4], log=lambda m: None)
    shard = torch.load(next(work.glob("features-*.pt")), weights_only=False)
    assert shard[0]["features"].shape[-1] == 3 * model.config.hidden_size
    with pytest.raises(ValueError, match="holds features of layers"):
        extract_features(model, seqs, work, feature_layers=[1], log=lambda m: None)
    # a head without fusion is served by the same folder (the final norm's part): it goes on with its layers
    assert extract_features(model, seqs, work, log=lambda m: None)["feature_layers"] == [2, 4]
    start = tmp_path / "start"
    save_feature_head(make_head(model, 300), start)
    common = dict(target_name="test-target", minutes=0.05, steps=2, window=24, batch_size=2, holdout=0.2,
                  start_from=start, log=lambda m: None)
    result = train_feature_head(model, work, tmp_path / "fused", feature_layers=[2, 4], **common)
    assert result["feature_layers"] == [2, 4] and result["steps"] > 0
    head = load_feature_head(tmp_path / "fused")
    assert head.feature_layers == [2, 4] and head.fuse is not None
    result = train_feature_head(model, work, tmp_path / "plain", **common)
    assert result["feature_layers"] is None and load_feature_head(tmp_path / "plain").fuse is None
    # a head fusing other layers than the folder's is refused before training (it would read the wrong columns)
    with pytest.raises(ValueError, match=r"fuses layers \[4\].*of layers \[2, 4\]"):
        train_feature_head(model, work, tmp_path / "other", feature_layers=[4], **common)


def test_the_training_loss_on_the_kept_positions_equals_the_masked_mean_over_every_position(target, prompts, tmp_path):
    """_loss runs the LM head on the answer positions alone; its loss and gradients are those of the full logits
    averaged under the mask (prompt turns, padding and ends of windows left out)."""
    import torch.nn.functional as F

    from optimum_uag.training.feature import _batch, _loss, extract_features, load_shards

    model, tok = target
    seqs = [{"ids": tok(p * 2)["input_ids"][:30 + 5 * i], "loss_mask": [j >= 9 + i for j in range(30 + 5 * i)]}
            for i, p in enumerate(prompts[:3])]
    extract_features(model, seqs, tmp_path / "f", log=lambda m: None)
    records = load_shards(tmp_path / "f")
    head = make_head(model, 300)  # (tokens outside its draft vocabulary are among the teacher's top-k)
    embed = model.get_input_embeddings()
    t2d = torch.full((model.config.vocab_size,), -1, dtype=torch.long)
    t2d[head.draft_ids()] = torch.arange(300)
    batch = _batch(records, [(0, 0), (1, 3), (2, 0)], 24, 2, "cpu")

    def reference_loss():  # the full logits, every position, averaged under the mask
        feats, toks, top_v, top_i, keep_all = batch
        outs = head.unrolled(feats[:, : feats.shape[1] - 2], embed(toks).float(), 2)
        total, length = 0.0, feats.shape[1] - 2
        for s, h in enumerate(outs):
            keep = keep_all[:, s : s + length].float()
            mean = lambda x: (x * keep).sum() / keep.sum()  # noqa: E731
            logq = torch.log_softmax(head.logits(h).float(), -1)
            ti = top_i[:, s : s + length]
            rows = t2d[ti]
            inside = rows >= 0
            lq = logq.gather(-1, rows.clamp_min(0)).masked_fill(~inside, 0.0)
            p = top_v[:, s : s + length].exp() * inside
            kl, ce = mean(-(p * lq).sum(-1)), mean(-(lq[..., 0] * inside[..., 0]))
            reg = F.smooth_l1_loss(h, feats[:, s + 1 : s + 1 + length], reduction="none").mean(-1)
            total = total + 0.8 ** s * (kl + 0.2 * ce + mean(reg))
        return total

    assert 0 < float(batch[4].float().mean()) < 0.9  # some positions are left out
    torch.manual_seed(0)
    ours, _ = _loss(head, embed, t2d, batch, 2, 0.0, 1.0, 0.2)
    grads = torch.autograd.grad(ours, [p for p in head.parameters() if p.requires_grad])
    theirs = reference_loss()
    ref_grads = torch.autograd.grad(theirs, [p for p in head.parameters() if p.requires_grad])
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)

def test_a_features_folder_extended_with_more_datasets_extracts_and_trains_on_the_runs_sequences(target, prompts,
                                                                                                  tmp_path):
    """A second run over the first run's sequences and new ones, shuffled (as train-draft shuffles every dataset
    together), extracts the new ones alone, into shards after the folder's; every sequence is in the folder once; a
    shard linked in without an index is read once; training reads the run's own sequences, not the folder's others."""
    import random

    from optimum_uag.training.feature import (extract_features, load_shards, sequence_key, shard_index,
                                              train_feature_head)

    model, tok = target
    seqs = [tok(p * 2)["input_ids"][:40 + i] for i, p in enumerate(prompts[:9])]
    old, new = seqs[:3], seqs[3:]
    work = tmp_path / "features"
    first = extract_features(model, old, work, shard_size=2, log=lambda m: None)
    assert first["shards"] == 2 and first["already_extracted"] == 0
    both = old + new
    random.Random(0).shuffle(both)
    second = extract_features(model, both, work, shard_size=2, log=lambda m: None)
    assert second["already_extracted"] == 3 and second["tokens_this_run"] == sum(len(s) for s in new)
    assert sorted(p.name for p in work.glob("features-*.pt")) == [f"features-{i:05d}.pt" for i in range(5)]
    keys = [sequence_key(r) for r in load_shards(work)]
    assert sorted(keys) == sorted(sequence_key(s) for s in seqs)  # each once
    # a shard without an index entry (linked in from another folder) is read and listed
    (work / "index.json").unlink()
    assert sorted(k for ks in shard_index(work).values() for k in ks) == sorted(keys)
    assert extract_features(model, both, work, log=lambda m: None)["tokens_this_run"] == 0
    start = tmp_path / "start"
    save_feature_head(make_head(model, 300), start)
    common = dict(target_name="test-target", minutes=0.02, steps=2, window=24, batch_size=2, holdout=0.2,
                  start_from=start, log=lambda m: None)
    result = train_feature_head(model, work, tmp_path / "head", sequences=new, **common)
    assert result["folder_sequences_left_out"] == 3
    assert result["train_sequences"] + result["heldout_sequences"] == 6
    assert train_feature_head(model, work, tmp_path / "all", **common)["folder_sequences_left_out"] == 0

def test_bf16_features_are_kept_apart_and_bf16_training_follows_float32(target, prompts, tmp_path):
    """Features written by a bfloat16 copy of the target are close to float32's (the teacher's top token mostly the
    same), the folder records their precision and refuses float32 extraction into it (and the reverse); mixed-precision
    training (bf16=True) computes float32's loss and gradients to bfloat16's rounding, trains and says so in its log."""
    import copy

    import torch.nn.functional as F

    from optimum_uag.training.feature import _batch, _loss, extract_features, load_shards, train_feature_head

    model, tok = target
    seqs = [tok(p * 2)["input_ids"][:48] for p in prompts[:8]]
    half = copy.deepcopy(model).to(torch.bfloat16)
    info = extract_features(half, seqs, tmp_path / "bf16", log=lambda m: None)
    assert info["dtype"] == "bfloat16" and info["tokens_this_run"] == sum(len(s) for s in seqs)
    assert extract_features(model, seqs, tmp_path / "fp32", log=lambda m: None)["dtype"] == "float32"
    with pytest.raises(ValueError, match="written in bfloat16, not float32"):
        extract_features(model, seqs[:2], tmp_path / "bf16", log=lambda m: None)
    with pytest.raises(ValueError, match="written in float32, not bfloat16"):
        extract_features(half, seqs[:2], tmp_path / "fp32", log=lambda m: None)
    a = torch.cat([r["features"].float() for r in load_shards(tmp_path / "bf16")])
    b = torch.cat([r["features"].float() for r in load_shards(tmp_path / "fp32")])
    assert not torch.equal(a, b)  # another precision, really
    assert float((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()) < 0.1
    top_a = torch.cat([r["top_i"][:, 0] for r in load_shards(tmp_path / "bf16")])
    top_b = torch.cat([r["top_i"][:, 0] for r in load_shards(tmp_path / "fp32")])
    assert float((top_a == top_b).float().mean()) > 0.8
    # mixed precision computes the float32 loss and gradients to bfloat16's rounding
    records = load_shards(tmp_path / "bf16")
    head = make_head(model, 300)
    embed = model.get_input_embeddings()
    t2d = torch.full((model.config.vocab_size,), -1, dtype=torch.long)
    t2d[head.draft_ids()] = torch.arange(300)
    batch = _batch(records, [(0, 0), (1, 3), (2, 0), (3, 5)], 24, 2, "cpu")
    params = [p for p in head.parameters() if p.requires_grad]
    runs = []
    for bf16 in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _ = _loss(head, embed, t2d, batch, 2, 0.0, 1.0, 0.2)
        runs.append((loss, torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])))
    (loss32, grad32), (loss16, grad16) = runs
    assert not torch.equal(grad32, grad16)  # autocast really ran in bfloat16
    assert abs(float(loss16 - loss32)) < 0.02 * abs(float(loss32))
    assert float(F.cosine_similarity(grad16, grad32, dim=0)) > 0.99
    start = tmp_path / "start"
    save_feature_head(head, start)
    result = train_feature_head(model, tmp_path / "bf16", tmp_path / "head", target_name="test-target", minutes=0.05,
                                steps=2, window=24, batch_size=2, holdout=0.25, start_from=start, bf16=True,
                                log=lambda m: None)
    assert result["precision"] == "bf16 autocast" and result["steps"] > 0
    trained = load_feature_head(tmp_path / "head")
    assert any(not torch.equal(a, b.to(a.dtype)) for a, b in zip(trained.state_dict().values(),
                                                                   head.state_dict().values()))


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_fused_head_matches_target(target, prompts, tree, kind):
    """A head with fused features drafts from the layers its verify forwards return (static runner, the model's own
    cache), chains and trees: exact, and it drafts as unrolled() predicts (its acceptance differs from the same
    head reading the final norm alone)."""
    model, tok = target
    with runner_kind(model, kind):
        ids, mask = batch(tok, prompts[:3])
        head = make_fused_head(model, 300)
        opts = dict(draft_tree=True, draft_policy="fixed") if tree else dict(num_assistant_tokens=3)
        out = assisted_generate(model, head, ids, mask, max_new_tokens=24, **opts)
        assert torch.equal(out.sequences, reference(model, ids, mask, 24, tok))
        assert out.metrics.draft_forwards > 0 and out.metrics.accepted_tokens > 0
        if tree and kind == "static":  # (the model's own cache takes no tree mask: a chain, said in a line)
            assert out.metrics.tree_rounds > 0


def test_the_heads_grouped_query_attention_without_copies_equals_the_repeated_keys_bit_for_bit():
    """On a CPU the head's attention hands its 3-to-1 grouped heads to torch's kernel (`enable_gqa`) instead of
    repeating its keys / values per query head: the same outputs bit for bit, at a draft step and a tree block, batch
    1 and 4, under a boolean mask."""
    import torch.nn.functional as F

    from optimum_uag.engine.drafters.feature_head import Attention

    torch.manual_seed(0)
    attn = Attention(96, 6, 2, 16)
    for b, lq, lk in ((1, 1, 40), (1, 5, 40), (4, 3, 70)):
        q, k, v = torch.randn(b, 6, lq, 16), torch.randn(b, 2, lk, 16), torch.randn(b, 2, lk, 16)
        mask = torch.rand(b, 1, lq, lk) > 0.3
        mask[..., 0] = True
        repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                                  attn_mask=mask)
        want = attn.o_proj(repeated.transpose(1, 2).reshape(b, lq, -1))
        assert torch.equal(attn.attend(q, k, v, mask), want)
