"""The bounded sample read of the weights (weight_read) on temp files, and its place in the node probe."""
import json
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as probe_collect
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import weight_read

MIB = weight_read.MIB


class Clock:
    """A scripted clock: every call advances by ``step`` seconds."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def shards(tmp_path, sizes):
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / ("model-%05d.safetensors" % (i + 1))
        path.write_bytes(os.urandom(size))
        paths.append(str(path))
    return paths


def test_reads_every_byte_up_to_the_budget_and_reports_the_rate(tmp_path):
    paths = shards(tmp_path, [3 * MIB, 5 * MIB + 123])
    r = weight_read.sample(paths, max_bytes=64 * MIB, max_seconds=1000, clock=Clock(0.25))
    assert r["bytes"] == 8 * MIB + 123 and r["files"] == 2 and r["error"] is None
    # scripted clock: start, then one tick per read and per check; the rate is bytes over the ticks between
    assert r["mib_s"] == round((8 * MIB + 123) / float(MIB) / r["seconds"], 1)
    assert r["direct"] in (True, False)


def test_stops_at_the_byte_budget(tmp_path):
    paths = shards(tmp_path, [20 * MIB, 20 * MIB])
    r = weight_read.sample(paths, max_bytes=10 * MIB, max_seconds=1000, clock=Clock(0.01))
    assert r["files"] == 1 and 10 * MIB <= r["bytes"] <= 10 * MIB + weight_read.CHUNK


def test_stops_at_the_deadline(tmp_path):
    paths = shards(tmp_path, [40 * MIB])
    r = weight_read.sample(paths, max_bytes=1024 * MIB, max_seconds=1.0, clock=Clock(0.4))
    # start 0.4 (deadline 1.4); file loop 0.8; read check 1.2 -> one chunk; next check 1.6 stops; end 2.0
    assert r["bytes"] == weight_read.CHUNK and r["seconds"] == 1.6


def test_without_direct_io_the_cache_is_dropped_and_said(tmp_path):
    paths = shards(tmp_path, [2 * MIB])
    r = weight_read.sample(paths, max_bytes=8 * MIB, max_seconds=100, direct=False, clock=Clock(0.5))
    assert r["direct"] is False and r["bytes"] == 2 * MIB


def test_a_missing_file_is_an_error_not_a_traceback(tmp_path):
    r = weight_read.sample([str(tmp_path / "absent.safetensors")], clock=Clock(1))
    assert r["bytes"] == 0 and r["mib_s"] is None and "absent.safetensors" in r["error"]


def test_nothing_to_read():
    r = weight_read.sample([], clock=Clock(1))
    assert (r["bytes"], r["files"], r["mib_s"], r["error"]) == (0, 0, None, None)


class RealIO(probe_collect.ProbeIO):
    pass


@pytest.mark.parametrize("mib,expect_read", [(4, True), (0, False)])
def test_probe_reads_present_weights_when_asked(tmp_path, mib, expect_read):
    snap = tmp_path / "hub" / "models--moonshotai--Kimi-K3" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for name in names:
        (snap / name).write_bytes(os.urandom(3 * MIB))
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict(zip("ab", names))}))
    w = probe_collect.collect_weights(RealIO(), str(tmp_path), "moonshotai/Kimi-K3", None,
                                      {"mib": mib, "seconds": 30})
    assert w["present"] is True and w["bytes"] == 6 * MIB
    if expect_read:
        assert w["read"]["bytes"] == 6 * MIB  # whole chunks: 3 MiB, then 3 more for the last 1 MiB of budget
        assert w["read"]["files"] == 2 and w["read"]["mib_s"] > 0 and w["read"]["error"] is None
    else:
        assert w["read"] is None


def test_the_disk_finding_reports_the_rate_per_node():
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as preflight_checks
    text = preflight_checks.weight_read_text({"bytes": 512 * MIB, "seconds": 0.25, "mib_s": 2048.0, "direct": True,
                                              "files": 1, "error": None})
    assert text.startswith("; read 2048.0 MiB/s (") and "direct I/O" in text
    assert text.endswith("kimi_k3_weight_read_mib_s: 2048 sets the launch timeouts)")
    assert preflight_checks.weight_read_text(None) == ""
    assert preflight_checks.weight_read_text({"mib_s": None, "error": "x: Permission denied"}) == \
        "; weight read sample failed (x: Permission denied)"
