# -*- coding: utf-8 -*-
"""The finalising step of a smoke run: what depends on inputs gathered around the requests (container logs of the
smoke window, GPU memory read on the nodes during it, reproduction facts) and the fail policy over all of it. No request is
sent here; the ``vllm_smoke`` module calls it at the end of a run, the ``vllm_smoke_finalise`` module again once the
role has read the logs (they exist only after the requests)."""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import tables
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import gpu as smoke_gpu
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import logs as smoke_logs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import policy as smoke_policy
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report as smoke_report


def _kv_from_logs(logs):
    kv = {h: smoke_logs.parse_kv_log(t if isinstance(t, str) else "\n".join(t)) for h, t in logs.items()}
    return {h: v for h, v in kv.items() if v["kv_cache_size_tokens"] is not None}


def finalise(facts, log_lines=None, log_results=None, node_probes=None, reproduction=None, fail_policy=None,
             capacity=None, gpu_reads=None):
    """``facts`` (the ``vllm_smoke`` facts) with ``log_findings``, ``server.kv_from_log``, ``gpu_memory``,
    ``reproduction``, ``kv_check`` and ``policy`` (re)computed.

    ``log_results``: the registered loop results of the role's ``vllm_container_log`` task (unreadable logs are
    reported as such); ``log_lines``: ``{host: text or [lines]}`` read some other way; ``gpu_reads``: the registered
    loop results of the role's ``node_gpu_memory`` task (GPU memory read while the engine served; they win over
    ``node_probes``, which are from before the launch); ``capacity``:
    ``{"prediction": the plan's capacity record of the deployment, "tolerance_pct": n}`` for ``kv_check``."""
    facts = dict(facts)
    logs, unreadable = smoke_logs.logs_from_script_results(log_results)
    logs.update(log_lines or {})
    if logs or unreadable or "log_findings" not in facts:
        facts["log_findings"] = smoke_logs.log_findings(logs, unreadable)
        kv = _kv_from_logs(logs)
        if kv:
            facts["server"] = dict(facts.get("server") or {}, kv_from_log=kv)
    if gpu_reads:
        facts["gpu_memory"] = smoke_gpu.gpu_memory_from_reads(gpu_reads)
    elif node_probes or "gpu_memory" not in facts:
        facts["gpu_memory"] = smoke_gpu.gpu_memory_summary(node_probes)
    if reproduction:
        reproduction = dict(reproduction)
        # the plan's argv is read for its parsers only: the report names them, the whole argv is the plan's
        reproduction.update(smoke_report.served_parsers(reproduction.pop("vllm_args", None)))
        facts["reproduction"] = dict(facts.get("reproduction") or {}, **reproduction)
    if capacity is not None or "kv_check" not in facts:
        capacity = capacity or {}
        server = facts.get("server") or {}
        facts["kv_check"] = capacity_check.compare(
            capacity.get("prediction"), server, server.get("kv_from_log"), facts.get("gpu_memory"),
            capacity.get("tolerance_pct", capacity_check.DEFAULT_TOLERANCE_PCT))
    violations = smoke_policy.evaluate_policy(facts, fail_policy)
    facts["policy"] = {"passed": not violations, "violations": violations}
    return facts


def module_result(facts):
    """What both smoke modules return: the facts, the Markdown report and the plain-text summary table."""
    return {"changed": False, "ansible_facts": {"vllm_smoke": facts},
            "report_markdown": smoke_report.render_markdown(facts, facts["policy"]["violations"]),
            "summary_table": tables.text_table(smoke_report.SUMMARY_HEADER, smoke_report.summary_rows(facts))}
