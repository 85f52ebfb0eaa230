"""Call E's table: each quantizer row's % of copy with two FMA corrections (two_*.json) and one (one_*.json),
median over the rounds, and the ratio of their times.

    python3 compare.py OUT_DIR
"""

import json
import sys
from pathlib import Path
from statistics import median


def load(folder: Path, prefix: str) -> dict[tuple[str, str], list[dict]]:
    rows: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(folder.glob(f"{prefix}_*.json")):
        for row in json.loads(path.read_text())["rows"]:
            rows.setdefault((row["kernel"], "x".join(map(str, row["shape"]))), []).append(row)
    return rows


def main() -> None:
    folder = Path(sys.argv[1])
    two, one = load(folder, "two"), load(folder, "one")
    print("kernel | shape | % copy, two corrections | % copy, one | time two / one")
    for key in two:
        if key not in one:
            continue
        pct = [median(r["pct_copy"] for r in rows[key]) for rows in (two, one)]
        ms = [median(r["ms"] for r in rows[key]) for rows in (two, one)]
        print(f"{key[0]} | {key[1]} | {pct[0]:.1f} | {pct[1]:.1f} | {ms[0] / ms[1]:.3f}")


if __name__ == "__main__":
    main()
