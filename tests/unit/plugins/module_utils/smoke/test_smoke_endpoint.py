"""smoke_server.Endpoint: the base URL parsed once, the module options read once, the JSON round trip to a client
process, a backend asked with the endpoint's token, timeout and TLS settings."""
import json

from hypothesis import given, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server


def test_endpoint_at_parses_the_base_url_once():
    ep = smoke_server.Endpoint.at("https://h:8000/v1/", "k-secret", 60, (False, "/ca.pem"))
    assert ep == ("https://h:8000", "https://h:8000/v1", "k-secret", 60.0, (False, "/ca.pem"))
    assert (ep.root, ep.api, ep.api_key, ep.timeout, ep.tls) == tuple(ep)


def test_endpoint_of_reads_the_module_options():
    params = {"base_url": "http://10.0.0.1:8000", "api_key": None, "timeout": 3600, "validate_certs": False,
              "ca_path": ""}
    assert smoke_server.endpoint_of(params) == ("http://10.0.0.1:8000", "http://10.0.0.1:8000/v1", None, 3600.0,
                                                (False, None))
    assert smoke_server.endpoint_of({"base_url": "http://h:1/v1"}) == ("http://h:1", "http://h:1/v1", None, 3600.0,
                                                                       (True, None))


def test_a_backend_keeps_token_timeout_and_tls():
    ep = smoke_server.Endpoint.at("http://router:8000", "k", 30.0, (True, "/ca.pem"))
    assert ep.backend("http://10.0.0.7:8100/") == ("http://10.0.0.7:8100", "http://10.0.0.7:8100/v1", "k", 30.0,
                                                   (True, "/ca.pem"))


def test_the_endpoint_crosses_to_a_client_process_as_json():
    ep = smoke_server.Endpoint.at("http://h:8000", "k", 20.0, (True, None))
    again = smoke_server.Endpoint.from_json(json.loads(json.dumps({"endpoint": ep}))["endpoint"])
    assert again == ep and isinstance(again.tls, tuple) and hash(again.tls) == hash((True, None))


_HOSTS = st.from_regex(r"https?://[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True)


@given(_HOSTS, st.sampled_from(["", "/", "/v1", "/v1/"]), st.one_of(st.none(), st.text(max_size=8)),
       st.floats(min_value=0.1, max_value=1e5), st.booleans(), st.one_of(st.none(), st.text(max_size=8)))
def test_any_spelling_of_the_base_url_gives_one_endpoint(host, suffix, key, timeout, validate, ca_path):
    ep = smoke_server.Endpoint.at(host + suffix, key, timeout, (validate, ca_path))
    assert ep.root == host and ep.api == host + "/v1"
    assert smoke_server.Endpoint.from_json(json.loads(json.dumps(ep))) == ep
