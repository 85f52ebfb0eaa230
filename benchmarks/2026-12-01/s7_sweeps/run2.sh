set -u
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in torchao-*) ;; *) module=$(basename "$wheel" | cut -d- -f1 | tr A-Z a-z); module=${module/google_re2/re2}; module=${module/rpds_py/rpds}
    python3 -c "import $module" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" ;; esac
done > /tmp/install.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
timeout -k 5 200 python3 exp7/sweep7.py $OUT/sweep7.json > $OUT/sweep.log 2>&1
which ncu || ls /usr/local/cuda*/bin/ncu
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu | head -1)
timeout -k 5 200 $NCU --kernel-name regex:_gluon_block_gemm --launch-skip 1 --launch-count 1 --set full --import-source no -f -o /tmp/prof python3 exp7/prof7.py > $OUT/ncu.log 2>&1
$NCU -i /tmp/prof.ncu-rep --page details --csv > $OUT/details.csv 2>&1
$NCU -i /tmp/prof.ncu-rep --page source --csv --print-source sass --launch-skip 0 --launch-count 1 > $OUT/src_ser.csv 2>$OUT/src_err.txt
$NCU -i /tmp/prof.ncu-rep --page source --csv --print-source sass --launch-skip 2 --launch-count 1 > $OUT/src_acc.csv 2>>$OUT/src_err.txt
ls -la $OUT; tail -3 $OUT/ncu.log
tail -16 $OUT/sweep.log
python3 exp7/src_top.py $OUT/src_ser.csv 2>&1 | head -50
