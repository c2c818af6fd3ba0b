# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment(object):
    """The attributes every module of the collection shares: their support levels, once.

    The descriptions of check_mode, diff_mode and platform are ansible-core's (``ansible.builtin.action_common_attributes``,
    as in ansible-core's own modules); these fragments add the support levels, which are the same for every module,
    and for the modules with an action plugin the action attributes of ansible-core's ``.flow`` part. A module lists
    only what is its own - what it does in check mode (``details``), ``facts``::

        extends_documentation_fragment:
          - ansible.builtin.action_common_attributes
          - gpufleet.kimi_k3.attributes
          - gpufleet.kimi_k3.attributes.action  # only with an action plugin of the same name
        attributes:
          check_mode:
            details: What the module does in check mode.

    Where several modules do the same in check mode, one variant says it for all of them: ``.read_only`` instead of
    the base fragment, ``.report`` instead of ``.action``.
    """

    # Every module: full check mode (each says in details what it does there), no diff (a module that shows one
    # sets its own diff_mode), POSIX nodes. check_mode stands last so that READ_ONLY can add its details.
    DOCUMENTATION = r"""
attributes:
  diff_mode:
    support: none
  platform:
    platforms: posix
  check_mode:
    support: full
"""

    # Modules that only read (a container's state or log), instead of the fragment above.
    # Annotated: ansible-test's yamllint sanity reads only plain literal assignments, and this one is made of the
    # literal above and a line.
    READ_ONLY: str = DOCUMENTATION + r"""    details: Read-only; runs unchanged in check mode.
"""

    # Modules with an action plugin of the same name, listed after the fragment above (attributes of fragments
    # merge): the attributes of ansible-core's action_common_attributes.flow (described here: a fragment cannot
    # extend another one).
    ACTION = r"""
attributes:
  action:
    description: Has an action plugin of the same name; it runs on the controller.
    support: full
  async:
    description: Supports being used with the C(async) keyword.
    support: none
  bypass_host_loop:
    description: Runs once for all hosts instead of per host, bypassing the host loop.
    support: none
"""

    # The report actions (preflight_report, fabric_report), instead of ACTION: their files describe the nodes and
    # change nothing, so check mode writes them too.
    REPORT: str = ACTION + r"""  check_mode:
    details: Judges and writes the report files in check mode as well; never reports a change.
"""
