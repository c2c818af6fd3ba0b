"""Shared helpers of the router tests (tests/integration/test_router_fleet.py, test_pd.py): deploy a routed cluster
on the rehearsal cluster with the real vllm-router, talk to the router, read its reports."""
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers import http
from tests.helpers.runner import failed_tasks, run_playbook

KEY = "sk-router-sim-test"
# The rehearsal cluster group of the router clusters' tests (fleet, gb300pd): scripts/test.sh runs them in a pytest
# process of their own beside the gb300/mi355x files (tests/integration/conftest.py, `--sim-group`).
ROUTER_GROUP = "router"
# Only what the shared sim needs (preflight does not run: skip_tags); the router node's secret files must be on a
# path the node and the host share (its engine runs on the host), like the backends' launch_env_dir.
SIM = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_max_gpu_memory_used_pct": 100,
       "kimi_k3_api_key": KEY, "router_settle_s": 30}


def run(sim, art, playbook, extra=None, **kw):
    ev = dict(SIM, kimi_k3_artifacts_dir=art, **(extra or {}))
    return run_playbook(playbook, sim.inventory, extravars=ev, timeout=kw.pop("timeout", 1200), **kw)


def must(runner):
    assert runner.status == "successful", failed_tasks(runner)
    return runner


def changed_hosts(runner):
    return {h: n for h, n in (runner.stats or {}).get("changed", {}).items() if n}


def get(url, key=KEY, timeout=10):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def chat(base, key=KEY, timeout=30, max_tokens=4):
    body = json.dumps({"messages": [{"role": "user", "content": "hello router"}], "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return http.request_status(req, timeout)


def router_ready_s(sim, node, container="vllm-router"):
    """Seconds from the router container's start to its "Router ready" log line (the router logs whole seconds)."""
    import datetime
    import re
    started = sim.docker(node, "inspect", "--format", "{{.State.StartedAt}}", container).stdout.strip()
    p = sim.docker(node, "logs", container)
    m = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\S*\s+\S*\s*INFO.*Router ready", re.sub(
        r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr))
    if not m:
        return None
    t0 = datetime.datetime.strptime(started[:19], "%Y-%m-%dT%H:%M:%S")
    t0 += datetime.timedelta(seconds=float("0." + (started[20:29].rstrip("Z") or "0")))
    return round((datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") - t0).total_seconds(), 1)


def report(art, name):
    with open(os.path.join(art, name)) as f:
        return json.load(f)


def wait_for(pred, timeout, interval=0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    return pred()


class RequestLoop(object):
    """Requests against the router in a thread until stopped; counts every status (None = no answer)."""

    def __init__(self, base, pause_s=0.1):
        self.base, self.pause_s = base, pause_s
        self.results = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.results.append((time.monotonic(), chat(self.base)))
            time.sleep(self.pause_s)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(60)

    @property
    def failed(self):
        return [r for r in self.results if r[1] != 200]


def deployment_fixtures(cluster, timings):
    """Module fixtures ``art`` (artifacts dir), ``sim`` (the cluster; torn down at the end, timings printed) and
    ``deployed`` (deploy.yml once, timed): ``art, sim, deployed = routed.deployment_fixtures("fleet", TIMINGS)``."""
    @pytest.fixture(scope="module")
    def art():
        return tempfile.mkdtemp(prefix="router-%s-art-" % cluster)

    @pytest.fixture(scope="module")
    def sim(sim_cluster, art):
        s = sim_cluster(cluster)
        yield s
        r = run(s, art, "teardown.yml")
        timings["teardown_s"] = round(r.elapsed_s, 1)
        print("\n%s timings: %s" % (cluster, timings))

    @pytest.fixture(scope="module")
    def deployed(sim, art):
        r = must(run(sim, art, "deploy.yml", skip_tags="preflight"))
        timings["deploy_s"] = round(r.elapsed_s, 1)
        return r

    return art, sim, deployed
