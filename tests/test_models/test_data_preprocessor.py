"""ChannelCheckedDataPreprocessor: a channel mismatch between the images and
the model in one line naming both."""

import pytest
import torch
from helpers import folder_config, train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.errors import HPMError


def test_channel_mismatch_is_one_line_naming_both(tmp_path):
    from helpers import make_image_folder

    from hpm_mm.models import ChannelCheckedDataPreprocessor
    gray_model = ChannelCheckedDataPreprocessor(mean=[0.], std=[1.])
    rgb_model = ChannelCheckedDataPreprocessor(
        mean=[0.] * 3, std=[1.] * 3, to_rgb=True)
    with pytest.raises(
            HPMError, match=r'3 channel\(s\) but the model '
            r'takes 1'):
        gray_model(dict(inputs=torch.zeros(2, 3, 8, 8)))
    with pytest.raises(
            HPMError,
            match=r'1 channel\(s\) but the model '
            r'takes 3.*color_type=.color'):
        rgb_model(dict(inputs=[torch.zeros(1, 8, 8)]))
    # RGB files loaded as colour into the grayscale main-job model
    data = make_image_folder(str(tmp_path / 'rgb'), 1, 4, gray=False)
    cfg = folder_config(tmp_path, data, color='color')
    from hpm_mm.apis import load_config
    from hpm_mm.datasets.data_check import check_data
    assert ('the pipeline loads 3-channel images but the model takes 1'
            in '\n'.join(check_data(load_config(cfg))['problems']))
    with pytest.raises(
            HPMError,
            match=r'the images have 3 channel\(s\) but the model takes 1'):
        train(cfg, tmp_path / 'w')
