"""Role variables set in the inventory are checked by the plan from the roles' argument specs (their one
declaration) and the roles' own value checks, before any host is contacted; each refusal names host, variable, fix."""
import pytest
from ansible.module_utils.common.validation import check_type_int
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.action import cluster_plan as cluster_plan_action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import role_variables as rv

IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
PLANS = {"tray01": {"image": IMAGE}}


def problems(**role_vars):
    return rv.role_variable_problems([("tray01", role_vars)], PLANS)


def test_every_role_option_is_loaded_once_with_its_role():
    options = rv.role_options()
    assert options["image_mirror"][0] == "image" and options["smoke_ca_path"][0] == "smoke"
    assert options["image_registry_credentials"][1]["type"] == "list"


def test_an_image_mirror_of_the_wrong_type():
    (p,) = problems(image_mirror="harbor.example/mirror")
    assert (p["host"], p["variable"]) == ("tray01", "image_mirror")
    assert p["message"] == ("argument 'image_mirror' is of type str and we were unable to convert to dict: dictionary "
                            "requested, could not parse JSON or key=value.")
    assert p["fix"] == ("set image_mirror as roles/image/meta/argument_specs.yml declares it (docs: ansible-doc -t "
                        "role gpufleet.kimi_k3.image).")


def test_an_image_mirror_rule_the_role_would_refuse():
    (p,) = problems(image_mirror={"docker.io/": "harbor.example/dockerhub"})
    assert (p["host"], p["variable"]) == ("tray01", "image_mirror")
    assert p["message"] == ("image_mirror['docker.io/']: the mirror 'harbor.example/dockerhub' must be a prefix "
                            "ending in / as the source is.")
    assert "prefix ending in / to a prefix ending in /" in p["fix"]


def test_a_good_mirror_passes():
    assert problems(image_mirror={"docker.io/vllm/vllm-openai": "harbor.example/mirror/vllm-openai"}) == []


def test_a_credentials_entry_without_password_is_named_by_index():
    (p,) = problems(image_registry_credentials=[{"registry": "docker.io", "username": "ops"}])
    assert (p["host"], p["variable"]) == ("tray01", "image_registry_credentials")
    assert p["message"] == "image_registry_credentials[0] (docker.io) has no password."
    assert p["fix"] == "give every entry registry, username and password (the password from a vault)."


def test_credentials_of_the_wrong_type_never_repeat_the_value():
    (p,) = problems(image_registry_credentials="hunter2")
    assert p["message"] == "is not what role image takes (list)." and "hunter2" not in p["message"] + p["fix"]


def test_the_credentials_are_judged_against_the_mirror_the_pull_uses():
    creds = [{"registry": "harbor.example", "username": "ops", "password": "pw"}, {"registry": "bad host"}]
    (p,) = problems(image_mirror={"docker.io/vllm/vllm-openai": "harbor.example/mirror/vllm-openai"},
                    image_registry_credentials=creds)
    assert p["message"] == "image_registry_credentials[1] (bad host) has no username / password."


def test_a_smoke_ca_file_missing_on_the_controller(tmp_path):
    (p,) = problems(smoke_ca_path=str(tmp_path / "ca.pem"))
    assert (p["host"], p["variable"]) == ("tray01", "smoke_ca_path")
    assert p["message"] == "%r is not a file on the controller." % str(tmp_path / "ca.pem")
    assert p["fix"] == "set smoke_ca_path to the CA bundle's path on the controller (empty: the system CAs)."
    (tmp_path / "ca.pem").write_text("x")
    assert problems(smoke_ca_path=str(tmp_path / "ca.pem"), smoke_validate_certs=True) == []


def test_a_custom_smoke_image_needs_its_expected_strings():
    (p,) = problems(smoke_image="/srv/receipt.png")
    assert (p["host"], p["variable"]) == ("tray01", "smoke_image")
    assert p["message"] == ("'/srv/receipt.png' comes without smoke_image_expected_strings: the vision group could "
                            "not judge its transcription.")
    assert p["fix"].startswith("set smoke_image_expected_strings to strings the image's text contains")
    assert problems(smoke_image="/srv/receipt.png", smoke_image_expected_strings=["NORTHWIND"]) == []
    assert problems(smoke_image="", smoke_image_expected_strings=[]) == []
    (typed,) = problems(smoke_image_expected_strings={"text": "NORTHWIND"})
    assert typed["variable"] == "smoke_image_expected_strings"


def test_a_smoke_tls_switch_that_is_no_boolean():
    (p,) = problems(smoke_validate_certs="maybe")
    assert p["variable"] == "smoke_validate_certs" and "not a valid boolean" in p["message"]
    assert "roles/smoke/meta/argument_specs.yml" in p["fix"]


def test_a_near_miss_of_a_role_variable_name():
    (p,) = problems(image_mirorr={})
    assert (p["variable"], p["message"]) == ("image_mirorr", "is not a variable of role image.")
    assert p["fix"] == "did you mean image_mirror? (roles/image/meta/argument_specs.yml)"


def test_other_inventory_variables_are_not_judged():
    assert problems(ansible_host="10.0.0.1", router_rack="r1", my_var=3) == []


def test_one_mistake_shared_by_every_host_is_reported_once():
    hosts = [("tray%02d" % i, {"image_api_timeout_s": "ten"}) for i in (1, 2, 3)]
    assert len(rv.role_variable_problems(hosts, {})) == 1


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(rv.role_options())),
       value=st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                       st.lists(st.text(max_size=4), max_size=2),
                       st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)))
def test_any_value_of_any_role_variable_is_judged_without_raising(name, value):
    for p in problems(**{name: value}):
        assert p["variable"] == name and p["host"] == "tray01" and p["fix"]


def _core_int_check_overflows(value):
    try:
        check_type_int(value)
    except OverflowError:
        return True
    except TypeError:
        return False
    raise AssertionError("ansible-core accepted %r as an int" % value)


@pytest.mark.parametrize("value", ["INF", "-inf", "Infinity"])
def test_an_infinite_int_is_refused_not_raised(value):
    """Newer ansible-core's int check reads these as a float and raises OverflowError, which the plan turns into
    its own refusal; older ones (2.17) refuse the string themselves. Either way one refusal, with the fix."""
    expected = {
        "host": "tray01", "variable": "capacity_max_concurrency",
        "message": "capacity_max_concurrency cannot be converted to int: cannot convert Infinity to integer.",
        "fix": "set capacity_max_concurrency as roles/capacity/meta/argument_specs.yml declares it (docs: "
               "ansible-doc -t role gpufleet.kimi_k3.capacity)."}
    if not _core_int_check_overflows(value):
        expected["message"] = ("argument 'capacity_max_concurrency' is of type str and we were unable to convert "
                               "to int: str cannot be converted to an int.")
    assert problems(capacity_max_concurrency=value) == [expected]


def test_the_action_refuses_the_plan_before_writing_anything():
    action = object.__new__(cluster_plan_action.ActionModule)
    plan = {"ok": True, "errors": [], "warnings": [], "plans": dict(PLANS), "cluster": {"x": 1}}
    hostvars = {"tray01": {"image_mirror": "harbor.example", "ansible_host": "10.0.0.1"}}
    refused = action._with_role_variables(plan, {"hostvars": hostvars}, ["tray01"])
    assert refused["ok"] is False and refused["plans"] == {} and refused["cluster"] == {}
    assert [e["variable"] for e in refused["errors"]] == ["image_mirror"]
    assert action._with_role_variables(plan, {"hostvars": {"tray01": {}}}, ["tray01"]) is plan


def test_a_template_that_needs_a_run_is_left_to_the_role():
    class Lazy(dict):
        def __getitem__(self, key):
            raise RuntimeError("undefined")
    assert cluster_plan_action.ActionModule._role_vars(Lazy(smoke_base_url="x"), rv.role_options()) == {}


def test_what_the_collections_own_tasks_register_is_no_inventory_mistake():
    """An upgrade's rollback plans again in a later play, where the roles' registered results and facts are in
    hostvars: node_secrets_files is one edit from node_secrets_values, and is the role's own; the upgrade role's
    facts (rollback target, failed stage, rolling step outcome) are its own too."""
    internal = rv.internal_names()
    assert {"node_secrets_files", "launch_before", "image_pulled"} <= internal
    assert {"upgrade_rollback_image", "upgrade_noted", "upgrade_failed_stage", "upgrade_rolling_failure",
            "upgrade_rolling_done", "upgrade_begin"} <= internal
    assert problems(node_secrets_files={"changed": False, "results": []}) == []
    assert problems(upgrade_rollback_image="img@a", upgrade_failed_stage="launch", upgrade_noted=True) == []
    (p,) = problems(launch_secret_valuez={})
    assert p["fix"] == "did you mean launch_secret_values? (roles/launch/meta/argument_specs.yml)"


def test_the_upgrade_roles_variables_are_checked_like_the_others():
    (typo,) = problems(upgrade_rolling_rejoin_timout_s=60)
    assert typo["fix"] == "did you mean upgrade_rolling_rejoin_timeout_s? (roles/upgrade/meta/argument_specs.yml)"
    (choice,) = problems(upgrade_interrupted="skip")
    assert choice["variable"] == "upgrade_interrupted" and "rollback, fail, ignore" in choice["message"]
    assert problems(upgrade_interrupted="fail", upgrade_rolling_rejoin_timeout_s=60) == []


TOKEN_PLANS = {"tray01": {"image": IMAGE, "secret_env": ["HF_TOKEN"]}}


def test_a_token_over_plain_http_off_loopback_is_refused_at_plan_time(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    (p,) = rv.role_variable_problems([("tray01", {"weights_hf_endpoint": "http://hf-mirror.corp:8090"})], TOKEN_PLANS)
    assert (p["host"], p["variable"]) == ("tray01", "weights_hf_endpoint")
    assert p["message"].startswith("weights_hf_endpoint http://hf-mirror.corp:8090 is plain http to a host that is "
                                   "not loopback, and a Hugging Face token is set")
    assert p["fix"].startswith("set weights_hf_endpoint to an https:// URL")
    # the role's own token variable counts too, and its secret never shows
    (q,) = rv.role_variable_problems([("tray01", {"weights_hf_endpoint": "http://10.0.0.9",
                                                  "weights_hf_token": "hf_abcdefgh"})], PLANS)
    assert "hf_abcdefgh" not in str(q)
    # HF_ENDPOINT of the controller is the role's default endpoint: named as such
    monkeypatch.setenv("HF_ENDPOINT", "http://hf-mirror.corp")
    (r,) = rv.role_variable_problems([("tray01", {})], TOKEN_PLANS)
    assert r["message"].startswith("HF_ENDPOINT (the default of weights_hf_endpoint) http://hf-mirror.corp is plain")


def test_a_token_over_https_or_to_loopback_and_no_token_over_http_pass(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    for endpoint in ("https://hf-mirror.corp", "http://127.0.0.1:8090", "http://localhost:8090", "http://[::1]:80"):
        assert rv.role_variable_problems([("tray01", {"weights_hf_endpoint": endpoint})], TOKEN_PLANS) == [], endpoint
    assert rv.role_variable_problems([("tray01", {"weights_hf_endpoint": "http://hf-mirror.corp"})], PLANS) == []
    assert rv.role_variable_problems([("tray01", {"weights_hf_endpoint": "http://hf-mirror.corp",
                                                  "weights_hf_token": ""})], TOKEN_PLANS) == []
    assert rv.role_variable_problems([("tray01", {})], TOKEN_PLANS) == []   # the Hub, https


def test_weights_verify_takes_changed_or_full():
    (p,) = problems(weights_verify="sometimes")
    assert p["variable"] == "weights_verify" and "changed, full" in p["message"]
    assert problems(weights_verify="full") == []
