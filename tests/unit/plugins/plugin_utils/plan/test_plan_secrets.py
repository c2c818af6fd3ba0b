"""Issue #39, the plan's part: each finding refused naming host, variable and fix, never the value; the secret name
and value rules (plugin_utils.plan.redaction); the one text rule for secrets; the one redaction path."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import role_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from tests.unit.plan_mistakes import test_corpus as corpus

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
REV = "0123456789abcdef0123456789abcdef01234567"
CANARY = "sk-CANARY-7f3a9"


HEAD = "gb300-tray01"


def build(**cluster):
    """The plan of the corpus' gb300-cluster inventory with ``cluster`` merged into its group_vars."""
    return corpus.plan(*corpus.nodes_of(*corpus.apply({"cluster": cluster}, *corpus.base_inventory("gb300-cluster"))))


def refused(**cluster):
    r = build(**cluster)
    assert not r["ok"]
    text = "\n".join(plan_render.format_problem(p) for p in r["errors"] + r["warnings"])
    assert CANARY not in text and "CANARY" not in text, text
    return r["errors"]


# ----------------------------------------------------------------------------- finding 1: refusals print secrets


@pytest.mark.parametrize("items, fix", [
    (["--api-key " + CANARY], "kimi_k3_api_key"), (["--hf-token " + CANARY], "kimi_k3_hf_token"),
    (["--max-num-seqs", "8", "--api-key  " + CANARY], "kimi_k3_api_key"),
    (["--max-num-seqs 64"], "two items"),
])
def test_an_option_and_its_value_in_one_item_is_blamed_on_extra_args(items, fix):
    (p,) = refused(kimi_k3_extra_args=items)
    assert (p["host"], p["variable"]) == (HEAD, "kimi_k3_extra_args") and fix in p["fix"]
    assert p["message"].startswith("item ") or "is a secret" in p["message"]


def test_an_invalid_choice_names_the_flag_and_the_choices_not_the_value():
    (p,) = refused(kimi_k3_extra_args=["--scheduling-policy", CANARY])
    assert (p["host"], p["variable"]) == (HEAD, "kimi_k3_extra_args")
    assert "--scheduling-policy got an invalid choice" in p["message"] and "fcfs, priority" in p["fix"]


@pytest.mark.parametrize("argv", [["m", "--kv-cache-dtype", CANARY], ["m", "--headless", CANARY],
                                  ["m", "--tool-call-parser", CANARY], ["m", "--api-key " + CANARY],
                                  ["m", CANARY, "--max-num-seqs", "8"]])
def test_flag_problems_quote_no_value(argv):
    problems = vllm_flags.check_argv(argv, SNAPSHOTS["0.28.0"])
    assert problems and all(CANARY not in p for p in problems)


# ----------------------------------------------------------------------------- finding 2: structure, not names


@pytest.mark.parametrize("items", [
    ["--otlp-traces-endpoint", "https://user:%s@otel.example:4318" % CANARY],
    ["--otlp-traces-endpoint=https://%s@otel.example" % CANARY],
    ["--model-loader-extra-config", '{"aws_secret_access_key": "%s"}' % CANARY],
    ["--model-loader-extra-config", '{"s3": [{"Password": "%s"}]}' % CANARY],
    ['--model-loader-extra-config={"clientSecret": "%s"}' % CANARY],
    ["--model-loader-extra-config.aws_secret_access_key", CANARY],
])
def test_credentials_inside_extra_args_values_are_refused(items):
    (p,) = refused(kimi_k3_extra_args=items)
    assert (p["host"], p["variable"]) == (HEAD, "kimi_k3_extra_args")
    assert "docs/secrets.md" in p["fix"] and "vault" in p["fix"]


@pytest.mark.parametrize("env", [
    {"HTTPS_PROXY": "http://user:%s@proxy.example:3128" % CANARY},
    {"HF_ENDPOINT": "https://mirror:%s@hf.example" % CANARY},
    {"no_proxy_auth_url": "socks5://u:%s@proxy" % CANARY},
    {"VLLM_PLUGIN_CONFIG": '{"nested": {"api_key": "%s"}}' % CANARY},
    {"MY_API_TOKENS": CANARY}, {"MYSQL_PWD": CANARY}, {"HF_AUTH": CANARY}, {"BEARER": CANARY},
    {"SVC_CREDS": CANARY}, {"OAUTH_ACCESS_TOKENS": CANARY}, {"SMTP_PASSPHRASE": CANARY}, {"oauthClientSecret": CANARY}, {"SESSION_COOKIE": CANARY},
])
def test_credentials_in_extra_env_are_refused_with_the_escape_hatch_named(env):
    (p,) = refused(kimi_k3_extra_env=env)
    assert (p["host"], p["variable"]) == (HEAD, "kimi_k3_extra_env")
    assert "kimi_k3_extra_env_not_secret" in p["fix"]


def test_the_escape_hatch_accepts_a_declared_value():
    r = build(kimi_k3_extra_env={"HTTPS_PROXY": "http://build:public@proxy:3128"},
              kimi_k3_extra_env_not_secret=["HTTPS_PROXY"])
    assert r["ok"], r["errors"]


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "PWD", "OLDPWD",
                                  "VLLM_KEEP_ALIVE", "NCCL_DEBUG", "PASSIVE_MODE", "AUTHOR", "NUM_TOKENS_X",
                                  "num_speculative_tokens", "max_tokens", "pass_config", "inductor_passes"])
def test_non_secret_names(name):
    assert redaction.is_secret_name(RECIPE, name) is False


@pytest.mark.parametrize("value", ["http://proxy:3128", "ssh://root@node", "/path/with@at", "{not json",
                                   '{"endpoint": "x", "keyfile_count": 1}', "[1, 2]"])
def test_values_without_credentials_pass(value):
    assert redaction.value_secret_problem(RECIPE, value) in (None, "holds JSON whose key keyfile_count names a secret")


# ----------------------------------------------------------------------------- finding 4: one text rule


@pytest.mark.parametrize("char", [u"\x85", u"\x9f", u"\u2028", u"\u2029", u"\u202e", u"\u2066", u"\u200e",
                                  u"\u061c", u"\x00", u"\n"])
@pytest.mark.parametrize("variable", ["kimi_k3_api_key", "kimi_k3_hf_token"])
def test_a_secret_with_a_forbidden_character_is_refused_by_name(char, variable):
    (p,) = [e for e in refused(**{variable: CANARY + char + "x"}) if e["variable"] == variable]
    assert p["host"] == HEAD and "one line" in p["fix"] and "U+2028" in p["fix"]
    assert p["message"].startswith("the value")


def test_a_secret_over_the_exec_limit_is_refused_by_name():
    assert redaction.MAX_SECRET_BYTES < 131072
    (p,) = refused(kimi_k3_api_key=CANARY * (2 * 1024 * 1024 // len(CANARY)))
    assert (p["host"], p["variable"]) == (HEAD, "kimi_k3_api_key")
    assert "over the limit of 65536" in p["message"] and "65536 bytes" in p["fix"]
    assert len(p["message"]) < 200


def test_a_secret_at_the_limit_is_accepted():
    r = build(kimi_k3_api_key="k" * redaction.MAX_SECRET_BYTES)
    assert r["ok"], r["errors"]


# ----------------------------------------------------------------------------- the one redaction path


def test_redaction_hides_known_values_and_url_userinfo():
    secrets = redaction.inventory_secrets(RECIPE, [{"kimi_k3_api_key": CANARY, "kimi_k3_extra_args":
                                                    ["--hf-token=hf_SECRET_1", "--my-api-token", "tok_SECRET_2"],
                                                    "kimi_k3_extra_env": {"X": '{"password": "pw_SECRET_3"}'}}],
                                          secret_names=["kimi_k3_api_key"], arg_lists=["kimi_k3_extra_args"])
    assert {CANARY, "hf_SECRET_1", "tok_SECRET_2", "pw_SECRET_3"} <= secrets
    text = redaction.redact("%s hf_SECRET_1 tok_SECRET_2 pw_SECRET_3 https://u:p@h ssh://root@n" % CANARY, secrets)
    assert text == "<hidden> <hidden> <hidden> <hidden> https://<hidden>@h ssh://root@n"


def test_every_problem_of_the_plan_passes_the_redaction(monkeypatch):
    """A check that quoted a secret would still not leak it: build_cluster_plan redacts on the way out."""
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks

    def quoting(d):
        return [checks.problem(d.where, "kimi_k3_api_key", "quoted %s" % CANARY, "fix %s" % CANARY)]
    monkeypatch.setattr(checks, "CHECKS", checks.CHECKS + (checks.Check("quoting", (), quoting, False),))
    (p,) = build(kimi_k3_api_key=CANARY)["errors"]
    assert p["message"] == "quoted <hidden>" and p["fix"] == "fix <hidden>"


def test_role_variable_problems_pass_the_redaction():
    hosts = [(HEAD, {"image_registry_credentials": [{"registry": "docker.io", "password": CANARY}]})]
    problems = role_variables.role_variable_problems(hosts, {HEAD: {"image": "docker.io/vllm/x@sha256:" + "a" * 64}})
    assert problems and all(CANARY not in str(p) for p in problems)


@pytest.mark.parametrize("entry, key", [({"registry": "docker.io", "username": "ops", "pasword": CANARY}, "pasword"),
                                        ({"registry": "docker.io", "user": "ops", "password": CANARY}, "user")])
def test_a_misspelt_key_of_a_secret_variable_is_named_without_the_value(entry, key):
    hosts = [(HEAD, {"image_registry_credentials": [entry]})]
    (p,) = role_variables.role_variable_problems(hosts, {HEAD: {"image": "docker.io/vllm/x@sha256:" + "a" * 64}})
    assert (p["host"], p["variable"]) == (HEAD, "image_registry_credentials")
    assert p["message"].startswith("image_registry_credentials.%s is not a key role image takes" % key)
    assert "password, registry, username" in p["message"] and CANARY not in str(p)


# ----------------------------------------------------------------------------- finding 3: insecure transports


def _warned(variable, **hosts_vars):
    mistake = {"hosts": dict((h, dict(v)) for h, v in hosts_vars.items())}
    r = corpus.plan(*corpus.nodes_of(*corpus.apply(mistake, *corpus.base_inventory("gb300-cluster"))))
    assert r["ok"], r["errors"]
    return [w for w in r["warnings"] if w["variable"] == variable]


def test_a_plain_tcp_engine_is_a_warning_naming_the_hosts():
    (w,) = _warned("kimi_k3_docker_host", **{"gb300-tray02": {"kimi_k3_docker_host": "tcp://10.0.0.12:2375"}})
    assert w["host"] == "gb300-tray02" and w["message"].startswith("gb300-tray02 reach their Docker engine over plain")
    assert "kimi_k3_docker_validate_certs" in w["fix"] and "ssh://" in w["fix"]
    assert _warned("kimi_k3_docker_host") == []
    assert _warned("kimi_k3_docker_host", **{"gb300-tray02": {"kimi_k3_docker_host": "ssh://ops@10.0.0.12"}}) == []


def test_tls_without_verification_is_a_warning():
    (w,) = _warned("kimi_k3_docker_tls", **{h: {"kimi_k3_docker_host": "tcp://%s:2376" % h, "kimi_k3_docker_tls": True}
                                            for h in ("gb300-tray01", "gb300-tray02")})
    assert w["message"].startswith("gb300-tray01, gb300-tray02 talk TLS") and "validate_certs" in w["fix"]
    verified = {"kimi_k3_docker_host": "tcp://10.0.0.12:2376", "kimi_k3_docker_validate_certs": True}
    assert _warned("kimi_k3_docker_tls", **{"gb300-tray02": verified}) == []
    assert _warned("kimi_k3_docker_host", **{"gb300-tray02": verified}) == []


def test_an_api_key_over_plain_http_beyond_loopback_is_a_warning():
    (w,) = _warned("kimi_k3_tls_certfile")
    assert w["host"] == HEAD and "kimi_k3_api_key unencrypted" in w["message"] and "kimi_k3_tls_keyfile" in w["fix"]
    assert _warned("kimi_k3_tls_certfile", **{HEAD: {"kimi_k3_api_host": "127.0.0.1"}}) == []
