#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_stage
short_description: Stage a pinned Hugging Face model revision into the node's HF cache
version_added: 0.1.0
description:
  - Downloads the files of one model revision (a commit hash) from a Hugging Face endpoint (the Hub or a site mirror,
    C(HF_ENDPOINT)) into the huggingface_hub cache layout under O(cache_dir) (C(hub/models--org--name/blobs) and
    C(snapshots/<revision>)), so vLLM started with C(--revision <revision>) loads it without downloading.
  - Action plugin. It runs the node-side module in rounds of O(round_seconds) and prints a progress line per node
    (bytes, percent, rate, ETA, current file) after each round. Partial files (C(blobs/<etag>.incomplete)) are
    resumed with HTTP Range; a server that ignores Range restarts that file (listed in RV(restarted)).
  - Before any transfer the free space of O(cache_dir) must hold the missing bytes plus O(margin_gb).
  - Every file is checked against the hash the revision's file list (C(/api/models/<repo>/tree/<revision>?recursive=true))
    gives it - the LFS sha256 of weight shards, the git blob id of small files - while its bytes arrive (a resumed
    partial file is read once first). A mismatch refuses the file (listed in RV(refused) with both hashes and the
    source), deletes its bytes and never links it into the snapshot.
  - Verified blobs are recorded in a manifest beside the cache (C(.kimi-k3-verified.json) - hash, size, mtime); a
    later run reads only blobs whose size or mtime changed, or every blob with O(verify=full).
  - With O(peers), each file is pulled from the endpoint by one node (its origin, largest files spread evenly) and
    copied by the other nodes from that node's peer server (M(gpufleet.kimi_k3.hf_peer)), then checked again; a
    peer silent for O(peer_wait_s) is replaced by the endpoint.
  - A revision already staged transfers nothing, reads no blob and reports C(changed=false).
  - Standard library only on the node (no huggingface_hub). The token goes in the Authorization header only (never
    in argv, URLs or messages), only over https or to a loopback endpoint, never to a peer, and not to another
    scheme, host or port after a redirect.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
options:
  repo:
    description: Model repo id (C(org/name)).
    type: str
    required: true
  revision:
    description: Commit hash (40 hex) of the revision to stage.
    type: str
    required: true
  cache_dir:
    description: Host directory of the HF cache (the plan's C(model_cache_dir), mounted into the container).
    type: path
    required: true
  endpoint:
    description: Hugging Face endpoint (C(https://huggingface.co) or the site mirror's URL, like C(HF_ENDPOINT)).
    type: str
    default: https://huggingface.co
  token:
    description: Access token (gated or private models); from the vault.
    type: str
  margin_gb:
    description: Free space (decimal GB) that must remain after staging.
    type: float
    default: 10
  round_seconds:
    description: Seconds of transfer per round (progress is printed between rounds).
    type: float
    default: 30
  timeout:
    description: HTTP read timeout (seconds).
    type: float
    default: 60
  max_rounds:
    description: Rounds before giving up (the partial files stay and the next run resumes).
    type: int
    default: 100000
  files:
    description: Internal (the action plugin passes the file list of the first round to the next ones).
    type: list
    elements: dict
  verify:
    description:
      - C(changed) - read again only blobs whose size or mtime differs from the manifest (or that it lacks).
      - C(full) - read every blob once in this run and compare it with its listed hash.
    type: str
    choices: [changed, full]
    default: changed
  run:
    description: Id of this staging run, the same on every node (the role sets it once per play).
    type: str
  node:
    description: This node's name among O(peers) (the inventory name); used in refusals.
    type: str
  peers:
    description:
      - Every node staging this revision, this one included, in one order all nodes share; each runs
        M(gpufleet.kimi_k3.hf_peer). Unset or one node - everything comes from the endpoint.
    type: list
    elements: dict
    suboptions:
      name:
        description: Inventory name.
        type: str
        required: true
      address:
        description: Cluster-internal address (the plan's C(internal_address)).
        type: str
        required: true
      port:
        description: Port of its peer server.
        type: int
        required: true
  concurrency:
    description: Files transferred at the same time by this node.
    type: int
    default: 4
  peer_wait_s:
    description: Seconds a silent peer is waited for before its files come from the endpoint.
    type: float
    default: 600
  elapsed_s:
    description: Internal (seconds the staging ran before this round; the action plugin passes it).
    type: float
    default: 0
  peer_seen:
    description: Internal (when each peer last answered; the action plugin passes it from round to round).
    type: dict
  artifacts_dir:
    description: Controller directory for C(weights-report.json) and C(weights-report.md) (action plugin).
    type: path
  cluster:
    description: Inventory names of every node of this staging (action plugin; the report and the cluster line).
    type: list
    elements: str
  peer_port:
    description:
      - Port of the nodes' peer servers (action plugin). With two or more nodes in O(cluster), the action builds
        O(peers) from O(cluster) and each node's plan (C(plan_result.plans[host].internal_address)).
    type: int
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Lists the revision's files and checks the disk; reports what would be transferred without writing.
"""

EXAMPLES = r"""
- name: Stage the pinned revision from the site mirror
  gpufleet.kimi_k3.hf_stage:
    repo: moonshotai/Kimi-K3
    revision: 0123456789abcdef0123456789abcdef01234567
    cache_dir: /data/hf-cache
    endpoint: https://hf-mirror.example
    token: "{{ vault_hf_token }}"
"""

RETURN = r"""
bytes_total:
  description: Bytes of the revision.
  returned: success
  type: int
bytes_present:
  description: Bytes already in the cache before this run.
  returned: success
  type: int
bytes_transferred:
  description: Bytes downloaded by this run (0 when the revision was already staged).
  returned: success
  type: int
files_total:
  description: Files of the revision.
  returned: success
  type: int
files_transferred:
  description: Files downloaded by this run.
  returned: success
  type: int
restarted:
  description: Files whose partial download had to start over (the server ignored Range).
  returned: success
  type: list
  elements: str
verified:
  description: C(ok), C(problems) (missing, wrongly sized or not content-verified files) and C(extra) (files not
    in the list).
  returned: success
  type: dict
bytes_from_endpoint:
  description: Bytes this node downloaded from the endpoint.
  returned: success
  type: int
bytes_from_peers:
  description: Bytes this node copied from peers.
  returned: success
  type: int
files_verified:
  description: Files this run checked by content hash (transferred or read again from disk).
  returned: success
  type: int
files_rehashed:
  description: Blobs already on disk that this run read again (changed since the manifest, or O(verify=full)).
  returned: success
  type: int
refused:
  description: Files refused for a hash mismatch - node, path, algo, expected, actual, source, msg.
  returned: success
  type: list
  elements: dict
peer_fallbacks:
  description: Files this node took from the endpoint although a peer was their origin.
  returned: success
  type: list
  elements: str
snapshot_dir:
  description: The staged snapshot directory.
  returned: success
  type: str
elapsed_s:
  description: Seconds the staging took (action plugin).
  returned: success
  type: float
rounds:
  description: Rounds run (action plugin).
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            cache_dir=dict(type="path", required=True),
            endpoint=dict(type="str", default="https://huggingface.co"),
            token=dict(type="str", no_log=True),
            margin_gb=dict(type="float", default=10.0),
            round_seconds=dict(type="float", default=30.0),
            timeout=dict(type="float", default=60.0),
            max_rounds=dict(type="int", default=100000),
            files=dict(type="list", elements="dict"),
            verify=dict(type="str", choices=["changed", "full"], default="changed"),
            run=dict(type="str"),
            node=dict(type="str"),
            peers=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True), address=dict(type="str", required=True),
                port=dict(type="int", required=True))),
            concurrency=dict(type="int", default=4),
            peer_wait_s=dict(type="float", default=600.0),
            elapsed_s=dict(type="float", default=0.0),
            peer_seen=dict(type="dict"),
            artifacts_dir=dict(type="path"),
            cluster=dict(type="list", elements="str"),
            peer_port=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = hf_stage.stage(p["repo"], p["revision"], p["cache_dir"], p["endpoint"], token=p["token"],
                                max_seconds=p["round_seconds"], margin_bytes=int(p["margin_gb"] * 1e9),
                                files=p["files"], check_mode=module.check_mode, timeout=p["timeout"],
                                verify=p["verify"], run=p["run"], node=p["node"], peers=p["peers"],
                                concurrency=p["concurrency"], peer_wait_s=p["peer_wait_s"],
                                elapsed_s=p["elapsed_s"], peer_seen=p["peer_seen"])
    except (hf_stage.StageError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
