"""Tuning: task types, the Optuna space, studies, the search loop, evaluators (measured and
modelled), benchmarking helpers and the `flashgen tune` command.

Imports everything below it (`core`, `hardware`, `kernels`, `db`, `runtime`); nothing imports it
except the CLI.
"""
