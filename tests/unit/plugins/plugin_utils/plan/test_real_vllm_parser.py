"""The real-parser stage's own pieces (tests/realparser/, scripts/dump_vllm_flags.py), and an opt-in test that parses
every example plan with the real `vllm serve` parser when the vllm package is installed (marker `vllm`).

The full check across every supported release runs as the optional stage `scripts/test.sh --stage realparser`.
"""
import argparse
import enum
import glob
import importlib.util
import json
import os

import pytest

from tests.realparser import collect_plans, parse_plans, probe_checker, record_plans, run, snapshot_diff

REPO = collect_plans.REPO
SNAPSHOT_FILES = sorted(glob.glob(os.path.join(REPO, "data", "vllm_flags", "vllm-*.json")))


def load_dump_script():
    spec = importlib.util.spec_from_file_location("dump_vllm_flags", os.path.join(REPO, "scripts",
                                                                                  "dump_vllm_flags.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DUMP = load_dump_script()


def snap(**flags):
    doc = {"version": "0.99.0", "flags": {}, "aliases": {}, "tool_parsers": ["a", "b"], "reasoning_parsers": ["r"]}
    for name, choices in flags.items():
        flag = "--" + name.replace("_", "-")
        doc["flags"][flag] = {"dest": name, "choices": choices, "nargs": None, "action": "_StoreAction",
                              "default": None}
    return doc


# ----------------------------------------------------------------------------- dump_vllm_flags.py


@pytest.mark.parametrize("path", SNAPSHOT_FILES, ids=os.path.basename)
def test_dump_layout_reproduces_every_shipped_snapshot_byte_for_byte(path):
    with open(path) as handle:
        text = handle.read()
    assert DUMP.render(json.loads(text)) == text


def test_dump_serialises_defaults_and_choices_as_the_snapshots_do():
    class Backend(enum.Enum):
        TRITON = "triton"

    assert DUMP.plain({}) == {} and DUMP.plain({"a": [1, None]}) == {"a": [1, None]}
    assert DUMP.plain(("x", 2)) == ["x", 2]
    assert DUMP.plain(Backend.TRITON) == "<Backend.TRITON: 'triton'>"
    assert DUMP.plain_choices([1, 16, None]) == ["1", "16", "None"]
    assert DUMP.plain_choices(None) is None


def test_dump_lists_hidden_registered_spellings_as_aliases():
    parser = argparse.ArgumentParser()
    action = parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int)
    parser._option_string_actions["--no-enable-y"] = action  # registered, but absent from option_strings
    flags, aliases = DUMP.dump(parser)
    assert set(flags) == {"--enable-x", "--tensor-parallel-size"}
    assert aliases == {"--no-enable-x": "--enable-x", "--no-enable-y": "--enable-x", "-tp": "--tensor-parallel-size"}


# ----------------------------------------------------------------------------- snapshot_diff.py


def test_snapshot_diff_ignores_ordering_only():
    a = snap(all2all_backend=["naive", "pplx"], dtype=None)
    b = snap(dtype=None, all2all_backend=["pplx", "naive"])
    b["tool_parsers"] = ["b", "a"]
    assert snapshot_diff.compare(a, b)["same"] is True


def test_snapshot_diff_names_every_kind_of_difference():
    shipped = snap(all2all_backend=["naive", "pplx"], gone=None)
    shipped["aliases"] = {"--no-gone": "--gone"}
    real = snap(all2all_backend=["naive", "mori"], new_flag=None)
    real["tool_parsers"] = ["a", "b", "kimi_k3"]
    result = snapshot_diff.compare(shipped, real)
    assert result["same"] is False
    assert result["differences"] == [
        "+ flag --new-flag (accepted by the real parser, missing from the snapshot)",
        "- flag --gone (in the snapshot, unknown to the real parser)",
        "~ --all2all-backend: choices +['mori'] -['pplx']",
        "- alias --no-gone -> --gone (unknown to the real parser)",
        "~ tool_parsers +['kimi_k3']",
    ]


def test_snapshot_diff_reports_field_changes():
    shipped, real = snap(x=None), snap(x=None)
    real["flags"]["--x"]["default"] = 4
    real["version"] = "0.99.1"
    assert snapshot_diff.diff_snapshots(shipped, real) == ["~ version: 0.99.0 -> 0.99.1", "~ --x: default None -> 4"]


# ----------------------------------------------------------------------------- plan collection


@pytest.fixture
def recorder(monkeypatch):
    state = {"records": [], "index": {}, "fabricated": 0, "refused": 0, "calls": 0, "test": None}
    monkeypatch.setattr(record_plans, "_STATE", state)
    return state


def fake_result(args, ok=True):
    return {"ok": ok, "plans": {"n0": {"vllm_version": "0.28.0", "vllm_args": args, "env": {"A": "1"}}}}


def test_recorder_keeps_shipped_plans_once_and_skips_fabricated_and_refused(recorder):
    recipe, snapshots = {"r": 1}, {"0.28.0": {"flags": {}}}
    shipped = (recipe, snapshots)
    record_plans.record(fake_result(["m", "--x"]), recipe, snapshots, shipped, "t::one")
    record_plans.record(fake_result(["m", "--x"]), recipe, snapshots, shipped, "t::two")
    record_plans.record(fake_result(["m", "--y"]), {"r": 2}, snapshots, shipped, "t::own_recipe")
    record_plans.record(fake_result(["m", "--z"]), recipe, {"0.28.0": {"flags": {"--z": {}}}}, shipped, "t::own")
    record_plans.record(fake_result(["m"], ok=False), recipe, snapshots, shipped, "t::refused")
    assert [(r["source"], r["vllm_args"], r["renders"]) for r in recorder["records"]] == [("t::one", ["m", "--x"], 2)]
    assert (recorder["calls"], recorder["fabricated"], recorder["refused"]) == (5, 2, 1)


def test_valid_bases_of_the_mistake_corpus_are_found(tmp_path):
    corpus = tmp_path / "tests" / "unit" / "plan_mistakes"
    assert collect_plans.valid_base_inventories(str(tmp_path)) == []
    (corpus / "valid_base").mkdir(parents=True)
    (corpus / "valid_base" / "hosts.yml").write_text("vllm_cluster: {}\n")
    (corpus / "base_mi355x.yml").write_text("vllm_cluster:\n  hosts: {}\n")
    (corpus / "base_notes.yml").write_text("just: notes\n")
    (corpus / "invalid_port.yml").write_text("vllm_cluster:\n  hosts: {}\n")
    (tmp_path / "inventories" / "gb300-cluster").mkdir(parents=True)
    (corpus / "port-typo.yml").write_text("base: gb300-cluster\nmistake: {cluster: {kimi_k3_api_port: x}}\n")
    (corpus / "gone.yml").write_text("base: no-such-inventory\n")
    assert collect_plans.valid_base_inventories(str(tmp_path)) == [
        "inventories/gb300-cluster", "tests/unit/plan_mistakes/base_mi355x.yml", "tests/unit/plan_mistakes/valid_base"]


def test_env_lookups_of_an_inventory_get_stand_ins_only_when_unset(tmp_path, monkeypatch):
    inv = tmp_path / "inventories" / "x"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "vllm_cluster.yml").write_text(
        "kimi_k3_api_key: \"{{ lookup('ansible.builtin.env', 'KIMI_K3_API_KEY') }}\"\n"
        "kimi_k3_hf_token: \"{{ lookup('env', 'HF_TOKEN_X') }}\"\n")
    assert collect_plans.env_lookups("inventories/x", str(tmp_path)) == ["HF_TOKEN_X", "KIMI_K3_API_KEY"]
    monkeypatch.setenv("KIMI_K3_API_KEY", "operator-value")
    monkeypatch.delenv("HF_TOKEN_X", raising=False)
    env = collect_plans._ansible_env(str(tmp_path), "inventories/x")
    assert env["KIMI_K3_API_KEY"] == "operator-value" and env["HF_TOKEN_X"] == collect_plans.STAND_IN_SECRET


def test_refusal_text_keeps_the_plans_problem_lines():
    output = ("TASK [plan]\nfatal: ...\n    summary:\n    - 'Plan refused: 1 problem(s)'\n"
              "    - '  - n1: kimi_k3_api_port: 99999 is out of range. Fix: use 1-65535.'\n"
              "    warnings_list: []\nPLAY RECAP ***\n")
    assert collect_plans.refusal_text(output) == (
        "Plan refused: 1 problem(s) - n1: kimi_k3_api_port: 99999 is out of range. Fix: use 1-65535.")
    assert collect_plans.refusal_text("ERROR! no such file\n") == "ERROR! no such file"


def test_every_example_inventory_is_collected():
    names = collect_plans.example_inventories()
    assert names and all(n.startswith("inventories/") for n in names)
    assert len(names) == len([p for p in glob.glob(os.path.join(REPO, "inventories", "*")) if os.path.isdir(p)])


# ----------------------------------------------------------------------------- parsing and verdicts


def serve_cli():
    top = argparse.ArgumentParser(prog="vllm")
    serve = top.add_subparsers(dest="subparser").add_parser("serve")
    serve.add_argument("model_tag", nargs="?")
    serve.add_argument("--all2all-backend", choices=["naive", "pplx"])
    serve.add_argument("--enable-auto-tool-choice", action="store_true")
    serve.add_argument("--tool-call-parser")

    class Command(object):
        @staticmethod
        def validate(args):
            if args.enable_auto_tool_choice and not args.tool_call_parser:
                raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
            assert os.environ.get("KIMI_K3_TEST_PLAN_ENV") == "set"  # the plan's env is visible while parsing

    return top, Command()


def test_parse_one_reports_the_parsers_own_message_and_restores_env(monkeypatch):
    monkeypatch.delenv("KIMI_K3_TEST_PLAN_ENV", raising=False)
    top, command = serve_cli()
    env = {"KIMI_K3_TEST_PLAN_ENV": "set"}
    assert parse_plans.parse_one(top, command, ["m", "--all2all-backend", "pplx"], env) == (True, None)
    ok, message = parse_plans.parse_one(top, command, ["m", "--all2all-backend", "deepep"], env)
    assert not ok and "invalid choice: 'deepep'" in message and "--all2all-backend" in message
    ok, message = parse_plans.parse_one(top, command, ["m", "--no-such-flag"], env)
    assert not ok and "unrecognized arguments: --no-such-flag" in message
    ok, message = parse_plans.parse_one(top, command, ["m", "--enable-auto-tool-choice"], env)
    assert (ok, message) == (False, "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser")
    assert "KIMI_K3_TEST_PLAN_ENV" not in os.environ


def test_controls_are_refused_by_a_strict_parser_and_flag_a_lax_one():
    top, command = serve_cli()
    verdicts = [parse_plans.parse_one(top, command, argv, {"KIMI_K3_TEST_PLAN_ENV": "set"})[0]
                for _name, argv in parse_plans.CONTROLS if "--tensor-parallel-size" not in argv]
    assert verdicts == [False, False, False]
    lax = argparse.ArgumentParser(prog="vllm")
    lax.add_subparsers(dest="subparser").add_parser("serve").add_argument("rest", nargs="*")
    lax.parse_known_args = lambda args=None, namespace=None: (argparse.Namespace(), [])
    assert parse_plans.parse_one(lax, None, parse_plans.CONTROLS[0][1], {}) == (True, None)


def test_verdict_fails_on_a_rejection_an_accepted_control_or_nothing_parsed():
    good = {"results": [{"accepted": True}], "controls": [{"refused": True}], "parser_build_s": 1.0}
    assert run.check_plans(good, 2.0)["ok"] is True
    rejected = dict(good, results=[{"accepted": True}, {"accepted": False, "message": "m"}])
    assert run.check_plans(rejected, 2.0)["ok"] is False
    assert run.check_plans(dict(good, controls=[{"refused": False, "control": "c"}]), 2.0)["ok"] is False
    assert run.check_plans(dict(good, results=[]), 2.0)["ok"] is False


def test_supported_versions_are_the_shipped_snapshots_in_version_order():
    versions = run.supported_versions()
    assert versions == sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert ["vllm-%s.json" % v for v in versions] == [os.path.basename(p) for p in SNAPSHOT_FILES]


# ----------------------------------------------------------------------------- checker probes


def test_probes_cover_switches_choices_spellings_and_aliases():
    doc = snap(all2all_backend=["naive", "deepep_v2"])
    doc["flags"]["--enable-x"] = {"dest": "enable_x", "choices": None, "nargs": 0, "action": "BooleanOptionalAction",
                                  "default": None}
    doc["flags"]["--max-num-seqs"] = {"dest": "max_num_seqs", "choices": None, "nargs": None,
                                      "action": "_StoreAction", "default": 256}
    doc["flags"]["--config"] = {"dest": "config", "choices": None, "nargs": None, "action": "_StoreAction",
                                "default": None}
    doc["aliases"] = {"--no-enable-x": "--enable-x", "-a": "--all2all-backend"}
    got = [(p["label"], " ".join(p["argv"][1:])) for p in probe_checker.probes(doc)]
    assert got == [
        ("choice", "--all2all-backend naive"), ("underscore spelling", "--all2all_backend naive"),
        ("choice inline", "--all2all-backend=naive"), ("choice in upper case", "--all2all-backend NAIVE"),
        ("choice", "--all2all-backend deepep_v2"), ("underscore spelling", "--all2all_backend deepep_v2"),
        ("choice inline", "--all2all-backend=deepep_v2"), ("choice in upper case", "--all2all-backend DEEPEP_V2"),
        ("choice with dashes", "--all2all-backend deepep-v2"),
        ("switch", "--enable-x"), ("underscore spelling", "--enable_x"), ("switch with a value", "--enable-x true"),
        ("numeric value", "--max-num-seqs 256"), ("underscore spelling", "--max_num_seqs 256"),
        ("alias", "--no-enable-x"), ("alias", "-a naive")]


def test_disagreements_put_what_the_checker_lets_through_first():
    judged = [{"label": "choice in upper case", "argv": ["m", "--b", "X"], "checker": True, "checker_message": None},
              {"label": "choice", "argv": ["m", "--b", "x"], "checker": True, "checker_message": None},
              {"label": "alias", "argv": ["m", "--c"], "checker": False, "checker_message": "unknown --c"}]
    parsed = [{"vllm_args": ["m", "--b", "X"], "accepted": False, "message": "invalid choice: 'X'"},
              {"vllm_args": ["m", "--b", "x"], "accepted": True, "message": None},
              {"vllm_args": ["m", "--c"], "accepted": True, "message": None}]
    assert probe_checker.disagreements(judged, parsed) == [
        {"label": "choice in upper case", "argv": ["m", "--b", "X"], "checker": True, "real": False,
         "message": "invalid choice: 'X'"},
        {"label": "alias", "argv": ["m", "--c"], "checker": False, "real": True, "message": "unknown --c"}]


# ----------------------------------------------------------------------------- opt-in: the installed vllm


@pytest.mark.vllm
@pytest.mark.parametrize("inventory", collect_plans.example_inventories())
def test_real_parser_accepts_example_plans(inventory):
    vllm = pytest.importorskip("vllm", reason="the real vllm package is not installed (opt-in test)")
    top, _serve, command = DUMP.build_serve_cli()
    records, refused = collect_plans.render_inventory(inventory)
    assert refused is None
    version = vllm.__version__.split("+")[0]
    for rec in records:
        if rec["vllm_version"] == version:
            assert parse_plans.parse_one(top, command, rec["vllm_args"], rec["env"]) == (True, None), rec["host"]
