"""Property tests: the mirror rules, credential validation and the HF file-list parser never raise on arbitrary
input; they answer with a problem (or StageError) instead of a traceback."""
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage as hs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as iv

D1 = "sha256:" + "1" * 64
anything = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                        max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(ref=st.text(max_size=60), mirrors=anything)
def test_image_mirror_never_raises_and_keeps_the_digest(ref, mirrors):
    m = iv.image_mirror(ref, mirrors if isinstance(mirrors, dict) or mirrors is None else mirrors)
    assert set(m) == {"original", "pull", "mirrored", "rule", "problem"}
    if m["mirrored"]:
        assert m["problem"] is None
        assert iv.image_reference_parse(m["pull"], allow_unpinned=True)["digest"] == \
            iv.image_reference_parse(ref, allow_unpinned=True)["digest"]


@settings(max_examples=200, deadline=None)
@given(src=st.sampled_from(["docker.io/", "ghcr.io/org/", "vllm/vllm-openai", "docker.io/vllm/"]),
       dst=st.from_regex(r"[a-z]{1,8}\.example(/[a-z0-9]{1,6}){0,2}/?", fullmatch=True))
def test_valid_reference_with_any_rule_yields_a_parseable_pull_or_a_problem(src, dst):
    m = iv.image_mirror("vllm/vllm-openai@" + D1, {src: dst})
    assert m["problem"] or iv.image_reference_parse(m["pull"])["valid"]


@settings(max_examples=300, deadline=None)
@given(creds=anything, ref=st.text(max_size=40))
def test_registry_logins_never_raise(creds, ref):
    out = iv.registry_logins(creds, ref)
    assert isinstance(out["logins"], list) and (out["problem"] is None or isinstance(out["problem"], str))


@settings(max_examples=300, deadline=None)
@given(entries=anything)
def test_parse_tree_raises_only_stage_errors(entries):
    try:
        files = hs.parse_tree(entries if isinstance(entries, list) else [entries])
    except hs.StageError:
        return
    assert files and all(not f["path"].startswith("/") and ".." not in f["path"].split("/") for f in files)
