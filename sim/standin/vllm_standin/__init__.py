"""Stand-in for `vllm serve` (stdlib only): argv validation, multi-node rendezvous, OpenAI-compatible HTTP surface.

Used by the rehearsal cluster (sim/) and by unit tests; see sim/standin/README.md.
"""
