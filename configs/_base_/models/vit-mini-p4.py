# The "mini" ViT of the Fashion-MNIST configs, written once and referenced
# by the pretraining models (HPM and its MAE twin) and the linear / fine-tune
# classifiers: 4 blocks, 192-d, 3 heads, patch 4 on Fashion-MNIST's native
# 28x28 grayscale images (7x7 = 49 patches); a 2-block, 128-d decoder
# (reconstructor, and for HPM a loss predictor of the same depth).
vit_mini = dict(
    arch=dict(
        embed_dims=192, num_layers=4, num_heads=3, feedforward_channels=768),
    img_size=28,
    patch_size=4,
    in_channels=1,
    decoder=dict(
        num_patches=49,
        patch_size=4,
        in_chans=1,
        embed_dim=192,
        decoder_embed_dim=128,
        decoder_depth=2,
        decoder_num_heads=4))
