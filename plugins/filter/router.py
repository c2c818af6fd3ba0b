# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters used by the router role and the smoke through the router (thin wrappers around module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: one <filter>.yml beside this file per filter.

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.router import status as router_status


def _backends(router_plan):
    if not isinstance(router_plan, dict) or not isinstance(router_plan.get("router"), dict):
        raise AnsibleFilterError("expects the router host's plan (plan_result.plans[<router host>], role router)")
    return router_plan["router"].get("backends") or []


def router_backend_health(workers, router_plan, router_host, metrics_text="", direct=None):
    """``{rows, problems}``: per plan backend the router's view (``GET /workers`` and its circuit breakers in the
    metrics) and one line per unhealthy one."""
    rows = router_status.backend_health(workers if isinstance(workers, dict) or workers is None else {},
                                        _backends(router_plan),
                                        str(metrics_text or ""), None if direct is None else dict(direct))
    return {"rows": rows, "problems": router_status.health_problems(rows, str(router_host))}


def router_usage(after_text, before_text, router_plan):
    """Requests the router sent each backend between two scrapes of its metrics, with a Markdown table."""
    report = router_status.usage(before_text, after_text, _backends(router_plan))
    report["table"] = router_status.usage_lines(report)
    return report


class FilterModule(object):
    def filters(self):
        return {"router_backend_health": router_backend_health, "router_usage": router_usage}
