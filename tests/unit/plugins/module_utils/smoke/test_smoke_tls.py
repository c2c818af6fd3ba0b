"""https endpoints (a TLS-terminating proxy or router in front of vLLM): validate_certs and ca_path of vllm_smoke and
vllm_capacity_step, against the fake vLLM server behind TLS on 127.0.0.1 with a CA generated here."""
import datetime
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as cr
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server

from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM
from tests.unit.plugins.module_utils.smoke.test_smoke_runner import params


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, issuer, key, sign_key, ca, san=None):
    """A certificate with the extensions Python 3.13's strict X.509 checks want (key identifiers, key usage)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(sign_key.public_key()), critical=False)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=not ca,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                                      encipher_only=False, decipher_only=False), critical=True))
    if not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(sign_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 signed by it -> paths of ca.pem, server.pem, server.key."""
    d = tmp_path_factory.mktemp("pki")
    ca_key, srv_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_name("kimi-k3 test CA"), _name("kimi-k3 test CA"), ca_key, ca_key, True)
    srv = _cert(_name("127.0.0.1"), ca.subject, srv_key, ca_key, False,
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "server.pem").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    (d / "server.key").write_bytes(srv_key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    return {k: str(d / (k + (".key" if k == "key" else ".pem"))) for k in ("ca", "server")} | {
        "key": str(d / "server.key")}


class TLSFake(FakeVLLM):
    """FakeVLLM behind TLS (the listening socket wrapped; the handshake happens on accept)."""

    def __init__(self, pki, **kw):
        FakeVLLM.__init__(self, **kw)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki["server"], pki["key"])
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.base_url = "https://127.0.0.1:%d/v1" % self.port


@pytest.fixture(autouse=True)
def fresh_contexts(monkeypatch):
    monkeypatch.setattr(smoke_server, "_TLS_CONTEXTS", {})


def test_smoke_over_https_with_the_ca(pki):
    with TLSFake(pki) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["text"], concurrency=2, ca_path=pki["ca"]))
    assert facts["groups"]["text"]["status"] == "ok", facts["groups"]["text"]
    assert facts["base_url"].startswith("https://127.0.0.1:")
    s = facts["server"]
    assert s["version"] == "0.28.0" and s["kv_cache_size_tokens"] == 262144 and s["errors"] == []


def test_smoke_over_https_refuses_an_unknown_ca(pki):
    with TLSFake(pki) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["text"], concurrency=1, model="moonshotai/Kimi-K3"))
        assert f.requests == []  # nothing reached the server
    assert facts["groups"]["text"]["status"] == "failed"
    assert "CERTIFICATE_VERIFY_FAILED" in facts["groups"]["text"]["error"]
    assert any("CERTIFICATE_VERIFY_FAILED" in e for e in facts["server"]["errors"])


def test_smoke_over_https_without_verification(pki):
    with TLSFake(pki) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["text"], concurrency=1, validate_certs=False))
    assert facts["groups"]["text"]["status"] == "ok" and facts["server"]["errors"] == []


def _sweep_params(base_url, **kw):
    p = {"base_url": base_url, "model": None, "api_key": None, "max_model_len": None, "concurrency_levels": [1, 2],
         "max_concurrency": 4, "requests_per_level": 1, "output_tokens": 4, "prompt_fraction": 0.01,
         "max_prompt_tokens": 64, "ttft_limit_s": 0, "plateau_gain": 0.05, "stop_on_saturation": False,
         "reasoning_effort": None, "extra_body": None, "metrics_urls": None, "metrics_interval": 0.05,
         "log_text": None, "restarted": False, "timeout": 10.0}
    p.update(kw)
    return p


def test_capacity_step_over_https(pki):
    with TLSFake(pki, tokens=4) as f:
        ok = cr.run_sweep(_sweep_params(f.base_url, ca_path=pki["ca"]))
        bad = cr.run_sweep(_sweep_params(f.base_url, max_model_len=32768, model="m"))
    assert [s["failed_requests"] for s in ok["steps"]] == [0, 0] and ok["errors"] == []
    assert ok["kv"]["source"] == "metrics"
    assert bad["steps"] and all(s["failed_requests"] == s["requests"] for s in bad["steps"])
    assert any("CERTIFICATE_VERIFY_FAILED" in e for e in bad["steps"][0]["errors"])
