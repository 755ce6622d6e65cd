# HPM ViT-L/16, 800 epochs, with FSDP through mmengine's FlexibleRunner (as
# HPMFlexibleRunner, with hpm_mm's run policy):
# gradients and AdamW states of the student sharded over the GPUs, the EMA
# teacher replicated (HPMFullyShardedDataParallel explains why), gradient
# clipping over all shards, fp16 with FSDP's sharded loss scaler.
#   bash tools/dist_train.sh THIS_CONFIG 8
# Same recipe and results as the DDP config it inherits; on a CPU the
# equivalence with one process is tested (tests/test_tools/test_ddp.py).
_base_ = './hpm_vit-large-p16_8xb512-amp-coslr-800e_in1k.py'

runner_type = 'HPMFlexibleRunner'
strategy = dict(
    type='HPMFSDPStrategy',
    state_dict_cfg='full',  # checkpoints keep the usual (DDP) key layout
    model_wrapper=dict(type='HPMFullyShardedDataParallel'))
optim_wrapper = dict(use_fsdp=True)
