"""engine_api: every engine call goes through community.docker's client, so unix, plain and TLS tcp:// and ssh://
engine URLs all work; the URL and option checks refuse what that client refuses, with the option to change.

Fakes: a Docker-API-shaped HTTP server on a unix socket, on 127.0.0.1 plain and with TLS (the rehearsal's test CA,
sim/testca.py), and a fake ``ssh`` command on PATH that records its argv and bridges stdio to the unix socket
(what ``docker system dial-stdio`` does on the far side), so the ssh transport is exercised without any ssh
connection."""
import datetime
import http.server
import importlib.util
import json
import os
import socketserver
import ssl
import stat
import sys
import threading

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as E
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status
from tests.helpers.runner import REPO

SDK = pytest.importorskip("ansible_collections.community.docker.plugins.module_utils._api.utils.utils")
from ansible_collections.community.docker.plugins.module_utils._api.transport.sshconn import \
    SSHHTTPAdapter  # noqa: E402

VERSION = {"Version": "29.7.2", "ApiVersion": "1.54"}


class _Engine(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"    # keep-alive, as dockerd answers

    def do_GET(self):  # noqa: N802
        body = {"/version": VERSION, "/containers/vllm/json": {"State": {"Running": True}}}.get(self.path)
        data = json.dumps(body or {"message": "No such container"}).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _UnixEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        req, _addr = socketserver.UnixStreamServer.get_request(self)
        return req, ("local", 0)


def _serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture()
def unix_engine(tmp_path):
    path = str(tmp_path / "docker.sock")
    srv = _serve(_UnixEngine(path, _Engine))
    yield path
    srv.shutdown()
    srv.server_close()


@pytest.fixture()
def tcp_engine():
    srv = _serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine))
    yield srv
    srv.shutdown()
    srv.server_close()


def _testca():
    spec = importlib.util.spec_from_file_location("testca", os.path.join(REPO, "sim", "testca.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _client_cert(testca, ca_cert, ca_key, path):
    """A client certificate (clientAuth) signed by the test CA, written as cert + key files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (testca._builder(testca._name("kimi-k3 engine client"), ca_cert.subject, key.public_key(), now)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    with open(path + ".pem", "wb") as f:
        f.write(testca.cert_pem(cert))
    with open(path + ".key", "wb") as f:
        f.write(testca.key_pem(key))
    return path + ".pem", path + ".key"


@pytest.fixture()
def tls_engine(tmp_path):
    """An engine on https://127.0.0.1 that requires a client certificate of the test CA (dockerd --tlsverify)."""
    pytest.importorskip("cryptography")
    testca = _testca()
    ca_cert, ca_key = testca.make_ca()
    wrong, _k = testca.make_ca("unrelated CA (must be refused)")
    cert, key = testca.make_server_cert(ca_cert, ca_key, ["127.0.0.1"])
    files = {"ca": tmp_path / "ca.pem", "wrong_ca": tmp_path / "wrong.pem", "cert": tmp_path / "server.pem",
             "key": tmp_path / "server.key"}
    for name, data in (("ca", testca.cert_pem(ca_cert)), ("wrong_ca", testca.cert_pem(wrong)),
                       ("cert", testca.cert_pem(cert)), ("key", testca.key_pem(key))):
        files[name].write_bytes(data)
    paths = dict((k, str(v)) for k, v in files.items())
    paths["client_cert"], paths["client_key"] = _client_cert(testca, ca_cert, ca_key, str(tmp_path / "client"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["cert"], paths["key"])
    ctx.load_verify_locations(paths["ca"])
    ctx.verify_mode = ssl.CERT_REQUIRED
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    _serve(srv)
    yield srv, paths
    srv.shutdown()
    srv.server_close()


# ----------------------------------------------------------------------------- transports


def test_unix_socket_engine(unix_engine, tmp_path):
    status, body = E.engine_get("unix://" + unix_engine, "/version")
    assert (status, json.loads(body)) == (200, VERSION)
    assert E.engine_get({"docker_host": "unix://" + unix_engine}, "/containers/gone/json")[0] == 404
    with pytest.raises(E.EngineError) as exc:
        E.engine_get("unix://" + str(tmp_path / "nope.sock"), "/version")
    assert str(exc.value).startswith("no answer from the engine: ")
    assert "No such file or directory" in str(exc.value)


def test_plain_tcp_engine(tcp_engine):
    url = "tcp://127.0.0.1:%d" % tcp_engine.server_address[1]
    assert E.engine_get(url, "/version") == (200, json.dumps(VERSION).encode())


def test_tls_tcp_engine_verified_with_client_certificate(tls_engine):
    srv, paths = tls_engine
    opts = {"docker_host": "tcp://127.0.0.1:%d" % srv.server_address[1], "validate_certs": True,
            "ca_path": paths["ca"], "client_cert": paths["client_cert"], "client_key": paths["client_key"]}
    assert E.engine_get(opts, "/version")[0] == 200
    with pytest.raises(E.EngineError) as exc:      # a CA that did not sign the engine's certificate
        E.engine_get(dict(opts, ca_path=paths["wrong_ca"]), "/version")
    assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value)
    with pytest.raises(E.EngineError):             # plain HTTP to a TLS engine gets no answer
        E.engine_get({"docker_host": opts["docker_host"]}, "/version")
    # tls without verification still presents the client certificate
    unverified = dict(opts, validate_certs=False, tls=True, ca_path=None)
    assert E.engine_get(unverified, "/version")[0] == 200


def test_launch_status_api_takes_the_client_options(tls_engine):
    srv, paths = tls_engine
    api = launch_status.DockerAPI("tcp://127.0.0.1:%d" % srv.server_address[1],
                                  docker_client={"validate_certs": True, "ca_path": paths["ca"],
                                                 "client_cert": paths["client_cert"],
                                                 "client_key": paths["client_key"]})
    assert api.inspect("vllm") == {"State": {"Running": True}}
    assert api.inspect("gone") is None
    with pytest.raises(launch_status.DockerError) as exc:
        launch_status.DockerAPI("ssh://kimi@127.0.0.2/var/run").get("/version")
    assert "no path in an ssh:// engine URL" in str(exc.value)


FAKE_SSH = r'''#!%s
"""Stand-in for ssh: records argv, bridges stdin/stdout to the engine socket (docker system dial-stdio)."""
import os, socket, sys, threading
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["FAKE_SSH_ENGINE"])
def pump_in():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
threading.Thread(target=pump_in, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    os.write(1, data)
'''


def test_ssh_engine_through_the_ssh_command(unix_engine, tmp_path, monkeypatch):
    """use_ssh_client: the client runs ``ssh -l USER -p PORT -- HOST docker system dial-stdio`` and speaks the
    Engine API over its stdio (here a fake ssh that reaches the fake engine; no ssh connection is made)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ssh"
    fake.write_text(FAKE_SSH % sys.executable)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "ssh.log"
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "")))
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.setenv("FAKE_SSH_ENGINE", unix_engine)
    opts = {"docker_host": "ssh://kimi@127.0.0.2:2222", "use_ssh_client": True}
    status, body = E.engine_get(opts, "/version")
    assert (status, json.loads(body)) == (200, VERSION)
    assert log.read_text().splitlines()[0] == "-l kimi -p 2222 -- 127.0.0.2 docker system dial-stdio"


def test_ssh_engine_client_is_the_sdk_ssh_adapter():
    client = E.open_client({"docker_host": "ssh://kimi@127.0.0.3", "use_ssh_client": True})
    try:
        assert client.base_url == "http+docker://ssh"
        adapter = client.get_adapter("http+docker://ssh/version")
        assert isinstance(adapter, SSHHTTPAdapter)
        assert (adapter.ssh_host, adapter.ssh_client) == ("kimi@127.0.0.3:22", None)   # the ssh command, not paramiko
    finally:
        client.close()


# ----------------------------------------------------------------------------- options and URL checks


def test_connect_params_follow_community_docker():
    assert E.connect_params({"docker_host": "tcp://10.0.0.5:2376", "validate_certs": True, "ca_path": "/c/ca.pem",
                             "client_cert": "/c/cert.pem", "client_key": "/c/key.pem"}, 5) == {
        "base_url": "https://10.0.0.5:2376", "version": E.MINIMUM_DOCKER_API_VERSION, "timeout": 5,
        "tls": {"verify": True, "client_cert": ("/c/cert.pem", "/c/key.pem"), "ca_cert": "/c/ca.pem"}}
    assert E.connect_params({"docker_host": "tcp://10.0.0.5:2376", "tls": True}, 5)["tls"] == {"verify": False}
    assert "tls" not in E.connect_params({"docker_host": "tcp://10.0.0.5:2375"}, 5)
    assert E.connect_params({"docker_host": "ssh://u@h", "use_ssh_client": True}, 5)["use_ssh_client"] is True
    assert E.connect_params({"docker_client": {"tls": None}}, 5)["base_url"] == E.DEFAULT_DOCKER_HOST


@pytest.mark.parametrize("opts,want", [
    ({"docker_host": "unix:///var/run/docker.sock", "tls": True},
     ("tls", "tls applies to a tcp:// engine URL only; docker_host is unix://.")),
    ({"docker_host": "ssh://u@h", "ca_path": "/ca.pem", "validate_certs": True},
     ("validate_certs", "validate_certs applies to a tcp:// engine URL only; docker_host is ssh://.")),
    ({"docker_host": "tcp://h:2376", "tls": True, "client_cert": "/c.pem"},
     ("client_key", "client_cert and client_key go together (a client certificate and its key).")),
    ({"docker_host": "tcp://h:2376", "tls": True, "ca_path": "/ca.pem"},
     ("validate_certs", "ca_path is read only when validate_certs is true (without it nothing is verified).")),
    ({"docker_host": "tcp://h:2376", "use_ssh_client": True},
     ("use_ssh_client", "use_ssh_client applies to an ssh:// engine URL only; docker_host is tcp://.")),
    ({"docker_host": "ssh://u@h/run/docker.sock"},
     ("docker_host", "'ssh://u@h/run/docker.sock': the Docker SDK allows no path in an ssh:// engine URL (it runs "
                     "`docker system dial-stdio` on the host).")),
    ({"docker_host": "tcp://u:secret@h:2376"},
     ("docker_host", "the URL (password hidden): the Docker SDK refuses a query, fragment or password in an "
                     "engine URL.")),
])
def test_options_problem_names_the_option(opts, want):
    assert E.options_problem(opts) == want
    with pytest.raises(E.EngineError) as exc:
        E.open_client(opts)
    assert str(exc.value) == "%s: %s" % want
    assert "secret" not in str(exc.value)


@pytest.mark.parametrize("url", ["unix:///var/run/docker.sock", "tcp://10.0.0.5:2376", "tcp://[fd00::5]:2375",
                                 "https://engine.example:2376", "ssh://kimi@10.0.0.5", "ssh://10.0.0.5:2222"])
def test_good_urls(url):
    assert E.url_problem(url) is None
    assert E.options_problem({"docker_host": url}) is None


@pytest.mark.parametrize("url,why", [
    ("/var/run/docker.sock", "its scheme is not unix://, tcp:// or ssh://"),
    ("npipe:////./pipe/docker_engine", "its scheme is not unix://, tcp:// or ssh://"),
    ("tcp://10.0.0.5", "a tcp:// engine URL needs a port"),
    ("https://10.0.0.5", "a https:// engine URL needs a port"),
    ("tcp://h:99999", "its port is not a number 1-65535"),
    ("ssh://h/x", "the Docker SDK allows no path in an ssh:// engine URL"),
    ("tcp://h:2376?x=1", "the Docker SDK refuses a query"),
    ("unix:///run/docker.sock\n", "it holds whitespace or control characters"),
    ("", "it is empty"),
])
def test_bad_urls(url, why):
    assert E.url_problem(url).startswith(why)


_URL_TEXT = st.text(alphabet=st.sampled_from(list("ab09:/@.[]?#%-_~ \n\x00")), max_size=24)
_URLS = st.one_of(_URL_TEXT, st.builds(lambda s, rest: s + rest,
                                       st.sampled_from(["unix://", "tcp://", "ssh://", "https://", "http://", ""]),
                                       _URL_TEXT))


@settings(max_examples=400, deadline=None)
@given(_URLS)
def test_url_check_never_raises_and_accepts_only_what_the_sdk_accepts(url):
    why = E.url_problem(url)
    assert why is None or isinstance(why, str)
    if why is None:
        SDK.parse_host(url)          # the client takes every URL the check lets through


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "docker_host": _URLS, "tls": st.booleans(), "validate_certs": st.booleans(), "use_ssh_client": st.booleans(),
    "ca_path": st.sampled_from([None, "/ca.pem"]), "client_cert": st.sampled_from([None, "/c.pem"]),
    "client_key": st.sampled_from([None, "/k.pem"])}))
def test_options_check_never_raises(opts):
    problem = E.options_problem(opts)
    assert problem is None or (problem[0] in E.CLIENT_OPTIONS and problem[1].endswith("."))


def test_cli_fallback_asks_the_same_engine():
    assert E.cli_argv({}, ["version"]) == ["docker", "version"]
    assert E.cli_argv({"docker_host": "tcp://h:2376", "docker_client": {
        "validate_certs": True, "ca_path": "/c/ca.pem", "client_cert": "/c/cert.pem", "client_key": "/c/key.pem"}},
        ["info"]) == ["docker", "-H", "tcp://h:2376", "--tlsverify", "--tlscacert", "/c/ca.pem", "--tlscert",
                      "/c/cert.pem", "--tlskey", "/c/key.pem", "info"]
    assert E.cli_argv({"docker_host": "ssh://u@h"}, ["info"]) == ["docker", "-H", "ssh://u@h", "info"]


def test_ssh_without_paramiko_names_the_library_and_the_alternative():
    try:
        import paramiko  # noqa: F401  pylint: disable=unused-import
    except ImportError:
        pass
    else:
        pytest.skip("paramiko is installed: the client would connect")
    with pytest.raises(E.EngineError) as exc:
        E.open_client({"docker_host": "ssh://kimi@127.0.0.4"})
    assert "paramiko" in str(exc.value) and "or set use_ssh_client to use the node's ssh command" in str(exc.value)
