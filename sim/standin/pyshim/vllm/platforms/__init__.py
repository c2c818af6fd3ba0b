"""vllm.platforms of the stand-in image: one platform, resolved (vLLM's CpuPlatform fallback is never needed)."""


class StandinPlatform(object):
    device_name = "standin"

    def is_unspecified(self):
        return False


current_platform = StandinPlatform()
