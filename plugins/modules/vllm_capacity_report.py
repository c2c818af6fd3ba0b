#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_capacity_report
short_description: Write the max-model-len capacity curve as JSON, Markdown and a PNG plot
version_added: "0.1.0"
description:
  - Runs on the controller. Takes the C(point) of every C(gpufleet.kimi_k3.vllm_capacity_step) result and writes
    C(capacity.json), C(capacity.md) and C(capacity.png) (matplotlib, Agg backend) to O(dest).
  - The plot shows max_model_len (log scale) against theoretical and measured max concurrency (left axis) and peak
    throughput (right axis).
requirements:
  - matplotlib (for the PNG; without it only JSON and Markdown are written)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
options:
  points:
    description: Curve points (C(sweep.point) of each step result).
    type: list
    elements: dict
    required: true
  restarts:
    description: Number of server restarts the curve needed.
    type: int
    default: 0
  ttft_limit_s:
    description: The TTFT limit used by the sweeps (recorded).
    type: float
    default: 0
  dest:
    description: Directory for the three files (created 0700 where missing; the files are written 0600).
    type: path
    required: true
  meta:
    description: Extra data recorded in the JSON (inventory, image, accelerator, ...).
    type: dict
  plan_cluster:
    description:
      - The plan's cluster record (C(plan_result.cluster)). Its capacity prediction gives the predicted refusal point
        (the longest max-model-len one sequence fits, C(max_model_len_limit)), set beside what the engine did at each
        point (C(refusal) of the points) in C(curve.refusal) and the Markdown.
    type: dict
  deployment:
    description: The deployment whose prediction counts (the only one when omitted).
    type: str
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: In check mode nothing is written; C(changed) tells whether the files would change.
"""

EXAMPLES = r"""
- name: Write the capacity curve
  gpufleet.kimi_k3.vllm_capacity_report:
    points: "{{ smoke_capacity_points }}"
    restarts: 2
    dest: "{{ kimi_k3_artifacts_dir }}/capacity"
  delegate_to: localhost
"""

RETURN = r"""
curve:
  description:
    - points (sorted by max_model_len), restarts, ttft_limit_s, meta, and refusal - the predicted refusal point
      (C(predicted_limit), C(predicted_refused_from)) against the engine (C(engine_limit), its estimate in its
      refusal; C(longest_served), C(shortest_refused), C(limit_error_pct), C(agrees), C(messages)).
  returned: always
  type: dict
files:
  description: Paths written (or that would be written).
  returned: always
  type: list
  elements: str
markdown:
  description: The Markdown table.
  returned: always
  type: str
"""

import io
import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule

try:
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as capacity
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import artifacts

    IMPORT_ERROR = None
except ImportError:  # pragma: no cover
    IMPORT_ERROR = traceback.format_exc()

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    HAS_MPL = True
except ImportError:  # pragma: no cover
    HAS_MPL = False


def render_png(curve):
    pts = curve["points"]
    x = [p["max_model_len"] for p in pts]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    ax.plot(x, [p.get("theoretical_max_concurrency") for p in pts], "o--", label="theoretical (KV tokens / L)")
    ax.plot(x, [p.get("measured_max_concurrency") for p in pts], "s-", label="measured (unsaturated)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("max-model-len (tokens)")
    ax.set_ylabel("max concurrency (requests)")
    ax2 = ax.twinx()
    ax2.plot(x, [p.get("peak_throughput_tok_s") for p in pts], "^:", color="tab:green", label="peak throughput")
    ax2.set_ylabel("output tokens/s")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper right", fontsize=8)
    ax.set_title("Kimi-K3 capacity vs max-model-len (%d restart(s))" % curve.get("restarts", 0))
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _write(path, data, check):
    """Write ``data`` owner-only (artifacts.ARTIFACT_FILE_MODE); whether it changed (or would), mode included."""
    old = None
    if os.path.exists(path):
        with open(path, "rb") as fh:
            old = fh.read()
    if old == data and (os.stat(path).st_mode & 0o777) == artifacts.ARTIFACT_FILE_MODE:
        return False
    if not check:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, artifacts.ARTIFACT_FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(path, artifacts.ARTIFACT_FILE_MODE)  # an earlier release's 0644 file keeps its mode through open()
    return True


def main():
    module = AnsibleModule(argument_spec=dict(
        points=dict(type="list", elements="dict", required=True),
        restarts=dict(type="int", default=0),
        ttft_limit_s=dict(type="float", default=0),
        dest=dict(type="path", required=True),
        meta=dict(type="dict"),
        plan_cluster=dict(type="dict"),
        deployment=dict(type="str"),
    ), supports_check_mode=True)
    if IMPORT_ERROR:
        module.fail_json(msg="cannot import the collection's module_utils", exception=IMPORT_ERROR)
    p = module.params
    curve = {"points": sorted(p["points"], key=lambda x: x["max_model_len"]), "restarts": p["restarts"],
             "ttft_limit_s": p["ttft_limit_s"], "meta": p["meta"] or {}}
    curve["refusal"] = capacity_check.curve_refusal(
        capacity_check.deployment_capacity(p["plan_cluster"], p["deployment"]), curve["points"])
    md = capacity.render_markdown(curve)
    files = {"capacity.json": (json.dumps(curve, indent=2, sort_keys=True) + "\n").encode(),
             "capacity.md": (md + "\n").encode()}
    if HAS_MPL:
        files["capacity.png"] = render_png(curve)
    if not module.check_mode:
        artifacts.make_dirs(p["dest"])
    changed = False
    for name, data in files.items():
        changed = _write(os.path.join(p["dest"], name), data, module.check_mode) or changed
    module.exit_json(changed=changed, curve=curve, markdown=md,
                     files=[os.path.join(p["dest"], n) for n in sorted(files)])


if __name__ == "__main__":
    main()
