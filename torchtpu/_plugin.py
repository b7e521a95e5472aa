"""Finds the PJRT plugin for TORCHTPU_PLATFORM (cpu, cuda, tpu or a path)."""
import importlib.util
import os

# platform -> (python package holding the plugin, file name, pip package)
_KNOWN = {
    "cpu": ("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so", "xla-cpu-pjrt"),
    "cuda": ("jax_plugins.xla_cuda13", "xla_cuda_plugin.so", "jax-cuda13-pjrt"),
    "tpu": ("libtpu", "libtpu.so", "libtpu"),
}


def _package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def resolve(setting):
    """Returns (platform, plugin path, error) for |setting| (TORCHTPU_PLATFORM,
    read by _settings). The error is '' when found."""
    if setting not in _KNOWN:
        path = os.path.abspath(os.path.expanduser(setting))
        if not os.path.isfile(path):
            return "", "", (f"TORCHTPU_PLATFORM={setting!r} is neither cpu, cuda or tpu nor an existing "
                            "PJRT plugin file")
        return "", path, ""
    package, filename, pip_name = _KNOWN[setting]
    directory = _package_dir(package)
    path = os.path.join(directory, filename) if directory else ""
    if not path or not os.path.isfile(path):
        return setting, "", (f"the PJRT plugin for platform '{setting}' is not installed: "
                             f"run `pip install {pip_name}` (or set TORCHTPU_PLATFORM)")
    return setting, path, ""
