"""nbgrader's Execute step, made to survive what submissions do: crashes, hangs and cheating.

``GuardedExecute`` replaces ``nbgrader.preprocessors.Execute`` in autograding. Differences:

- before the first cell it installs ``grader.guard`` in the kernel (no reading grader files, no
  processes or network) and silences warnings (nbgrader scores a grade cell 0 when it writes to
  stderr, and a harmless NumbaPerformanceWarning would do that);
- when a cell times out (``timeout`` seconds) or the kernel dies (``os._exit``, a segfault, out of
  memory), the cell gets an error output that says so, the event is recorded, and grading goes
  on in a fresh kernel: the notebook's non-grade code cells before that cell are run again
  (outputs discarded; cells that timed out or crashed are not) to rebuild the state, then
  execution continues with the next cell. So a
  hanging kernel in exercise 2 costs exercise 2, not exercise 3. After ``max_restarts`` restarts,
  or when the rebuild itself fails, every remaining code cell gets a "not run" error (grade cells
  then score 0, never full marks by silence);
- events go to ``events_file`` (JSON) for the grader to turn into a status.
"""

from __future__ import annotations

import json

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer, Unicode

TIMEOUT_ENAME = "CellTimeoutError"


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _label(cell, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"


def _is_grade(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


class GuardedExecute(Execute):
    """Execute cells with a guard in the kernel, recovering from timeouts and crashes."""

    guard_policy = Unicode("", help="JSON policy for grader.guard.install; empty: no guard").tag(config=True)
    events_file = Unicode("", help="where to write the JSON list of timeouts and crashes").tag(config=True)
    working_dir = Unicode("", help="the kernel's working folder (default: nbgrader's)").tag(config=True)
    max_restarts = Integer(3, help="kernel restarts allowed per notebook before giving up").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        # Same set-up as ExecutePreprocessor.preprocess, then our own loop over kernels.
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self.events: list[dict] = []
        self._failed: set[int] = set()     # cells that timed out or crashed: never run again
        start, restarts = 0, 0
        while start is not None:
            kwargs = {"cwd": self.working_dir} if self.working_dir else {}
            with self.setup_kernel(**kwargs):
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                self._prepare_kernel()
                if start and not self._rebuild_state(start):
                    self._mark_not_run(start, f"the kernel could not be restarted after {self.events[-1]['cell']}")
                    start = None
                else:
                    start = self._run_cells(start, resources)
                if start is not None:
                    restarts += 1
                    # A dead or stuck kernel is killed, not asked to shut down politely.
                    self.shutdown_kernel = "immediate"
            if start is not None and restarts > self.max_restarts:
                self._mark_not_run(start, f"grading stopped after {self.max_restarts} kernel restarts")
                start = None
        self.set_widgets_metadata()
        self._write_events()
        return self.nb, self.resources

    def _prepare_kernel(self) -> None:
        code = "import warnings as _w\n_w.simplefilter('ignore')\ndel _w\n"
        if self.guard_policy:
            code += (f"import grader.guard as _g\n_g.install({self.guard_policy!r})\ndel _g\n")
        reply = self._quiet(code)
        if reply != "ok":
            raise RuntimeError(f"could not prepare the grading kernel: {reply}")

    def _quiet(self, source: str) -> str:
        """Run code without recording outputs: 'ok', 'error', 'timeout' or 'dead'."""
        try:
            msg_id = self.kc.execute(source, silent=True, store_history=False)
            reply = self.wait_for_reply(msg_id)
        except DeadKernelError:
            return "dead"
        if reply is None:
            return "timeout"
        return "ok" if reply["content"]["status"] == "ok" else "error"

    def _run_cells(self, start: int, resources) -> int | None:
        """Execute cells from ``start``; return the index to resume from after a restart, or None."""
        for index in range(start, len(self.nb.cells)):
            cell = self.nb.cells[index]
            try:
                self.preprocess_cell(cell, resources, index)
            except DeadKernelError:
                cell.outputs.append(_error("KernelCrashed", "the kernel died while running this cell "
                                           "(os._exit, a segmentation fault or running out of memory); "
                                           "the grader restarted it for the cells below"))
                self._record("crash", index)
                return index + 1
            except CellTimeoutError:
                # The interrupt after the timeout was not answered: the kernel is stuck.
                cell.outputs.append(_error(TIMEOUT_ENAME, f"no reply within {self.timeout} s and the kernel "
                                           "ignored the interrupt; the grader restarted it"))
                self._record("timeout", index)
                return index + 1
            outputs = self.nb.cells[index].get("outputs", [])
            if any(o.get("output_type") == "error" and o.get("ename") == TIMEOUT_ENAME for o in outputs):
                # Interrupted: kernel threads (the simulator's) may still be running, so restart cleanly.
                self._record("timeout", index)
                return index + 1
        return None

    def _rebuild_state(self, upto: int) -> bool:
        """Re-run the non-grade code cells before ``upto`` in the fresh kernel; False when that fails."""
        for index in range(upto - 1):
            cell = self.nb.cells[index]
            if cell.cell_type != "code" or _is_grade(cell) or not cell.source.strip() or index in self._failed:
                continue
            outcome = self._quiet(cell.source)
            if outcome in ("timeout", "dead"):
                self.events[-1]["rebuild"] = f"{outcome} in {_label(cell, index)}"
                return False
        self.events[-1]["rebuild"] = "ok"
        return True

    def _mark_not_run(self, start: int, why: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error("NotRun", f"not run: {why}")]

    def _record(self, kind: str, index: int) -> None:
        self._failed.add(index)
        cell = self.nb.cells[index]
        self.events.append({"kind": kind, "index": index, "cell": _label(cell, index), "grade": _is_grade(cell)})
        self._write_events()

    def _write_events(self) -> None:
        if self.events_file:
            with open(self.events_file, "w", encoding="utf-8") as f:
                json.dump(self.events, f, indent=1)
