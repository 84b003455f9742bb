"""The README's first examples, run as written in a fresh interpreter
against the shared daemon (only the socket path is filled in)."""

import os
import re
import subprocess
import sys
import textwrap

from conftest import PKG_ROOT

README = (PKG_ROOT / "README.md").read_text(encoding="utf-8")


def snippet(heading: str, marker: str) -> str:
    """The first ```python block after ``heading`` that has ``marker``."""
    start = README.index(heading)
    for m in re.finditer(r"```python\n(.*?)```", README[start:], re.S):
        if marker in m.group(1):
            return m.group(1)
    raise AssertionError("no python block with %r after %r" % (marker, heading))


def run(code: str, sock: str, tmp_path) -> str:
    env = dict(os.environ, REDLOCKD_SOCKET=sock, PYTHONPATH=str(PKG_ROOT))
    p = subprocess.run([sys.executable, "-X", "dev", "-c", code], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_ten_lines(sock, tmp_path):
    out = run(snippet("## Ten lines", "RedlockClient()"), sock, tmp_path)
    # "held <token> fence <n>": the example prints the fencing token.
    assert re.fullmatch(r"held [0-9a-f]{32} fence \d+\n", out), out


def test_ten_lines_asyncio(sock, tmp_path):
    code = snippet("## Ten lines", "AsyncRedlockClient(").replace(
        '"/run/redlockd.sock"', repr(sock))
    main = "import asyncio\n\nasync def main():\n%s\nasyncio.run(main())\n"
    body, imports = [], []
    for line in code.splitlines():
        (imports if line.startswith("from ") else body).append(line)
    run("\n".join(imports) + "\n" + main % textwrap.indent(
        "\n".join(body), "    "), sock, tmp_path)
