"""docker_sdk: the one place community.docker's private Docker SDK is imported. The installed community.docker
must carry every name engine/api.py uses, with the keyword arguments it passes, and lie in the range galaxy.yml
and requirements.yml declare; a community.docker without them is refused with a message naming its release and
the supported range. The unit stage runs these with community.docker 5.4.0 (dev venv) and 4.8.5 (2.17 matrix)."""
import importlib
import inspect
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as E
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import docker_sdk
from tests.helpers.runner import REPO

PRIVATE = "ansible_collections.community.docker.plugins.module_utils._api"


def test_installed_community_docker_has_every_private_name_used():
    assert docker_sdk.IMPORT_ERROR is None, docker_sdk.refusal()
    for module, names in docker_sdk.USED_NAMES.items():
        mod = importlib.import_module("%s.%s" % (PRIVATE, module))
        for name in names:
            assert getattr(mod, name, None) is getattr(docker_sdk, name), (module, name)


@pytest.mark.parametrize("name", sorted(docker_sdk.USED_KEYWORDS))
def test_installed_community_docker_takes_the_keywords_passed(name):
    params = inspect.signature(getattr(docker_sdk, name).__init__).parameters
    missing = [kw for kw in docker_sdk.USED_KEYWORDS[name] if kw not in params]
    assert missing == [], "%s() of the installed community.docker lacks %s" % (name, missing)


def test_keywords_list_covers_what_api_passes():
    """connect_params builds APIClient's keywords and the ``tls`` mapping TLSConfig's: the lists the signature
    test checks must hold every key they can produce."""
    full = E.connect_params({"docker_host": "tcp://h:2376", "validate_certs": True, "ca_path": "/ca",
                             "client_cert": "/c", "client_key": "/k"}, 5)
    ssh = E.connect_params({"docker_host": "ssh://u@h", "use_ssh_client": True}, 5)
    assert set(full) | set(ssh) <= set(docker_sdk.USED_KEYWORDS["APIClient"])
    assert set(full["tls"]) <= set(docker_sdk.USED_KEYWORDS["TLSConfig"])


def test_api_imports_community_docker_only_through_the_adapter():
    """No other file of the collection imports community.docker's Python code."""
    offenders = []
    for root, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
        for f in files:
            path = os.path.join(root, f)
            if f.endswith(".py") and not path.endswith(os.path.join("engine", "docker_sdk.py")):
                with open(path) as fh:
                    if "ansible_collections.community." in fh.read():
                        offenders.append(os.path.relpath(path, REPO))
    assert offenders == []


def test_installed_release_is_in_the_supported_range():
    version = docker_sdk.installed_version()
    assert version, "no MANIFEST.json of community.docker next to the imported package"
    assert docker_sdk.supported(version), (version, docker_sdk.SUPPORTED_RANGE)


def test_galaxy_yml_and_requirements_yml_declare_the_supported_range():
    with open(os.path.join(REPO, "galaxy.yml")) as f:
        assert yaml.safe_load(f)["dependencies"] == {"community.docker": docker_sdk.SUPPORTED_RANGE}
    with open(os.path.join(REPO, "requirements.yml")) as f:
        assert yaml.safe_load(f)["collections"] == [{"name": "community.docker",
                                                     "version": docker_sdk.SUPPORTED_RANGE}]


@pytest.mark.parametrize("version,want", [("4.0.0", True), ("4.8.5", True), ("5.0.0-a1", True), ("5.4.0", True),
                                          ("5.4.9", True), ("3.13.0", False), ("5.5.0", False), ("6.0.0", False),
                                          ("", False), (None, False), ("main", False)])
def test_supported(version, want):
    assert docker_sdk.supported(version) is want


def test_refusal_names_the_release_and_the_supported_range():
    err = "cannot import name 'APIClient' from '%s.api.client'" % PRIVATE
    msg = docker_sdk.refusal(err, "5.6.0")
    assert msg.startswith("community.docker 5.6.0 changed its private API (%s); " % err), msg
    assert "supports community.docker %s" % docker_sdk.SUPPORTED_RANGE in msg
    assert docker_sdk.refusal(err, "5.4.0").startswith("community.docker 5.4.0 is incomplete")
    # on a node the release is unknown (ansible-core's packed copy has no MANIFEST.json)
    assert docker_sdk.refusal(err, "").startswith(
        "the community.docker installed on the controller changed its private API")


def test_open_client_refuses_without_the_private_names(monkeypatch):
    monkeypatch.setattr(docker_sdk, "IMPORT_ERROR", "No module named 'x._api'")
    monkeypatch.setattr(docker_sdk, "installed_version", lambda: "6.0.0")
    with pytest.raises(E.EngineError) as exc:
        E.open_client({"docker_host": "unix:///var/run/docker.sock"})
    assert str(exc.value).startswith("community.docker 6.0.0 changed its private API (No module named 'x._api')")


def test_without_community_docker_the_adapter_imports_and_refuses(tmp_path):
    """A community.docker without ``_api`` (here: none at all) still lets engine/api.py import - its URL checks work
    - and the engine client is refused with the supported range."""
    code = ("import sys\n"
            "sys.modules['ansible_collections.community.docker'] = None\n"
            "from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api, docker_sdk\n"
            "assert docker_sdk.IMPORT_ERROR and api.url_problem('tcp://h:2376') is None\n"
            "try:\n    api.open_client({})\nexcept api.EngineError as e:\n    print(e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "build", "collections"), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          cwd=str(tmp_path), timeout=60, check=False)
    out = proc.stdout.decode()
    assert "changed its private API" in out and docker_sdk.SUPPORTED_RANGE in out, (out, proc.stderr.decode())
