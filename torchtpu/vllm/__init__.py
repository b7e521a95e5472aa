"""vLLM platform plugin: `vllm` runs on tpu when torchtpu is installed.

vLLM calls `register` (the `vllm.platform_plugins` entry point in
pyproject.toml) in every process; it names the platform class when a tpu
device exists and returns None otherwise, so vLLM keeps its own choice.
`VLLM_PLUGINS` (a comma list of plugin names, "" for none) limits which
plugins vLLM loads. Nothing here is imported by `import torchtpu`.
"""


def register():
    import torch
    import torchtpu  # noqa: F401  (makes "tpu" a device when autoload is off)

    if not torch.tpu.is_available() or torch.tpu.device_count() == 0:
        return None
    return "torchtpu.vllm.platform.TpuPlatform"
