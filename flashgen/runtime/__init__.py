"""Run-time choice per shape: implementation (flashgen or an SDPA backend) and tile config,
from the tuning database with one fallback order (`dispatch`), and the SDPA route (`vendor`).

Imports `core`, `hardware`, `kernels` and `db`.
"""
