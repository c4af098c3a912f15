#!/usr/bin/env bash
# Session 33 B10, run as a plain command on the warm machine right after B9 (tree 9533ef6):
#   . benchmarks/device_env.sh > /dev/null 2>&1
#   timeout 90 python3 examples/backend_speed.py --styles gpt,llama_repeat --seqs 2048
# B2's command again, to see whether its 0.602 ms GPT forward repeats (one reading a variant then).
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 90 python3 examples/backend_speed.py --styles gpt,llama_repeat --seqs 2048 2>&1 | grep -E "replaced|ms" | cut -c1-250
