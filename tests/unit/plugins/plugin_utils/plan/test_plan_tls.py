"""TLS of the API servers in the plan: the rendered flags, mounts and https URLs, the fields the clients read,
the router's CA, and one refusal per mistake (each naming host, variable and fix)."""
import importlib.util
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.monitoring import targets as monitoring
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import tls as plan_tls
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.helpers.runner import REPO

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
NV_IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
ROUTER_IMAGE = "registry.example/vllm-router@sha256:" + "c" * 64
KEY_SENTINEL = b"NOT-A-REAL-KEY-SENTINEL"
CERT, KEY = "/etc/kimi-k3/tls/server.pem", "/etc/kimi-k3/tls/server.key"


def _testca():
    spec = importlib.util.spec_from_file_location("testca", os.path.join(REPO, "sim", "testca.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    _testca().write_all(str(d), ["10.9.0.1"])
    (d / "server.key").write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + KEY_SENTINEL + b"\n-----END PRIVATE KEY-----\n")
    (d / "junk.pem").write_text("not a certificate\n")
    return d


def cluster_vars(ca=None, **extra):
    v = {"kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_dep", "kimi_k3_interconnect": "nvlink",
         "kimi_k3_socket_ifname": "eth9", "kimi_k3_image": NV_IMAGE, "kimi_k3_vllm_version": "0.28.0",
         "kimi_k3_allow_unpinned_remote_code": True, "kimi_k3_allow_unauthenticated_api": True}
    if ca:
        v["kimi_k3_tls_ca_file"] = ca
    v.update(extra)
    return v


def nodes(n=4, tls=True, host_vars=None, **cluster):
    out = []
    for i in range(n):
        v = dict(cluster_vars(**cluster), ansible_host="10.9.0.%d" % (i + 1))
        if tls:
            v.update(kimi_k3_tls_certfile=CERT, kimi_k3_tls_keyfile=KEY)
        v.update((host_vars or {}).get(i, {}))
        out.append({"host": "node%d" % i, "head": i == 0, "vars": v})
    return out


def plan(ns, routers=None):
    return topology.build_cluster_plan(ns, RECIPE, SNAPSHOTS, routers)


def only(result):
    assert not result["ok"], "accepted"
    assert len(result["errors"]) == 1, result["errors"]
    return result["errors"][0]


# ----------------------------------------------------------------------------- what an https plan holds


def test_https_plan_renders_flags_mounts_urls_and_client_fields(ca_dir):
    ca = str(ca_dir / "ca.pem")
    r = plan(nodes(ca=ca))
    assert r["ok"], r["errors"]
    for i in range(4):
        p = r["plans"]["node%d" % i]
        assert vllm_flags.flag_value(p["vllm_args"], "--ssl-certfile", SNAPSHOTS["0.28.0"]) == [CERT]
        assert vllm_flags.flag_value(p["vllm_args"], "--ssl-keyfile", SNAPSHOTS["0.28.0"]) == [KEY]
        assert p["api_url"] == "https://10.9.0.%d:8000" % (i + 1)
        assert p["container"]["volumes"][-2:] == [CERT + ":" + CERT + ":ro", KEY + ":" + KEY + ":ro"]
        assert p["tls"] == {"scheme": "https", "certfile": CERT, "keyfile": KEY, "ca_file": ca,
                            "controller_ca_file": ca}
    assert r["cluster"]["endpoints"] == ["https://10.9.0.%d:8000" % i for i in (1, 2, 3, 4)]
    assert r["cluster"]["tls"] == {"ca_file": ca, "controller_ca_file": ca}
    script = topology.docker_run_command(r["plans"]["node0"])
    assert "--ssl-keyfile %s" % KEY in script and "--volume %s:%s:ro" % (CERT, CERT) in script


def test_plan_names_the_key_path_and_never_holds_its_contents(ca_dir):
    key = str(ca_dir / "server.key")
    r = plan(nodes(host_vars=dict((i, {"kimi_k3_tls_keyfile": key}) for i in range(4))))
    assert r["ok"], r["errors"]
    text = json.dumps(r) + topology.docker_run_command(r["plans"]["node0"])
    assert key in text and KEY_SENTINEL.decode() not in text


def test_headless_followers_carry_the_ca_for_the_heads_https_url(ca_dir):
    ca = str(ca_dir / "ca.pem")
    r = plan(nodes(2, ca=ca, kimi_k3_strategy="multi_node_tp", host_vars={1: {"kimi_k3_tls_certfile": None,
                                                                              "kimi_k3_tls_keyfile": None}}))
    assert r["ok"], r["errors"]
    follower = r["plans"]["node1"]
    assert follower["api_url"] is None and "--ssl-certfile" not in follower["vllm_args"]
    assert follower["tls"] == {"scheme": "https", "certfile": None, "keyfile": None, "ca_file": ca,
                               "controller_ca_file": ca}
    assert not any(v.endswith(":ro") for v in follower["container"]["volumes"])


def test_without_tls_nothing_changes():
    r = plan(nodes(tls=False))
    assert r["ok"], r["errors"]
    assert "tls" not in r["cluster"] and all("tls" not in p for p in r["plans"].values())
    assert all(p["api_url"].startswith("http://") for p in r["plans"].values())
    assert not any("--ssl" in a for p in r["plans"].values() for a in p["vllm_args"])


def test_system_cas_when_no_ca_is_given():
    r = plan(nodes())
    assert r["ok"], r["errors"]
    assert r["cluster"]["tls"] == {"ca_file": None, "controller_ca_file": None}


def test_controller_ca_may_differ_from_the_nodes_path(ca_dir):
    ctl = str(ca_dir / "ca.pem")
    r = plan(nodes(ca="/etc/pki/kimi/ca.pem", kimi_k3_tls_controller_ca_file=ctl))
    assert r["ok"], r["errors"]
    assert r["cluster"]["tls"] == {"ca_file": "/etc/pki/kimi/ca.pem", "controller_ca_file": ctl}


# ----------------------------------------------------------------------------- the router in front of https


def _fleet(ca, **router_vars):
    ns = []
    for d, first in (("replica-1", 1), ("replica-2", 3)):
        for j, host in enumerate(nodes(2, ca=ca, kimi_k3_strategy="multi_node_tp", kimi_k3_deployment=d,
                                       kimi_k3_deployment_kind="replica", kimi_k3_model="example-org/small-moe")):
            host["host"], host["head"] = "%s-%d" % (d, j), j == 0
            host["vars"]["ansible_host"] = "10.9.%d.1" % (first + j)
            ns.append(host)
    router = {"host": "router", "head": False,
              "vars": dict({"ansible_host": "10.9.0.9", "kimi_k3_router_image": ROUTER_IMAGE}, **router_vars)}
    return plan(ns, [router])


def test_router_verifies_https_backends_with_the_ca(ca_dir):
    ca = str(ca_dir / "ca.pem")
    r = _fleet(ca, kimi_k3_api_host="127.0.0.9")
    assert r["ok"], r["errors"]
    rp = r["plans"]["router"]
    assert rp["env"] == {"SSL_CERT_FILE": ca} and rp["container"]["volumes"] == ["%s:%s:ro" % (ca, ca)]
    assert rp["router"]["backend_ca_file"] == ca  # the router role's backend health waits read it
    assert [b["url"] for b in rp["router"]["backends"]] == ["https://10.9.1.1:8000", "https://10.9.3.1:8000"]
    assert rp["api_url"] == "http://127.0.0.9:8000"  # vllm-router 0.1.17 has no TLS listener
    script = plan_render.run_script(rp)
    assert "--volume %s:%s:ro" % (ca, ca) in script and "--env SSL_CERT_FILE=%s" % ca in script
    assert [w for w in r["warnings"] if w["variable"] == "kimi_k3_api_host"] == []


def test_router_on_a_public_address_in_front_of_https_is_warned(ca_dir):
    r = _fleet(str(ca_dir / "ca.pem"))
    assert r["ok"], r["errors"]
    w = [w for w in r["warnings"] if w["variable"] == "kimi_k3_api_host"]
    assert len(w) == 1 and w[0]["host"] == "router" and "no TLS listener" in w[0]["message"]
    assert "loopback" in w[0]["fix"] and "TLS-terminating proxy" in w[0]["fix"]


def test_monitoring_scrapes_the_https_backends_with_the_ca_and_not_the_router_api(ca_dir):
    ca = str(ca_dir / "ca.pem")
    r = _fleet(ca, kimi_k3_api_host="127.0.0.9")
    with open(os.path.join(REPO, "data", "monitoring", "vllm-dashboard.yml")) as f:
        spec = yaml.safe_load(f)
    files, _summary = monitoring.monitoring_files(r["plans"], "c", spec, ca_file=r["cluster"]["tls"]["ca_file"])
    job = files["prometheus.yml"]["scrape_configs"][0]
    assert (job["scheme"], job["tls_config"]) == ("https", {"ca_file": ca})
    assert [g["targets"] for g in files["targets/vllm.json"]] == [["10.9.1.1:8000"], ["10.9.3.1:8000"]]


def test_router_without_tls_has_no_ca():
    r = _fleet(None)
    assert r["ok"], r["errors"]
    assert r["plans"]["router"]["env"] == {} and "volumes" not in r["plans"]["router"]["container"]


# ----------------------------------------------------------------------------- refusals (host, variable, fix)


def test_refused_certificate_without_key():
    e = only(plan(nodes(host_vars={2: {"kimi_k3_tls_keyfile": None}})))
    assert (e["host"], e["variable"]) == ("node2", "kimi_k3_tls_keyfile")
    assert CERT in e["message"] and "set kimi_k3_tls_keyfile" in e["fix"]


def test_refused_key_without_certificate():
    e = only(plan(nodes(tls=False, host_vars={1: {"kimi_k3_tls_keyfile": KEY}})))
    assert (e["host"], e["variable"]) == ("node1", "kimi_k3_tls_certfile")
    assert "set kimi_k3_tls_certfile" in e["fix"] and "remove kimi_k3_tls_keyfile" in e["fix"]


def test_refused_one_api_server_without_tls():
    e = only(plan(nodes(host_vars={3: {"kimi_k3_tls_certfile": None, "kimi_k3_tls_keyfile": None}})))
    assert (e["host"], e["variable"]) == ("node3", "kimi_k3_tls_certfile")
    assert "node0, node1, node2 serve https" in e["message"] and "group_vars/vllm_cluster" in e["fix"]


def test_refused_one_deployment_without_tls(ca_dir):
    ns = nodes(2, kimi_k3_strategy="multi_node_tp", kimi_k3_deployment="replica-1", kimi_k3_deployment_kind="replica",
               kimi_k3_model="example-org/small-moe")
    other = nodes(2, tls=False, kimi_k3_strategy="multi_node_tp", kimi_k3_deployment="replica-2",
                  kimi_k3_deployment_kind="replica", kimi_k3_model="example-org/small-moe")
    for j, n in enumerate(other):
        n["host"], n["vars"]["ansible_host"] = "other%d" % j, "10.9.5.%d" % (j + 1)
    router = {"host": "router", "head": False,
              "vars": {"ansible_host": "10.9.0.9", "kimi_k3_router_image": ROUTER_IMAGE}}
    e = only(plan(ns + other, [router]))
    assert (e["host"], e["variable"]) == ("other0", "kimi_k3_tls_certfile") and "node0 serves https" in e["message"]


def test_refused_controller_ca_missing(ca_dir):
    e = only(plan(nodes(ca=str(ca_dir / "absent.pem"))))
    assert (e["host"], e["variable"]) == ("node0", "kimi_k3_tls_ca_file")
    assert "does not exist on the controller" in e["message"]
    assert "kimi_k3_tls_controller_ca_file" in e["fix"]  # the nodes' path need not exist on the controller


def test_refused_explicit_controller_ca_missing(ca_dir):
    e = only(plan(nodes(ca="/etc/pki/kimi/ca.pem", kimi_k3_tls_controller_ca_file=str(ca_dir / "absent.pem"))))
    assert (e["host"], e["variable"]) == ("node0", "kimi_k3_tls_controller_ca_file")
    assert "set kimi_k3_tls_controller_ca_file to the CA certificate" in e["fix"]


def test_refused_ca_that_is_a_private_key(ca_dir):
    e = only(plan(nodes(ca=str(ca_dir / "server.key"))))
    assert e["variable"] == "kimi_k3_tls_ca_file" and "holds a private key" in e["message"]
    assert KEY_SENTINEL.decode() not in json.dumps(e)


def test_refused_ca_that_is_no_certificate(ca_dir):
    e = only(plan(nodes(ca=str(ca_dir / "junk.pem"))))
    assert e["variable"] == "kimi_k3_tls_ca_file" and "no PEM certificate" in e["message"]


@pytest.mark.parametrize("variable", ["kimi_k3_tls_certfile", "kimi_k3_tls_keyfile", "kimi_k3_tls_ca_file",
                                      "kimi_k3_tls_controller_ca_file"])
def test_refused_relative_path(variable):
    e = only(plan(nodes(host_vars={0: {variable: "certs/server.pem"}})))
    assert (e["host"], e["variable"]) == ("node0", variable) and "set %s to an absolute path" % variable in e["fix"]


@pytest.mark.parametrize("flag, variable", [("--ssl-keyfile", "kimi_k3_tls_keyfile"),
                                            ("--ssl-certfile", "kimi_k3_tls_certfile"),
                                            ("--ssl-cert-reqs", "client certificates are not supported"),
                                            ("--ssl-ca-certs", "kimi_k3_tls_ca_file")])
def test_refused_tls_flags_in_extra_args(flag, variable):
    e = only(plan(nodes(tls=False, kimi_k3_extra_args=[flag, "/x"])))
    assert e["variable"] == "kimi_k3_extra_args" and flag in e["message"] and variable in e["fix"]


# ----------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=400))
def test_any_ca_file_is_judged_without_an_exception(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "ca.pem"
    path.write_bytes(data)
    found = plan_tls.ca_file_problem(str(path), "node0", "kimi_k3_tls_ca_file")
    assert found is None or (found["host"], found["variable"]) == ("node0", "kimi_k3_tls_ca_file")
    assert found is not None  # random bytes are never a CA bundle Python's ssl loads


@settings(max_examples=80, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from([None, CERT]), st.sampled_from([None, KEY])), min_size=1,
                      max_size=6))
def test_one_problem_per_node_with_half_a_pair(pairs):
    ns = [{"host": "n%d" % i, "settings": {"tls_certfile": c, "tls_keyfile": k}} for i, (c, k) in enumerate(pairs)]
    got = plan_tls.pair_problems(ns)
    assert [p["host"] for p in got] == ["n%d" % i for i, (c, k) in enumerate(pairs) if bool(c) != bool(k)]
    assert all(p["variable"] in ("kimi_k3_tls_keyfile", "kimi_k3_tls_certfile") and p["fix"] for p in got)


@settings(max_examples=80, deadline=None)
@given(flags=st.lists(st.booleans(), min_size=1, max_size=6))
def test_mixed_schemes_refused_exactly_when_mixed(flags):
    ns = [{"host": "n%d" % i, "settings": {"tls_certfile": CERT if f else None}} for i, f in enumerate(flags)]
    got = plan_tls.mixed_problems(ns)
    assert bool(got) == (any(flags) and not all(flags))
    if got:
        assert got[0]["host"] == "n%d" % flags.index(False)
