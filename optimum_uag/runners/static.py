"""The `static` runner: a transformers StaticCache with per-row write positions, explicit positions and masks."""
from __future__ import annotations

import contextlib
import copy
import inspect

import torch
from transformers import PreTrainedModel, StaticCache

from ..registry import model_state
from .common import LogitsKeeper, accepts, cache_argument, last_hidden_state, text_config


class RowStaticCache(StaticCache):
    """A transformers StaticCache whose writes go to per-row slots.

    Rows of a batch accept different numbers of tokens per round, so each row has its own write position.
    Before every forward the runner sets `slots` (batch, length); `update` scatters the new keys/values there.
    Rejected tokens are never deleted: the row's length is rewound and the stale slots are masked, then
    overwritten (the gpt-fast model of rollback).
    """

    slots: torch.Tensor | None = None
    live: int | None = None  # attention reads the first `live` slots only (None: all of them)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # transformers 5 gives sliding-window layers a window-sized ring buffer; rows write at their own slots
        # over the whole length (the window is the runner's mask), so every layer gets the full length, as in 4.x
        from transformers import cache_utils

        ring = tuple(getattr(cache_utils, n) for n in ("StaticSlidingWindowLayer", "SlidingWindowLayer")
                     if hasattr(cache_utils, n))
        length = kwargs.get("max_cache_len")
        for i, layer in enumerate(self.layers):
            if ring and isinstance(layer, ring) and length is not None:
                self.layers[i] = cache_utils.StaticLayer(max_cache_len=length)

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None, **kwargs):
        layer = self.layers[layer_idx]
        if getattr(layer, "keys", None) is None or getattr(layer, "is_initialized", True) is False:
            _allocate(layer, key_states, value_states)  # transformers allocates a layer at its first write
        index = self.slots[:, None, :, None].expand(-1, key_states.shape[1], -1, key_states.shape[-1])
        layer.keys.scatter_(2, index, key_states.to(layer.keys.dtype))
        layer.values.scatter_(2, index, value_states.to(layer.values.dtype))
        if self.live is not None:
            return layer.keys[:, :, : self.live], layer.values[:, :, : self.live]
        return layer.keys, layer.values


class masked_gqa:
    """While active, transformers' SDPA attention hands a masked block's grouped-query heads to torch's kernel
    (`enable_gqa`) on a CPU, instead of copying every layer's keys / values once per query head sharing them
    (`repeat_kv`; transformers lets the kernel do it only without a mask). The kernel maps each query head to its
    key / value head itself: the same outputs bit for bit (tests/test_static_runner.py), without the copies. Chat at
    batch 4, a 3-token verify: ~5 ms of ~60 (benchmarks/results/batch4_policy.json, run 5's profile). Eager CPU
    forwards of the static runner only; a transformers without the hook is left as it is."""

    def __init__(self):
        try:
            from transformers.integrations import sdpa_attention
        except ImportError:  # (a transformers without the integration module)
            sdpa_attention = None
        self.module = sdpa_attention if hasattr(sdpa_attention, "use_gqa_in_sdpa") else None
        self.saved = None
        self.wrapped = (None, None)  # (transformers' hook, our wrapper of it): built once, swapped in per forward

    @staticmethod
    def _wrap(original):
        def use_gqa_in_sdpa(attention_mask, key, *args, **kwargs):
            if original(attention_mask, key, *args, **kwargs):
                return True
            value = args[0] if args else kwargs.get("value", key)
            return (key.device.type == "cpu" and type(key) is torch.Tensor and key.shape[-1] == value.shape[-1]
                    and not torch.compiler.is_compiling())
        use_gqa_in_sdpa.optimum_uag = True
        return use_gqa_in_sdpa

    def __enter__(self):
        module = self.module
        if module is not None and not getattr(module.use_gqa_in_sdpa, "optimum_uag", False):
            self.saved = module.use_gqa_in_sdpa
            if self.wrapped[0] is not self.saved:
                self.wrapped = (self.saved, self._wrap(self.saved))
            module.use_gqa_in_sdpa = self.wrapped[1]
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.module.use_gqa_in_sdpa, self.saved = self.saved, None
        return False


def _allocate(layer, key_states, value_states) -> None:
    try:
        layer.lazy_initialization(key_states, value_states)  # transformers 5.x
    except TypeError:
        layer.lazy_initialization(key_states)  # 4.5x


def local_config(model: PreTrainedModel, config):
    """The config as this process's shard sees it: tensor parallelism (DeepSpeed AutoTP) splits the key/value
    heads across ranks, so the cache holds the local ones (read from the k_proj shard)."""
    try:
        heads = getattr(config, "num_attention_heads", None)
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        if not heads or not getattr(config, "hidden_size", None):
            return config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    except Exception:  # noqa: BLE001 - per-layer attributes (transformers 5's Gemma 4): the cache reads each layer's
        return config
    for name, module in model.named_modules():
        if name.endswith("k_proj"):
            rows = getattr(module, "out_features", None)
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.Tensor) and weight.dim() == 2:
                rows = weight.shape[0]
            if rows and rows // head_dim != kv_heads:
                local = copy.copy(config)
                local.num_key_value_heads = rows // head_dim
                local.num_attention_heads = heads * local.num_key_value_heads // kv_heads
                local.head_dim = head_dim
                return local
            break
    return config


def _takes_mask_per_layer_type(model) -> bool:
    """True when the model accepts {layer_type: 4D mask} as attention_mask (transformers' hybrid-attention
    models: Gemma 2/3, Qwen2/3, Cohere2, GPT-OSS, SmolLM3, ...)."""
    base = getattr(model, "base_model", model)
    try:
        source = inspect.getsource(type(base).forward)
    except (OSError, TypeError):
        return False
    return "causal_mask_mapping := attention_mask, dict" in source


def attention_windows(model) -> dict[str, int | None]:
    """{layer type: sliding window or None} for the attention layers of this model."""
    config = text_config(model)
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        window = None
    types = set(getattr(config, "layer_types", None) or [])
    if not types:
        return {"all": window}
    if types - {"full_attention", "sliding_attention"}:
        raise NotImplementedError(f"layer types {sorted(types)} (only full/sliding attention have explicit masks here)")
    return {t: (window if t == "sliding_attention" else None) for t in types}


def _several_ranks() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and \
        torch.distributed.get_world_size() > 1


LIVE_BUCKET = 32  # eager CPU: attention reads the slots up to the block's end, rounded up to this many
# ... in float32; in bf16 / fp16 up to the block's end exactly: the CPU attention kernel rounds by the keys' width
# (SmolLM2 bf16: 0.44 logits apart with 8 masked keys more, bit for bit alike with none), and transformers' own
# incremental generate() attends over exactly the tokens so far: one-token steps then equal its own bit for bit
HALF_LIVE_BUCKET = 1


class StaticCacheRunner:
    """Runs one causal LM over a static per-row KV cache; positions and the 4D mask are passed explicitly.

    On an eager CPU run, attention reads only the slots up to the block's last one (rounded up to LIVE_BUCKET), not
    the whole capacity: a verify block early in a call attends over ~half the keys, and transformers' SDPA path
    copies the keys / values of every layer for a block of several queries (grouped-query heads repeated), so the
    copies shrink too. Compiled and CUDA runs keep the full width (one shape, no host read of the block's end)."""

    kind = "static"

    def __init__(self, model: PreTrainedModel, batch_size: int, max_len: int, pad_lengths: torch.Tensor):
        self.model = model
        self.device = model.device
        self.windows = attention_windows(model)
        if len(self.windows) > 1 and not _takes_mask_per_layer_type(model):  # one 4D mask cannot serve both
            raise NotImplementedError("mixed full/sliding attention layers without per-layer-type masks")
        config = local_config(model, text_config(model))
        self.cache = RowStaticCache(
            config=config, max_batch_size=batch_size, max_cache_len=max_len, device=self.device, dtype=model.dtype
        )
        self.max_len = max_len
        self.pad = pad_lengths.to(self.device)  # (B,) left-padding slots of each row: never attended
        self.key_slots = torch.arange(max_len, device=self.device)
        self.mask_value = torch.finfo(model.dtype).min
        self.keep = LogitsKeeper(model)
        self.extra = {name: True for name in ("use_cache", "return_dict") if accepts(model, name)}
        self.positions = accepts(model, "position_ids")
        self.cache_position = accepts(model, "cache_position")
        self.cache_name = cache_argument(model) or "past_key_values"
        self.shapes: set[tuple[int, int]] = set()
        self.calls = 0
        self.call = None  # a CompiledCall under torch_compile (runners/compile.py)
        self.gqa = masked_gqa()
        # off for a model that refused the shorter keys once (see forward), and across ranks (a failed collective
        # must not be retried on one rank alone)
        self.live_prefix = (self.device.type == "cpu" and model_state(model).get("live_prefix", True)
                            and not _several_ranks())

    def _mask(self, slots: torch.Tensor, window: int | None, keys: torch.Tensor) -> torch.Tensor:
        # key slot j is visible to query (b, i) iff pad_b <= j <= slot_bi (and slot_bi - j < window)
        visible = (keys >= self.pad[:, None, None]) & (keys <= slots[:, :, None])
        if window is not None and window < self.max_len:
            visible &= keys > slots[:, :, None] - window
        # a padding column's query sees its own slot: with nothing visible its softmax would be NaN (models that
        # take the softmax in float32 over a float64 mask: -inf everywhere), and its NaN keys/values would reach
        # every later layer through 0 * NaN; no real query ever sees a padding slot
        visible |= keys == slots[:, :, None]
        mask = torch.zeros(visible.shape, dtype=self.model.dtype, device=self.device)
        return mask.masked_fill_(~visible, self.mask_value)[:, None]

    def _tree_mask(self, tree, start: torch.Tensor, logical: torch.Tensor, window: int | None,
                   keys: torch.Tensor) -> torch.Tensor:
        """The additive 4D mask of a draft tree block (engine/tree.py): committed slots and ancestors."""
        from ..engine.tree import tree_visibility

        visible = tree_visibility(tree, start, self.pad, keys)
        if window is not None and window < self.max_len:  # the window counts tree depth, as a chain would
            visible &= keys > logical[:, :, None] - window
        mask = torch.zeros(visible.shape, dtype=self.model.dtype, device=self.device)
        return mask.masked_fill_(~visible, self.mask_value)[:, None]

    @property
    def supports_tree(self) -> bool:
        """A draft tree needs explicit positions (root + depth) and the runner's own 4D mask."""
        return self.positions

    def keep_path(self, start: torch.Tensor, columns: torch.Tensor, accepted: torch.Tensor | None = None) -> None:
        """After a tree verify: move the keys / values of the accepted path (block columns (B, D)) to the slots
        right after the root (start + 1 ...), one fixed-size gather per layer; later slots are scratch. On an eager
        CPU run with `accepted` (B,) (the path's lengths), only the columns up to the last one that moves: none
        when every row's path already sits in place (a tree's first child) or is empty, ~1 ms of gathers a round
        for SmolLM2's 30 layers."""
        depth = columns.shape[1]
        src = start[:, None] + columns
        dst = start[:, None] + 1 + torch.arange(depth, device=self.device)
        if accepted is not None and self.device.type == "cpu" and getattr(self.call, "static_shapes", False) is False:
            moves = (src != dst) & (dst <= start[:, None] + accepted[:, None])  # (the rest is scratch)
            depth = int(torch.where(moves.any(0), torch.arange(1, depth + 1), 0).max()) if depth else 0
            if depth == 0:
                return
            src, dst = src[:, :depth], dst[:, :depth]
        for layer in self.cache.layers:
            for t in (layer.keys, layer.values):
                if t is None:
                    continue
                shape = (-1, t.shape[1], -1, t.shape[-1])
                t.scatter_(2, dst[:, None, :, None].expand(shape), t.gather(2, src[:, None, :, None].expand(shape)))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden: bool = False,
                tree=None):
        """Write `tokens` (B, L) at slots start..start+L-1 of each row; return logits (float32), and with
        hidden=True also the last hidden states (B, L, H) of the whole block. With `tree` (engine/tree.py) the
        block is [root, tree nodes]: each column attends to the committed slots and its ancestors, at position
        root + depth."""
        batch, length = tokens.shape
        self.shapes.add((batch, length))
        self.calls += 1
        offsets = torch.arange(length, device=self.device)
        slots = start[:, None] + offsets  # (B, L)
        self.cache.slots = slots
        live = None
        if self.live_prefix and getattr(self.call, "static_shapes", False) is False:
            bucket = LIVE_BUCKET if self.model.dtype == torch.float32 else HALF_LIVE_BUCKET
            live = -(-(int(start.max()) + length) // bucket) * bucket
            live = live if live < self.max_len else None
        try:
            return self._forward(tokens, start, slots, offsets, logits_to_keep, hidden, tree, live)
        except RuntimeError:
            if live is None:
                raise
            # a model that sizes its attention by the cache's full length (its own mask or position bias): the
            # whole width from now on (the block's keys / values are rewritten, so the retry is exact)
            self.live_prefix = model_state(self.model)["live_prefix"] = False
            return self._forward(tokens, start, slots, offsets, logits_to_keep, hidden, tree, None)

    def _forward(self, tokens, start, slots, offsets, logits_to_keep, hidden, tree, live):
        batch, length = tokens.shape
        self.cache.live = live
        keys = self.key_slots if live is None else self.key_slots[:live]
        if tree is None:
            logical = slots
            masks = {kind: self._mask(slots, window, keys) for kind, window in self.windows.items()}
        else:
            logical = start[:, None] + tree.block_depths
            masks = {kind: self._tree_mask(tree, start, logical, window, keys) for kind, window in self.windows.items()}
        kwargs = dict(input_ids=tokens, attention_mask=next(iter(masks.values())) if len(masks) == 1 else masks,
                      **{self.cache_name: self.cache}, **self.extra, **self.keep.kwargs(logits_to_keep))
        if self.positions:  # padded slots get position 0: absolute position tables have no negative rows
            kwargs["position_ids"] = (logical - self.pad[:, None]).clamp_min(0)
        if self.cache_position:
            kwargs["cache_position"] = offsets
        if hidden:
            kwargs["output_hidden_states"] = True
        eager_cpu = self.device.type == "cpu" and getattr(self.call, "static_shapes", False) is False
        with self.gqa if eager_cpu else contextlib.nullcontext():  # grouped-query heads without key / value copies
            out = self.model(**kwargs) if self.call is None else self.call((batch, length), **kwargs)
        logits = self.keep(out.logits, logits_to_keep).float()
        return (logits, last_hidden_state(out, hidden)) if hidden else logits
