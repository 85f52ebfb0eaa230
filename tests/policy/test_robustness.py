"""Never a traceback for bad input: corrupt any value of a real policy and the loader still answers with
diagnostics (or a policy), never an exception."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from precision_engine.policy import check_policy, load_policy

BASE = dict(load_policy("fp8rl_rollout_tis").resolved)
JUNK = st.sampled_from([None, 0, -1, 1.5, True, "", "x", "*", "re:(", "float8_e4m3", "group", "block", "tokens",
                        [], [1], ["re:.*"], {}, {"a": 1}, {"dtype": "bf16"}, [128, 128]])


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


PATHS = [p for p in _paths(BASE) if p]


def _replace(node, path, value):
    if len(path) == 1:
        node[path[0]] = value
    else:
        _replace(node[path[0]], path[1:], value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), JUNK), min_size=1, max_size=3))
@example(edits=[(("kv_cache", "dtype"), 0), (("kv_cache", "calibrate"), None)])  # found by CI: a non-str dtype
def test_corrupted_policy_gives_diagnostics_not_exceptions(edits, tmp_path):
    data = yaml.safe_load(yaml.safe_dump(BASE))
    for path, value in edits:
        try:
            _replace(data, path, value)
        except (KeyError, IndexError, TypeError):  # an earlier edit removed the parent
            continue
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(data))
    result = check_policy(file)
    assert (result.policy is None) == bool(result.errors)
    assert all(d.message for d in result.diagnostics)
