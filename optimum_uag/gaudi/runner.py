"""Static-shape model runner for optimum-habana's Gaudi models: preallocated KV cache addressed by token_idx."""
from __future__ import annotations

import weakref

import torch

from ..registry import model_state
from ..runners import local_config
from ..runners.common import PROMPT_BUCKET, accepts
from . import device as hpu
from .cache import MARGIN, POOLED, _bits, _bucketed, _evict, _pool, _pooled_width, _width  # noqa: F401 (MARGIN)
from .classes import (REFUSED, UPSTREAM_DIFFERS, _kv_caches, _live, cache_mechanism,  # noqa: F401
                      decoder_layers, final_norm, forward_conventions, own_cache_bytes, read_past_from_mask_width,
                      refusal, restore_updates, text_config_of, write_blocks_at_token_idx)


# The largest attention mask one reuse_cache forward may build, in bytes: a prompt whose (B, 1, L, columns) mask in
# the model's dtype would exceed it runs in chunks of a power of two (upstream's causal FusedSDPA builds none; our
# mask is explicit: it hides holes). Never below MASK_ROWS rows, so a verify block or a draft tree is never split.
MASK_BYTES = 1 << 28
MASK_ROWS = 64


class _OwnError(ValueError):
    """A runner input error of ours (not a model class failing inside its forward)."""


class GaudiModelRunner:
    """Runs a Gaudi model over a static KV cache of fixed shape; rows share one write column (token_idx).

    Same interface as the runners of `optimum_uag.runners`: `forward(tokens, start, logits_to_keep)` writes
    `tokens` at logical slots start..start+L-1 of each row. Physically, every call writes its block at the
    shared column `token_idx` (one index_copy_ for the whole batch, as optimum-habana does), and a per-row
    map `slot_of` records which logical slot each column holds. Rollback is free: a later call with a smaller
    `start` hides the columns holding slots >= start, and the block is written right after the last column
    any row still holds (found on the device: no host sync), so rejected drafts' columns are reused; at batch 1
    the column of a slot is the slot itself. Rows accept different numbers of tokens per round, so at batch > 1
    holes build up; when a block would pass the end, the host reads where the live columns end (one sync) and,
    if still short, one fixed-shape gather per layer moves each row's live entries to the front (compaction).
    The target's cache is as wide as the logical capacity (prompt + max_new_tokens + the verify block) plus
    MARGIN columns, rounded to MARGIN (or upstream's bucket_size): optimum-habana's own size plus the verify
    columns (see _width; a draft's is wider, for fewer graphs).

    Mechanisms:
    - "reuse_cache": models with `allocate_kv_cache` (Llama, Mistral, Qwen2, ...): the model's own KVCache
      modules, `reuse_cache=True`, a 4D mask; any block width in one call.
    - "token_idx": models that write a caller-allocated tuple cache with `index_copy_(token_idx)` (GPT-NeoX,
      ...): their mask code is causal only without a past, so the prefill runs without a past and is copied
      into the cache, and later blocks run one token at a time (one decode graph).
    """

    def __init__(self, model, batch_size: int, max_len: int, pad_lengths: torch.Tensor, *, lazy_mode: bool = False,
                 hpu_graphs: bool = False, columns: int | None = None, use_flash_attention: bool = False,
                 flash_attention_recompute: bool = False, attn_softmax_bf16: bool = False,
                 flash_attention_fast_softmax: bool = False, bucket_size: int = 0, limit_hpu_graphs: bool = False,
                 clear_hpu_graphs_cache: bool = False, tight: bool = True):
        self.mechanism = cache_mechanism(model)
        if self.mechanism is None:
            raise ValueError(f"{type(model).__name__} has no token_idx cache; use optimum_uag.runners.make_runner")
        reason = refusal(model, max_len)
        if reason is not None:
            raise ValueError(reason)
        read_past_from_mask_width(model)  # (Mistral, Falcon: their mask helper takes the past length as 0)
        if type(model).__name__ in UPSTREAM_DIFFERS:
            import warnings

            warnings.warn(f"optimum-habana's {type(model).__name__} does not compute transformers' model: "
                          f"{UPSTREAM_DIFFERS[type(model).__name__]}; assisted generation reproduces the Gaudi class "
                          "(its own generate()'s output), not transformers'", stacklevel=2)
        live = model_state(model).setdefault("live_runners", weakref.WeakSet())
        if any(not runner.closed for runner in live):
            raise ValueError(f"this {type(model).__name__} already runs in this generate() call (is assistant_model "
                             "the target itself?): on Gaudi its static KV cache (optimum-habana's KVCache modules, "
                             "the pooled tensors) cannot hold two sequences at once; pass a separate copy "
                             "(copy.deepcopy(model)) as assistant_model, or use prompt_lookup_num_tokens")
        self.closed = False
        live.add(self)
        self.model = model
        self.device = model.device
        self.batch_size = batch_size
        self.max_len = max_len
        # the logical capacity + MARGIN, rounded; a pooled cache at least this wide (and not twice as wide) is
        # reused (see _allocate): nearby prompt lengths and max_new_tokens share the cache shapes, hence the graphs
        self.columns = columns or _pooled_width(model, cache_mechanism(model), batch_size, model.dtype,
                                                _width(max_len, bucket_size, tight))
        if self.columns <= max_len:
            raise ValueError(f"columns ({self.columns}) must exceed max_len ({max_len}): compaction needs free columns")
        self.pad = pad_lengths.to(self.device)
        self.lazy_mode = lazy_mode
        # FusedSDPA (reuse_cache models): with our explicit (B, 1, L, columns) mask, never its causal-mask mode
        # (and the softmax knobs upstream's generate() passes: the same logits as its target-only baseline), each
        # only where the model's forward takes it
        wanted = dict(use_flash_attention=use_flash_attention, flash_attention_recompute=flash_attention_recompute,
                      flash_attention_causal_mask=False, attn_softmax_bf16=attn_softmax_bf16,
                      flash_attention_fast_softmax=flash_attention_fast_softmax)
        self.attention = {key: value for key, value in wanted.items() if accepts(model, key)}
        self.decode_attention = {key: (False if key in ("flash_attention_fast_softmax", "flash_attention_recompute")
                                       else value) for key, value in self.attention.items()}
        self._knobs = self.attention
        self.additive_mask, self.cache_position, self.sizes = forward_conventions(model)
        self.slot_of = torch.full((batch_size, self.columns), -1, dtype=torch.long, device=self.device)
        # host-side: an upper bound of the first free column (the true one, on the device, follows the rollbacks;
        # read back only when a block would not fit under the bound)
        self.write = 0
        self.column_index = torch.arange(self.columns, device=self.device)
        self.shapes: set[tuple[int, int]] = set()
        self.calls = 0
        self.compactions = 0
        self.dtype = model.dtype
        self._restore: list = []
        self._proven: set = set()  # block kinds (one token / more) this runner has run once
        self._overridden: list = []  # KVCache modules whose update() is ours while the runner is open
        self._bypass: dict = {}
        self._depth = 0
        self._hooks: dict = {}  # feature capture for a feature draft head (see _feature_buffer): "norm" / layer index
        # feature buffers, per block shape, kept with the pooled cache: a graph captured in an earlier call
        # writes into the buffer that existed at its capture
        self._features: dict = model_state(model).setdefault("feature_buffers", {}).setdefault(
            (self.mechanism, batch_size, self.columns, model.dtype), {})
        self._feature_target = None
        self._feature_layers: tuple = ()
        self.clear_graphs = False
        try:  # (a failure here must not leave the model's KVCache modules with our tensors or update())
            self._allocate()
            limit = getattr(text_config_of(model), "max_position_embeddings", None)
            if hasattr(model, "update_sincos_cache") and limit is not None and limit < self.columns:
                # as upstream's generate() before decoding: a RoPE table for the whole width, built here and not
                # inside a forward (a lazy graph or an HPU-graph capture)
                model.update_sincos_cache(seq_len=self.columns)
            # upstream's limit_hpu_graphs: the prompt's forward runs outside graphs (no capture per prompt shape);
            # clear_hpu_graphs_cache (with it): the graphs are dropped at the end of the call
            self.bypass_prefill = hpu_graphs and limit_hpu_graphs
            self.clear_graphs = hpu_graphs and limit_hpu_graphs and clear_hpu_graphs_cache
            if hpu_graphs:  # our own wrapped step, kept with the pooled cache it reads (never the user's model)
                key = (self.mechanism, self.batch_size, self.columns, self.dtype)
                self.call = hpu.graph_step(model, key, self.past if self.mechanism == "token_idx" else None)
            else:
                self.call = hpu.GraphStep(model, self.past if self.mechanism == "token_idx" else None)
        except BaseException:
            self.close()
            raise

    def _allocate(self) -> None:
        """KV tensors for (batch, columns): the pooled ones of an earlier call of this shape, else new ones.

        reuse_cache models keep their cache in KVCache modules that optimum-habana's own generate() reallocates
        whenever its shape changes; the tensors found there are put back by close(), so that its graphs and ours
        each keep reading the tensors they were captured with."""
        pool, key = _pool(self.model), (self.mechanism, self.batch_size, self.columns, self.dtype)
        if key in pool:
            pool[key] = pool.pop(key)  # most recently used last
        else:
            _evict(self.model, POOLED - 1)  # before allocating: the peak stays at POOLED caches
        if self.mechanism == "reuse_cache":
            self.caches = _kv_caches(self.model)
            modules = [_live(c) for pair in self.caches for c in pair]
            self._restore = [(m, m.cache, m.inp_seq_len) for m in modules]
            if key not in pool:
                for m in modules:  # fresh tensors: never one that optimum-habana's own graphs captured
                    m.cache = None
                self.model.allocate_kv_cache(self.batch_size, self.columns, -1)  # -1: writes only via token_idx
                pool[key] = [m.cache for m in modules]
            for m, tensor in zip(modules, pool[key]):
                m.cache, m.inp_seq_len = tensor, -1
            for cache in (c for pair in self.caches for c in pair):
                entry = write_blocks_at_token_idx(cache)
                if entry is not None:
                    self._overridden.append(entry)
            self.cache_shapes = [(_live(k).cache.shape, _live(v).cache.shape) for k, v in self.caches]
            return
        if key not in pool:
            config = local_config(self.model, self.model.config)  # a tensor-parallel shard holds only its own heads
            heads = config.num_attention_heads
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
            shape = (self.batch_size, kv_heads, self.columns, head_dim)
            pool[key] = tuple(
                (torch.zeros(shape, dtype=self.dtype, device=self.device),
                 torch.zeros(shape, dtype=self.dtype, device=self.device))
                for _ in range(config.num_hidden_layers)
            )
        # the same tuple every call: an HPU graph copies its `past` input into the captured one, which must
        # therefore be this very tuple (a new one per call would overwrite the live cache with a stale copy)
        self.past = pool[key]

    def close(self) -> None:
        """Put back the KV tensors optimum-habana's own generate() had allocated in the model (reuse_cache); drop
        the graphs when upstream's clear_hpu_graphs_cache asks it."""
        self.closed = True
        if self.clear_graphs:
            self.call.clear_cache()
        for hook in self._hooks.values():
            hook.remove()
        self._hooks = {}
        for module, tensor, seq_len in reversed(self._restore):
            module.cache, module.inp_seq_len = tensor, seq_len
        self._restore = []
        restore_updates(self._overridden)
        self._overridden = []

    @property
    def cache_bytes(self) -> int:
        """Bytes of the KV cache this runner writes (keys and values of every layer)."""
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def _tensors(self) -> list[torch.Tensor]:
        if self.mechanism == "reuse_cache":
            return [_live(c).cache for pair in self.caches for c in pair]
        return [t for pair in self.past for t in pair]

    def _live_end(self) -> torch.Tensor:
        """(device, 0-d) one past the last column any row still holds: where the next block goes. The columns
        after it hold only rolled-back or padding entries. A Python int would be a constant of the lazy graph (one
        graph per offset): a tensor, as optimum-habana's token_idx."""
        return torch.where(self.slot_of >= 0, self.column_index, -1).amax() + 1

    def _compact(self) -> None:
        """Move each row's live entries (slots >= 0) to the front, in slot order: one gather per cache tensor."""
        key = torch.where(self.slot_of >= 0, self.slot_of, self.columns + self.max_len)
        order = key.argsort(dim=1, stable=True)
        self.slot_of = self.slot_of.gather(1, order)
        for tensor in self._tensors():
            bits = _bits(tensor)
            index = order[:, None, :, None].expand(-1, tensor.shape[1], -1, tensor.shape[-1])
            bits.copy_(bits.gather(2, index))
        self.write = int(self._live_end())  # one host sync (compactions are rare)
        self.compactions += 1

    @property
    def supports_tree(self) -> bool:
        """Draft trees (engine/tree.py) on reuse_cache models: one block, a tree mask, holes by slot mapping."""
        return self.mechanism == "reuse_cache"

    def keep_path(self, start: torch.Tensor, columns: torch.Tensor, accepted: torch.Tensor | None = None) -> None:
        """After a tree verify: the accepted path's columns already hold slots start + depth; the other nodes'
        columns are hidden (slot -1). No key / value moves: the slot map is the compaction (`accepted` unused:
        padding columns repeat the path's last, already on it)."""
        block = self._tree_columns  # (L,) physical columns of the last tree block
        on_path = torch.zeros(columns.shape[0], block.shape[0], dtype=torch.bool, device=self.device)
        on_path[:, 0] = True
        on_path.scatter_(1, columns, True)
        held = self.slot_of.index_select(1, block)
        self.slot_of.index_copy_(1, block, torch.where(on_path, held, -1))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden: bool = False,
                tree=None):
        """Write `tokens` (B, L) at logical slots start..start+L-1 of each row; return logits (float32), and with
        hidden=True also the block's last hidden states (B, L, H) (for a feature draft head). With `tree`, the
        block is [root, tree nodes] at slots start + depth, each seeing its ancestors (engine/tree.py)."""
        if self._depth == 0:  # a prompt's every piece (bucket padding, chunks) runs outside graphs with limit_hpu_graphs
            self._bypass = {"bypass_hpu_graphs": True} if self.bypass_prefill and self.write == 0 else {}
            # upstream's Llama applies flash_attention_fast_softmax (and recompute) to blocks of q_len > 1, i.e. the
            # prompt only: its target-only decode runs "None" softmax. Our verify blocks (K+1 tokens) must compute
            # what that decode computes, so the knob reaches the prompt's forwards only (issue 29, finding 7)
            self._knobs = self.attention if self.write == 0 else self.decode_attention
        self._depth += 1
        try:
            kind = tokens.shape[1] == 1  # a block of one token (decode) or more (prompt, verify): two code paths
            if kind in self._proven or self._depth > 1:
                return self._forward(tokens, start, logits_to_keep, hidden, tree)
            try:  # the first forward of each kind: a class our runner cannot drive fails here, said by name
                out = self._forward(tokens, start, logits_to_keep, hidden, tree)
                self._proven.add(kind)
                return out
            except (_OwnError, NotImplementedError, MemoryError):
                raise
            except Exception as err:  # noqa: BLE001
                if "out of memory" in str(err).lower():
                    raise
                import optimum.habana

                raise ValueError(
                    f"{type(self.model).__name__} (optimum-habana {optimum.habana.__version__}) cannot run in "
                    f"optimum-uag's static Gaudi runner ({self.mechanism} cache): its forward raised "
                    f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}. docs/gaudi.md lists the classes "
                    "tested; use one of those as target/assistant_model, or run without assistant_model") from err
        finally:
            self._depth -= 1

    def _forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 0, hidden: bool = False,
                 tree=None):
        batch, length = tokens.shape
        extra = -length % PROMPT_BUCKET if self.write == 0 and length > 1 and self._depth == 1 else 0
        if extra:
            # the prompt block, left-extended to a multiple of PROMPT_BUCKET: one prefill graph per bucket, not
            # per prompt length. The extra columns hold negative slots: never visible, dropped by compaction.
            tokens = torch.cat([tokens[:, :1].expand(batch, extra), tokens], dim=1)
            out = self.forward(tokens, start - extra, logits_to_keep, hidden)
            logits = out[0] if hidden else out
            logits = logits if logits_to_keep else logits[:, extra:]
            return (logits, out[1][:, extra:]) if hidden else logits
        step = length
        if self.mechanism == "reuse_cache" and tree is None and length > MASK_ROWS:
            # issue 29, finding 10: a long prompt's mask (and the model's temporaries of that shape) in chunks
            rows = max(MASK_ROWS, MASK_BYTES // (batch * self.columns * self.dtype.itemsize))
            step = length if length <= rows else 1 << (rows.bit_length() - 1)
        if self.mechanism == "reuse_cache" and length > self.columns - self.max_len:
            # upstream's attention takes the past length we report (columns - length) as kv_seq_len, the size of
            # its RoPE table (modeling_llama: kv_seq_len = past_key_value[0][-2]; cos[:seq_len][position_ids]):
            # every position of the block must be below it, or it reads past the table (on an HPU, FusedRoPE does
            # not check). A block within the capacity's last columns - max_len slots always is (a verify block);
            # a longer one (the prompt) runs in chunks of a power of two <= (columns - its first slot) / 2, the
            # first slot bounded by the host's write bound (a bounded set of shapes; one chunk when
            # max_new_tokens >= the prompt)
            first = min(self.write, self.max_len - length)
            step = min(step, 1 << (max(1, (self.columns - first) // 2).bit_length() - 1))
            if length > step and tree is not None:
                raise _OwnError(f"a draft tree of {length - 1} nodes is wider than the Gaudi runner's margin "
                                f"of {self.columns - self.max_len} columns; lower tree_nodes")
        if length > step:
            return self._chunked(tokens, start, logits_to_keep, hidden, step)
        if self.mechanism == "token_idx" and length > 1 and self.write > 0:
            # token_idx models take one token at a time once the cache holds something (see class doc)
            return self._chunked(tokens, start, logits_to_keep, hidden, 1)
        self.slot_of.masked_fill_(self.slot_of >= start[:, None], -1)  # rollback: hide stale slots
        base = self._live_end()  # (device) where the block goes
        if self.write + length > self.columns:
            self.write = int(base)  # the bound was loose (rolled-back columns are free): one sync
            if self.write + length > self.columns:
                self._compact()
                base = self._live_end()
                if self.write + length > self.columns:
                    raise _OwnError(f"a block of {length} tokens does not fit the {self.columns}-column cache")
        self.shapes.add((batch, length))
        self.calls += 1
        offsets = torch.arange(length, device=self.device)
        slots = start[:, None] + (offsets if tree is None else tree.block_depths)  # (B, L) logical slots
        columns = base + offsets  # shared physical columns of the block
        visible = None if tree is None else self._tree_visible(tree, start, slots, columns)
        # index_copy_ with a device index, as optimum-habana writes its caches: a Python-int slice would make
        # one lazy-mode graph per write offset
        self.slot_of.index_copy_(1, columns, slots)
        position_ids = (slots - self.pad[:, None]).clamp_min(0)
        # An HPU graph keeps the tensors of its capture call as its inputs and copies every later call's inputs
        # into them: pass a private copy, never a tensor the caller still holds (a draft token would be
        # overwritten by the next one)
        tokens = tokens.clone(memory_format=torch.contiguous_format)  # standard strides: one view hash per shape
        if hidden:
            self._feature_buffer(batch, length, hidden)
        if self.mechanism == "reuse_cache":
            out = self._forward_reuse_cache(tokens, slots, position_ids, columns, logits_to_keep, hidden, visible)
        else:
            out = self._forward_token_idx(tokens, slots, position_ids, columns, logits_to_keep, hidden)
        logits = out.logits
        if logits_to_keep and logits.shape[1] > logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        self.write += length
        if self.lazy_mode:
            hpu.mark_step()
        # an HPU graph replay returns the capture's own output tensors, refilled on the next replay, and the
        # model may have been wrapped by the caller: callers (the draft loop, the split blocks above) may hold
        # these logits across calls, so always hand out a tensor of our own
        result = logits.float()
        result = result.clone() if result is logits else result
        if not hidden:
            return result
        return result, self._feature_target.clone()

    def _chunked(self, tokens, start, logits_to_keep, hidden, step: int):
        length = tokens.shape[1]
        keep = length if logits_to_keep in (0, None) else logits_to_keep
        parts, feats = [], []
        for i in range(0, length, step):
            j = min(i + step, length)
            want = min(j - i, max(0, j - (length - keep)))  # the logits of this chunk the caller asked for
            out = self.forward(tokens[:, i:j], start + i, want or 1, hidden)
            if want:
                parts.append(out[0] if hidden else out)
            if hidden:
                feats.append(out[1])
        logits = torch.cat(parts, 1)
        return (logits, torch.cat(feats, 1)) if hidden else logits

    def _feature_buffer(self, batch: int, length: int, hidden=True) -> None:
        """Where the final norm's output (the target's features) is copied during a hidden=True forward; with
        `hidden` a tuple of layer indices (a head with fused features, EAGLE-3), also those decoder layers' inputs
        (hidden_states[l]), in front of it: (B, L, (m + 1) H).

        optimum-habana's models return no hidden_states, so a forward hook on the final norm (and pre-hooks on the
        fused layers) copy into column ranges of a buffer allocated here, outside any capture: one buffer per block
        shape, so that a graph captured for that shape writes into the same tensor on every replay (as it writes
        the KV cache). Such calls pass output_hidden_states=True, which makes their graphs distinct from the
        plain ones."""
        layers = tuple(hidden) if isinstance(hidden, (tuple, list)) else ()
        size = text_config_of(self.model).hidden_size
        if "norm" not in self._hooks:
            norm = final_norm(self.model)
            if norm is None:
                raise NotImplementedError(f"{type(self.model).__name__}: no final norm module found to read the "
                                          "target's features from; a feature draft head cannot run on it")
            self._hooks["norm"] = norm.register_forward_hook(self._copy_features)
        for i, layer in enumerate(layers):
            if layer not in self._hooks:
                modules = decoder_layers(self.model)
                if modules is None or layer >= len(modules):
                    raise NotImplementedError(f"{type(self.model).__name__}: no decoder layer {layer} to read a fused "
                                              "feature from; use a head without feature_layers on this target")
                self._hooks[layer] = modules[layer].register_forward_pre_hook(self._layer_copier(layer),
                                                                              with_kwargs=True)
        self._feature_layers = layers
        key = (batch, length, layers)
        if key not in self._features:
            self._features[key] = torch.zeros(batch, length, (len(layers) + 1) * size, dtype=self.dtype,
                                              device=self.device)
        self._feature_target = self._features[key]

    def _hidden_kwargs(self) -> dict:
        """A features call's extra arguments. The fused layers go in as an argument GraphStep drops: habana's
        input_hash keys graphs by every argument, so a head fusing other layers (another buffer, other hooks) gets
        graphs of its own instead of replaying ones that write into the last head's buffer."""
        return {"output_hidden_states": True, hpu.FEATURE_LAYERS_ARG: self._feature_layers}

    def _copy_features(self, module, args, output):
        target = self._feature_target
        if target is not None:
            part = target[..., target.shape[-1] - output.shape[-1]:]
            if output.shape == part.shape:
                part.copy_(output)

    def _layer_copier(self, layer: int):
        def copy(module, args, kwargs):
            target, layers = self._feature_target, self._feature_layers
            if target is None or layer not in layers:
                return
            states = args[0] if args else kwargs.get("hidden_states")
            size = states.shape[-1]
            part = target[..., layers.index(layer) * size : (layers.index(layer) + 1) * size]
            if states.shape == part.shape:
                part.copy_(states)
        return copy

    def _tree_visible(self, tree, start, slots, columns) -> torch.Tensor:
        """(B, L, columns) for a tree block: the committed columns (slots pad..start - 1, before this block is
        written) and, among the block's columns, each node's ancestors and itself."""
        if tree.ancestors.shape[1] != slots.shape[1]:
            raise _OwnError("a tree block is [root, nodes]: its width must be the tree's nodes + 1")
        self._tree_columns = columns
        held = self.slot_of[:, None, :]
        visible = ((held >= self.pad[:, None, None]) & (held < start[:, None, None])).expand(-1, slots.shape[1], -1)
        return visible.index_copy(2, columns, tree.ancestors)

    def _visible(self, slots: torch.Tensor) -> torch.Tensor:
        """(B, L, columns): column j is visible to query i iff pad <= slot_of[j] <= slot of query i."""
        held = self.slot_of[:, None, :]
        return (held >= self.pad[:, None, None]) & (held <= slots[:, :, None])

    def _forward_reuse_cache(self, tokens, slots, position_ids, columns, logits_to_keep, hidden=False, visible=None):
        batch, length = tokens.shape
        # optimum-habana reads "past length" from the cache shapes and expects a mask of past + length columns;
        # the mask must span exactly the cache (grouped-query attention does not slice it), so the shapes we
        # pass say columns - length. Only that length is read from them; the KVCache modules hold the tensors.
        past = [tuple(self.sizes((*s[:2], self.columns - length, s[3])) for s in pair) for pair in self.cache_shapes]
        visible = self._visible(slots) if visible is None else visible
        if self.additive_mask:  # (the class passes a 4D mask to its attention unchanged)
            mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device).masked_fill_(
                ~visible, torch.finfo(self.dtype).min)[:, None]
        else:
            mask = visible[:, None].to(self.dtype)  # (B, 1, L, columns); 1 = attend (optimum-habana inverts)
        # cache_position: read only where the class would otherwise derive it from `past`'s shapes (Mixtral, Phi)
        position = {"cache_position": columns} if self.cache_position else {}
        out = self.call(
            input_ids=tokens, attention_mask=mask, position_ids=position_ids, past_key_values=past,
            token_idx=columns + 1, reuse_cache=True, use_cache=True, lazy_mode=self.lazy_mode,
            logits_to_keep=_bucketed(logits_to_keep, length), **self._knobs, **self._bypass, **position,
            **(self._hidden_kwargs() if hidden else {}),
        )
        return out

    def _forward_token_idx(self, tokens, slots, position_ids, columns, logits_to_keep, hidden=False):
        batch, length = tokens.shape
        extra = self._hidden_kwargs() if hidden else {}
        if length > 1:  # the prefill: plain causal attention without a past, then copied into the cache
            mask = (slots >= self.pad[:, None]).long()
            out = self.call(input_ids=tokens, attention_mask=mask, position_ids=position_ids, use_cache=True,
                            **self._bypass, **extra)
            for (k, v), (new_k, new_v) in zip(self.past, out.past_key_values):
                _bits(k).index_copy_(2, columns, _bits(new_k.to(k.dtype)))
                _bits(v).index_copy_(2, columns, _bits(new_v.to(v.dtype)))
            return out
        mask = torch.zeros(batch, self.columns + 1, dtype=torch.long, device=self.device)
        mask[:, : self.columns] = self._visible(slots)[:, 0].long()
        return self.call(input_ids=tokens, attention_mask=mask, position_ids=position_ids, with_past=True,
                         token_idx=columns + 1, use_cache=True, **extra)
