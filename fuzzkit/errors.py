"""User-facing errors: each becomes one line on stderr and exit code 2 at the command line."""

from __future__ import annotations


class FuzzkitError(Exception):
    """Base of the errors a user can mend: the message says what is wrong and how to fix it."""


class UsageError(FuzzkitError):
    """Bad arguments, unknown targets or implementations, a missing optional package."""


class CaseFileError(FuzzkitError):
    """A case file that is corrupt, truncated, hostile or of the wrong schema."""
