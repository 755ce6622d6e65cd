# Plain mmpretrain MAE with the same mini ViT, decoder, data, optimizer and
# schedule as the Fashion-MNIST HPM config: the baseline of the small study.
_base_ = [
    '../../_base_/models/mae_vit-mini-p4.py',
    '../../_base_/datasets/fashion_mnist_mim.py',
    '../../_base_/schedules/fmnist_pretrain_10e.py',
]

custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)

# runtime: no mask schedule; the same kNN evaluation
custom_hooks = [{{_base_.knn_hook}}]
