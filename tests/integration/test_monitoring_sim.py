"""A real Prometheus scrapes the rehearsal cluster through the generated configuration (docs/monitoring.md).

playbooks/monitoring.yml writes prometheus.yml + targets/vllm.json for inventories/sim-gb300; promtool checks it;
`prometheus` (Debian package) is started on 127.0.0.1 with exactly that file, and the test waits until every
target is up and every vllm:* series the dashboard queries has arrived with the node labels, then runs each
dashboard query through the query API. Needs the GB300 sim with a running deployment (deployed here if the head
does not answer) - under the machine-wide sim lock.
"""
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.monitoring import targets as monitoring
from tests.helpers.runner import REPO, failed_tasks, run_playbook

pytestmark = pytest.mark.sim

HEAD_URL = "http://127.0.0.11:8000"
SIM_LIMITS = {"launch_poll_interval_s": 2, "preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m",
              "preflight_max_gpu_memory_used_pct": 100}


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 only
        return r.status, r.read().decode()


def _healthy():
    try:
        return _get(HEAD_URL + "/health")[0] == 200
    except (urllib.error.URLError, OSError):
        return False


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(base, expr):
    status, body = _get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "success", (expr, body[:500])
    return doc["data"]["result"]


@pytest.fixture
def prometheus_bin():
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            pytest.skip("%s not installed (Debian package prometheus; .ci/run installs it)" % tool)
    return shutil.which("prometheus")


def test_prometheus_scrapes_the_vllm_series(tmp_path, sim_cluster, prometheus_bin):
    sim = sim_cluster("gb300")
    if not _healthy():
        # something to scrape; preflight is proven by test_preflight_sim.py
        r = run_playbook("deploy.yml", sim.inventory, extravars=dict(SIM_LIMITS, kimi_k3_artifacts_dir=str(tmp_path)),
                         skip_tags="preflight", timeout=900)
        assert r.rc == 0, failed_tasks(r)
    r = run_playbook("monitoring.yml", sim.inventory, timeout=300,
                     extravars={"kimi_k3_artifacts_dir": str(tmp_path), "monitoring_scrape_interval": "1s"})
    assert r.rc == 0, failed_tasks(r)
    conf = tmp_path / "monitoring" / "prometheus.yml"
    with open(str(tmp_path / "monitoring" / "targets" / "vllm.json")) as f:
        targets = json.load(f)
    assert [t["targets"] for t in targets] == [["127.0.0.11:8000"]]  # TP over 2 trays: only the head serves
    check = subprocess.run(["promtool", "check", "config", str(conf)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr

    port = _free_port()
    base = "http://127.0.0.1:%d" % port
    log = open(str(tmp_path / "prometheus.log"), "w")
    proc = subprocess.Popen([prometheus_bin, "--config.file=%s" % conf, "--web.listen-address=127.0.0.1:%d" % port,
                             "--storage.tsdb.path=%s" % (tmp_path / "tsdb")], stdout=log, stderr=subprocess.STDOUT)
    try:
        with open(os.path.join(REPO, "data", "monitoring", "vllm-dashboard.yml")) as f:
            wanted = monitoring.metric_names(yaml.safe_load(f))
        # traffic, so that the histograms and counters move between scrapes; wait until every series has arrived
        # and the rate queries (two samples in their window) answer
        board = _dashboard(tmp_path)
        throughput = _dashboard_expr(board["panels"][2]["targets"][0]["expr"])
        body = json.dumps({"model": _served_model(), "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 8}).encode()
        up, missing, rates, deadline = [], list(wanted), [], time.time() + 90
        while time.time() < deadline:
            req = urllib.request.Request(HEAD_URL + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=30).read()  # noqa: S310
            try:
                up = _query(base, 'up{job="kimi_k3_vllm"}')
                missing = [m for m in wanted
                           if not _query(base, '%s{kimi_k3_cluster="sim-gb300", node="gb300-tray01"}' % m)]
                rates = _query(base, throughput)
            except (urllib.error.URLError, OSError):
                up, missing, rates = [], list(wanted), []
            if _all_up(up) and not missing and rates and float(rates[0]["value"][1]) > 0:
                break
            time.sleep(1)
        assert _all_up(up), up
        assert missing == [], "series that never arrived: %s (log %s)" % (missing, tmp_path / "prometheus.log")
        assert [s["metric"]["node"] for s in rates] == ["gb300-tray01"], rates
        assert float(rates[0]["value"][1]) > 0, "no generated tokens/s although requests were sent: %s" % rates
        series = _query(base, 'vllm:num_requests_running{kimi_k3_cluster="sim-gb300"}')[0]["metric"]
        assert (series["node"], series["role"], series["node_rank"], series["job"]) == \
            ("gb300-tray01", "head", "0", "kimi_k3_vllm")
        # every dashboard query runs against the scraped data
        for panel in board["panels"]:
            for target in panel["targets"]:
                _query(base, _dashboard_expr(target["expr"]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _served_model():
    return json.loads(_get(HEAD_URL + "/v1/models")[1])["data"][0]["id"]


def _dashboard(tmp_path):
    with open(str(tmp_path / "monitoring" / "grafana" / "kimi-k3-dashboard.json")) as f:
        return json.load(f)


def _dashboard_expr(expr):
    """A dashboard query as Grafana would send it for cluster sim-gb300, all nodes, a 30 s rate interval."""
    return expr.replace("$__rate_interval", "30s").replace("$cluster", "sim-gb300").replace("$node", ".*")


def _all_up(up):
    return bool(up) and all(s["value"][1] == "1" for s in up)
