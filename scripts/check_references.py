#!/usr/bin/env python3
"""Fails on text that points a reader outside the repository or at its history.

The repository must stand alone: no file may send a reader to a document it does not hold (a
design document, a shared folder, the documents the project started from), and comments and docs
state what is true now, not when or through which ticket it came (dates and issue numbers). Reads
every file git tracks; prints each finding as path:line: what, and exits 1 if there is one.

    scripts/check_references.py          (scripts/format.sh --check runs it)
"""

import re
import subprocess
import sys

# (what is wrong, pattern). Each pattern is narrow enough to have no false positives in this
# repository: a seed of a random generator is never followed by a three-digit number or by an
# apostrophe, and "issue" followed by a number is always a ticket.
OUTSIDE = "refers to a document outside the repository"
RULES = [
    (OUTSIDE, re.compile(r"\bDESIGN\.md\b|\bSTYLE\.md\b|\batb_reference\.md\b")),
    (OUTSIDE, re.compile(r"\.\./shared\b|/shared/seeds\b|/work/shared\b")),
    (
        OUTSIDE,
        re.compile(
            r"\bseeds?'|\bseed \d{3}\b|\bseeds? (?:documents?|docs|scripts?|texts?)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "names an issue (say what holds, not which ticket asked for it)",
        re.compile(r"\bissues? #?\d+\b|\(#\d+\)", re.IGNORECASE),
    ),
    (
        "carries a date (history belongs in git and CHANGELOG.md's versions)",
        re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    ),
]
# Files whose text is not prose of this project, or that record measurements with their date.
SKIP = {"LICENSE", "scripts/check_references.py"}
SKIP_DATES = ("docs/performance.md", "docs/img/")


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def main():
    findings = []
    for path in tracked_files():
        if path in SKIP:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files (plots), submodules, files deleted in the work tree
        for number, line in enumerate(lines, 1):
            for what, pattern in RULES:
                if what.startswith("carries a date") and path.startswith(SKIP_DATES):
                    continue
                match = pattern.search(line)
                if match:
                    findings.append(f"{path}:{number}: {what}: {match.group(0)!r}")
    for finding in findings:
        print(finding)
    if findings:
        print(f"references: {len(findings)} finding(s) above")
        return 1
    print("references: nothing points outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
