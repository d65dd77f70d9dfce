"""Route transformers' `generate(..., assistant_model=...)` through the optimum-uag engine."""
from __future__ import annotations

import functools

from transformers.generation.utils import GenerationMixin

from .engine import assisted_generate

_ORIGINAL: dict = {}  # class -> the generate() optimum-uag wrapped in it
_EXTRA: list = []  # classes besides GenerationMixin whose own generate() is routed (see enable)
_LAST = {"metrics": None}
# model paths a launcher knows (optimum_uag.gaudi.launch reads run_generation.py's --model_name_or_path and
# --assistant_model): upstream's script passes no tokenizer= / assistant_tokenizer=, so a pair whose vocabularies
# differ gets its tokenizers from these paths (loaded once; a pair sharing one vocabulary is unaffected)
_LAUNCH = {"paths": None, "tokenizers": None}


def set_launch_paths(model_path: str | None, assistant_path: str | None) -> None:
    _LAUNCH.update(paths=(model_path, assistant_path) if model_path and assistant_path else None, tokenizers=None)


def _launch_tokenizers():
    """(target tokenizer, assistant tokenizer) from the launcher's paths, or (None, None)."""
    if _LAUNCH["paths"] is None:
        return None, None
    if _LAUNCH["tokenizers"] is None:
        from transformers import AutoTokenizer

        try:
            _LAUNCH["tokenizers"] = tuple(AutoTokenizer.from_pretrained(p) for p in _LAUNCH["paths"])
        except Exception:  # noqa: BLE001 - no tokenizer there: the engine says what to pass
            _LAUNCH["tokenizers"] = (None, None)
    return _LAUNCH["tokenizers"]


def _wants_engine(assistant_model, generation_config, kwargs) -> bool:
    if assistant_model is not None:
        return True
    lookup = kwargs.get("prompt_lookup_num_tokens")
    if lookup is None and generation_config is not None:
        lookup = generation_config.prompt_lookup_num_tokens
    return bool(lookup)


def _needs_tokenizers(model, assistant_model) -> bool:
    """A draft model whose vocabulary differs from the target's (UAG needs both tokenizers)."""
    config = getattr(assistant_model, "config", None)
    return config is not None and getattr(config, "vocab_size", None) != getattr(model.config, "vocab_size", None)


def _make_generate(original):
    @functools.wraps(original)
    def generate(self, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
                 prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None, **kwargs):
        if not _wants_engine(assistant_model, generation_config, kwargs):
            return original(self, inputs, generation_config, logits_processor, stopping_criteria,
                            prefix_allowed_tokens_fn, synced_gpus, assistant_model, streamer, **kwargs)
        input_ids = inputs if inputs is not None else kwargs.pop("input_ids", None)
        kwargs.pop("token_type_ids", None)  # tokenizers return it; decoder-only models ignore it
        attention_mask = kwargs.pop("attention_mask", None)
        tokenizer = kwargs.pop("tokenizer", None)
        assistant_tokenizer = kwargs.pop("assistant_tokenizer", None)
        if tokenizer is None and assistant_tokenizer is None and _needs_tokenizers(self, assistant_model):
            tokenizer, assistant_tokenizer = _launch_tokenizers()
        out = assisted_generate(
            self, assistant_model, input_ids, attention_mask, tokenizer=tokenizer,
            assistant_tokenizer=assistant_tokenizer, generation_config=generation_config, streamer=streamer,
            stopping_criteria=stopping_criteria, logits_processor=logits_processor,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn, **kwargs,
        )
        _LAST["metrics"] = out.metrics
        wants_dict = kwargs.get("return_dict_in_generate")
        if wants_dict is None and generation_config is not None:
            wants_dict = generation_config.return_dict_in_generate
        return out if wants_dict else out.sequences

    generate._optimum_uag = True
    generate._original = original
    return generate


def enable(*classes) -> None:
    """Make `model.generate(..., assistant_model=...)` (and prompt lookup) use optimum-uag. Idempotent, and it
    holds whatever replaced generate() since (optimum-habana's adapt_transformers_to_gaudi() puts its own back).

    `classes`: more classes whose own generate() is routed too, and stays routed for later calls (optimum-habana's
    GaudiGenerationMixin: Baichuan, ChatGLM and MiniCPM3 inherit it directly, so GenerationMixin's is not theirs)."""
    for cls in classes:
        if cls not in _EXTRA:
            _EXTRA.append(cls)
    for cls in (GenerationMixin, *_EXTRA):
        current = cls.__dict__.get("generate")
        if current is None or getattr(current, "_optimum_uag", False):
            continue
        _ORIGINAL[cls] = current
        cls.generate = _make_generate(current)


def disable() -> None:
    """Restore every generate() optimum-uag wrapped. Idempotent."""
    for cls, original in _ORIGINAL.items():
        if getattr(cls.__dict__.get("generate"), "_optimum_uag", False):
            cls.generate = original
    _ORIGINAL.clear()


def is_enabled() -> bool:
    """True when GenerationMixin.generate is optimum-uag's routing right now."""
    return bool(getattr(GenerationMixin.generate, "_optimum_uag", False))


def unwrapped_generate():
    """The generate() underneath optimum-uag's routing (transformers' or optimum-habana's)."""
    current = GenerationMixin.generate
    return getattr(current, "_original", current)


def last_metrics():
    """Metrics of the last generate() call routed through the engine (None before the first)."""
    return _LAST["metrics"]
