"""report.html of a real small comparison: rendered in headless Chromium, rebuilt by `fedselect report`."""

import html
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from fedselect.study.compare import parse_compare, run_comparison
from support.tiny import tiny_doc

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)

#: appended to a *copy* of the page (report.html itself has no script): after loading, it
#: writes what the browser decoded of every image into the DOM, which --dump-dom returns
CHECKER = """<script>
window.addEventListener('load', function () {
  var out = document.createElement('pre'); out.id = 'fs-check';
  out.textContent = JSON.stringify({
    images: Array.prototype.map.call(document.images, function (i) { return {alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}; }),
    resultRows: document.querySelectorAll('#results table.results tbody tr').length,
    pairedRows: document.querySelectorAll('#paired table.paired tbody tr').length,
    configDiffCells: document.querySelectorAll('#config td.diff').length,
    sections: Array.prototype.map.call(document.querySelectorAll('section'), function (s) { return s.id; }),
    bodyWidth: document.body.scrollWidth
  });
  document.body.appendChild(out);
});
</script>"""


def _chromium(args: list[str], profile, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run headless Chromium in its own process group; the group is killed afterwards."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout} s: {cmd}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers (zygote, renderer) left behind, if any
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="module")
def small_comparison(tmp_path_factory):
    """FedAvg vs FLASH-RL (one option changed) on embedded MNIST, 3 rounds, seeds 0 and 1."""
    doc = {
        "name": "small <html> check",
        "seeds": [0, 1],
        "baseline": "FedAvg",
        "base": tiny_doc(name=None, seed=None, rounds=3, metrics={"target": 0.5, "summary_window": 2}),
        "methods": [
            {"label": "FedAvg", "method": "fedavg"},
            {"label": "FLASH-RL", "method": "flashrl", "method_options": {"eps_end": 0.3}},
        ],
        "paper": {"FLASH-RL": {"e2e_latency_s_vs": -24.83}},
        "paper_source": "FLASH-RL Table V (illustrative)",
    }
    d = tmp_path_factory.mktemp("cmp") / "c"
    run_comparison(parse_compare(doc), d)
    return d


def test_report_html_sections_and_embedded_plots(small_comparison):
    page = (small_comparison / "report.html").read_text()
    pngs = sorted(p.name for p in (small_comparison / "plots").glob("*.png"))
    assert {"selection_device_per_round.png", "selection_network_per_round.png"} <= set(pngs)
    assert len(re.findall(r'<img src="data:image/png;base64,', page)) == len(pngs)
    assert "<script" not in page and "small &lt;html&gt; check" in page
    # the config differences: method and its option, highlighted against the baseline
    cfg = page[page.index('<section id="config">') : page.index('<section id="federation">')]
    assert re.search(r"<td>method</td><td>fedavg</td><td class=\"diff\">flashrl</td>", cfg)
    assert re.search(r"<td>selector.options.eps_end</td><td>\(not set\)</td><td class=\"diff\">0.3</td>", cfg)
    fed = page[page.index('<section id="federation">') : page.index('<section id="wall">')]
    assert "Device mix" in fed and "Network mix" in fed and "Every client, seed 1" in fed
    info = json.loads((small_comparison / "federation-s0.json").read_text())
    assert f"<td>{info['device'][0]}</td>" in fed


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary: install Debian's `chromium` package (`make test` does so where apt-get is available)",
)
def test_report_html_renders_in_headless_chromium(small_comparison, tmp_path):
    page = (small_comparison / "report.html").read_text()
    check = tmp_path / "check.html"
    check.write_text(page.replace("</body>", CHECKER + "</body>"))
    res = _chromium(["--virtual-time-budget=5000", "--dump-dom", check.as_uri()], tmp_path / "profile")
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<pre id="fs-check">(.*?)</pre>', res.stdout, re.S)
    assert m, "the rendered DOM has no check output: " + res.stdout[-1000:]
    got = json.loads(html.unescape(m.group(1)))
    pngs = list((small_comparison / "plots").glob("*.png"))
    assert len(got["images"]) == len(pngs) >= 7
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in got["images"]), got["images"]
    assert got["resultRows"] == 2 and got["pairedRows"] == 1 and got["configDiffCells"] >= 2
    assert got["sections"] == ["results", "paired", "paper", "plots", "config", "federation", "wall"]
    # a screenshot of the page as rendered (a person looks at it; here: that it is a real PNG)
    shot = tmp_path / "page.png"
    res = _chromium(
        ["--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}", (small_comparison / "report.html").as_uri()],
        tmp_path / "profile2",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_fedselect_report_regenerates_the_page_from_saved_metrics(small_comparison, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import fedselect.experiment.run
    import fedselect.study.compare
    from fedselect.cli import app

    d = tmp_path / "copy"
    shutil.copytree(small_comparison, d)
    before = (d / "report.html").read_bytes(), (d / "table.md").read_bytes(), (d / "paired.csv").read_bytes()
    (d / "report.html").unlink()
    shutil.rmtree(d / "plots")
    for p in d.glob("runs/*/model.pt"):
        p.unlink()  # the report needs no model: metrics only

    def refuse(*a, **k):
        raise AssertionError("report must not run anything")

    import fedselect.study.backends

    monkeypatch.setattr(fedselect.experiment.run, "run_experiment", refuse)
    monkeypatch.setattr(fedselect.study.backends, "run_experiment", refuse)  # compare and sweep run through a backend
    monkeypatch.setattr(fedselect.study.backends, "build_federation", refuse)
    res = CliRunner().invoke(app, ["report", str(d)])
    assert res.exit_code == 0, res.output
    assert "report.html" in res.output and "paired differences vs FedAvg over 2 seeds" in res.output
    after = (d / "report.html").read_bytes(), (d / "table.md").read_bytes(), (d / "paired.csv").read_bytes()
    assert after[1:] == before[1:]
    # the page is the same but for the directory name it mentions
    assert (
        after[0].replace(b"<code>copy</code>", b"<code>c</code>").replace(b"report copy</code>", b"report c</code>") == before[0]
    )
