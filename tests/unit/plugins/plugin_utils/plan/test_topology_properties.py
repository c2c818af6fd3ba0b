"""Property test: whatever YAML-typed value any kimi_k3_* variable holds, the plan renders or refuses with a
problem list naming host, variable and fix; it never raises."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
BASE = {"kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_tp", "kimi_k3_interconnect": "nvlink",
        "kimi_k3_socket_ifname": "bond0", "kimi_k3_model_revision": "0" * 40, "kimi_k3_api_key": "k",
        "kimi_k3_image": "vllm/vllm-openai@sha256:" + "a" * 64}
NAMES = [d["name"] for d in plan_variables.VARIABLES]

# What YAML can hand the plan: scalars of every kind, plausible words and values of other variables, nesting.
WORDS = st.sampled_from(["", "auto", "yes", "no", "off", "true", "0", "-1", "1.5", "none", "null", "gb300", "rdma",
                         "nvlink", "mori_low_latency", "deepep_v2", "fp8", "/data/x", "a/b", "10.0.0.1", "::1",
                         "10.0.0.1/24", "host:80", "^docker,lo", "=eth0", "--headless", "$(reboot)", "a\nb",
                         "unix:///var/run/docker.sock", "0.28.0", "0.33.0", "multi_node_dep", "hybrid"])
SCALARS = (st.none() | st.booleans() | st.integers(-2 ** 33, 2 ** 33) | st.floats(allow_nan=False) | WORDS
           | st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6) | WORDS, inner, max_size=3), max_leaves=6)


def _check(result, hosts):
    assert isinstance(result["ok"], bool)
    if not result["ok"]:
        assert result["errors"] and not result["plans"]
        for e in result["errors"]:
            for key in ("host", "variable", "message", "fix"):
                assert isinstance(e[key], str) and e[key], e
    else:
        assert sorted(result["plans"]) == sorted(hosts)
        for p in result["plans"].values():
            assert vllm_flags.check_argv(p["vllm_args"], SNAPSHOTS[p["vllm_version"]]) == []
            plan_render.docker_run_command(p)
            json.loads(plan_render.plan_json(p))
    plan_render.summary_table(result)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=4),
       per_host=st.lists(st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=2), min_size=2, max_size=2),
       nnodes=st.integers(1, 4))
def test_any_values_render_or_refuse_never_raise(cluster, per_host, nnodes):
    nodes = []
    for i in range(nnodes):
        v = dict(BASE, **cluster)
        v["ansible_host"] = "10.0.0.%d" % (i + 1)
        v.update(per_host[i % 2] if i else {})
        nodes.append({"host": "n%d" % i, "head": i == 0, "vars": v})
    _check(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS), ["n%d" % i for i in range(nnodes)])


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(NAMES), value=VALUES)
def test_every_variable_alone_renders_or_is_refused_by_name(name, value):
    nodes = [{"host": "n%d" % i, "head": i == 0, "vars": dict(BASE, ansible_host="10.0.0.%d" % (i + 1), **{name: value})}
             for i in range(2)]
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)
    _check(r, ["n0", "n1"])


@settings(max_examples=100, deadline=None)
@given(host=st.text(min_size=1, max_size=10), address=VALUES)
def test_any_host_name_and_address(host, address):
    nodes = [{"host": host, "head": True, "vars": dict(BASE, ansible_host=address, kimi_k3_strategy="single_node_tp",
                                                       kimi_k3_accelerator="b300")}]
    _check(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS), [host])
