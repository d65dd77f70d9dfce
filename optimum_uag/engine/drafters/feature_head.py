"""A feature-level draft head (EAGLE, Li et al. 2024) in the layout of the authors' published heads.

The head reads, at every position t, the target's last hidden state f_t (after its final norm) and the embedding
of the token x_{t+1} that follows, runs `fc` on their concatenation and one decoder layer, and returns h_t, its
guess of f_{t+1}; logits for x_{t+2} come from an LM head over h_t. Drafting further than one token feeds h_t back
in as the feature of the next position.

Checkpoint layout (EAGLE-1/2, `eagle/model/cnets.py::Model`): `config.json` (a Llama config, one layer, `bias`) and
`pytorch_model.bin` (or `model.safetensors`) with `fc.{weight,bias}`, `layers.0.self_attn.{q,k,v,o}_proj.weight`,
`layers.0.mlp.{gate,up,down}_proj.weight`, `layers.0.post_attention_layernorm.weight` (layer 0 has no input norm)
and optionally `embed_tokens.weight`. Such a head uses the target's own LM head. optimum-uag's heads add a reduced
draft vocabulary as EAGLE-3 stores it: `lm_head.weight` (N, H) and `d2t` (N,) with target id = i + d2t[i]
(config `draft_vocab_size`), and name the target they were trained on (config `target`).

Fused features (EAGLE-3, Li et al. 2025): with config `feature_layers` [l_1, ..., l_m] (indices into the target's
`hidden_states`: the input of decoder layer l), the true feature of a position is the concatenation of those
layers' hidden states and the final-norm output, (m + 1) x H wide; `fuse` (a linear map to H, applied after an RMS
normalisation of each earlier layer's part) turns it into f_t. The head's own outputs (later drafting steps) are H
wide and skip `fuse`. A head without `feature_layers` reads the final-norm output alone.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

CONFIG_NAME = "config.json"
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
HEAD_TYPE = "eagle"  # config["optimum_uag_head"]
# torch's SDPA maps grouped query heads to their key / value heads itself from 2.5 on (`enable_gqa`)
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """Llama rotary embedding; `rope_scaling` (linear / dynamic / llama3 / yarn) through transformers' own tables."""

    def __init__(self, config: dict, head_dim: int):
        super().__init__()
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        llama = LlamaConfig(**{k: v for k, v in config.items() if k in _LLAMA_KEYS})
        llama.head_dim = head_dim
        scaling = config.get("rope_scaling") or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            inv_freq = 1.0 / (float(config.get("rope_theta", 10000.0))
                              ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            scale = 1.0
        else:
            inv_freq, scale = ROPE_INIT_FUNCTIONS[kind](llama, None)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.scale = float(scale)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.scale).to(dtype), (emb.sin() * self.scale).to(dtype)


_LLAMA_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "rope_theta",
               "rope_scaling", "max_position_embeddings", "head_dim", "rms_norm_eps", "vocab_size")


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Rotated queries (B, heads, L, D) and keys / values (B, kv_heads, L, D)."""
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention of q over k/v under a boolean mask (B, 1, Lq, Lk) (True = visible)."""
        groups = self.heads // self.kv_heads
        kernel_groups = groups > 1 and _SDPA_GQA and q.device.type == "cpu"  # no key / value copies (same outputs)
        if groups > 1 and not kernel_groups:
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **({"enable_gqa": True} if kernel_groups else {}))
        batch, _, length, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """EAGLE's decoder layer 0: no input norm (the fc output goes straight into attention)."""

    def __init__(self, config: dict, head_dim: int):
        super().__init__()
        hidden = config["hidden_size"]
        heads = config["num_attention_heads"]
        self.self_attn = Attention(hidden, heads, config.get("num_key_value_heads") or heads, head_dim)
        self.mlp = MLP(hidden, config["intermediate_size"])
        self.post_attention_layernorm = RMSNorm(hidden, config.get("rms_norm_eps", 1e-6))

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x))


class FeatureHead(nn.Module):
    """The draft head: fc([embedding of x_{t+1}, f_t]) -> one decoder layer -> h_t (~f_{t+1}) -> draft logits."""

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        self.datastore = None  # a Datastore of the target's own answers (an A/B option: combined.DATASTORE_POLICY)
        hidden = config["hidden_size"]
        head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
        if int(config.get("num_hidden_layers", 1)) != 1:
            raise ValueError(f"a feature head has one decoder layer; this config has num_hidden_layers="
                             f"{config.get('num_hidden_layers')} (is it a full model rather than an EAGLE head?)")
        self.head_dim = head_dim
        self.feature_layers = [int(i) for i in config.get("feature_layers") or []]
        self.fuse = (nn.Linear((len(self.feature_layers) + 1) * hidden, hidden, bias=False)
                     if self.feature_layers else None)
        # the token's embedding is the target's input embedding, narrower than its features in some architectures
        # (ELECTRA's embedding_size, RemBERT's input_embedding_size): fc reads [embedding (E), feature (H)]
        self.embedding_size = int(config.get("embedding_size") or hidden)
        self.fc = nn.Linear(self.embedding_size + hidden, hidden, bias=bool(config.get("bias", True)))
        self.layers = nn.ModuleList([Layer(config, head_dim)])
        self.rotary = Rotary(config, head_dim)
        self.embed_tokens: nn.Embedding | None = None  # the target's, unless the checkpoint carries its own
        n = config.get("draft_vocab_size")
        self.lm_head = nn.Linear(hidden, int(n), bias=False) if n else None  # None: the target's LM head
        self.register_buffer("d2t", torch.zeros(int(n) if n else 0, dtype=torch.long))

    # --------------------------------------------------------------------------------------------- pieces
    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def attn(self) -> Attention:
        return self.layers[0].self_attn

    def draft_ids(self) -> torch.Tensor | None:
        """Target ids of the draft vocabulary's rows (None: the full target vocabulary)."""
        if self.lm_head is None:
            return None
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    @property
    def feature_size(self) -> int:
        """Width of the target's features this head reads: H, or (m + 1) x H with fused layers."""
        return (len(self.feature_layers) + 1) * self.config["hidden_size"]

    def fuse_features(self, features: torch.Tensor) -> torch.Tensor:
        """(..., (m + 1) H) target features -> (..., H): each earlier layer's part RMS-normalised (the residual
        stream's scale grows with depth), then `fuse`. H-wide inputs (the final norm's output, or the head's own
        outputs) pass unchanged."""
        hidden = self.config["hidden_size"]
        if self.fuse is None or features.shape[-1] == hidden:
            return features
        if features.shape[-1] != self.feature_size:
            raise ValueError(f"this head fuses layers {self.feature_layers} + the final norm ({self.feature_size} "
                             f"features), got {features.shape[-1]}")
        early, last = features[..., :-hidden], features[..., -hidden:]
        early = early.unflatten(-1, (len(self.feature_layers), hidden)).float()
        early = early * torch.rsqrt(early.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.fuse(torch.cat((early.flatten(-2).to(last.dtype), last), dim=-1))

    def project(self, features: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        features = self.fuse_features(features)
        return self.fc(torch.cat((embeds.to(features.dtype), features), dim=-1))

    def logits(self, hidden: torch.Tensor, target_head: nn.Module | None = None) -> torch.Tensor:
        """Draft-vocabulary logits (..., N), or the target head's (..., V) for a head without its own."""
        if self.lm_head is not None:
            return self.lm_head(hidden)
        if target_head is None:
            raise ValueError("this head has no LM head of its own: pass the target's (model.get_output_embeddings())")
        return target_head(hidden)

    # --------------------------------------------------------------------------------------- cached step
    def step(self, features, embeds, positions, cache_k, cache_v, slots, mask) -> torch.Tensor:
        """One block over the head's static KV cache: write the block's keys/values at `slots` (B, L) and attend
        under `mask` (B, 1, L, C); returns h (B, L, H)."""
        x = self.project(features, embeds)
        cos, sin = self.rotary(positions, x.dtype)
        q, k, v = self.attn.qkv(x, cos, sin)
        index = slots[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[-1])
        cache_k.scatter_(2, index, k.to(cache_k.dtype))
        cache_v.scatter_(2, index, v.to(cache_v.dtype))
        return self.layers[0].finish(x, self.attn.attend(q, cache_k, cache_v, mask))

    # -------------------------------------------------------------------------------------------- training
    def add_fusion(self, feature_layers: list[int]) -> None:
        """Give a head that reads the final norm's output alone fused features over `feature_layers`, starting as
        the same function (fuse = [0 ... 0 | I]): training then learns what the earlier layers add."""
        if self.fuse is not None:
            raise ValueError(f"this head already fuses layers {self.feature_layers}")
        hidden = self.config["hidden_size"]
        self.feature_layers = [int(i) for i in feature_layers]
        self.config["feature_layers"] = list(self.feature_layers)
        self.fuse = nn.Linear((len(self.feature_layers) + 1) * hidden, hidden, bias=False).to(self.fc.weight)
        with torch.no_grad():
            self.fuse.weight.zero_()
            self.fuse.weight[:, -hidden:] = torch.eye(hidden)

    def unrolled(self, features: torch.Tensor, embeds: torch.Tensor, steps: int, noise: float = 0.0) -> list[torch.Tensor]:
        """Training forward with test-time unrolling (as EAGLE-3 trains): step 1 reads the true features f_t; step
        s reads step s-1's outputs as the features of position t+s-1 and the token embedding x_{t+s}, and attends to
        the true-feature keys of positions <= t plus its own earlier predicted keys (what drafting sees).

        features (B, T, F): f_0..f_{T-1} (F = feature_size); embeds (B, T + steps - 1, H): embeddings of x_1..x_{T+steps-1}.
        Returns, per step s, h (B, T, H) at pairs (t + s - 1): the guess of f_{t+s}."""
        batch, length, _ = features.shape
        positions = torch.arange(length, device=features.device)[None].expand(batch, -1)
        causal = torch.ones(length, length, dtype=torch.bool, device=features.device).tril()
        feats = features + noise * torch.randn_like(features) if noise else features
        outs, diag_k, diag_v = [], [], []
        base_k = base_v = None
        for s in range(steps):
            x = self.project(feats, embeds[:, s : s + length])
            cos, sin = self.rotary(positions + s, x.dtype)
            q, k, v = self.attn.qkv(x, cos, sin)
            if s == 0:
                base_k, base_v = k, v
                attn = self.attn.attend(q, k, v, causal[None, None])
            else:
                attn = self._attend_unrolled(q, base_k, base_v, diag_k + [k], diag_v + [v], causal)
            diag_k.append(k) if s else None
            diag_v.append(v) if s else None
            h = self.layers[0].finish(x, attn)
            outs.append(h)
            feats = h
        return outs

    def _attend_unrolled(self, q, base_k, base_v, diag_k, diag_v, causal):
        """Query at pair t of step s: true keys of pairs <= t, then the same row's predicted keys of steps 1..s."""
        groups = self.attn.heads // self.attn.kv_heads
        rep = (lambda t: t.repeat_interleave(groups, 1)) if groups > 1 else (lambda t: t)
        scale = self.head_dim ** -0.5
        scores = [(q @ rep(base_k).transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))]
        scores += [(q * rep(k)).sum(-1, keepdim=True) * scale for k in diag_k]
        weights = torch.softmax(torch.cat(scores, -1), -1)
        length = base_k.shape[2]
        out = weights[..., :length] @ rep(base_v)
        for i, v in enumerate(diag_v):
            out = out + weights[..., length + i : length + i + 1] * rep(v)
        batch = q.shape[0]
        return self.attn.o_proj(out.transpose(1, 2).reshape(batch, q.shape[2], -1))


def embedding_checksum(model) -> float:
    """A cheap fingerprint of the target's input embeddings (sum of |w| over 64 fixed rows, 4 significant digits),
    recorded in a head's config so that a head is not used with another checkpoint of the same shape."""
    weight = model.get_input_embeddings().weight.detach()
    rows = torch.linspace(0, weight.shape[0] - 1, 64).long().to(weight.device)
    return float(f"{float(weight[rows].float().abs().sum()):.4g}")


# ------------------------------------------------------------------------------------------------ files
def is_feature_head(path: str | os.PathLike) -> bool:
    """True when `path` is a directory holding an EAGLE-style head (ours, or the reference layout)."""
    path = Path(path)
    config = path / CONFIG_NAME
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if data.get("optimum_uag_head") == HEAD_TYPE:
        return True
    # the reference layout: a one-layer Llama config next to a state dict with `fc.weight`
    if int(data.get("num_hidden_layers", 0)) != 1 or not any((path / n).is_file() for n in WEIGHT_NAMES):
        return False
    state = _read_state(path, names_only=True)
    return "fc.weight" in state


def _read_state(path: Path, names_only: bool = False):
    st = path / WEIGHT_NAMES[0]
    if st.is_file():
        from safetensors import safe_open
        from safetensors.torch import load_file

        if names_only:
            with safe_open(str(st), framework="pt") as f:
                return set(f.keys())
        return load_file(str(st))
    state = torch.load(path / WEIGHT_NAMES[1], map_location="cpu", weights_only=True)
    return set(state) if names_only else state


def load_feature_head(path: str | os.PathLike, dtype: torch.dtype | None = None) -> FeatureHead:
    """Load a head directory (ours or the reference implementation's layout)."""
    path = Path(path)
    config = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
    head = FeatureHead(config)
    state = _read_state(path)
    if "embed_tokens.weight" in state:
        head.embed_tokens = nn.Embedding(*state["embed_tokens.weight"].shape)
    state = {k: v for k, v in state.items() if not k.startswith("layers.0.input_layernorm")}
    if "d2t" in state:
        state["d2t"] = state["d2t"].long()
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("rotary.") and not (m == "d2t" and head.lm_head is None)]
    if missing or unexpected:
        raise ValueError(f"{path} is not a feature head this version can read: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}")
    head.eval()
    return head.to(dtype) if dtype is not None else head


def save_feature_head(head: FeatureHead, path: str | os.PathLike, dtype: torch.dtype = torch.float16) -> None:
    """Write the head as `config.json` + `model.safetensors` (d2t kept as int64)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in head.state_dict().items()
             if not k.startswith("rotary.")}
    if head.embed_tokens is None:
        state.pop("embed_tokens.weight", None)
    save_file(state, str(path / WEIGHT_NAMES[0]))
    config = dict(head.config, optimum_uag_head=HEAD_TYPE, num_hidden_layers=1)
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
