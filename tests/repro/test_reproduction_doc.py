"""docs/reproduction.md is what the saved runs in docs/reproduction/runs say: rebuilding it with
``fedselect reproduce --no-run`` from a copy of those runs gives the committed document, byte for
byte (issue 21: every number in it comes from a saved run directory that the report rebuilds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fedselect.repro.reproduce import load_manifest, read_sessions, reproduce

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "configs" / "reproduce.yaml"
SAVED = ROOT / "docs" / "reproduction" / "runs"
DOC = ROOT / "docs" / "reproduction.md"


@pytest.mark.slow
@pytest.mark.skipif(not SAVED.is_dir(), reason="no saved reproduction runs in this checkout")
def test_the_document_is_rebuilt_from_the_saved_runs(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(SAVED, runs)  # the report writes its tables and plots next to the runs
    doc = tmp_path / "reproduction.md"
    _, results = reproduce(MANIFEST, runs, run=False, doc=doc)
    assert doc.read_text().replace(str(runs), "docs/reproduction/runs") == DOC.read_text()
    m, _ = load_manifest(MANIFEST)
    assert [r.entry.id for r in results] == [e.id for e in m.entries]
    text = DOC.read_text()
    for r in results:  # an entry not run (or not finished) says so; one that ran names its machine
        if not r.ran:
            assert f"**Not run yet** (config `{r.entry.config}`" in text
            continue
        assert read_sessions(SAVED / r.entry.id), f"{r.entry.id}: no reproduce.json"
        assert r.machines[0] in text
        if r.incomplete and r.entry.kind == "compare":
            assert "Caution, incomplete runs" in text
    for line in DOC.read_text().splitlines():  # the images the document shows are committed
        if line.startswith("![") and "](" in line:
            assert (DOC.parent / line.split("](", 1)[1].rstrip(")")).is_file(), line
