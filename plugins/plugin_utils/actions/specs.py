# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs of the collection's controller-side actions, declared once.

The action plugin validates its task's arguments with its spec (``ActionBase.validate_argument_spec``: types,
defaults, choices; an unknown name is refused). The module file of the same name only documents the action (no
code, like ansible.builtin.debug); tests/unit/plugins/action/test_action_docs.py holds the documentation to this
spec. monitoring_config checks only the names against its spec: the validator deep-copies the arguments, and its
``plans`` holds every node's plan.
"""
from __future__ import annotations

import copy

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine.api import container_spec

CLUSTER_PLAN = dict(
    group=dict(type="str", default="vllm_cluster"),
    head_group=dict(type="str", default="vllm_head"),
    router_group=dict(type="str", default="vllm_router"),
    overrides=dict(type="dict", default={}),
    recipe=dict(type="str", default="kimi_k3"),
    dest=dict(type="path"),
    return_plans=dict(type="bool", default=True),
)

CLUSTER_LAYOUTS = dict(
    group=dict(type="str", default="vllm_cluster"),
    head_group=dict(type="str", default="vllm_head"),
    router_group=dict(type="str", default="vllm_router"),
    target=dict(type="raw"),
    recipe=dict(type="str", default="kimi_k3"),
    dest=dict(type="path"),
)

PREFLIGHT_REPORT = dict(
    hosts=dict(type="list", elements="str"),
    thresholds=dict(type="dict", default={}),
    show_pass=dict(type="bool", default=True),
    dest=dict(type="path"),
    probe_var=dict(type="str", default="preflight_probe_result"),
    recipe=dict(type="str", default="kimi_k3"),
)

FABRIC_REPORT = dict(
    specs=dict(type="dict", required=True),
    hosts=dict(type="list", elements="str"),
    outcome_var=dict(type="str", default="fabric_job_outcome"),
    dest=dict(type="path"),
)

VLLM_WAIT = dict(
    container_spec(),
    health_urls=dict(type="list", elements="str", default=[]),
    timeout=dict(type="float", default=3600),
    interval=dict(type="float", default=5),
    progress_every=dict(type="float", default=30),
    tail=dict(type="int", default=200),
    stall_timeout=dict(type="float", default=900),
    peers=dict(type="list", elements="str", default=[]),
    board=dict(type="str"),
    validate_certs=dict(type="bool", default=True),
    ca_path=dict(type="path"),
)

FABRIC_WAIT = dict(
    container_spec(),
    timeout=dict(type="float", required=True),
    interval=dict(type="float", default=2),
    progress_every=dict(type="float", default=15),
    tail=dict(type="int", default=40),
)

DEPLOYMENT_STATE = dict(
    plan_dir=dict(type="path", required=True),
    op=dict(type="str", default="read",
            choices=["read", "ready", "failed", "upgrade_begin", "upgrade_stage", "upgrade_end", "upgrade_recover",
                     "upgrade_supersede"]),
    plan_id=dict(type="str"), image=dict(type="str"), reason=dict(type="str"),
    from_image=dict(type="str"), to_image=dict(type="str"), from_plan_id=dict(type="str"),
    to_plan_id=dict(type="str"), stage=dict(type="str", choices=["launch", "smoke", "rollback"]),
)


MONITORING_CONFIG = dict(
    plans=dict(type="dict", required=True),
    cluster_name=dict(type="str", required=True),
    routers=dict(type="list", elements="raw", default=[]),
    dest=dict(type="path", required=True),
    scrape_interval=dict(type="str", default="15s"),
    ca_file=dict(type="path"),
)

SITE_FILES = dict(
    dest=dict(type="path", required=True),
    templates=dict(type="dict", default={}),
    playbooks=dict(type="list", elements="str", default=[]),
    playbook_template=dict(type="str", default="playbook.yml.j2"),
    inventory_root=dict(type="path"),
    inventories=dict(type="list", elements="str", default=[]),
)


def null_is_default(args, spec):
    """The validated ``args`` with an explicit null (``overrides: null``, ``peers: "{{ none }}"``) replaced by the
    spec's default. ``ActionBase.validate_argument_spec`` applies a default only to an absent option and keeps an
    explicit null as None; for the actions a null means "not given". Defaults are copied, never shared."""
    out = dict(args)
    for name, option in spec.items():
        if out.get(name) is None and option.get("default") is not None:
            out[name] = copy.deepcopy(option["default"])
    return out
