"""Instructor and CI tooling: the `course` command, headless notebook runs, the benchmark report,
exercise generation and grading. Students never need to open this subpackage; the notebooks
import only the modules one level up, except notebook 4, which copies `cluster_tf_config.py` (the
Slurm launcher) next to its worker scripts.
"""
