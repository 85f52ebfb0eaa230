"""verl 0.9.1 tests: they run where verl is installed (CI's separate verl venv, .ci/run) and skip elsewhere."""

import pytest

pytest.importorskip("verl", reason="verl is not installed (CI runs these in its verl venv)")
