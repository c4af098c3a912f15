"""Run-time choice per shape: implementation (flashgen or an SDPA backend) and tile config,
from the tuning database with one fallback order (`dispatch`), and the SDPA route (`vendor`);
and the `flashgen::attention` ops that apply that choice: their schemas (`library`), the forward
and backward primitives (`primitives`), their autograd (`autograd`) and the composite op that
checks, routes and calls them (`composite`). `flashgen.ops` is the public function above them.

Imports `core`, `hardware`, `kernels` and `db`.
"""
