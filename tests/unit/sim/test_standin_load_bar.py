"""The stand-in's weight-loading progress bar is the one vLLM's loader for its --load-format prints, and the
collection's launch status parser reads each of them as weight progress."""

import pytest
from hypothesis import given, strategies as st

from vllm_standin import flags, main, testing

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status

MODEL = "moonshotai/Kimi-K3"
SNAP = flags.Snapshot(flags.load_snapshot("0.28.0"))


def _bar(*args):
    _model, values, _explicit = flags.parse_args([MODEL] + list(args), SNAP)
    return main.load_bar(values)


@pytest.mark.parametrize("args,desc", [
    ((), "Loading safetensors checkpoint shards"),
    (("--load-format", "auto"), "Loading safetensors checkpoint shards"),
    (("--load-format", "safetensors"), "Loading safetensors checkpoint shards"),
    (("--load-format", "fastsafetensors"), "Loading fastsafetensors checkpoint shards"),
    (("--load-format", "instanttensor"), "Loading safetensors using InstantTensor loader"),
    (("--load-format", "runai_streamer"), "Loading safetensors using Runai Model Streamer"),
    (("--load-format", "pt"), "Loading pt checkpoint shards"),
    (("--load-format", "npcache"), "Loading np_cache checkpoint shards"),
    (("--safetensors-load-strategy", "eager"), "Loading safetensors checkpoint shards (eager)"),
    (("--load-format", "fastsafetensors", "--safetensors-load-strategy", "eager"),
     "Loading fastsafetensors checkpoint shards"),
    (("--model-loader-extra-config", '{"enable_multithread_load": true}'), "Multi-thread loading shards"),
    (("--model-loader-extra-config.enable_multithread_load", "true", "--safetensors-load-strategy", "eager"),
     "Multi-thread loading shards"),
    (("--load-format", "pt", "--model-loader-extra-config", '{"enable_multithread_load": true}'),
     "Multi-thread loading pt checkpoint shards"),
    (("--load-format", "npcache", "--model-loader-extra-config", '{"enable_multithread_load": true}'),
     "Loading np_cache checkpoint shards"),
    (("--load-format", "fastsafetensors", "--model-loader-extra-config", "not json"),
     "Loading fastsafetensors checkpoint shards"),
])
def test_the_bar_follows_the_load_format(args, desc):
    assert _bar(*args) == desc


BARS = {b for pair in main.LOAD_BARS.values() for b in pair if b}


@pytest.mark.parametrize("desc", sorted(BARS | {"Loading safetensors checkpoint shards (eager)"}))
def test_the_launch_status_parser_reads_every_bar_the_standin_prints(desc):
    line = main._progress(48, 1.5, desc)
    assert line == "%s:  50%% Completed | 48/96 [00:01<00:01, 32.00it/s]" % desc
    assert launch_status.classify_phase([line]) == ("loading weights", "checkpoint shards 50%")


EXTRA_CONFIGS = st.one_of(st.none(), st.text(max_size=40), st.dictionaries(st.text(max_size=8), st.booleans()))


@given(st.text(max_size=40), EXTRA_CONFIGS)
def test_any_load_format_and_extra_config_get_a_known_bar(load_format, extra):
    desc = main.load_bar({"load_format": load_format, "model_loader_extra_config": extra})
    assert desc in BARS


def test_a_fastsafetensors_start_prints_its_bar():
    host = testing.loopback_ip()
    port = testing.free_port(host)
    p = testing.Proc(["serve", MODEL, "-tp", "8", "--host", host, "--port", str(port),
                      "--load-format", "fastsafetensors"])
    try:
        assert testing.wait_status(host, port, 200, proc=p), p.log()
        log = p.log()
    finally:
        p.stop()
    assert "Loading fastsafetensors checkpoint shards:   0% Completed | 0/96" in log
    assert "Loading fastsafetensors checkpoint shards: 100% Completed | 96/96" in log
    assert "Loading safetensors checkpoint shards" not in log
