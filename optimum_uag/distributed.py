"""Multi-card: a DeepSpeed tensor-parallel (AutoTP) target with a replicated draft, one process per card.

Every rank runs the same decoding loop on the same inputs with the same seed: the target's forward is sharded
(its all-reduces make the logits identical on every rank), the draft is replicated, so every acceptance
decision, and every sampled token, is the same on all ranks. Only rank 0 reports.
"""
from __future__ import annotations

import glob
import os

import torch


def prepare_env() -> None:
    """Before habana_frameworks is imported, as optimum-habana's examples/text-generation/utils.py (setup_env): a
    multi-card run with HPU graphs needs collectives inside lazy graphs, or it hangs. A value already set is kept."""
    if int(os.environ.get("WORLD_SIZE", "0") or 0) > 0:
        os.environ.setdefault("PT_HPU_ENABLE_LAZY_COLLECTIVES", "true")


def world_size() -> int:
    """WORLD_SIZE as set by the deepspeed launcher, torchrun or gaudi_spawn (1 when not launched)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def backend_for(device: torch.device) -> str:
    return {"hpu": "hccl", "cuda": "nccl"}.get(device.type, "gloo")


def init(device: torch.device) -> None:
    """Start the process group (hccl on Gaudi, nccl on CUDA, gloo on CPU) through DeepSpeed."""
    import deepspeed

    if device.type == "cpu" and os.environ.get("LOCAL_SIZE") is None:
        # deepspeed's CPU all-reduce (shared memory) segfaults without it; its launcher sets it, torchrun does not
        os.environ["LOCAL_SIZE"] = os.environ.get("LOCAL_WORLD_SIZE", str(world_size()))
    deepspeed.init_distributed(dist_backend=backend_for(device))


def shard(model, dtype: torch.dtype, what: str = "model"):
    """Tensor-parallel `model` over all ranks with DeepSpeed AutoTP; returns the sharded module."""
    import deepspeed

    try:
        engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": world_size()}, dtype=dtype,
                                          replace_with_kernel_inject=False)
    except Exception as exc:  # AutoTP refuses some architectures (e.g. GPT-2)
        raise ValueError(f"DeepSpeed AutoTP cannot shard the {what} ({type(model).__name__}): {exc}; "
                         "run it replicated instead") from exc
    return engine.module


# optimum-habana's checkpoint_utils.model_on_meta: the architectures its run_generation.py builds on the meta device
# for a multi-card run (DeepSpeed AutoTP then loads each rank's shard from the checkpoint files)
META_MODEL_TYPES = ("bloom", "llama", "falcon", "mixtral", "qwen2")


def checkpoint_files(path: str) -> list[str]:
    """A local model directory's weight files, as optimum-habana's get_checkpoint_files lists them: transformers'
    `pytorch_model*.bin` if any, else `model*.safetensors` (not, e.g., a `consolidated.safetensors` some repos also
    ship: every rank would read that whole file for nothing); [] when there are none."""
    from pathlib import Path

    files = sorted(str(f.resolve()) for f in Path(path).glob("pytorch_model*.bin"))
    return files or sorted(str(f.resolve()) for f in Path(path).glob("model*.safetensors"))


def load_on_meta(path: str, dtype: torch.dtype, model_kwargs: dict, device: torch.device):
    """Multi-card: the model built on the meta device and sharded by DeepSpeed AutoTP straight from its checkpoint
    files, as optimum-habana's setup_distributed_model does (no rank holds the whole model in host memory: a 70B
    target on 8 cards needs its own shard per rank, not 8 x 140 GB). None where that does not apply (another
    architecture, a Hub id, no weight files): then the caller loads on the CPU and shards."""
    import json
    import tempfile
    from pathlib import Path

    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM

    if world_size() < 2 or not Path(path).is_dir() or not checkpoint_files(path):
        return None
    config_kwargs = {k: v for k, v in model_kwargs.items() if k in ("revision", "token", "trust_remote_code")}
    config = AutoConfig.from_pretrained(path, **config_kwargs)
    if config.model_type not in META_MODEL_TYPES:
        return None
    positions = getattr(config, "max_position_embeddings", 0)
    if config.model_type == "llama" and positions > 8192:
        # as upstream's meta path (MODELS_WITH_POS_EMBEDDING_LIMIT): per-layer RoPE tables of 8192 rows; the Gaudi
        # runner extends them (update_sincos_cache) when a request's cache is wider
        config.max_position_embeddings = 8192
    with deepspeed.OnDevice(dtype=dtype, device="meta"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype,
                                                 trust_remote_code=config_kwargs.get("trust_remote_code", False))
    if not hasattr(model, "update_sincos_cache"):  # transformers' own Llama has no table to cap: its real limit
        model.config.max_position_embeddings = positions
    model = model.eval()
    if (Path(path) / "generation_config.json").is_file():  # what from_pretrained reads (EOS lists, defaults)
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(path)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"type": "ds_model", "checkpoints": checkpoint_files(path), "version": 1.0}, f)
    try:
        engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": world_size()}, dtype=dtype,
                                          replace_with_kernel_inject=False, checkpoint=f.name)
    finally:
        os.remove(f.name)
    module = engine.module
    left = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"{path}: {len(left)} tensors stayed on the meta device after DeepSpeed loaded the "
                         f"checkpoint ({', '.join(left[:3])}, ...): its files do not hold them; load the target on the "
                         "CPU instead (optimum_uag.distributed.shard)")
    return module.to(device)


def stop_agreement():
    """Multi-card: a function that makes rank 0's stopping decision of a round every rank's (EOS is the same on
    every rank, but stop strings, max_time and user criteria are evaluated per rank: wall-clock time differs, and a
    rank that stops while another goes on blocks in the next collective). None when not distributed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None

    def agree(n_new: torch.Tensor, stopped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = torch.stack([n_new.long(), stopped.long()])
        on_host = dist.get_backend() == "gloo"
        buffer = packed.cpu() if on_host else packed
        dist.broadcast(buffer, src=0)
        buffer = buffer.to(n_new.device)
        return buffer[0].to(n_new.dtype), buffer[1].bool()

    return agree


def choice_agreement():
    """Multi-card: a function that makes rank 0's draft length of a round every rank's (the adaptive policy chooses
    from wall-clock timings, which differ per rank; ranks that verify different widths block in the target's first
    all-reduce). None when not distributed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    device = "cpu" if dist.get_backend() == "gloo" else None

    def agree(k: int, like: torch.Tensor) -> int:
        buffer = torch.tensor([k], dtype=torch.long, device=device or like.device)
        dist.broadcast(buffer, src=0)
        return int(buffer.item())

    return agree


def ranks_agree(tensor: torch.Tensor) -> bool:
    """True when every rank holds the same tensor (checked on all ranks)."""
    import torch.distributed as dist

    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, tensor.cpu().tolist())
    return all(g == gathered[0] for g in gathered)


def shutdown() -> None:
    """Leave the process group and remove this rank's DeepSpeed shared-memory buffers from /dev/shm."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    dist.barrier()
    dist.destroy_process_group()
    addr, port = os.environ.get("MASTER_ADDR", "*"), os.environ.get("MASTER_PORT", "*")
    for path in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{addr}_{port}_{rank()}"):
        try:
            os.remove(path)
        except OSError:
            pass
