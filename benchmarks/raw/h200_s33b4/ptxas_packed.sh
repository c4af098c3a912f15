#!/usr/bin/env bash
# Session 33 B4's static side (CPU): what Triton 3.6's ptxas makes of one tanh / packed tanh in
# f32, f16x2 and bf16x2 for sm_90a (PTX by hand, cuobjdump's SASS, MUFU lines). Needs Triton 3.6's
# bundled tools: pip install --no-deps --target /tmp/t36 triton==3.6.0. Output: ptxas_packed.txt.
set -eu
BIN=${BIN:-/tmp/t36/triton/backends/nvidia/bin}
D=$(mktemp -d); cd "$D"
for v in f32 f16x2 bf16x2; do
  case $v in
    f32) body='.reg .f32 a<4>; ld.global.f32 a0,[p]; tanh.approx.f32 a1,a0; ld.global.f32 a2,[p+4]; tanh.approx.f32 a3,a2; st.global.f32 [p],a1; st.global.f32 [p+4],a3;';;
    f16x2) body='.reg .b32 a<2>; ld.global.b32 a0,[p]; tanh.approx.f16x2 a1,a0; st.global.b32 [p],a1;';;
    bf16x2) body='.reg .b32 a<2>; ld.global.b32 a0,[p]; tanh.approx.bf16x2 a1,a0; st.global.b32 [p],a1;';;
  esac
  printf '.version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k(.param .u64 pp) { .reg .b64 p; ld.param.u64 p,[pp]; %s ret; }\n' "$body" > $v.ptx
  "$BIN/ptxas" -arch=sm_90a $v.ptx -o $v.cubin
  echo "== $v"; "$BIN/cuobjdump" -sass $v.cubin | grep -E "MUFU|PRMT" | sed 's#/\* 0x[0-9a-f]* \*/##'
done
