# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller finds about a model in a Hugging Face cache directory (controller-only, reads files).

``read(model, revision, cache_dir)`` looks in ``{cache_dir}/hub/models--{org}--{name}/snapshots/{revision}``
(without a revision: the snapshot ``refs/main`` names, else the only one) or, for an absolute model path, in that
directory, and returns ``{"config", "config_path", "weights_bytes", "index_path", "shard_count",
"largest_shard_bytes"}`` (keys it could not fill are absent), or None when nothing is there. The weights come
from ``model.safetensors.index.json`` (``metadata.total_size``); a shard's size from the file when it is present.
Unreadable or malformed files count as absent: the plan then falls back to the recipe data.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
MAX_JSON_BYTES = 64 * 1024 * 1024


def snapshot_dir(model, revision, cache_dir):
    """The directory holding the model's files on the controller, or None."""
    if str(model).startswith("/"):
        return model if os.path.isdir(model) else None
    repo = os.path.join(cache_dir or "", "hub", "models--" + str(model).replace("/", "--"))
    snapshots = os.path.join(repo, "snapshots")
    if revision:
        path = os.path.join(snapshots, revision)
        return path if os.path.isdir(path) else None
    try:
        with open(os.path.join(repo, "refs", "main")) as handle:
            ref = handle.read().strip()
        if ref and os.path.isdir(os.path.join(snapshots, ref)):
            return os.path.join(snapshots, ref)
    except (IOError, OSError):
        pass
    try:
        found = sorted(os.listdir(snapshots))
    except (IOError, OSError):
        return None
    return os.path.join(snapshots, found[0]) if len(found) == 1 else None


def _json(path):
    try:
        if os.path.getsize(path) > MAX_JSON_BYTES:
            return None
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _index_facts(directory):
    path = os.path.join(directory, INDEX)
    index = _json(path)
    if index is None:
        return {}
    total = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    shards = sorted(set(v for v in (index.get("weight_map") or {}).values() if isinstance(v, str))) \
        if isinstance(index.get("weight_map"), dict) else []
    out = {"index_path": path, "shard_count": len(shards) or None}
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        out["weights_bytes"] = total
    sizes = []
    for shard in shards:
        try:
            sizes.append(os.path.getsize(os.path.join(directory, os.path.basename(shard))))
        except (IOError, OSError):
            continue
    if sizes:
        out["largest_shard_bytes"] = max(sizes)
    return dict((k, v) for k, v in out.items() if v is not None)


def read(model, revision, cache_dir):
    """The facts of one model found on the controller (see the module docstring), or None."""
    directory = snapshot_dir(model, revision, cache_dir)
    if directory is None:
        return None
    facts = _index_facts(directory)
    config = _json(os.path.join(directory, CONFIG))
    if config is not None:
        facts.update(config=config, config_path=os.path.join(directory, CONFIG))
    if "weights_bytes" not in facts:
        facts.pop("index_path", None)
    return facts or None
