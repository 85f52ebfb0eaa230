#!/usr/bin/env bash
# The persistent re-quantizer's bits and speed against HEAD's one-item kernel (requant_probe.py), then its GPU test.
set -u; cd "$(dirname "$0")/../../.."; source scripts/device_env.sh; timeout 150 python3 benchmarks/2026-12-04/s23_calls/requant_probe.py "$OUT/requant.json" 2>&1 | grep -v Warning | tee "$OUT/requant.log" | tail -n 25
