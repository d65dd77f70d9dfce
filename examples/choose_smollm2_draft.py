"""Usage: python examples/choose_smollm2_draft.py WORK_DIR same_256x1 same_128x2 smollm2_assistant_cross

Choose the same-tokenizer draft variant: tau and wall-clock speedup on tuning prompts (held-out[8:12], not
the benchmark's measured prompts), greedy, 128 new tokens, K=5."""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from optimum_uag import assisted_generate
from optimum_uag.models import smollm2, chat_prompts
WORK = sys.argv[1]  # the distillation --work_dir; then the variant directory names
path = smollm2(); tok = AutoTokenizer.from_pretrained(path); tok.padding_side = "left"
target = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
prompts = chat_prompts()[8:12]
encs = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, return_tensors="pt", return_dict=True) for p in prompts]
def timeit(fn):
    t0 = time.perf_counter(); r = [fn(e) for e in encs]; return time.perf_counter() - t0, r
target.generate(**encs[0], max_new_tokens=8, do_sample=False)
tb, ref = timeit(lambda e: target.generate(**e, max_new_tokens=128, do_sample=False))
res = {"target_s": tb}
for name in sys.argv[2:]:
    d = AutoModelForCausalLM.from_pretrained(f"{WORK}/{name}", torch_dtype=torch.float32).eval()
    uag = dict(tokenizer=tok, assistant_tokenizer=AutoTokenizer.from_pretrained(f"{WORK}/{name}")) if "cross" in name else {}
    assisted_generate(target, d, encs[0]["input_ids"], encs[0]["attention_mask"], max_new_tokens=8, do_sample=False, **uag)
    t, outs = timeit(lambda e: assisted_generate(target, d, e["input_ids"], e["attention_mask"], max_new_tokens=128, do_sample=False, num_assistant_tokens=5, **uag))
    tau = sum(o.metrics.generated_tokens for o in outs) / sum(o.metrics.row_target_calls for o in outs)
    exact = all(torch.equal(o.sequences, r) for o, r in zip(outs, ref))
    res[name] = {"speedup": round(tb / t, 3), "tau": round(tau, 3), "exact": exact, "params": sum(p.numel() for p in d.parameters())}
    print(name, res[name], flush=True)
json.dump(res, open(f"{WORK}/choose.json", "w"), indent=1)
