# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the recipe offers per GPU vendor: the expert-parallel all2all kernels and the settings that exist for one
vendor only (recipe ``all2all_by_vendor`` and ``vendor_exclusive``; pure functions)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def all2all_kernel(recipe, vendor, interconnect):
    """The recipe's cross-node expert-parallel kernel for a vendor over an interconnect (None: there is none)."""
    return ((recipe.get("all2all_by_vendor", {}).get(vendor) or {}).get(interconnect) or {}).get("backend")


def uses_all2all(sizes, moe_backend):
    """Whether vLLM dispatches an expert-parallel layout's tokens with the all2all kernels: with more than one
    data-parallel rank, or sequence parallel (TP > 1 with MegaMoE). vllm/model_executor/layers/fused_moe/config.py
    FusedMoEParallelConfig.use_all2all_kernels; reference §9.2."""
    return sizes["dp"] > 1 or (sizes["tp"] > 1 and moe_backend == "deep_gemm_mega_moe")


def exclusive_vendor(recipe, setting, value):
    """(vendor, source) when ``value`` of ``setting`` exists for one vendor only (recipe vendor_exclusive)."""
    for entry in recipe.get("vendor_exclusive", {}).get(setting, []):
        if value in entry.get("values", []) or any(str(value).startswith(p) for p in entry.get("prefixes", [])):
            return entry["vendor"], entry["source"]
    return None, None


def vendor_choices(recipe, vendor, interconnect):
    """The all2all kernels a vendor offers over an interconnect (rendered one first)."""
    spec = (recipe.get("all2all_by_vendor", {}).get(vendor) or {}).get(interconnect) or {}
    return ([spec["backend"]] if spec.get("backend") else []) + list(spec.get("options", []))
