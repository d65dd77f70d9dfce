"""Every causal-LM class optimum-habana's adapt_transformers_to_gaudi() installs, as target and as draft of
assisted generation on optimum-uag's Gaudi runner (under the HPU emulator on CPU): exact, or refused with one line
naming the class. Shared by tests/test_gaudi.py and scripts/gaudi_table.py (docs/gaudi.md's class table).

Two phases, because adapt_transformers_to_gaudi() patches transformers for the rest of the process:
`plain_reference(model_type)` before it (the plain transformers model, its greedy output), `check(ref, ...)` after.
"""
from __future__ import annotations

import importlib

import torch

# the model types whose causal-LM class optimum-habana 1.21.2 replaces with a Gaudi class (modeling_utils.py,
# adapt_transformers_to_gaudi); tests/test_gaudi.py checks this list against the installed package
GAUDI_MODEL_TYPES = (
    "bloom", "codegen", "cohere", "deepseek_v2", "deepseek_v3", "falcon", "gemma", "gemma2", "gemma3_text", "gpt2", "gpt_bigcode",
    "gpt_neo", "gpt_neox", "gpt_oss", "gptj", "llama", "mistral", "mixtral", "mllama", "mpt", "opt", "persimmon", "phi",
    "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "stablelm", "starcoder2", "xglm",
)
# variants of those types whose Gaudi code paths differ: (model_type, config overrides). The tiny "falcon" has
# new_decoder_architecture with 2 of 4 KV heads (refused: optimum-habana's attention fails there); the released
# layouts: Falcon-7B (multi-query), Falcon-40B/180B (new_decoder_architecture, 8 KV heads); ALiBi (refused by name);
# Mistral without a sliding window (with one, refused past the window)
GAUDI_VARIANTS = {
    "falcon-7b-layout": ("falcon", dict(new_decoder_architecture=False, multi_query=True, alibi=False)),
    "falcon-40b-layout": ("falcon", dict(new_decoder_architecture=True, num_attention_heads=16, num_kv_heads=8,
                                         hidden_size=64, head_dim=4)),
    "falcon-alibi": ("falcon", dict(alibi=True, new_decoder_architecture=False, multi_query=True)),
    "mistral-nowindow": ("mistral", dict(sliding_window=None)),
}
# sizes the generic tiny ones do not satisfy in fp32 on transformers 4.55: DeepSeek's MLA takes as many KV heads as
# query heads (its attention does not repeat them), V3's head_dim is its RoPE part and its expert groups must divide
# the tiny expert count
GAUDI_OVERRIDES = {
    "deepseek_v2": dict(num_key_value_heads=4),
    "deepseek_v3": dict(num_key_value_heads=4, head_dim=4, n_group=2, topk_group=1),
}
CHECKED = GAUDI_MODEL_TYPES + tuple(GAUDI_VARIANTS)
VOCAB = 64
NEW = 20
PROMPT = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [0, 0, 3, 4, 5, 6, 7]])
MASK = (torch.arange(7) >= torch.tensor([[0], [2]])).long()
GAUDI = dict(lazy_mode=True, hpu_graphs=True, static_shapes=True, reuse_cache=True)


def plain_reference(model_type: str) -> dict:
    """A tiny random `model_type` model (fp32) and its plain transformers greedy output on a padded batch of 2; the
    class to look up once optimum-habana has patched transformers."""
    from .architectures import tiny_model

    base, overrides = GAUDI_VARIANTS.get(model_type, (model_type, GAUDI_OVERRIDES.get(model_type, {})))
    build = TEXT_ONLY.get(base)
    model = build() if build else tiny_model(base, VOCAB, seed=1, dtype=torch.float32, **overrides)
    with torch.no_grad():
        out = model.generate(PROMPT, attention_mask=MASK, max_new_tokens=NEW, do_sample=False, pad_token_id=0)
    return {"model_type": model_type, "config": model.config, "state": model.state_dict(), "greedy": out,
            "module": type(model).__module__, "name": type(model).__name__}


def _mllama_text():
    """MllamaForCausalLM, the text decoder optimum-habana replaces (its "mllama" config is the vision + text
    composite): a tiny one from MllamaTextConfig, one cross-attention layer (idle without image states)."""
    from transformers import MllamaForCausalLM
    from transformers.models.mllama.configuration_mllama import MllamaTextConfig

    config = MllamaTextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[1],
                              max_position_embeddings=256, rope_scaling={"rope_type": "default"}, pad_token_id=0,
                              bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(1)
    return MllamaForCausalLM(config).eval()


# types whose generic config is a composite (vision + text): their causal-LM class, built from its text config
TEXT_ONLY = {"mllama": _mllama_text}


def _take_the_hpu_rope_branch(module) -> None:
    """optimum-habana's Mistral applies RoPE with FusedRoPE and position_ids when its tensors are on an HPU; its CPU
    fallback calls transformers' apply_rotary_pos_emb on the whole table without position_ids (it fails on any CPU
    run of the class). The emulator keeps tensors on the CPU: here the class takes the branch it takes on a Gaudi
    (apply_customized_rope_module, the emulator's FusedRoPE)."""
    if "mistral" in module.__name__ and hasattr(module, "apply_customized_rope"):
        from optimum.habana.transformers.models.modeling_all_models import apply_customized_rope_module

        module.apply_customized_rope = apply_customized_rope_module  # (same signature)


def gaudi_instance(ref: dict):
    """The class adapt_transformers_to_gaudi() put in place of the plain one, with the reference's weights."""
    cls = getattr(importlib.import_module(ref["module"]), ref["name"])
    _take_the_hpu_rope_branch(importlib.import_module(cls.__module__))
    config = ref["config"]
    own = getattr(cls, "config_class", None)
    if own is not None and type(config) is not own and type(config).__name__ == own.__name__:
        # optimum-habana's DeepSeek classes bring the checkpoints' own config classes (V2: moe_layer_freq, ...), which
        # a real checkpoint's config.json fills: the same values, through that class's defaults
        config = own.from_dict(config.to_dict())
    model = cls(config)
    model.load_state_dict(ref["state"], strict=False)
    return model.eval()


def own_greedy(model) -> torch.Tensor:
    """The model's greedy continuation by full forwards without a cache (the class's own output)."""
    seq, mask = PROMPT.clone(), MASK.clone()
    with torch.no_grad():
        for _ in range(NEW):
            positions = (mask.cumsum(1) - 1).clamp_min(0)
            logits = model(seq, attention_mask=mask, position_ids=positions, use_cache=False).logits[:, -1]
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], 1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    return seq


def check(ref: dict, partner: dict) -> dict:
    """The class of `ref` as target (draft: `partner`'s Gaudi class) and as draft (target: `partner`), greedy,
    K 3 (fixed). Returns {"class", "target", "draft", "reason", "matches_transformers"}: each role "exact" (the
    target's own output), "refused" (ValueError naming the class; the reason kept) or "differs"."""
    from .. import assisted_generate

    model = gaudi_instance(ref)
    name = type(model).__name__
    result = {"class": name, "model_type": ref["model_type"], "reason": None, "matches_transformers": None}
    try:
        own = own_greedy(model)
        result["matches_transformers"] = bool(torch.equal(own, ref["greedy"]))
    except Exception as err:  # noqa: BLE001 - the class's own forward: reported, not ours
        own = None
        result["own_forward_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    for role in ("target", "draft"):
        other = gaudi_instance(partner)
        target, draft = (model, other) if role == "target" else (other, model)
        expected = own if role == "target" else partner["greedy"]
        try:
            out = assisted_generate(target, draft, PROMPT, MASK, max_new_tokens=NEW, do_sample=False,
                                    num_assistant_tokens=3, draft_policy="fixed", eos_token_id=None,
                                    pad_token_id=0, **GAUDI)
        except ValueError as err:
            message = str(err)
            result[role] = "refused" if name in message else f"raised without naming the class: {message[:200]}"
            result["reason"] = result["reason"] or message
            result[f"reason_{role}"] = message
            continue
        except Exception as err:  # noqa: BLE001 - a crash: reported as such
            result[role] = f"crashed: {type(err).__name__}: {str(err)[:200]}"
            continue
        result[role] = "exact" if expected is not None and torch.equal(out.sequences, expected) else "differs"
    if result["target"] == "exact":
        result["head"] = _check_head(model, own)
    return result


def _check_head(model, expected: torch.Tensor) -> str:
    """A feature head (EAGLE) on the class as target: a draft tree every round (its features read back from the
    class's verify forwards, its tree mask through the class's attention), greedy; "exact" or what went wrong."""
    from .. import assisted_generate
    from .heads import untrained_head

    head = untrained_head(model, name="gaudi-class")
    try:
        out = assisted_generate(model, head, PROMPT, MASK, max_new_tokens=NEW, do_sample=False, draft_tree=True,
                                draft_policy="fixed", eos_token_id=None, pad_token_id=0, **GAUDI)
    except Exception as err:  # noqa: BLE001 - reported as such
        return f"crashed: {type(err).__name__}: {str(err)[:200]}"
    if not out.metrics.tree_rounds:
        return "no tree rounds"
    return "exact" if torch.equal(out.sequences, expected) else "differs"
