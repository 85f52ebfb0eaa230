"""The Triton decode launch with each K block's scales loaded one block ahead (`scale_prefetch.patch`), against
main, on the weights AUTO gives that launch at M <= 16 on Hopper (14336 rows: swapped tiles; 28672, the fused
gate/up: persistent swapped tiles).

Found offline (twenty-eighth session, Triton 3.6's ptxas, sm_90a): the pipeliner leaves the two scale loads in
their own K block, and at M = 8 (a token count that is not a multiple of 16, so the scales' K stride is not
16-divisible) ptxas schedules the scale products, and the wgmmas behind them, after those loads: every block waits
a global load before its wgmmas go in. At M = 16 the wgmmas go first. The whole linear runs 1.39-1.43x there at
M = 8, against 1.64-1.73x at M = 1 and 16. The patch changes no arithmetic (the same products and FMAs in the same
order; `tests/numerics` passes on the CPU). This copies the package and tests to a scratch tree, applies the
patch there, runs the Triton launch's GPU bits tests in it, then times `bench linear`'s whole-linear decode
(fp8_bi against BF16, graph replays) in fresh processes alternating main and patched, two rounds each.

    python3 benchmarks/2026-12-05/s28_calls/prefetch_ab.py [out.json]   (~4 minutes)
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
SCRATCH = "/tmp/prefetch_ab"
SHAPES, MS = [(14336, 4096), (28672, 4096)], [1, 8, 16, 24]

ROUND = f"""
import json
from precision_engine.bench.linear import bench_linear
rows = bench_linear(shapes={SHAPES!r}, ms={MS!r}, variants=("bf16", "fp8_bi"), reps=50, warmup=10)
print(json.dumps([[r["n"], r["k"], r["m"], r["bf16_ms"], r["fp8_bi_ms"], r["fp8_bi_x"]] for r in rows]))
"""


def patched_tree() -> str:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    for name in ("precision_engine", "tests", "pyproject.toml"):
        source = os.path.join(REPO, name)
        (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, os.path.join(SCRATCH, name))
    patch = os.path.join(HERE, "scale_prefetch.patch")
    for command in (["git", "apply", patch], ["patch", "-p1", "-i", patch]):
        if shutil.which(command[0]) and subprocess.run(command, cwd=SCRATCH).returncode == 0:
            return SCRATCH
    sys.exit("could not apply scale_prefetch.patch (neither git nor patch)")


def env_for(tree: str) -> dict:
    """The environment with `tree`'s package first on PYTHONPATH, the carried wheels' folders after it."""
    site = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and os.path.abspath(p) != REPO]
    return {**os.environ, "PYTHONPATH": ":".join([tree, *site])}


def run(tree: str, label: str) -> list:
    done = subprocess.run([sys.executable, "-c", ROUND], cwd=tree, env=env_for(tree), capture_output=True,
                          text=True, timeout=200)
    if done.returncode:
        print(f"{label}: rc {done.returncode}: {done.stderr.strip().splitlines()[-3:]}", flush=True)
        return []
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{label}: " + "  ".join(f"{n}x{k} M={m} {x:.3f}x ({fp8 * 1e3:.2f} us, bf16 {bf * 1e3:.2f})"
                                   for n, k, m, bf, fp8, x in rows), flush=True)
    return rows


def main() -> None:
    tree = patched_tree()
    # Kernel TRITON at M <= 16 is the patched launch; its rows are checked against the same rows of 4096 (Gluon's
    # bits on Hopper). AUTO is left out: its pinned cuBLAS would build its extension first.
    try:
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
             "tests/numerics/gpu/test_gemm_gpu.py", "-k", "(rows_bitwise or matches_reference) and TRITON"],
            cwd=tree, env=env_for(tree), capture_output=True, text=True, timeout=240)
        print("patched bits tests:", (tests.stdout.strip() or tests.stderr).splitlines()[-1], flush=True)
    except subprocess.TimeoutExpired:
        print("patched bits tests: timed out after 240 s", flush=True)
    results = {"main": [], "patched": []}
    for round_ in range(2):
        for label, where in (("main", REPO), ("patched", tree)) if round_ == 0 else (("patched", tree), ("main", REPO)):
            results[label].append(run(where, f"round {round_} {label}"))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
