"""Which backend fails HF ModernBERT under CUDA graphs (session 53: hf_padded --cudagraphs
stopped at its first call with "1 tensor(s) in the cudagraph pool not tracked as outputs").
One backend per process (cudagraph trees are process-wide): three forward+backward calls, then
three no-grad forwards; prints ok or the error with Inductor's allocation history."""

import sys
import traceback

sys.path.insert(0, ".")
sys.path.insert(0, "benchmarks")
import torch
import torch._inductor.config as icfg
import transformers
from hf_padded import config, padded_mask

import flashgen

icfg.triton.cudagraph_trees_history_recording = True
which, family = sys.argv[1], sys.argv[2]
attn = sys.argv[3] if len(sys.argv) > 3 else "sdpa"
torch.manual_seed(0)
cfg = config(family, 1024, 16, 2, 2048)
auto = (
    transformers.AutoModel
    if family in ("bert", "modernbert")
    else transformers.AutoModelForCausalLM
)
model = auto.from_config(cfg, attn_implementation=attn).cuda().bfloat16().train()
if which == "inductor":
    fn = torch.compile(model, mode="reduce-overhead")
else:
    fn = torch.compile(model, backend=flashgen.backend(cudagraphs=True))
ids = torch.randint(1, 1000, (4, 2048), device="cuda")
mask = padded_mask(4, 2048, "right", "cuda")
x = model.get_input_embeddings()(ids).detach().requires_grad_()
out_of = (
    (lambda o: o.last_hidden_state) if family in ("bert", "modernbert") else (lambda o: o.logits)
)
try:
    for i in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        out = out_of(fn(inputs_embeds=x, attention_mask=mask))
        (g,) = torch.autograd.grad(out.float().square().mean(), x)
        torch.cuda.synchronize()
        print(which, family, "fwd+bwd call", i, "ok", float(g.abs().sum()), flush=True)
    with torch.no_grad():
        for i in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            out = out_of(fn(inputs_embeds=x, attention_mask=mask)).clone()
            torch.cuda.synchronize()
            print(
                which, family, "no-grad call", i, "ok", float(out.float().abs().sum()), flush=True
            )
except Exception:
    print(which, family, "FAILED", flush=True)
    traceback.print_exc(limit=-8)
    sys.exit(1)
