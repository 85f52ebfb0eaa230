"""Does the chain decode's speed at M <= 8 depend on which schedule ptxas happened to give it?

Found offline in the twenty-seventh session (no device): Triton 3.6's ptxas 12.8 gives a different SASS every
time it compiles the same PTX of chain_config's 16-slot program (M <= 8, one program an SM): 20 compiles, 20
schedules, whose loops span 1,703-1,713 instructions. Under `setarch -R` (no address-space randomization) it
gives the same one every time. chain_config's other 26 launches compiled the same twice, and the 19 other
kernels whose sm_90a PTX lay in the local Triton cache the same 5 times out of 5.

This runs the whole-linear decode (`bench linear`'s fp8_bi against BF16, graph replays) at M = 8 on the three
8B shapes short of 1.5x there, ROUNDS times, each in a fresh process with an empty Triton cache (a new compile,
so a new schedule), then once under `setarch -R`. Per round: the md5 of each chain cubin Triton wrote, and each
shape's ms and x BF16. A spread wider than the rounds' BF16 spread says the schedule matters.

    python3 benchmarks/2026-12-05/s27_calls/ptxas_spread.py [ROUNDS] > spread.txt   (~30 s a round)
"""

import glob
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile

SHAPES = [(14336, 4096), (4096, 4096), (6144, 4096)]
M = 8

ROUND = f"""
import json
from precision_engine.bench.linear import bench_linear
rows = bench_linear(shapes={SHAPES!r}, ms=[{M}], variants=("bf16", "fp8_bi"), reps=50, warmup=10)
print(json.dumps([{{"n": r["n"], "k": r["k"], "bf16_ms": r["bf16_ms"], "fp8_ms": r["fp8_bi_ms"],
                   "x": r["fp8_bi_x"]}} for r in rows]))
"""


def one_round(label: str, prefix: list[str]) -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        done = subprocess.run([*prefix, sys.executable, "-c", ROUND], env=env, capture_output=True, text=True,
                              timeout=240)
        if done.returncode:
            print(f"{label}: rc {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            return
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        cubins = sorted(hashlib.md5(open(p, "rb").read()).hexdigest()[:8]
                        for p in glob.glob(f"{cache}/*/_gluon_chain_decode_kernel.cubin"))
    cells = "  ".join(f"{r['n']}x{r['k']} {r['fp8_ms'] * 1e3:.2f} us {r['x']:.3f}x (bf16 {r['bf16_ms'] * 1e3:.2f})"
                      for r in rows)
    print(f"{label}: chain cubins {','.join(cubins)}  {cells}", flush=True)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    for i in range(rounds):
        one_round(f"round {i}", [])
    one_round("setarch -R", ["setarch", platform.machine(), "-R"])


if __name__ == "__main__":
    main()
