#!/usr/bin/env bash
# Forty-sixth session, call 1 (carry .whl and .dg): on an H200, decode in rounds and torchao in turns
# (`s42_calls/call6.sh` with SWAP=0 TORCHAO=1); on an H100, shallower rings for the narrow-weight launches
# (`s45_calls/call5.sh`).
set -u
cd "$(dirname "$0")/../../.."
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
  *H200*) SWAP=0 TORCHAO=1 bash benchmarks/2026-12-06/s42_calls/call6.sh ;;
  *) bash benchmarks/2026-12-06/s45_calls/call5.sh ;;
esac
