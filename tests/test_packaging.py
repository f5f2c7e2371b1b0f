"""pyproject.toml and environment.yml offer the same dependency set, with the pins the course needs."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _normalise(req: str) -> str:
    name, spec = re.match(r"\s*([A-Za-z0-9_.\-\[\]]+)\s*(.*)", req).groups()
    return name.lower().replace("_", "-") + spec.replace(" ", "")


def _pyproject_deps():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return sorted(_normalise(r) for r in data["project"]["dependencies"])


def _conda_pip_deps():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    deps = []
    for line in lines[start + 1:]:
        item = line.strip()
        if not item.startswith("- "):
            break
        item = item[2:]
        if item.startswith("-e"):
            continue
        deps.append(_normalise(item))
    return sorted(deps)


def test_environment_yml_matches_pyproject():
    assert _conda_pip_deps() == _pyproject_deps()


def test_pins_the_simulator_and_nbgrader_facts_demand():
    deps = dict(re.match(r"([a-z0-9\-\[\]]+)(.*)", d).groups() for d in _pyproject_deps())
    assert deps["numba"] == "==0.68.*"
    assert deps["numba-cuda"] == "==0.30.*"
    assert deps["numpy"] == ">=2,<2.5"          # numpy 2.5 breaks numba-cuda 0.30 on GPUs
    assert "nvidia-cuda-runtime" in deps        # the simulator still loads libcudart
    assert deps["jupyterlab"] == "==4.6.*" and deps["notebook"] == "==7.6.*"
    assert deps["nbgrader"] == "==0.9.6"


def test_student_install_pulls_no_torch():
    """torch is for the test suite only, so `make lab` stays lean on a machine without a GPU."""
    assert not any(d.startswith("torch") for d in _pyproject_deps())


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_kernels_is_the_course_s_package_from_any_folder(tmp_path):
    """No installed package shadows the course's ``kernels`` (transformers requires one of that name, which
    ``make install-test`` removes): a lesson's kernel runs in lessons/, where the checkout is not on sys.path."""
    import subprocess
    import sys

    for where in (ROOT / "lessons", tmp_path):
        found = subprocess.run([sys.executable, "-c", "import kernels, inference; print(kernels.__file__); "
                                "print(inference.__file__)"], cwd=where, capture_output=True, text=True)
        assert found.returncode == 0, found.stderr
        assert [pathlib.Path(line).parent for line in found.stdout.split()] == [ROOT / "kernels", ROOT / "inference"], \
            found.stdout
