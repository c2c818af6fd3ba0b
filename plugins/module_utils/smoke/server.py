# -*- coding: utf-8 -*-
"""Server-side reads of the smoke and capacity modules: ``/metrics`` scrapes (merged over nodes), a background gauge
sampler for the measurement window, ``/version`` and ``/v1/models``. Plain GETs through
``ansible.module_utils.urls``; the chat requests are in ``smoke_client``."""
from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
from collections import namedtuple

from ansible.module_utils.urls import Request, make_context

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smoke_metrics


def split_base_url(base_url):
    """'http://h:8000' or 'http://h:8000/v1/' -> ('http://h:8000', 'http://h:8000/v1')."""
    root = (base_url or "").rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    return root, root + "/v1"


# (validate_certs, ca_path): certificates verified against the system CA bundle (or ``ca_path``, a PEM file) unless
# ``validate_certs`` is false. Every server-side read and the chat client take the same pair (module options).
DEFAULT_TLS = (True, None)

_TLS_CONTEXTS = {}


def tls_of(params):
    """The modules' ``validate_certs``/``ca_path`` options as ``(validate_certs, ca_path)``."""
    return (params.get("validate_certs", True) is not False, params.get("ca_path") or None)


class Endpoint(namedtuple("Endpoint", ("root", "api", "api_key", "timeout", "tls"))):
    """An OpenAI-compatible server, its base URL parsed once: ``root`` (``scheme://host:port``: /version, /metrics),
    ``api`` (``root/v1``), the bearer token (None: none sent), the chat requests' timeout in seconds and the TLS pair
    ``(validate_certs, ca_path)``. A tuple, so it reaches the client processes as JSON (``from_json``)."""
    __slots__ = ()

    @classmethod
    def at(cls, base_url, api_key=None, timeout=3600.0, tls=DEFAULT_TLS):
        root, api = split_base_url(base_url)
        return cls(root, api, api_key, float(timeout), tuple(tls or DEFAULT_TLS))

    @classmethod
    def from_json(cls, values):
        root, api, api_key, timeout, tls = values
        return cls(root, api, api_key, float(timeout), tuple(tls))

    def backend(self, base_url):
        """Another server (a router's backend) asked with the same token, timeout and TLS settings."""
        return Endpoint.at(base_url, self.api_key, self.timeout, self.tls)


def endpoint_of(params):
    """The endpoint the modules' options name (``base_url``, ``api_key``, ``timeout``, ``validate_certs``,
    ``ca_path``)."""
    return Endpoint.at(params["base_url"], params.get("api_key"), params.get("timeout", 3600.0), tls_of(params))


def tls_context(tls=DEFAULT_TLS):
    """One SSL context per TLS setting and process. ``open_url`` (and ``Request.open`` without ``context``) builds a
    new one for every call, and loading the CA bundle costs ~80 ms of CPU: at 256 streams the metrics sampler's
    scrapes took 16 % of the client's CPU (benchmarks/smoke_vs_aiperf.py), starving the request loop."""
    validate, ca_path = tls or DEFAULT_TLS
    key = (bool(validate), ca_path or None)
    if key not in _TLS_CONTEXTS:
        _TLS_CONTEXTS[key] = make_context(validate_certs=key[0], cafile=key[1])
    return _TLS_CONTEXTS[key]


def http_get(url, timeout=10.0, api_key=None, tls=DEFAULT_TLS):
    """GET ``url`` -> (status, text). Raises on connection errors.

    Without ``~/.netrc`` (it would replace the bearer token with basic auth for a listed host); https certificates
    are checked as ``tls`` (``(validate_certs, ca_path)``) says, with the process-wide context of ``tls_context``.
    """
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        # Request.open(context=...) is in every ansible-core this collection supports (>= 2.17).
        with Request().open("GET", url, headers=headers, timeout=timeout, use_netrc=False,
                            context=tls_context(tls)) as resp:
            return resp.getcode(), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def describe_error(exc, tls=DEFAULT_TLS):
    """A connection error as an operator reads it; a refused server certificate says which CA refused it and what
    to set."""
    reason = getattr(exc, "reason", exc)
    if not isinstance(reason, ssl.SSLCertVerificationError):
        return str(exc)
    ca_path = (tls or DEFAULT_TLS)[1]
    return ("the server's certificate was refused (CERTIFICATE_VERIFY_FAILED: %s) by %s. Fix: verify with the CA that "
            "signed the servers' certificates (kimi_k3_tls_controller_ca_file, or the role's ca_path variable)."
            % (reason.verify_message, "the CA bundle %s" % ca_path if ca_path else "the system's CAs"))


def scrape(urls, timeout=10.0, tls=DEFAULT_TLS):
    """Merged snapshot of every metrics URL; unreachable URLs are listed in ``errors``."""
    snaps, errors = [], []
    for url in urls:
        try:
            status, text = http_get(url, timeout=timeout, tls=tls)
            if status != 200:
                errors.append("%s: HTTP %s" % (url, status))
                continue
            snaps.append(smoke_metrics.parse_metrics(text, source=url))
        except Exception as exc:  # noqa: BLE001
            errors.append("%s: %s" % (url, describe_error(exc, tls)))
    merged = smoke_metrics.merge_snapshots(snaps)
    merged["errors"] = errors
    return merged


class GaugeSampler(object):
    """Samples the gauges of ``urls`` every ``interval`` seconds in a background task; keeps the peaks."""

    def __init__(self, urls, interval=0.5, tls=DEFAULT_TLS):
        self.urls = list(urls)
        self.interval = interval
        self.tls = tls
        self.peaks = {"kv_cache_usage_perc_max": None, "num_requests_waiting_max": None,
                      "num_requests_running_max": None}
        self.samples = 0
        self._task = None

    def _update(self, snap):
        s = smoke_metrics.summarise_snapshot(snap)
        self.samples += 1
        for src, dst in (("kv_cache_usage_perc_max", "kv_cache_usage_perc_max"),
                         ("num_requests_waiting", "num_requests_waiting_max"),
                         ("num_requests_running", "num_requests_running_max")):
            v = s.get(src)
            if v is not None:
                self.peaks[dst] = v if self.peaks[dst] is None else max(self.peaks[dst], v)

    async def _sample(self):
        snap = await asyncio.to_thread(scrape, self.urls, 5.0, self.tls)
        if snap["engines"]:
            self._update(snap)

    async def _loop(self):
        while True:
            await self._sample()
            await asyncio.sleep(self.interval)

    def start(self):
        if self.urls:
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self):
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        # one final sample so short windows still see something
        if self.urls:
            await self._sample()
        return dict(self.peaks, samples=self.samples)


def server_info(endpoint, timeout=30.0):
    """/version and /v1/models of an ``Endpoint`` -> {"version", "models", "model", "max_model_len", "errors"}."""
    root, api, api_key, tls = endpoint.root, endpoint.api, endpoint.api_key, endpoint.tls
    info = {"version": None, "models": [], "model": None, "max_model_len": None, "errors": []}
    try:
        status, text = http_get(root + "/version", timeout=timeout, tls=tls)
        if status == 200:
            info["version"] = json.loads(text).get("version")
        else:
            info["errors"].append("/version: HTTP %s" % status)
    except Exception as exc:  # noqa: BLE001
        info["errors"].append("/version: %s" % describe_error(exc, tls))
    try:
        status, text = http_get(api + "/models", timeout=timeout, api_key=api_key, tls=tls)
        if status == 200:
            data = json.loads(text).get("data") or []
            info["models"] = [m.get("id") for m in data]
            if data:
                info["model"] = data[0].get("id")
                info["max_model_len"] = data[0].get("max_model_len")
        else:
            info["errors"].append("/v1/models: HTTP %s %s" % (status, text[:200]))
    except Exception as exc:  # noqa: BLE001
        info["errors"].append("/v1/models: %s" % describe_error(exc, tls))
    return info
