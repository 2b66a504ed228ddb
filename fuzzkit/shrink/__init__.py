"""Shrinkers: Hypothesis for generated cases, a target's minimization hooks (``hook``; ddmin over
``reducible`` by default, ``ddmin``) for cases from anywhere else."""
