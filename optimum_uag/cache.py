"""Static-shape KV caches with per-row write positions (CPU/CUDA, transformers StaticCache)."""
from __future__ import annotations

import copy

import torch
from transformers import PreTrainedModel, StaticCache


class RowStaticCache(StaticCache):
    """A transformers StaticCache whose writes go to per-row slots.

    Rows of a batch accept different numbers of tokens per round, so each row has its own write position.
    Before every forward the runner sets `slots` (batch, length); `update` scatters the new keys/values there.
    Rejected tokens are never deleted: the row's length is rewound and the stale slots are masked, then
    overwritten (the gpt-fast model of rollback).
    """

    slots: torch.Tensor | None = None

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        layer = self.layers[layer_idx]
        index = self.slots[:, None, :, None].expand(-1, key_states.shape[1], -1, key_states.shape[-1])
        layer.keys.scatter_(2, index, key_states.to(layer.keys.dtype))
        layer.values.scatter_(2, index, value_states.to(layer.values.dtype))
        return layer.keys, layer.values


def local_config(model: PreTrainedModel, config):
    """The config as this process's shard sees it: tensor parallelism (DeepSpeed AutoTP) splits the key/value
    heads across ranks, so the cache holds the local ones (read from the k_proj shard)."""
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if not heads or not getattr(config, "hidden_size", None):
        return config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
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


class ModelRunner:
    """Runs one causal LM over a static per-row KV cache; positions and the 4D mask are passed explicitly."""

    def __init__(self, model: PreTrainedModel, batch_size: int, max_len: int, pad_lengths: torch.Tensor):
        self.model = model
        self.device = model.device
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        config = local_config(model, config)
        self.cache = RowStaticCache(
            config=config, max_batch_size=batch_size, max_cache_len=max_len, device=self.device, dtype=model.dtype
        )
        self.max_len = max_len
        self.pad = pad_lengths.to(self.device)  # (B,) left-padding slots of each row: never attended
        self.key_slots = torch.arange(max_len, device=self.device)
        self.mask_value = torch.finfo(model.dtype).min
        self.shapes: set[tuple[int, int]] = set()
        self.calls = 0

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """Write `tokens` (B, L) at slots start..start+L-1 of each row; return logits (float32)."""
        batch, length = tokens.shape
        self.shapes.add((batch, length))
        self.calls += 1
        offsets = torch.arange(length, device=self.device)
        slots = start[:, None] + offsets  # (B, L)
        self.cache.slots = slots
        position_ids = slots - self.pad[:, None]
        # key slot j is visible to query (b, i) iff pad_b <= j <= start_b + i
        visible = (self.key_slots >= self.pad[:, None, None]) & (self.key_slots <= slots[:, :, None])
        mask = torch.zeros(visible.shape, dtype=self.model.dtype, device=self.device)
        mask.masked_fill_(~visible, self.mask_value)
        out = self.model(
            input_ids=tokens,
            attention_mask=mask[:, None],
            position_ids=position_ids,
            cache_position=offsets,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            return_dict=True,
        )
        return out.logits.float()
