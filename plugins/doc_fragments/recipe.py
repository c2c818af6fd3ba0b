# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment(object):
    """The recipe option of the actions that read the recipe data (cluster_plan, preflight_report)."""

    DOCUMENTATION = r"""
options:
  recipe:
    description: Recipe document under C(data/recipes/).
    type: str
    default: kimi_k3
"""
