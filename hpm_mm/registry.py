"""The ``hpm_mm`` registry scope: ``_base_ = 'hpm_mm::...'`` configs.

hpm_mm registers its modules into mmpretrain's registries (the OpenMMLab
project convention). A config that inherits ours through ``hpm_mm::`` gets
``_scope_='hpm_mm'`` in every dict it inherits, and mmengine then builds
them from the registry of scope ``hpm_mm`` (found by importing this module
and searching the registry tree). These are those registries: empty
children of mmpretrain's, so every lookup in the ``hpm_mm`` scope resolves
through them to mmpretrain's registries (where our modules are) and on to
mmengine's root. Nothing is registered here, and a module registered
into this scope may not hide one of mmpretrain's (:class:`ScopeRegistry`).
"""
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
                raise KeyError(
                    f'{name} is registered in the {self.name} registry (from '
                    f'{have.__module__}); registering '
                    f'{getattr(module, "__module__", "?")}.{name} in the '
                    'hpm_mm scope would replace it in every hpm_mm:: config. '
                    'Fix: give yours another name, or pass force=True to '
                    'shadow it on purpose.')
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
