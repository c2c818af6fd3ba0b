# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment(object):
    """TLS options of the modules that talk to the vLLM API (https behind a TLS-terminating proxy or router)."""

    DOCUMENTATION = r"""
options:
  validate_certs:
    description:
      - For C(https) URLs (a TLS-terminating proxy or router in front of vLLM), whether the server certificate is
        verified, for every request the module sends to the endpoint (chat requests, C(/version), C(/v1/models),
        C(/metrics)).
      - Turn it off only for a throw-away test endpoint with a self-signed certificate; prefer O(ca_path).
    type: bool
    default: true
  ca_path:
    description: PEM file of the CA certificate(s) that sign the endpoint's certificate; used instead of the system
      CA bundle. Ignored for C(http) URLs.
    type: path
"""
