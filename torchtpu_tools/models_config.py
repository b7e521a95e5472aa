"""Small configs for the Hugging Face sweep (models_sweep.py).

A model type's config is shrunk by one of a ladder of recipes; the sweep
takes the first whose model builds and runs forward + backward on the CPU
(the ladder is deterministic, so `--only TYPE` rebuilds the same model):

  small       the config class's defaults with a fixed set of small sizes
              (hidden 32, 2 layers, 4 heads, ...) set wherever a config or
              sub-config has the attribute (what the sweep always did: the
              sizes of most text models, whose relations these values keep)
  scaled/F/G  the config class's defaults, every size divided so that the
              relations between them hold: sizes of the whole width
              (hidden, intermediate, embedding, ranks, channels) by F,
              head counts by G, per-head sizes (head_dim, rope sections) by
              F/G, so hidden = heads x head_dim and any sum of sizes stays
              true (F = G keeps per-head sizes that a model's code fixes,
              such as the multimodal rope sections); layer counts cut to 2 and per-layer lists cut with
              them; expert counts, vocabulary and patch grids made small.
              Sub-configs (vision/audio/text towers) get the same recipe.

After either recipe, cohere() makes the sizes that one attribute derives
from others agree again on every sub-config (multimodal rope sections,
per-layer-type rope parameters, head_dim, a backbone's stages), and the
small recipe's sizes that named another tower's width follow that tower.
"""
import re

# The "small" recipe: attributes set where a config has them (every sub-config too).
SMALL = {"hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "n_embed": 32,
         "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
         "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2,
         "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "num_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_inner": 64,
         "d_ff": 64, "hidden_dim": 64, "vocab_size": 99, "max_position_embeddings": 64, "head_dim": 8,
         "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_intermediate_size": 32,
         "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
         "image_size": 32, "patch_size": 8, "num_labels": 3, "use_cache": False, "num_queries": 8,
         # Sampling noise in an eval forward (VITS's durations and prior): the
         # comparison would test the random stream, and tpu's is not the CPU's.
         "noise_scale": 0.0, "noise_scale_duration": 0.0}
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
             "cls_token_id", "mask_token_id", "unk_token_id")
VOCAB = 99
LAYERS = 2
# (F, G) of the scaled recipes, tried in this order.
SCALES = ((16, 4), (8, 2), (16, 1), (4, 1), (16, 16))

# Names of the scaled recipe's classes of attributes.
_LAYER = re.compile(r"^(num_hidden_layers|n_layers?|(en|de)coder_layers|num_(\w+_)?layers|\w+_num_layers|"
                    r"depth|num_blocks|(\w+_)?depth)$")
_NOT_LAYER = re.compile(r"kv_shared|mtp|nextn|dense|global|full|sliding|cross|memory|recurrent")
_HEADS = re.compile(r"(^|_)(heads|n_head|num_heads|n_heads|attention_heads|kv_heads|key_value_heads|"
                    r"head_count|num_head)$")
_PER_HEAD = re.compile(r"(head_dim|head_size|d_head|^d_kv$|mrope_section|^kv_channels$|rotary_dim|rope_dim)")
_WIDTH = re.compile(r"(^|_)(hidden_size|intermediate_size|d_model|d_ff|n_embd|n_embed|n_inner|embed_dim|dim|"
                    r"hidden_dim|ffn_dim|ff_dim|mlp_dim|inner_dim|rank|hidden_sizes|embed_dims|projection_dim|"
                    r"channels|hidden_channels|model_dim|width|proj_size|emb_dim|embedding_size|state_size|"
                    r"conv_dim|filters|num_filters|d_inner|d_state|output_dim|text_embed_dim|"
                    r"vision_embed_dim|latent_dim|intermediate_dim|expert_dim|encoder_hidden_size|"
                    r"decoder_hidden_size|moe_intermediate_size|shared_expert_intermediate_size|upsample_groups)$")
_NOT_WIDTH = re.compile(r"^(num_channels|in_channels|input_channels|out_channels|image_channels|audio_channels|"
                        r"num_mel_bins|feature_size|vocab_size|max_\w+|patch_size|image_size|window_size|"
                        r"sampling_rate|codebook_dim|num_labels|spatial_merge_size|temporal_patch_size)$|"
                        r"(kernel|stride|pad|dilation|position|vocab|token|label|image_size|patch)")
# Defaults for sizes a config leaves None that its model needs (MoE routing
# of a default config, the vocabulary of a protein model).
NONE_DEFAULTS = {"num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "vocab_size": VOCAB,
                 "prediction_length": 4, "n_routed_experts": 8, "n_shared_experts": 1, "pad_token_id": 0}
# Values the scaled recipe sets wherever a config has the attribute: no KV
# cache in a forward, no random sampling noise (VITS: tpu's random stream is
# not the CPU's), backbones transformers builds itself (timm cannot be
# installed here, see MODELS.md) and does not download.
FIXED = {"use_cache": False, "noise_scale": 0.0, "noise_scale_duration": 0.0, "use_timm_backbone": False,
         "use_pretrained_backbone": False}
_EXPERTS = re.compile(r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts)$")


def _set(config, key, value):
    try:
        setattr(config, key, value)
    except Exception:  # noqa: BLE001 - a read-only or per-layer property: its default stands
        pass


def _get(config, key):
    try:
        return getattr(config, key)
    except Exception:  # noqa: BLE001 - per-layer attributes refuse a global read
        return None


def _is_config(value):
    return hasattr(value, "to_dict") and hasattr(value, "model_type")


def shrink_small(config, seen=None):
    """The "small" recipe, in place."""
    seen = set() if seen is None else seen
    if id(config) in seen:
        return
    seen.add(id(config))
    # Groups as wide as the model (depthwise convolutions) stay as wide.
    hidden = _get(config, "hidden_size")
    depthwise = [k for k in list(vars(config)) if k.endswith("groups") and _get(config, k) == hidden]
    for key, value in SMALL.items():
        old = _get(config, key)
        if hasattr(config, key) and isinstance(old, (int, bool)) == isinstance(value, (int, bool)):
            _set(config, key, value)
    for key in depthwise:
        _set(config, key, _get(config, "hidden_size"))
    vocab = _get(config, "vocab_size")
    if isinstance(vocab, int):  # special tokens inside the smaller vocabulary
        for key in TOKEN_IDS:
            value = _get(config, key)
            if isinstance(value, int) and value >= vocab:
                _set(config, key, min(value, 2))
    for key in list(vars(config)):
        value = _get(config, key)
        if _is_config(value):
            shrink_small(value, seen)


def _div(value, f):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return value
    return max(1, value // f)


def _scale_value(key, value, f, g):
    """The scaled value of one attribute (ints and lists of ints)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        if key in ("depths", "num_layers_per_stage", "block_repeats", "num_blocks_per_stage"):
            return type(value)(min(v, 1) for v in value)
        out = [_scale_value(key, v, f, g) for v in value]
        return type(value)(out)
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if _EXPERTS.match(key):
        return min(value, 8)
    if key in ("num_experts_per_tok", "top_k", "moe_topk", "num_experts_per_token", "top_k_experts"):
        return min(value, 2)
    if key == "num_queries":  # a detector's top-k over a small image's anchors
        return min(value, 8)
    if key == "n_group":
        return min(value, 2)
    if key == "topk_group":
        return min(value, 1)
    if key in ("first_k_dense_replace", "num_dense_layers", "first_dense_layers"):
        return min(value, 1)
    if key.endswith("vocab_size") or key == "vocab_size_per_layer_input":
        return min(value, VOCAB)
    if key == "max_position_embeddings":
        return min(value, 512)
    if _HEADS.search(key):
        return _div(value, g)
    if _PER_HEAD.search(key):
        return _div(value, max(1, f // g))
    if _WIDTH.search(key) and not _NOT_WIDTH.search(key):
        if "intermediate" in key and value // f >= 4:
            # A feed-forward width no other size derives from, kept a
            # multiple of 4: the CPU's grouped_mm (MoE experts) wants
            # 16-byte strides (DeepSeek-V2-Lite's 1407).
            return (value // f + 3) // 4 * 4
        return _div(value, f)
    return value


def _kept_layers(d, count):
    """The indices of the layers the scaled recipe keeps out of |count|: the
    first layer of each kind (layer_types) so that every kind of layer
    stays, then the first ones, LAYERS at least."""
    kinds = d.get("layer_types")
    keep = []
    if isinstance(kinds, list) and len(kinds) == count:
        for i, kind in enumerate(kinds):
            if kind not in [kinds[j] for j in keep]:
                keep.append(i)
    for i in range(count):
        if len(keep) >= LAYERS:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep[:max(LAYERS, len(keep))])


def _is_layer_count(key, d):
    # A stage model's layer counts are its number of stages (len(depths)),
    # which its per-stage lists (heads, widths) follow: kept whole.
    return bool(_LAYER.match(key)) and not _NOT_LAYER.search(key) and "depths" not in d


def _scaled_dict(d, f, g):
    """A config's to_dict() with the scaled recipe applied (nested configs too)."""
    counts = {v for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool) and _is_layer_count(k, d)}
    keeps = {c: _kept_layers(d, c) for c in counts if c > LAYERS}
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value.get("model_type") == "timm_backbone":
            # timm cannot be installed here: transformers' own ResNet, the
            # same stages out.
            value = {"model_type": "resnet", "out_indices": value.get("out_indices") or [1, 2, 3, 4]}
            from transformers import ResNetConfig
            value = {**ResNetConfig(**value).to_dict(), **value}
        if isinstance(value, dict) and "model_type" in value:
            out[key] = _scaled_dict(value, f, g)
        elif isinstance(value, dict) and key.startswith("rope"):
            out[key] = {k: _scale_value(k, v, f, g) if not isinstance(v, dict) else
                        {k2: _scale_value(k2, v2, f, g) for k2, v2 in v.items()} for k, v in value.items()}
        elif value is None and key in NONE_DEFAULTS:
            out[key] = NONE_DEFAULTS[key]
        elif isinstance(value, int) and not isinstance(value, bool) and _is_layer_count(key, d) and value in keeps:
            out[key] = len(keeps[value])
        else:
            out[key] = _scale_value(key, value, f, g)
    # Per-layer lists and per-layer dicts go with the layers kept.
    for key, value in list(out.items()):
        if isinstance(value, list) and len(value) in keeps and key not in ("depths", "out_indices", "stage_names"):
            out[key] = [value[i] for i in keeps[len(value)]]
        elif key == "per_layer_config" and isinstance(value, dict) and keeps:
            keep = next(iter(keeps.values()))
            out[key] = {keep.index(int(i)): v for i, v in value.items() if int(i) in keep}
    if "patch_size" in out and isinstance(out.get("image_size"), int) and isinstance(out["patch_size"], int):
        if out["patch_size"] >= 8 and out["image_size"] > 4 * out["patch_size"]:
            out["image_size"] = 4 * out["patch_size"]
    out.update(_backbone_stages(out))
    vocab = out.get("vocab_size")
    if isinstance(vocab, int):
        for key in TOKEN_IDS:
            if isinstance(out.get(key), int) and out[key] >= vocab:
                out[key] = min(out[key], 2)
    for key, value in FIXED.items():
        if key in out:
            out[key] = value
    if "num_labels" in out or "id2label" in out:
        out.pop("id2label", None)
        out.pop("label2id", None)
        out["num_labels"] = 3
    return out


def shrink_scaled(config, f, g):
    """A new config: the scaled recipe over |config|'s values."""
    d = _scaled_dict(config.to_dict(), f, g)
    for key in ("transformers_version", "_name_or_path", "architectures"):
        d.pop(key, None)
    return type(config).from_dict(d)


def _configs(config, seen=None):
    """|config| and its sub-configs, each once."""
    seen = set() if seen is None else seen
    if id(config) in seen:
        return
    seen.add(id(config))
    yield config
    for key in list(vars(config)):
        value = _get(config, key)
        if _is_config(value):
            yield from _configs(value, seen)


def _rope_sections(config):
    """Multimodal rope (mrope_section, a split of the rotary half-width
    between time, height and width) re-split over the half-width the
    config's sizes give: a recipe changes head sizes, and many default
    configs leave the section to a constant in the model's code that only
    fits the released checkpoint's head size."""
    rope = _get(config, "rope_parameters")
    uses = "mrope_section" in getattr(type(config), "ignore_keys_at_rope_validation", ()) or (
        isinstance(rope, dict) and "mrope_section" in rope)
    if not uses or not isinstance(rope, dict) or "rope_type" not in rope:
        return
    heads, hidden = _get(config, "num_attention_heads"), _get(config, "hidden_size")
    head_dim = _get(config, "head_dim") or (hidden // heads if isinstance(hidden, int) and heads else None)
    if not isinstance(head_dim, int):
        return
    factor = rope.get("partial_rotary_factor", _get(config, "partial_rotary_factor") or 1.0)
    half = int(head_dim * factor) // 2
    section = rope.get("mrope_section") or [1, 1, 1]
    if sum(section) == half or half < len(section):
        return
    parts = [max(1, half * s // sum(section)) for s in section]
    parts[0] += half - sum(parts)
    rope["mrope_section"] = parts


def _rope_per_layer_type(config):
    """A config whose rope parameters are per layer type (a dict of dicts
    keyed by layer_types) but whose default leaves them out: the default
    rope for each type, as a released checkpoint spells it."""
    rope, kinds = _get(config, "rope_parameters"), _get(config, "layer_types")
    if not isinstance(rope, dict) or "rope_type" in rope or not isinstance(kinds, list):
        return
    if rope and not all(isinstance(v, dict) or v is None for v in rope.values()):
        return
    for kind in kinds:
        if isinstance(kind, str) and kind not in rope:
            rope[kind] = {"rope_type": "default", "rope_theta": 10000.0}


def _head_dim(config):
    """head_dim left None by a default config whose model reads it: the
    width over the heads, what the released checkpoints have."""
    hidden, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
    if "head_dim" in vars(config) and _get(config, "head_dim") is None and isinstance(hidden, int) \
            and isinstance(heads, int) and heads > 0:
        _set(config, "head_dim", hidden // heads)


def _backbone_stages(d):
    """A backbone whose stages are its layers (ViT-like backbones: stem,
    stage1..stageN) after its layer count changed: the stage names follow
    the count, and the features it hands on are the last stages, as many as
    before (a detector's neck wants that many). {attribute: value} to set."""
    names, indices, n = d.get("stage_names"), d.get("out_indices"), d.get("num_hidden_layers")
    if not (isinstance(names, list) and isinstance(indices, (list, tuple)) and isinstance(n, int)) \
            or len(names) == n + 1 or "depths" in d:
        return {}
    n = max(n, len(indices))
    indices = list(range(n - len(indices) + 1, n + 1))
    return {"num_hidden_layers": n, "stage_names": ["stem"] + [f"stage{i}" for i in range(1, n + 1)],
            "out_features": [f"stage{i}" for i in indices], "out_indices": indices}


def cohere(config):
    """The sizes one attribute derives from others, made to agree after a
    recipe (in place, every sub-config); returns |config|."""
    for c in _configs(config):
        _head_dim(c)
        stages = {k: _get(c, k) for k in ("stage_names", "out_indices", "num_hidden_layers")}
        stages["depths"] = _get(c, "depths")
        for key, value in _backbone_stages({k: v for k, v in stages.items() if v is not None}).items():
            _set(c, key, value)
        _rope_per_layer_type(c)
        _rope_sections(c)
    return config


_TOWER_WIDTH = re.compile(r"(hidden_size|_dim|_channels|_size)$")


def _follow_widths(before, configs):
    """After the small recipe: a size that named another tower's width (a
    Q-Former's encoder_hidden_size, a projector's input) follows that
    tower's new width. |before| holds each config's attributes before the
    recipe, in _configs order."""
    widths = {}
    for old, c in zip(before, configs):
        if isinstance(old.get("hidden_size"), int) and old["hidden_size"] > 64:
            widths.setdefault(old["hidden_size"], _get(c, "hidden_size"))
    for old, c in zip(before, configs):
        for key, value in old.items():
            if key in SMALL or not _TOWER_WIDTH.search(key) or type(value) is not int or value not in widths:
                continue
            if _get(c, key) == value:  # the recipe left it
                _set(c, key, widths[value])


def recipes(model_type):
    """[(name, make_config)] in the order the sweep tries them."""
    import transformers

    def small():
        config = transformers.AutoConfig.for_model(model_type)
        before = [{k: _get(c, k) for k in list(vars(c))} for c in _configs(config)]
        shrink_small(config)
        _follow_widths(before, list(_configs(config)))
        return cohere(config)

    out = [("small", small)]
    for f, g in SCALES:
        out.append((f"scaled/{f}/{g}",
                    lambda f=f, g=g: cohere(shrink_scaled(transformers.AutoConfig.for_model(model_type), f, g))))
    return out
