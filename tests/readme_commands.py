"""The shell commands of README.md, as a newcomer would type them.

The README is the first thing a new user runs, so ``tests/test_readme.py`` runs every command in
it. This module only reads: it finds the fenced shell blocks, joins ``\\`` continuations, drops
comments and splits ``&&`` chains into the commands they chain, keeping each command's README
line and trailing comment (a comment such as "both found" is what the README promises about the
command). What to run, skip or rewrite is decided in the test, where the rules are listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class Command:
    """One command of the README: its text (comment dropped), its trailing comment, the README
    line it starts on, the commands chained before it with ``&&`` in the same line (their
    effects, e.g. an activated venv, are the context it runs in) and its section heading."""

    text: str
    comment: str
    line: int
    chained_after: tuple[str, ...]
    section: str

    @property
    def test_id(self) -> str:
        """A pytest id from the command text: readable and unique enough with the line."""
        words = re.sub(r"[^A-Za-z0-9_.:=/-]+", " ", self.text).split()
        return f"L{self.line}-" + "-".join(words)[:80]


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # the line of the first body line, 1-based
    body: list[str]
    section: str
    introduced_by: str  # the last non-blank line before the fence


#: Prose that names the file a code block is: "A test file, say `test_my_quant.py`:".
FILE_INTRO = re.compile(r"`([\w.-]+\.py)`:\s*$")


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, with its language tag and section heading."""
    blocks: list[Block] = []
    section = ""
    last_prose = ""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = FENCE.match(line)
        if opening is None:
            if line.startswith("#"):  # headings repeat ("Inputs and outputs"): keep the line
                section = f"{line.lstrip('#').strip()} (line {index + 1})"
            if line.strip():
                last_prose = line
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[index + 1 : end]
        blocks.append(Block(opening.group(1), index + 2, body, section, last_prose))
        last_prose = ""
        index = end + 1
    return blocks


def strip_comment(line: str) -> tuple[str, str]:
    """Split a shell line into code and trailing comment: a ``#`` that starts a word outside
    quotes starts the comment (so ``vLLM #3264`` inside a comment, ``'a#b'`` and ``x#y`` stay
    where they belong)."""
    quote = ""
    for position, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position].rstrip(), line[position + 1 :].strip()
    return line.rstrip(), ""


def split_chain(code: str) -> list[str]:
    """Split ``a && b && c`` into its commands (outside quotes)."""
    parts: list[str] = []
    quote = ""
    start = 0
    position = 0
    while position < len(code):
        char = code[position]
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif code.startswith("&&", position):
            parts.append(code[start:position].strip())
            start = position + 2
            position += 1
        position += 1
    parts.append(code[start:].strip())
    return [part for part in parts if part]


def block_commands(block: Block) -> list[Command]:
    """The commands of one shell block; a ``$ `` prompt (console blocks) is dropped, and lines
    of a console block without one are output, not commands."""
    commands: list[Command] = []
    pending = ""
    pending_comments: list[str] = []
    pending_line = 0
    for offset, raw in enumerate(block.body):
        line = raw
        if block.language == "console":
            if not (line.startswith("$ ") or pending):
                continue
            line = line[2:] if line.startswith("$ ") else line
        code, comment = strip_comment(line)
        if not pending:
            pending_line = block.line + offset
        if comment:
            pending_comments.append(comment)
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        pending += code
        if pending.strip():
            chain = split_chain(pending.strip())
            for position, part in enumerate(chain):
                commands.append(
                    Command(
                        text=part,
                        comment=" ".join(pending_comments),
                        line=pending_line,
                        chained_after=tuple(chain[:position]),
                        section=block.section,
                    )
                )
        pending = ""
        pending_comments = []
    return commands


def readme_commands(path: Path) -> list[Command]:
    """Every shell command of the README, in order."""
    commands: list[Command] = []
    for block in fenced_blocks(path.read_text(encoding="utf-8")):
        if block.language in SHELL_LANGUAGES:
            commands.extend(block_commands(block))
    return commands


def readme_files(path: Path) -> list[tuple[str, str, str]]:
    r"""The files the README asks the reader to write, as ``(section, file name, content)``: a
    Python block introduced by prose ending in ``\`NAME.py\`:``."""
    files = []
    for block in fenced_blocks(path.read_text(encoding="utf-8")):
        named = FILE_INTRO.search(block.introduced_by)
        if block.language == "python" and named:
            files.append((block.section, named.group(1), "\n".join(block.body) + "\n"))
    return files
