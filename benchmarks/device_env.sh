# Sourced by a device batch's job.sh (run from the repository root on the GPU machine): $OUT made,
# `stamp MSG` printing seconds since the start, the wheels the machine lacks (.whl/, carried by
# the run: ../shared/device/prepare.sh puts them there) installed into /tmp/site, and PYTHONPATH
# set to them and the checkout (flashgen is not installed there).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
