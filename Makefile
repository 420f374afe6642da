# The course's two commands (see README.md):
#   make course   set up .venv if needed, then execute every notebook headless into build/
#   make test     set up .venv if needed, then run the whole test suite
#   make site     run the notebooks, then build and check the course website (build/site/html)
#   make setup GPU=1   the same .venv with TensorFlow's CUDA libraries (Linux, NVIDIA GPU)
# Both create the virtual environment on first use and reuse it afterwards. The versions come from
# constraints.txt (verified together); the two pyproject.toml files only declare the supported
# ranges. .venv holds both distributions of the repository, editable: course-utils (pyproject.toml:
# the package the notebooks import, with a local JupyterLab) and course-tools
# (course_tools/pyproject.toml: the `course` command and the tests' tools).

# The first Python the course supports (3.10-3.13) found on PATH; override with `make PYTHON=python3.13 ...`.
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.10 python3; do command -v $$p >/dev/null 2>&1 && { echo $$p; break; }; done)
# pyenv's shims exist for every installed version but run only the selected one: when $(PYTHON)
# is such a shim for another installed version, that version's interpreter is used directly.
PYTHON_EXE := $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null || \
	ls $$(pyenv root 2>/dev/null)/versions/*/bin/$(PYTHON) 2>/dev/null | tail -n 1)
VENV   := .venv
BIN    := $(VENV)/bin
# GPU=1 (Linux with an NVIDIA GPU): TensorFlow's CUDA and cuDNN libraries too, the extra `gpu`
# (tensorflow[and-cuda]); remembered in .venv, so later commands keep them; GPU=0 rebuilds .venv
# without them.
GPU    ?= $(if $(wildcard $(VENV)/.with-gpu),1,)
comma  := ,
EXTRAS := jupyter$(if $(filter 1,$(GPU)),$(comma)gpu)
# One stamp per Python version (and GPU route): asking for another Python rebuilds .venv for it.
STAMP  := $(VENV)/.installed-py$(shell $(PYTHON_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)$(if $(filter 1,$(GPU)),-gpu)
# pytest-xdist: three workers. A test often waits (a Slurm job to start, a kernel, a cluster's
# workers, a cell's time limit): on two cores, two workers left them idle 18% of the suite's run
# (473 s), three 7% (422 s). `make test TEST_WORKERS=2` on a machine short of memory.
# tests/conftest.py schedules them: each test file on one worker (a module's fixture is built
# once), the notebook runs spread over them, the longest work first (kept in that order).
TEST_WORKERS ?= 3

.PHONY: setup course test doctor lab exercise site clean

# The environment is rebuilt when the wanted Python differs from the one .venv was made with.
# Last, the course's kernel under the name the notebooks carry, and JupyterLab's settings for
# the course (no news box, notebooks that open unmodified): course_tools/lab.py.
$(STAMP): pyproject.toml course_tools/pyproject.toml constraints.txt
	@test -n "$(PYTHON_EXE)" || { echo "$(PYTHON) not found: install Python 3.10-3.13, or run make PYTHON=python3.12 ..." >&2; exit 1; }
	@$(PYTHON_EXE) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 10) <= v <= (3, 13) else "The course needs Python 3.10 to 3.13, found %d.%d: run make PYTHON=python3.12 ..." % v)'
	@want=$$($(PYTHON_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	have=$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true); \
	if [ -n "$$have" ] && [ "$$have" != "$$want" ]; then echo "$(VENV) has Python $$have, $(PYTHON) is $$want: rebuilding it"; rm -rf $(VENV); fi
	@if [ "$(GPU)" != 1 ] && [ -e $(VENV)/.with-gpu ]; then echo "GPU=$(GPU): rebuilding $(VENV) without TensorFlow's CUDA libraries"; rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON_EXE) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]" -e "./course_tools[test]"
	$(if $(filter 1,$(GPU)),touch $(VENV)/.with-gpu)
	$(BIN)/python -m course_tools.lab >/dev/null
	rm -f $(VENV)/.installed-py*
	touch $(STAMP)

setup: $(STAMP)

course: $(STAMP)
	$(BIN)/course run $(ARGS)

# pytest exits 5 when it collects no test: that means the suite is missing, so it fails loudly.
test: $(STAMP)
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) --no-loadscope-reorder $(ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); the suite is missing." >&2; fi; \
	exit $$rc

# The course as a website: every notebook run as `make course` runs it (ARGS passed on), then
# static pages built from the executed copies into build/site/html, and checked (every page,
# every link inside the site, every image shown in Chromium): course_tools/site.py.
# CHROMIUM: the browser for the check (Debian's by default; e.g. CHROMIUM=$$(which google-chrome)).
CHROMIUM ?= /usr/bin/chromium
site: $(STAMP)
	$(BIN)/course run $(ARGS)
	$(BIN)/python -m course_tools.site --chromium "$(CHROMIUM)"

doctor: $(STAMP)
	$(BIN)/course doctor

# As root (a container), Jupyter refuses to start without --allow-root.
lab: $(STAMP)
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/

exercise: $(STAMP)
	$(BIN)/course exercise

clean:
	rm -rf build notebooks/artifacts solutions/artifacts exercises/artifacts
