# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Default controller directory for plans, reports and logs: <controller working directory>/artifacts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: artifacts_dir
author: gpufleet maintainers (@gpufleet)
version_added: 0.1.0
short_description: The artifacts directory of gpufleet.kimi_k3 (default - the operator's working directory)
description:
  - Returns one absolute path, the controller directory for plans, reports and logs of every role (plan,
    preflight, launch, smoke, capacity, monitoring) - C(kimi_k3_artifacts_dir) when set (a relative path counts
    from the working directory), else C(<working directory of ansible-playbook>/artifacts).
  - Run from an operator site (C(ansible-playbook deploy.yml -i inventories/...)), the artifacts land in the site
    directory, never inside the installed collection, also when a playbook is run by FQCN.
  - Without C(kimi_k3_artifacts_dir), refuses a working directory inside an installed copy of this collection
    (set C(kimi_k3_artifacts_dir) or run from the site directory instead).
  - Not the variable C(playbook_dir), which for C(gpufleet.kimi_k3.deploy) is the installed collection's playbooks
    directory, and not the environment's C(PWD), which runners such as ansible-runner leave stale.
options:
  _terms:
    description: No terms.
    required: false
"""

EXAMPLES = r"""
- name: Where the reports go unless kimi_k3_artifacts_dir says otherwise
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.kimi_k3.artifacts_dir') }}"
"""

RETURN = r"""
_raw:
  description: One absolute path.
  type: list
  elements: path
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# plugins/lookup/artifacts_dir.py -> the collection root
_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def artifacts_dir(cwd, configured=None, collection_root=_COLLECTION_ROOT):
    """kimi_k3_artifacts_dir (absolute, relative to cwd) when configured, else the default below."""
    if configured not in (None, ""):
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(str(configured))))
    return default_artifacts_dir(cwd, collection_root)


def default_artifacts_dir(cwd, collection_root=_COLLECTION_ROOT):
    """<cwd>/artifacts; refused when cwd lies inside an installed copy of the collection."""
    cwd = os.path.realpath(cwd)
    installed = os.path.basename(os.path.dirname(os.path.dirname(collection_root))) == "ansible_collections"
    if installed and (cwd + os.sep).startswith(collection_root + os.sep):
        raise AnsibleLookupError(
            "the working directory %s is inside the installed collection gpufleet.kimi_k3 (%s): artifacts would be "
            "written into it. Run ansible-playbook from your site directory (ansible-playbook "
            "gpufleet.kimi_k3.site_init -e site_dir=DIR creates one) or set kimi_k3_artifacts_dir."
            % (cwd, collection_root))
    return os.path.join(cwd, "artifacts")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("gpufleet.kimi_k3.artifacts_dir takes no terms, got %r" % (terms,))
        configured = (variables or {}).get("kimi_k3_artifacts_dir")
        if configured is not None:
            configured = self._templar.template(configured)
        return [artifacts_dir(os.getcwd(), configured)]
