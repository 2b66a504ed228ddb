"""Every shell command of README.md runs, as a newcomer would type it, and does what it promises.

A README command that fails on a fresh machine costs a new user more than any bug the fuzzer
finds, and a README drifts silently: options are renamed, files move, a promised output stops
being written. So each fenced shell command (``tests/readme_commands.py`` extracts them) is one
test item, run from a temporary working directory holding copies of the folders the README's
commands name (``corpus/``, ``examples/``, ``benchmarks/``, ``scripts/``), so the repository is
never written to. Commands of one README section run in order in one directory, as a reader
following the section would (a later command replays what an earlier one found).

What the suite cannot afford is explicit and explained below, rule by rule:

* ``REWRITES`` shrink a command (a campaign's budget, a benchmark's sizes) without changing
  what it exercises;
* ``NOT_RUN`` lists the commands that cannot run here (installers, the whole suite, a cluster)
  with the reason, and checks each another way;
* ``EXIT_CODES`` names the commands that must exit 1 (they find something), tied to the README
  phrase that says so; a trailing ``# ... exit 1`` comment says it too; every other command
  must exit 0;
* ``PROMISES`` checks the files a command is said to write, tied to the README phrase that
  promises them.

A README phrase a rule depends on must still be in the README, and every rule must still apply
to some command: the promise and its check move together. A command no rule covers runs as is.
The reader's own context is provided as the README describes it: their package (``mypkg``) on
PYTHONPATH, a Python file the README asks them to write ("say `test_my_quant.py`:"), ``cd``
into the directory a section made; lint commands run in the repository; real-engine commands
follow tests/engine_support.py's rule; a command repeated later in the README runs once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_support import require_engine
from readme_commands import Command, readme_commands, readme_files, split_chain, strip_comment

from fuzzkit.targets.engine_pins import SGLANG, VLLM

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMMANDS = readme_commands(README)
#: The files the README asks the reader to write (a test file), by section.
README_FILES = readme_files(README)

#: Folders of the repository the README's commands read, copied into every working directory.
COPIED = ("corpus", "examples", "benchmarks", "scripts")
#: Seconds any single README command may take before the test calls it hung.
COMMAND_TIMEOUT_S = 240

# What the README assumes the reader has: their own packages, installed (here: on PYTHONPATH),
# written the way the README describes them...
USER_PACKAGES = {
    "mypkg/__init__.py": "",
    "mypkg/scoring.py": (
        '"""The README\'s outside quant implementation: fuzzkit\'s own NumPy one, renamed."""\n'
        "from fuzzkit.targets.quant import numpy_impl\n\n\n"
        "def my_quant_impl(inputs):\n"
        "    return numpy_impl.run(inputs)\n"
    ),
    "your_module.py": (
        '"""The README\'s outside KV cache manager that accepts guard=: the shipped one."""\n'
        "from fuzzkit.targets.paged_kv.optimized import OptimizedManager as YourManager\n"
    ),
}
# ... and the files it asks the reader to write, in the working directory.
USER_FILES = {
    "accepted.json": json.dumps(
        {
            "format": "fuzzkit-known/1",
            "known": [
                {
                    "signature": "mismatch:close:*",
                    "reason": "the README's example of an accepted difference",
                    "target": "quant",
                }
            ],
        }
    ),
}


@dataclass(frozen=True)
class Rewrite:
    """Replace ``pattern`` by ``replacement`` in a command matching ``applies_to``."""

    applies_to: str
    pattern: str
    replacement: str
    reason: str
    cuts_budget: bool = False


@dataclass(frozen=True)
class NotRun:
    """A command the suite does not run, why, and how it is checked instead."""

    applies_to: str
    reason: str
    check: Callable[[str], None]


@dataclass(frozen=True)
class ExitCode:
    """A command that must exit with ``code``, because the README says ``readme_says``."""

    applies_to: str
    code: int
    readme_says: str


@dataclass(frozen=True)
class Promise:
    """Files (globs in the working directory, written by the command itself) that a command
    matching ``applies_to`` must leave, because the README says ``readme_says``."""

    applies_to: str
    paths: tuple[str, ...]
    readme_says: str
    at_least: int = 1
    finding_runs_only: bool = False  # only where the command must exit 1
    stdout_is_jsonl: bool = False  # and every line of its stdout is a JSON object


def _fast_mutant(target: str, mutant: str) -> Rewrite:
    return Rewrite(
        rf"^fuzzkit mutants {target}( --budget \S+)?$",
        r"$",
        f" --only {mutant}",
        f"every {target} mutant takes minutes; {mutant} is caught in its first cases, which is "
        "what the command's table and exit code are checked on",
    )


REWRITES: tuple[Rewrite, ...] = (
    Rewrite(
        r" \[",
        r" \[[^\]]*\]",
        "",
        "bracketed options are the synopsis' optional parts, not something to type",
    ),
    Rewrite(
        r"/tmp/fuzzkit-tour",
        r"/tmp/fuzzkit-tour",
        "fuzzkit-tour",
        "the tour's scratch directory, inside the test's working directory",
    ),
    Rewrite(
        r"^fuzzkit bisect CASE",
        r"CASE",
        "corpus/compiler/regressions/917b1dffa48063dcb291.json --mutant maximum-drops-nan",
        "CASE is the reader's failing case: a shipped regression found by the "
        "maximum-drops-nan mutant fails again under it",
    ),
    Rewrite(
        r"reports/\d{8}T\d{6}Z-seed\d+",
        r"reports/\d{8}T\d{6}Z-seed\d+",
        '"$(ls -d reports/*/ | tail -n 1)"',
        "the README's example run id stands for the reader's last run: this section's",
    ),
    Rewrite(
        r"<[a-z-]+>",
        r"<[a-z-]+>",
        "*",
        "a <placeholder> in a path stands for the file an earlier command made: a glob",
    ),
    Rewrite(
        r"^(PYTHONPATH=\S+ )?fuzzkit run (?!--resume)",
        r" --budget \S+|$",
        " --budget 2",
        "a README budget is a real campaign's (or the default 60 s); 2 s runs every stage: "
        "plan, fuzz, shrink, confirm, summary and report (a run that must find something "
        "keeps its budget: see FINDING_RUN)",
        cuts_budget=True,
    ),
    Rewrite(
        r"^(PYTHONPATH=\S+ )?fuzzkit run (?!--resume)",
        r"$",
        " --max-cases 20",
        "a seeded, bounded number of cases: the same cases on a fast or a slow machine, so "
        "the verdict does not depend on the machine's speed (a real finding here is news for "
        "its target's tests, not a README failure that comes and goes)",
        cuts_budget=True,
    ),
    Rewrite(
        r"^pytest .*--fuzzkit-budget",
        r"--fuzzkit-budget \S+",
        "--fuzzkit-budget 2",
        "seconds of fuzzing per implementation: 2 s runs the plugin's timed path",
    ),
    Rewrite(
        r"^fuzzkit run ",
        r"--workers \d+",
        "--workers 2",
        "two cores in CI: more workers only wait for a core",
    ),
    Rewrite(
        r"^fuzzkit run .*--workers",
        r"--budget 2",
        "--budget 6",
        "each worker process imports its targets before its first case: 2 s ends before "
        "any case ran, and an empty run has no reach.json to check",
        cuts_budget=True,
    ),
    Rewrite(
        r"^fuzzkit run compiler .*--isolate",
        r"^fuzzkit run compiler ",
        "fuzzkit run compiler --impl fusing ",
        "inductor's first compile costs 15-30 s in every isolated child; the isolation path "
        "is the same for the fusing compiler",
    ),
    Rewrite(
        r"^fuzzkit mutants .*--only",
        r"$",
        " --budget 30",
        "a named mutant is caught in its first cases; 30 s bounds a regression",
    ),
    _fast_mutant("paged_kv", "free-duplicate-block"),
    _fast_mutant("scheduling", "fairway_bypass_never_reset"),
    _fast_mutant("ann", "centre-without-half"),
    _fast_mutant("attention_index", "relu-dropped"),
    _fast_mutant("scute", "minus-one-not-skipped"),
    _fast_mutant("compiler", "broadcast-collapsed"),
    _fast_mutant("prefix_cache", "sglang-split-drops-lock"),
    Rewrite(
        r"^fuzzkit mutants \w+ --budget",
        r"--budget \S+",
        "--budget 30",
        "seconds per mutant: a mutant stops at its first finding; 30 s bounds a regression",
    ),
    # Benchmarks and calibration scripts measure for minutes; these sizes run every code path
    # of the script (tables, plots) in seconds.
    Rewrite(r"kvguard_overhead\.py", r"$", " --programs 5 --rounds 1", "a measurement"),
    Rewrite(r"policy_scaling\.py", r"$", " --sizes 100 --rounds 100", "a measurement"),
    Rewrite(r"recall_calibration\.py", r"$", " --cases 5", "a calibration over 1000s of cases"),
    Rewrite(r"benchmarks/scute\.py", r"$", " --batches 16", "a measurement"),
    Rewrite(r"attention_index\.py", r"$", " --contexts 1024 --seeds 1", "a measurement"),
    Rewrite(r"benchmarks/ann\.py", r"$", " --n 2000 --queries 20 --clusters 10", "a measurement"),
    Rewrite(
        r"surge\.py",
        r"$",
        " --hour 1200 --rate 0.05",
        "an hour of serving simulated after the surge: the shortest the script allows, at a "
        "twentieth of the load (2 CPU-minutes at the default rate)",
    ),
    Rewrite(r"policies\.py", r"$", " --base-rate 1 --spike-rate 5", "a measurement"),
    Rewrite(
        r"compiler_mutant_bisect\.py",
        r"$",
        " --budget 20 --only div-operands-swapped",
        "every compiler mutant for 120 s each; one shows the find-then-bisect path (at seed 0 "
        "div-operands-swapped is found in seconds; maximum-drops-nan now takes about a minute "
        "among 173 ops, and an ATen baddbmm defect can come first)",
    ),
    Rewrite(
        r"bisect_vs_minifier\.py",
        r"$",
        " --quick --no-minifier --seeds 1 --sizes 50 --tries 3 --only single-op",
        "torch's fx_minifier takes minutes per graph; one row of the bisect side runs",
    ),
)


def _help_lists(command: str, *options: str) -> Callable[[str], None]:
    def check(_: str) -> None:
        shown = _run_here(command).stdout
        missing = [option for option in options if option not in shown]
        assert not missing, f"`{command}` does not list {missing}"

    return check


def _extras_exist(text: str) -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for extras in re.findall(r"\.\[([\w,]+)\]", text):
        for extra in extras.split(","):
            assert re.search(rf"^{extra} = \[", pyproject, re.M), f"no extra {extra!r}"
    for constraints in re.findall(r"-c (\S+)", text):
        assert (ROOT / constraints).is_file(), f"{constraints} is missing"


def _in_ci_script(text: str) -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert text in ci, f"README says command 2 is what .ci/run does, but .ci/run lacks `{text}`"


def _files_exist(text: str) -> None:
    paths = [word for word in text.split() if "/" in word and not word.startswith("-")]
    assert paths, f"no paths in `{text}`"
    for path in paths:
        assert (ROOT / path).is_file(), f"`{text}` names {path}, which does not exist"


def _pins_named(text: str) -> None:
    module = text.split("-m ", 1)[1].split()[0]
    source = ROOT / "targets" / (module.removeprefix("fuzzkit.targets.").replace(".", "/") + ".py")
    assert source.is_file(), f"`{text}`: no {source.relative_to(ROOT)}"
    pins = source.read_text(encoding="utf-8")
    for pinned in re.findall(r"(\w+)==([\w.]+)", _comment_of(text)):
        assert all(part in pins for part in pinned), f"{'=='.join(pinned)} is not in {source}"


def _nothing(_: str) -> None:
    """The step is the environment the suite itself runs in (a venv with fuzzkit installed)."""


NOT_RUN: tuple[NotRun, ...] = (
    NotRun(r"^python3 -m venv ", "creates the environment this suite runs in", _nothing),
    NotRun(r"^\. \.venv/bin/activate$", "activates the environment this suite runs in", _nothing),
    NotRun(
        r"^pip install ",
        "installs into the environment this suite runs in (network); checked: the extras and "
        "the constraints file it names exist",
        _extras_exist,
    ),
    NotRun(
        r"^mypy$|^python -m pytest -n 2$",
        "the type check and this very suite: .ci/run runs them; checked: .ci/run does",
        _in_ci_script,
    ),
    NotRun(
        r"^pytest tests/",
        "tests of this suite, collected by it already; checked: the files exist",
        _files_exist,
    ),
    NotRun(
        r"engine_pins --fetch",
        "downloads 375 MB of pinned wheels (CI keeps them cached); checked: the pins named in "
        "the README's comment are the module's",
        _pins_named,
    ),
    NotRun(
        r"--backend ray --address ",
        "needs a Ray cluster at the address (tests/test_ray_cluster.py runs a local one); "
        "checked: `run --help` lists every option the command uses",
        _help_lists("fuzzkit run --help", "--backend", "--address", "--num-gpus", "--workers"),
    ),
)

#: Commands of real engines need their pinned wheel (tests/engine_support.py's one rule).
ENGINES = {
    r"(--impl |--only )vllm\b": VLLM,
    r"(--impl |--only )sglang\b|^fuzzkit (run|mutants) prefix_cache\b": SGLANG,
}

#: Commands that read the repository's source and write nothing there: they run in it.
IN_REPOSITORY = (r"^ruff ",)

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(r"--mutant norm-eps-floor --mutant hadamard-block-capped-64", 1, "# both found"),
    ExitCode(r"EngineAdapterDroppingLora", 1, "fuzzkit finds a program where a"),
    ExitCode(r"^fuzzkit bisect ", 1, "`1` findings (`replay`/`bisect`: the case still fails)"),
)

#: A run the README says finds something keeps its budget (the bug must be found however loaded
#: the machine) but stops at what it must find: ``--max-findings`` = its planted mutants, at
#: least 1.
FINDING_RUN = r"^(PYTHONPATH=\S+ )?fuzzkit run "

PROMISES: tuple[Promise, ...] = (
    Promise(
        FINDING_RUN,
        ("corpus/*/findings/*.json", "reports/*/findings/*"),
        "to `corpus/<target>/findings/` as soon as it is made, write "
        "`reports/<run-id>/summary.json`, `stats.jsonl`, `reach.json` and `findings/`",
        finding_runs_only=True,
    ),
    Promise(
        r"^(PYTHONPATH=\S+ )?fuzzkit shrink ",
        ("corpus/*/findings/*.json",),
        "write the smaller case beside it",
    ),
    Promise(
        r"^(PYTHONPATH=\S+ )?fuzzkit run (?!.*--resume)",
        ("reports/*/summary.json", "reports/*/stats.jsonl", "reports/*/reach.json"),
        "write `reports/<run-id>/summary.json`, `stats.jsonl`, `reach.json`",
    ),
    Promise(
        r"^(PYTHONPATH=\S+ )?fuzzkit run (?!.*--resume)",
        ("reports/*/index.html",),
        "with the `plots` extra, `index.html`",
    ),
    Promise(
        r"--progress jsonl",
        ("reports/*/summary.json",),
        "`jsonl` prints one status object per second and\nevery finding on stdout",
        stdout_is_jsonl=True,
    ),
    Promise(
        r"^fuzzkit run .*--coverage",
        ("reports/*/coverage.json",),
        "branch coverage table + coverage.json",
    ),
    Promise(
        r"--mutant norm-eps-floor --mutant hadamard-block-capped-64",
        ("corpus/quant/findings/*.json",),
        "# both found",
        at_least=2,
    ),
    Promise(
        r"^fuzzkit bisect ",
        ("bisected/*/*.json", "bisected/*/repro_*.py"),
        "a minimized case and a standalone repro script",
    ),
)


#: A trailing comment that promises exit 1 (``# exit 1``, ``# FAIL: exit 1``): such a command
#: needs no rule of its own.
EXIT_1_COMMENT = r"\bexit `?1\b"


def _comment_of(text: str) -> str:
    return next((command.comment for command in COMMANDS if command.text == text), "")


def _first(rules: tuple, text: str):  # type: ignore[no-untyped-def]
    return next((rule for rule in rules if re.search(rule.applies_to, text)), None)


def rewritten(command: Command) -> str:
    """The command the suite runs for a README command: every applicable rewrite, in order."""
    text = command.text
    finds = expected_exit(command) == 1 and re.search(FINDING_RUN, text) is not None
    for rule in REWRITES:
        if re.search(rule.applies_to, text) and not (finds and rule.cuts_budget):
            text = re.sub(rule.pattern, rule.replacement, text, count=1)
    if finds and "--max-findings" not in text:
        text += f" --max-findings {max(1, text.count('--mutant '))}"
    return text


def expected_exit(command: Command) -> int:
    rule = _first(EXIT_CODES, command.text)
    if rule is not None:
        return rule.code
    return 1 if re.search(EXIT_1_COMMENT, command.comment) else 0


def _environment(user_packages: Path | None) -> dict[str, str]:
    """The newcomer's shell: this venv's tools first on PATH, their own packages importable,
    one BLAS thread, nothing of the running pytest (its worker id, its plugins' variables) or
    of a chosen corpus."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "FUZZKIT_CORPUS", "HYPOTHESIS_", "COV_", "PYTHONPATH"))
    }
    if user_packages is not None:
        env["PYTHONPATH"] = str(user_packages)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "200"
    return env


def _run_here(
    command: str, cwd: Path = ROOT, user_packages: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_environment(user_packages),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------------------------------------
# Working directories: one per README section, commands run in README order


class SectionDirectories:
    """A directory per section in which that section's commands have run, in order, up to the
    last one. A test item for a later command continues there; one that comes out of order
    (``-k``, another xdist worker) rebuilds its section's earlier commands first. ``cd DIR``
    moves the section's later commands into ``DIR``, as in the reader's shell."""

    def __init__(self, root: Path, template: Path, user_packages: Path) -> None:
        self.root = root
        self.template = template
        self.user_packages = user_packages
        self.state: dict[str, tuple[Path, int]] = {}

    def run_command(self, index: int) -> tuple[Path, subprocess.CompletedProcess[str], str]:
        """Run README command ``index`` (rewritten) after its section's earlier ones; return
        the directory it ran in, its result and what went wrong in the earlier commands this
        call had to run first (nothing when the section ran in order)."""
        section = COMMANDS[index].section
        directory, done = self.state.get(section, (None, -1))
        if directory is None or done >= index:
            directory = self.root / f"{len(self.state)}-{index}"
            shutil.copytree(self.template, directory, symlinks=True)
            for file_section, name, content in README_FILES:
                if file_section == section:
                    (directory / name).write_text(content, encoding="utf-8")
            done = -1
        setup = ""
        for earlier in range(done + 1, index):
            command = COMMANDS[earlier]
            if command.section == section and not _first(NOT_RUN, command.text):
                directory, result = self._run(command, directory)
                if result.returncode != expected_exit(command):
                    setup += f"\nearlier `{command.text}` exited {result.returncode}"
        moved_to, result = self._run(COMMANDS[index], directory)
        self.state[section] = (moved_to, index)
        return directory, result, setup

    def _run(
        self, command: Command, directory: Path
    ) -> tuple[Path, subprocess.CompletedProcess[str]]:
        text = rewritten(command)
        if any(re.search(pattern, text) for pattern in IN_REPOSITORY):
            return directory, _run_here(text, ROOT, self.user_packages)
        result = _run_here(text, directory, self.user_packages)
        if text.startswith("cd ") and result.returncode == 0:
            directory = directory / text.split(maxsplit=1)[1]
        return directory, result


@pytest.fixture(scope="session")
def section_directories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SectionDirectories]:
    template = tmp_path_factory.mktemp("readme-template")
    for folder in COPIED:
        shutil.copytree(ROOT / folder, template / folder, ignore=_unneeded)
    user_packages = tmp_path_factory.mktemp("readme-user-packages")
    for base, files in ((template, USER_FILES), (user_packages, USER_PACKAGES)):
        for relative, content in files.items():
            (base / relative).parent.mkdir(parents=True, exist_ok=True)
            (base / relative).write_text(content, encoding="utf-8")
    yield SectionDirectories(tmp_path_factory.mktemp("readme-sections"), template, user_packages)


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _unneeded(_: str, names: list[str]) -> set[str]:
    return {name for name in names if name in ("__pycache__", ".hypothesis", "findings")}


# ---------------------------------------------------------------------------------------------
# The tests


def test_the_extraction_finds_the_readme_commands() -> None:
    """A broken parser must not pass by finding nothing: the README has dozens of commands,
    among them the two of its first screen, each a single command without a comment."""
    texts = [command.text for command in COMMANDS]
    assert len(texts) >= 40, texts
    assert sum(text.startswith("fuzzkit run ") for text in texts) >= 15
    assert "fuzzkit run --all --budget 60" in texts
    assert "python -m pytest -n 2" in texts
    for text in texts:
        assert text and not text.endswith("\\") and "&&" not in text, text
        assert strip_comment(text) == (text, ""), text


def test_the_splitting_rules() -> None:
    assert strip_comment("fuzzkit run x   # a #3 comment") == ("fuzzkit run x", "a #3 comment")
    assert strip_comment("echo 'a # b' x#y") == ("echo 'a # b' x#y", "")
    assert split_chain("a && b 'c && d' && e") == ["a", "b 'c && d'", "e"]


def test_every_rule_applies_to_a_readme_command_and_its_phrase_is_in_the_readme() -> None:
    """A rule for a command the README no longer has would hide that the promise went."""
    texts = [command.text for command in COMMANDS]
    readme = " ".join(README.read_text(encoding="utf-8").split())
    for rule in (*REWRITES, *NOT_RUN, *EXIT_CODES, *PROMISES):
        assert any(re.search(rule.applies_to, text) for text in texts), rule
        phrase = getattr(rule, "readme_says", None)
        assert phrase is None or " ".join(phrase.split()) in readme, phrase
    for pattern in (*IN_REPOSITORY, *ENGINES):
        assert any(re.search(pattern, text) for text in texts), pattern


@pytest.mark.parametrize(
    "index",
    [
        # One README section's commands on one xdist worker, in order (tests/conftest.py).
        pytest.param(
            i, id=command.test_id, marks=pytest.mark.xdist_group(f"readme:{command.section}")
        )
        for i, command in enumerate(COMMANDS)
    ],
)
def test_readme_command(index: int, section_directories: SectionDirectories) -> None:
    command: Command = COMMANDS[index]
    same = next((c for c in COMMANDS[:index] if c.text == command.text), None)
    if same is not None:
        pytest.skip(f"the same command as README line {same.line}, which runs it")
    not_run = _first(NOT_RUN, command.text)
    if not_run is not None:
        not_run.check(command.text)
        return
    for pattern, pin in ENGINES.items():
        if re.search(pattern, command.text):
            require_engine(pin)  # skips without the pinned wheel; fails where CI requires it
    text = rewritten(command)
    started = time.time() - 1
    directory, result, setup = section_directories.run_command(index)
    output = (result.stdout + result.stderr)[-3000:] + setup
    assert result.returncode == expected_exit(command), (
        f"README line {command.line}: `{command.text}` ran as `{text}` in {directory} and "
        f"exited {result.returncode}, not {expected_exit(command)}:\n{output}"
    )
    for promise in PROMISES:
        if promise.finding_runs_only and expected_exit(command) != 1:
            continue
        if re.search(promise.applies_to, command.text):
            for pattern in promise.paths:
                made = [p for p in directory.glob(pattern) if p.stat().st_mtime >= started]
                assert len(made) >= promise.at_least, (
                    f"README line {command.line}: `{text}` left {len(made)} {pattern}, but the "
                    f"README promises it ({promise.readme_says!r}):\n{output}"
                )
            if promise.stdout_is_jsonl:
                lines = result.stdout.splitlines()
                assert lines and all(map(_is_json_object, lines)), (
                    f"README line {command.line}: `{text}` promises JSON lines on stdout "
                    f"({promise.readme_says!r}):\n{output}"
                )
