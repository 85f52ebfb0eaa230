"""The broken-policy corpus: every file in broken/ carries its expected diagnostics as `# <-` markers on the
line they point at:

    granulrity: block  # <- error formats.w8.granulrity: unknown key 'granulrity' | did you mean 'granularity'?

meaning: a diagnostic on this line, of that severity and key path, whose message contains the text before
`|` and whose hint contains the text after it (` | `). The file must produce exactly its markers, nothing more.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from precision_engine.policy import check_policy

BROKEN = Path(__file__).parent / "broken"
CORPUS = sorted(BROKEN.glob("*.yaml"))
_MARKER = re.compile(r"# <- (error|warning) ([^\s:]*): (.*?)(?=\s*# <-|$)")


def expected_markers(path: Path) -> list[tuple[int, str, str, str, str]]:
    found = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        for severity, key_path, text in _MARKER.findall(line):
            message, _, hint = (part.strip() for part in text.partition(" | "))
            found.append((line_no, severity, key_path, message, hint))
    return found


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_broken_policy_reports_exactly_its_markers(path, monkeypatch):
    monkeypatch.chdir(BROKEN.parents[2])  # file names in messages are relative to the repository root
    markers = expected_markers(path)
    assert markers, f"{path.name} has no `# <-` marker"
    result = check_policy(path.relative_to(BROKEN.parents[2]))
    got = sorted(((d.line, d.severity, d.key_path), d) for d in result.diagnostics)
    want = sorted(((line, severity, key), (message, hint)) for line, severity, key, message, hint in markers)
    assert [g[0] for g in got] == [w[0] for w in want], "\n".join(str(d) for _, d in got)
    for (_, diagnostic), (_, (message, hint)) in zip(got, want):
        assert diagnostic.file.endswith(path.name)
        assert message in diagnostic.message, str(diagnostic)
        assert hint in diagnostic.hint, str(diagnostic)
    if any(severity == "error" for _, severity, *_ in markers):
        assert result.policy is None
