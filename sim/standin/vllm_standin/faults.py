"""Serving faults of the stand-in that the smoke's correctness and API gates must catch (environment variables,
read once at start-up). Each breaks one behaviour and nothing else:

- `VLLM_STANDIN_WRONG_ANSWERS_ABOVE=N`: checkable prompts (solver.py) get a wrong answer while N or more requests
  are in flight on this instance (set it on one replica, or on the decode instance of a PD pair);
- `VLLM_STANDIN_NEEDLE_LOST_ABOVE=N`: the long-context needle question of a prompt of more than N tokens is answered
  without the needle (a long-context kernel that loses the middle of the prompt; every other answer stays right);
- `VLLM_STANDIN_REASONING_LEAK=1`: the reasoning text lands in `content`, followed by `</think>` (a reasoning
  parser that is not wired);
- `VLLM_STANDIN_SERVED_NAME=<name>`: `/v1/models` and responses use this name instead of `--served-model-name`;
- `VLLM_STANDIN_INVALID_PARAM_STATUS=<code>`: request-validation errors are answered with this status (e.g. 500)
  instead of 400;
- `VLLM_STANDIN_DECODE_RECOMPUTE=1`: a decode instance reads the remote KV but prefills the prompt itself again
  (its metrics count the prompt as `local_compute`).

A stale `/version` is `VLLM_STANDIN_REPORTED_VERSION`; tool-call parser failures are `VLLM_STANDIN_TOOL_FAULT` with
`VLLM_STANDIN_TOOL_FAULT_RATE` (chat.py).
"""
import os


def _int(env, name):
    raw = (env.get(name) or "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _flag(env, name):
    return (env.get(name) or "").strip().lower() in ("1", "true", "yes", "on")


class Faults(object):
    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.wrong_answers_above = _int(env, "VLLM_STANDIN_WRONG_ANSWERS_ABOVE")
        self.needle_lost_above = _int(env, "VLLM_STANDIN_NEEDLE_LOST_ABOVE")
        self.reasoning_leak = _flag(env, "VLLM_STANDIN_REASONING_LEAK")
        self.served_name = (env.get("VLLM_STANDIN_SERVED_NAME") or "").strip() or None
        self.invalid_param_status = _int(env, "VLLM_STANDIN_INVALID_PARAM_STATUS")
        self.decode_recompute = _flag(env, "VLLM_STANDIN_DECODE_RECOMPUTE")

    def answers_wrong(self, in_flight):
        """Whether a checkable answer is corrupted with ``in_flight`` requests already on this instance."""
        return self.wrong_answers_above is not None and in_flight >= self.wrong_answers_above

    def needle_lost(self, prompt_tokens):
        """Whether the needle of a prompt of ``prompt_tokens`` tokens is lost."""
        return self.needle_lost_above is not None and prompt_tokens > self.needle_lost_above

    def served_names(self, names):
        return [self.served_name] if self.served_name else list(names)

    def status_of(self, status):
        """The status a request-validation error is sent with."""
        if status == 400 and self.invalid_param_status:
            return self.invalid_param_status
        return status


NONE = Faults({})
