"""A PEP 517 build backend in the standard library alone.

redlockd's Python client has no dependencies, and its build should have
none either: with setuptools as the backend, `pip install ./clients/python`
needs setuptools and wheel in the build environment, which an offline
machine may not have. This backend writes the wheel (and the sdist) with
zipfile and tarfile; the metadata comes from pyproject.toml's [project].
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - older Pythons
    _toml = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "redlockd"


def _project():
    path = os.path.join(ROOT, "pyproject.toml")
    if _toml is not None:
        with open(path, "rb") as f:
            return _toml.load(f)["project"]
    # Minimal reader for the flat keys used here (name, version, ...).
    proj, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
                continue
            if section == "project" and "=" in line:
                k, v = (x.strip() for x in line.split("=", 1))
                if v.startswith('"') and v.endswith('"'):
                    proj[k] = v[1:-1]
    return proj


def _metadata(proj):
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % proj["name"],
        "Version: %s" % proj["version"],
        "Summary: %s" % proj.get("description", ""),
        "License: MIT",
        "Requires-Python: %s" % proj.get("requires-python", ">=3.8"),
        "Description-Content-Type: text/markdown",
        "",
    ]
    readme = os.path.join(ROOT, "README.md")
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return "\n".join(lines) + "\n" + body


def _package_files():
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in sorted(filenames):
            if name.endswith((".py", ".typed", ".pyi")):
                full = os.path.join(dirpath, name)
                yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return "%s,sha256=%s,%d" % (arcname, digest.rstrip(b"=").decode(), len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    proj = _project()
    name, version = proj["name"], proj["version"]
    dist_info = "%s-%s.dist-info" % (name, version)
    wheel_name = "%s-%s-py3-none-any.whl" % (name, version)
    records = []
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        def add(arcname, data):
            zf.writestr(arcname, data)
            records.append(_record_line(arcname, data))

        for full, arcname in _package_files():
            with open(full, "rb") as f:
                add(arcname, f.read())
        add(dist_info + "/METADATA", _metadata(proj).encode("utf-8"))
        add(dist_info + "/WHEEL", (
            "Wheel-Version: 1.0\nGenerator: redlockd-backend\n"
            "Root-Is-Purelib: true\nTag: py3-none-any\n").encode())
        records.append(dist_info + "/RECORD,,")
        zf.writestr(dist_info + "/RECORD", "\n".join(records) + "\n")
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    proj = _project()
    base = "%s-%s" % (proj["name"], proj["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in ("pyproject.toml", "README.md", "_build/backend.py"):
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                tf.add(full, arcname=base + "/" + rel)
        for full, arcname in _package_files():
            tf.add(full, arcname=base + "/" + arcname)
        pkg_info = _metadata(proj).encode("utf-8")
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        tf.addfile(info, io.BytesIO(pkg_info))
    return name
