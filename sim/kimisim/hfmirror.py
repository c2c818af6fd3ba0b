"""The self-hosted Hugging Face mirror (olah) and its stand-in model repository."""
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request

from kimisim.settings import HF_FAULT_PROXY, HF_MIRROR, HF_REPO, HF_SHARDS, HF_SHARD_BYTES, SIM_DIR, STATE
from kimisim.util import die, log, pid_alive, read_json, read_pid, sh, tcp_open, terminate, wait_for, write_file, write_json


def olah_binary():
    for cand in (os.environ.get("KIMI_SIM_OLAH"), "/opt/kimi-sim/olah/bin/olah-cli", shutil.which("olah-cli")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _lfs_pointer(oid, size):
    return "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (oid, size)


def _hf_repo_files(shards=HF_SHARDS, shard_bytes=HF_SHARD_BYTES):
    """The stand-in repository as (name, bytes, is LFS) one file at a time (a 2 GB variant is never held whole):
    ``shards`` safetensors-named shards as LFS objects, then small JSON files in git. Deterministic bytes (seeded),
    so the content and the commit hash are the same on every machine."""
    import random
    rng = random.Random("kimi-sim-hf-standin")
    names = ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]
    chunk = 16 * 1024 * 1024  # randbytes takes at most 2**31 bits at a time; one chunk keeps the default's bytes
    for name in names:
        yield name, b"".join(rng.randbytes(min(chunk, shard_bytes - at)) for at in range(0, shard_bytes, chunk)), True
    index = {"metadata": {"total_size": shards * shard_bytes, "kimi_sim": True},
             "weight_map": dict(("model.layers.%d.weight" % i, n) for i, n in enumerate(names))}
    small = {"config.json": {"model_type": "kimi_k3_standin", "kimi_sim": True},
             "tokenizer_config.json": {"kimi_sim": True}, "model.safetensors.index.json": index}
    for name, value in small.items():
        yield name, (json.dumps(value, indent=1, sort_keys=True) + "\n").encode(), False


def big_repo(shards, shard_mib):
    """Name and record file of a larger stand-in (``simctl hf-repo``; the weights benchmark at fleet scale)."""
    tag = "%dx%dm" % (shards, shard_mib)
    return {"repo": HF_REPO + "-" + tag, "shards": shards, "shard_bytes": shard_mib * 1024 * 1024,
            "record": "repo-%s.json" % tag}


def _write_repo_file(gdir, name, data, oid, lfs):
    """One file of the repository: an LFS object under its sha256 ``oid`` with a pointer in git, or the bytes."""
    if lfs:
        obj = os.path.join(gdir, ".git", "lfs", "objects", oid[:2], oid[2:4], oid)
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        with open(obj, "wb") as f:
            f.write(data)
        data = _lfs_pointer(oid, len(data)).encode()
    path = os.path.join(gdir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _snapshot_files(snapshot):
    """The files of a model snapshot directory (symlinks followed) as _hf_repo_files gives them: safetensors as LFS
    objects, the rest in git."""
    for root, _dirs, names in sorted(os.walk(snapshot)):
        for name in sorted(names):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                yield os.path.relpath(path, snapshot), f.read(), name.endswith(".safetensors")


def model_repo(snapshot, repo):
    """Spec of ensure_hf_repo for publishing an existing model ``snapshot`` on the mirror as ``repo`` (the cpu
    cluster's rehearsal model: the real engine can then serve a checkpoint the weights role staged)."""
    return {"repo": repo, "files": lambda: _snapshot_files(snapshot),
            "record": "repo-%s.json" % repo.replace("/", "--")}


def ensure_hf_repo(spec=None):
    """git repo at sim/.state/hf/mirrors/models/<org>/<name> with one commit (fixed dates); returns its record.
    ``spec`` (big_repo): another repository beside the default one, with its own record."""
    spec = spec or {"repo": HF_REPO, "shards": HF_SHARDS, "shard_bytes": HF_SHARD_BYTES, "record": "repo.json"}
    root = os.path.join(STATE, "hf")
    rec_path = os.path.join(root, spec["record"])
    rec = read_json(rec_path)
    if rec:
        return rec
    gdir = os.path.join(root, "mirrors", "models", spec["repo"])
    shutil.rmtree(gdir, ignore_errors=True)
    os.makedirs(gdir)
    files = {}
    made = spec["files"]() if "files" in spec else _hf_repo_files(spec["shards"], spec["shard_bytes"])
    for name, data, lfs in made:
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        _write_repo_file(gdir, name, data, files[name]["sha256"], lfs)
    env = dict(os.environ, GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z",
               GIT_AUTHOR_NAME="kimi-sim", GIT_AUTHOR_EMAIL="sim@kimi-sim", GIT_COMMITTER_NAME="kimi-sim",
               GIT_COMMITTER_EMAIL="sim@kimi-sim")
    git = ["git", "-C", gdir, "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"]
    sh(git + ["init", "-q"], env=env)
    sh(git + ["add", "-A"], env=env)
    sh(git + ["commit", "-q", "-m", "kimi-sim stand-in checkpoint"], env=env)
    rev = sh(git + ["rev-parse", "HEAD"], env=env).stdout.strip()
    rec = {"endpoint": "http://" + HF_MIRROR, "fault_endpoint": "http://" + HF_FAULT_PROXY, "repo": spec["repo"],
           "revision": rev, "files": files, "bytes_total": sum(f["size"] for f in files.values())}
    write_json(rec_path, rec)
    return rec


def cmd_hf_repo(a):
    """`simctl hf-repo --shards N --shard-mib M`: a larger stand-in repository beside the default one;
    `simctl hf-repo --snapshot DIR --repo ORG/NAME`: a model snapshot published as that repository. Prints its record
    (repo, revision, files with sha256, bytes_total). The mirror must be up (`simctl up`)."""
    if a.snapshot:
        if not a.repo or not os.path.isfile(os.path.join(a.snapshot, "config.json")):
            die("--snapshot needs a model directory (config.json) and --repo ORG/NAME")
        spec = model_repo(a.snapshot, a.repo)
    elif a.shards < 1 or a.shard_mib < 1:
        die("--shards and --shard-mib must be >= 1")
    else:
        spec = big_repo(a.shards, a.shard_mib)
    rec = ensure_hf_repo(spec)
    if not hf_mirror_ok(rec):
        die("the mirror does not serve %s@%s: is the sim up (sim/simctl up)?" % (rec["repo"], rec["revision"]))
    print(json.dumps(rec, sort_keys=True))
    return 0


def faults_path():
    return os.path.join(STATE, "hf", "faults.json")


def start_hf_proxy():
    """The fault proxy (kimisim.hfproxy) on HF_FAULT_PROXY in front of olah; its faults start cleared."""
    pidf = os.path.join(STATE, "hf", "proxy.pid")
    if pid_alive(read_pid(pidf)) and tcp_open(*HF_FAULT_PROXY.split(":")):
        return False
    if tcp_open(*HF_FAULT_PROXY.split(":")):
        die("something else listens on %s (not started by simctl); stop it first" % HF_FAULT_PROXY)
    write_json(faults_path(), {"throttle_bps": None, "tamper": []})
    logf = open(os.path.join(STATE, "hf", "proxy.log"), "ab")
    proc = subprocess.Popen(["python3", "-m", "kimisim.hfproxy", "--listen", HF_FAULT_PROXY, "--upstream", HF_MIRROR,
                             "--faults", faults_path()], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                            cwd=SIM_DIR, env=dict(os.environ, PYTHONPATH=SIM_DIR), start_new_session=True,
                            close_fds=True)
    logf.close()
    write_file(pidf, "%d\n" % proc.pid)
    wait_for(lambda: proc.poll() is None and tcp_open(*HF_FAULT_PROXY.split(":")), 30,
             "hf fault proxy on " + HF_FAULT_PROXY, 0.2)
    return True


def cmd_hf_fault(a):
    """`simctl hf-fault throttle=BPS tamper=PATH ...` / `--clear` / no argument: print the faults."""
    from kimisim.hfproxy import parse_faults
    if not a.clear and not a.faults:
        print(json.dumps(read_json(faults_path(), {})))
        return 0
    try:
        faults = parse_faults([] if a.clear else a.faults)
    except ValueError as e:
        die(str(e))
    write_json(faults_path(), faults)
    log("hf mirror faults: %s" % (json.dumps(faults) if a.faults and not a.clear else "cleared"))
    return 0


def hf_mirror_ok(rec=None):
    rec = rec or read_json(os.path.join(STATE, "hf", "repo.json"))
    if not rec:
        return False
    try:
        url = "http://%s/api/models/%s/revision/%s" % (HF_MIRROR, rec["repo"], rec["revision"])
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_hf_mirror():
    """olah offline on 127.0.0.1:8090 with the stand-in repo as its local mirror; skipped when olah is absent."""
    binary = olah_binary()
    if not binary:
        log("hf mirror: olah not installed (sim/install.sh installs it in /opt/kimi-sim/olah); weights tests skip")
        return False
    rec = ensure_hf_repo()
    pidf = os.path.join(STATE, "hf", "olah.pid")
    if pid_alive(read_pid(pidf)) and hf_mirror_ok(rec):
        start_hf_proxy()
        return False
    if tcp_open(*HF_MIRROR.split(":")):
        die("something else listens on %s (not started by simctl); stop it first" % HF_MIRROR)
    host, port = HF_MIRROR.split(":")
    cfg = os.path.join(STATE, "hf", "olah.toml")
    write_file(cfg, "\n".join([
        "# kimi-sim Hugging Face mirror: olah, offline, serving the local git mirror only", "[basic]",
        'host = "%s"' % host, "port = %s" % port, 'repos-path = "%s"' % os.path.join(STATE, "hf", "cache"),
        'mirrors-path = ["%s"]' % os.path.join(STATE, "hf", "mirrors"), 'mirror-netloc = "%s"' % HF_MIRROR,
        'mirror-lfs-netloc = "%s"' % HF_MIRROR, "", "[accessibility]", "offline = true", ""]))
    logf = open(os.path.join(STATE, "hf", "olah.log"), "ab")
    proc = subprocess.Popen([binary, "-c", cfg], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                            cwd=os.path.join(STATE, "hf"), start_new_session=True, close_fds=True)
    logf.close()
    write_file(pidf, "%d\n" % proc.pid)
    wait_for(lambda: proc.poll() is None and hf_mirror_ok(rec), 60, "olah on " + HF_MIRROR, 0.3)
    start_hf_proxy()
    return True


def stop_hf_mirror():
    for name in ("proxy.pid", "olah.pid"):
        pid = read_pid(os.path.join(STATE, "hf", name))
        if pid_alive(pid):
            terminate(pid, 10)
