"""ChannelCheckedDataPreprocessor: a channel mismatch between the images and
the model in one line naming both."""

import torch
from conftest import folder_config, python, run_train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)


def test_channel_mismatch_is_one_line_naming_both(tmp_path):
    import pytest
    from conftest import make_image_folder

    from hpm_mm.models import ChannelCheckedDataPreprocessor
    gray_model = ChannelCheckedDataPreprocessor(mean=[0.], std=[1.])
    rgb_model = ChannelCheckedDataPreprocessor(
        mean=[0.] * 3, std=[1.] * 3, to_rgb=True)
    with pytest.raises(
            ValueError, match=r'3 channel\(s\) but the model '
            r'takes 1'):
        gray_model(dict(inputs=torch.zeros(2, 3, 8, 8)))
    with pytest.raises(
            ValueError,
            match=r'1 channel\(s\) but the model '
            r'takes 3.*color_type=.color'):
        rgb_model(dict(inputs=[torch.zeros(1, 8, 8)]))
    # RGB files loaded as colour into the grayscale main-job model
    data = make_image_folder(str(tmp_path / 'rgb'), 1, 4, gray=False)
    cfg = folder_config(tmp_path, data, color='color')
    check = python('tools/misc/check_data.py', cfg, timeout=300)
    assert check.returncode == 1
    assert ('the pipeline loads 3-channel images but the model takes 1'
            in check.stdout)
    proc, out = run_train(cfg, tmp_path / 'w', check=False)
    assert proc.returncode != 0
    assert 'the images have 3 channel(s) but the model takes 1' in out
