"""Instructor and CI tooling: the `course` command, headless notebook runs, the benchmark report,
exercise generation and grading, the Colab cells and the website. Its own distribution,
course-tools (pyproject.toml in this folder), which `make setup` installs beside the student
package, course_utils; the notebooks never import it (the solution's hidden tests aside: they are
the grader's checks).
"""
