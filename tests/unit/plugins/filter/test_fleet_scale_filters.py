"""The run-once helpers give exactly what per-host evaluation gives: plan_problems (the require check of a
whole play), preflight_probe_args (node_probe's plan-derived arguments) and the PlainView next_steps reads through."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.filter import next_steps as next_steps_filters
from ansible_collections.gpufleet.kimi_k3.plugins.filter import plan as plan_filters
from ansible_collections.gpufleet.kimi_k3.plugins.filter import preflight as preflight_filters
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.summary import next_steps as next_steps_utils
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import PlainView, plain_view, to_plain
from tests.unit.plugins.filter.test_plan_contract import rendered


def full_result(**kw):
    return rendered(**kw)[0]


def test_plan_problems_is_plan_problem_for_every_host():
    full = full_result(nodes=3)
    assert plan_filters.plan_problems(full, ["tray01", "tray02", "tray03"]) == []
    del full["plans"]["tray02"]["docker_host"]
    hosts = ["tray01", "tray02", "ghost"]
    assert plan_filters.plan_problems(full, hosts) == [plan_filters.plan_problem(full, h) for h in hosts[1:]]
    assert "the plan's entry for this host lacks docker_host" in plan_filters.plan_problems(full, hosts)[0]
    assert "the plan has no entry for this host" in plan_filters.plan_problems(full, hosts)[1]
    missing = plan_filters.plan_problems(None, ["tray01", "tray02"])
    assert missing == [plan_filters.plan_problem(None, "tray01"), plan_filters.plan_problem(None, "tray02")]
    assert all("plan_result is not set" in m for m in missing)


def test_plan_problem_reads_only_the_hosts_plan():
    full = full_result()
    other = full["plans"]["tray02"]
    full["plans"]["tray02"] = {"broken": True}          # another host's plan does not affect this host's answer
    assert plan_filters.plan_problem(full, "tray01") == ""
    assert "the plan's entry for this host lacks" in plan_filters.plan_problem(full, "tray02")
    full["plans"]["tray02"] = other


def test_probe_args_are_the_per_host_filter_values():
    full = full_result(host_vars={0: {"kimi_k3_api_host": "10.0.0.11"}}, kimi_k3_model_revision="c" * 40)
    args = preflight_filters.preflight_probe_args(full, ["tray01", "tray02"])
    assert sorted(args) == ["tray01", "tray02"]
    for host, a in args.items():
        plan = full["plans"][host]
        assert a["ports"] == preflight_filters.preflight_ports(plan)
        assert a["interfaces"] == preflight_filters.preflight_interfaces(plan) == ["eth0"]
        assert (a["docker_host"], a["model_cache_dir"], a["model"], a["deployment_container"]) == (
            plan["docker_host"], plan["model_cache_dir"], plan["model"], plan["container"]["name"])
        assert a["model_revision"] == "c" * 40
    assert args["tray01"]["ports"][0] == {"name": "api", "port": 8000, "bind": ["10.0.0.11"]}
    # the engine client options, and every interface only where ports will listen on all addresses (the head)
    assert args["tray01"]["docker_client"] == full["plans"]["tray01"]["docker_client"]
    assert args["tray01"]["docker_client"]["tls"] is False
    assert (args["tray01"]["all_interfaces"], args["tray02"]["all_interfaces"]) == (True, False)


def test_probe_args_omit_an_unpinned_revision_and_name_the_host_they_cannot_serve():
    full = full_result()
    assert preflight_filters.preflight_probe_args(full, ["tray01"])["tray01"]["model_revision"] is None
    with pytest.raises(Exception, match="no entry for ghost"):
        preflight_filters.preflight_probe_args(full, ["tray01", "ghost"])
    del full["plans"]["tray02"]["master_port"]
    with pytest.raises(Exception, match="tray02: preflight_ports needs a host plan"):
        preflight_filters.preflight_probe_args(full, ["tray01", "tray02"])


def test_plain_view_reads_like_to_plain():
    data = {"a": {"b": [1, {"c": "x"}], "d": None}, "e": "f"}
    view = plain_view(data)
    assert isinstance(view, PlainView) and isinstance(view["a"], PlainView)
    assert to_plain(view) == to_plain(data) and len(view) == 2 and sorted(view) == ["a", "e"]
    assert view.get("missing", 7) == 7 and view["a"].get("b") == [1, {"c": "x"}]
    assert plain_view([1, "x"]) == [1, "x"] and plain_view(None) is None


def test_next_steps_is_the_same_through_the_view(tmp_path):
    full = full_result()
    full["dest"] = str(tmp_path / "plan")
    args = ("plan", str(tmp_path / "artifacts"), "inventories/x")
    assert next_steps_filters.next_steps(full, *args) == next_steps_utils.summary(
        args[0], to_plain(full), args[1], args[2], run_tags=None)
