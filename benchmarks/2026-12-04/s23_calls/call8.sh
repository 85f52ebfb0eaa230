#!/usr/bin/env bash
# Call 8: the chain bits with chain_config's 64-row narrow weight tiles at two an SM (12288 rows, M > 32).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
timeout 120 python3 -m pytest -q -rf -m gpu -p no:cacheprovider tests/numerics/gpu/test_gemm_gpu.py -k "chain_decode and 12288" 2>&1 | tail -n 3 | cut -c1-300
