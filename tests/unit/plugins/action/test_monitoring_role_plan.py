"""The monitoring role against a real plan: the arguments its task hands monitoring_config, templated from the
role's defaults and a plan of an example inventory, give a router job with the router's metrics port and a vLLM
job with only the vLLM nodes."""
import os

import pytest
import yaml

from ansible.template import Templar
from ansible.parsing.dataloader import DataLoader

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.monitoring import targets as monitoring

try:
    from ansible.template import trust_as_template  # ansible-core >= 2.19 templates trusted strings only
except ImportError:  # pragma: no cover - ansible-core < 2.19 templates every string
    def trust_as_template(value):
        return value

HERE = os.path.dirname(os.path.abspath(__file__))
from tests.unit.plugins.action.test_plan_golden import REPO, plan_inventory  # noqa: E402

ROLE = os.path.join(REPO, "roles", "monitoring")


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return _trusted(yaml.safe_load(handle))


def _task_args(plan_result):
    """The templated arguments of the role's monitoring_config task (no lookup: monitoring_dir is not templated)."""
    (task,) = [t for t in _yaml("tasks", "main.yml") if "gpufleet.kimi_k3.monitoring_config" in t]
    args = task["gpufleet.kimi_k3.monitoring_config"]
    variables = dict(_yaml("defaults", "main.yml"), plan_result=plan_result, inventory_dir="/inv/c")
    templar = Templar(loader=DataLoader(), variables=variables)
    return dict((k, templar.template(args[k])) for k in ("plans", "cluster_name", "routers"))


@pytest.fixture(scope="module")
def spec():
    with open(os.path.join(REPO, "data", "monitoring", "vllm-dashboard.yml")) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", ["gb300-pd", "gb300-fleet", "sim-gb300-pd"])
def test_the_router_gets_its_own_job_on_its_metrics_port(name, spec):
    r = plan_inventory(name)
    assert r["ok"]
    router = r["plans"][r["cluster"]["router"]["host"]]
    args = _task_args(r)
    files, summary = monitoring.monitoring_files(args["plans"], args["cluster_name"], spec, routers=args["routers"])
    address = router["api_url"].split("//")[1].rsplit(":", 1)[0]  # its bind address, or the node's for a wildcard
    assert summary["jobs"] == ["kimi_k3_vllm", "kimi_k3_router"]
    assert summary["router_targets"] == ["%s:%d" % (address, router["router"]["prometheus_port"])]
    assert files["targets/router.json"][0]["labels"] == {"kimi_k3_cluster": "c", "node": router["host"],
                                                         "role": "router"}
    vllm = [p for p in r["plans"].values() if p["role"] != "router" and p["serves_http"]]
    assert len(summary["targets"]) == len(vllm) and vllm
    assert "%s:%d" % (address, router["api_port"]) not in summary["targets"]
    assert sorted(g["labels"]["node"] for g in files["targets/vllm.json"]) == sorted(p["host"] for p in vllm)


def test_a_single_deployment_has_no_router_job(spec):
    r = plan_inventory("gb300-cluster")
    args = _task_args(r)
    files, summary = monitoring.monitoring_files(args["plans"], args["cluster_name"], spec, routers=args["routers"])
    assert summary["jobs"] == ["kimi_k3_vllm"] and "targets/router.json" not in files
    assert summary["targets"] == [p["api_url"].split("//")[1] for p in r["plans"].values() if p["serves_http"]]
