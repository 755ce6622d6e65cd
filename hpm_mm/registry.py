"""The ``hpm_mm`` registry scope: ``_base_ = 'hpm_mm::...'`` configs.

hpm_mm registers its modules into mmpretrain's registries (the OpenMMLab
project convention). A config that inherits ours through ``hpm_mm::`` gets
``_scope_='hpm_mm'`` in every dict it inherits, and mmengine then builds
them from the registry of scope ``hpm_mm`` (found by importing this module
and searching the registry tree). These are those registries: empty
children of mmpretrain's, so every lookup in the ``hpm_mm`` scope resolves
through them to mmpretrain's registries (where our modules are) and on to
mmengine's root. Nothing is registered here.
"""
from mmengine.registry import Registry
from mmpretrain import registry as mmpretrain_registry

__all__ = list(mmpretrain_registry.__all__)


def _child(parent: Registry) -> Registry:
    # the parent's lazy-import locations too: a lookup through this child
    # must find mmpretrain's modules even before anything imported them
    return Registry(
        parent.name,
        parent=parent,
        scope='hpm_mm',
        locations=list(parent._locations))


for _name in __all__:
    globals()[_name] = _child(getattr(mmpretrain_registry, _name))
