"""Host device nodes the workload containers are given."""
import contextlib
import os

from kimisim.settings import HOST_DEVICES, STATE
from kimisim.util import read_json, write_json


def ensure_host_devices():
    rec_path = os.path.join(STATE, "created_devices.json")
    rec = read_json(rec_path, {"files": [], "dirs": []})
    for dev in HOST_DEVICES:
        if os.path.exists(dev):
            continue
        d = os.path.dirname(dev)
        missing = []
        while not os.path.exists(d):
            missing.append(d)
            d = os.path.dirname(d)
        for m in reversed(missing):
            os.mkdir(m, 0o755)
            rec["dirs"].append(m)
        os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # S_IFCHR, like /dev/null
        rec["files"].append(dev)
    write_json(rec_path, rec)


def remove_host_devices():
    rec = read_json(os.path.join(STATE, "created_devices.json"), {"files": [], "dirs": []})
    for f in rec.get("files", []):
        with contextlib.suppress(OSError):
            st = os.stat(f)
            if os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3:
                os.unlink(f)
    for d in sorted(rec.get("dirs", []), key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(d)
