"""One architecture of the Hugging Face sweep (models_sweep.py), built on
the CPU: its class (a head where the model type has one), a small config
(models_config.py's recipes, in order) and inputs from its forward
signature (models_inputs.py's variants, in order). The first recipe and
variant whose model runs forward + backward on the CPU is the one the sweep
uses; what every one of them raised is the architecture's CPU failure.
"""
import copy

HEADS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
         "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
         "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES",
         "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES")


def architectures():
    """[(model type, class name)] for every model type with a model class."""
    from transformers.models.auto import modeling_auto
    out = []
    for t in sorted(modeling_auto.MODEL_MAPPING_NAMES):
        for head in HEADS:
            name = getattr(modeling_auto, head, {}).get(t)
            if isinstance(name, (list, tuple)):
                name = name[0]
            if name:
                out.append((t, name))
                break
    return out


def _config_for(cls, config):
    """The config |cls| takes: |config|, or its sub-config of the class's
    config class (a text-only head registered under a multimodal type, such
    as Llama4ForCausalLM under llama4, takes the text config)."""
    from .models_config import _configs
    want = getattr(cls, "config_class", None)
    if want is None or isinstance(config, want):
        return config
    return next((c for c in _configs(config) if isinstance(c, want)), config)


def _instantiate(class_name, config):
    import torch
    import transformers
    cls = getattr(transformers, class_name)
    config = _config_for(cls, config)
    torch.manual_seed(0)
    model = cls(config).eval().float()
    # Weights a model initializes to zero (MoE routers, some output
    # projections) get small random values: a zero router scores every
    # expert alike, and which of equal scores topk picks is unspecified
    # (the CPU's order differs from CUDA's too), so the comparison would
    # test tie-breaking, and zero weights hide the gradients behind them.
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


class BuildError(Exception):
    """No recipe ran on the CPU: what each raised."""


def _short(e):
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]


def build(model_type, class_name, recipe=None):
    """(model, inputs, recipe, want): the model as built (before any forward),
    its inputs, the recipe's name ("small/0": recipe/input variant) and the
    CPU's forward + backward (models_modes._forward_backward's result).
    Raises what the recipes raised when none runs."""
    import torch
    from .models_config import recipes
    from .models_inputs import VARIANTS, make_inputs
    from .models_modes import _forward_backward
    errors = {}
    for name, make_config in recipes(model_type):
        tried = []  # the variants' input shapes: a variant that changes nothing is not run again
        for variant in range(VARIANTS):
            tag = f"{name}/{variant}"
            if recipe is not None and tag != recipe:
                continue
            try:
                config = make_config()
                model = _instantiate(class_name, config)
                if type(model).forward is torch.nn.Module.forward:
                    raise BuildError(f"{class_name} has no forward (it only generates, through sub-models)")
                inputs = make_inputs(model, model.config, variant)
                shapes = {k: tuple(getattr(v, "shape", ())) for k, v in inputs.items()}
                if shapes in tried:
                    continue
                tried.append(shapes)
                # Each mode starts from the model as built: a forward may
                # leave state behind (recurrent caches that are not graph
                # leaves and cannot be deep-copied, updated buffers).
                pristine = copy.deepcopy(model)
                want = _forward_backward(model, model, inputs)
                return pristine, inputs, tag, want
            except Exception as e:  # noqa: BLE001 - the next recipe or variant
                errors.setdefault(name.split("/")[0], _short(e))
    if not errors:
        raise ValueError(f"no recipe named {recipe!r}")
    # The scaled recipe's error first: the recipe that keeps the config's relations.
    raise BuildError("; ".join(f"{k}: {v}" for k, v in sorted(errors.items(), reverse=True))[:400])
