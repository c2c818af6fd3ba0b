# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The arguments, and their checks, of the modules that send requests to the vLLM OpenAI-compatible API and read
its /metrics (vllm_smoke, vllm_capacity_step). Documented once, by doc_fragments/endpoint_client.py."""
from __future__ import annotations

import os

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as smoke_client
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smoke_metrics

ENDPOINT_ARGUMENT_SPEC = dict(
    base_url=dict(type="str", required=True),
    model=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    reasoning_effort=dict(type="str", default="low"),
    extra_body=dict(type="dict"),
    timeout=dict(type="float", default=3600),
    metrics_urls=dict(type="list", elements="str"),
    metrics_interval=dict(type="float", default=0.5),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
)


def argument_spec(**own):
    """The endpoint arguments plus the module's own."""
    return dict(ENDPOINT_ARGUMENT_SPEC, **own)


def endpoint_params(module, purpose):
    """``module.params`` once the endpoint client can run: the openai SDK and prometheus_client import, ``ca_path``
    is a file; an empty ``reasoning_effort`` becomes None (not sent). Fails the module naming what to do otherwise.
    ``purpose`` completes "to send ... requests" in the missing-library message."""
    if not smoke_client.HAS_OPENAI:
        module.fail_json(msg=missing_required_lib("openai", reason="to send %s requests" % purpose),
                         exception=str(smoke_client.OPENAI_IMPORT_ERROR))
    if not smoke_metrics.HAS_PROMETHEUS:
        module.fail_json(msg=missing_required_lib("prometheus_client", reason="to parse /metrics"))
    params = dict(module.params)
    if params["ca_path"] and not os.path.isfile(params["ca_path"]):
        module.fail_json(msg="ca_path %s is not a file: give the PEM file of the CA that signs the endpoint's "
                             "certificate" % params["ca_path"])
    if params["reasoning_effort"] == "":
        params["reasoning_effort"] = None
    return params
