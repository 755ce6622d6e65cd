from .hpm_loss import (HPMAbsoluteLoss, HPMRelativeLoss, hpm_losses,
                       pairwise_rank_accuracy)

__all__ = [
    'HPMRelativeLoss', 'HPMAbsoluteLoss', 'pairwise_rank_accuracy',
    'hpm_losses'
]
