#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_peer
short_description: Start or stop the node's read-only server of verified model blobs for its peers
version_added: 0.1.0
description:
  - Serves the blobs of one model repository in the node's HF cache that M(gpufleet.kimi_k3.hf_stage) verified by
    content hash (listed in the manifest C(.kimi-k3-verified.json) with their current size and mtime) to the other
    nodes of the cluster, so that the endpoint serves each file about once (docs/weights.md).
  - C(GET /manifest) lists the verified and refused blobs; C(GET /blobs/<hash>) serves one, resumable with Range.
    Nothing else is served, nothing is written, no token is involved. Python's standard library only.
  - A detached process bound to O(address):O(port), which ends on O(state=stopped) or after O(lifetime_s).
  - The server lives only while the weights role runs (started before staging, stopped after it on every node),
    so it is reported as C(changed=false) - the node is left as it was.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
options:
  repo:
    description: Model repo id (C(org/name)).
    type: str
    required: true
  cache_dir:
    description: Host directory of the HF cache.
    type: path
    required: true
  address:
    description: Address to bind (the node's cluster-internal address, the plan's C(internal_address)).
    type: str
  port:
    description: TCP port of the server (C(weights_peer_port)).
    type: int
    default: 29780
  state:
    description: C(started) or C(stopped).
    type: str
    choices: [started, stopped]
    default: started
  lifetime_s:
    description: Seconds after which the server ends by itself (a play that died before stopping it).
    type: int
    default: 21600
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Starts and stops nothing.
"""

EXAMPLES = r"""
- name: Serve verified blobs to the other nodes
  gpufleet.kimi_k3.hf_peer:
    repo: moonshotai/Kimi-K3
    cache_dir: /data/hf-cache
    address: 10.0.0.11
    port: 29780
"""

RETURN = r"""
pid:
  description: Process id of the server (started).
  returned: when started
  type: int
was_running:
  description: Whether a server was running before (stopped).
  returned: when stopped
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import peer


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo=dict(type="str", required=True),
            cache_dir=dict(type="path", required=True),
            address=dict(type="str"),
            port=dict(type="int", default=29780),
            state=dict(type="str", choices=["started", "stopped"], default="started"),
            lifetime_s=dict(type="int", default=21600),
        ),
        required_if=[("state", "started", ("address",))],
        supports_check_mode=True,
    )
    p = module.params
    if not hf_stage.REPO_RE.match(p["repo"]):
        module.fail_json(msg="model %r is not a Hugging Face repo id (org/name)" % (p["repo"],))
    repo_dir = hf_stage.repo_cache_dir(p["cache_dir"], p["repo"])
    if module.check_mode:
        module.exit_json(changed=False)
    try:
        if p["state"] == "stopped":
            module.exit_json(changed=False, was_running=peer.stop(repo_dir))
        _changed, rec = peer.start(repo_dir, p["address"], p["port"], p["lifetime_s"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg="cannot serve verified blobs on %s:%d: %s (set weights_peer_port to a free port, or "
                         "weights_peers: false)" % (p["address"], p["port"], exc))
    module.exit_json(changed=False, pid=rec["pid"])


if __name__ == "__main__":
    main()
