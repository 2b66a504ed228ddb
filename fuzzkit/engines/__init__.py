"""Engines make cases: Hypothesis (default) and atheris (coverage-guided, optional)."""
