# HPM ViT-L/16, 800 epochs (paper Tab. 8: 85.8 fine-tune); the schedule's
# cosine ends with the run.
_base_ = './hpm_vit-large-p16_8xb512-amp-coslr-200e_in1k.py'

train_cfg = dict(max_epochs=800)
