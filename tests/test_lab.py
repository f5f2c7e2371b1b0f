"""`make lab` serves JupyterLab with the start page, and the start page runs."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


def test_make_lab_serves_the_start_page():
    port, token = _free_port(), "course-test-token"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    proc = subprocess.Popen(
        ["make", "-s", "lab", f"PORT={port}",
         f"LAB_ARGS=--no-browser --IdentityProvider.token={token} --ServerApp.ip=127.0.0.1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                status, page = _get(f"{base}/lab/tree/START_HERE.ipynb?token={token}")
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise AssertionError("JupyterLab did not start:\n" + (proc.stdout.read() if proc.poll() is not None else ""))
                time.sleep(0.5)
        assert status == 200 and "JupyterLab" in page
        status, body = _get(f"{base}/api/contents/START_HERE.ipynb?token={token}")
        content = json.loads(body)["content"]
        assert "The days" in "".join(c["source"] for c in content["cells"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def test_start_page_lists_every_day_and_links_exist():
    nb = json.loads((ROOT / "START_HERE.ipynb").read_text())
    text = "".join(c["source"] for c in nb["cells"])
    for day in sorted((ROOT / "lessons").glob("day*.ipynb")):
        assert f"lessons/{day.name}" in text, f"start page does not link {day.name}"
    import re

    for link in re.findall(r"\]\(((?:lessons|exercises)/[^)]+)\)", text):
        assert (ROOT / link).exists(), f"start page links {link}, which does not exist"
    assert "(coming)" in text


def test_start_page_first_cell_only_selects_the_device():
    nb = json.loads((ROOT / "START_HERE.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "".join(code[0]["source"]).strip() == "import course\ncourse.use_device()"
    proc = subprocess.run([sys.executable, "-c", "".join(code[0]["source"])], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COURSE_DEVICE": "simulator"})
    assert proc.returncode == 0 and "simulator" in proc.stdout
