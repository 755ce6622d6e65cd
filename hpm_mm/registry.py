"""The ``hpm_mm`` registry scope, for ``_base_ = 'hpm_mm::...'`` configs:
empty children of mmpretrain's registries (where hpm_mm's modules are
registered), so every lookup in the scope resolves through them."""
from mmengine.registry import Registry
from mmpretrain import registry as mmpretrain_registry

__all__ = list(mmpretrain_registry.__all__)


class ScopeRegistry(Registry):
    """A child of mmpretrain's registry that will not let a module
    registered into the ``hpm_mm`` scope hide one of mmpretrain's (ours
    included) under the same name: every ``hpm_mm::`` config would build
    the impostor. ``force=True`` shadows on purpose."""

    def _register_module(self, module, module_name=None, force=False):
        names = module_name or getattr(module, '__name__', None)
        for name in [names] if isinstance(names, str) else list(names or []):
            have, reg = None, self.parent
            while have is None and reg is not None:  # mmpretrain, mmengine
                have, reg = reg.module_dict.get(name), reg.parent
            if not force and have is not None and have is not module:
                raise KeyError(f'{name} ({have.__module__}) would be replaced'
                               f' in every hpm_mm:: config\'s {self.name} '
                               'registry. Fix: another name.')
        super()._register_module(module, module_name, force)


def _child(parent: Registry) -> Registry:
    # the parent's lazy-import locations too: a lookup through this child
    # must find mmpretrain's modules even before anything imported them
    return ScopeRegistry(
        parent.name,
        parent=parent,
        scope='hpm_mm',
        locations=list(parent._locations))


for _name in __all__:
    globals()[_name] = _child(getattr(mmpretrain_registry, _name))
