"""The hardware model: device limits and known GPUs (`sram`), the shared-memory and register
model (`sram`), tile candidates and defaults (`tiles`), the analytic cost model (`costmodel`).

Imports only `flashgen.core`.
"""
