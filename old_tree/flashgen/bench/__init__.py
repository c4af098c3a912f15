"""Benchmarks: flashgen's kernels next to PyTorch's SDPA backends and FlexAttention.

`harness` holds what every GPU benchmark shares (inputs, the implementations under test, the
float64 check, timing, one row format); `scripts` adds what the GPU scripts in benchmarks/
share on top of it (seeded inputs, the GPU/CPU timer, SDPA baselines, TFLOP/s, their command
line and result files with run metadata); `report` writes rows as a table, CSV, JSON and a plot;
`cli` is `flashgen bench`. Nothing here runs at `import flashgen`.
"""
