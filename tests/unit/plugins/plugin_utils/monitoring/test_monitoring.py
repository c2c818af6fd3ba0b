"""plugin_utils.monitoring.targets: scrape targets from the plan, the Prometheus configuration (checked by the real
promtool), the Grafana dashboard (JSON schema, layout, PromQL parsed by promtool)."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.monitoring import targets as monitoring
from tests.helpers.runner import REPO

DATA = os.path.join(REPO, "data", "monitoring")


def _plan(host, rank, serves=True, url=None):
    return {"host": host, "role": "head" if rank == 0 else "worker", "node_rank": rank, "serves_http": serves,
            "api_url": (url or "http://10.0.0.%d:8000" % (11 + rank)) if serves else None}


@pytest.fixture(scope="module")
def spec():
    with open(os.path.join(DATA, "vllm-dashboard.yml")) as f:
        return yaml.safe_load(f)


def test_tp_cluster_scrapes_only_the_head():
    plans = {"t2": _plan("t2", 1, serves=False), "t1": _plan("t1", 0)}
    scheme, groups = monitoring.vllm_targets(plans, "gb300-cluster")
    assert scheme == "http"
    assert groups == [{"targets": ["10.0.0.11:8000"],
                       "labels": {"kimi_k3_cluster": "gb300-cluster", "node": "t1", "role": "head", "node_rank": "0"}}]


def test_hybrid_dp_scrapes_every_node_in_rank_order():
    plans = dict((h, _plan(h, r)) for h, r in (("c", 2), ("a", 0), ("b", 1)))
    groups = monitoring.vllm_targets(plans, "x")[1]
    assert [g["targets"][0] for g in groups] == ["10.0.0.11:8000", "10.0.0.12:8000", "10.0.0.13:8000"]
    assert [g["labels"]["node"] for g in groups] == ["a", "b", "c"]


@pytest.mark.parametrize("url, scheme, target", [
    ("https://api.example:8443", "https", "api.example:8443"),
    ("https://api.example", "https", "api.example:443"),
    ("http://[fd00::1]:8000/", "http", "[fd00::1]:8000"),
])
def test_endpoint_forms(url, scheme, target):
    got_scheme, groups = monitoring.vllm_targets({"h": _plan("h", 0, url=url)}, "x")
    assert (got_scheme, groups[0]["targets"]) == (scheme, [target])


@pytest.mark.parametrize("plans, message", [
    ({}, "run gpufleet.kimi_k3.plan first"),
    ({"h": _plan("h", 0, serves=False)}, "no node of the plan serves HTTP"),
    ({"a": _plan("a", 0), "b": _plan("b", 1, url="https://b:8000")}, "mix http and https"),
    ({"a": _plan("a", 0, url="ftp://a")}, "a: endpoint 'ftp://a' is not an http(s) URL"),
])
def test_refusals_name_the_problem(plans, message):
    with pytest.raises(monitoring.MonitoringError, match=re.escape(message)):
        monitoring.vllm_targets(plans, "x")


def test_router_job_only_when_there_is_a_router(spec):
    plans = {"a": _plan("a", 0)}
    files, summary = monitoring.monitoring_files(plans, "c", spec)
    assert "targets/router.json" not in files and summary["jobs"] == ["kimi_k3_vllm"]
    routers = ["http://10.0.0.5:30080", {"name": "r2", "url": "http://r2:80"}]
    files, summary = monitoring.monitoring_files(plans, "c", spec, routers=routers)
    assert summary["jobs"] == ["kimi_k3_vllm", "kimi_k3_router"]
    assert files["targets/router.json"] == [
        {"targets": ["10.0.0.5:30080"], "labels": {"kimi_k3_cluster": "c", "node": "router-0", "role": "router"}},
        {"targets": ["r2:80"], "labels": {"kimi_k3_cluster": "c", "node": "r2", "role": "router"}}]
    jobs = files["prometheus.yml"]["scrape_configs"]
    assert [j["file_sd_configs"][0]["files"] for j in jobs] == [["targets/vllm.json"], ["targets/router.json"]]


def test_https_jobs_carry_the_ca(spec):
    files = monitoring.monitoring_files({"a": _plan("a", 0, url="https://a:8443")}, "c", spec,
                                        ca_file="/etc/ssl/kimi-ca.pem")[0]
    job = files["prometheus.yml"]["scrape_configs"][0]
    assert (job["scheme"], job["tls_config"]) == ("https", {"ca_file": "/etc/ssl/kimi-ca.pem"})


def test_dashboard_metrics_are_the_vllm_names(spec):
    assert monitoring.metric_names(spec) == [
        "vllm:e2e_request_latency_seconds_bucket", "vllm:generation_tokens_total", "vllm:inter_token_latency_seconds_bucket",
        "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:num_requests_running",
        "vllm:num_requests_waiting", "vllm:prompt_tokens_total", "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket"]


def test_dashboard_passes_the_schema_and_lays_out_cleanly(spec):
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(DATA, "grafana-dashboard.schema.json")) as f:
        schema = json.load(f)
    board = monitoring.dashboard(spec, "sim-gb300", monitoring.dashboard_uid("sim-gb300"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(board, schema)
    assert board["uid"] == "kimi-k3-sim-gb300"
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, "panel %s overlaps" % p["title"]
        cells |= mine
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    defined = {v["name"] for v in board["templating"]["list"]} | {"__rate_interval"}
    used = set(re.findall(r"\$\{?(\w+)", json.dumps(board)))
    assert used <= defined, used - defined
    for title in ("Time to first token", "Inter-token latency", "Throughput", "KV cache", "running / waiting",
                  "Preemptions"):
        assert any(title in p["title"] for p in panels), title


def test_schema_rejects_a_broken_dashboard(spec):
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(DATA, "grafana-dashboard.schema.json")) as f:
        schema = json.load(f)
    board = monitoring.dashboard(spec, "c", "kimi-k3-c")
    board["panels"][0]["gridPos"]["w"] = 30
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(board, schema)
    del board["panels"][0]["targets"][0]["expr"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(board, schema)


def _promtool():
    path = shutil.which("promtool")
    if not path:
        pytest.skip("promtool not installed (Debian package prometheus; .ci/run installs it)")
    return path


def _write(tmp_path, files):
    for name, doc in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc) if name.endswith(".yml") else json.dumps(doc))


def test_promtool_accepts_the_generated_config(tmp_path, spec):
    plans = dict((h, _plan(h, r)) for h, r in (("a", 0), ("b", 1)))
    files = monitoring.monitoring_files(plans, "c", spec, routers=["http://10.0.0.5:30080"])[0]
    _write(tmp_path, files)
    p = subprocess.run([_promtool(), "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout + p.stderr


def test_promtool_parses_every_dashboard_query(tmp_path, spec):
    board = monitoring.dashboard(spec, "c", "kimi-k3-c")
    rules = []
    for p in board["panels"]:
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", "1m").replace("$cluster", "c").replace("$node", ".*")
            rules.append({"record": "kimi_k3:panel_%d_%s" % (p["id"], t["refId"].lower()), "expr": expr})
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    p = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: %d rules found" % len(rules) in p.stdout + p.stderr


def test_a_router_plan_is_no_vllm_target_and_the_plan_publishes_its_metrics_port():
    router = {"host": "r", "role": "router", "node_rank": 0, "serves_http": True, "api_url": "http://10.0.0.9:8000",
              "router": {"metrics_url": "http://10.0.0.9:29000/metrics"}}
    plans = {"a": _plan("a", 0), "b": _plan("b", 1, serves=False), "r": router}
    assert [g["targets"] for g in monitoring.vllm_targets(plans, "x")[1]] == [["10.0.0.11:8000"]]
    assert monitoring.plan_targets(plans) == {
        "vllm": {"a": {"host": "a", "role": "head", "node_rank": 0, "serves_http": True,
                       "api_url": "http://10.0.0.11:8000", "metrics_url": "http://10.0.0.11:8000/metrics"}},
        "routers": [{"name": "r", "url": "http://10.0.0.9:29000/metrics"}]}
    assert monitoring.router_targets(monitoring.plan_targets(plans)["routers"], "x")[1][0]["targets"] == [
        "10.0.0.9:29000"]
