"""tests/repo: the repository stands on its own.

    /usr/bin/python3 -m pytest tests/repo -q

- No file names an absolute path of one machine (a checkout, a home
  directory), nor a document that lives outside the repository (the old
  out-of-tree protocol and style notes).
- Every relative link in a Markdown file points at a file or directory
  that the repository has.
- The license the packages and the image declare is the LICENSE file's.

Reads the files git knows (tracked, and new ones not ignored); with no git,
every file under the top directory but build output and dependencies.
"""

import json
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SKIP_DIRS = {".git", "node_modules", "__pycache__", "out"}

# An absolute path of a developer machine: a home directory or a checkout
# under a top-level work directory. Allowed: system paths an image or a
# daemon really uses (/run, /usr, /etc, /var, /tmp, /opt/... in examples).
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:work|home/[A-Za-z0-9_.-]+|Users/[A-Za-z0-9_.-]+|"
    r"root/[A-Za-z0-9_.-]+)(?:/|\b)")

# Documents that only ever existed outside this repository.
OUTSIDE_DOCS = re.compile(r"\b(?:shared/)?(?:PROTOCOL|STYLE)\.md\b")

MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def repo_files():
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached",
             "--others", "--exclude-standard"],
            check=True, capture_output=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for root, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS
                       and not d.startswith("build")]
            for f in files:
                names.append(os.path.relpath(os.path.join(root, f), REPO))
    paths = []
    for n in names:
        parts = Path(n).parts
        if any(p in SKIP_DIRS or p.startswith("build") for p in parts[:-1]):
            continue
        p = REPO / n
        if p.is_file() and not p.is_symlink():
            paths.append(p)
    assert paths, "found no files under %s" % REPO
    return paths


def text_of(path):
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary (a PNG, a compiled file)
    return data.decode("utf-8", errors="replace")


def offending_lines(pattern, skip=()):
    hits = []
    for path in repo_files():
        rel = path.relative_to(REPO).as_posix()
        if rel in skip:
            continue
        text = text_of(path)
        if text is None:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append("%s:%d: %s" % (rel, no, line.strip()[:120]))
    return hits


THIS = Path(__file__).resolve().relative_to(REPO).as_posix()


def test_no_absolute_machine_paths():
    hits = offending_lines(MACHINE_PATH, skip={THIS})
    assert not hits, ("absolute paths of one machine (use a path relative "
                      "to the checkout):\n" + "\n".join(hits))


def test_no_documents_outside_the_repository():
    hits = offending_lines(OUTSIDE_DOCS, skip={THIS})
    assert not hits, ("names a document the repository does not have (the "
                      "contract is proto/README.md, the house style "
                      "CONTRIBUTING.md):\n" + "\n".join(hits))


def test_patterns_catch_what_they_are_for():
    # The two checks above must be able to fail.
    assert MACHINE_PATH.search("cd /work/main && ninja")
    assert MACHINE_PATH.search("see /home/alice/src/redlockd")
    assert MACHINE_PATH.search("[/work/main/build/sidecar/redlockd]")
    assert not MACHINE_PATH.search("/run/redlockd/redlockd.sock")
    assert not MACHINE_PATH.search("tests/work/x and ~/work/y")
    assert OUTSIDE_DOCS.search("`shared/PROTOCOL.md` is the contract")
    assert OUTSIDE_DOCS.search("(see STYLE.md)")
    assert not OUTSIDE_DOCS.search("docs/style-guide.md")


def test_markdown_links_stay_inside_and_resolve():
    bad = []
    for path in repo_files():
        if path.suffix != ".md":
            continue
        text = text_of(path) or ""
        # Links inside code blocks are examples, not links.
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in MD_LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or \
                    target.startswith("#"):
                continue  # http:, mailto:, an anchor in the same page
            target = target.split("#", 1)[0]
            rel = path.relative_to(REPO).as_posix()
            if target.startswith("/"):
                bad.append("%s: absolute link %s" % (rel, target))
                continue
            dest = (path.parent / target).resolve()
            try:
                dest.relative_to(REPO)
            except ValueError:
                bad.append("%s: %s leaves the repository" % (rel, target))
                continue
            if not dest.exists():
                bad.append("%s: %s does not exist" % (rel, target))
    assert not bad, "\n".join(bad)


def test_license_file_matches_what_the_packages_declare():
    lic = (REPO / "LICENSE").read_text()
    assert lic.startswith("MIT License"), "LICENSE is not the MIT license"
    assert "Permission is hereby granted, free of charge" in lic
    declared = []
    pkg = REPO / "clients" / "node" / "package.json"
    if pkg.exists():
        declared.append(("package.json",
                         json.loads(pkg.read_text()).get("license")))
    pyproject = REPO / "clients" / "python" / "pyproject.toml"
    if pyproject.exists():
        m = re.search(r'license\s*=\s*\{\s*text\s*=\s*"([^"]+)"',
                      pyproject.read_text())
        declared.append(("pyproject.toml", m and m.group(1)))
    dockerfile = REPO / "docker" / "Dockerfile"
    m = re.search(r'org\.opencontainers\.image\.licenses="([^"]+)"',
                  dockerfile.read_text())
    declared.append(("docker/Dockerfile", m and m.group(1)))
    wrong = [(w, v) for w, v in declared if v != "MIT"]
    assert not wrong, "declared licenses differ from LICENSE: %s" % wrong
