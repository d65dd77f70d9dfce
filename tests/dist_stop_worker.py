"""Run by tests/test_distributed.py under the DeepSpeed launcher (2 CPU ranks): a sharded target whose stopping
criterion fires on rank 1 only, after its 3rd new token (as max_time or a per-rank criterion can). Every rank
must follow rank 0's decision (else rank 1 stops, rank 0 blocks in its next all-reduce, or the outputs differ).
Then an adaptive draft length that differs per rank (the policy reads wall-clock timings): rank 1's policy never
drafts, rank 0's always does; every rank must verify rank 0's length."""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria

from optimum_uag import assisted_generate, distributed, embedded_models


class StopOnRankOne(StoppingCriteria):
    def __init__(self, prompt_len: int):
        self.prompt_len = prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        stop = distributed.rank() == 1 and input_ids.shape[1] - self.prompt_len >= 3
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool)


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    distributed.init(torch.device("cpu"))
    paths = embedded_models()
    target = AutoModelForCausalLM.from_pretrained(paths["target"], torch_dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(paths["assistant_same_tokenizer"], torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(paths["target"])
    target = distributed.shard(target, torch.float32, "target")
    ids = tok("def add(a, b):", return_tensors="pt").input_ids
    out = assisted_generate(target, draft, ids, max_new_tokens=12, do_sample=False, eos_token_id=None,
                            stopping_criteria=[StopOnRankOne(ids.shape[1])])
    from optimum_uag.engine import policy

    choose = policy.AdaptivePolicy.next
    policy.AdaptivePolicy.next = lambda self: 0 if distributed.rank() == 1 else max(1, choose(self))
    adaptive = assisted_generate(target, draft, ids, max_new_tokens=12, do_sample=False, eos_token_id=None,
                                 draft_policy="adaptive")
    with open(os.path.join(out_dir, f"rank{distributed.rank()}.json"), "w") as f:
        json.dump({"ids": out.sequences[0].tolist(), "prompt_len": ids.shape[1],
                   "adaptive_ids": adaptive.sequences[0].tolist(),
                   "rounds_without_draft": adaptive.metrics.rounds_without_draft}, f)
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[-1])  # the launcher puts --local_rank=N before our arguments
