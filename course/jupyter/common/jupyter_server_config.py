"""Jupyter server settings of both course labs (``make lab`` and ``make instructor-lab``)."""

import pathlib
import shutil

START_PAGE = "/lab/tree/START_HERE.ipynb"
TERMINAL_RC = pathlib.Path(__file__).resolve().parent / "terminal_rc.sh"

c = get_config()  # noqa: F821 (provided by the config loader)

# The URL the server prints and the browser opens is the start page, not the Launcher.
c.ServerApp.default_url = START_PAGE
c.LabApp.default_url = START_PAGE

# Terminals: bash reads the user's ~/.bashrc, then activates the course's virtual environment,
# so `course check` and `python` are the course's. A login shell (Jupyter's choice when its output
# is not a terminal) would let /etc/profile reset PATH and lose the environment.
bash = shutil.which("bash")
if bash:
    c.ServerApp.terminado_settings = {"shell_command": [bash, "--rcfile", str(TERMINAL_RC), "-i"]}

# Notebooks reach JupyterLab with the kernelspec and language_info their kernel will report, so
# opening one does not mark it modified (see course/notebooks.py).
c.ServerApp.contents_manager_class = "course.notebooks.KernelMetadataContentsManager"

# The file browser shows the course, not its packaging: `pip install -e .` (make lab) writes
# llm_kernels_course.egg-info at the top of the course, and caches and bytecode are noise too.
c.ContentsManager.hide_globs = ["__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*.so", "*.dylib", "*~",
                                "*.egg-info", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"]
