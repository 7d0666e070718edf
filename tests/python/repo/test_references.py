"""scripts/check_references.py, which the format stage runs on the repository: it finds each kind
of reference to a document outside the repository, an issue number and a date, names the file and
line, and passes a tree without them."""

import os
import subprocess
import sys

from repo_paths import REPO

CHECK = os.path.join(REPO, "scripts", "check_references.py")
DATE = "-".join(["2026", "01", "02"])


def run_check(tree, files):
    """Runs the check in a fresh git repository holding `files` (path -> text)."""
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    for path, text in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    subprocess.run(["git", "-C", str(tree), "add", "."], check=True)
    return subprocess.run(
        [sys.executable, CHECK], cwd=tree, capture_output=True, text=True, timeout=60
    )


def test_each_kind_of_reference_is_found_with_its_line(tmp_path):
    # Each text is put together here, so that this file does not hold what it tests for.
    done = run_check(
        tmp_path,
        {
            "a.cpp": "int x;\n// the limits of " + "DESIGN" + ".md section 3\n",
            "docs/b.md": "fine\nas ../" + "shared/notes say\n",
            "c.py": "# the seed" + "s' example\n",
            "d.h": "// fixed for iss" + "ue 12\n",
            "e.md": "measured on " + DATE + "\n",
        },
    )
    assert done.returncode == 1, done.stdout
    for where in ("a.cpp:2:", "docs/b.md:2:", "c.py:1:", "d.h:1:", "e.md:1:"):
        assert where in done.stdout, (where, done.stdout)
    assert "5 finding(s)" in done.stdout, done.stdout


def test_a_tree_without_references_passes(tmp_path):
    done = run_check(
        tmp_path,
        {
            "a.cpp": "// a random seed of 7; see docs/operations.md\n",
            "docs/performance.md": "taken at " + DATE + "\n",
        },
    )
    assert done.returncode == 0, done.stdout
