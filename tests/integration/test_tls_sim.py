"""TLS end to end on the rehearsal cluster: the API servers serve https with a test CA's certificate
(sim/testca.py, kimi_k3_tls_*), every client of the collection verifies them with that CA, and a wrong CA is
refused with a message that names it.

- gb300 (one deployment): deploy.yml over https (the launch's health waits verify with the CA on the nodes), the
  plan's URLs are https, the smoke passes over https, the openai SDK verifies the head with the CA and refuses it
  with another one, plain http to the API port gets no answer, and the smoke with a wrong CA fails naming it;
- fleet (two replicas behind the real vllm-router 0.1.17): the router verifies its https backends with the CA
  (SSL_CERT_FILE, mounted), both backends are healthy in its /workers, requests through it succeed and the smoke
  through it passes.

The test CA lives under the model cache path, which the nodes and their engines (on the host) share; each cluster
its own directory (the two sim groups run side by side). Needs `sim/simctl up --cluster gb300` and
`--cluster fleet` (or KIMI_SIM_AUTO_UP=1).
"""
import importlib.util
import json
import os
import shutil
import ssl
import tempfile

import pytest

from tests.helpers import routed

pytestmark = [pytest.mark.sim]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TLS_ROOT = "/var/lib/kimi-sim/models/.tls-test-%s"


def _testca():
    spec = importlib.util.spec_from_file_location("testca", os.path.join(REPO, "sim", "testca.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tls_vars(paths):
    """The extra vars of sim/tls-overlay.yml, for this test's own certificate directory."""
    return {"kimi_k3_tls_certfile": paths["cert"], "kimi_k3_tls_keyfile": paths["key"],
            "kimi_k3_tls_ca_file": paths["ca"]}


def _make_ca(sim):
    outdir = TLS_ROOT % sim.name
    shutil.rmtree(outdir, ignore_errors=True)
    return _testca().write_all(outdir, [n["address"] for n in sim.nodes]), outdir


def _plan(art, host):
    with open(os.path.join(art, "plan", "%s.json" % host)) as f:
        return json.load(f)


def _smoke_facts(art, host):
    with open(os.path.join(art, "smoke", "smoke-%s.json" % host)) as f:
        return json.load(f)


def _openai_client(base, ca):
    openai = pytest.importorskip("openai")
    try:  # openai 3.x ships httpx2, 1.x/2.x httpx
        import httpx2 as httpx
    except ImportError:
        import httpx
    return openai, openai.OpenAI(base_url=base + "/v1", api_key=routed.KEY, max_retries=0, timeout=30,
                                 http_client=httpx.Client(verify=ssl.create_default_context(cafile=ca)))


def _deployed_over_https(sim, art):
    """Deploy the cluster with the test CA's certificate; yield (sim, paths, tls vars); tear down and drop the CA."""
    paths, outdir = _make_ca(sim)
    tls = _tls_vars(paths)
    deploy = routed.run(sim, art, "deploy.yml", extra=tls, skip_tags="preflight")
    try:
        routed.must(deploy)
        yield sim, paths, tls
    finally:
        routed.run(sim, art, "teardown.yml", extra=tls)
        shutil.rmtree(outdir, ignore_errors=True)


# ----------------------------------------------------------------------------- one deployment (gb300)


@pytest.fixture(scope="module")
def gb300_art():
    return tempfile.mkdtemp(prefix="tls-gb300-art-")


@pytest.fixture(scope="module")
def gb300_tls(sim_cluster, gb300_art):
    yield from _deployed_over_https(sim_cluster("gb300"), gb300_art)


def test_deploy_and_smoke_over_https_with_the_test_ca(gb300_tls, gb300_art):
    sim, paths, tls = gb300_tls
    head = _plan(gb300_art, "gb300-tray01")
    assert head["api_url"] == "https://127.0.0.11:8000"
    assert head["tls"]["ca_file"] == paths["ca"] and "--ssl-certfile" in head["vllm_args"]
    smoke = routed.run(sim, gb300_art, "smoke.yml", extra=tls)
    facts = _smoke_facts(gb300_art, "gb300-tray01")
    assert smoke.status == "successful" and facts["policy"]["violations"] == [], facts["policy"]
    assert facts["base_url"] == "https://127.0.0.11:8000/v1"
    assert all(u.startswith("https://") for u in facts["server"]["metrics_urls"]), facts["server"]


def test_the_openai_sdk_verifies_the_head_and_refuses_a_wrong_ca(gb300_tls, gb300_art):
    _sim, paths, _tls = gb300_tls
    base = _plan(gb300_art, "gb300-tray01")["api_url"]
    _openai, client = _openai_client(base, paths["ca"])
    assert client.models.list().data
    openai, wrong = _openai_client(base, paths["wrong_ca"])
    with pytest.raises(openai.APIConnectionError) as err:
        wrong.models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(err.value.__cause__)


def test_plain_http_to_the_api_port_gets_no_answer(gb300_tls):
    status, _body = routed.get("http://127.0.0.11:8000/health")
    assert status is None or status >= 400


def test_the_smoke_with_a_wrong_ca_fails_naming_it(gb300_tls, gb300_art):
    sim, paths, tls = gb300_tls
    smoke = routed.run(sim, gb300_art, "smoke.yml", extra=dict(tls, smoke_ca_path=paths["wrong_ca"]))
    assert smoke.status == "failed"
    text = json.dumps(_smoke_facts(gb300_art, "gb300-tray01"))
    assert "the server's certificate was refused (CERTIFICATE_VERIFY_FAILED" in text
    assert "by the CA bundle %s" % paths["wrong_ca"] in text and "kimi_k3_tls_controller_ca_file" in text


# ----------------------------------------------------------------------------- the real router (fleet)


@pytest.fixture(scope="module")
def fleet_art():
    return tempfile.mkdtemp(prefix="tls-fleet-art-")


@pytest.fixture(scope="module")
def fleet_tls(sim_cluster, fleet_art):
    yield from _deployed_over_https(sim_cluster("fleet"), fleet_art)


@pytest.mark.sim_group(routed.ROUTER_GROUP)
def test_the_router_verifies_its_https_backends_with_the_ca(fleet_tls, fleet_art):
    sim, paths, tls = fleet_tls
    router = _plan(fleet_art, "kimi-router55")
    assert router["env"] == {"SSL_CERT_FILE": paths["ca"]}
    assert [b["url"] for b in router["router"]["backends"]] == ["https://127.0.0.51:8000", "https://127.0.0.53:8000"]
    env = sim.docker("fleet-router", "inspect", "--format", "{{json .Config.Env}}", "vllm-router").stdout
    assert "SSL_CERT_FILE=%s" % paths["ca"] in json.loads(env)
    status, body = routed.get(router["api_url"] + "/workers")
    assert status == 200, body
    workers = json.loads(body)["workers"]
    assert sorted((w["url"], w["is_healthy"]) for w in workers) == [("https://127.0.0.51:8000", True),
                                                                    ("https://127.0.0.53:8000", True)]
    assert routed.chat(router["api_url"]) == 200
    smoke = routed.run(sim, fleet_art, "smoke.yml", extra=tls)
    facts = _smoke_facts(fleet_art, "kimi-router55")
    assert smoke.status == "successful" and facts["policy"]["violations"] == [], facts["policy"]
