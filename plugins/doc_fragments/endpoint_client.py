# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment(object):
    """Requirements and options of the modules that send requests to the vLLM OpenAI-compatible API and read its
    /metrics (vllm_smoke, vllm_capacity_step), TLS included (https behind a TLS-terminating proxy or router); their
    argument spec is module_utils/smoke/endpoint_args.py."""

    DOCUMENTATION = r"""
requirements:
  - openai >= 1.40 (tested with 3.51)
  - prometheus_client
options:
  base_url:
    description: API root of the head (or the router), with or without the trailing C(/v1), e.g.
      C(http://10.0.0.11:8000/v1).
    type: str
    required: true
  model:
    description: Model name to send. Default is the first id listed by C(/v1/models).
    type: str
  api_key:
    description: API key (C(--api-key) of the server). Sent as bearer token.
    type: str
  reasoning_effort:
    description: C(reasoning_effort) sent with every request (C(low), C(high), C(max), C(none) turns thinking off).
      Empty string sends nothing.
    type: str
    default: low
  extra_body:
    description: 'Extra JSON merged into every request body, e.g. C({"chat_template_kwargs": {"thinking": false}}).'
    type: dict
  timeout:
    description: Per-request timeout in seconds.
    type: float
    default: 3600
  metrics_urls:
    description: C(/metrics) URL of every node that serves HTTP. Default is C(<base_url root>/metrics).
    type: list
    elements: str
  metrics_interval:
    description: Seconds between gauge samples (KV cache usage, queue) while the requests run.
    type: float
    default: 0.5
  validate_certs:
    description:
      - For C(https) URLs (a TLS-terminating proxy or router in front of vLLM), whether the server certificate is
        verified, for every request the module sends to the endpoint (chat requests, C(/version), C(/v1/models),
        C(/metrics)).
      - Turn it off only for a throw-away test endpoint with a self-signed certificate; prefer O(ca_path).
    type: bool
    default: true
  ca_path:
    description: PEM file of the CA certificate(s) that sign the endpoint's certificate; used instead of the system
      CA bundle. Ignored for C(http) URLs.
    type: path
"""
