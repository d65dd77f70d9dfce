"""The `dynamic` and `per_row` runners: the model's own cache (DynamicCache or legacy tuples), cropped on rollback."""
from __future__ import annotations

import functools
import inspect

import torch

from .common import LogitsKeeper, accepts, cache_argument, last_hidden_state, local_attention_sizes, returned_cache


@functools.lru_cache(maxsize=None)
def _crops_by_count(cache_type: type) -> bool:
    """transformers 5's Cache.crop(tokens_to_remove) vs 4.x's crop(max_length); read once per cache class."""
    try:
        return "tokens_to_remove" in inspect.signature(cache_type.crop).parameters
    except (TypeError, ValueError):
        return False


def crop(past, columns: int, total: int):
    """The cache cut back from `total` to its first `columns` positions (a Cache object in place; legacy tuples
    by slicing each tensor on its sequence axis, the one of size `total`: BLOOM keeps keys as (B*H, D, S))."""
    if hasattr(past, "crop"):
        # transformers 5 crops by a (negative) number of tokens to remove; 4.x by the length to keep
        past.crop(columns - total if _crops_by_count(type(past)) else columns)
        return past
    if isinstance(past, (tuple, list)):
        return type(past)(crop(item, columns, total) for item in past)
    if isinstance(past, torch.Tensor):
        for dim in (-2, -1, 1):
            if past.dim() >= 3 and past.shape[dim] == total:
                return past.narrow(dim, 0, columns)
        raise NotImplementedError(f"cannot find the sequence axis of a cache tensor of shape {tuple(past.shape)}")
    raise NotImplementedError(f"cannot roll back a cache of type {type(past).__name__}")


# A cache with states that cannot be cut back by masking (transformers >= 5.25: recurrent / linear-attention layers,
# and sliding-window layers past their window) is put in recording mode after the prompt: every state since the
# last crop is kept, so a rollback restores the state after the last kept token (Cache.activate_past_recording,
# as transformers' own assisted generation does). The record is bounded: past RECORD_LIMIT tokens without a
# rollback it is trimmed in place to the last RECORD_KEEP tokens' states (no forward), which stay rollbackable.
RECORD_LIMIT, RECORD_KEEP = 64, 32


def records_past(past) -> bool:
    """Whether the cache holds layers whose past can only be rolled back when recorded: recurrent / linear-attention
    states (transformers 5.25's LinearAttention layers) or sliding windows that drop keys."""
    layers = getattr(past, "layers", None)
    return hasattr(past, "activate_past_recording") and any(
        hasattr(layer, "update_conv_state") or getattr(layer, "is_sliding", False) for layer in layers or ())


class OwnCacheRunner:
    """Runs a model on its own cache. Blocks are appended at shared physical columns; a per-row map `slot_of`
    records which logical slot each column holds (-1: rejected, a hole). Each forward hides the row's columns at
    or after `start` (rollback), crops the columns no row needs any more (as transformers' assisted generation
    crops), and passes a 2D mask that is 0 on padding and holes, with explicit position ids per row. A recurrent
    cache (records_past) runs one row without holes: a rollback is a crop to a recorded state."""

    kind = "dynamic"

    def __init__(self, model, batch_size: int, max_len: int, pad_lengths: torch.Tensor):
        if cache_argument(model) is None:
            raise NotImplementedError(f"{type(model).__name__}.forward takes no past_key_values")
        if batch_size > 1 and local_attention_sizes(model):
            # the model would measure its window in physical columns, holes of rejected tokens included
            raise NotImplementedError("sliding-window attention over a cache with holes")
        self.model = model
        self.device = model.device
        self.pad = pad_lengths.to(self.device)
        self.slot_of = torch.empty(batch_size, 0, dtype=torch.long, device=self.device)
        self.past = None
        self.keep = LogitsKeeper(model)
        self.positions = accepts(model, "position_ids")
        self.past_name = cache_argument(model)
        self.shapes: set[tuple[int, int]] = set()
        self.calls = 0
        self.recorded = None  # recording caches: tokens recorded since the last crop (None: not recording)
        self.fed = None  # recording caches (one row): the tokens in the cache, to feed again (_restart)
        self.unpadded = False  # recording caches: the row holds no padding column (its mask would be all ones)

    def _rollback(self, start: torch.Tensor) -> None:
        slot_of = self.slot_of.masked_fill(self.slot_of >= start[:, None], -1)
        live = (slot_of >= 0).any(0).nonzero()
        columns = int(live[-1]) + 1 if live.numel() else 0
        remove = slot_of.shape[1] - columns
        if self.recorded is not None:
            if remove > self.recorded:  # before what is recorded (into the prompt): the kept tokens fed anew
                self._restart(columns)
            elif remove:  # a crop to the recorded state (crop(0) would only trim the record)
                self._check_record()
                self.past = crop(self.past, columns, slot_of.shape[1])
                self.recorded, self.fed, self.slot_of = 0, self.fed[:, :columns], slot_of[:, :columns]
            return
        if columns < slot_of.shape[1] and self.past is not None:
            self.past = crop(self.past, columns, slot_of.shape[1]) if columns else None
            slot_of = slot_of[:, :columns]
        self.slot_of = slot_of

    def _restart(self, columns: int) -> None:
        """A new cache holding the first `columns` tokens (one prompt-like forward; recording starts after it)."""
        keep, first = self.fed[:, :columns], self.slot_of[:, :1]
        self.past, self.recorded, self.fed = None, None, None
        self.slot_of = self.slot_of[:, :0]
        if columns:
            self.forward(keep, first[:, 0], logits_to_keep=1)

    def _layers(self):
        return [layer for layer in self.past.layers if getattr(layer, "record_past", False)]

    def _check_record(self) -> None:
        """Every recording layer holds one state per recorded token (else a crop would restore the wrong one:
        a model or kernel that records per forward, not per token): checked before each crop."""
        n = self.recorded
        for layer in self._layers():
            for i in range(getattr(layer, "number_of_states", 0)):
                if ((layer.is_recurrent_states_initialized[i] and len(layer.recurrent_states_history[i]) != n)
                        or (layer.is_conv_states_initialized[i]
                            and layer.conv_states[i].shape[-1] != layer.conv_kernel_size[i] + n)):
                    raise NotImplementedError(f"{type(self.model).__name__}'s cache did not record one state per "
                                              "token: it cannot be rolled back")

    def _trim_record(self, keep: int) -> None:
        """Keep only the last `keep` tokens' recorded states (conv columns, recurrent states, keys of a sliding
        window past its window), in place: what crop(0) does, less `keep` tokens of history."""
        self._check_record()
        for layer in self._layers():
            for i in range(getattr(layer, "number_of_states", 0)):
                if layer.is_conv_states_initialized[i]:
                    layer.conv_states[i] = layer.conv_states[i][..., -(layer.conv_kernel_size[i] + keep):]
                if layer.is_recurrent_states_initialized[i]:
                    layer.recurrent_states_history[i] = layer.recurrent_states_history[i][-keep:]
            window = getattr(layer, "sliding_window", None)
            if window and getattr(layer, "is_initialized", False) and layer.keys.shape[-2] > window - 1 + keep:
                layer.keys = layer.keys[..., -(window - 1 + keep):, :]
                layer.values = layer.values[..., -(window - 1 + keep):, :]
        self.recorded = keep

    def _record(self, tokens: torch.Tensor, past) -> None:
        """After a forward: start recording once the prompt is in (a recording prompt would keep a state per
        prompt token), count what is recorded, and cut the record back when it grows past RECORD_LIMIT."""
        if self.recorded is None:
            if not records_past(past):
                return
            if tokens.shape[0] > 1:
                raise NotImplementedError("a recurrent / windowed cache cannot hold per-row holes: one row at a time")
            if self.slot_of.shape[1] != tokens.shape[1]:
                raise NotImplementedError("the cache turned recurrent after its first forward")
            # every later token's state recorded: multi-token blocks then also run token by token inside the
            # model (its chunked scan does not start from a cached state), as its own decoding loop does
            past.activate_past_recording(recurrent_states_to_keep=1 << 20)
            for layer in past.layers:  # transformers 5.25 gives a layer's states one shared history list
                if isinstance(getattr(layer, "recurrent_states_history", None), dict):
                    layer.recurrent_states_history = {i: [] for i in layer.recurrent_states_history}
            self.recorded, self.fed = 0, tokens
            # (once, not a host sync per forward: later slots only grow, and a rollback crops)
            self.unpadded = not bool((self.slot_of < self.pad[:, None]).any())
            return
        self.recorded += tokens.shape[1]
        self.fed = torch.cat([self.fed, tokens], 1)
        if self.recorded > RECORD_LIMIT:  # the last block (a verify) always stays rollbackable
            self._trim_record(max(RECORD_KEEP, tokens.shape[1]))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden: bool = False):
        """Write `tokens` (B, L) at logical slots start..start+L-1 of each row; return logits (float32) (and the
        block's last hidden states with hidden=True)."""
        batch, length = tokens.shape
        self.shapes.add((batch, length))
        self.calls += 1
        self._rollback(start)
        slots = start[:, None] + torch.arange(length, device=self.device)
        self.slot_of = torch.cat([self.slot_of, slots], 1)
        kwargs = dict(input_ids=tokens, attention_mask=(self.slot_of >= self.pad[:, None]).long(), use_cache=True,
                      **self.keep.kwargs(logits_to_keep))
        if self.recorded is not None and self.unpadded:
            # one row without padding columns (a recording cache has no holes: a rollback crops): no mask, as the
            # model's own decoding loop (Mamba multiplies the block's hidden states by a mask it expects block-sized)
            del kwargs["attention_mask"]
        if self.positions:  # padded slots get position 0: absolute position tables have no negative rows
            kwargs["position_ids"] = (slots - self.pad[:, None]).clamp_min(0)
        if self.past is not None:
            kwargs[self.past_name] = self.past
        if hidden:
            kwargs["output_hidden_states"] = True
        out = self.model(**kwargs)
        past = returned_cache(out)
        if past is None:
            raise NotImplementedError(f"{type(self.model).__name__} returned no past_key_values")
        self.past = past
        self._record(tokens, past)
        logits = self.keep(out.logits, logits_to_keep).float()
        return (logits, last_hidden_state(out, hidden)) if hidden else logits


class PerRowRunner:
    """One OwnCacheRunner per row (batch 1, no left padding, so no holes: every rollback is a crop). For models whose positions or masks cannot express padding or holes; costs one forward per row."""

    kind = "per_row"

    def __init__(self, model, batch_size: int, max_len: int, pad_lengths: torch.Tensor):
        self.pad = pad_lengths.tolist()
        self.rows = [OwnCacheRunner(model, 1, max_len, torch.tensor([p], device=model.device)) for p in self.pad]
        self.shapes: set[tuple[int, int]] = set()

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rows)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden=False):
        """As OwnCacheRunner.forward, row by row; a row's padding gets zero logits and features (never read)."""
        batch, length = tokens.shape
        self.shapes.add((batch, length))
        outs, feats = [], []
        for b, (runner, pad, s) in enumerate(zip(self.rows, self.pad, start.tolist())):
            skip = max(0, pad - s)  # the row's padding is never written
            out = runner.forward(tokens[b : b + 1, skip:], start[b : b + 1] + skip, logits_to_keep, hidden)
            logits, feat = out if hidden else (out, None)
            want = logits_to_keep or length
            if logits.shape[1] < want:  # padded positions: no logits (never read)
                logits = torch.nn.functional.pad(logits, (0, 0, want - logits.shape[1], 0))
            outs.append(logits)
            if hidden:  # the target's features at every position of the block, as the batched runners return them
                feats.append(torch.nn.functional.pad(feat, (0, 0, length - feat.shape[1], 0)))
        return (torch.cat(outs, 0), torch.cat(feats, 0)) if hidden else torch.cat(outs, 0)


class StepwiseRunner(PerRowRunner):
    """Per-row runners that feed every block after the prompt one token at a time: exactly the model's own
    generate() loop, for models whose multi-token forwards over a cache differ from it (GIT, chunked attention).
    The slowest runner (a verify costs k + 1 forwards); chosen only when nothing faster reproduces the model."""

    kind = "stepwise"

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden=False):
        if all(r.past is None for r in self.rows) or tokens.shape[1] == 1:
            return super().forward(tokens, start, logits_to_keep, hidden)
        length = tokens.shape[1]
        outs = [super(StepwiseRunner, self).forward(tokens[:, i : i + 1], start + i, 1, hidden) for i in range(length)]
        keep = length - (logits_to_keep or length)
        if hidden:  # (features at every position of the block)
            return torch.cat([o[0] for o in outs[keep:]], 1), torch.cat([o[1] for o in outs], 1)
        return torch.cat(outs[keep:], 1)
