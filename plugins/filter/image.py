# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the image role: thin wrappers over plugin_utils.image.reference.

This file holds several filters. ansible-doc reads the DOCUMENTATION of a filter's Python file when it has one, which
would give all of them the same page; so, like ansible.builtin's core.py, this file carries none and each filter is
documented (DOCUMENTATION, EXAMPLES, RETURN) by its adjacent YAML file: image_reference_parse.yml, image_verdict.yml,
image_mirror.yml, image_registry_logins.yml, image_login_verdict.yml.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as image_ref
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain


def _str(value):
    return "" if value is None else str(value)


def image_reference_parse(reference, allow_unpinned=False):
    """gpufleet.kimi_k3.image_reference_parse: see image_reference_parse.yml."""
    return image_ref.image_reference_parse(_str(reference), allow_unpinned=allow_unpinned)


def image_verdict(reference, host, images=None, action=None, source="pull", expected_id="", allow_unpinned=False,
                  check_mode=False, tarball="", pull_reference="", mirror_rule=None):
    """gpufleet.kimi_k3.image_verdict: see image_verdict.yml."""
    images = to_plain(images) if images is not None else []
    if not isinstance(images, list):
        raise AnsibleFilterError("image_verdict: images must be a list of docker_image_info images, got %s"
                                 % type(images).__name__)
    action = to_plain(action) if action is not None else {}
    if not isinstance(action, dict):
        raise AnsibleFilterError("image_verdict: action must be the registered result of the pull/load task, got %s"
                                 % type(action).__name__)
    if source not in ("pull", "tarball"):
        raise AnsibleFilterError("image_verdict: source must be pull or tarball, got %r" % (source,))
    return image_ref.image_outcome(_str(reference), _str(host), images=images, action=action, source=source,
                                   expected_id=_str(expected_id), allow_unpinned=allow_unpinned,
                                   check_mode=check_mode, tarball=_str(tarball),
                                   pull_reference=_str(pull_reference), mirror_rule=mirror_rule or None)


def image_mirror(reference, mirrors=None, allow_unpinned=False):
    """gpufleet.kimi_k3.image_mirror: see image_mirror.yml."""
    return image_ref.image_mirror(_str(reference), to_plain(mirrors) if mirrors else {}, allow_unpinned=allow_unpinned)


def image_registry_logins(credentials, reference):
    """gpufleet.kimi_k3.image_registry_logins: see image_registry_logins.yml."""
    return image_ref.registry_logins(to_plain(credentials) if credentials else [], _str(reference))


def image_login_verdict(results, host):
    """gpufleet.kimi_k3.image_login_verdict: see image_login_verdict.yml."""
    results = to_plain(results) if results else []
    if not isinstance(results, list):
        raise AnsibleFilterError("image_login_verdict: input must be the results list of the docker_login loop")
    return image_ref.login_outcome(_str(host), results)


class FilterModule(object):
    def filters(self):
        return {"image_reference_parse": image_reference_parse, "image_verdict": image_verdict,
                "image_mirror": image_mirror, "image_registry_logins": image_registry_logins,
                "image_login_verdict": image_login_verdict}
