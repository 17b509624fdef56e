"""A PEP 517 / PEP 660 build backend for kvferry's pure-Python packages.

Standard library only, so pip builds offline without fetching setuptools.
Builds a wheel of kvferry/ and mooncake/ (plus libkvferry.so when one is
found, see pyproject.toml), an sdist, and an editable wheel (.pth).
"""

import base64
import hashlib
import io
import os
import sysconfig
import tarfile
import zipfile

NAME = "kvferry"
VERSION = "0.1.0"
PACKAGES = ("kvferry", "mooncake")
SUMMARY = "Mooncake-compatible transfer engine and KV store (Python bindings over libkvferry.so)"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
DIST_INFO = "%s-%s.dist-info" % (NAME, VERSION)

METADATA = """Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: {summary}
Requires-Python: >=3.8
Provides-Extra: tensor
Requires-Dist: numpy; extra == "tensor"
License: Apache-2.0

kvferry's Python surface: kvferry.engine.TransferEngine and
kvferry.store.MooncakeDistributedStore(Async), with the names, arguments and
return conventions of Mooncake's mooncake.engine and mooncake.store, and a
`mooncake` package re-exporting them.
""".format(name=NAME, version=VERSION, summary=SUMMARY)


def _library():
    env = os.environ.get("KVFERRY_LIB")
    if os.environ.get("KVFERRY_BUNDLE_LIB", "1") == "0":
        return None
    cands = [env] if env else []
    cands.append(os.path.join(os.path.dirname(HERE), "build", "lib", "libkvferry.so.1"))
    for c in cands:
        if c and os.path.isfile(c):
            return os.path.realpath(c)
    return None


def _tag(lib):
    if lib is None:
        return "py3-none-any", "true"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-" + plat, "false"


def _files():
    for pkg in PACKAGES:
        root = os.path.join(HERE, pkg)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for f in sorted(filenames):
                if f.endswith(".py"):
                    full = os.path.join(dirpath, f)
                    yield full, os.path.relpath(full, HERE)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _wheel_text(tag, purelib):
    return ("Wheel-Version: 1.0\nGenerator: kvferry_build\nRoot-Is-Purelib: %s\nTag: %s\n"
            % (purelib, tag))


def _write_wheel(wheel_directory, entries, tag, purelib):
    name = "%s-%s-%s.whl" % (NAME, VERSION, tag)
    path = os.path.join(wheel_directory, name)
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data, mode in entries:
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (mode & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(_record_line(arcname, data))
        meta = [(DIST_INFO + "/METADATA", METADATA.encode()),
                (DIST_INFO + "/WHEEL", _wheel_text(tag, purelib).encode())]
        for arcname, data in meta:
            z.writestr(arcname, data)
            records.append(_record_line(arcname, data))
        records.append(DIST_INFO + "/RECORD,,")
        z.writestr(DIST_INFO + "/RECORD", "\n".join(records) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _prepare(metadata_directory, tag, purelib):
    d = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(METADATA)
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_text(tag, purelib))
    return DIST_INFO


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _prepare(metadata_directory, *_tag(_library()))


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _prepare(metadata_directory, "py3-none-any", "true")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib = _library()
    tag, purelib = _tag(lib)
    entries = []
    for full, rel in _files():
        with open(full, "rb") as f:
            entries.append((rel.replace(os.sep, "/"), f.read(), 0o644))
    if lib is not None:
        with open(lib, "rb") as f:
            entries.append(("kvferry/libkvferry.so.1", f.read(), 0o755))
    return _write_wheel(wheel_directory, entries, tag, purelib)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (HERE + "\n").encode()
    return _write_wheel(wheel_directory, [("__editable__.kvferry.pth", pth, 0o644)],
                        "py3-none-any", "true")


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        extra = [os.path.join(HERE, "pyproject.toml"), os.path.join(HERE, "_build",
                                                                    "kvferry_build.py")]
        for full in extra:
            t.add(full, arcname=base + "/" + os.path.relpath(full, HERE))
        for full, rel in _files():
            t.add(full, arcname=base + "/" + rel)
        pkg_info = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
                    % (NAME, VERSION, SUMMARY)).encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return name
