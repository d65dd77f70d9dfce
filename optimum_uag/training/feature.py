"""Train a feature-level draft head (EAGLE-style) for a target model: features on disk, then the head.

extract_features  one teacher-forced target forward per chunk of token ids: the target's last hidden states
                  (after its final norm) and its top-k log-probabilities at every position, in shards on disk
                  (resumable and extendable: a sequence whose features a shard of the folder holds is not
                  extracted again, so a run with more datasets extracts the new sequences alone)
train_feature_head  the head over those shards: KL(target top-k || head) + CE(target argmax) on the draft
                  vocabulary + smooth-L1 on the features, unrolled over several drafting steps (EAGLE-3's
                  training-time test), noise on the input features (EAGLE); a reduced draft vocabulary (FR-Spec:
                  the target's most frequent tokens on the training text) initialised from the target's LM head
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.nn.functional as F

from ..engine.drafters.feature_head import FeatureHead, embedding_checksum, save_feature_head
from ..runners.common import text_config

TOPK = 16


def _progress(done: float, total: float, t0: float, what: str) -> str:
    """'what 37% | 3.1 of 8.0 min | ETA 4.9 min'"""
    frac = min(1.0, done / total) if total else 1.0
    spent = (time.time() - t0) / 60
    eta = spent / frac - spent if frac > 0 else float("nan")
    return f"{what} {frac:4.0%} | {spent:.1f} min | ETA {eta:.1f} min"


def target_features(model, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    feature_layers: list[int] | tuple = ()):
    """(features (B, T, F), logits (B, T, V)) of one teacher-forced forward: the last hidden states after the final
    norm (F = H), preceded by the hidden states of `feature_layers` (fused features, F = (m + 1) H)."""
    out = model(input_ids=ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    return fused_hidden_states(out.hidden_states, feature_layers), out.logits


def _batch_features(model, ids: torch.Tensor, mask: torch.Tensor, feature_layers):
    """target_features of a right-padded batch; where the model cannot take the padded batch in one forward
    (transformers' tiny DeepSeek-V2 and GLM-4-MoE-Lite fail on an attention mask with padding), one row at a time
    without padding: the same features at every real position (causal attention)."""
    from ..registry import model_state

    state = model_state(model)
    if not state.get("features_row_by_row"):
        try:
            return target_features(model, ids, mask, feature_layers)
        except Exception:  # noqa: BLE001 - the model's own forward; retried row by row, whose error is the real one
            if ids.shape[0] == 1 and bool(mask.all()):
                raise
        state["features_row_by_row"] = True  # (every later batch: rows at once, not a failed forward first)
    outs = [target_features(model, ids[b : b + 1, : int(mask[b].sum())], None, feature_layers)
            for b in range(ids.shape[0])]
    width = ids.shape[1]
    pad = lambda x: torch.nn.functional.pad(x, (0, 0, 0, width - x.shape[1]))  # noqa: E731
    return torch.cat([pad(h) for h, _ in outs]), torch.cat([pad(lg) for _, lg in outs])


def fused_hidden_states(states, feature_layers) -> torch.Tensor:
    """cat(hidden_states[l] for l in feature_layers, hidden_states[-1]) along the last dimension."""
    if not feature_layers:
        return states[-1]
    if max(feature_layers) >= len(states) - 1 or min(feature_layers) < 0:
        raise ValueError(f"feature layers {list(feature_layers)} are outside the target's {len(states) - 1} layers")
    return torch.cat([states[i] for i in feature_layers] + [states[-1]], dim=-1)


def eagle3_layers(num_layers: int) -> list[int]:
    """EAGLE-3's low / middle / high layers (the inputs of layers 2, L // 2 and L - 3); the final norm's output
    comes after them."""
    return sorted({min(2, num_layers - 1), num_layers // 2, max(0, num_layers - 3)})


@torch.no_grad()
def extract_features(model, sequences: list[list[int]], out_dir: str | Path, *, batch_size: int = 8,
                     shard_size: int = 256, max_minutes: float | None = None, topk: int = TOPK,
                     feature_layers: list[int] | tuple = (), log: Callable[[str], None] = print) -> dict:
    """Teacher-forced target features + top-k log-probabilities for every sequence, written in shards.

    Sequences whose features a shard of the folder already holds (same ids and loss mask: `sequence_key`, listed per
    shard in the folder's index.json) are skipped, so a run resumes, and a run over more datasets in any order
    extracts only the new ones, in shards numbered after the folder's. A folder of fused features serves a head
    without them too (the final norm's output is their last part): asked for none, it goes on with the folder's
    layers; a folder of other fused layers is refused. Returns {'sequences', 'already_extracted', 'tokens_this_run',
    'shards', 'minutes', 'feature_layers'}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta, layers = out_dir / "features.json", [int(i) for i in feature_layers]
    stored = json.loads(meta.read_text())["feature_layers"] if meta.exists() else None
    if stored and not layers:
        layers = stored
    if stored is not None and stored != layers:
        raise ValueError(f"{out_dir} holds features of layers {stored}, not {layers}: use another --work_dir")
    if not meta.exists() and any(out_dir.glob("features-*.pt")) and layers:
        raise ValueError(f"{out_dir} holds final-norm features only, not layers {layers}: use another --work_dir")
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    stored_dtype = json.loads(meta.read_text()).get("dtype", "float32") if meta.exists() else dtype
    if stored_dtype != dtype and shard_index(out_dir):
        raise ValueError(f"{out_dir} holds features written in {stored_dtype}, not {dtype}: use another --work_dir")
    meta.write_text(json.dumps({"feature_layers": layers, "dtype": dtype}) + "\n")
    device = next(model.parameters()).device
    t0 = time.time()
    index = shard_index(out_dir)
    held = {k for keys in index.values() for k in keys}
    todo = [x for x in sequences if sequence_key(x) not in held]
    total = len(todo)
    done_tokens = 0
    first = 1 + max((int(p.stem.split("-")[1]) for p in out_dir.glob("features-*.pt")), default=-1)
    if len(todo) < len(sequences):
        log(f"[features] {len(sequences) - len(todo)} of {len(sequences)} sequences already in {out_dir}")
    for shard_no, lo in enumerate(range(0, total, shard_size), start=first):
        path = out_dir / f"features-{shard_no:05d}.pt"
        if max_minutes is not None and time.time() - t0 > max_minutes * 60:
            log(f"[features] time budget reached after {lo} of {total} sequences")
            break
        items = [as_sequence(x) for x in todo[lo : lo + shard_size]]
        rows = [x["ids"] for x in items]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        records = [None] * len(rows)
        for b in range(0, len(order), batch_size):
            idx = order[b : b + batch_size]
            longest = max(len(rows[i]) for i in idx)
            ids = torch.zeros(len(idx), longest, dtype=torch.long)
            mask = torch.zeros(len(idx), longest, dtype=torch.long)
            for r, i in enumerate(idx):  # right padding: positions stay 0..n-1 for every row
                ids[r, : len(rows[i])] = torch.tensor(rows[i])
                mask[r, : len(rows[i])] = 1
            hidden, logits = _batch_features(model, ids.to(device), mask.to(device), layers)
            logp = torch.log_softmax(logits.float(), -1)
            values, indices = logp.topk(topk, -1)
            for r, i in enumerate(idx):
                n = len(rows[i])
                records[i] = {"ids": torch.tensor(rows[i], dtype=torch.int32),
                              "features": hidden[r, :n].to(torch.float16).cpu(),
                              "top_v": values[r, :n].to(torch.float16).cpu(),
                              "top_i": indices[r, :n].to(torch.int32).cpu(),
                              "loss_mask": torch.tensor(items[i]["loss_mask"], dtype=torch.bool),
                              "group": items[i]["group"]}
                done_tokens += n
        torch.save(records, path)
        index[path.name] = [sequence_key(r) for r in records]
        _write_index(out_dir, index)
        log(_progress(lo + len(rows), total, t0, f"[features] shard {shard_no} ({lo + len(rows)}/{total} sequences)"))
    shards = sorted(out_dir.glob("features-*.pt"))
    return {"sequences": len(sequences), "already_extracted": len(sequences) - total, "tokens_this_run": done_tokens,
            "shards": len(shards), "minutes": round((time.time() - t0) / 60, 2), "feature_layers": layers,
            "dtype": dtype}


def stored_layers(data_dir: str | Path) -> list[int]:
    """The fused layers a features folder was written with ([]: the final norm's output alone, or a folder of an
    earlier version)."""
    meta = Path(data_dir) / "features.json"
    return [int(i) for i in json.loads(meta.read_text())["feature_layers"]] if meta.exists() else []


def as_sequence(item) -> dict:
    """{'ids', 'loss_mask' (True where a token is trained on: the assistant's answers), 'group' (the split key: a
    conversation's first user turn)}; a bare id list trains on every token and is its own group."""
    if isinstance(item, dict):
        ids = list(item["ids"])
        mask = list(item.get("loss_mask") or [True] * len(ids))
        return {"ids": ids, "loss_mask": mask, "group": str(item.get("group", ids[:32]))}
    ids = list(item)
    return {"ids": ids, "loss_mask": [True] * len(ids), "group": str(ids[:32])}


def sequence_key(item) -> str:
    """A sequence's identity in a features folder: a hash of its token ids and loss mask (a dict as `as_sequence`
    takes, a shard's record, or a bare id list)."""
    ids = item["ids"] if isinstance(item, dict) else item
    mask = item.get("loss_mask") if isinstance(item, dict) else None
    ids = torch.as_tensor(ids).to(torch.int64)
    mask = torch.ones(len(ids), dtype=torch.bool) if mask is None else torch.as_tensor(mask).to(torch.bool)
    return hashlib.sha1(ids.numpy().tobytes() + mask.numpy().tobytes()).hexdigest()[:24]


def shard_index(data_dir: str | Path) -> dict[str, list[str]]:
    """{shard file name: its sequences' keys}, from the folder's index.json; shards it does not list (written by an
    earlier version, or linked in) are read once and added."""
    data_dir = Path(data_dir)
    path = data_dir / "index.json"
    index = json.loads(path.read_text()) if path.exists() else {}
    index = {name: keys for name, keys in index.items() if (data_dir / name).exists()}
    missing = [p for p in sorted(data_dir.glob("features-*.pt")) if p.name not in index]
    for shard in missing:
        index[shard.name] = [sequence_key(r) for r in torch.load(shard, weights_only=False)]
    if missing or not path.exists():
        _write_index(data_dir, index)
    return index


def _write_index(data_dir: Path, index: dict) -> None:
    tmp = data_dir / "index.json.tmp"
    tmp.write_text(json.dumps(index) + "\n")
    tmp.replace(data_dir / "index.json")


def load_shards(data_dir: str | Path) -> list[dict]:
    records = []
    for path in sorted(Path(data_dir).glob("features-*.pt")):
        for rec in torch.load(path, weights_only=False):  # shards of earlier versions: every token, own group
            rec.setdefault("loss_mask", torch.ones(len(rec["ids"]), dtype=torch.bool))
            rec.setdefault("group", str(rec["ids"][:32].tolist()))
            records.append(rec)
    if not records:
        raise FileNotFoundError(f"no features-*.pt shards in {data_dir}; run extract_features first")
    return records


def frequent_tokens(records: Iterable[dict], size: int, vocab_size: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The `size` target ids seen most often (input tokens + the target's top-1 predictions), sorted, with the
    ids in `always` (EOS, ...) included."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for rec in records:
        counts.index_add_(0, rec["ids"].long(), torch.ones(len(rec["ids"]), dtype=torch.long))
        top1 = rec["top_i"][:, 0].long()
        counts.index_add_(0, top1, torch.ones(len(top1), dtype=torch.long))
    for t in always:
        counts[int(t)] = counts.max() + 1
    size = min(size, vocab_size)
    return counts.topk(size).indices.sort().values


def _setting(cfg, name: str):
    """A config value, or None where the config has none (or keeps it per layer: Gemma 4 raises on `head_dim`)."""
    try:
        return getattr(cfg, name, None)
    except Exception:  # noqa: BLE001 - transformers' per-layer attribute errors are not AttributeErrors
        return None


def feature_width(model) -> int:
    """Width of the target's features (its last hidden states): config.hidden_size, except where the model projects
    its output first (OPT's project_out to word_embed_proj_dim): measured once by a 2-token forward, kept per model."""
    from ..registry import model_state

    state = model_state(model)
    if "feature_width" not in state:
        width = text_config(model).hidden_size
        try:
            device = next(model.parameters()).device
            with torch.no_grad():
                out = model(input_ids=torch.tensor([[1, 2]], device=device), output_hidden_states=True, use_cache=False)
            width = int(out.hidden_states[-1].shape[-1])
        except Exception:  # noqa: BLE001 - a model that cannot run a bare forward here: its config's width
            pass
        state["feature_width"] = width
    return state["feature_width"]


def _copies_target_rows(model, head) -> bool:
    """Whether the head's LM head starts as the target's rows (init_head): the target's output layer reads the
    head's width. Else (ELECTRA: it reads a projection) the head's own LM head is learned, never frozen."""
    reads = getattr(model.get_output_embeddings(), "in_features", None)
    return head.lm_head is not None and (reads is None or reads == head.config["hidden_size"])


def head_config(model, draft_vocab_size: int | None, target_name: str) -> dict:
    """A one-layer head config in EAGLE's layout, shaped like the target's layers where the target has attention
    (else heads of 64, or one head: Mamba, RWKV), reading the target's token embeddings at their own width."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    hidden = feature_width(model)
    heads, head_dim = _setting(cfg, "num_attention_heads"), _setting(cfg, "head_dim")
    if hidden != cfg.hidden_size:  # (projected features: heads of the projected width)
        heads, head_dim = None, None
    if not isinstance(head_dim, int) or head_dim < 1:
        head_dim = None
    if not isinstance(heads, int) or heads < 1 or (head_dim is None and hidden % heads):
        heads, head_dim = (hidden // 64, 64) if hidden % 64 == 0 and hidden >= 64 else (1, hidden)
    head_dim = head_dim or hidden // heads
    kv_heads = _setting(cfg, "num_key_value_heads")
    if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
        kv_heads = heads
    intermediate = _setting(cfg, "intermediate_size")
    # RoPE: transformers 4's rope_theta / rope_scaling, or transformers 5's rope_parameters (both, in one dict)
    parameters = _setting(cfg, "rope_parameters")
    parameters = parameters if isinstance(parameters, dict) else {}
    theta = _setting(cfg, "rope_theta") or parameters.get("rope_theta") or 10000.0
    scaling = _setting(cfg, "rope_scaling")
    if not isinstance(scaling, dict) and parameters.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in parameters.items() if k != "rope_theta"}
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    eps = _setting(cfg, "rms_norm_eps") or _setting(cfg, "layer_norm_eps") or _setting(cfg, "layer_norm_epsilon")
    out = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": True, "num_hidden_layers": 1,
        "hidden_size": hidden, "intermediate_size": intermediate if isinstance(intermediate, int) else 4 * hidden,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "rms_norm_eps": float(eps) if isinstance(eps, (int, float)) else 1e-6,
        "rope_theta": theta, "rope_scaling": scaling,
        "max_position_embeddings": _setting(cfg, "max_position_embeddings") or 4096, "vocab_size": cfg.vocab_size,
        "hidden_act": "silu", "target": target_signature(model, target_name),
    }
    width = model.get_input_embeddings().weight.shape[-1]
    if width != hidden:  # (ELECTRA, RemBERT: embeddings narrower than the hidden states)
        out["embedding_size"] = int(width)
    reads = getattr(model.get_output_embeddings(), "in_features", hidden)
    if reads != hidden and not draft_vocab_size:
        # the target's LM head reads something else than its last hidden states (ELECTRA: a projection to its
        # embedding width first): the head gets an LM head of its own, over the whole vocabulary
        draft_vocab_size = cfg.vocab_size
    if draft_vocab_size:
        out["draft_vocab_size"] = int(draft_vocab_size)
    return out


def target_signature(model, name: str) -> dict:
    """What identifies the target a head was trained on: its name, shape and a checksum of its embedding table."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return {"name_or_path": name, "model_type": cfg.model_type, "hidden_size": cfg.hidden_size,
            "vocab_size": cfg.vocab_size, "num_hidden_layers": cfg.num_hidden_layers,
            "embedding_checksum": embedding_checksum(model)}


def init_head(model, config: dict, vocab_ids: torch.Tensor | None) -> FeatureHead:
    """A head whose first pass copies the feature (fc = [0 | I]), whose layer starts as the target's last layer,
    and whose LM head rows are the target's (for the draft vocabulary)."""
    head = FeatureHead(config)
    hidden, embedding = config["hidden_size"], head.embedding_size
    with torch.no_grad():
        head.fc.weight.zero_()
        head.fc.weight[:, embedding:] = torch.eye(hidden)
        head.fc.weight[:, :embedding].normal_(0, 0.01)
        head.fc.bias.zero_()
        last = _last_layer(model)
        if last is not None:
            own = head.layers[0].state_dict()
            theirs = {k: v for k, v in last.state_dict().items() if k in own and own[k].shape == v.shape}
            head.layers[0].load_state_dict(theirs, strict=False)
            # the residual branches start silent (the last layer's outputs are sized for the target's un-normed
            # residual stream, far larger than the normed features the head reads): h = fc(...) = f_t at first
            head.attn.o_proj.weight.normal_(0, 1e-3)
            head.layers[0].mlp.down_proj.weight.normal_(0, 1e-3)
        if head.lm_head is not None:
            if vocab_ids is None:  # (an LM head of its own over the whole vocabulary)
                vocab_ids = torch.arange(head.lm_head.out_features)
            weight = model.get_output_embeddings().weight.detach().float().cpu()
            if weight.shape[-1] == hidden:
                head.lm_head.weight.copy_(weight[vocab_ids])
            else:  # the target's LM head reads another width (head_config): learned from scratch
                head.lm_head.weight.normal_(0, 0.02)
            head.d2t.copy_(vocab_ids - torch.arange(len(vocab_ids)))
    return head


def _last_layer(model):
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    return layers[-1] if layers is not None and len(layers) else None


def _batch(records, picks, length, steps, device, width: int | None = None):
    """Sequences (whole, or a `length`-pair window of a longer one: picks are (record, start)) right-padded into
    training tensors; `keep` (B, length + steps - 1) marks the predicted tokens that count: inside the sequence
    and in its loss mask (the answers). `width`: the features' last `width` columns (a head without fused layers
    reads the final norm's part of fused shards)."""
    pairs = max(1, max(min(length, len(records[r]["ids"]) - start - steps) for r, start in picks))
    span = pairs + steps
    stored = records[picks[0][0]]["features"].shape[-1]
    hidden = width or stored
    if hidden > stored:
        raise ValueError(f"the head reads {hidden} features, the shards hold {stored}: extract them with the head's "
                         f"feature layers (--feature_layers)")
    batch = len(picks)
    feats = torch.zeros(batch, span, hidden)
    toks = torch.zeros(batch, span - 1, dtype=torch.long)
    tv = torch.full((batch, span - 1, records[picks[0][0]]["top_v"].shape[-1]), -1e4)
    ti = torch.zeros(batch, span - 1, tv.shape[-1], dtype=torch.long)
    keep = torch.zeros(batch, span - 1, dtype=torch.bool)
    for b, (r, start) in enumerate(picks):
        rec = records[r]
        n = min(len(rec["ids"]) - start, span)
        feats[b, :n] = rec["features"][start : start + n, stored - hidden :].float()
        toks[b, : n - 1] = rec["ids"][start + 1 : start + n].long()
        tv[b, : n - 1] = rec["top_v"][start + 1 : start + n].float()
        ti[b, : n - 1] = rec["top_i"][start + 1 : start + n].long()
        # top_v / top_i at window index j predict the token at start + j + 2
        keep[b, : max(0, n - 2)] = rec["loss_mask"][start + 2 : start + n]
    return feats.to(device), toks.to(device), tv.to(device), ti.to(device), keep.to(device)


def split_by_group(records: list[dict], holdout: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held out): whole groups (all answers to one prompt) go to one side."""
    groups = sorted({r["group"] for r in records})
    random.Random(seed).shuffle(groups)
    held_groups = set(groups[: max(1, int(round(len(groups) * holdout)))])
    held = [r for r in records if r["group"] in held_groups]
    return [r for r in records if r["group"] not in held_groups], held


def train_feature_head(model, data_dir: str | Path, output_dir: str | Path, *, target_name: str,
                       draft_vocab_size: int | None = 8192, minutes: float = 30.0, steps: int = 3,
                       window: int = 384, batch_size: int = 8, lr: float = 1e-3, noise: float = 0.05,
                       reg_weight: float = 1.0, ce_weight: float = 0.2, seed: int = 0, eos_token_ids=(),
                       log: Callable[[str], None] = print, holdout: float = 0.05,
                       freeze_lm_head: bool = True, start_from: str | Path | None = None,
                       eval_dir: str | Path | None = None, feature_layers: list[int] | tuple = (),
                       sequences: Iterable | None = None, bf16: bool = False) -> dict:
    """Train a head on the shards in data_dir within `minutes`; save it (fp16) to output_dir; return the log.

    Whole sequences (a random `window`-pair span of longer ones), drawn uniformly (every conversation counts the
    same, however short), the loss on the tokens of each sequence's loss mask (the answers); the held-out split is
    by group (prompt); the LM head's rows are the target's, frozen unless freeze_lm_head=False. With `sequences`
    (what extract_features was given), the folder's other sequences (of datasets a run no longer names) are left
    out. bf16: the head's forward and backward autocast to bfloat16 (float32 weights, gradients and optimizer; the
    held-out evaluation in float32)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    records = [r for r in load_shards(data_dir) if len(r["ids"]) >= steps + 3]
    ignored = 0
    if sequences is not None:
        wanted = {sequence_key(x) for x in sequences}
        kept = [r for r in records if sequence_key(r) in wanted]
        ignored, records = len(records) - len(kept), kept
        if ignored:
            log(f"[train] {ignored} sequences of {data_dir} are not in this run's datasets: left out")
    if eval_dir is not None:  # a held-out set of its own (other prompts): train on every training sequence
        held = [r for r in load_shards(eval_dir) if len(r["ids"]) >= steps + 3]
        groups = {r["group"] for r in held}
        records = [r for r in records if r["group"] not in groups]
    else:
        records, held = split_by_group(records, holdout, seed)
    if len(records) < 4 or not held:
        raise ValueError(f"too few sequences in {data_dir} to train and hold out ({len(records)} + {len(held)})")
    vocab_size = int(model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config")
                     else model.config.vocab_size)
    if start_from is not None:  # continue from a head (its draft vocabulary and weights)
        from ..engine.drafters.feature import check_head_matches
        from ..engine.drafters.feature_head import load_feature_head

        head = load_feature_head(start_from, dtype=torch.float32)
        check_head_matches(head, model)
        vocab_ids = head.draft_ids()
        head.config["target"] = target_signature(model, target_name)
    else:
        vocab_ids = frequent_tokens(records, draft_vocab_size, vocab_size, eos_token_ids) if draft_vocab_size else None
        config = head_config(model, len(vocab_ids) if vocab_ids is not None else None, target_name)
        head = init_head(model, config, vocab_ids)
    if feature_layers and list(feature_layers) != head.feature_layers:
        head.add_fusion(list(feature_layers))  # starts as the same function: fuse = [0 ... 0 | I]
    for folder in [data_dir] + ([eval_dir] if eval_dir is not None else []):
        stored = stored_layers(folder)
        if head.feature_layers and head.feature_layers != stored:  # (a plain head reads the last part of any)
            raise ValueError(f"the head fuses layers {head.feature_layers}, the features in {folder} are of layers "
                             f"{stored or 'none (the final norm only)'}: extract them with --feature_layers "
                             f"{','.join(map(str, head.feature_layers))} into another --work_dir")
    own_rows = _copies_target_rows(model, head)
    if head.lm_head is not None and freeze_lm_head and own_rows:
        head.lm_head.weight.requires_grad_(False)
    head.train()
    embed = model.get_input_embeddings()
    t2d = None
    if vocab_ids is not None:
        t2d = torch.full((vocab_size,), -1, dtype=torch.long)
        t2d[vocab_ids] = torch.arange(len(vocab_ids))
    width = head.feature_size
    scale = feature_scale(records, head.config["hidden_size"])  # the smooth-L1 regression on features measured in units of their RMS
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    t0 = time.time()
    budget = minutes * 60
    step, history, order = 0, [], []
    while time.time() - t0 < budget:
        frac = (time.time() - t0) / budget
        for group in opt.param_groups:  # warm-up, then cosine to 10%
            group["lr"] = lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        if len(order) < batch_size:  # epochs over the sequences, each drawn once per epoch
            more = list(range(len(records)))
            rng.shuffle(more)
            order += more
        picks = []
        for r in order[:batch_size]:
            n = len(records[r]["ids"])
            picks.append((r, rng.randrange(0, n - window - steps) if n > window + steps else 0))
        del order[:batch_size]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, stats = _loss(head, embed, t2d, _batch(records, picks, window, steps, "cpu", width), steps,
                                noise * scale, reg_weight, ce_weight, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            history.append({"step": step, "minutes": round((time.time() - t0) / 60, 2), **stats})
            log(_progress(time.time() - t0, budget, t0, f"[train] step {step} loss {stats['loss']:.3f} "
                          f"top1 {stats['top1_step1']:.2f}/{stats['top1_last']:.2f}"))
    head.eval()
    evaluation = evaluate_head(head, embed, t2d, held, window, steps, width=width)
    save_feature_head(head, output_dir)
    result = {"steps": step, "minutes": round((time.time() - t0) / 60, 2), "train_sequences": len(records),
              "folder_sequences_left_out": ignored,
              "heldout_sequences": len(held),
              "heldout_split": "separate prompts (--eval_dataset)" if eval_dir is not None else "by prompt (group)",
              "init_head": str(start_from) if start_from is not None else None,
              "draft_vocab_size": len(vocab_ids) if vocab_ids is not None else None,
              "unroll_steps": steps, "window": window, "batch_size": batch_size, "lr": lr, "noise": noise,
              "precision": "bf16 autocast" if bf16 else "float32",
              "feature_rms": scale, "feature_layers": head.feature_layers or None, "lm_head": "frozen (the target's rows)" if freeze_lm_head and own_rows else "trained",
              "loss_on": "each sequence's loss mask (conversations: the assistant's answers)",
              "heldout": evaluation, "history": history[-20:]}
    Path(output_dir, "training_log.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    log(f"[train] done: {step} steps; held-out answer tokens: first-token agreement {evaluation['top1'][0]}, "
        f"per step {evaluation['top1']}, simulated chain tau {evaluation['chain_tau']}, "
        f"top-{evaluation['tree_top_k']} tree tau (upper bound) {evaluation['tree_tau']}")
    return result


def feature_scale(records: list[dict], hidden: int, n: int = 64) -> float:
    """RMS of the target's final-norm features (the last `hidden` columns) over the first n sequences."""
    sample = torch.cat([r["features"][:, -hidden:].float() for r in records[:n]])
    return float(sample.pow(2).mean().sqrt())


def _loss(head, embed, t2d, batch, steps, noise, reg_weight, ce_weight, scale: float = 1.0):
    feats, toks, top_v, top_i, keep_all = batch  # feats: f_start .. f_{start+length+steps-1}
    with torch.no_grad():
        embeds = embed(toks).float()
    length = feats.shape[1] - steps
    outs = head.unrolled(feats[:, :length], embeds, steps, noise=noise)
    total, stats = 0.0, {}
    for s, h in enumerate(outs):
        # h[:, t] guesses f_{t+s+1} (the feature of window position t+s+1) and predicts x_{t+s+2}
        kept = keep_all[:, s : s + length]
        keep = kept.float()
        count = keep.sum().clamp_min(1.0)
        mean = lambda x: (x * keep).sum() / count  # noqa: E731 - over the kept (answer) positions
        # the LM head (most of a step's work) on the kept positions alone: prompts, turns and padding are skipped
        tv, ti = top_v[:, s : s + length][kept], top_i[:, s : s + length][kept]
        logits = head.logits(h[kept]).float()
        logq = torch.log_softmax(logits, -1)
        if t2d is not None:
            rows = t2d[ti]  # -1: outside the draft vocabulary (its mass is lost to the head)
            inside = rows >= 0
            lq = logq.gather(-1, rows.clamp_min(0)).masked_fill(~inside, 0.0)
        else:
            inside = torch.ones_like(ti, dtype=torch.bool)
            lq = logq.gather(-1, ti)
        p = tv.exp() * inside
        n_kept = max(len(ti), 1)
        kl = -(p * lq).sum() / n_kept
        ce = -(lq[..., 0] * inside[..., 0]).sum() / n_kept
        weight = 0.8 ** s
        total = total + weight * (kl + ce_weight * ce)
        truth = feats[:, s + 1 : s + 1 + length, -h.shape[-1]:]  # the final norm's part of fused features
        reg = F.smooth_l1_loss(h / scale, truth / scale, reduction="none").mean(-1)
        total = total + weight * reg_weight * mean(reg)
        with torch.no_grad():
            pred = logits.argmax(-1)
            pred = pred if t2d is None else (pred + head.d2t[pred])
            agree = float((pred == ti[..., 0]).float().sum()) / n_kept
        if s == 0:
            stats["top1_step1"] = agree
        stats["top1_last"] = agree
    stats["loss"] = float(total.detach())
    return total, stats


@torch.no_grad()
def evaluate_head(head, embed, t2d, records, window, steps, tree_top_k: int = 4, width: int | None = None,
                  first_step: list | None = None) -> dict:
    """On held-out sequences, at the answer positions (loss mask): the head's agreement with the target's argmax
    per drafting step (teacher-forced tokens, the head's own features after step 1, as drafting sees them), the
    simulated chain acceptance length tau = 1 + E[consecutive agreeing steps], and the same with "the target's
    token is in the head's top-k" (what a full top-k tree of that depth could accept: an upper bound)."""
    agree, counts = torch.zeros(steps), 0.0
    chain, tree, positions = 0.0, 0.0, 0.0
    for rec in records:
        feats, toks, _, ti, keep_all = _batch([rec], [(0, 0)], max(window, len(rec["ids"])), steps, "cpu",
                                              width or head.feature_size)
        length = feats.shape[1] - steps
        outs = head.unrolled(feats[:, :length], embed(toks).float(), steps)
        ok_top1, ok_topk = [], []
        for s, h in enumerate(outs):
            logits = head.logits(h)
            top = logits.topk(tree_top_k, -1).indices
            top = top if t2d is None else top + head.d2t[top]
            want = ti[:, s : s + length, 0]
            ok_top1.append(top[..., 0] == want)
            ok_topk.append((top == want[..., None]).any(-1))
        keep = keep_all[:, :length]  # positions whose first drafted token is an answer token
        if first_step is not None:  # (whether the first drafted token is right, per answer position: paired tests)
            first_step.append(ok_top1[0][keep])
        for s in range(steps):
            agree[s] += float((ok_top1[s] & keep).sum())
        counts += float(keep.sum())
        run1 = torch.stack(ok_top1).long().cumprod(0).sum(0)  # consecutive agreeing steps from each position
        runk = torch.stack(ok_topk).long().cumprod(0).sum(0)
        chain += float(run1[keep].sum())
        tree += float(runk[keep].sum())
        positions += float(keep.sum())
    n = max(positions, 1.0)
    return {"top1": [round(float(a) / max(counts, 1.0), 3) for a in agree], "answer_positions": int(positions),
            "sequences": len(records), "chain_tau": round(1 + chain / n, 3), "tree_top_k": tree_top_k,
            "tree_tau": round(1 + tree / n, 3)}
