"""Route transformers' `generate(..., assistant_model=...)` through the optimum-uag engine."""
from __future__ import annotations

import functools

from transformers.generation.utils import GenerationMixin

from .engine import assisted_generate
from .registry import OWN_GENERATE

_ORIGINAL: dict = {}  # class -> the generate() optimum-uag wrapped in it
_EXTRA: list = []  # classes besides GenerationMixin whose own generate() is routed (see enable)
_LAST = {"metrics": None}
# model paths a launcher knows (optimum_uag.gaudi.launch reads run_generation.py's --model_name_or_path and
# --assistant_model): upstream's script passes no tokenizer= / assistant_tokenizer=, so a pair whose vocabularies
# differ gets its tokenizers from these paths (loaded once; a pair sharing one vocabulary is unaffected)
_LAUNCH = {"paths": None, "tokenizers": None, "launched": False, "assistant_path": None, "assistants": {}}


def set_launch_paths(model_path: str | None, assistant_path: str | None) -> None:
    _LAUNCH.update(paths=(model_path, assistant_path) if model_path and assistant_path else None, tokenizers=None,
                   launched=True, assistant_path=assistant_path, assistants={})


def _launch_assistant(model):
    """The launcher's --assistant_model for a generate() call that got none, or None.

    optimum-habana's run_generation.py calls generate() without assistant_model on its --dataset_name and mlcommons
    paths, while it loaded one and set static_shapes=False for it: a dynamic-shape target-only run, slower than a
    plain one, with no word to the user. Under the launcher such a call drafts with --assistant_model, loaded once
    in the target's dtype, on its device (as upstream's setup_model loads it), said once."""
    path = _LAUNCH["assistant_path"]
    if not _LAUNCH["launched"] or not path:
        return None
    key = (id(model), model.dtype, str(model.device))
    if key not in _LAUNCH["assistants"]:
        import logging

        from transformers import AutoModelForCausalLM

        logging.getLogger("optimum_uag").warning(
            "the script called generate() without assistant_model (optimum-habana's --dataset_name / mlcommons "
            "paths do) although it was started with --assistant_model: drafting with %s, loaded by the launcher", path)
        draft = AutoModelForCausalLM.from_pretrained(path, torch_dtype=model.dtype)
        _LAUNCH["assistants"][key] = draft.eval().to(model.device)
    return _LAUNCH["assistants"][key]


def _place_assistant(model, assistant_model):
    """Under the launcher, an assistant left on the CPU beside a target on an accelerator is moved there (once, said
    once): upstream's multi-card setup_distributed_model loads the assistant and never moves it (utils.py, v1.21).
    Outside the launcher a device mismatch stays an error naming the fix."""
    device = getattr(model, "device", None)
    if (not _LAUNCH["launched"] or device is None or device.type == "cpu"
            or getattr(assistant_model, "device", None) is None or assistant_model.device.type != "cpu"):
        return assistant_model
    import logging

    logging.getLogger("optimum_uag").warning(
        "the script left assistant_model on the CPU (optimum-habana's multi-card setup_distributed_model does): "
        "moving it to %s, where the target runs", device)
    return assistant_model.to(device)


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
        if OWN_GENERATE.get():  # optimum-uag's own probe of the model's generate() (runners/registry.py)
            return original(self, inputs, generation_config, logits_processor, stopping_criteria,
                            prefix_allowed_tokens_fn, synced_gpus, assistant_model, streamer, **kwargs)
        if assistant_model is None and not _wants_engine(None, generation_config, kwargs):
            assistant_model = _launch_assistant(self)
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
        if assistant_model is not None:
            assistant_model = _place_assistant(self, assistant_model)
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
