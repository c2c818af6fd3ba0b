"""`simctl check`: a GPU/ROCm container self-check on the node engines."""
import os

from kimisim.clusters import all_known_clusters
from kimisim.settings import STATE
from kimisim.util import die, dk, read_json


def cmd_check(a):
    """Start a container with NVIDIA device requests / ROCm devices on each selected node engine."""
    images = read_json(os.path.join(STATE, "images.json"), {}) or die("sim not up")
    ok = True
    for cname, c in all_known_clusters().items():
        if a.cluster not in (None, "all", cname):
            continue
        for n in c["nodes"][:1] if c.get("shared_engine") else c["nodes"]:
            img = images[c["vendor"]]["standin-a"]
            dk(n["engine"], "pull", "-q", img, timeout=300)
            if c["vendor"] == "nvidia":
                extra = ["--gpus", "all", "--device", "/dev/nvidia-caps-imex-channels/channel0",
                         "--device", "/dev/infiniband/uverbs0"]
            else:
                extra = ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video",
                         "--security-opt", "seccomp=unconfined", "--device", "/dev/infiniband/uverbs0"]
            p = dk(n["engine"], "run", "--rm", "--network", "host", "--ulimit", "memlock=8388608:8388608",
                   "--cap-add", "IPC_LOCK", *extra, "--entrypoint", "sh", img, "-c",
                   "ls /dev >/dev/null && echo ok", check=False, timeout=120)
            good = p.returncode == 0 and "ok" in p.stdout
            ok &= good
            print("%-16s %-6s %s %s" % (n["name"], c["vendor"], "ok" if good else "FAILED",
                                        "" if good else (p.stderr or p.stdout).strip()))
    return 0 if ok else 1
