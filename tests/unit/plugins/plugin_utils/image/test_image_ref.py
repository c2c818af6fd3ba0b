"""plugin_utils.image.reference: reference parsing, RepoDigests verification, the per-node verdict.

The filters of plugins/filter/image.py that expose it to the image role are tested in
tests/unit/plugins/filter/test_image_filters.py (controller imports are not allowed in module_utils tests).
"""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as iv

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


@pytest.mark.parametrize("flag,accepted", [("yes", True), ("true", True), (1, True), ("no", False), ("", False),
                                           (0, False)])
def test_allow_unpinned_is_read_by_the_collections_boolean_rule(flag, accepted):
    assert (iv.image_reference_parse("vllm/vllm-openai:v1", allow_unpinned=flag)["problem"] is None) is accepted


def test_allow_unpinned_that_is_no_boolean_is_refused_not_read_as_false():
    with pytest.raises(ValueError, match="not a boolean: 'maybe'"):
        iv.image_reference_parse("vllm/vllm-openai:v1", allow_unpinned="maybe")


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
    assert out["fact"] == {"reference": SIM_REF, "pulled_reference": SIM_REF, "mirror": None, "id": ID1,
                           "repo_digests": [SIM_REF], "repo_tags": [], "verified_by": "repo_digests", "source": "pull", "changed": True, "pending": False}


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


# ------------------------------------------------------------------------------ mirrors and registry logins
HUB_REF = "vllm/vllm-openai@" + D1


@pytest.mark.parametrize("mirrors,pull,rule", [
    ({"docker.io/vllm/vllm-openai": "harbor.example/mirror/vllm-openai"},
     "harbor.example/mirror/vllm-openai@" + D1, "docker.io/vllm/vllm-openai -> harbor.example/mirror/vllm-openai"),
    ({"vllm/vllm-openai": "harbor.example/m/vllm"}, "harbor.example/m/vllm@" + D1,
     "docker.io/vllm/vllm-openai -> harbor.example/m/vllm"),
    ({"docker.io/": "harbor.example/dockerhub/"}, "harbor.example/dockerhub/vllm/vllm-openai@" + D1,
     "docker.io/ -> harbor.example/dockerhub/"),
    ({"index.docker.io/": "art.example/hub/"}, "art.example/hub/vllm/vllm-openai@" + D1, "docker.io/ -> art.example/hub/"),
    # an exact repository rule wins over a prefix; the longest prefix wins among prefixes
    ({"docker.io/": "a.example/hub/", "docker.io/vllm/vllm-openai": "b.example/v"}, "b.example/v@" + D1,
     "docker.io/vllm/vllm-openai -> b.example/v"),
    ({"docker.io/": "a.example/hub/", "docker.io/vllm/": "c.example/vllm/"}, "c.example/vllm/vllm-openai@" + D1,
     "docker.io/vllm/ -> c.example/vllm/"),
])
def test_mirror_rewrites_the_repository_and_keeps_the_digest(mirrors, pull, rule):
    m = iv.image_mirror(HUB_REF, mirrors)
    assert m == {"original": HUB_REF, "pull": pull, "mirrored": True, "rule": rule, "problem": None}
    assert iv.image_reference_parse(m["pull"])["digest"] == D1


def test_mirror_prefix_matches_whole_path_components_only():
    m = iv.image_mirror("docker.io/vllmx/y@" + D1, {"docker.io/vllm/": "c.example/vllm/"})
    assert m["pull"] == "docker.io/vllmx/y@" + D1 and not m["mirrored"] and m["rule"] is None


def test_library_images_get_the_library_path_under_a_prefix_mirror():
    assert iv.image_mirror("ubuntu@" + D1, {"docker.io/": "h.example/hub/"})["pull"] == "h.example/hub/library/ubuntu@" + D1


def test_no_rule_or_no_mirrors_pulls_the_reference_itself():
    for mirrors in ({}, None, {"ghcr.io/": "h.example/ghcr/"}):
        m = iv.image_mirror(SIM_REF, mirrors)
        assert m["pull"] == SIM_REF and not m["mirrored"] and m["problem"] is None


@pytest.mark.parametrize("mirrors,words", [
    ({"docker.io/": "h.example/hub"}, "must be a prefix ending in /"),
    ({"docker.io/vllm/vllm-openai": "h.example/hub/"}, "must be a repository name"),
    ({"vllm/vllm-openai:v1": "h.example/x"}, "neither a repository name"),
    ({"vllm/": "h.example/x/"}, "must start with a registry host"),
    ({"docker.io/vllm/vllm-openai": "H.example/UPPER"}, "not a valid"),
    (["docker.io/"], "must be a mapping"),
])
def test_bad_mirror_rules_are_refused_with_the_key(mirrors, words):
    m = iv.image_mirror(HUB_REF, mirrors)
    assert m["problem"] and words in m["problem"], m
    assert m["pull"] == HUB_REF and not m["mirrored"]


def test_mirror_keeps_the_tag_of_an_allowed_unpinned_reference():
    m = iv.image_mirror("vllm/vllm-openai:v1", {"docker.io/": "h.example/hub/"}, allow_unpinned=True)
    assert m["pull"] == "h.example/hub/vllm/vllm-openai:v1"


CREDS = [{"registry": "https://harbor.example", "username": "robot", "password": "s3cret"},
         {"registry": "127.0.0.1:5001", "username": "kimi", "password": "pw"},
         {"registry": "index.docker.io", "username": "hub", "password": "hubpw"}]


def test_only_the_pulled_registrys_credentials_are_used():
    out = iv.registry_logins(CREDS, "harbor.example/mirror/vllm@" + D1)
    assert out["problem"] is None
    assert out["logins"] == [{"index": 0, "registry": "harbor.example", "username": "robot", "password": "s3cret",
                              "registry_url": "harbor.example"}]
    hub = iv.registry_logins(CREDS, HUB_REF)["logins"]
    assert [(x["index"], x["registry_url"]) for x in hub] == [(2, "https://index.docker.io/v1/")]
    assert iv.registry_logins(CREDS, "ghcr.io/x/y@" + D1)["logins"] == []
    assert iv.registry_logins([], HUB_REF) == {"logins": [], "problem": None}


@pytest.mark.parametrize("creds,words", [
    ([{"registry": "h.example", "username": "u"}], "image_registry_credentials[0] (h.example) has no password"),
    ([{"registry": "", "username": "u", "password": "p"}], "has no registry"),
    (["h.example"], "image_registry_credentials[0] is not a mapping"),
    ({"registry": "h.example"}, "must be a list"),
    ([{"registry": "bad host!", "username": "u", "password": "p"}], "is not a host[:port]"),
])
def test_bad_credentials_are_named_by_index_never_by_password(creds, words):
    out = iv.registry_logins(creds, HUB_REF)
    assert words in out["problem"], out
    assert "p" not in out["problem"].split() and "pw" not in out["problem"]


def test_login_outcome_names_node_registry_user_and_masks_the_password():
    item = {"index": 1, "registry": "127.0.0.1:5001", "username": "kimi", "password": "wrongpw"}
    res = [{"item": item, "failed": True,
            "msg": "Logging into 127.0.0.1:5001 for user kimi failed - 401 Client Error: Unauthorized (wrongpw)"}]
    v = iv.login_outcome("tray01", res)
    assert not v["ok"]
    assert v["msg"].startswith("tray01: cannot log in to 127.0.0.1:5001 as 'kimi' (image_registry_credentials[1]): ")
    assert "401" in v["msg"] and "wrongpw" not in v["msg"] and "nothing was pulled" in v["msg"]
    assert iv.login_outcome("tray01", [{"item": item, "changed": True}]) == {
        "ok": True, "msg": "tray01: registry logins ok (1)"}
    assert iv.login_outcome("tray01", [])["ok"]


def test_outcome_records_both_names_and_verifies_the_mirror_name():
    mirror_ref = "127.0.0.1:5000/mirror/vllm/vllm-openai@" + D1
    img = _img(repo_digests=[mirror_ref])
    v = iv.image_outcome(HUB_REF, "tray01", images=[img], action={"changed": True}, pull_reference=mirror_ref,
                         mirror_rule="docker.io/vllm/vllm-openai -> 127.0.0.1:5000/mirror/vllm/vllm-openai")
    assert v["ok"], v
    assert v["fact"]["reference"] == HUB_REF and v["fact"]["pulled_reference"] == mirror_ref
    assert v["fact"]["mirror"].startswith("docker.io/vllm/vllm-openai -> ")
    assert HUB_REF in v["msg"] and mirror_ref in v["msg"]
    other = iv.image_outcome(HUB_REF, "tray01", images=[_img(repo_digests=["docker.io/vllm/vllm-openai@" + D1])],
                             pull_reference=mirror_ref)
    assert not other["ok"] and "RepoDigests of none" in other["msg"]
    plain = iv.image_outcome(SIM_REF, "tray01", images=[_img(repo_digests=[SIM_REF])])
    assert plain["fact"]["pulled_reference"] == SIM_REF and plain["fact"]["mirror"] is None
