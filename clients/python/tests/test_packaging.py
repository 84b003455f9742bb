"""The in-tree build backend: `pip install ./clients/python` must work with
nothing from PyPI, so the wheel is checked here without pip."""

import base64
import hashlib
import importlib.util
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _backend():
    spec = importlib.util.spec_from_file_location(
        "redlockd_backend", os.path.join(ROOT, "_build", "backend.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_wheel_is_complete_and_recorded(tmp_path):
    be = _backend()
    assert be.get_requires_for_build_wheel() == []
    name = be.build_wheel(str(tmp_path))
    assert name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(tmp_path / name) as zf:
        names = set(zf.namelist())
        assert "redlockd/__init__.py" in names
        assert "redlockd/py.typed" in names
        assert not any("__pycache__" in n for n in names)
        info = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert len(info) == 1
        meta = zf.read(info[0]).decode()
        assert "Name: redlockd" in meta
        record = zf.read(info[0].replace("METADATA", "RECORD")).decode()
        for line in record.splitlines():
            path, digest, size = line.rsplit(",", 2)
            if not digest:
                continue  # RECORD itself
            data = zf.read(path)
            want = base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want, path
            assert int(size) == len(data), path


def test_sdist_carries_the_backend(tmp_path):
    import tarfile
    be = _backend()
    name = be.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / name) as tf:
        names = tf.getnames()
    assert any(n.endswith("/_build/backend.py") for n in names)
    assert any(n.endswith("/redlockd/client.py") for n in names)
    assert any(n.endswith("/PKG-INFO") for n in names)
