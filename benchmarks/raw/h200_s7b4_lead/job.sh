# tree: /work/main
# limit: 140
# lead, B4: the GPU test suite of merged main (every gpu-marked test), raw under $OUT.
git log --oneline -1 2>/dev/null || true
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee $OUT/versions.txt
timeout 130 python3 -m pytest -m gpu -n 12 -q --no-header -p no:cacheprovider -rfs tests > $OUT/pytest.txt 2>&1
echo "pytest rc=$?"
tail -n 40 $OUT/pytest.txt
