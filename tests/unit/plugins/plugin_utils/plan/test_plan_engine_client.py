"""The engine client variables in the plan: read from the one table, checked together per node (and router host)
before any host is contacted, and handed over as the node plan's ``docker_client``."""
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
ENGINE_VARS = ["kimi_k3_" + key for key in plan_variables.ENGINE_CLIENT_VARIABLES.values()]


def engine_problems(host_vars):
    nodes = [{"host": "tray01", "vars": dict(host_vars)}]
    _settings, _invalid, errors = plan_variables.read_settings(nodes, RECIPE, SNAPSHOTS)
    return nodes[0]["settings"], [e for e in errors if e["variable"] in ENGINE_VARS]


def test_every_client_option_has_its_variable():
    assert set(plan_variables.ENGINE_CLIENT_VARIABLES) == set(engine_api.CLIENT_OPTIONS)
    names = set(d["name"] for d in plan_variables.VARIABLES)
    assert set(ENGINE_VARS) <= names
    for key in plan_variables.ENGINE_CLIENT_VARIABLES.values():
        decl = next(d for d in plan_variables.VARIABLES if d["key"] == key)
        assert decl["scope"] == plan_variables.HOST and decl["on_router"] is True, key


def test_tls_engine_is_handed_over_as_docker_client():
    settings, problems = engine_problems({
        "kimi_k3_docker_host": "tcp://10.0.0.11:2376", "kimi_k3_docker_validate_certs": True,
        "kimi_k3_docker_ca_path": "/etc/docker/tls/ca.pem", "kimi_k3_docker_client_cert": "/etc/docker/tls/cert.pem",
        "kimi_k3_docker_client_key": "/etc/docker/tls/key.pem"})
    assert problems == []
    assert plan_variables.docker_client(settings) == {
        "tls": False, "validate_certs": True, "ca_path": "/etc/docker/tls/ca.pem",
        "client_cert": "/etc/docker/tls/cert.pem", "client_key": "/etc/docker/tls/key.pem", "use_ssh_client": False}
    settings, problems = engine_problems({"kimi_k3_docker_host": "ssh://root@10.0.0.11",
                                          "kimi_k3_docker_use_ssh_client": "yes"})
    assert problems == [] and plan_variables.docker_client(settings)["use_ssh_client"] is True


def test_a_mismatch_names_host_variable_and_fix():
    _s, problems = engine_problems({"kimi_k3_docker_tls": True})
    assert problems == [{
        "host": "tray01", "variable": "kimi_k3_docker_tls",
        "message": "kimi_k3_docker_tls applies to a tcp:// engine URL only; kimi_k3_docker_host is unix://.",
        "fix": "unset kimi_k3_docker_tls, or point kimi_k3_docker_host at the engine's TLS port (tcp://host:2376)."}]
    _s, problems = engine_problems({"kimi_k3_docker_host": "tcp://h:2376", "kimi_k3_docker_validate_certs": True,
                                    "kimi_k3_docker_client_key": "/k.pem"})
    assert [(p["variable"], p["message"]) for p in problems] == [
        ("kimi_k3_docker_client_cert", "kimi_k3_docker_client_cert and kimi_k3_docker_client_key go together (a "
                                       "client certificate and its key).")]


def test_a_refused_value_is_not_judged_again_together():
    """One mistake, one problem: a malformed URL is refused by its format, not also as a TLS mismatch."""
    _s, problems = engine_problems({"kimi_k3_docker_host": "ssh://root@h/var/run/docker.sock",
                                    "kimi_k3_docker_tls": True})
    assert [p["variable"] for p in problems] == ["kimi_k3_docker_host"]


_VALUES = {
    "kimi_k3_docker_host": st.sampled_from(["unix:///var/run/docker.sock", "tcp://10.0.0.1:2376", "ssh://u@h",
                                            "ssh://u@h/x", "tcp://h", "http://h:2375", "bogus", 5, None]),
    "kimi_k3_docker_tls": st.sampled_from([True, False, "yes", "maybe", None, 3]),
    "kimi_k3_docker_validate_certs": st.sampled_from([True, False, "no", None, []]),
    "kimi_k3_docker_ca_path": st.sampled_from(["/ca.pem", "ca.pem", "", None, 7]),
    "kimi_k3_docker_client_cert": st.sampled_from(["/c.pem", "c:pem", None]),
    "kimi_k3_docker_client_key": st.sampled_from(["/k.pem", None, {"a": 1}]),
    "kimi_k3_docker_use_ssh_client": st.sampled_from([True, False, "on", None, "x"]),
}


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional=_VALUES))
def test_any_engine_variables_give_named_refusals_never_a_traceback(host_vars):
    settings, problems = engine_problems(dict((k, v) for k, v in host_vars.items() if v is not None))
    for p in problems:
        assert p["host"] == "tray01" and p["variable"] in ENGINE_VARS and p["fix"].startswith(("set ", "unset "))
    if not problems:
        client = dict(plan_variables.docker_client(settings), docker_host=settings["docker_host"])
        assert engine_api.options_problem(client) is None
        assert engine_api.connect_params(client, 5)["base_url"]


def test_engine_client_is_the_module_defaults_of_community_docker():
    """``engine_client`` carries docker_host and leaves unset paths out (as ``omit`` did in the tasks), so the roles
    hand it over unchanged as module_defaults of group/community.docker.docker."""
    settings, _problems = engine_problems({
        "kimi_k3_docker_host": "tcp://10.0.0.11:2376", "kimi_k3_docker_validate_certs": True,
        "kimi_k3_docker_ca_path": "/etc/docker/tls/ca.pem"})
    assert plan_variables.engine_client(settings) == {
        "docker_host": "tcp://10.0.0.11:2376", "tls": False, "validate_certs": True,
        "ca_path": "/etc/docker/tls/ca.pem", "use_ssh_client": False}
    settings, _problems = engine_problems({})
    assert plan_variables.engine_client(settings) == {
        "docker_host": engine_api.DEFAULT_DOCKER_HOST, "tls": False, "validate_certs": False, "use_ssh_client": False}
