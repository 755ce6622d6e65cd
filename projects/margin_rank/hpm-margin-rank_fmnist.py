# The main job's HPM config with a margin ranking L_pred and a hook that logs
# the ranking accuracy per epoch (docs/extending.md).
_base_ = 'hpm_mm::hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
custom_imports = dict(
    imports=['hpm_mm', 'margin_rank'], allow_failed_imports=False)

model = dict(
    head=dict(
        loss_pred=dict(_delete_=True, type='MarginRankLoss', margin=0.1)))
custom_hooks = [
    dict(type='HPMScheduleHook', by_epoch=True),
    dict(type='RankAccLog'),
]
