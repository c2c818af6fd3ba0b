# -*- coding: utf-8 -*-
"""Prefill/decode checks from vLLM's own metrics on the decode instances: did decode recompute the prefill, did KV
transfers fail. Pure functions, no I/O.

Metric names (vLLM's code):

- ``vllm:prompt_tokens_by_source`` (counter, label ``source`` over ``PromptTokenStats.ALL_SOURCES`` =
  ``local_compute``, ``local_cache_hit``, ``external_kv_transfer``; ``vllm/v1/metrics/loggers.py``
  ``PrometheusStatLogger``, ``vllm/v1/metrics/stats.py``), exported as ``..._total``. A decode instance that
  loaded the prompt's KV from its prefill counts it under ``external_kv_transfer``; ``local_compute`` is what it
  prefilled itself.
- ``vllm:request_prefill_kv_computed_tokens`` (histogram of ``num_prompt_tokens - max(num_cached_tokens, 0)`` per
  finished request, same file), used when the by-source counter is absent, against
  ``vllm:request_prompt_tokens``.
- ``vllm:nixl_num_failed_transfers``, ``vllm:nixl_num_failed_notifications``, ``vllm:nixl_num_kv_expired_reqs``
  (counters of NixlConnector's Prometheus metrics, ``vllm/distributed/kv_transfer/kv_connector/v1/
  nixl_connector.py``).

The recompute fraction of a decode instance over the smoke window is local_compute / all prompt tokens (or
computed / prompt tokens from the histograms). The last prompt token may be recomputed when the whole prompt is
cached, so a small fraction is normal; ``DEFAULT_MAX_RECOMPUTE_FRACTION`` allows 5 %.
"""
from __future__ import annotations

try:
    from prometheus_client.parser import text_string_to_metric_families

    HAS_PROMETHEUS = True
except ImportError:  # pragma: no cover
    HAS_PROMETHEUS = False

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
FAILURE_COUNTERS = ("vllm:nixl_num_failed_transfers", "vllm:nixl_num_failed_notifications",
                    "vllm:nixl_num_kv_expired_reqs")
DEFAULT_MAX_RECOMPUTE_FRACTION = 0.05


def pd_counters(text):
    """The PD-relevant counters of one ``/metrics`` body, summed over engines: ``by_source`` (None when the
    family is absent), ``kv_computed_sum``/``prompt_tokens_sum`` (None when absent) and one entry per failure
    counter (None when absent)."""
    out = {"by_source": None, "kv_computed_sum": None, "prompt_tokens_sum": None}
    out.update({name: None for name in FAILURE_COUNTERS})
    for fam in text_string_to_metric_families(text or ""):
        for s in fam.samples:
            base = s.name[:-6] if s.name.endswith("_total") else s.name
            if base == "vllm:prompt_tokens_by_source" and s.labels.get("source") in SOURCES:
                out["by_source"] = out["by_source"] or dict.fromkeys(SOURCES, 0.0)
                out["by_source"][s.labels["source"]] += s.value
            elif s.name == "vllm:request_prefill_kv_computed_tokens_sum":
                out["kv_computed_sum"] = (out["kv_computed_sum"] or 0.0) + s.value
            elif s.name == "vllm:request_prompt_tokens_sum":
                out["prompt_tokens_sum"] = (out["prompt_tokens_sum"] or 0.0) + s.value
            elif base in FAILURE_COUNTERS:
                out[base] = (out[base] or 0.0) + s.value
    return out


def _diff(after, before):
    if after is None:
        return None
    return after - (before or 0.0)


def pd_delta(before, after):
    """Window differences of two :func:`pd_counters` results of one instance."""
    out = {k: _diff(after.get(k), before.get(k)) for k in ("kv_computed_sum", "prompt_tokens_sum") + FAILURE_COUNTERS}
    if after.get("by_source") is None:
        out["by_source"] = None
    else:
        prev = before.get("by_source") or {}
        out["by_source"] = {s: after["by_source"][s] - prev.get(s, 0.0) for s in SOURCES}
    return out


def recompute_fraction(delta):
    """``(fraction, basis)`` of prompt tokens the instance prefilled itself in the window; ``(None, reason)`` when
    its metrics cannot tell or it served no prompt."""
    by_source = delta.get("by_source")
    if by_source is not None:
        total = sum(by_source.values())
        if total > 0:
            return round(by_source["local_compute"] / total, 6), "vllm:prompt_tokens_by_source"
        return None, "served no prompt token in the window"
    computed, prompts = delta.get("kv_computed_sum"), delta.get("prompt_tokens_sum")
    if computed is not None and prompts:
        return round(computed / prompts, 6), "vllm:request_prefill_kv_computed_tokens"
    return None, "neither vllm:prompt_tokens_by_source nor vllm:request_prefill_kv_computed_tokens is exported"


def judge_decode(delta, max_fraction=DEFAULT_MAX_RECOMPUTE_FRACTION, max_failures=0):
    """One decode instance's window: ``{"recompute_fraction", "basis", "kv_transfer_failures", "errors"}``."""
    fraction, basis = recompute_fraction(delta)
    failures = {k[len("vllm:"):]: delta.get(k) for k in FAILURE_COUNTERS if delta.get(k) is not None}
    errors = []
    if fraction is None:
        errors.append("recompute not measurable: %s" % basis)
    elif fraction > max_fraction:
        errors.append("decode prefilled %.1f %% of its prompt tokens itself (> %.1f %%): the prefill was recomputed, "
                      "not transferred" % (100 * fraction, 100 * max_fraction))
    total_failures = sum(failures.values())
    if total_failures > max_failures:
        errors.append("%d KV transfer failure(s) in the window (%s)" % (
            total_failures, ", ".join("%s %d" % (k, v) for k, v in sorted(failures.items()) if v)))
    return {"recompute_fraction": fraction, "basis": basis, "kv_transfer_failures": failures, "errors": errors}


def judge_pd(before, after, max_fraction=DEFAULT_MAX_RECOMPUTE_FRACTION, max_failures=0):
    """Every decode instance (``{url: pd_counters}`` before and after the window) -> ``{"instances", "errors"}``;
    an instance missing from either scrape is an error."""
    instances, errors = {}, []
    for url in sorted(set(before) | set(after)):
        if url not in before or url not in after:
            errors.append("%s: no /metrics %s the window" % (url, "before" if url not in before else "after"))
            continue
        verdict = judge_decode(pd_delta(before[url], after[url]), max_fraction, max_failures)
        instances[url] = verdict
        errors += ["%s: %s" % (url, e) for e in verdict["errors"]]
    return {"instances": instances, "errors": errors}
