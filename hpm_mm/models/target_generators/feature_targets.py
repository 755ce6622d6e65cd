"""Feature targets for HPM (paper Tab. 1): normalised images to per-patch
features (B, N, C_t) without gradients. The EMA target is the teacher's
own pass; DINO and CLIP are frozen networks loaded from a local
checkpoint in :meth:`init_weights` (docs/targets.md)."""
import os.path as osp
from typing import Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS

from hpm_mm.errors import check_fills


@MODELS.register_module()
class EMATeacherTarget(nn.Module):
    """The EMA teacher's encoder features of the full image (BootMAE's target,
    Tab. 1): a marker (:attr:`uses_teacher`) that has the algorithm build its
    teacher with ``features=True`` and read the target off the pass that
    scores the patches (no extra cost; :meth:`HPM.target`)."""

    uses_teacher = True


class FrozenFeatureTarget(BaseModule):
    """A frozen pretrained network as the target (eval mode, no gradients), its
    weights loaded from ``checkpoint`` (under ``prefix``) by
    :meth:`init_weights`; None keeps the random weights and says so (tests)."""

    #: how to get the weights, for the missing-file error
    source = 'docs/targets.md'

    def __init__(self,
                 network: nn.Module,
                 checkpoint: Optional[str],
                 prefix: str = '') -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.prefix = prefix
        self.network = network.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> 'FrozenFeatureTarget':
        return super().train(False)

    def load_target_state(self, state: dict) -> dict:
        """The network's own keys from a checkpoint's state dict: those under
        ``prefix`` (stripped), or, where none is, the whole dict."""
        own = {
            k[len(self.prefix):]: v
            for k, v in state.items() if k.startswith(self.prefix)
        }
        return own or dict(state)

    def init_weights(self) -> None:
        super().init_weights()
        name = type(self).__name__
        if self.checkpoint is None:
            print_log(f'{name}: checkpoint=None, random weights (tests only).',
                      'current', 30)
            return
        if not osp.isfile(self.checkpoint):
            raise FileNotFoundError(f'{name}: no file {self.checkpoint!r}. '
                                    f'Fix: convert it as {self.source} says.')
        from mmengine.runner.checkpoint import _load_checkpoint
        ckpt = _load_checkpoint(self.checkpoint, map_location='cpu')
        state = self.load_target_state(ckpt.get('state_dict', ckpt))
        check_fills(self.network, state, f'{name}: {self.checkpoint}',
                    f'the arch of the file, converted as {self.source} says')
        unexpected = self.network.load_state_dict(
            state, strict=False).unexpected_keys
        print_log(
            f'{name}: loaded {len(state) - len(unexpected)} tensors from '
            f'{self.checkpoint} ({len(unexpected)} unused).', 'current')

    @torch.no_grad()
    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N, C_t) the network's patch tokens."""
        return self.network(inputs)[0][:, 1:]


@MODELS.register_module()
class ViTFeatureTarget(FrozenFeatureTarget):
    """A frozen mmpretrain ViT's last patch tokens after its norm: the DINO
    target (``tools/model_converters/target_weights.py dino`` converts the
    release).

    Args:
        checkpoint (str, optional): the converted weights (``target_weights.py
            dino``); None: random (tests).
        arch (str | dict): the ViT's arch. Defaults to 'b'.
        img_size (int): input size, pixels. Defaults to 224.
        patch_size (int): the patch side. Defaults to 16.
        in_channels (int): image channels. Defaults to 3.
        prefix (str): the checkpoint's key prefix. Defaults to 'backbone.'.
    """

    def __init__(self,
                 checkpoint: Optional[str],
                 arch='b',
                 img_size: int = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 prefix: str = 'backbone.') -> None:
        from mmpretrain.models import VisionTransformer
        super().__init__(
            VisionTransformer(
                arch=arch,
                img_size=img_size,
                patch_size=patch_size,
                out_type='raw',
                final_norm=True,
                in_channels=in_channels), checkpoint, prefix)


@MODELS.register_module()
class CLIPFeatureTarget(FrozenFeatureTarget):
    """A frozen CLIP image encoder's patch tokens after ``ln_post`` and the
    projection (MILAN's target), the architecture given in the config so it
    builds without weights; inputs normalised with CLIP's mean and std.

    Args:
        checkpoint (str, optional): the converted weights (``target_weights.py
            clip``); None: random (tests).
        img_size (int): input size, pixels. Defaults to 224.
        patch_size (int): the patch side. Defaults to 16.
        width (int): the encoder's width. Defaults to 768.
        layers (int): its blocks. Defaults to 12.
        heads (int): its heads. Defaults to 12.
        output_dim (int): the projection's width. Defaults to 512.
        prefix (str): the checkpoint's key prefix. Defaults to 'visual.'.
    """

    def __init__(self,
                 checkpoint: Optional[str],
                 img_size: int = 224,
                 patch_size: int = 16,
                 width: int = 768,
                 layers: int = 12,
                 heads: int = 12,
                 output_dim: int = 512,
                 prefix: str = 'visual.') -> None:
        from mmpretrain.models.utils.clip_generator_helper import \
            VisionTransformer
        super().__init__(
            VisionTransformer(
                input_resolution=img_size,
                patch_size=patch_size,
                width=width,
                layers=layers,
                heads=heads,
                output_dim=output_dim), checkpoint, prefix)
