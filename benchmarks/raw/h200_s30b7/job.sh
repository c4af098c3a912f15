#!/usr/bin/env bash
# Session 30 B7 (issue 16), written after the run: three command lines run one after another on
# the warm machine after B6 (tree d337103 plus B6's cut, `tuning_db/hopper/nvidia-h200.json` as
# shipped; "noL" = that file with every record's late_wait removed, passed as
# FLASHGEN_HOPPER_CONFIGS). Raw: softcap_noL.txt / fwd_variants.json, alibi_{L,noL}.*, wm_{L,noL}.*
. benchmarks/device_env.sh > /dev/null 2>&1
# 1. late_wait off against the shipped records on the probe grid's softcap rows (cap 30)
mkdir -p $OUT/w; timeout 110 python3 benchmarks/fwd_variants.py --out $OUT/w --grid probe --softcap 30 --only-softcap --budget 80 --rounds 3 --rep 30 --check-dtypes bfloat16 --vary noL=late_wait:0@128 > $OUT/w/softcap_noL.txt 2>&1
# 2. and 3. ALiBi, then a causal 1024 window and a boolean key-padding mask, with and without
python3 -c "
import json; d=json.load(open('tuning_db/hopper/nvidia-h200.json'))
for r in d['records']: r['config'].pop('late_wait', None)
json.dump(d, open('/tmp/noL.json','w'))"
for V in L noL; do if [ $V = noL ]; then export FLASHGEN_HOPPER_CONFIGS=/tmp/noL.json; fi; timeout 50 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 30 --only alibi_full,alibi_causal --shape 4,16,4,4096,128 --out $OUT/alibi_$V.csv > $OUT/alibi_$V.txt 2>&1; done
unset FLASHGEN_HOPPER_CONFIGS
for V in L noL; do if [ $V = noL ]; then export FLASHGEN_HOPPER_CONFIGS=/tmp/noL.json; fi; timeout 30 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 14 --only window_causal_1024,attn_mask_bool_pad --shape 4,16,4,4096,128 --out $OUT/wm_$V.csv > $OUT/wm_$V.txt 2>&1; done
