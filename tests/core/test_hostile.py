"""A quick seeded subset of the hostile-model run (the full 1,000-case run is scripts/hostile.py):
every broken file ends in success or one clear sentence; no traceback, crash or hang."""
from __future__ import annotations

from scripts.hostile import MUTATIONS, generate, run_cases
from tests.helpers import run_cli


def test_hostile_models_through_the_load_path(tmp_path):
    cases = generate(80, seed=7, root=tmp_path)
    assert len({k.split("+")[0] for _, k in cases}) >= len(MUTATIONS) - 4  # the subset covers the mutations
    summary = run_cases(cases, ["inspect"], timeout=30)
    assert summary["failures"] == [], summary["failures"][:3]
    assert summary["results"]["inspect"].get("error", 0) > 40


def test_hostile_models_on_the_command_line(tmp_path):
    for path, kind in generate(6, seed=11, root=tmp_path):
        r = run_cli("inspect", path)
        assert r.returncode in (0, 2), (kind, r.stderr)
        assert "Traceback" not in r.stderr
        if r.returncode == 2:
            assert len(r.stderr.strip().splitlines()) == 1 and str(path) in r.stderr, (kind, r.stderr)
