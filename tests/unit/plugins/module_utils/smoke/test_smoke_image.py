"""The generated sample image module (plugins/module_utils/smoke/image.py) and its generator."""
import base64
import importlib.util
import os

from tests.helpers.runner import REPO
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import image as smoke_image

GENERATOR = os.path.join(REPO, "scripts", "make_smoke_image.py")


def load_generator():
    spec = importlib.util.spec_from_file_location("make_smoke_image", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def module_source():
    with open(smoke_image.__file__, encoding="utf-8") as fh:
        return fh.read()


def test_every_line_is_shorter_than_the_pep8_limit():
    too_long = [n for n, line in enumerate(module_source().splitlines(), 1) if len(line) >= 160]
    assert too_long == []


def test_generator_writes_exactly_the_committed_module_for_the_committed_png():
    gen = load_generator()
    png = base64.b64decode(smoke_image.SAMPLE_PNG_B64)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert gen.render_module(png) == module_source()
    assert smoke_image.SAMPLE_TEXT == "\n".join(gen.LINES)
    assert smoke_image.SAMPLE_REQUIRED_TOKENS == gen.REQUIRED_TOKENS
