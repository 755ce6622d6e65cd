# The main job's config with the example CenterMaskGenerator instead of
# HPM's teacher-guided masks (docs/extending.md). Run from the repo root:
#   PYTHONPATH=. python tools/train.py \
#       projects/example_mask_generator/configs/hpm-center_vit-mini-p4_1xb256-coslr-10e_fmnist.py
_base_ = ['../../../configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

custom_imports = dict(
    imports=['hpm_mm', 'projects.example_mask_generator.center_mask_generator'],
    allow_failed_imports=False)

# model: the generator switch; it needs no scores, so no teacher is built and
# the loss predictor trains on random-with-a-tilt masks (L_pred only)
model = dict(
    mask_generator=dict(
        _delete_=True, type='CenterMaskGenerator', mask_ratio=0.75, bias=1.0))

# runtime: no hard-patch grids (they show a teacher's scores)
custom_hooks = [
    dict(type='HPMScheduleHook', by_epoch=True),
    {{_base_.knn_hook}},
]
