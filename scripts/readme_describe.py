"""Regenerate the README's "Inputs and outputs" blocks from the targets' schemas.

Each ``<!-- describe:NAME -->`` ... ``<!-- /describe:NAME -->`` block of README.md is replaced
by ``fuzzkit describe --markdown NAME``; everything else is left as it is.  Run it after
changing a target's schema (``tests/test_describe.py`` fails until the README is current):

    python scripts/readme_describe.py            # rewrite README.md in place
    python scripts/readme_describe.py --check    # exit 1 if any block is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzzkit.describe import readme_blocks, sync_readme

README = Path(__file__).resolve().parent.parent / "README.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    current = sync_readme(text)
    stale = sorted(
        name for name, body in readme_blocks(text).items() if readme_blocks(current)[name] != body
    )
    if args.check:
        print(f"stale blocks: {', '.join(stale)}" if stale else "README blocks are current")
        return 1 if stale else 0
    if current != text:
        args.readme.write_text(current, encoding="utf-8")
    print(f"rewrote {', '.join(stale)}" if stale else "README blocks are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
