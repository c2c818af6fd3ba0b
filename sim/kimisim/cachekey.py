"""The content hash that keys cached images and downloads: the files (names, modes, bytes) an image is built from."""
import hashlib
import os


def hash_paths(paths):
    """Content hash of files/dirs (names, modes, bytes); missing paths hash as absent."""
    h = hashlib.sha256()
    for base in paths:
        h.update(("\0P" + base).encode())
        if not os.path.exists(base):
            h.update(b"\0missing")
            continue
        if os.path.isfile(base):
            walk = [(os.path.dirname(base), [], [os.path.basename(base)])]
        else:
            walk = os.walk(base)
        for root, dirs, files in walk:
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".pytest_cache", ".state"))
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                p = os.path.join(root, name)
                st = os.stat(p)
                h.update(("\0F%s\0%o\0" % (os.path.relpath(p, base), st.st_mode & 0o111)).encode())
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()[:16]
