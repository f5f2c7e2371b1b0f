"""nbgrader plumbing shared by release and grading: the course root, its config, an API object.

nbgrader reads ``nbgrader_config.py`` at the course root (the repository). The grader runs
nbgrader in-process through ``nbgrader.apps.NbGraderAPI`` with that same configuration, changing
only where things go (a temporary release directory, a gradebook outside the repository), so the
command line ``nbgrader ...`` and ``course release``/``course grade`` always agree.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import sys
import tempfile

PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG_NAME = "nbgrader_config.py"


def course_root(start: str | os.PathLike | None = None) -> pathlib.Path:
    """The nbgrader course root: the first folder from ``start`` (default: cwd) upwards that holds
    ``nbgrader_config.py`` and ``solutions/``; the project checkout when there is none."""
    here = pathlib.Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_NAME).is_file() and (folder / "solutions").is_dir():
            return folder
    return PROJECT_ROOT


def assignments(root: pathlib.Path) -> list[str]:
    """Assignment names in ``root/solutions``: folders ``dayNN_slug`` holding ``dayNN_slug.ipynb``."""
    source = pathlib.Path(root) / "solutions"
    if not source.is_dir():
        return []
    return sorted(d.name for d in source.iterdir() if (d / f"{d.name}.ipynb").is_file())


def load_config(root: pathlib.Path, **overrides):
    """The traitlets Config of ``root/nbgrader_config.py`` with ``overrides`` applied.

    overrides: ``{"CourseDirectory.release_directory": "/tmp/x", "Execute.timeout": 60}``.
    """
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    root = pathlib.Path(root)
    config = Config()
    if (root / CONFIG_NAME).is_file():
        config.merge(PyFileConfigLoader(CONFIG_NAME, path=str(root)).load_config())
    config.CourseDirectory.root = str(root)
    for dotted, value in overrides.items():
        section, _, name = dotted.rpartition(".")
        setattr(config[section], name, value)
    return config


@contextlib.contextmanager
def venv_on_path():
    """Put this interpreter's bin folder first on PATH: nbgrader runs ``alembic`` from there."""
    old = os.environ.get("PATH", "")
    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


def make_api(config):
    """An ``NbGraderAPI`` for ``config`` whose log goes nowhere (results carry their own log)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    if "root" not in config.get("Exchange", {}):
        # Grading never uses the exchange; without this nbgrader complains its default is unwritable.
        config.Exchange.root = tempfile.gettempdir()
    coursedir = CourseDirectory(config=config)
    api = NbGraderAPI(coursedir=coursedir, config=config)
    api.log.handlers[:] = [logging.NullHandler()]
    api.log.propagate = False
    return api


def run_api(method, *args, **kwargs) -> dict:
    """Call an ``NbGraderAPI`` method with the venv on PATH; raise RuntimeError when it fails."""
    with venv_on_path():
        result = method(*args, **kwargs)
    if not result.get("success"):
        raise RuntimeError(f"nbgrader {method.__name__}{args} failed:\n{result.get('log', '')}\n"
                           f"{result.get('error', '')}")
    return result
