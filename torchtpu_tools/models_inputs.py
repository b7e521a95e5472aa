"""Inputs for the Hugging Face sweep (models_sweep.py), from the model's
forward signature: its main input, every argument it requires, and the few
optional ones a processor would always pass (attention masks, the decoder's
ids of an encoder-decoder, the image of a two-tower model without image
tokens). Sizes come from the config (image size and channels from the vision
config, mel bins from the audio config, the time series' context and lags).
A layout that processors disagree on (audio features bins-first or
frames-first, audio as (batch, samples) or (batch, channel, samples)) is a
variant: the sweep tries the variants in order on the CPU and keeps the
first that runs.
"""
import inspect

BATCH, SEQ = 2, 12
SAMPLES = 3840  # audio samples: a multiple of the usual hops (160, 320, 640, 1280, 1920)
VARIANTS = 3


class _Ctx:
    def __init__(self, model, config, variant):
        import torch
        self.model, self.config, self.variant = model, config, variant
        self.gen = torch.Generator().manual_seed(0)
        text = config
        try:
            text = config.get_text_config(decoder=True)
        except Exception:  # noqa: BLE001
            pass
        self.text = text
        self.vision = self.sub("vision_config", "image_config", "visual_config") or config
        self.audio = self.sub("audio_config", "encoder_config") or config

    def sub(self, *names):
        for n in names:
            v = getattr(self.config, n, None)
            if hasattr(v, "to_dict"):
                return v
        return None

    def get(self, cfgs, names, default):
        for c in cfgs:
            for n in names:
                v = getattr(c, n, None)
                if v is not None and not isinstance(v, bool):
                    return v
        return default

    def vocab(self, cfg=None):
        v = getattr(cfg or self.text, "vocab_size", None) or getattr(self.config, "vocab_size", None) or 99
        return max(4, min(v, 99))

    def ids(self, n=SEQ, cfg=None):
        import torch
        return torch.randint(3, self.vocab(cfg), (BATCH, n), generator=self.gen)

    def randn(self, *shape):
        import torch
        return torch.randn(*shape, generator=self.gen)

    def image_size(self):
        size = self.get([self.vision, self.config], ["image_size", "img_size", "input_size"], 32)
        if isinstance(size, (list, tuple)):
            size = size[-2:] if len(size) >= 2 else (size[0], size[0])
            return int(size[0]), int(size[1])
        if isinstance(size, dict):
            h = size.get("height", size.get("shortest_edge", 32))
            return int(h), int(size.get("width", h))
        return int(size), int(size)

    def channels(self):
        return int(self.get([self.vision, self.config], ["num_channels", "in_channels", "input_channels",
                                                         "image_channels"], 3))


def _pixel_values(c):
    if c.variant == 1:  # a video model's clip (VideoMAE, ViViT, TimeSformer)
        return _videos(c)
    h, w = c.image_size()
    channels = c.channels()
    if c.variant == 2:  # the channels the model's first convolution takes (a backbone's stem sizes)
        import torch
        conv = next((m for m in c.model.modules() if isinstance(m, torch.nn.Conv2d)), None)
        channels = conv.in_channels if conv is not None else channels
    return c.randn(BATCH, channels, h, w)


def _videos(c):
    h, w = c.image_size()
    frames = int(c.get([c.vision, c.config], ["num_frames", "frames_per_clip", "temporal_patch_size"], 4))
    return c.randn(BATCH, frames, c.channels(), h, w)


def _grid_patches(c):
    """(hidden_states, grid_thw) of a Qwen-VL style vision tower: 4x4 patches of one frame."""
    import torch
    p = int(c.get([c.vision], ["patch_size"], 14))
    tp = int(c.get([c.vision], ["temporal_patch_size"], 1))
    merge = int(c.get([c.vision], ["spatial_merge_size"], 1))
    side = 2 * merge
    grid = torch.tensor([[1, side, side]] * BATCH)
    return c.randn(BATCH * side * side, c.channels() * tp * p * p), grid


def _spectrogram(c):
    """(frames, mel bins) of a spectrogram model (AST, CLAP's audio tower)."""
    bins = int(c.get([c.audio, c.config], ["num_mel_bins", "feature_size", "n_mels", "num_mel_filters",
                                            "input_feat_per_channel", "input_dim"], 80))
    frames = c.get([c.audio, c.config], ["max_length", "max_source_positions"], None)
    return (frames if isinstance(frames, int) and frames <= 3000 else 64), bins


def _input_values(c):
    if c.variant == 2:  # a spectrogram, frames-first
        return c.randn(BATCH, *_spectrogram(c))
    if c.variant == 1 or hasattr(c.config, "audio_channels"):
        return c.randn(BATCH, int(getattr(c.config, "audio_channels", 1) or 1), SAMPLES)
    return c.randn(BATCH, SAMPLES)


def _input_features(c):
    bins = int(c.get([c.audio, c.config], ["num_mel_bins", "feature_size", "n_mels", "num_mel_filters",
                                            "input_feat_per_channel", "input_dim"], 80))
    src = c.get([c.audio, c.config], ["max_source_positions"], None)
    frames = 2 * src if isinstance(src, int) and src <= 3000 else 64
    if c.variant == 2:  # one channel of a spectrogram image (CLAP)
        return c.randn(BATCH, 1, *_spectrogram(c))
    if c.variant == 1:
        return c.randn(BATCH, frames, bins)
    return c.randn(BATCH, bins, frames)


def _time_series(c, name):
    import torch
    cfg = c.config
    ctx = int(getattr(cfg, "context_length", None) or 16)
    lags = getattr(cfg, "lags_sequence", None) or [0]
    past = ctx + max(lags)
    pred = int(getattr(cfg, "prediction_length", None) or 4)
    feats = int(getattr(cfg, "num_time_features", 0) or 0)
    chans = int(getattr(cfg, "num_input_channels", 0) or getattr(cfg, "input_size", 1) or 1)
    shape = (BATCH, past) if chans == 1 and not hasattr(cfg, "num_input_channels") else (BATCH, past, chans)
    if name == "past_values":
        return c.randn(*shape)
    if name == "past_observed_mask":
        return torch.ones(shape)
    if name == "past_time_features":
        return c.randn(BATCH, past, feats)
    if name == "future_values":
        return c.randn(BATCH, pred, *shape[2:])
    if name == "future_time_features":
        return c.randn(BATCH, pred, feats)
    raise KeyError(name)


def _decision(c, name):
    import torch
    cfg = c.config
    state, act = int(getattr(cfg, "state_dim", 4)), int(getattr(cfg, "act_dim", 2))
    return {"states": lambda: c.randn(BATCH, SEQ, state), "actions": lambda: c.randn(BATCH, SEQ, act),
            "rewards": lambda: c.randn(BATCH, SEQ, 1), "returns_to_go": lambda: c.randn(BATCH, SEQ, 1),
            "timesteps": lambda: torch.arange(SEQ).repeat(BATCH, 1)}[name]()


def _bbox(c):
    import torch
    a = torch.randint(0, 500, (BATCH, SEQ, 2), generator=c.gen)
    return torch.cat([a, a + torch.randint(1, 400, (BATCH, SEQ, 2), generator=c.gen)], -1)


def _maker(name):
    """A function (ctx -> tensor) for the argument |name|, or None."""
    import torch
    if name in ("input_ids", "labels_ids"):
        return lambda c: c.ids()
    if name in ("attention_mask", "decoder_attention_mask"):
        return None  # made to match the ids below
    if name == "decoder_input_ids":
        return lambda c: c.ids(SEQ // 2)
    if name == "token_type_ids":
        return lambda c: torch.zeros(BATCH, SEQ, dtype=torch.long)
    if name == "qformer_input_ids":
        return lambda c: c.ids(SEQ, c.sub("qformer_config"))
    if name == "bbox":
        return _bbox
    if name == "pixel_values":
        return _pixel_values
    if name == "pixel_values_videos":
        return _videos
    if name in ("input_values", "audio_values"):
        return _input_values
    if name in ("input_features", "audio_features"):
        return _input_features
    if name in ("past_values", "past_observed_mask", "past_time_features", "future_values", "future_time_features"):
        return lambda c: _time_series(c, name)
    if name in ("states", "actions", "rewards", "returns_to_go", "timesteps"):
        return lambda c: _decision(c, name)
    if name == "input_features_mask":
        return lambda c: None  # made to match the features below
    if name == "query_embeds":
        return lambda c: c.randn(BATCH, 8, int(getattr(c.config, "hidden_size", 32)))
    if name == "inputs_embeds":
        return lambda c: c.randn(BATCH, SEQ, int(getattr(c.text, "hidden_size", 32)))
    return None


def make_inputs(model, config, variant=0):
    """{name: tensor} for model.forward, on the CPU; KeyError/ValueError when an
    argument has no maker."""
    import torch
    c = _Ctx(model, config, variant)
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    names = list(main) if isinstance(main, (list, tuple)) else [main]
    names += [n for n, p in params.items() if p.default is p.empty and n not in names
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        names.append("decoder_input_ids")
    # A two-tower model (CLIP-, CLAP-like: a text tower beside an image or
    # audio tower, no placeholder tokens in the text) wants both inputs.
    for tower, placeholders, wanted in (
            ("vision_config", ("image_token_id", "image_token_index", "image_token"), ("pixel_values",)),
            ("audio_config", ("audio_token_id", "audio_token_index", "audio_token"),
             ("input_features", "input_values"))):
        if "input_ids" in names and c.sub(tower) is not None and not any(hasattr(config, k) for k in placeholders):
            names += [n for n in wanted if n in params and n not in names][:1]
    # Optional arguments a model cannot do without (layout boxes, the
    # trajectory of a decision transformer, a speech encoder's frame mask).
    names += [n for n in ("bbox", "actions", "rewards", "returns_to_go", "timesteps") if n in params and n not in names]
    if "input_features" in names and "input_features_mask" in params and "input_features_mask" not in names:
        names.append("input_features_mask")
    inputs = {}
    if "grid_thw" in names or "image_grid_thw" in names:
        states, grid = _grid_patches(c)
        key = "grid_thw" if "grid_thw" in names else "image_grid_thw"
        inputs[key] = grid
        for n in ("hidden_states", "pixel_values"):
            if n in names:
                inputs[n] = states
    for n in names:
        if n in inputs:
            continue
        maker = _maker(n)
        if maker is None:
            raise ValueError(f"no input maker for {n!r}")
        inputs[n] = maker(c)
    if inputs.get("input_features_mask", 0) is None:
        feats = inputs["input_features"]
        inputs["input_features_mask"] = torch.ones(BATCH, feats.shape[-1 if variant == 0 else 1], dtype=torch.long)
    if "attention_mask" in params and "input_ids" in inputs and "attention_mask" not in inputs:
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    if "noise" in params and "pixel_values" in inputs and inputs["pixel_values"].dim() == 4:
        # Random masking (ViT-MAE): a fixed noise, since tpu's random stream
        # is not the CPU's.
        patch = c.get([c.vision], ["patch_size"], 8)
        patch = patch if isinstance(patch, int) else patch[0]
        h, w = inputs["pixel_values"].shape[-2:]
        inputs["noise"] = torch.rand(BATCH, (h // patch) * (w // patch), generator=c.gen)
    return inputs
