"""FrozenAwareOptimWrapperConstructor: the optimizer groups of a model with a
frozen part."""
from helpers import FMNIST_CFG


# ------------------------------------------------------------ the constructor
def test_frozen_aware_constructor_same_groups_one_line(capsys):
    """Same parameter groups as mmengine's default constructor, as plain
    dicts (the default's are ConfigDicts: every read of a step through
    addict); the EMA teacher is named once instead of once per
    parameter."""
    from mmengine.config import Config, ConfigDict
    from mmengine.logging import MMLogger
    from mmengine.optim import build_optim_wrapper

    from hpm_mm.apis import load_model
    cfg = Config.fromfile(FMNIST_CFG)
    assert cfg.optim_wrapper.constructor == \
        'FrozenAwareOptimWrapperConstructor'
    model = load_model(cfg)
    import uuid  # a new logger becomes mmengine's 'current' one
    logger = MMLogger.get_instance(
        f'frozen_{uuid.uuid4().hex}', log_level='INFO')
    groups, kinds = {}, {}
    for constructor in ('FrozenAwareOptimWrapperConstructor',
                        'DefaultOptimWrapperConstructor'):
        capsys.readouterr()
        wrapper = build_optim_wrapper(
            model, dict(cfg.optim_wrapper, constructor=constructor))
        groups[constructor] = [([id(p) for p in g['params']], {
            k: v
            for k, v in g.items() if k != 'params'
        }) for g in wrapper.optimizer.param_groups]
        kinds[constructor] = {type(g) for g in wrapper.optimizer.param_groups}
        out = capsys.readouterr().out
        skipped = out.count('requires_grad=False')
        if constructor == 'DefaultOptimWrapperConstructor':
            assert skipped == len(list(model.teacher.parameters())) + 2
        else:  # the teacher and the fixed position embeddings, one line
            assert skipped == 1 and 'not optimised (requires_grad=False): ' \
                'teacher (114 tensors, ' in out and \
                'backbone.pos_embed, neck.decoder_pos_embed' in out, out
    assert groups['FrozenAwareOptimWrapperConstructor'] == \
        groups['DefaultOptimWrapperConstructor']
    assert kinds == dict(
        FrozenAwareOptimWrapperConstructor={dict},
        DefaultOptimWrapperConstructor={ConfigDict}), kinds
    del logger
