# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Launch timeouts derived from a measured weight-read throughput (pure functions, no I/O).

``derive(weights_bytes, shard_bytes, read_bytes_per_s, policy)`` gives the engine's start-up limit
(``VLLM_ENGINE_READY_TIMEOUT_S``, every vendor), the launch role's readiness wait and its stall window:

* load          = weights / throughput x load_factor + fixed_s
* engine ready  = clamp(load, engine_ready floor, ceiling)
* launch ready  = clamp(engine ready + margin_s, launch_ready floor, ceiling)
* stall window  = clamp(shard / throughput x load_factor + silent_s, stall floor, ceiling)

Without a measurement every value is its ceiling (the recipe's 3600 s for the engine). The policy is the
recipe's ``timeouts`` section. ``over_ceiling`` names each value the clamp cut short, with the unclamped figure,
so that the plan can say a timeout is too short instead of rendering the ceiling silently.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

MIB = 1024 ** 2


def clamp(value, floor, ceiling):
    return max(floor, min(ceiling, value))


def derive(weights_bytes, shard_bytes, read_bytes_per_s, policy):
    """``{"engine_ready_timeout_s", "launch_ready_timeout_s", "stall_timeout_s", "basis"}`` (whole seconds)."""
    engine, launch, stall = policy["engine_ready"], policy["launch_ready"], policy["stall"]
    if not read_bytes_per_s or read_bytes_per_s <= 0 or not weights_bytes:
        return {"engine_ready_timeout_s": engine["ceiling_s"], "launch_ready_timeout_s": launch["ceiling_s"],
                "stall_timeout_s": stall["ceiling_s"], "basis": "ceiling (no weight-read measurement)"}
    factor = policy.get("load_factor", 1.0)
    load = weights_bytes / float(read_bytes_per_s) * factor + policy.get("fixed_s", 0)
    engine_s = int(math.ceil(clamp(load, engine["floor_s"], engine["ceiling_s"])))
    launch_s = int(math.ceil(clamp(engine_s + launch.get("margin_s", 0), launch["floor_s"], launch["ceiling_s"])))
    shard = shard_bytes or weights_bytes
    stall_s = int(math.ceil(clamp(shard / float(read_bytes_per_s) * factor + stall.get("silent_s", 0),
                                  stall["floor_s"], stall["ceiling_s"])))
    return {"engine_ready_timeout_s": engine_s, "launch_ready_timeout_s": launch_s, "stall_timeout_s": stall_s,
            "basis": "%.0f MiB/s weight read, %.0f GB weights" % (read_bytes_per_s / float(MIB), weights_bytes / 1e9)}


def over_ceiling(weights_bytes, shard_bytes, read_bytes_per_s, policy):
    """``[{"timeout", "derived_s", "ceiling_s"}]``: each timeout whose unclamped value exceeds its ceiling.

    Unmeasured (no rate or no weights): nothing, since the ceilings are then the only figures there are."""
    if not read_bytes_per_s or read_bytes_per_s <= 0 or not weights_bytes:
        return []
    factor = policy.get("load_factor", 1.0)
    engine_s = int(math.ceil(max(weights_bytes / float(read_bytes_per_s) * factor + policy.get("fixed_s", 0),
                                 policy["engine_ready"]["floor_s"])))
    shard = shard_bytes or weights_bytes
    unclamped = (
        ("engine_ready_timeout_s", "engine_ready", engine_s),
        ("launch_ready_timeout_s", "launch_ready", engine_s + policy["launch_ready"].get("margin_s", 0)),
        ("stall_timeout_s", "stall", int(math.ceil(shard / float(read_bytes_per_s) * factor
                                                   + policy["stall"].get("silent_s", 0)))))
    return [{"timeout": key, "derived_s": value, "ceiling_s": policy[section]["ceiling_s"]}
            for key, section, value in unclamped if value > policy[section]["ceiling_s"]]


def slowest(rates):
    """The throughput that gates a deployment: its slowest node's (None when no node was measured)."""
    measured = [r for r in rates if r]
    return min(measured) if measured else None
