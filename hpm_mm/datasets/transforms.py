from typing import Optional

from mmcv.transforms import LoadImageFromFile
from mmengine.logging import print_log
from mmpretrain.registry import TRANSFORMS


@TRANSFORMS.register_module()
class LoadImageFromFileChecked(LoadImageFromFile):
    """mmcv's :class:`LoadImageFromFile`, with an unreadable image named.

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
            return super().transform(results)
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
