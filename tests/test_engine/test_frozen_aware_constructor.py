"""FrozenAwareOptimWrapperConstructor: the optimizer groups of a model with a
frozen part."""
from helpers import FMNIST_CFG


# ------------------------------------------------------------ the constructor
def test_frozen_aware_constructor_merged_groups_one_line(capsys):
    """mmengine's default constructor's parameter groups (one per
    parameter) merged by setting, in the order first met, as plain dicts
    (the default's are ConfigDicts: every read of a step through addict);
    the EMA teacher is named once instead of once per parameter."""
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
    merged = []  # the default's groups, merged by hand
    for ids, setting in groups['DefaultOptimWrapperConstructor']:
        same = [m for m in merged if m[1] == setting]
        if same:
            same[0][0].extend(ids)
        else:
            merged.append((list(ids), setting))
    assert groups['FrozenAwareOptimWrapperConstructor'] == merged
    assert len(merged) == 2 and len(
        groups['DefaultOptimWrapperConstructor']) == 112
    assert kinds == dict(
        FrozenAwareOptimWrapperConstructor={dict},
        DefaultOptimWrapperConstructor={ConfigDict}), kinds
    del logger


def _steps(wrapper, model, seeds):
    """AdamW steps of ``wrapper`` with the gradients of ``seeds``."""
    import torch
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.randn(p.shape, generator=g) * 1e-2
        wrapper.step()


def test_merged_groups_step_as_mmengines_and_resume_their_state():
    """The merged groups take the same AdamW steps, to the bit, as
    mmengine's one group per parameter (unclipped: a clipped step's norm
    sums the parameters in the groups' order, so its last bit may differ);
    a state saved in that layout (a
    checkpoint from before the merge) is merged as the constructor merges
    (``merge_saved``): every parameter's moments reach it, the schedulers'
    per-group values follow their groups, and the next step is the one the
    old layout would have taken."""
    import copy

    import torch
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper

    from hpm_mm.apis import load_model
    from hpm_mm.engine.checkpoint_migrations import merge_saved
    cfg = Config.fromfile(FMNIST_CFG)
    model = load_model(cfg)
    start = copy.deepcopy(model.state_dict())
    built = {}

    def build(name):
        return build_optim_wrapper(
            model,
            dict(
                cfg.optim_wrapper,
                type='OptimWrapper',
                clip_grad=None,  # (its norm sums the groups in turn)
                constructor=f'{name}OptimWrapperConstructor'))

    for name in ('Default', 'FrozenAware'):
        model.load_state_dict(start)
        built[name] = build(name)
        _steps(built[name], model, (1, 2))
        built[name + '_weights'] = copy.deepcopy(model.state_dict())
    old, new = built['Default'], built['FrozenAware']
    for k, v in built['Default_weights'].items():
        assert torch.equal(v, built['FrozenAware_weights'][k]), k
    n = len(old.optimizer.param_groups)
    schedulers = [
        dict(base_values=list(range(n)), _last_value=[0.5] * n, last_step=3)
    ]
    ckpt = copy.deepcopy(  # as saved: no tensor shared with ``old``
        dict(optimizer=old.state_dict(), param_schedulers=schedulers))
    fresh = build('FrozenAware')
    assert merge_saved(dict(optimizer=new.state_dict()),
                       fresh.optimizer) is None  # same layout: as it is
    line = merge_saved(ckpt, fresh.optimizer)
    assert line == ("resume: the checkpoint's 112 optimizer groups (one "
                    'per parameter) merged by setting into 2')
    fresh.load_state_dict(ckpt['optimizer'])
    for p, state in old.optimizer.state.items():
        for key, value in state.items():
            assert torch.equal(fresh.optimizer.state[p][key], value), key
    first_of_second = [
        i for i, g in enumerate(old.optimizer.param_groups)
        if g['weight_decay'] != old.optimizer.param_groups[0]['weight_decay']
    ][0]
    assert ckpt['param_schedulers'] == [
        dict(
            base_values=[0, first_of_second],
            _last_value=[0.5, 0.5],
            last_step=3)
    ]
    model.load_state_dict(built['Default_weights'])
    _steps(old, model, (3, ))
    after_old = copy.deepcopy(model.state_dict())
    model.load_state_dict(built['Default_weights'])
    _steps(fresh, model, (3, ))
    for k, v in model.state_dict().items():
        assert torch.equal(v, after_old[k]), k
    names = {id(p): n for n, p in model.named_parameters()}  # FSDP's
    by_name = old.state_dict()  # layout: keyed by parameter name
    ids = [
        names[id(p)] for g in old.optimizer.param_groups for p in g['params']
    ]
    by_name['state'] = {ids[i]: v for i, v in by_name['state'].items()}
    for g in by_name['param_groups']:
        g['params'] = [ids[i] for i in g['params']]
    state = dict(by_name['state'])
    merge_saved(dict(optimizer=by_name), fresh.optimizer)
    assert by_name['state'] == state  # the same keys, the same values
    assert [g['params'] for g in by_name['param_groups']
            ] == [[names[id(p)] for p in g['params']]
                  for g in fresh.optimizer.param_groups]
    short = fresh.state_dict()  # a layout that does not merge into this
    short['param_groups'] = short['param_groups'] * 3
    assert merge_saved(dict(optimizer=short), fresh.optimizer) is None
