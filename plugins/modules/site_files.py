#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: site_files
short_description: Write an operator site's files, playbook wrappers and example inventories, keeping what exists
version_added: 0.1.0
description:
  - Runs on the controller (action plugin) and contacts no host; the role C(gpufleet.kimi_k3.site) (playbook
    C(gpufleet.kimi_k3.site_init)) writes a site with it.
  - Creates O(dest) and O(dest)C(/inventories) (mode C(0755)), renders each of O(templates) and one C(<name>.yml) per
    O(playbooks) from O(playbook_template) (mode C(0644)), and copies each of O(inventories) from O(inventory_root) to
    O(dest)C(/inventories/<name>/).
  - Never replaces, rewrites or re-modes a path that exists (file, directory or symlink); only what is missing is
    written, so a second run changes nothing and an operator's edits stay. Reports changed only when it wrote
    something.
  - Templates are looked up in the role's C(templates/) directory and rendered as M(ansible.builtin.template) renders
    them (the task's variables, C(ansible_managed)); a wrapper's template sees its playbook's name as C(item).
  - An inventory is copied as M(ansible.builtin.copy) copies a directory with its defaults and C(mode=preserve);
    files keep their mode; a symlink to a file becomes a copy of the file it points to, a symlink to a directory is
    copied as that directory, a dangling symlink or one that loops back into the copy is written as the same symlink;
    directories get the default mode (the umask).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
options:
  dest:
    description: The site directory (created with its parents when missing).
    type: path
    required: true
  templates:
    description: Files to render, as C({file under dest -> template name}); the templates are the role's.
    type: dict
    default: {}
  playbooks:
    description: Playbooks to write a C(<name>.yml) wrapper for, each rendered from O(playbook_template) with C(item) set to the name.
    type: list
    elements: str
    default: []
  playbook_template:
    description: The template of the playbook wrappers (the role's C(templates/)).
    type: str
    default: playbook.yml.j2
  inventory_root:
    description: The directory holding the inventories to copy (the collection's C(inventories/)); needed with O(inventories).
    type: path
  inventories:
    description: Names of the directories under O(inventory_root) to copy to O(dest)C(/inventories/); each must exist.
    type: list
    elements: str
    default: []
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Reports what it would write (RV(written), RV(directories)) and writes nothing.
  diff_mode:
    support: full
    details: Shows each file it writes (or would) that is UTF-8 text, against nothing.
"""

EXAMPLES = r"""
- name: Write a site (existing files are kept)
  gpufleet.kimi_k3.site_files:
    dest: ~/kimi-site
    templates:
      ansible.cfg: ansible.cfg.j2
      README.md: README.md.j2
    playbooks: [deploy, plan]
    inventory_root: "{{ role_path }}/../../inventories"
    inventories: [gb300-cluster]
"""

RETURN = r"""
dest:
  description: The site directory, absolute.
  returned: success
  type: str
  sample: /home/operator/kimi-site
written:
  description: The files and symlinks written (or that would be, in check mode), relative to RV(dest).
  returned: success
  type: list
  elements: str
  sample: [README.md, deploy.yml, inventories/gb300-cluster/hosts.yml]
directories:
  description: The directories made (or that would be), relative to RV(dest); C(.) is RV(dest) itself.
  returned: success
  type: list
  elements: str
  sample: [., inventories, inventories/gb300-cluster]
inventories:
  description: The inventories copied (O(inventories)).
  returned: success
  type: list
  elements: str
"""
