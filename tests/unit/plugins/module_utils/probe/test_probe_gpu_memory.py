"""GPU memory read now on a node (node_gpu_memory): the fixture nodes' recorded tool answers, exact values."""
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import gpu_memory

from tests.unit.fixtures.probes.fixture_io import FixtureIO

WHEN = 1796551200.25  # 2026-12-06T10:00:00Z


def clock():
    return WHEN


def test_nvidia_node():
    got = gpu_memory.read(FixtureIO("gb300-tray01"), clock=clock)
    assert got == {"read_at": "2026-12-06T10:00:00Z", "read_epoch": WHEN, "vendor": "nvidia", "errors": [],
                   "gpus": [{"index": i, "memory_used_mib": 0, "memory_total_mib": 284208} for i in range(4)]}


def test_amd_node():
    got = gpu_memory.read(FixtureIO("mi355x-node01"), clock=clock)
    assert (got["vendor"], len(got["gpus"]), got["errors"]) == ("amd", 8, [])
    assert got["gpus"][0] == {"index": 0, "memory_used_mib": 283, "memory_total_mib": 294896}


def test_missing_or_failing_tools_are_reported_not_raised():
    none = gpu_memory.read(FixtureIO("gb300-no-nvidia-smi"), clock=clock)
    assert (none["vendor"], none["gpus"], none["errors"]) == (
        None, [], ["neither nvidia-smi nor amd-smi on this node: GPU memory not read"])
    io = FixtureIO("gb300-tray01")
    io.m["commands"] = {}
    broken = gpu_memory.read(io, clock=clock)
    assert broken["vendor"] == "nvidia" and broken["gpus"] == []
    assert broken["errors"][0].startswith("nvidia-smi --query-gpu failed (rc 1): fixture: no output recorded")


def test_container_memory_is_docker_stats_figure_usage_less_inactive_file():
    mib = 1048576
    v2 = {"memory_stats": {"usage": 3000 * mib, "limit": 6144 * mib, "stats": {"inactive_file": 200 * mib + 1}}}
    assert gpu_memory.container_memory(v2, "vllm-kimi-k3") == {"container": "vllm-kimi-k3", "used_mib": 2800.0,
                                                               "limit_mib": 6144.0}
    v1 = {"memory_stats": {"usage": 100 * mib, "limit": 200 * mib, "stats": {"total_inactive_file": 50 * mib}}}
    assert gpu_memory.container_memory(v1, "c")["used_mib"] == 50.0
    # no cache figure, or one larger than the usage: the usage as it is
    assert gpu_memory.container_memory({"memory_stats": {"usage": mib}}, "c")["used_mib"] == 1.0
    assert gpu_memory.container_memory({"memory_stats": {"usage": mib, "stats": {"inactive_file": 2 * mib}}},
                                       "c")["used_mib"] == 1.0
    # a stopped container answers without memory figures; garbage is no figure, never an exception
    for answer in ({"memory_stats": {}}, {}, None, [], {"memory_stats": {"usage": "x", "limit": True}}):
        assert gpu_memory.container_memory(answer, "c") == {"container": "c", "used_mib": None, "limit_mib": None}
