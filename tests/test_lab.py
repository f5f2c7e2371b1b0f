"""`make lab` serves the student's JupyterLab: it opens at the start page, hides nbgrader's instructor
tools, and its terminals have the course's environment; `make instructor-lab` has the tools. The
start page runs, and every notebook is stored the way JupyterLab would save it."""

import asyncio
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from course.notebooks import normalise, normalised_text

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKEN = "course-test-token"
START_PAGE = "/lab/tree/START_HERE.ipynb"
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:course-list")
# Without an nbgrader exchange the Assignments list only shows errors, so the student's lab hides
# it too, with the nbgrader menu that would list the hidden tools.
HIDDEN_FROM_STUDENTS = (*INSTRUCTOR_PLUGINS, "@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:menu")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url):
    """``(status, body)`` of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


class Lab:
    """A JupyterLab started by a make target, on a free port of the loopback address."""

    def __init__(self, port, proc, log):
        self.port, self.proc, self.log = port, proc, log
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path):
        separator = "&" if "?" in path else "?"
        return _get(f"{self.base}{path}{separator}token={TOKEN}")

    def output(self):
        return self.log.read_text(errors="replace")

    def printed_url(self):
        """The URL the server printed for opening the lab (the one a student pastes in a browser)."""
        urls = re.findall(rf"http://127\.0\.0\.1:{self.port}/\S*", self.output())
        return urls[0] if urls else None

    def page_config(self, path=START_PAGE):
        status, page = self.get(path)
        assert status == 200 and "JupyterLab" in page, f"{path} answered {status}"
        found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
        assert found, "the lab page has no jupyter-config-data"
        return json.loads(found.group(1))

    def terminal(self, command, timeout=60):
        """Run ``command`` in a new terminal of the lab, as a student typing it; return its output."""
        from tornado.websocket import websocket_connect

        request = urllib.request.Request(f"{self.base}/api/terminals?token={TOKEN}", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as r:
            name = json.loads(r.read())["name"]
        done = "END-OF-COMMAND"

        async def talk():
            ws = await websocket_connect(f"ws://127.0.0.1:{self.port}/terminals/websocket/{name}?token={TOKEN}")
            # The marker is printed by the shell, so the echo of the typed line cannot match it.
            await ws.write_message(json.dumps(["stdin", f"{command}; echo {done[:6]}''{done[6:]}\r"]))
            out = ""
            while done not in out:
                message = await asyncio.wait_for(ws.read_message(), timeout)
                assert message is not None, f"the terminal closed; it printed:\n{out}"
                kind, *data = json.loads(message)
                if kind == "stdout":
                    out += data[0]
            ws.close()
            return out.split(done)[0]

        try:
            return asyncio.run(talk())
        finally:
            urllib.request.urlopen(urllib.request.Request(f"{self.base}/api/terminals/{name}?token={TOKEN}",
                                                          method="DELETE"), timeout=10)


def _checkpoint_folders():
    return {folder for path in _notebooks() if (folder := (ROOT / path).parent / ".ipynb_checkpoints").is_dir()}


@contextlib.contextmanager
def running_lab(target, tmp_path):
    """Start ``make <target>`` as a student would (no virtual environment active, the venv not on
    PATH), wait until it serves the start page, and stop it afterwards."""
    port = _free_port()
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "JUPYTER_CONFIG_PATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    log = tmp_path / f"{target}.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["make", "-s", target, f"PORT={port}",
             # A workspace folder of its own: no tabs restored from an earlier session.
             f"LAB_ARGS=--no-browser --IdentityProvider.token={TOKEN} --ServerApp.ip=127.0.0.1 "
             f"--LabApp.workspaces_dir={tmp_path / 'workspaces'} "
             # Checkpoints outside the checkout: other tests read exercises/ while this one runs.
             f"--FileCheckpoints.root_dir={tmp_path / 'checkpoints'}"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lab = Lab(port, proc, log)
    checkpoints_before = _checkpoint_folders()
    try:
        deadline = time.time() + 120
        while True:
            try:
                if lab.get(START_PAGE)[0] == 200 and lab.printed_url():
                    break
            except OSError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                raise AssertionError(f"make {target} did not start JupyterLab:\n{lab.output()}")
            time.sleep(0.5)
        yield lab
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        # JupyterLab keeps a checkpoint of each notebook it opens: leave the checkout as it was.
        for folder in _checkpoint_folders() - checkpoints_before:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    """One `make lab` for the module's tests of the student's lab."""
    with running_lab("lab", tmp_path_factory.mktemp("student_lab")) as lab:
        yield lab


def test_make_lab_is_the_students_lab(student_lab):
    lab = student_lab
    url = urllib.parse.urlparse(lab.printed_url())
    assert url.path == START_PAGE, f"make lab printed {lab.printed_url()}, which is not the start page"
    status, body = lab.get("/api/contents/START_HERE.ipynb")
    assert status == 200 and "The days" in "".join(_source(c) for c in json.loads(body)["content"]["cells"])
    status, body = lab.get("/api/contents/")
    shown = {item["name"] for item in json.loads(body)["content"]}
    assert status == 200 and {"lessons", "exercises", "START_HERE.ipynb"} <= shown, shown
    assert not [name for name in shown if name.endswith(".egg-info")], f"the file browser shows {sorted(shown)}"

    disabled = lab.page_config()["disabledExtensions"]
    for plugin in HIDDEN_FROM_STUDENTS:
        assert plugin in disabled, f"the student's lab shows {plugin}"
    assert "@jupyter/nbgrader:validate-assignment" not in disabled, "the Validate button must stay"
    for path in ("/formgrader", "/assignments", "/courses"):
        assert lab.get(path)[0] == 404, f"the student's lab serves nbgrader's {path}"

    printed = lab.terminal("command -v course python; course check --help")
    assert f"{ROOT}/.venv/bin/course" in printed and f"{ROOT}/.venv/bin/python" in printed, printed
    assert "usage: course check" in printed, printed


CHROMIUM = next((path for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(path)), None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


# CI sets COURSE_REQUIRE_BROWSER=1 (.ci/run installs Chromium): there a missing browser fails, never skips.
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("COURSE_REQUIRE_BROWSER"),
                    reason="needs Chromium (Debian: apt-get install chromium)")
def test_student_lab_in_a_browser(student_lab, tmp_path):
    """What a student sees: the start page opens with no error dialog and no nbgrader tools but
    the Validate button, and neither it nor an exercise shows as modified once its kernel is idle."""
    from playwright.sync_api import sync_playwright

    def settled(page, name):
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        # JupyterLab rewrites the notebook's metadata once the kernel answers: wait for that.
        page.wait_for_function("() => document.body.innerText.includes('| Idle')", timeout=120_000)
        page.wait_for_timeout(3000)
        page.screenshot(path=str(tmp_path / f"{name}.png"))
        dirty = page.eval_on_selector_all(".lm-DockPanel .lm-TabBar-tab.jp-mod-dirty", "tabs => tabs.map(t => t.innerText)")
        assert dirty == [], f"{name}: shows as modified on open ({dirty}); screenshot in {tmp_path}"
        dialogs = page.eval_on_selector_all(".jp-Dialog", "ds => ds.map(d => d.innerText)")
        assert dialogs == [], f"{name}: error dialog {dialogs}"

    lab = student_lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(lab.printed_url().replace("token=...", f"token={TOKEN}"))
            settled(page, "start_page")
            assert urllib.parse.urlparse(page.url).path == START_PAGE
            menus = page.eval_on_selector_all(".lm-MenuBar-itemLabel", "ms => ms.map(m => m.innerText)")
            assert "Nbgrader" not in menus and "Kernel" in menus, menus
            assert page.query_selector("#nbgrader-create_assignemnt") is None, "Create Assignment is shown"
            assert page.get_by_text("Validate", exact=True).count() >= 1, "the Validate button is missing"
            exercise = "exercises/day01_gpu_model/day01_gpu_model.ipynb"
            page.goto(f"{lab.base}/lab/workspaces/exercise/tree/{exercise}?reset&token={TOKEN}")
            settled(page, "exercise")
        finally:
            browser.close()


def test_make_instructor_lab_has_the_nbgrader_tools(tmp_path):
    with running_lab("instructor-lab", tmp_path) as lab:
        assert urllib.parse.urlparse(lab.printed_url()).path == START_PAGE
        disabled = lab.page_config().get("disabledExtensions", [])
        assert not set(INSTRUCTOR_PLUGINS) & set(disabled), disabled
        status, page = lab.get("/formgrader")
        assert status == 200 and "formgrader" in page.lower()
        assert f"{ROOT}/.venv/bin/course" in lab.terminal("command -v course")


def _source(cell):
    return "".join(cell["source"])


def test_start_page_lists_every_day_and_links_exist():
    nb = json.loads((ROOT / "START_HERE.ipynb").read_text())
    text = "".join(_source(c) for c in nb["cells"])
    for day in sorted((ROOT / "lessons").glob("day*.ipynb")):
        assert f"lessons/{day.name}" in text, f"start page does not link {day.name}"
    for link in re.findall(r"\]\(((?:lessons|exercises)/[^)]+)\)", text):
        assert (ROOT / link).exists(), f"start page links {link}, which does not exist"
    for exercise in sorted((ROOT / "exercises").glob("day*/day*.ipynb")):
        assert exercise.relative_to(ROOT).as_posix() in text, f"start page does not link {exercise.name}"


def _notebooks():
    return sorted(p.relative_to(ROOT) for folder in ("", "lessons", "exercises", "solutions")
                  for p in (ROOT / folder).glob("*.ipynb" if not folder else "**/*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def _first_code_cell(path):
    nb = json.loads((ROOT / path).read_text())
    return _source(next(c for c in nb["cells"] if c["cell_type"] == "code"))


@pytest.mark.parametrize("path", _notebooks(), ids=str)
def test_first_cell_selects_the_device_and_shows_no_value(path):
    """The first cell imports and selects the device, and its last line is not an expression whose
    value (``'simulator'``) the notebook would print under the cell."""
    import ast

    source = _first_code_cell(path)
    assert "course.use_device(" in source, f"{path}: the first code cell does not select the device"
    last = ast.parse(source).body[-1]
    assert not isinstance(last, ast.Expr) or isinstance(last.value, ast.Constant), (
        f"{path}: the first cell ends with an expression, so the notebook shows its value: {ast.unparse(last)}")


def test_start_page_first_cell_runs_and_prints_the_device():
    source = _first_code_cell("START_HERE.ipynb")
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COURSE_DEVICE": "simulator"})
    assert proc.returncode == 0 and "simulator" in proc.stdout, proc.stderr


@pytest.mark.parametrize("path", _notebooks(), ids=str)
def test_notebook_is_stored_as_jupyterlab_saves_it(path):
    """JupyterLab marks a notebook modified as soon as it opens when its stored metadata differs
    from what the lab writes on open; ``course.notebooks.normalise`` writes it that way."""
    text = (ROOT / path).read_text(encoding="utf-8")
    fixed = normalised_text(text)
    if text != fixed:
        first = next(i for i, (a, b) in enumerate(zip(text.splitlines(), fixed.splitlines() + [""])) if a != b)
        pytest.fail(f"{path} is not normalised (line {first + 1}: {text.splitlines()[first].strip()!r} "
                    f"should read {fixed.splitlines()[first].strip()!r}): run python -m course.notebooks {path}")


def test_normalise_fixes_what_marks_a_notebook_modified():
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": [],
                     "execution_count": None}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 4}
    fixed = normalise(json.loads(json.dumps(nb)))
    assert fixed["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert fixed["nbformat_minor"] == 5 and fixed["cells"][0]["id"]
    assert normalise(json.loads(json.dumps(fixed))) == fixed
    with pytest.raises(ValueError, match="nb must be an nbformat 4 notebook"):
        normalise({"cells": [], "nbformat": 3})
