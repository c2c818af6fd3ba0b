"""The cpu cluster's engine site (sim/kimisim/engine_image.py): uv gets the package sources pip is configured with
(uv does not read pip's configuration), for the image's Python and glibc; a site without the CPU torch is refused;
byte code only from an interpreter of the image's Python version."""
import os
import sys

import pytest

from tests.unit.sim.test_simctl_router import _simctl

# `pip config list` as pip prints it: files merged into their sections, PIP_* variables as `:env:`
LISTING = """:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other'
"""


def test_pip_settings_rank_the_environment_over_the_install_section_over_global():
    ei = _simctl("engine_image")
    s = ei.pip_settings(LISTING)
    assert s["find-links"] == "/opt/wheels"
    assert s["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert s["constraint"] == "/etc/xdg/pip/constraints.txt"
    both = "global.index-url='https://a/simple'\ninstall.index-url='https://b/simple'\n"
    assert ei.pip_settings(both)["index-url"] == "https://b/simple"
    assert ei.pip_settings(both, command="download")["index-url"] == "https://a/simple"
    assert ei.pip_settings("") == {}


def test_pip_settings_skip_lines_that_are_no_setting():
    ei = _simctl("engine_image")
    assert ei.pip_settings("WARNING: something\nnoise\nglobal.find-links=unquoted\nuser.x='y'\n") == {}
    assert ei.pip_settings('global.find-links="/it\'s"\n') == {"find-links": "/it's"}


def test_uv_gets_every_source_of_pip():
    ei = _simctl("engine_image")
    args = ei.uv_source_args(ei.pip_settings(LISTING))
    assert args == ["--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
                    "--find-links", "/opt/wheels", "--constraint", "/etc/xdg/pip/constraints.txt"]
    assert ei.uv_source_args({"index-url": "https://m/simple", "no-index": "true"}) == [
        "--index-url", "https://m/simple", "--no-index"]
    assert ei.uv_source_args({"no-index": "false"}) == []


def test_setup_sh_reads_pips_sources_and_certificate_from_the_script(tmp_path):
    """scripts/setup.sh pipes `pip config list` into sim/kimisim/pipconf.py: one uv option or value per line."""
    import subprocess
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
                          "sim", "kimisim", "pipconf.py")
    run = [sys.executable, script]
    args = subprocess.run(run + ["args"], input=LISTING, capture_output=True, text=True, check=True).stdout
    assert args.splitlines() == _simctl("engine_image").uv_source_args(_simctl("engine_image").pip_settings(LISTING))
    cert = subprocess.run(run + ["cert"], input=LISTING, capture_output=True, text=True, check=True).stdout
    assert cert == "/etc/ssl/certs/ca-certificates.crt\n"
    assert subprocess.run(run + ["cert"], input="", capture_output=True, text=True, check=True).stdout == ""
    assert subprocess.run(run, input="", capture_output=True, text=True, check=False).returncode == 2


def test_the_uv_command_installs_for_the_images_python_and_glibc():
    ei = _simctl("engine_image")
    cmd = ei.uv_install_cmd("/v/bin/uv", "/usr/bin/python3.11", "/c/site-x.tmp", "/r/requirements.txt",
                            {"find-links": "/opt/wheels"}, "/c/uv")
    assert cmd[:3] == ["/v/bin/uv", "pip", "install"]
    pairs = dict(zip(cmd, cmd[1:]))
    assert pairs["--target"] == "/c/site-x.tmp"
    assert pairs["--python-version"] == "3.11"
    assert pairs["--python-platform"] == "x86_64-manylinux_2_36"
    assert pairs["--only-binary"] == ":all:"
    # pip's ranking across sources: the find-links' torch 2.13.0+cpu over PyPI's CUDA 2.13.0
    assert pairs["--index-strategy"] == "unsafe-best-match"
    assert pairs["--cache-dir"] == "/c/uv"
    assert pairs["-r"] == "/r/requirements.txt"
    assert pairs["--find-links"] == "/opt/wheels"
    assert pairs["--python"] == "/usr/bin/python3.11"
    assert "--python" not in ei.uv_install_cmd("uv", None, "t", "r", {}, "c")


def test_the_engine_python_version_matches_the_image_and_the_pip_platforms():
    ei = _simctl("engine_image")
    assert ei.ENGINE_PYTHON == "3.11"
    assert ei.ENGINE_PIP_TARGET[ei.ENGINE_PIP_TARGET.index("--python-version") + 1] == ei.ENGINE_PYTHON
    assert "manylinux_2_36_x86_64" in ei.ENGINE_PIP_TARGET and "manylinux_2_37_x86_64" not in ei.ENGINE_PIP_TARGET
    assert ei.ENGINE_UV_PLATFORM.endswith("manylinux_2_36")


def test_a_site_without_the_cpu_torch_is_named():
    ei = _simctl("engine_image")
    assert ei.site_problems(["torch", "vllm", "numpy"], "2.13.0+cpu") == []
    assert ei.site_problems(["torch"], "2.13.0") == ["torch 2.13.0 is not the CPU build (+cpu)"]
    assert ei.site_problems([], None) == ["torch missing is not the CPU build (+cpu)"]
    cuda = ei.site_problems(["nvidia_cublas_cu12-12.9.dist-info", "nvidia", "torch"], "2.13.0+cpu")
    assert cuda == ["CUDA wheels in the site: nvidia, nvidia_cublas_cu12-12.9.dist-info"]


def test_the_torch_version_is_read_from_its_dist_info(tmp_path):
    ei = _simctl("engine_image")
    (tmp_path / "torch-2.13.0+cpu.dist-info").mkdir()
    (tmp_path / "torchgen").mkdir()
    assert ei._torch_version(str(tmp_path)) == "2.13.0+cpu"
    assert ei._torch_version(str(tmp_path / "torchgen")) is None


def test_uv_is_taken_from_beside_the_interpreter_first(tmp_path, monkeypatch):
    ei = _simctl("engine_image")
    venv = tmp_path / "bin"
    venv.mkdir()
    (venv / "python").write_text("")
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setattr(ei, "REPO", str(tmp_path / "norepo"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ei.find_uv() is None
    uv = venv / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    assert ei.find_uv() == str(uv)


def _built(ei, monkeypatch, tmp_path, uv, python, entries, torch):
    """engine_site with the installers replaced: which ran, and what ran afterwards."""
    ran = []

    def install(kind):
        def fake(*args):
            tmp = args[-3] if kind == "uv" else args[0]
            os.makedirs(os.path.join(tmp, "vllm"))
            for e in entries:
                os.makedirs(os.path.join(tmp, e), exist_ok=True)
            if torch:
                os.makedirs(os.path.join(tmp, "torch-%s.dist-info" % torch))
            ran.append(kind)
        return fake

    monkeypatch.setattr(ei, "CACHE", str(tmp_path))
    monkeypatch.setattr(ei, "find_uv", lambda: uv)
    monkeypatch.setattr(ei, "engine_python", lambda: python)
    monkeypatch.setattr(ei, "_install_uv", install("uv"))
    monkeypatch.setattr(ei, "_install_pip", install("pip"))
    monkeypatch.setattr(ei, "_engine_trim", lambda site: ran.append("trim"))
    monkeypatch.setattr(ei, "sh", lambda cmd, **kw: ran.append(cmd[:3]))
    return ran


def test_uv_builds_the_site_then_trim_then_byte_code_of_the_images_python(tmp_path, monkeypatch):
    ei = _simctl("engine_image")
    ran = _built(ei, monkeypatch, tmp_path, "/v/uv", "/usr/bin/python3.11", ["torch"], "2.13.0+cpu")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "site-old").mkdir()
    site = ei.engine_site("abc")
    assert site == str(tmp_path / "engine" / "site-abc")
    assert ran == ["uv", "trim", ["/usr/bin/python3.11", "-m", "compileall"]]
    assert sorted(os.listdir(str(tmp_path / "engine"))) == [".lock", "site-abc"]
    assert ei.engine_site("abc") == site and len(ran) == 3   # cached: nothing runs again


def test_without_uv_pip_builds_it_and_without_the_images_python_no_byte_code(tmp_path, monkeypatch):
    ei = _simctl("engine_image")
    ran = _built(ei, monkeypatch, tmp_path, None, None, ["torch"], "2.13.0+cpu")
    ei.engine_site("abc")
    assert ran == ["pip", "trim"]


def test_a_cuda_torch_is_refused_and_leaves_no_site(tmp_path, monkeypatch):
    ei = _simctl("engine_image")
    _built(ei, monkeypatch, tmp_path, "/v/uv", None, ["torch", "nvidia"], "2.13.0")
    match = r"not the CPU build: torch 2.13.0 is not .*; CUDA wheels in the site: nvidia$"
    with pytest.raises(RuntimeError, match=match):
        ei.engine_site("abc")
    assert not os.path.exists(str(tmp_path / "engine" / "site-abc"))
    assert not os.path.exists(str(tmp_path / "engine" / "site-abc.tmp"))


def test_the_trim_drops_what_pip_target_would_not_install_and_names_the_distribution_vllm(tmp_path):
    ei = _simctl("engine_image")
    for d in ("lib", "bin", "torchvision", "triton-3.9.0.dist-info", "vllm", "mylib", "share/pkg"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "lib" / "libiomp5.so").write_text("")
    (tmp_path / ".lock").write_text("")
    ei._engine_trim(str(tmp_path))
    assert sorted(os.listdir(str(tmp_path))) == ["bin", "mylib", "share", "vllm",
                                                 "vllm-%s+cpu.dist-info" % ei.engine_version()]
    assert "Name: vllm\n" in (tmp_path / ("vllm-%s+cpu.dist-info" % ei.engine_version()) / "METADATA").read_text()


def test_the_trim_keeps_a_package_named_like_a_data_directory(tmp_path):
    ei = _simctl("engine_image")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    ei._engine_trim(str(tmp_path))
    assert (tmp_path / "lib" / "__init__.py").exists()
