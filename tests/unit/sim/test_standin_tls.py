"""The stand-in serves https like vLLM (--ssl-keyfile/--ssl-certfile): the openai SDK and the collection's own
clients verify it with the rehearsal's test CA (sim/testca.py) and refuse it with another CA."""
import importlib.util
import os
import ssl
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from vllm_standin import testing  # noqa: E402

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server  # noqa: E402

openai = pytest.importorskip("openai")
try:  # openai 3.x ships httpx2, 1.x/2.x httpx (as smoke_client)
    import httpx2 as httpx
except ImportError:
    httpx = pytest.importorskip("httpx")


def _testca():
    spec = importlib.util.spec_from_file_location("testca", os.path.join(REPO, "sim", "testca.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wait_healthy(url, context, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.p.poll() is None:
        if launch_status.check_health(url + "/health", timeout=1.0, context=context) == 200:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    host = testing.loopback_ip()
    port = testing.free_port(host)
    paths = _testca().write_all(str(tmp_path_factory.mktemp("ca")), [host])
    proc = testing.Proc(["serve", "moonshotai/Kimi-K3", "--host", host, "--port", str(port), "-tp", "8",
                         "--served-model-name", "kimi-k3", "--ssl-keyfile", paths["key"],
                         "--ssl-certfile", paths["cert"]])
    try:
        url = "https://%s:%d" % (host, port)
        context = ssl.create_default_context(cafile=paths["ca"])
        assert _wait_healthy(url, context, proc), proc.log()
        yield url, paths, proc
    finally:
        proc.stop()


def test_the_openai_sdk_verifies_the_standin_with_the_test_ca(tls_server):
    url, paths, _proc = tls_server
    verify = ssl.create_default_context(cafile=paths["ca"])
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", http_client=httpx.Client(verify=verify))
    assert [m.id for m in client.models.list().data] == ["kimi-k3"]


def test_a_wrong_ca_is_refused_with_a_certificate_error(tls_server):
    url, paths, _proc = tls_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                           http_client=httpx.Client(verify=ssl.create_default_context(cafile=paths["wrong_ca"])))
    with pytest.raises(openai.APIConnectionError) as err:
        client.models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(err.value.__cause__)


def test_the_collections_clients_read_it_over_https(tls_server):
    url, paths, _proc = tls_server
    assert smoke_server.http_get(url + "/version", tls=(True, paths["ca"]))[0] == 200
    wrong = ssl.create_default_context(cafile=paths["wrong_ca"])
    assert launch_status.check_health(url + "/health", timeout=2.0, context=wrong) is None


def test_the_log_names_the_https_address(tls_server):
    url, _paths, proc = tls_server
    assert "Starting vLLM API server 0 on %s" % url in proc.log()


def test_a_missing_key_file_stops_the_start(tmp_path):
    host = testing.loopback_ip()
    proc = testing.Proc(["serve", "moonshotai/Kimi-K3", "--host", host, "--port", str(testing.free_port(host)),
                         "-tp", "8", "--ssl-keyfile", str(tmp_path / "absent.key"),
                         "--ssl-certfile", str(tmp_path / "absent.pem")])
    try:
        assert proc.wait(timeout=20) == 1
        assert "FileNotFoundError" in proc.log()
    finally:
        proc.stop()


def test_a_wrong_ca_is_named_in_the_smokes_server_facts(tls_server):
    url, paths, _proc = tls_server
    info = smoke_server.server_info(smoke_server.Endpoint.at(url + "/v1", tls=(True, paths["wrong_ca"])))
    assert info["model"] is None and len(info["errors"]) == 2
    for error in info["errors"]:
        assert "the server's certificate was refused (CERTIFICATE_VERIFY_FAILED: " in error
        assert "by the CA bundle %s. Fix: " % paths["wrong_ca"] in error and "kimi_k3_tls_controller_ca_file" in error
    right = smoke_server.server_info(smoke_server.Endpoint.at(url + "/v1", tls=(True, paths["ca"])))
    assert right["errors"] == [] and right["model"] == "kimi-k3"


def test_other_connection_errors_read_as_before():
    exc = OSError("[Errno 111] Connection refused")
    assert smoke_server.describe_error(exc) == "[Errno 111] Connection refused"
