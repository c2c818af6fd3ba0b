"""The thin filters of plugins/filter/image.py that expose plugin_utils.image.reference to the image role."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.filter import image as image_filters
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as iv

D1 = "sha256:" + "1" * 64
ID1 = "sha256:" + "a" * 64
SIM_REF = "127.0.0.1:5000/vllm/vllm-openai@" + D1


def _img(repo_digests=(), repo_tags=(), image_id=ID1):
    return {"Id": image_id, "RepoDigests": list(repo_digests), "RepoTags": list(repo_tags)}


def test_filters_are_registered_under_their_documented_names():
    filters = image_filters.FilterModule().filters()
    assert filters == {"image_reference_parse": image_filters.image_reference_parse,
                       "image_verdict": image_filters.image_verdict, "image_mirror": image_filters.image_mirror,
                       "image_registry_logins": image_filters.image_registry_logins,
                       "image_login_verdict": image_filters.image_login_verdict}


def test_filters_give_the_module_utils_answers():
    assert image_filters.image_reference_parse("vllm/vllm-openai:latest") == iv.image_reference_parse(
        "vllm/vllm-openai:latest")
    assert image_filters.image_reference_parse(None)["problem"] == "the image reference is empty"
    images = [_img([SIM_REF])]
    assert image_filters.image_verdict(SIM_REF, "n1", images=images, action={"changed": True}) == iv.image_outcome(
        SIM_REF, "n1", images, action={"changed": True})
    # the role passes tuples/mapping-likes from templating; None means "nothing registered"
    out = image_filters.image_verdict(SIM_REF, "n1", images=tuple(images), action=None)
    assert out["ok"] and out["fact"]["changed"] is False


@pytest.mark.parametrize("kwargs,word", [
    ({"images": {"Id": ID1}}, "images"), ({"action": ["failed"]}, "action"), ({"source": "rsync"}, "source")])
def test_verdict_filter_refuses_malformed_inputs(kwargs, word):
    with pytest.raises(AnsibleFilterError, match=word):
        image_filters.image_verdict(SIM_REF, "n1", **kwargs)


def test_mirror_and_login_filters_wrap_module_utils():
    ref = "vllm/vllm-openai@sha256:" + "1" * 64
    m = image_filters.image_mirror(ref, {"docker.io/": "h.example/hub/"})
    assert m["pull"] == "h.example/hub/vllm/vllm-openai@sha256:" + "1" * 64
    assert image_filters.image_mirror(ref, None)["pull"] == ref
    logins = image_filters.image_registry_logins([{"registry": "h.example", "username": "u", "password": "p"}], m["pull"])
    assert [x["registry"] for x in logins["logins"]] == ["h.example"]
    assert image_filters.image_registry_logins(None, ref) == {"logins": [], "problem": None}
    item = {"registry": "h.example", "username": "u", "index": 0}
    verdict = image_filters.image_login_verdict([{"failed": True, "msg": "401", "item": item}], "n1")
    assert not verdict["ok"] and verdict["msg"].startswith("n1: cannot log in to h.example as 'u'")


def test_login_verdict_refuses_a_non_list():
    with pytest.raises(AnsibleFilterError, match="results list"):
        image_filters.image_login_verdict({"results": []}, "n1")
