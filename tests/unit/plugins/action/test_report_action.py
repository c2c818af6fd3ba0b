"""The run preflight_report and fabric_report share (plugin_utils/actions/report.py): what a host registered, the
verdict line, and one judgement whose files are written under dest in check mode too and never count as a change."""
import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import report as RA

NOT_SET = object()


class RawHostvars(object):
    """Ansible's HostVars: raw_get returns a host's variables as stored, without templating them."""

    def __init__(self, data):
        self.data = data

    def raw_get(self, host):
        return self.data[host]

    def __getitem__(self, host):
        raise AssertionError("templated read of %s" % host)


class Lazy(dict):
    """A mapping subclass standing in for Ansible's lazy containers."""


def test_registered_reads_the_stored_value_as_plain_data():
    hostvars = RawHostvars({"n0": {"probe": Lazy(facts=Lazy(n=1), items=("a", "b"))}, "n1": {}})
    value = RA.registered(hostvars, "n0", "probe")
    assert value == {"facts": {"n": 1}, "items": ["a", "b"]}
    assert not isinstance(value, Lazy) and not isinstance(value["facts"], Lazy)  # plain dicts, not the lazy type
    assert RA.registered(hostvars, "n1", "probe") is None                      # not registered on this host
    assert RA.registered(hostvars, "absent", "probe", default=NOT_SET) is NOT_SET  # no such host
    assert RA.registered({"n0": {"probe": None}}, "n0", "probe", default=NOT_SET) is None  # stored null: itself


@pytest.mark.parametrize("summary,want", [
    ({"ok": True, "failed_hosts": []}, "fabric passed"),
    ({"ok": False, "failed_hosts": ["n1"]}, "fabric failed on n1"),
    ({"ok": False, "failed_hosts": ["n1", "n3"]}, "fabric failed on n1, n3"),
])
def test_verdict(summary, want):
    assert RA.verdict("fabric", summary) == want


class Judged(RA.ReportAction):
    SPEC = {"dest": {"type": "path"}}

    def judge(self, args, task_vars):
        self.seen = (args, task_vars)
        return {"ok": False, "msg": "x failed on n1"}, {"x-report.md": ("# x\n", 0o600)}


@pytest.fixture
def action(monkeypatch):
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {"invocation": {}})
    act = object.__new__(Judged)

    def validate(spec):
        assert spec is Judged.SPEC
        return None, dict(act.args)
    act.validate_argument_spec = validate
    return act


def test_run_writes_the_files_under_dest_and_is_never_a_change(action, tmp_path):
    action.args = {"dest": str(tmp_path)}
    result = action.run(task_vars={"hostvars": {}})
    assert result == {"invocation": {}, "ok": False, "msg": "x failed on n1", "written": ["x-report.md"],
                      "changed": False}
    assert (tmp_path / "x-report.md").read_text() == "# x\n"
    assert action.seen == ({"dest": str(tmp_path)}, {"hostvars": {}})
    assert action.run(task_vars={})["written"] == []                          # unchanged files are not rewritten


def test_run_without_dest_writes_nothing(action, tmp_path):
    action.args = {"dest": None}
    result = action.run(task_vars=None)
    assert "written" not in result and result["changed"] is False and action.seen[1] == {}
    assert list(tmp_path.iterdir()) == []
