"""Instructor and CI tooling: the `course` command, headless notebook runs, the benchmark report,
exercise generation and grading. Students never need to open this subpackage; the notebooks
import only the modules one level up.
"""
