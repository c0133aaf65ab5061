"""tools/save_runs.py: the light copy of saved reproduction runs kept in the repository."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("save_runs", Path(__file__).parents[2] / "tools" / "save_runs.py")
save_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(save_runs)


def _entry(root: Path, name: str, marker: str = "compare.json") -> None:
    run = root / name / "runs" / "A-s0"
    run.mkdir(parents=True)
    (root / name / marker).write_text("{}")
    (root / name / "table.md").write_text("t")
    (root / name / "plots").mkdir()
    (root / name / "plots" / "x.png").write_bytes(b"png")
    (root / name / "report.html").write_text("<html>")
    for f in ("metrics.csv", "config.yaml", "summary.json", "inputs.json", "timing.csv"):
        (run / f).write_text(f)
    for f in ("model.pt", "checkpoint.pt", "checkpoint.prev.pt", "run.log"):
        (run / f).write_text("big")


def test_copies_what_the_report_reads_and_nothing_else(tmp_path):
    src, dst = tmp_path / "runs", tmp_path / "kept"
    _entry(src, "cmp")
    _entry(src, "grid", "sweep.json")
    (src / "not-an-entry").mkdir()
    assert save_runs.save(src, dst) == ["cmp", "grid"]
    got = sorted(str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file())
    want = ["compare.json", "table.md"] + [
        f"runs/A-s0/{f}" for f in ("config.yaml", "inputs.json", "metrics.csv", "summary.json", "timing.csv")
    ]
    assert got == sorted([f"cmp/{w}" for w in want] + [f"grid/{w.replace('compare.json', 'sweep.json')}" for w in want])
    (dst / "cmp" / "stale.txt").write_text("old")  # an entry copied again is replaced
    assert save_runs.main([str(src), str(dst), "cmp"]) == 0 and not (dst / "cmp" / "stale.txt").exists()


def test_a_missing_source_or_entry_is_an_error(tmp_path, capsys):
    assert save_runs.main([str(tmp_path / "nope"), str(tmp_path / "dst")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "src").mkdir()
    with pytest.raises(FileNotFoundError, match="no such entry directory"):
        save_runs.save(tmp_path / "src", tmp_path / "dst", ["x"])


def test_finished_only_leaves_out_runs_in_progress(tmp_path):
    src, dst = tmp_path / "runs", tmp_path / "kept"
    _entry(src, "cmp")
    running = src / "cmp" / "runs" / "B-s0"
    running.mkdir()
    (running / "metrics.csv").write_text("round\n1\n")  # 1 round so far, no summary.json
    save_runs.save(src, dst)
    assert (dst / "cmp" / "runs" / "B-s0" / "metrics.csv").is_file()  # by default everything
    assert save_runs.main([str(src), str(dst), "cmp", "--finished-only"]) == 0
    assert sorted(p.name for p in (dst / "cmp" / "runs").iterdir()) == ["A-s0"]
    assert (dst / "cmp" / "runs" / "A-s0" / "summary.json").is_file()
