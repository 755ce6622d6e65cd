from mmengine.hooks import Hook
from mmengine.registry import HOOKS  # root: every scope finds it


@HOOKS.register_module()
class CUDAGraphStepHook(Hook):
    """Under ``compile=dict(mode='reduce-overhead')``: mark each iteration's
    start for torch's CUDA-graph trees, so a replay never overwrites the
    outputs of a graph the same step still reads. hpm_mm's runner registers
    it by name (it is not a config's hook)."""

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        import torch
        torch.compiler.cudagraph_mark_step_begin()
