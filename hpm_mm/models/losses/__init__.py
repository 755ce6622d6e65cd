from .hpm_loss import HPMAbsoluteLoss, HPMRelativeLoss, pairwise_rank_accuracy

__all__ = ['HPMRelativeLoss', 'HPMAbsoluteLoss', 'pairwise_rank_accuracy']
