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


def _lfs_pointer(data):
    return "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
        hashlib.sha256(data).hexdigest(), len(data))


def _hf_repo_files():
    """The stand-in repository: small JSON files in git, HF_SHARDS safetensors-named shards as LFS objects.
    Deterministic bytes (seeded), so the content and the commit hash are the same on every machine."""
    import random
    rng = random.Random("kimi-sim-hf-standin")
    shards = ["model-%05d-of-%05d.safetensors" % (i, HF_SHARDS) for i in range(1, HF_SHARDS + 1)]
    files = {name: rng.randbytes(HF_SHARD_BYTES) for name in shards}
    index = {"metadata": {"total_size": HF_SHARDS * HF_SHARD_BYTES, "kimi_sim": True},
             "weight_map": dict(("model.layers.%d.weight" % i, n) for i, n in enumerate(shards))}
    small = {"config.json": {"model_type": "kimi_k3_standin", "kimi_sim": True},
             "tokenizer_config.json": {"kimi_sim": True}, "model.safetensors.index.json": index}
    files.update((k, (json.dumps(v, indent=1, sort_keys=True) + "\n").encode()) for k, v in small.items())
    return files, set(shards)


def ensure_hf_repo():
    """git repo at sim/.state/hf/mirrors/models/<org>/<name> with one commit (fixed dates); returns its record."""
    root = os.path.join(STATE, "hf")
    rec_path = os.path.join(root, "repo.json")
    rec = read_json(rec_path)
    if rec:
        return rec
    gdir = os.path.join(root, "mirrors", "models", HF_REPO)
    shutil.rmtree(gdir, ignore_errors=True)
    os.makedirs(gdir)
    files, lfs = _hf_repo_files()
    for name, data in files.items():
        if name in lfs:
            oid = hashlib.sha256(data).hexdigest()
            obj = os.path.join(gdir, ".git", "lfs", "objects", oid[:2], oid[2:4], oid)
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            with open(obj, "wb") as f:
                f.write(data)
            data = _lfs_pointer(data).encode()
        with open(os.path.join(gdir, name), "wb") as f:
            f.write(data)
    env = dict(os.environ, GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z",
               GIT_AUTHOR_NAME="kimi-sim", GIT_AUTHOR_EMAIL="sim@kimi-sim", GIT_COMMITTER_NAME="kimi-sim",
               GIT_COMMITTER_EMAIL="sim@kimi-sim")
    git = ["git", "-C", gdir, "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"]
    sh(git + ["init", "-q"], env=env)
    sh(git + ["add", "-A"], env=env)
    sh(git + ["commit", "-q", "-m", "kimi-sim stand-in checkpoint"], env=env)
    rev = sh(git + ["rev-parse", "HEAD"], env=env).stdout.strip()
    rec = {"endpoint": "http://" + HF_MIRROR, "fault_endpoint": "http://" + HF_FAULT_PROXY, "repo": HF_REPO,
           "revision": rev,
           "files": dict((n, {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}) for n, d in files.items()),
           "bytes_total": sum(len(d) for d in files.values())}
    write_json(rec_path, rec)
    return rec


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
