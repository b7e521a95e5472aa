"""PyTorch's device-backend autoload entry point for torchtpu (pyproject's
"torch.backends" group): plain `import torch` imports torchtpu.

A module of its own, outside the torchtpu package: PyTorch imports the entry
point's module while `import torch` runs and turns any exception into a
failed `import torch`. A torchtpu that cannot load (its extension not built
yet, as during its own build, which imports torch) must not break torch, so
a failure here is a warning; `import torchtpu` shows the error itself. A
process that imports torchtpu first gets the half-imported package back."""
import warnings


def load():
    try:
        import torchtpu  # noqa: F401  (importing it is all the set-up)
    except Exception as e:  # noqa: BLE001 - any failure must leave torch importable
        warnings.warn(f"torchtpu was not loaded by `import torch` ({type(e).__name__}: {e}); `import torchtpu` "
                      "shows the error, TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns the autoload off", RuntimeWarning,
                      stacklevel=2)
