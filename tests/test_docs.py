"""Every document the course cites is in the repository, and every section it cites exists.

Lessons, docstrings, diagnoses and tests cite the course's own notes (``docs/design-notes.md`` §5) and
its guides (``CONTRIBUTING.md``, ``grader/README.md``). A student who clones the course must be able
to open each of them: a citation of a file that is not in the repository, or of a section the notes do
not have, fails here with the file and line that cite it.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTES = "docs/design-notes.md"
# A Markdown file named in text: a path of letters, digits, _ . / - ending in .md.
CITED_FILE = re.compile(r"(?<![\w./-])([\w][\w./-]*\.md)\b")
# A section of the notes: the notes' file name, then "§5" or "section 5".
CITED_SECTION = re.compile(r"design-notes\.md`*\s*(?:§|section\s+)(\d+)")


def tracked_text_files() -> list[pathlib.Path]:
    names = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.ipynb", "*.toml", "*.json"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def citations(path: pathlib.Path):
    """``(line number, cited .md path, section or None)`` of each citation in ``path``."""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        for match in CITED_FILE.finditer(line):
            yield number, match.group(1), None
        for match in CITED_SECTION.finditer(line):
            yield number, NOTES, int(match.group(1))


def resolves(path: pathlib.Path, cited: str) -> bool:
    """A citation names a file from the repository's root, or beside the citing file."""
    return (ROOT / cited).is_file() or (path.parent / cited).is_file()


def sections_of_notes() -> set[int]:
    text = (ROOT / NOTES).read_text(encoding="utf-8")
    return {int(n) for n in re.findall(r"^## §(\d+) ", text, flags=re.MULTILINE)}


def missing_citations(files, sections) -> list[str]:
    problems = []
    for path in files:
        for number, cited, section in citations(path):
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}"
            if not resolves(path, cited):
                problems.append(f"{where} cites {cited}, which is not in the repository")
            elif section is not None and section not in sections:
                problems.append(f"{where} cites {NOTES} §{section}; the notes have §{sorted(sections)}")
    return problems


def test_every_cited_document_and_section_is_in_the_repository():
    problems = missing_citations(tracked_text_files(), sections_of_notes())
    assert not problems, "citations a student cannot follow:\n" + "\n".join(problems)


def test_the_notes_number_their_sections_from_one():
    sections = sections_of_notes()
    assert sections and sections == set(range(1, max(sections) + 1)), sections


# Made-up citations, assembled here so that this file itself cites nothing a student cannot open.
MD = ".md"


@pytest.mark.parametrize("text, found", [
    (f"the rule of ``DESIGN{MD}`` §6", [f"cites DESIGN{MD}"]),
    (f"see STYLE{MD} for the skeleton", [f"cites STYLE{MD}"]),
    (f"the tolerance of ``{NOTES}`` §9", ["§9"]),
    (f"as `{NOTES}` section 5 says, and CONTRIBUTING{MD}", []),
    ("a file called notes.mdx is not a citation", []),
])
def test_the_check_finds_what_a_student_could_not_open(tmp_path, text, found):
    path = tmp_path / "cites.py"
    path.write_text(f'"""{text}"""\n', encoding="utf-8")
    problems = missing_citations([path], sections_of_notes())
    assert len(problems) == len(found) and all(word in problem for word, problem in zip(found, problems)), problems
