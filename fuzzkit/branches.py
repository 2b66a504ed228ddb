"""Branch coverage of the code under test: the measure of a strategy's reach.

``fuzzkit run --coverage`` measures, with coverage.py in branch mode, the modules each
implementation declares (``Implementation.sources``) plus the ones every implementation runs
through (``Target.sources``: drivers, shared layers) -- Triton kernels included, since under
``TRITON_INTERPRET=1`` their bodies run as Python.  One :class:`Meter` serves a whole run: it
starts before any target module is imported (so definitions count as executed), and each
(target, implementation) pair fuzzes in its own coverage *context*, so pairs that share a module
are still reported apart.

What a report holds, per pair (:meth:`Meter.report`): branch coverage (covered / all branches,
the headline figure), line coverage, the never-taken branches and never-run lines as
``file:line`` (``file:line->line`` for a branch), the lines excluded on purpose, each with the
reason written next to its ``# pragma: no cover`` / ``# pragma: no branch`` (``fuzzkit`` insists
on one), and the coverage over time (sampled every few seconds while the pair fuzzes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

#: A pragma with its reason: ``# pragma: no cover - only on a GPU``.
PRAGMA = re.compile(r"#\s*pragma:\s*no\s+(cover|branch)\b\s*[-:\u2014]?\s*(.*)$")


def module_file(name: str) -> str | None:
    """The source file of module ``name`` *without importing it or its parents* (importing a
    target package before measuring starts would leave its definitions counted as not run)."""
    parts = name.split(".")
    path: list[str] | None = None
    spec = None
    for i in range(len(parts)):
        spec = _find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return os.path.abspath(spec.origin)


def _find_spec(name: str, path: list[str] | None) -> Any:
    """The spec of ``name`` from the first meta-path finder that knows it, imported by none:
    not only the file-system ``PathFinder``, because ``fuzzkit.targets`` is a folder mapped
    into the package (setup.py's package_dir), found by the install's own finder."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec(name, path) if find_spec is not None else None
        if spec is not None:
            return spec
    return None


def module_files(names: Iterable[str], *, missing_ok: bool = False) -> list[str]:
    """Files of ``names``; a package name stands for every ``.py`` file under it.  A name with
    no Python source is an error, or with ``missing_ok`` left out (nothing there to measure)."""
    files: list[str] = []
    for name in names:
        origin = module_file(name)
        if origin is None:
            if missing_ok:
                continue
            raise ValueError(f"coverage source {name!r} is not an importable module")
        if os.path.basename(origin) == "__init__.py" and not name.endswith("__init__"):
            files.extend(str(p) for p in sorted(Path(origin).parent.rglob("*.py")))
        else:
            files.append(origin)
    return list(dict.fromkeys(files))


@dataclasses.dataclass
class Exclusion:
    file: str
    line: int
    kind: str  # "cover" (the line and its block) or "branch" (the branch out of the line)
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def exclusions(files: Iterable[str], root: Path | None = None) -> list[Exclusion]:
    """Every coverage pragma in ``files`` with its reason ("" if none was written)."""
    out = []
    for file in files:
        try:
            lines = Path(file).read_text().splitlines()
        except OSError:
            continue
        for number, text in enumerate(lines, 1):
            match = PRAGMA.search(text)
            if match:
                out.append(
                    Exclusion(_short(file, root), number, match.group(1), match.group(2).strip())
                )
    return out


def _short(file: str, root: Path | None) -> str:
    root = root or Path.cwd()
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file


def branch_collector(files: Sequence[str]) -> Any:
    """A coverage.py collector of branch coverage in exactly ``files``, in memory, honouring
    the project's pragmas (a ``no cover`` line and its block, a ``no branch`` line's exits)."""
    import coverage

    cov = coverage.Coverage(branch=True, include=list(files), data_file=None, config_file=False)
    cov.exclude(r"#\s*pragma:\s*no\s+cover", which="exclude")
    cov.exclude(r"#\s*pragma:\s*no\s+branch", which="partial")
    return cov


class Meter:
    """One coverage.py measurement for a run; :meth:`pair` switches the context per pair."""

    def __init__(
        self, modules: Sequence[str], *, sample_every: float = 5.0, root: Path | None = None
    ) -> None:
        try:
            import coverage  # noqa: F401 - only to say clearly when it is missing
        except ImportError:  # pragma: no cover - coverage is a dependency of fuzzkit
            from fuzzkit.errors import UsageError

            raise UsageError("--coverage needs coverage.py: pip install coverage") from None
        self.root = root or _project_root()
        self.files = module_files(modules)
        self.sample_every = sample_every
        self._cov = branch_collector(self.files)
        self._label: str | None = None
        self._pair_files: dict[str, list[str]] = {}
        self._timelines: dict[str, list[tuple[float, float]]] = {}
        self._started_at: dict[str, float] = {}
        self._last_sample = 0.0
        self._seen_arcs = 0
        self.running = False

    def start(self) -> None:
        self._cov.start()
        self.running = True

    def stop(self) -> None:
        if self.running:
            self._cov.stop()
            self.running = False

    def pair(self, label: str, modules: Sequence[str]) -> None:
        """Measure what runs from now on as ``label`` (e.g. ``quant/triton``), over ``modules``."""
        files = module_files(modules)
        missing = sorted(set(files) - set(self.files))
        if missing:
            raise ValueError(f"{label}: coverage sources not measured by this run: {missing}")
        self._label = label
        self._pair_files[label] = files
        self._timelines.setdefault(label, [])
        self._started_at[label] = time.monotonic()
        self._last_sample = 0.0
        self._cov.switch_context(label)
        self._seen_arcs = self.arcs()

    def arcs(self) -> int:
        """How many distinct arcs (line-to-line transitions) of the current pair's files have run
        so far, in any context (public coverage.py API: ``get_data`` flushes the tracer)."""
        if self._label is None:
            return 0
        data = self._cov.get_data()
        data.set_query_contexts(None)
        return sum(len(data.arcs(f) or ()) for f in self._pair_files[self._label])

    def novelty(self) -> float:
        """Arcs that ran for the first time since the last call: the score a coverage-steered
        run hands to ``hypothesis.target`` after each case."""
        now = self.arcs()
        new, self._seen_arcs = now - self._seen_arcs, now
        return float(max(new, 0))

    def tick(self, force: bool = False) -> None:
        """Sample the current pair's coverage if ``sample_every`` seconds passed (cheap to call
        after every case)."""
        if self._label is None:
            return
        now = time.monotonic()
        if not force and now - self._last_sample < self.sample_every:
            return
        self._last_sample = now
        totals = self._json(self._label)["totals"]
        self._timelines[self._label].append(
            (round(now - self._started_at[self._label], 3), _branch_percent(totals))
        )

    def _json(self, label: str) -> dict[str, Any]:
        fd, path = tempfile.mkstemp(suffix=".json", prefix="fuzzkit-coverage-")
        os.close(fd)
        try:
            self._cov.json_report(
                outfile=path,
                include=self._pair_files[label],
                contexts=[f"^{re.escape(label)}$", "^$"],
                pretty_print=False,
            )
            return json.loads(Path(path).read_text())
        except Exception as exc:
            if type(exc).__name__ == "NoDataError":
                return {"totals": {}, "files": {}}
            raise
        finally:  # coverage.py removes its output file itself when the report fails
            Path(path).unlink(missing_ok=True)

    def report(self, label: str) -> dict[str, Any]:
        """The pair's coverage (see the module docstring); call after :meth:`tick` ``force``."""
        data = self._json(label)
        totals = data.get("totals", {})
        missing_branches, missing_lines = [], []
        per_file = {}
        for file, info in sorted(data.get("files", {}).items()):
            short = _short(file, self.root)
            summary = info.get("summary", {})
            per_file[short] = {
                "branch_percent": _branch_percent(summary),
                "line_percent": _line_percent(summary),
            }
            missing_branches += [
                f"{short}:{a}->{b}" if b > 0 else f"{short}:{a}->exit"
                for a, b in info.get("missing_branches", [])
            ]
            missing_lines += [f"{short}:{n}" for n in info.get("missing_lines", [])]
        files = self._pair_files.get(label, [])
        return {
            "branch_percent": _branch_percent(totals),
            "line_percent": _line_percent(totals),
            "branches": int(totals.get("num_branches", 0)),
            "covered_branches": int(totals.get("covered_branches", 0)),
            "statements": int(totals.get("num_statements", 0)),
            "covered_lines": int(totals.get("covered_lines", 0)),
            "files": per_file,
            "missing_branches": missing_branches,
            "missing_lines": missing_lines,
            "excluded": [e.to_json() for e in exclusions(files, self.root)],
            "timeline": [list(p) for p in self._timelines.get(label, [])],
        }


def _branch_percent(totals: dict[str, Any]) -> float:
    n = int(totals.get("num_branches", 0))
    return round(100.0 * int(totals.get("covered_branches", 0)) / n, 2) if n else 100.0


def _line_percent(totals: dict[str, Any]) -> float:
    n = int(totals.get("num_statements", 0))
    return round(100.0 * int(totals.get("covered_lines", 0)) / n, 2) if n else 100.0


def _project_root() -> Path:
    return Path(__file__).resolve().parent.parent
