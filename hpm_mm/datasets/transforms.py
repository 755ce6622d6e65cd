import io
from typing import Optional

import numpy as np
from mmcv.image.geometric import pillow_interp_codes
from mmcv.transforms import LoadImageFromFile
from mmengine.logging import print_log
from mmpretrain.datasets.transforms import RandomResizedCrop
from mmpretrain.registry import TRANSFORMS
from PIL import Image, ImageOps

from hpm_mm.errors import HPMError
from .image_folder import check_header, load_image


class _Unreadable:
    """What both loaders do with a file that cannot be read: name it and
    the fix in one line, or skip it (``skip_unreadable``)."""

    def __init__(self, skip_unreadable: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.skip_unreadable = skip_unreadable
        self.num_skipped = 0

    def transform(self, results: dict) -> Optional[dict]:
        """``results`` with the image's keys (:meth:`_load`), or the file's
        one line (None where unreadable files are skipped)."""
        filename = results['img_path']
        try:
            results.update(self._load(filename))
            return results
        except Exception as e:
            why = f'{type(e).__name__}: {str(e).strip().splitlines()[-1]}' \
                if str(e).strip() else type(e).__name__
            if not self.skip_unreadable:
                raise HPMError(
                    f'cannot read image {filename} ({why}). Fix: replace or '
                    f"remove it, or dict(type='{type(self).__name__}', "
                    'skip_unreadable=True).') from e
        self.num_skipped += 1
        print_log(
            f'skipped unreadable image {filename} ({why}); '
            f'{self.num_skipped} skipped so far in this process', 'current',
            30)


@TRANSFORMS.register_module()
class LoadImageFromFileChecked(_Unreadable, LoadImageFromFile):
    """mmcv's :class:`LoadImageFromFile` through hpm_mm's one image reader
    (:func:`~hpm_mm.datasets.image_folder.load_image`), so the data checks
    open files as training does; an unreadable file is one line naming it,
    or skipped (``skip_unreadable=True``: None, mmengine draws another
    sample; logged).

    Args:
        skip_unreadable (bool): Defaults to False.
        **kwargs: The arguments of :class:`LoadImageFromFile`."""

    def _load(self, filename: str) -> dict:
        img, _ = load_image(filename, self.color_type, self.backend_args)
        if self.to_float32:
            img = img.astype(np.float32)
        return dict(img=img, img_shape=img.shape[:2], ori_shape=img.shape[:2])


#: DCT-domain reductions a JPEG decoder offers (libjpeg: 1/2, 1/4, 1/8)
JPEG_REDUCTIONS = (8, 4, 2)


@TRANSFORMS.register_module()
class LoadAndRandomResizedCrop(_Unreadable, RandomResizedCrop):
    """Load an image and take mmpretrain's random resized crop of it, decoding
    a JPEG only at the resolution the crop needs: the box is drawn from the
    header size (the same random state gives the same box), the JPEG decoded at
    the strongest DCT reduction (Pillow ``draft``) under which the box still
    spans the output size, and the box resampled. Other files, crops and
    ``reduce=False`` are exactly :class:`LoadImageFromFileChecked` and
    :class:`RandomResizedCrop` (whose arguments it takes; docs/speed.md).

    Args:
        scale (int | tuple): the output size.
        reduce (bool): whether a JPEG is decoded at the box's resolution.
            Defaults to True.
        color_type (str): 'color' or 'grayscale'. Defaults to 'color'.
        skip_unreadable (bool): whether an unreadable file is skipped instead
            of refused. Defaults to False.
        backend_args (dict, optional): mmengine's file backend. Defaults to
            None.
        **kwargs: :class:`RandomResizedCrop`'s ``crop_ratio_range``,
            ``aspect_ratio_range``, ``max_attempts``, ``interpolation``
            (Pillow's: the resize is Pillow's whatever ``backend``).
    """

    def __init__(self,
                 scale,
                 reduce: bool = True,
                 color_type: str = 'color',
                 skip_unreadable: bool = False,
                 backend_args: Optional[dict] = None,
                 **kwargs) -> None:
        super().__init__(
            scale=scale, skip_unreadable=skip_unreadable, **kwargs)
        if color_type not in ('color', 'grayscale'):
            raise ValueError(f"color_type={color_type!r}: 'color' or "
                             "'grayscale'.")
        if self.interpolation not in pillow_interp_codes:
            raise ValueError(f'interpolation={self.interpolation!r}: one of '
                             f'{sorted(pillow_interp_codes)}.')
        self.reduce = reduce
        self.color_type = color_type
        self.backend_args = backend_args

    def reduction(self, target_h: int, target_w: int) -> int:
        """The strongest JPEG reduction under which a ``target_h`` x
        ``target_w`` box still spans the output size (1: none)."""
        out_w, out_h = self.scale
        return next((f for f in JPEG_REDUCTIONS
                     if target_h / f >= out_h and target_w / f >= out_w), 1)

    def _load(self, filename: str) -> dict:
        _, pil, full, box = self._open(filename)
        img = self._crop(pil, full, box)
        return dict(img=img, img_shape=img.shape[:2], ori_shape=full)

    def _open(self, filename: str):
        """(the file's bytes, its Pillow image, its full (h, w) after an
        EXIF turn, the crop box drawn from them)."""
        from mmengine import fileio
        content = fileio.get(filename, backend_args=self.backend_args)
        pil = Image.open(io.BytesIO(content))
        check_header(pil.size, pil.mode)
        w, h = pil.size
        if pil.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # EXIF: turned
            w, h = h, w
        box = self.rand_crop_params(np.empty((h, w, 0)))  # reads its shape
        return content, pil, (h, w), box

    def _crop(self, pil, full, box) -> np.ndarray:
        """The crop as a BGR (or H x W) uint8 array. Everything stays in
        Pillow until the output: the decode (mmcv's pillow reader's steps:
        EXIF turn, to RGB, to L), the crop and the resize (mmcv's pillow
        resize), so that an unreduced crop is theirs to the bit."""
        (h, w), (oh, ow, th, tw) = full, box
        factor = self.reduction(th, tw) if (self.reduce
                                            and pil.format == 'JPEG') else 1
        if factor > 1:  # a DCT-domain decode at 1/factor
            pil.draft(pil.mode, (pil.size[0] // factor, pil.size[1] // factor))
        pil = _as_mmcv_reads(pil, self.color_type)
        size = tuple(self.scale[::-1])
        resample = pillow_interp_codes[self.interpolation]
        if factor == 1:  # mmcv's imcrop + imresize(backend='pillow')
            out = pil.crop((ow, oh, ow + tw, oh + th)).resize(size, resample)
        else:  # the box in the reduced image's coordinates
            fx, fy = pil.size[0] / w, pil.size[1] / h
            out = pil.resize(
                size,
                resample,
                box=(ow * fx, oh * fy, (ow + tw) * fx, (oh + th) * fy))
        out = np.asarray(out)
        if out.ndim == 3:  # RGB -> BGR, as mmcv's loaders
            out = out[..., ::-1]
        return np.ascontiguousarray(out)


def _as_mmcv_reads(pil, color_type: str):
    """A Pillow image as mmcv's pillow reader turns it into an array
    (``_pillow2array``), kept a Pillow image: EXIF orientation applied,
    converted to RGB (LA over mmcv's background colour), then to L for
    ``'grayscale'``."""
    ImageOps.exif_transpose(pil, in_place=True)  # no copy when upright
    if pil.mode == 'LA':
        rgba = pil.convert('RGBA')
        pil = Image.new('RGB', rgba.size, (124, 117, 104))
        pil.paste(rgba, mask=rgba.split()[3])
    elif pil.mode != 'RGB':
        pil = pil.convert('RGB')
    return pil.convert('L') if color_type == 'grayscale' else pil


@TRANSFORMS.register_module()
class LoadBytesAndCropBox(LoadAndRandomResizedCrop):
    """GPU JPEG decoding, its CPU half: a worker reads a JPEG's bytes and
    header and draws the crop box (as :class:`LoadAndRandomResizedCrop`:
    the same random state gives the same box) and the horizontal flip
    (``flip_prob``, as ``RandomFlip``); the data preprocessor decodes the
    batch on its device (nvJPEG on a GPU), crops, resizes, flips
    (:func:`~hpm_mm.models.data_preprocessor.decode_crops`). ``img`` is the
    bytes (uint8, 1-D) and ``device_decode`` the box, flip and
    interpolation (a ``PackInputs`` meta key; the loader collates with
    ``pseudo_collate``). A file nvJPEG does not take (not a JPEG, CMYK, an
    EXIF turn) is cropped here and passed as a (3, H, W) RGB crop.
    configs/_base_/datasets/imagenet_bs512_mae_gpu_decode.py.

    Args:
        scale (int | tuple): the output size, as ``LoadAndRandomResizedCrop``.
        flip_prob (float): the horizontal flip's probability, as
            ``RandomFlip``. Defaults to 0.5.
        **kwargs: ``LoadAndRandomResizedCrop``'s other arguments.
    """

    def __init__(self, scale, flip_prob: float = 0.5, **kwargs) -> None:
        super().__init__(scale, **kwargs)
        if self.color_type != 'color':
            raise ValueError('LoadBytesAndCropBox decodes colour (RGB) '
                             "images: color_type='color'.")
        self.flip_prob = flip_prob

    def _load(self, filename: str) -> dict:
        import torch
        content, pil, full, box = self._open(filename)
        if pil.format == 'JPEG' and pil.mode in ('RGB', 'L') and \
                pil.getexif().get(0x0112, 1) == 1:
            img = torch.frombuffer(bytearray(content), dtype=torch.uint8)
        else:  # decoded and cropped here, as LoadAndRandomResizedCrop
            crop = self._crop(pil, full, box)[..., ::-1].copy()
            img, box = torch.from_numpy(crop).permute(2, 0, 1), None
        flip = np.random.choice(  # RandomFlip's draw
            ['horizontal', None],
            p=[self.flip_prob, 1. - self.flip_prob])
        return dict(
            img=img,
            img_shape=(self.scale[1], self.scale[0]),
            ori_shape=full,
            device_decode=dict(
                box=box,
                flip=flip is not None,
                interpolation=self.interpolation))
