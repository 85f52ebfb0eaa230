# Sourced by this folder's calls from the repository root: the device environment, the card's name, and the two
# patch helpers (`apply_patch FILE`: git apply, or patch where the copy has no git; `restore`: the attention file
# as the call found it).
here=benchmarks/2026-12-06/s36_calls/next
source scripts/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
cp precision_engine/numerics/triton_attention.py /tmp/ta_main.py
apply_patch() { git apply "$1" 2>/dev/null || patch -s -p1 < "$1" || { echo "cannot apply $1"; exit 4; }; }
restore() { cp /tmp/ta_main.py precision_engine/numerics/triton_attention.py; }
