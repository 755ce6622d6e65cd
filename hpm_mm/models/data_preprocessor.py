import functools
from typing import List, Sequence

import torch
from mmpretrain.models.utils import SelfSupDataPreprocessor
from mmpretrain.registry import MODELS

from hpm_mm.errors import HPMError


def check_channels(preprocessor, data: dict) -> None:
    """Refuse, in one line naming both, images whose channel count does not
    match the preprocessor's ``mean``/``std`` (and so the model's input
    channels), and still-encoded JPEG bytes (1-D). Without it, grayscale
    images into an RGB model stop with an IndexError in the channel swap, and
    RGB images into a grayscale model with a convolution's channel error deep
    in the encoder."""
    inputs = data.get('inputs') if isinstance(data, dict) else None
    first = inputs[0] if isinstance(inputs, (list, tuple)) and inputs \
        else inputs
    if torch.is_tensor(first) and first.dim() == 1:
        raise HPMError('the batch holds encoded images. Fix: type='
                       "'DeviceDecodeDataPreprocessor' and 'device_decode' in "
                       'PackInputs meta_keys.')
    if not (getattr(preprocessor, '_enable_normalize', False)
            and torch.is_tensor(first) and first.dim() >= 3):
        return
    have, want = first.shape[-3], preprocessor.mean.shape[0]
    if have != want:
        raise HPMError(
            f'the images have {have} channel(s) but the model takes {want}. '
            f"Fix: color_type='{'grayscale' if want == 1 else 'color'}'.")


def watch_channels(model) -> None:
    """Check every batch's channels (:func:`check_channels`) at the built
    model's data preprocessor, whichever class it is and whichever config
    key set it (``model.data_preprocessor`` or the top-level one): a forward
    pre-hook, added once; a mean/std of another length than the encoder's
    input channels is refused at once. The runners call it."""
    pre = getattr(model, 'data_preprocessor', None)
    embed = getattr(getattr(model, 'backbone', None), 'patch_embed', None)
    want = getattr(getattr(embed, 'projection', None), 'in_channels', None)
    mean = getattr(pre, 'mean', None)
    if want and torch.is_tensor(mean) and getattr(
            pre, '_enable_normalize', False) and mean.shape[0] != want:
        raise HPMError(f'data_preprocessor mean/std have {mean.shape[0]} '
                       f'value(s) for {want} channels. Fix: one per channel.')
    if not isinstance(pre, torch.nn.Module) or \
            getattr(pre, '_hpm_channels_watched', False) or \
            isinstance(pre, ChannelCheckedDataPreprocessor):
        return
    pre.register_forward_pre_hook(lambda m, args: check_channels(m, args[0])
                                  if args else None)
    pre._hpm_channels_watched = True


@functools.lru_cache(maxsize=None)
def _side_stream(device: torch.device) -> 'torch.cuda.Stream':
    return torch.cuda.Stream(device)


def _decode(encoded: List[torch.Tensor], device) -> List[torch.Tensor]:
    """RGB images of JPEG bytes, decoded on ``device``. On CUDA from a side
    stream: torchvision's nvJPEG decode allocates its outputs on the current
    stream but writes them from its own without waiting for it, so a block
    the step's queued kernels still read was overwritten (NaN losses and
    device asserts on the H200, docs/results/gpu/; pytorch/vision#9606). The
    side stream's pool holds no block the step uses; the outputs are then
    ordered before the step's reads and kept until those are done."""
    from torchvision.io import ImageReadMode, decode_jpeg
    device = torch.device(device)
    if device.type != 'cuda':
        return decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    main, side = torch.cuda.current_stream(device), _side_stream(device)
    with torch.cuda.stream(side):
        out = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    main.wait_stream(side)
    for img in out:
        img.record_stream(main)
    return out


def decode_crops(images: Sequence[torch.Tensor], decode: Sequence[dict], size,
                 device) -> torch.Tensor:
    """The (B, 3, H, W) float RGB crops (0-255) of a batch from
    :class:`~hpm_mm.datasets.LoadBytesAndCropBox`: the JPEG bytes (uint8,
    1-D, on the CPU) decoded in one call on ``device`` (nvJPEG on a GPU),
    each cropped to its ``box`` and resized (antialiased) to ``size``; the
    crops made in the worker taken as they are; then, for the whole batch at
    once, the cast and the flips (a flag copied without waiting)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2.functional import resized_crop
    encoded = [img for img in images if img.dim() == 1]
    decoded = iter(_decode(encoded, device) if encoded else [])
    crops: List[torch.Tensor] = []
    for img, spec in zip(images, decode):
        if img.dim() == 1:
            mode = InterpolationMode(spec.get('interpolation', 'bilinear'))
            img = resized_crop(
                next(decoded), *spec['box'], list(size), mode, antialias=True)
        crops.append(img.to(device))
    out = torch.stack(crops).float()
    flip = torch.tensor([bool(s['flip']) for s in decode])
    flip = flip.to(device, non_blocking=True).view(-1, 1, 1, 1)
    return torch.where(flip, out.flip(-1), out)


@MODELS.register_module()
class ChannelCheckedDataPreprocessor(SelfSupDataPreprocessor):
    """mmpretrain's :class:`SelfSupDataPreprocessor` that refuses images
    whose channel count does not match its ``mean``/``std``, in one line
    naming both (:func:`check_channels`). hpm_mm's runners check the built
    preprocessor of any model the same way (:func:`watch_channels`)."""

    def forward(self, data: dict, training: bool = False) -> dict:
        check_channels(self, data)
        return super().forward(data, training)


@MODELS.register_module()
class DeviceDecodeDataPreprocessor(ChannelCheckedDataPreprocessor):
    """The GPU JPEG decode's second half: the JPEG batches
    :class:`~hpm_mm.datasets.LoadBytesAndCropBox` hands it decoded on its
    device (:func:`decode_crops`: RGB, so no channel swap), then
    normalised; any other batch as :class:`ChannelCheckedDataPreprocessor`.
    Its arguments are mmpretrain's ``SelfSupDataPreprocessor``'s."""

    def forward(self, data: dict, training: bool = False) -> dict:
        samples = data.get('data_samples') if isinstance(data, dict) else None
        if not (samples and 'device_decode' in samples[0]):
            return super().forward(data, training)
        inputs = decode_crops(data['inputs'],
                              [s.device_decode for s in samples],
                              samples[0].img_shape, self.device)
        if self._enable_normalize:
            inputs = (inputs - self.mean) / self.std
        return dict(inputs=inputs, data_samples=self.cast_data(samples))
