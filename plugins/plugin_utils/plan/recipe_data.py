# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side loading of the collection's data files (recipe, vLLM flag snapshots)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os

import yaml

# libyaml's loader when PyYAML has it (as Ansible's own YAML loading does): the recipe parses ~6x faster, once in
# every worker process that plans or judges; the same documents either way.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA_DIR = os.path.join(_COLLECTION_ROOT, "data")

_CACHE = {}


def load_yaml(path):
    """The YAML document at ``path`` (safe loading: plain data only)."""
    with open(path) as handle:
        return yaml.load(handle, Loader=_SAFE_LOADER)  # nosec B506 - a safe loader


def load_recipe(name="kimi_k3", data_dir=None):
    """The recipe document ``data/recipes/<name>.yml`` (cached)."""
    path = os.path.join(data_dir or DATA_DIR, "recipes", "%s.yml" % name)
    if path not in _CACHE:
        _CACHE[path] = load_yaml(path)
    return _CACHE[path]


def load_snapshots(data_dir=None):
    """``{version: snapshot}`` for every ``data/vllm_flags/vllm-<version>.json`` (cached)."""
    folder = os.path.join(data_dir or DATA_DIR, "vllm_flags")
    if folder not in _CACHE:
        snapshots = {}
        for path in sorted(glob.glob(os.path.join(folder, "vllm-*.json"))):
            with open(path) as handle:
                doc = json.load(handle)
            snapshots[doc["version"]] = doc
        _CACHE[folder] = snapshots
    return _CACHE[folder]
