"""The pytest plugin as a newcomer meets it: from a project of their own, outside fuzzkit.

A temporary project holds a package with a correct ``quant`` implementation and one with a
planted bug, and a test file that is exactly the README's documented example (taken from the
README, so the two cannot drift).  pytest runs in a subprocess from that project, with a fresh
``.hypothesis/``, no fuzzkit environment variables, and the plugin active only through the
installed entry point:

(a) the documented usage passes on its first run (no Hypothesis deadline error);
(b) ``--fuzzkit-budget 10`` fuzzes the user's implementation and none of fuzzkit's built-in pairs;
(c) the planted bug fails with a report of at most 25 lines naming the signature, the saved case
    file and the replay command -- and that command, run as printed, finds the bug again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Fuzzing your own implementation\n"

SCORING = '''
"""The user's own quant implementations."""
from fuzzkit.targets.quant import numpy_impl


def my_quant_impl(inputs):
    """Correct: fuzzkit's NumPy implementation."""
    return numpy_impl.run(inputs)


def planted_bug_quant_impl(inputs):
    """Scores 1% too large."""
    outputs = dict(numpy_impl.run(inputs))
    outputs["scores"] = outputs["scores"] * 1.01
    return outputs
'''


def readme_example() -> str:
    """The README's pytest example (the first python block of its section)."""
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"README section {SECTION.strip()!r} has no python example"
    return match.group(1)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("outside-project")
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "scoring.py").write_text(SCORING)
    example = readme_example()
    assert "impl=my_quant_impl" in example and "fuzzkit_fuzz()" in example
    (root / "test_my_quant.py").write_text(example)
    planted = example.replace("my_quant_impl", "planted_bug_quant_impl")
    (root / "test_planted.py").write_text(planted)
    return root


def user_environment() -> dict[str, str]:
    """A newcomer's shell: this venv's tools first on PATH, no fuzzkit or Python path settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("FUZZKIT_", "PYTEST_", "HYPOTHESIS")) and key != "PYTHONPATH"
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(OMP_NUM_THREADS="1", NO_COLOR="1", COLUMNS="200")
    return env


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def junit_cases(junit: Path) -> list[str]:
    return [case.get("name", "") for case in ET.parse(junit).iter("testcase")]


def test_documented_usage_passes_on_its_first_run(project: Path) -> None:
    assert not (project / ".hypothesis").exists()
    result = run_pytest(project, "test_my_quant.py", "--junitxml=first.xml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert (project / ".hypothesis").exists()  # it really was Hypothesis's first run here
    assert sorted(junit_cases(project / "first.xml")) == [
        "test_fuzz_my_quant[quant-my_quant_impl]",
        "test_my_quant_agrees[quant-my_quant_impl]",
    ]


def test_budget_fuzzes_only_the_users_implementation(project: Path) -> None:
    # the property test is left out for time; fuzzkit's built-in items, were there any, are not
    result = run_pytest(
        project,
        "test_my_quant.py",
        "--fuzzkit-budget",
        "10",
        "-k",
        "not agrees",
        "--junitxml=b.xml",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert junit_cases(project / "b.xml") == ["test_fuzz_my_quant[quant-my_quant_impl]"]


def test_planted_bug_gives_a_short_report_whose_replay_finds_it(project: Path) -> None:
    node = "test_planted.py::test_fuzz_my_quant[quant-planted_bug_quant_impl]"
    result = run_pytest(project, node)
    assert result.returncode == 1, result.stdout[-3000:]
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("___"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("___", "===")))
    section = lines[start:end]
    assert len(section) <= 25, "\n".join(section)
    text = "\n".join(section)
    assert re.search(r"^mismatch:\S+", text, re.M), text
    case = re.search(r"minimized case: (corpus/quant/findings/\w+\.json)$", text, re.M)
    assert case and (project / case.group(1)).is_file(), text
    replay = re.search(r"replay: (.*)$", text, re.M)
    assert replay, text
    command = replay.group(1)
    assert f"fuzzkit replay {case.group(1)} --impl mypkg.scoring:planted_bug_quant_impl" in command
    again = subprocess.run(
        command,
        shell=True,
        cwd=project,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
