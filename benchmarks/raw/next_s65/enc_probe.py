"""Why nn.TransformerEncoder inference compiled nothing (or kept its fused layers) under the
device's torch in session 65's first run of tests/compile/test_encoder_layer.py: Dynamo's own
explain (graphs, breaks and their reasons) and, per graph, the pass's sites and whether the
fused op is in it, on the GPU and on the CPU, dynamic and static."""

import sys

import torch

from flashgen.compile.backend import backend
from flashgen.compile.patterns import attention_pass

FUSED = torch._transformer_encoder_layer_fwd


def encoder(device, norm_first=False):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device).eval()


def probe(device, dynamic, norm_first):
    enc = encoder(device, norm_first)
    x = torch.randn(2, 5, 64, device=device)
    print(f"== {device} dynamic={dynamic} norm_first={norm_first} torch {torch.__version__}")
    torch._dynamo.reset()
    with torch.no_grad():
        ex = torch._dynamo.explain(enc)(x)
    print(f"explain: graphs {ex.graph_count} breaks {ex.graph_break_count}")
    for b in ex.break_reasons[:4]:
        print("  break:", str(b.reason)[:300])
    seen = []
    inner = backend(fallback="aot_eager")

    def spy(gm, example_inputs):
        sites = attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
        fused = sum(n.target is FUSED for n in gm.graph.nodes)
        ops = sorted({str(n.target)[:40] for n in gm.graph.nodes if n.op == "call_function"})
        seen.append((len(sites), fused))
        print(f"  graph: sites {[(s.replaced, s.reason[:120]) for s in sites]} fused {fused}")
        print(f"   ops: {ops[:30]}")
        return inner(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(enc, backend=spy, dynamic=dynamic)
    with torch.no_grad():
        err = (compiled(x) - enc(x)).abs().max().item()
    print(f"graphs seen {seen} err {err:.2e}")


if __name__ == "__main__":
    devices = sys.argv[1:] or (["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"])
    for device in devices:
        for dynamic, norm_first in ((True, False), (False, False), (True, True)):
            try:
                probe(device, dynamic, norm_first)
            except Exception as e:  # noqa: BLE001 - a probe: report and go on
                print(f"  {type(e).__name__}: {str(e)[:300]}")
