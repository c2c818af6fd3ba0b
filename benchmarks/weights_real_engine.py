#!/usr/bin/env python3
"""Benchmark: the real engine serves a checkpoint the weights role staged (issue #38) - the rehearsal model
published on the HF mirror, staged on the cpu pair through the mirror's fault proxy with every file checked
against its hash, launched from that cache only, answered.

Steps: `simctl hf-repo --snapshot <the rehearsal model> --repo moonshotai/Kimi-K3` (a git repository on olah, its
safetensors as LFS objects: the revision is that commit, which no other cache holds); teardown.yml;
weights.yml with that revision into a cache directory of its own (the pair's models directory is one host directory
bind-mounted into both nodes: a shared filesystem, weights_shared_cache); launch.yml with the same revision and
cache directory (the engine runs offline: HF_HUB_OFFLINE=1, so it can only load what was staged); smoke.yml (the
text group); weights.yml again (nothing transferred); teardown.yml. Prints the weights report's figures, the
engine's --revision and its answer.

Needs `sim/simctl up --cluster cpu` and root. Usage: .venv/bin/python benchmarks/weights_real_engine.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "sim"))
from kimisim.engine_image import CPU_MODEL_REVISION, CPU_MODELS_DIR  # noqa: E402

from tests.helpers.runner import failed_tasks, run_playbook  # noqa: E402
from tests.integration import conftest as sim  # noqa: E402

SIMCTL = os.path.join(REPO, "sim", "simctl")
MODEL = "moonshotai/Kimi-K3"
SNAPSHOT = os.path.join(CPU_MODELS_DIR, "hub", "models--moonshotai--Kimi-K3", "snapshots", CPU_MODEL_REVISION)
STAGED = os.path.join(CPU_MODELS_DIR, "staged")
PROXY = "http://127.0.0.1:8089"


def _run(playbook, inventory, extra):
    t0 = time.monotonic()
    r = run_playbook(playbook, inventory, extravars=extra, timeout=1800)
    took = time.monotonic() - t0
    print("  %s: %s in %.1f s" % (playbook, r.status, took), flush=True)
    if r.status != "successful":
        sys.exit("%s failed: %s" % (playbook, failed_tasks(r)))
    return r, took


def _publish():
    p = subprocess.run([SIMCTL, "hf-repo", "--snapshot", SNAPSHOT, "--repo", MODEL], capture_output=True, text=True,
                       timeout=600, check=False)
    if p.returncode != 0:
        sys.exit("simctl hf-repo failed: %s" % p.stderr.strip())
    return json.loads(p.stdout.strip().splitlines()[-1])


def _argv(cluster, art):
    """The head's engine command line as its container runs it (the container named by the head's plan)."""
    with open(os.path.join(art, "plan", cluster.nodes[0]["name"] + ".json")) as f:
        container = json.load(f)["container"]["name"]
    return json.loads(cluster.docker(0, "inspect", "--format", "{{json .Args}}", container).stdout)


def main():
    st, why = sim._status()
    if not sim._cluster_ready(st, "cpu") or not os.path.isdir(SNAPSHOT):
        sys.exit("the cpu rehearsal cluster is not up (%s): sim/simctl up --cluster cpu" % (why or "not ready"))
    cluster = sim.SimCluster("cpu", st)
    rec = _publish()
    print("published %s@%s on the mirror: %d files, %d bytes" % (rec["repo"], rec["revision"], len(rec["files"]),
                                                                 rec["bytes_total"]))
    art = tempfile.mkdtemp(prefix="weights-real-engine-")
    pinned = {"kimi_k3_model_revision": rec["revision"], "kimi_k3_model_cache_dir": STAGED,
              "kimi_k3_artifacts_dir": art}
    stage = dict(pinned, weights_hf_endpoint=PROXY, weights_shared_cache=True, weights_margin_gb=0.01,
                 weights_round_seconds=2, weights_artifacts_dir=art)
    cluster.ssh(0, "rm -rf %s" % STAGED)
    _run("teardown.yml", cluster.inventory, {"kimi_k3_artifacts_dir": art})
    stage_s = _run("weights.yml", cluster.inventory, stage)[1]
    with open(os.path.join(art, "weights-report.json")) as f:
        report = json.load(f)
    _run("launch.yml", cluster.inventory, pinned)
    argv = _argv(cluster, art)
    smoke = dict(pinned, smoke_groups=["text"], smoke_max_tokens=16)
    _run("smoke.yml", cluster.inventory, smoke)
    _run("weights.yml", cluster.inventory, stage)
    with open(os.path.join(art, "weights-report.json")) as f:
        second = json.load(f)
    _run("teardown.yml", cluster.inventory, {"kimi_k3_artifacts_dir": art})
    total = report["total"]
    print("staged in %.1f s: %s" % (stage_s, json.dumps(total, sort_keys=True)))
    print("second run: %s" % json.dumps(second["total"], sort_keys=True))
    print("engine argv: --revision %s, cache %s" % (argv[argv.index("--revision") + 1] if "--revision" in argv
                                                    else "(none)", STAGED))
    print("smoke: passed (text group against the engine serving the staged snapshot); artifacts %s" % art)
    return 0


if __name__ == "__main__":
    sys.exit(main())
