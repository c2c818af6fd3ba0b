#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Repack an INSTALLED collection (e.g. community.docker from the `ansible` pip package) as an installable
collection artifact, for offline installs in CI (no Galaxy access: docs/install.md, execution-environment.yml).

    scripts/repack_collection.py SRC_DIR OUT_DIR      -> OUT_DIR/<namespace>-<name>-<version>.tar.gz

An installed copy keeps MANIFEST.json and FILES.json, but pip-installed ones lack some files FILES.json lists, so
`ansible-galaxy collection install` refuses the plain directory tarred up. FILES.json is rewritten from the files
present (sha256 each) and MANIFEST.json's checksum of it updated; nothing else changes.
"""
import hashlib
import io
import json
import os
import sys
import tarfile

SKIP_DIRS = {"__pycache__"}


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _entries(src):
    """[(relative name, 'dir'|'file')] of everything under src except MANIFEST/FILES.json and caches."""
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel = os.path.relpath(root, src)
        if rel != ".":
            out.append((rel, "dir"))
        for f in sorted(files):
            name = f if rel == "." else os.path.join(rel, f)
            if name not in ("MANIFEST.json", "FILES.json") and not f.endswith(".pyc"):
                out.append((name, "file"))
    return out


def files_json(src, entries):
    files = [dict(name=".", ftype="dir", chksum_type=None, chksum_sha256=None, format=1)]
    for name, ftype in entries:
        if ftype == "dir":
            files.append(dict(name=name, ftype="dir", chksum_type=None, chksum_sha256=None, format=1))
        else:
            with open(os.path.join(src, name), "rb") as f:
                files.append(dict(name=name, ftype="file", chksum_type="sha256", chksum_sha256=_sha256(f.read()),
                                  format=1))
    return json.dumps(dict(files=files, format=1), indent=4).encode()


def _add_bytes(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def repack(src, out_dir):
    with open(os.path.join(src, "MANIFEST.json")) as f:
        manifest = json.load(f)
    info = manifest["collection_info"]
    entries = _entries(src)
    fj = files_json(src, entries)
    manifest["file_manifest_file"]["chksum_sha256"] = _sha256(fj)
    dest = os.path.join(out_dir, "%s-%s-%s.tar.gz" % (info["namespace"], info["name"], info["version"]))
    with tarfile.open(dest, "w:gz") as tar:
        _add_bytes(tar, "MANIFEST.json", json.dumps(manifest, indent=4).encode())
        _add_bytes(tar, "FILES.json", fj)
        for name, ftype in entries:
            tar.add(os.path.join(src, name), arcname=name, recursive=False)
    return dest


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    os.makedirs(argv[1], exist_ok=True)
    print(repack(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
