"""How ONE model runs a block of tokens over its KV cache: chosen per model by capability, behind one interface.

Every runner has `forward(tokens (B, L), start (B,), logits_to_keep) -> float32 logits`: it writes the block at
logical slots start..start+L-1 of each row (rows accept different numbers of tokens per round, so a smaller
`start` than last time is a rollback), plus `shapes` and `calls` counters.

- `static`:  transformers' StaticCache with per-row write slots, explicit positions and 4D masks (the fast,
  fixed-shape path: Llama, Mistral, Qwen, Gemma, ...).
- `dynamic`: the model's own cache (DynamicCache or legacy tuples), a 2D mask with per-row holes for rejected
  tokens, cropped on rollback as transformers' assisted generation does (GPT-2, OPT, BLOOM, GPT-J, ...).
- `per_row`: one model's-own-cache runner per row (batch 1 each, no padding, no holes) for models whose
  positions or masks cannot express holes.
- `stepwise`: per row, one token per forward after the prompt (the model's own generate loop), for models whose
  multi-token forwards over a cache are not what their own generate computes (GIT).
Backends (the Gaudi package) register a plan hook that takes over the models they own.
"""
from .registry import RunnerPlan, plan_for, register_plan_hook, runner_kind, select_runner
from .static import RowStaticCache, StaticCacheRunner, local_config
from .own_cache import OwnCacheRunner, PerRowRunner, StepwiseRunner

__all__ = ["OwnCacheRunner", "PerRowRunner", "RowStaticCache", "RunnerPlan", "StaticCacheRunner", "StepwiseRunner", "local_config",
           "plan_for", "register_plan_hook", "runner_kind", "select_runner"]
