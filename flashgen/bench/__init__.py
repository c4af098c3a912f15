"""Benchmarks: flashgen's kernels next to PyTorch's SDPA backends and FlexAttention.

`harness` holds what every GPU benchmark shares (inputs, the implementations under test, the
float64 check, timing, one row format); `report` writes rows as a table, CSV, JSON and a plot;
`cli` is `flashgen bench`. Nothing here runs at `import flashgen`.
"""
