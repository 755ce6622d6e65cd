from typing import Optional

import numpy as np
from mmcv.transforms import LoadImageFromFile
from mmengine.logging import print_log
from mmpretrain.registry import TRANSFORMS

from .image_folder import load_image


@TRANSFORMS.register_module()
class LoadImageFromFileChecked(LoadImageFromFile):
    """mmcv's :class:`LoadImageFromFile`, reading through hpm_mm's one image
    reader (:func:`~hpm_mm.datasets.image_folder.load_image`: mmcv's pillow
    decoder, whatever ``imdecode_backend`` says), so that the data checks
    open each file as training does; an unreadable image is named.

    mmcv raises the decoder's own error for an empty or corrupt file (for a
    0-byte PNG, an OpenCV assertion that names no file). Here the error names
    the file and the fix; with ``skip_unreadable=True`` the file is skipped
    instead: the transform returns None, mmengine's dataset draws another
    sample, and every skip is logged with the running count of this worker.
    (A test-mode dataset cannot skip: mmengine refuses None there.)

    Args:
        skip_unreadable (bool): Skip unreadable files instead of stopping.
            Defaults to False.
        **kwargs: The arguments of :class:`LoadImageFromFile`.
    """

    def __init__(self, skip_unreadable: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.skip_unreadable = skip_unreadable
        self.num_skipped = 0

    def transform(self, results: dict) -> Optional[dict]:
        filename = results['img_path']
        try:
            img, _ = load_image(filename, self.color_type, self.backend_args)
        except Exception as e:
            why = f'{type(e).__name__}: {str(e).strip().splitlines()[-1]}' \
                if str(e).strip() else type(e).__name__
            if self.skip_unreadable:
                self.num_skipped += 1
                print_log(
                    f'skipped unreadable image {filename} ({why}); '
                    f'{self.num_skipped} skipped so far in this process',
                    logger='current',
                    level=30)
                return None
            raise OSError(
                f'cannot read image {filename} ({why}). Fix: replace or '
                'remove it (python tools/misc/check_data.py CONFIG lists '
                'every unreadable file), or skip such files with '
                "dict(type='LoadImageFromFileChecked', "
                'skip_unreadable=True).') from e
        if self.to_float32:
            img = img.astype(np.float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results
