from typing import Dict

import torch
import torch.distributed as dist
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper


def update_unless_nonfinite(loss: torch.Tensor,
                            log_vars: Dict,
                            optim_wrapper: OptimWrapper,
                            enabled: bool = True) -> Dict:
    """``optim_wrapper.update_params(loss)``, or skip the step on NaN/inf.

    The decision is taken on every rank alike: one flag is max-reduced over
    the process group, so when any rank's loss is not finite, no rank runs
    the backward (DDP/FSDP would spread that rank's NaN gradients to all) or
    the optimizer step; gradients are zeroed and the weights stay as they
    are. AMP's loss scaler alone would only catch fp16 gradient overflow.
    Logs ``nonfinite_skipped`` (1 for a skipped step, else 0).

    Args:
        loss (torch.Tensor): The parsed total loss of this rank.
        log_vars (dict): mmengine's log variables; updated in place.
        optim_wrapper (OptimWrapper): The optimizer wrapper.
        enabled (bool): False: a plain ``update_params`` (no check, no
            ``nonfinite_skipped``). Defaults to True.

    Returns:
        dict: ``log_vars``.
    """
    if not enabled:
        optim_wrapper.update_params(loss)
        return log_vars
    bad = (~torch.isfinite(loss.detach())).float().reshape(1)
    if dist.is_available() and dist.is_initialized() and \
            dist.get_world_size() > 1:
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    if bad.item() > 0:
        optim_wrapper.zero_grad()
        print_log(
            f'non-finite loss ({float(loss.detach())} on this rank): '
            'optimizer step skipped on every rank, weights unchanged',
            logger='current', level=30)
        log_vars['nonfinite_skipped'] = loss.new_tensor(1.)
        return log_vars
    optim_wrapper.update_params(loss)
    log_vars['nonfinite_skipped'] = loss.new_tensor(0.)
    return log_vars


def guarded_train_step(forward_module: torch.nn.Module,
                       model: torch.nn.Module, data: dict,
                       optim_wrapper: OptimWrapper) -> Dict:
    """mmengine's train step with the non-finite guard.

    The steps of ``BaseModel.train_step`` / ``MMDistributedDataParallel.
    train_step`` (preprocess, forward under the optimizer wrapper's context,
    parse the losses), then :func:`update_unless_nonfinite` instead of
    ``update_params``, honouring the model's ``skip_nonfinite``.

    Args:
        forward_module (nn.Module): What runs the forward: the model itself,
            or its DDP/FSDP wrapper.
        model (nn.Module): The model (data preprocessor, ``parse_losses``).
        data (dict): A batch from the dataloader.
        optim_wrapper (OptimWrapper): The optimizer wrapper.
    """
    with optim_wrapper.optim_context(forward_module):
        data = model.data_preprocessor(data, training=True)
        losses = forward_module._run_forward(data, mode='loss')
    parsed_loss, log_vars = model.parse_losses(losses)
    return update_unless_nonfinite(parsed_loss, log_vars, optim_wrapper,
                                   getattr(model, 'skip_nonfinite', True))
