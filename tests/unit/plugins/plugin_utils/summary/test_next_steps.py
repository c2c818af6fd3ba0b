"""plugin_utils.summary.next_steps: the closing summary names files that exist, the endpoint and the next command."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.summary.next_steps import effective_stage, summary

PLAN = {"dest": "/site/artifacts/plan",
        "cluster": {"head": "t1", "endpoints": ["http://10.0.0.11:8000"]},
        "plans": {"t1": {"served_model_name": "kimi-k3"}, "t2": {}}}


def _exists(*present):
    return lambda p: p in present


def test_deploy_summary():
    lines = summary("deploy", PLAN, "/site/artifacts", "/site/inventories/gb300", cwd="/site",
                    exists=_exists("/site/artifacts/plan", "/site/artifacts/smoke/smoke-t1.md",
                                   "/site/artifacts/monitoring/prometheus.yml"))
    assert lines == [
        "artifacts: artifacts",
        "plans: artifacts/plan/<host>.json and <host>.sh (2 node(s)), plan.md to read",
        "report: artifacts/smoke/smoke-t1.md",
        "report: artifacts/monitoring/prometheus.yml",
        "endpoint: http://10.0.0.11:8000/v1 (OpenAI API; model kimi-k3)",
        "next: curl http://10.0.0.11:8000/v1/models   (monitoring: ansible-playbook gpufleet.kimi_k3.monitoring "
        "-i inventories/gb300)",
    ]


def test_preflight_summary_outside_cwd_uses_absolute_paths():
    lines = summary("preflight", {}, "/srv/art", "/etc/inv", cwd="/site",
                    exists=_exists("/srv/art/preflight-report.md", "/srv/art/preflight-report.json"))
    assert lines[:3] == ["artifacts: /srv/art", "report: /srv/art/preflight-report.md",
                         "report: /srv/art/preflight-report.json"]
    assert lines[-1].startswith("next: fix every failed check") and lines[-1].endswith("deploy.yml -i /etc/inv")


def test_nothing_written_nothing_named():
    lines = summary("plan", {"cluster": {}}, "/a", None, cwd="/site", exists=_exists())
    assert lines == ["artifacts: /a", "next: ansible-playbook deploy.yml -i <inventory> --tags preflight   "
                                      "(read-only checks of every node)"]


@pytest.mark.parametrize("tags, stage", [(["all"], "deploy"), (["preflight"], "preflight"), (["plan"], "plan"),
                                         (["image", "launch"], "deploy"), (None, "deploy")])
def test_deploy_with_tags(tags, stage):
    assert effective_stage("deploy", tags) == stage


def test_unknown_stage():
    with pytest.raises(ValueError, match="stage must be one of deploy, plan, preflight"):
        summary("smoke", {}, "/a", None)


def test_plan_summary_counts_the_nodes_of_a_result_without_plans():
    """plan.yml registers the node count, not the plans (plan_return_plans: false)."""
    files_only = {"dest": "/site/artifacts/plan", "nodes": 1152, "cluster": PLAN["cluster"]}
    lines = summary("plan", files_only, "/site/artifacts", None, cwd="/site", exists=_exists("/site/artifacts/plan"))
    assert lines[1] == "plans: artifacts/plan/<host>.json and <host>.sh (1152 node(s)), plan.md to read"
    assert summary("plan", PLAN, "/site/artifacts", None, cwd="/site",
                   exists=_exists("/site/artifacts/plan"))[1].endswith("(2 node(s)), plan.md to read")
