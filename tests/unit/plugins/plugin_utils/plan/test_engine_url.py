"""kimi_k3_docker_host is refused at plan time exactly when the Docker SDK's parse_host refuses it.

community.docker and the Docker SDK parse the engine URL with ``docker.utils.parse_host``; a URL the plan accepts
and the client refuses fails only after hosts are contacted (in the probe, the wait, the status module).
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

docker_utils = pytest.importorskip("docker.utils")
docker_errors = pytest.importorskip("docker.errors")

DECL = plan_variables.declared("kimi_k3_docker_host")
RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()


def sdk_accepts(url):
    try:
        docker_utils.parse_host(url)
    except (docker_errors.DockerException, ValueError):
        return False
    return True


def plan_accepts(url):
    return plan_variables.check_value(DECL, url, RECIPE, SNAPSHOTS)[1] is None


@pytest.mark.parametrize("url, fragment", [
    ("ssh://root@gb300-tray03/var/run/docker.sock", "allows no path in an ssh://"),
    ("ssh://root@gb300-tray03/", "allows no path in an ssh://"),
    ("tcp://10.0.0.3", "needs a port"),
    ("https://10.0.0.3", "needs a port"),
    ("tcp://10.0.0.3:2375?tls=1", "query, fragment or password"),
    ("tcp://10.0.0.3:70000", "not a number 1-65535"),
])
def test_sdk_refusals_are_plan_refusals_naming_the_rule(url, fragment):
    assert not sdk_accepts(url)
    _checked, (message, fix) = plan_variables.check_value(DECL, url, RECIPE, SNAPSHOTS)
    assert fragment in message
    assert fix.startswith("set kimi_k3_docker_host to ") and "ssh://user@host[:port] (no path)" in fix


def test_a_password_in_the_url_is_not_repeated():
    _checked, (message, fix) = plan_variables.check_value(DECL, "ssh://ops:hunter2@node1", RECIPE, SNAPSHOTS)
    assert "hunter2" not in message + fix and "password hidden" in message


@pytest.mark.parametrize("url", ["unix:///var/run/docker.sock", "unix://var/run/docker.sock", "tcp://10.0.0.3:2375",
                                 "tcp://:2375", "ssh://root@node1", "ssh://node1:2222", "https://node1:2376",
                                 "http://node1:2375", "tcp://[fd00::3]:2375"])
def test_urls_the_sdk_accepts_render(url):
    assert sdk_accepts(url) and plan_accepts(url)


_HOSTS = st.sampled_from(["", "node1", "10.0.0.3", "[fd00::3]", "user@node1", "user:pw@node1"])
_PORTS = st.sampled_from(["", ":22", ":2375", ":0", ":65535", ":65536", ":x"])
_PATHS = st.sampled_from(["", "/", "/var/run/docker.sock", "/a/b"])
_TAILS = st.sampled_from(["", "?a=1", "#f", ";p"])


@settings(max_examples=400, deadline=None)
@given(scheme=st.sampled_from(["unix", "tcp", "ssh", "http", "https"]), host=_HOSTS, port=_PORTS, path=_PATHS,
       tail=_TAILS)
def test_the_plan_agrees_with_the_sdk_on_network_urls(scheme, host, port, path, tail):
    url = "%s://%s%s%s%s" % (scheme, host, port if host else "", path, tail)
    if scheme == "unix" or not url.split("://", 1)[1]:
        return  # unix sockets: the SDK takes any path; an empty rest is refused by the format alone
    assert plan_accepts(url) == sdk_accepts(url), url
