"""module_utils.image_ref: reference parsing, RepoDigests verification, the per-node verdict.

The filters of plugins/filter/image.py that expose it to the image role are tested in
tests/unit/plugins/filter/test_image_filters.py (controller imports are not allowed in module_utils tests).
"""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import image_ref as iv

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
ID1 = "sha256:" + "a" * 64
REF = "vllm/vllm-openai@" + D1
SIM_REF = "127.0.0.1:5000/vllm/vllm-openai@" + D1


def _img(repo_digests=(), repo_tags=(), image_id=ID1):
    return {"Id": image_id, "RepoDigests": list(repo_digests), "RepoTags": list(repo_tags)}


@pytest.mark.parametrize("ref,canonical", [
    ("vllm/vllm-openai@" + D1, "docker.io/vllm/vllm-openai@" + D1),
    ("docker.io/vllm/vllm-openai@" + D1, "docker.io/vllm/vllm-openai@" + D1),
    ("index.docker.io/vllm/vllm-openai@" + D1, "docker.io/vllm/vllm-openai@" + D1),
    ("ubuntu@" + D1, "docker.io/library/ubuntu@" + D1),
    ("127.0.0.1:5000/vllm/vllm-openai@" + D1, "127.0.0.1:5000/vllm/vllm-openai@" + D1),
    ("vllm/vllm-openai:v0.28.0@" + D1, "docker.io/vllm/vllm-openai@" + D1),
    ("localhost/x/y@" + D1, "localhost/x/y@" + D1),
])
def test_pinned_references_normalise_like_the_engine(ref, canonical):
    p = iv.image_reference_parse(ref)
    assert p["valid"] and p["pinned"] and p["problem"] is None
    assert p["canonical"] == canonical


@pytest.mark.parametrize("ref", ["vllm/vllm-openai:latest", "vllm/vllm-openai", "127.0.0.1:5000/vllm/vllm-openai:v1"])
def test_tag_only_reference_is_refused_unless_allowed(ref):
    refused = iv.image_reference_parse(ref)
    assert refused["valid"] and not refused["pinned"]
    assert "not pinned by digest" in refused["problem"] and "kimi_k3_allow_unpinned_image" in refused["problem"]
    allowed = iv.image_reference_parse(ref, allow_unpinned=True)
    assert allowed["problem"] is None and not allowed["pinned"]


@pytest.mark.parametrize("ref,why", [
    ("vllm/vllm-openai@sha256:abc", "digest"),
    ("vllm/vllm-openai@sha256:" + "A" * 64, "digest"),
    ("VLLM/vllm-openai@" + D1, "repository"),
    ("", "empty"),
])
def test_malformed_references_are_invalid(ref, why):
    p = iv.image_reference_parse(ref, allow_unpinned=True)
    assert not p["valid"] or ref == ""
    assert why in p["problem"]


@pytest.mark.parametrize("repo_digest", [
    "vllm/vllm-openai@" + D1, "docker.io/vllm/vllm-openai@" + D1, "index.docker.io/vllm/vllm-openai@" + D1])
def test_docker_io_forms_match_in_repo_digests(repo_digest):
    v = iv.image_verify(REF, [_img([repo_digest])])
    assert v["ok"] and v["verified_by"] == "repo_digests"


def test_repo_digest_among_several_is_enough_and_id_is_not_compared():
    # containerd image store: Id is the index digest and RepoDigests lists one entry per tag.
    img = _img(["other/repo@" + D2, SIM_REF], image_id=D1)
    assert iv.image_verify(SIM_REF, [img])["ok"]
    # the Id equalling the digest must not verify anything on its own
    assert not iv.image_verify(SIM_REF, [_img(["127.0.0.1:5000/vllm/vllm-openai@" + D2], image_id=D1)])["ok"]


def test_other_digest_or_other_registry_does_not_verify():
    assert not iv.image_verify(SIM_REF, [_img(["127.0.0.1:5000/vllm/vllm-openai@" + D2])])["ok"]
    assert not iv.image_verify(SIM_REF, [_img(["127.0.0.1:5001/vllm/vllm-openai@" + D1])])["ok"]
    v = iv.image_verify(SIM_REF, [])
    assert not v["ok"] and "no image" in v["reason"]


def test_expected_id_verifies_an_image_without_repo_digests():
    loaded = _img([], ["127.0.0.1:5000/vllm/vllm-openai:staged"], image_id=ID1)
    assert not iv.image_verify(SIM_REF, [loaded])["ok"]
    v = iv.image_verify(SIM_REF, [loaded], expected_id="a" * 64)
    assert v["ok"] and v["verified_by"] == "image_id"
    assert not iv.image_verify(SIM_REF, [loaded], expected_id="sha256:" + "b" * 64)["ok"]
    bad = iv.image_verify(SIM_REF, [loaded], expected_id="latest")
    assert not bad["ok"] and "image_expected_id" in bad["reason"]


def test_unpinned_allowed_matches_repo_tags():
    img = _img(["vllm/vllm-openai@" + D1], ["vllm/vllm-openai:latest"])
    v = iv.image_verify("vllm/vllm-openai", [img], allow_unpinned=True)
    assert v["ok"] and v["verified_by"] == "repo_tags"
    assert not iv.image_verify("vllm/vllm-openai:v2", [img], allow_unpinned=True)["ok"]


PULL_404 = ('Error pulling image 127.0.0.1:5000/vllm/vllm-openai:sha256:' + "0" * 64 + ' - 404 Client Error for '
            'http+docker://localhost/v1.41/images/create?tag=sha256%3A00&fromImage=127.0.0.1%3A5000%2Fvllm: Not Found '
            '("manifest for 127.0.0.1:5000/vllm/vllm-openai@sha256:' + "0" * 64 + ' not found: manifest unknown")')


def test_failed_pull_names_host_reference_engine_error_and_the_fix():
    ref = "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "0" * 64
    out = iv.image_outcome(ref, "tray07", [], action={"failed": True, "msg": PULL_404})
    assert not out["ok"]
    assert out["msg"].startswith("tray07: cannot pull %s: 404 Not Found: manifest for " % ref)
    assert "http+docker" not in out["msg"]
    assert out["msg"].endswith("Check that the registry is reachable from the node and that the digest exists "
                               "(docker buildx imagetools inspect %s)" % ref)


def test_successful_pull_records_the_fact():
    out = iv.image_outcome(SIM_REF, "n1", [_img([SIM_REF])], action={"changed": True, "failed": False})
    assert out["ok"]
    assert out["fact"] == {"reference": SIM_REF, "id": ID1, "repo_digests": [SIM_REF], "repo_tags": [],
                           "verified_by": "repo_digests", "source": "pull", "changed": True, "pending": False}


def test_pull_that_did_not_provide_the_digest_fails():
    out = iv.image_outcome(SIM_REF, "n1", [_img(["127.0.0.1:5000/vllm/vllm-openai@" + D2])], action={})
    assert not out["ok"] and out["msg"].startswith("n1: pulled %s but cannot verify it" % SIM_REF)


def test_check_mode_reports_a_pending_pull_only_when_the_image_is_missing():
    pending = iv.image_outcome(SIM_REF, "n1", [], action={"changed": True}, check_mode=True)
    assert pending["ok"] and pending["fact"]["pending"] and "would pull" in pending["msg"]
    # outside check mode the same situation is a failure
    assert not iv.image_outcome(SIM_REF, "n1", [], action={"changed": True})["ok"]
    # in check mode an image that is there but wrong still fails
    assert not iv.image_outcome(SIM_REF, "n1", [_img(["127.0.0.1:5000/vllm/vllm-openai@" + D2])],
                                action={"changed": False}, check_mode=True)["ok"]


def test_tarball_without_repo_digests_explains_the_choices():
    loaded = _img([], ["127.0.0.1:5000/vllm/vllm-openai:staged"])
    out = iv.image_outcome(SIM_REF, "n1", [loaded], action={"changed": True, "images": [loaded]}, source="tarball",
                           tarball="/srv/vllm.tar")
    assert not out["ok"]
    assert "/srv/vllm.tar" in out["msg"] and "image_expected_id" in out["msg"] and "RepoDigests" in out["msg"]
    ok = iv.image_outcome(SIM_REF, "n1", [loaded], action={"changed": True}, source="tarball", expected_id=ID1)
    assert ok["ok"] and ok["fact"]["verified_by"] == "image_id" and ok["fact"]["source"] == "tarball"
    skipped = iv.image_outcome(SIM_REF, "n1", [], action={"skipped": True}, source="tarball", check_mode=True,
                               tarball="/srv/vllm.tar")
    assert skipped["ok"] and skipped["fact"]["pending"] and "/srv/vllm.tar" in skipped["msg"]


def test_failed_load_names_the_tarball():
    out = iv.image_outcome(SIM_REF, "n1", [], action={"failed": True, "msg": "Error loading image archive: EOF"},
                           source="tarball", tarball="/srv/vllm.tar")
    assert not out["ok"] and out["msg"].startswith("n1: cannot load %s from the tarball /srv/vllm.tar" % SIM_REF)
