"""plugin_utils.weights.report: per-node records, the totals, the cluster line and the Markdown (exact values)."""
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.weights import report as R

FIRST = {"bytes_total": 4_000_000_000, "files_total": 10, "bytes_present": 0}


def _rec(node, endpoint, peers, run="r1", verified=10, wall=20.0, refused=()):
    totals = {"bytes_from_endpoint": endpoint, "bytes_from_peers": peers, "files_verified": verified}
    return R.node_record(node, run, FIRST, totals, list(refused), [], wall, True, True)


def test_totals_and_copies_served_by_the_endpoint():
    recs = [_rec("n2", 1_000_000_000, 3_000_000_000), _rec("n1", 3_000_000_000, 1_000_000_000, wall=25.0),
            _rec("old", 4_000_000_000, 0, run="r0")]
    rep = R.aggregate(recs, "r1")
    assert [n["node"] for n in rep["nodes"]] == ["n1", "n2"] and rep["ok"]
    t = rep["total"]
    assert (t["bytes_from_endpoint"], t["bytes_from_peers"], t["files_verified"], t["wall_s"], t["endpoint_copies"],
            t["refused"]) == (4_000_000_000, 4_000_000_000, 20, 25.0, 1.0, 0)


def test_cluster_line():
    half = R.node_record("n1", "r1", FIRST, {"bytes_from_endpoint": 1_000_000_000, "files_verified": 2}, [], [], 10.0,
                         False, True)
    line = R.cluster_line([half, _rec("n2", 0, 0, verified=0)], "r1", 10.0)
    assert line == ("[cluster] 2 node(s): 1.00 GB from the endpoint, 0.00 GB from peers, 2/20 files verified, "
                    "1.00 GB / 8.00 GB, ETA 1m10s")


def test_markdown_names_refusals_with_both_hashes():
    refusal = {"path": "modeling_kimi.py", "expected": "e" * 40, "actual": "a" * 40, "source": "endpoint http://x"}
    md = R.render_markdown(R.aggregate([_rec("n1", 5, 0, refused=[refusal])], "r1"))
    assert "| n1 | 0.00 GB | 0.00 GB | 10 / 10 | 0 | 20.0 | modeling_kimi.py (expected %s, got %s, from endpoint " \
           "http://x) |" % ("e" * 40, "a" * 40) in md


def test_records_are_written_and_read_back_per_host(tmp_path):
    R.write_record(str(tmp_path), _rec("n1", 1, 2))
    assert [r["node"] for r in R.read_records(str(tmp_path), ["n1", "n2"])] == ["n1"]
    rep = R.write_report(str(tmp_path), ["n1", "n2"], "r1")
    assert rep["total"]["bytes_from_peers"] == 2 and (tmp_path / "weights-report.md").exists()


def test_a_second_run_says_it_moved_and_read_nothing():
    quiet = R.node_record("n1", "r2", dict(FIRST, bytes_present=FIRST["bytes_total"]), {}, [], [], 1.5, True, True)
    rep = R.aggregate([quiet], "r2")
    assert rep["nodes"][0]["bytes_done"] == FIRST["bytes_total"]
    assert "Nothing was transferred and no blob was read again" in R.render_markdown(rep)
    assert "Nothing was transferred" not in R.render_markdown(R.aggregate([_rec("n1", 5, 0)], "r1"))


def test_blobs_read_again_count_as_progress():
    full = R.node_record("n1", "r1", FIRST, {"bytes_rehashed": 1_000_000_000}, [], [], 5.0, False, True)
    assert full["bytes_done"] == 1_000_000_000
