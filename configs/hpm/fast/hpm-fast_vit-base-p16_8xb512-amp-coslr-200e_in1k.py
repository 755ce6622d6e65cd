# HPM ViT-B/16, 200 epochs, fast settings (docs/speed.md): the teacher
# scores the half-resolution image (7x7 patches, its score map upsampled to
# 14x14) and the loss predictor has 2 blocks instead of 8 (the paper's
# decoder-depth ablation, Tab. S4: 2 blocks gave 82.50 vs 82.95 fine-tune
# with both decoders at that depth). Measured step time: 1.17-1.25x MAE's on CPU
# vs 2.2-2.3x for faithful HPM (.dev_scripts/bench_step.py, docs/speed.md); the teacher runs in the
# AMP dtype like the rest of the step, and is skipped while K = 0.
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(neck=dict(predictor_depth=2), teacher=dict(input_scale=0.5))
