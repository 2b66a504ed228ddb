"""Shrinkers: Hypothesis for generated cases, ddmin for cases from anywhere else."""
