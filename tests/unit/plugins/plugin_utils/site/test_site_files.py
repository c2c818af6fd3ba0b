"""plugin_utils.site.files: an operator site written in one pass - only missing paths are created, existing ones are
never touched, modes as the role's template and copy tasks gave them, check mode writes nothing, and an inventory's
symlinks are copied as ansible.builtin.copy (local_follow) copies them."""
import os
import stat

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.site import files as F


def _mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


@pytest.fixture()
def inventory(tmp_path):
    """An example inventory: a group_vars/ directory, a file with a mode of its own."""
    inv = tmp_path / "src" / "gb300"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all: {}\n")
    (inv / "group_vars" / "vllm_cluster.yml").write_text("kimi_k3_accelerator: gb300\n")
    os.chmod(str(inv / "group_vars" / "vllm_cluster.yml"), 0o600)
    return inv


def _site(tmp_path, inventory, check_mode=False):
    entries = F.site_entries(["", "inventories"], ["README.md"],
                             F.tree_entries(str(inventory), os.path.join("inventories", "gb300")))
    return F.write(str(tmp_path / "site"), entries, {"README.md": "# site\n"}, check_mode=check_mode)


def test_a_new_site_gets_everything_with_the_roles_modes(tmp_path, inventory):
    old = os.umask(0o027)  # stricter than the modes the site's own directories and files are given
    try:
        done = _site(tmp_path, inventory)
    finally:
        os.umask(old)
    site = tmp_path / "site"
    assert done == {"directories": [".", "inventories", "inventories/gb300", "inventories/gb300/group_vars"],
                    "written": ["README.md", "inventories/gb300/group_vars/vllm_cluster.yml",
                                "inventories/gb300/hosts.yml"]}
    assert (site / "README.md").read_text() == "# site\n"
    assert (site / "inventories" / "gb300" / "hosts.yml").read_text() == "all: {}\n"
    assert _mode(site) == _mode(site / "inventories") == 0o755
    assert _mode(site / "README.md") == 0o644
    # copy's mode=preserve for files; its directories are made with the umask's mode
    assert _mode(site / "inventories" / "gb300" / "group_vars" / "vllm_cluster.yml") == 0o600
    assert _mode(site / "inventories" / "gb300" / "hosts.yml") == 0o644
    assert _mode(site / "inventories" / "gb300" / "group_vars") == 0o750
    assert [n for n in os.listdir(str(site)) if n.startswith(".")] == []  # no temporary file left


def test_the_second_run_writes_nothing_and_keeps_edits_and_modes(tmp_path, inventory):
    _site(tmp_path, inventory)
    site = tmp_path / "site"
    hosts = site / "inventories" / "gb300" / "hosts.yml"
    hosts.write_text("all: {hosts: {mine: {}}}\n")
    (site / "README.md").write_text("mine\n")
    os.chmod(str(site / "README.md"), 0o600)
    os.chmod(str(site), 0o700)
    assert _site(tmp_path, inventory) == {"directories": [], "written": []}
    assert hosts.read_text() == "all: {hosts: {mine: {}}}\n" and (site / "README.md").read_text() == "mine\n"
    assert _mode(site / "README.md") == 0o600 and _mode(site) == 0o700


def test_only_what_is_missing_is_written(tmp_path, inventory):
    _site(tmp_path, inventory)
    site = tmp_path / "site"
    (site / "inventories" / "gb300" / "hosts.yml").unlink()
    assert _site(tmp_path, inventory) == {"directories": [], "written": ["inventories/gb300/hosts.yml"]}


def test_check_mode_reports_what_it_would_write_and_writes_nothing(tmp_path, inventory):
    done = _site(tmp_path, inventory, check_mode=True)
    assert done["written"] == ["README.md", "inventories/gb300/group_vars/vllm_cluster.yml",
                               "inventories/gb300/hosts.yml"]
    assert done["directories"][0] == "."
    assert not (tmp_path / "site").exists()
    _site(tmp_path, inventory)
    assert _site(tmp_path, inventory, check_mode=True) == {"directories": [], "written": []}


def test_a_dangling_symlink_in_the_site_counts_as_existing(tmp_path, inventory):
    (tmp_path / "site").mkdir()
    os.symlink("/nonexistent", str(tmp_path / "site" / "README.md"))
    assert "README.md" not in _site(tmp_path, inventory)["written"]
    assert os.readlink(str(tmp_path / "site" / "README.md")) == "/nonexistent"


def test_symlinks_are_copied_as_copy_copies_them(tmp_path, inventory):
    shared = tmp_path / "src" / "shared"
    shared.mkdir()
    (shared / "all.yml").write_text("x: 1\n")
    os.chmod(str(shared / "all.yml"), 0o640)
    os.symlink(str(shared / "all.yml"), str(inventory / "group_vars" / "all.yml"))      # a file: its copy, its mode
    os.symlink(str(shared), str(inventory / "group_vars" / "more"))                      # a directory: walked
    os.symlink("missing.yml", str(inventory / "dangling.yml"))                           # dangling: the same link
    os.symlink("..", str(inventory / "group_vars" / "up"))                               # a loop: the same link
    entries = F.tree_entries(str(inventory), "inventories/gb300")
    assert [(e.kind, e.rel) for e in entries] == [
        ("dir", "inventories/gb300"),
        ("link", "inventories/gb300/dangling.yml"),
        ("dir", "inventories/gb300/group_vars"),
        ("file", "inventories/gb300/group_vars/all.yml"),
        ("dir", "inventories/gb300/group_vars/more"),
        ("file", "inventories/gb300/group_vars/more/all.yml"),
        ("link", "inventories/gb300/group_vars/up"),
        ("file", "inventories/gb300/group_vars/vllm_cluster.yml"),
        ("file", "inventories/gb300/hosts.yml")]
    _site(tmp_path, inventory)
    copy = tmp_path / "site" / "inventories" / "gb300"
    assert not os.path.islink(str(copy / "group_vars" / "all.yml")) and _mode(copy / "group_vars" / "all.yml") == 0o640
    assert (copy / "group_vars" / "more" / "all.yml").read_text() == "x: 1\n"
    assert os.readlink(str(copy / "dangling.yml")) == "missing.yml"
    assert os.readlink(str(copy / "group_vars" / "up")) == ".."
    assert _site(tmp_path, inventory) == {"directories": [], "written": []}


def test_an_inventory_that_is_a_symlink_is_copied_as_its_directory(tmp_path, inventory):
    os.symlink(str(inventory), str(tmp_path / "src" / "linked"))
    entries = F.tree_entries(str(tmp_path / "src" / "linked"), "inventories/linked")
    assert [e.rel for e in entries if e.kind == "file"] == ["inventories/linked/group_vars/vllm_cluster.yml",
                                                            "inventories/linked/hosts.yml"]


def test_a_file_where_a_directory_belongs_fails_and_is_kept(tmp_path, inventory):
    (tmp_path / "site" / "inventories").mkdir(parents=True)
    (tmp_path / "site" / "inventories" / "gb300").write_text("not a directory\n")
    with pytest.raises(OSError):
        _site(tmp_path, inventory)
    assert (tmp_path / "site" / "inventories" / "gb300").read_text() == "not a directory\n"
