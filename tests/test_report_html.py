"""Campaign HTML reports: a synthetic run directory -> index.html with tables, findings, plots."""

from __future__ import annotations

import base64
import builtins
import json
import shlex
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fuzzkit import report_html
from fuzzkit.case import Case
from fuzzkit.cli import main
from fuzzkit.failure import Failure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T0 = 1_780_000_000.0
NASTY = 'expected <dot> & "magnitude" </pre><script>alert(1)</script>'


class _Page(HTMLParser):
    """Collects tables (rows of cell texts), <img> srcs, <details> texts and all visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.imgs: list[dict[str, Any]] = []
        self.details: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None
        self._details_depth = 0
        self._detail: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Any]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.imgs.append(dict(attrs))
        elif tag == "details":
            self._details_depth += 1
            self._detail = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "details":
            self._details_depth -= 1
            self.details.append("".join(self._detail))

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._details_depth:
            self._detail.append(data)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def _case(n: int, signature: str, message: str, kind: str = "mismatch") -> Case:
    rng = np.random.default_rng(n)
    return Case("toy-dot", "numpy", {"a": rng.standard_normal(n).astype(np.float32),
                                     "b": rng.standard_normal(n).astype(np.float32)},
                seed=n, failure=Failure(kind, message, signature), origin="hypothesis")


def make_run(root: Path, *, findings: bool = True, status: str = "done") -> Path:
    """Two workers on two (target, impl) pairs for ~20 s; two findings, one reported twice."""
    run_dir = root / "reports" / "20261130T000000Z-seed7"
    run_dir.mkdir(parents=True)
    state = {"run_id": run_dir.name, "seed": 7, "budget": 20.0,
             "plan": [["toy-dot", "numpy"], ["toy-alloc", "heap"]], "workers": 2,
             "backend": "local", "engine": "hypothesis", "isolate": True,
             "corpus": str(root / "corpus"), "started": T0, "elapsed": 20.5, "status": status}
    (run_dir / "state.json").write_text(json.dumps(state))
    events: list[dict[str, Any]] = []
    for w, (target, impl, rate) in enumerate([("toy-dot", "numpy", 120.0),
                                              ("toy-alloc", "heap", 45.0)]):
        events.append({"t": T0 + 0.1, "worker": w, "type": "worker_start"})
        cases = 0
        for s in range(1, 21):
            cases += int(rate * (1.5 if s > 10 else 1.0))  # speeds up half-way
            events.append({"t": T0 + s, "worker": w, "type": "progress", "target": target,
                           "impl": impl, "cases": cases, "elapsed": float(s)})
        events.append({"t": T0 + 20.3, "worker": w, "type": "worker_exit"})
    if findings:
        c1 = _case(5, "mismatch:close:dot", NASTY)
        p1 = c1.save(root / "corpus" / "toy-dot" / "findings")
        c2 = _case(3, "crash:signal:SIGSEGV", "worker killed by SIGSEGV", kind="crash")
        c2 = Case("toy-alloc", "heap", c2.inputs, seed=3, failure=c2.failure)
        p2 = c2.save(root / "corpus" / "toy-alloc" / "findings")
        for t, w, c, p in [(4.2, 0, c1, p1), (6.0, 1, c1, p1), (13.7, 1, c2, p2)]:
            events.append({"t": T0 + t, "worker": w, "type": "finding", "target": c.target,
                           "impl": c.implementation, "signature": c.failure.signature,
                           "kind": c.failure.kind, "message": c.failure.message,
                           "case": str(p)})
        events.append({"t": T0 + 15.0, "worker": 0, "type": "duplicate", "target": "toy-alloc",
                       "impl": "heap", "signature": c2.failure.signature, "case": str(p2)})
        events.append({"t": T0 + 16.0, "worker": 0, "type": "other_signature",
                       "target": "toy-dot", "impl": "numpy", "signature": "mismatch:x&y",
                       "count": 4})
    events.append({"t": T0 + 9.0, "worker": 1, "type": "worker_hung", "silent_s": 31.0})
    events.append({"t": T0 + 9.1, "worker": 1, "type": "worker_replaced", "pid": 1234})
    events.sort(key=lambda e: e["t"])
    lines = [json.dumps(e) + "\n" for e in events]
    (run_dir / "events.jsonl").write_text("".join(lines) + '{"t": 1, "worker": 0, "typ')  # torn
    return run_dir


def test_page_has_tables_findings_and_three_png_plots(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    out = report_html.write_html(run_dir)
    assert out == run_dir / "index.html"
    raw = out.read_text(encoding="utf-8")
    assert "<script>" not in raw and "&lt;script&gt;" in raw  # the message is escaped
    page = _parse(out)
    text = "".join(page.text)

    # summary table: one row per pair + total
    summary = next(t for t in page.tables if t[0][:3] == ["target", "impl", "cases"])
    rows = {(r[0], r[1]): r for r in summary[1:]}
    dot, alloc, total = rows[("toy-dot", "numpy")], rows[("toy-alloc", "heap")], rows[("total", "")]
    assert dot[2] == str(10 * 120 + 10 * 180) and alloc[2] == str(10 * 45 + 10 * 67)
    assert float(dot[3]) == pytest.approx(3000 / 20, abs=0.1)
    assert dot[4] == "1" and alloc[4] == "1" and total[4] == "2"  # deduplicated across workers
    assert float(dot[5]) == 20.0 and total[2] == str(3000 + 1120)

    # findings: escaped message, case path, replay command, the case JSON inlined
    assert NASTY in text and "Findings (2)" in text
    assert "reported 2 times by workers 0, 1" in text  # two finding events
    assert "reported 2 times by workers 1, 0" in text  # a finding and a "duplicate" event
    other = next(t for t in page.tables if t[0] == ["target", "impl", "signature", "times"])
    assert other[1:] == [["toy-dot", "numpy", "mismatch:x&y", "4"]]
    cases = sorted((tmp_path / "corpus").rglob("*.json"))
    for path in cases:
        assert f"fuzzkit replay {shlex.quote(str(path))}" in text
    assert len(page.details) == 2
    inlined = [json.loads(d[d.index("{"):]) for d in page.details]
    assert {c["id"] for c in inlined} == {p.stem for p in cases}
    assert "1 unreadable line(s)" in text  # the torn last line
    assert "worker_hung" in text and "worker_replaced" in text

    # three plots, embedded, decoding to PNGs identical to the saved files
    assert len(page.imgs) == 3
    for img, (stem, _) in zip(page.imgs, report_html.PLOTS):
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix)
        data = base64.b64decode(img["src"][len(prefix):], validate=True)
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
        assert (run_dir / "plots" / f"{stem}.png").read_bytes() == data
    assert not [t for t in page.tags if t in ("script", "link", "iframe")]  # self-contained


def test_missing_matplotlib_says_so_and_keeps_tables(tmp_path: Path, monkeypatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    run_dir = make_run(tmp_path)
    page = _parse(report_html.write_html(run_dir))
    assert not page.imgs and not (run_dir / "plots").exists()
    assert report_html.MATPLOTLIB_MISSING in "".join(page.text)
    assert any(t[0][:3] == ["target", "impl", "cases"] for t in page.tables)


def test_empty_running_campaign_and_missing_case_file(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, findings=False, status="running")
    with (run_dir / "events.jsonl").open("a") as handle:
        handle.write("\n" + json.dumps({"t": T0 + 15, "worker": 0, "type": "finding",
                                 "target": "toy-dot", "impl": "numpy", "signature": "s",
                                 "kind": "oom", "message": "m", "case": "gone/x.json"}) + "\n")
    # a finding claimed but killed before its event line was appended is still reported
    claimed = _case(4, "invariant:claimed", "claimed only", kind="invariant")
    path = claimed.save(tmp_path / "corpus" / "toy-dot" / "findings")
    (run_dir / "claims").mkdir()
    (run_dir / "claims" / "abc.json").write_text(json.dumps(
        {"t": T0 + 12, "worker": 1, "type": "finding", "target": "toy-dot", "impl": "numpy",
         "signature": "invariant:claimed", "kind": "invariant", "message": "claimed only",
         "case": str(path)}))
    page = _parse(report_html.write_html(run_dir))
    text = "".join(page.text)
    assert "running" in text and "case file not found: gone/x.json" in text
    assert "Findings (2)" in text and "claimed only" in text and len(page.details) == 1
    assert len(page.imgs) == 3


def test_cli_report_regenerates_and_rejects_other_dirs(tmp_path: Path, capsys) -> None:
    run_dir = make_run(tmp_path)
    assert main(["report", str(run_dir)]) == 0
    out, _ = capsys.readouterr()
    assert out.strip() == f"report: {run_dir / 'index.html'}"
    assert (run_dir / "index.html").stat().st_size > 10_000

    # the replay command on the page works
    [case] = list((tmp_path / "corpus" / "toy-dot" / "findings").glob("*.json"))
    assert main(["replay", str(case)]) in (0, 1)
    capsys.readouterr()

    old = tmp_path / "old-run"
    old.mkdir()
    (old / "summary.json").write_text("{}")
    for bad, needle in [(old, "no state.json or events.jsonl"),
                        (tmp_path / "nope", "no such run directory")]:
        assert main(["report", str(bad)]) == 2
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith("fuzzkit: error:") and needle in err, err
    (old / "state.json").write_text("{not json")
    (old / "events.jsonl").write_text("")
    assert main(["report", str(old)]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "state.json: not valid JSON" in err


def _headless_browser() -> str | None:
    import shutil

    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome",
                 "chrome-headless-shell"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_headless_browser() is None,
                    reason="no headless Chromium (apt-get install chromium-headless-shell)")
def test_page_renders_with_plots_in_headless_chromium(tmp_path: Path) -> None:
    """A real browser draws the page: the screenshot holds the plots' blue and orange lines."""
    import subprocess

    from matplotlib import image

    page = report_html.write_html(make_run(tmp_path))
    shot = tmp_path / "page.png"
    subprocess.run([_headless_browser(), "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1100,2400", f"--screenshot={shot}",
                    f"--user-data-dir={tmp_path / 'profile'}", page.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)
    pixels = (image.imread(str(shot))[..., :3] * 255).astype(int)

    def count(rgb: tuple[int, int, int]) -> int:
        return int((np.abs(pixels - np.array(rgb)).max(axis=-1) <= 12).sum())

    # matplotlib's tab:blue (worker 0) and tab:orange (worker 1) come only from the <img>s
    assert count((31, 119, 180)) > 150 and count((255, 127, 14)) > 150  # ~300 each here
