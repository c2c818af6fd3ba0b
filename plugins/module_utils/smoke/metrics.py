# -*- coding: utf-8 -*-
"""vLLM's Prometheus ``/metrics``: per-engine snapshots, merging several nodes, cluster summary and window deltas.
No I/O (the scraping is in ``smoke_server``)."""
from __future__ import annotations

try:
    from prometheus_client.parser import text_string_to_metric_families

    HAS_PROMETHEUS = True
except ImportError:  # pragma: no cover
    HAS_PROMETHEUS = False

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import stats as smoke_stats

_COUNTERS = ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
             "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
           "vllm:gpu_cache_usage_perc")
_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
               "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds")


def _label_value(text):
    """A label value as a number when it is one ('262144' -> 262144), else the text ('fp8')."""
    num = smoke_stats.parse_number(text)
    return text if num is None else num


def parse_metrics(text, source=None):
    """Parse one ``/metrics`` body into a per-engine snapshot.

    Returns ``{"engines": {engine: {...}}, "source": source}``; each engine dict has ``counters`` (name without
    ``_total`` -> value, summed over other labels), ``gauges``, ``histograms`` (name -> {"sum", "count"}) and
    ``cache_config`` (the ``vllm:cache_config_info`` labels, numbers converted). Series without an ``engine`` label
    go to engine ``"0"``. Both ``vllm:num_preemptions`` and ``vllm:num_preemptions_total`` are understood.
    """
    engines = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            eng = engines.setdefault(str(s.labels.get("engine", "0")),
                                     {"counters": {}, "gauges": {}, "histograms": {}, "cache_config": {}})
            base = name[:-6] if name.endswith("_total") else name
            if base == "vllm:cache_config_info":
                eng["cache_config"] = {k: _label_value(v) for k, v in s.labels.items()
                                       if k not in ("engine", "model_name")}
            elif base in _COUNTERS:
                eng["counters"][base] = eng["counters"].get(base, 0.0) + s.value
            elif name in _GAUGES:
                eng["gauges"][name] = eng["gauges"].get(name, 0.0) + s.value
            else:
                for h in _HISTOGRAMS:
                    if name in (h + "_sum", h + "_count"):
                        slot = eng["histograms"].setdefault(h, {"sum": 0.0, "count": 0.0})
                        slot[name[len(h) + 1:]] += s.value
    return {"engines": engines, "source": source}


def merge_snapshots(snapshots):
    """Merge snapshots of several servers. A URL listed twice counts once; the engines of different servers are
    different engines even when each numbers its own from 0 (the replicas of a fleet): with more than one server
    an engine's key is ``<source>#<engine>``."""
    seen, kept = set(), []
    for snap in snapshots:
        source = snap.get("source")
        if source is not None and source in seen:
            continue
        seen.add(source)
        kept.append(snap)
    engines = {}
    for snap in kept:
        for key, eng in snap.get("engines", {}).items():
            engines["%s#%s" % (snap.get("source"), key) if len(kept) > 1 else key] = eng
    return {"engines": engines, "sources": [s.get("source") for s in snapshots]}


def summarise_snapshot(snap):
    """Cluster-wide view of a (merged) snapshot: sums over engines, max of KV usage, KV capacity totals."""
    engines = snap.get("engines", {})
    out = {"engines": len(engines), "num_requests_running": 0.0, "num_requests_waiting": 0.0,
           "kv_cache_usage_perc_max": None, "num_preemptions": 0.0, "prompt_tokens": 0.0, "generation_tokens": 0.0,
           "kv_cache_size_tokens": None, "kv_cache_max_concurrency": None, "num_gpu_blocks": None,
           "block_size": None, "cache_config": {}}
    for key in sorted(engines):
        eng = engines[key]
        g = eng["gauges"]
        out["num_requests_running"] += g.get("vllm:num_requests_running", 0.0)
        out["num_requests_waiting"] += g.get("vllm:num_requests_waiting", 0.0)
        usage = g.get("vllm:kv_cache_usage_perc", g.get("vllm:gpu_cache_usage_perc"))
        if usage is not None:
            out["kv_cache_usage_perc_max"] = max(usage, out["kv_cache_usage_perc_max"] or 0.0)
        for c in ("num_preemptions", "prompt_tokens", "generation_tokens"):
            out[c] += eng["counters"].get("vllm:" + c, 0.0)
        cc = eng["cache_config"]
        if cc:
            out["cache_config"][key] = cc
            for f in ("kv_cache_size_tokens", "kv_cache_max_concurrency", "num_gpu_blocks"):
                if isinstance(cc.get(f), (int, float)):
                    out[f] = (out[f] or 0) + cc[f]
            if isinstance(cc.get("block_size"), (int, float)):
                out["block_size"] = cc["block_size"]
    if isinstance(out["kv_cache_max_concurrency"], float):
        out["kv_cache_max_concurrency"] = round(out["kv_cache_max_concurrency"], 4)
    return out


def _total(snap, kind, name, field=None):
    """Sum of one counter (or one field of a histogram) over the engines of a snapshot that have it."""
    values = [eng[kind].get(name) for eng in snap.get("engines", {}).values()]
    return sum(v[field] if field else v for v in values if v is not None)


def snapshot_delta(before, after):
    """Counter and histogram differences between two merged snapshots (per cluster, summed over engines)."""
    out = {}
    for c in _COUNTERS:
        out[c[len("vllm:"):]] = _total(after, "counters", c) - _total(before, "counters", c)
    for h in _HISTOGRAMS:
        ds = _total(after, "histograms", h, "sum") - _total(before, "histograms", h, "sum")
        dc = _total(after, "histograms", h, "count") - _total(before, "histograms", h, "count")
        out[h[len("vllm:"):] + "_mean"] = round(ds / dc, 6) if dc > 0 else None
    return out
