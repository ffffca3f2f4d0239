"""A tiny Coqui VITS model with random weights, saved as an operator's checkpoint + config would be.

No Coqui weights can be downloaded here, so tests build one; it speaks noise, but
it goes through exactly the loading and synthesis path a trained model takes.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_vits(folder: Path) -> tuple[Path, Path]:
    import torch
    from TTS.tts.configs.vits_config import VitsArgs, VitsConfig
    from TTS.tts.models.vits import Vits

    args = VitsArgs(
        hidden_channels=32,
        hidden_channels_ffn_text_encoder=64,
        num_layers_text_encoder=1,
        num_layers_posterior_encoder=1,
        num_layers_flow=1,
        upsample_initial_channel_decoder=32,
        resblock_kernel_sizes_decoder=[3],
        resblock_dilation_sizes_decoder=[[1, 3, 5]],
        use_sdp=False,
        init_discriminator=False,
    )
    config = VitsConfig(model_args=args, use_phonemes=False, text_cleaner="basic_cleaners")
    torch.manual_seed(0)
    model = Vits(config)
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint, config_path = folder / "model.pth", folder / "config.json"
    torch.save({"model": model.state_dict()}, checkpoint)
    config.save_json(str(config_path))
    return checkpoint, config_path
