# -*- coding: utf-8 -*-
"""Server-side reads of the smoke and capacity modules: ``/metrics`` scrapes (merged over nodes), a background gauge
sampler for the measurement window, ``/version`` and ``/v1/models``. Plain GETs through
``ansible.module_utils.urls``; the chat requests are in ``smoke_client``."""
from __future__ import annotations

import asyncio
import json
import urllib.error

from ansible.module_utils.urls import Request, make_context

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_metrics


def split_base_url(base_url):
    """'http://h:8000' or 'http://h:8000/v1/' -> ('http://h:8000', 'http://h:8000/v1')."""
    root = (base_url or "").rstrip("/")
    if root.endswith("/v1"):
        root = root[:-3]
    return root, root + "/v1"


_TLS_CONTEXT = []


def tls_context():
    """One certificate-verifying SSL context per process. ``open_url`` (and ``Request.open`` without ``context``)
    builds a new one for every call, and loading the CA bundle costs ~80 ms of CPU: at 256 streams the metrics
    sampler's scrapes took 16 % of the client's CPU (benchmarks/smoke_vs_aiperf.py), starving the request loop."""
    if not _TLS_CONTEXT:
        _TLS_CONTEXT.append(make_context())
    return _TLS_CONTEXT[0]


def http_get(url, timeout=10.0, api_key=None):
    """GET ``url`` -> (status, text). Raises on connection errors.

    Without ``~/.netrc`` (it would replace the bearer token with basic auth for a listed host); certificates are
    verified with the process-wide context of ``tls_context()``.
    """
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    try:
        # Request.open(context=...) is in every ansible-core this collection supports (>= 2.17).
        with Request().open("GET", url, headers=headers, timeout=timeout, use_netrc=False,
                            context=tls_context()) as resp:
            return resp.getcode(), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def scrape(urls, timeout=10.0):
    """Merged snapshot of every metrics URL; unreachable URLs are listed in ``errors``."""
    snaps, errors = [], []
    for url in urls:
        try:
            status, text = http_get(url, timeout=timeout)
            if status != 200:
                errors.append("%s: HTTP %s" % (url, status))
                continue
            snaps.append(smoke_metrics.parse_metrics(text, source=url))
        except Exception as exc:  # noqa: BLE001
            errors.append("%s: %s" % (url, exc))
    merged = smoke_metrics.merge_snapshots(snaps)
    merged["errors"] = errors
    return merged


class GaugeSampler(object):
    """Samples the gauges of ``urls`` every ``interval`` seconds in a background task; keeps the peaks."""

    def __init__(self, urls, interval=0.5):
        self.urls = list(urls)
        self.interval = interval
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

    async def _loop(self):
        while True:
            snap = await asyncio.to_thread(scrape, self.urls, 5.0)
            if snap["engines"]:
                self._update(snap)
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
            snap = await asyncio.to_thread(scrape, self.urls, 5.0)
            if snap["engines"]:
                self._update(snap)
        return dict(self.peaks, samples=self.samples)


def server_info(base_url, api_key=None, timeout=30.0):
    """/version and /v1/models -> {"version", "models", "model", "max_model_len", "errors"}."""
    root, api = split_base_url(base_url)
    info = {"version": None, "models": [], "model": None, "max_model_len": None, "errors": []}
    try:
        status, text = http_get(root + "/version", timeout=timeout)
        if status == 200:
            info["version"] = json.loads(text).get("version")
        else:
            info["errors"].append("/version: HTTP %s" % status)
    except Exception as exc:  # noqa: BLE001
        info["errors"].append("/version: %s" % exc)
    try:
        status, text = http_get(api + "/models", timeout=timeout, api_key=api_key)
        if status == 200:
            data = json.loads(text).get("data") or []
            info["models"] = [m.get("id") for m in data]
            if data:
                info["model"] = data[0].get("id")
                info["max_model_len"] = data[0].get("max_model_len")
        else:
            info["errors"].append("/v1/models: HTTP %s %s" % (status, text[:200]))
    except Exception as exc:  # noqa: BLE001
        info["errors"].append("/v1/models: %s" % exc)
    return info
