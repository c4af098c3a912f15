export FLASHGEN_COMMIT=0cfc675
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"
bash benchmarks/raw/next_s44/job.sh compat
if echo "$name" | grep -q H200; then
  bash benchmarks/raw/next_s43/job.sh h200
else
  bash benchmarks/raw/next_s44/job.sh nomask
  bash benchmarks/raw/next_s44/job.sh ckpt
fi
