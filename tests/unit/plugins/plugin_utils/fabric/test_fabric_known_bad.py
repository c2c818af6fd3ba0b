"""The known-bad NCCL / RCCL table (recipe fabric.known_bad) judged by plugin_utils.fabric.known_bad."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import known_bad
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

ROWS = recipe_data.load_recipe()["fabric"]["known_bad"]
GB_ENV = {"NCCL_NVLS_ENABLE": "1", "NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}
DMABUF_ERROR = "NCCL error: unhandled system error ... mlx5dv_reg_dmabuf_mr failed with errno 524"


def names(found):
    return [(f["name"], f["severity"]) for f in found]


def test_the_recipe_table_is_sound():
    assert known_bad.table_problems(ROWS) == []
    assert [r["name"] for r in ROWS] == ["nvls_moe_weight_load_hang", "mlx5_dmabuf_errno_524"]


@pytest.mark.parametrize("version,hit", [
    ("2.30.3", False), ("2.30.4", True), ("2.30.7", True), ("2.30.7+cuda13.0", True), ("2.31.0", True),
    ("2.28.9", False), ("v2.30.5", True)])
def test_nvls_warns_on_2_30_4_and_later_with_nvls_on(version, hit):
    found = known_bad.findings("nccl", version, GB_ENV, ROWS)
    assert names(found) == ([("nvls_moe_weight_load_hang", "warn")] if hit else [])


def test_the_nvls_finding_in_full():
    (f,) = known_bad.findings("nccl", "2.30.7", GB_ENV, ROWS)
    assert f["version"] == "NCCL 2.30.7"
    assert f["message"].startswith("NCCL 2.30.7: NCCL_NVLS_ENABLE=1 with this NCCL: the NVLS path is reported to "
                                   "hang while MoE weights load")
    assert f["fix"].startswith("set kimi_k3_nccl_nvls_enable: false (renders NCCL_NVLS_ENABLE=0)")
    assert f["source"].startswith("NVIDIA/nccl#2167")


@pytest.mark.parametrize("env", [{"NCCL_NVLS_ENABLE": "0"}, {}, {"NCCL_NVLS_ENABLE": 0}])
def test_nvls_off_or_unrendered_is_not_the_hazard(env):
    assert known_bad.findings("nccl", "2.30.7", env, ROWS) == []


def test_rccl_is_judged_by_its_own_rows_only():
    assert known_bad.findings("rccl", "2.30.7", GB_ENV, ROWS) == []


def test_dmabuf_errno_524_refuses_with_the_fix_only_on_the_symptom():
    assert known_bad.findings("nccl", "2.28.7", {}, ROWS) == []
    (f,) = known_bad.findings("nccl", "2.28.7", {}, ROWS, DMABUF_ERROR)
    assert (f["name"], f["severity"]) == ("mlx5_dmabuf_errno_524", "refuse")
    assert f["fix"].startswith('set kimi_k3_extra_env: {NCCL_DMABUF_ENABLE: "0"} and load nvidia_peermem')
    # already off: the symptom is something else; before 2.28 DMA-BUF was not the default
    assert known_bad.findings("nccl", "2.28.7", {"NCCL_DMABUF_ENABLE": "0"}, ROWS, DMABUF_ERROR) == []
    assert known_bad.findings("nccl", "2.27.3", {}, ROWS, DMABUF_ERROR) == []


def test_both_rows_at_once():
    found = known_bad.findings("nccl", "2.30.7", GB_ENV, ROWS, DMABUF_ERROR)
    assert names(found) == [("nvls_moe_weight_load_hang", "warn"), ("mlx5_dmabuf_errno_524", "refuse")]


@pytest.mark.parametrize("version", [None, "", "2.30", "abc", 23007, (2, 30, 7), "2.x.7"])
def test_an_unreadable_version_says_the_table_was_not_checked(version):
    (f,) = known_bad.findings("nccl", version, GB_ENV, ROWS)
    assert (f["name"], f["severity"]) == ("unreadable_version", "warn")
    assert f["message"] == "the NCCL version read in the image, %r, is not MAJOR.MINOR.PATCH: the known-bad " \
        "versions table was not checked" % (version,)


def test_an_unknown_library_is_named():
    (f,) = known_bad.findings("gloo", "2.30.7", {}, ROWS)
    assert f["message"].startswith("the collective library 'gloo' is none of nccl, rccl")


def test_table_problems_name_the_row_and_what_is_wrong():
    bad = [{"name": "x", "library": "mpi", "severity": "maybe", "versions": {"min": "two"}, "error": "(",
            "colour": 1}, "row"]
    problems = known_bad.table_problems(bad)
    assert problems[0] == "fabric.known_bad[0] (x): unknown key colour"
    assert "fabric.known_bad[0] (x): message is missing" in problems
    assert "fabric.known_bad[0] (x): library must be one of nccl/rccl and severity one of warn/refuse" in problems
    assert "fabric.known_bad[0] (x): versions.min 'two' is not MAJOR.MINOR.PATCH" in problems
    assert any(p.startswith("fabric.known_bad[0] (x): error is not a regular expression") for p in problems)
    assert problems[-1] == "fabric.known_bad[1] (row): not a mapping"


_TEXT = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.floats(allow_nan=True),
                  st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)),
                  st.builds(lambda a, b, c, tail: "%d.%d.%d%s" % (a, b, c, tail), st.integers(0, 99),
                            st.integers(0, 99), st.integers(0, 99), st.text(max_size=8)))


@settings(max_examples=300, deadline=None)
@given(library=st.sampled_from(["nccl", "rccl", "gloo", None]), version=_TEXT,
       env=st.dictionaries(st.sampled_from(["NCCL_NVLS_ENABLE", "NCCL_DMABUF_ENABLE"]),
                           st.one_of(st.none(), st.text(max_size=3), st.integers(0, 1))),
       error=st.one_of(st.just(""), st.just(DMABUF_ERROR), st.text(max_size=30)))
def test_any_version_gives_findings_or_a_clear_refusal_never_a_traceback(library, version, env, error):
    found = known_bad.findings(library, version, env, ROWS, error)
    for f in found:
        assert f["severity"] in ("warn", "refuse") and f["message"] and f["fix"] and f["source"]
    if library in ("nccl", "rccl") and known_bad.parse_version(version) is None:
        assert names(found) == [("unreadable_version", "warn")]
