# HPM on the embedded Fashion-MNIST data: the mini ViT (4 layers, 192-d,
# patch 4 on the native 28x28 grayscale images = 49 patches) with 2-block
# 128-d reconstructor and loss predictor. Each epoch sees the first 10k of
# the 60k training images (kNN uses all). Its MAE twin:
# ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py
_base_ = [
    '../_base_/models/hpm_vit-mini-p4.py',
    '../_base_/datasets/fashion_mnist_mim.py',
    '../_base_/schedules/fmnist_pretrain_10e.py',
]

# model: EMA teacher for a 400-step run. The authors' 1e-3 -> 1e-4 is tuned
# for ~60k+ steps; here it would leave the teacher at ~2/3 of its random
# initialisation after 400 steps (measured: its predicted losses were
# anti-correlated with the true ones, Spearman -0.47). Scaled to the run:
# 0.1 -> 0.025 (teacher lag ~10 -> 40 steps) over the whole run (it follows
# train_cfg.max_epochs; hpm_mm.engine.schedule.scale_recipe rescales the
# values for another length).
model = dict(
    teacher=dict(momentum=0.1, end_momentum=0.025, momentum_epochs=None))

# runtime: the mask schedule, then kNN and the hard-patch grids after training
custom_hooks = [
    dict(type='HPMScheduleHook', by_epoch=True),
    {{_base_.knn_hook}},
    {{_base_.vis_hook}},
]
