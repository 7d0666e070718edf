"""Every relative link in the repository's Markdown leads somewhere: to a file or folder the
repository holds, and for a link with #anchor to a heading of that file (GitHub's anchors:
lower case, punctuation dropped, spaces as hyphens)."""

import os
import re
import subprocess

from repo_paths import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


def markdown_files():
    out = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.split() if os.path.exists(os.path.join(REPO, p))]


def anchors(path):
    """The anchors of `path`'s headings (outside code blocks), as GitHub makes them."""
    found, fenced = set(), False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                fenced = not fenced
            match = None if fenced else HEADING.match(line)
            if match:
                text = re.sub(r"[^\w\- ]", "", match.group(1).lower())
                found.add(text.replace(" ", "-"))
    return found


def broken_links():
    broken = []
    for doc in markdown_files():
        with open(os.path.join(REPO, doc)) as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            full = (
                os.path.normpath(os.path.join(REPO, os.path.dirname(doc), path))
                if path
                else os.path.join(REPO, doc)
            )
            if not os.path.exists(full):
                broken.append(f"{doc}: {target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                broken.append(f"{doc}: {target}: no such heading")
    return broken


def test_every_relative_link_in_the_docs_resolves():
    assert broken_links() == []


def test_anchors_are_made_as_github_makes_them(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# Top\n## lccl, multi-process (`commMode: 0`)\n```\n# not a heading\n```\n")
    assert anchors(str(doc)) == {"top", "lccl-multi-process-commmode-0"}
