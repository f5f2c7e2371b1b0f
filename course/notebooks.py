"""The stored form of the course's notebooks, and a JupyterLab that does not mark them modified on open.

JupyterLab rewrites two metadata entries of a notebook as soon as its kernel starts: ``kernelspec``
(the kernel's name, display name and language) and ``language_info`` (what the kernel reports,
Python's exact version included). When either differs from the file, the notebook shows as
modified before the student has typed anything. Two parts fix that:

- :func:`normalise` gives every notebook of the repository one stored form: ipykernel's
  ``python3`` kernelspec, ``language_info`` reduced to the language's name (the rest, Python's
  version included, depends on the reader's Python), nbformat 4.5 with cell ids, no outputs,
  nbformat's JSON layout. Run
  ``python -m course.notebooks PATH ...`` to rewrite notebooks in that form.
- :class:`KernelMetadataContentsManager`, the contents manager of the course's labs, hands each
  notebook to JupyterLab with the metadata the local kernel will report, so nothing changes on open.
  Saving writes what JupyterLab holds, as it would anyway.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import pathlib
import sys

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# The rest of language_info, Python's version included, depends on the reader's Python: the kernel
# reports it, and the course's labs hand it to JupyterLab before the kernel does.
LANGUAGE_INFO = {"name": "python"}
NBFORMAT_MINOR = 5


def _cell_id(index: int, cell: dict) -> str:
    """A cell id that depends only on the cell's place and source, so normalising twice agrees."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    return hashlib.sha1(f"{index}:{cell.get('cell_type')}:{source}".encode()).hexdigest()[:12]


def normalise(nb: dict) -> dict:
    """Return notebook ``nb`` (a dict read from JSON) in the course's stored form; ``nb`` is changed.

    Cell ids that exist are kept; missing ones are derived from the cell. Raises ``ValueError`` when
    ``nb`` is not an nbformat 4 notebook.
    """
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise ValueError(f"nb must be an nbformat 4 notebook (a dict with nbformat 4 and a list of cells), "
                         f"got {type(nb).__name__} with nbformat {nb.get('nbformat') if isinstance(nb, dict) else None}")
    nb["nbformat_minor"] = max(NBFORMAT_MINOR, int(nb.get("nbformat_minor", 0)))
    metadata = nb.setdefault("metadata", {})
    metadata["kernelspec"] = dict(KERNELSPEC)
    metadata["language_info"] = copy.deepcopy(LANGUAGE_INFO)
    seen = set()
    for index, cell in enumerate(nb["cells"]):
        if not cell.get("id") or cell["id"] in seen:
            cell["id"] = _cell_id(index, cell)
        seen.add(cell["id"])
        cell.setdefault("metadata", {})
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def normalised_text(text: str) -> str:
    """The text of the notebook ``text`` (its JSON) in the stored form, laid out as nbformat writes."""
    import nbformat

    nb = nbformat.reads(text, as_version=4)
    return nbformat.writes(nbformat.from_dict(normalise(nb)), version=4) + "\n"


@functools.lru_cache(maxsize=None)
def _local_kernel_metadata(kernel_name: str) -> tuple[dict, dict] | None:
    # Cached: JupyterLab asks for every notebook it opens, and the kernelspecs do not change.
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(kernel_name)
    except NoSuchKernel:
        return None
    if "ipykernel_launcher" not in " ".join(spec.argv) or spec.language != "python":
        return None
    from ipykernel.ipkernel import IPythonKernel

    kernelspec = {"name": kernel_name, "display_name": spec.display_name, "language": spec.language}
    return kernelspec, dict(IPythonKernel.language_info)


def local_kernel_metadata(kernel_name: str = "python3") -> tuple[dict, dict] | None:
    """``(kernelspec, language_info)`` as JupyterLab will set them when it starts ``kernel_name``
    with this Python (the course's labs run their kernels with the server's interpreter), or None
    when the kernel is not ipykernel's."""
    found = _local_kernel_metadata(kernel_name)
    return copy.deepcopy(found) if found is not None else None


def _contents_manager_base():
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

    return AsyncLargeFileManager


class KernelMetadataContentsManager(_contents_manager_base()):
    """Jupyter's file contents manager, except that a Python notebook is handed out with the
    ``kernelspec`` and ``language_info`` its kernel will report, so opening it changes nothing."""

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        model = await super().get(path, content=content, type=type, format=format, require_hash=require_hash)
        if model.get("type") == "notebook" and model.get("content") is not None:
            metadata = model["content"].setdefault("metadata", {})
            name = metadata.get("kernelspec", {}).get("name", "python3")
            local = local_kernel_metadata(name)
            if local is not None:
                metadata["kernelspec"], metadata["language_info"] = local
        return model


def main(argv: list[str] | None = None) -> int:
    """``python -m course.notebooks [--check] PATH ...``: rewrite notebooks in the stored form, or
    with ``--check`` list those that are not and exit 1."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course.notebooks", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; fail if a notebook is not normalised")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="notebooks (.ipynb) to normalise")
    args = parser.parse_args(argv)
    unnormalised = []
    for name in args.paths:
        path = pathlib.Path(name)
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"PATH {name!r} is not a notebook file")
        text = path.read_text(encoding="utf-8")
        fixed = normalised_text(text)
        if fixed != text:
            unnormalised.append(name)
            if not args.check:
                path.write_text(fixed, encoding="utf-8")
    verb = "not normalised" if args.check else "normalised"
    for name in unnormalised:
        print(f"{verb}: {name}")
    return 1 if args.check and unnormalised else 0


if __name__ == "__main__":
    sys.exit(main())
