"""plugin_utils.plan.recipe_data.load_yaml: libyaml's safe loader where PyYAML has it - the same documents as PyYAML's
pure-Python safe loader for every YAML/JSON data file the controller reads."""
import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

FILES = sorted(glob.glob(os.path.join(recipe_data.DATA_DIR, "*", "*.yml"))
               + glob.glob(os.path.join(recipe_data.DATA_DIR, "monitoring", "*.json")))


def test_the_data_files_are_found():
    assert any(f.endswith("recipes/kimi_k3.yml") for f in FILES) and len(FILES) >= 3


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_same_document_as_the_pure_python_safe_loader(path):
    with open(path) as handle:
        assert recipe_data.load_yaml(path) == yaml.load(handle, Loader=yaml.SafeLoader)  # nosec B506


def test_only_plain_data_is_loaded(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(yaml.YAMLError):
        recipe_data.load_yaml(str(bad))


def test_libyaml_is_used_when_pyyaml_has_it():
    assert recipe_data._SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
