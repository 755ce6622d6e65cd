"""DINO-style weighted kNN on L2-normalised frozen features: the k nearest
training samples vote with ``exp(sim / T)``; every k from one top-k
search per chunk of test samples."""
from contextlib import contextmanager
from itertools import chain
from typing import Dict, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from mmengine.dist import collect_results, get_world_size
from mmengine.utils import ProgressBar


@torch.no_grad()
def knn_classify(train_feats: torch.Tensor,
                 train_labels: torch.Tensor,
                 test_feats: torch.Tensor,
                 test_labels: torch.Tensor,
                 ks: Sequence[int] = (10, 20, 100, 200),
                 temperature: float = 0.07,
                 num_classes: Optional[int] = None,
                 chunk_size: int = 256) -> Dict[int, float]:
    """Top-1 accuracy (%) of DINO's weighted kNN classifier for each k
    (``exp(sim / temperature)`` votes; k clipped to the bank), computed in
    blocks of ``chunk_size`` test samples. Returns ``{k: top-1}``."""
    if train_feats.shape[0] != train_labels.shape[0]:
        raise ValueError('train_feats and train_labels differ in length: '
                         f'{train_feats.shape[0]} vs {train_labels.shape[0]}')
    train = F.normalize(train_feats.float(), dim=1)
    test = F.normalize(test_feats.float(), dim=1)
    train_labels = train_labels.long()
    num_classes = num_classes or int(
        max(train_labels.max(), test_labels.max())) + 1
    ks = sorted({min(int(k), train.shape[0]) for k in ks})
    correct = {k: 0 for k in ks}
    for start in range(0, test.shape[0], chunk_size):
        sim = test[start:start + chunk_size] @ train.T
        top_sim, top_idx = sim.topk(ks[-1], dim=1)  # sorted, descending
        weight = (top_sim / temperature).exp()
        votes = F.one_hot(train_labels[top_idx], num_classes).float()
        votes = votes * weight.unsqueeze(-1)  # (b, kmax, C)
        cum = votes.cumsum(dim=1)
        target = test_labels[start:start + chunk_size].long()
        for k in ks:
            pred = cum[:, k - 1].argmax(dim=1)
            correct[k] += int((pred == target).sum())
    return {k: 100. * c / test.shape[0] for k, c in correct.items()}


#: image features of a ViT for kNN and linear probing
FEATURES = ('avg', 'cls')


def pool_features(feats,
                  num_extra_tokens: int = 1,
                  feature: str = 'avg') -> torch.Tensor:
    """(B, D) features of a backbone's output: token sequences averaged over
    the patches (``'avg'``, the paper) or the CLS token (``'cls'``, the
    authors' scripts); maps averaged over space; a tuple's last element."""
    if feature not in FEATURES:
        raise ValueError(f'feature must be one of {FEATURES}, got '
                         f'{feature!r}.')
    if isinstance(feats, (tuple, list)):
        feats = feats[-1]
    if feature == 'cls' and (feats.dim() != 3 or num_extra_tokens < 1):
        raise ValueError("feature='cls' needs token outputs with a CLS token,"
                         f' got {tuple(feats.shape)}. Fix: feature=avg.')
    if feats.dim() == 3:
        return feats[:, 0] if feature == 'cls' else \
            feats[:, num_extra_tokens:].mean(dim=1)
    return feats.mean(dim=(2, 3)) if feats.dim() == 4 else feats


@contextmanager
def block_output(model, layer: Optional[int]):
    """Capture the tokens out of encoder block ``layer`` (0-based, negative
    from the end) during ``model.extract_feat``, into the list it yields;
    None: nothing (the encoder's output after its final norm is read, the
    default)."""
    if layer is None:
        yield None
        return
    layers = getattr(getattr(model, 'backbone', None), 'layers', None)
    n = len(layers) if layers is not None else 0
    if not -n <= layer < n:
        raise ValueError(f'layer {layer}: the encoder has {n} blocks. Fix: '
                         f'0..{n - 1} or -{n}..-1.')
    seen = []
    handle = layers[layer].register_forward_hook(
        lambda m, i, out: seen.append(out))
    try:
        yield seen
    finally:
        handle.remove()


def model_device(model) -> str:
    """Where a model runs: its parameters' device; a model without
    parameters (kNN on raw pixels) where its buffers are (the
    preprocessor's mean/std), else the CPU."""
    tensor = next(chain(model.parameters(), model.buffers()), None)
    return tensor.device.type if tensor is not None else 'cpu'


@torch.no_grad()
def extract_features(model,
                     dataloader,
                     progress: bool = True,
                     feature: Union[str, Sequence[str]] = 'avg',
                     amp: Optional[torch.dtype] = None,
                     layer: Optional[int] = None) -> Dict[str, torch.Tensor]:
    """Pooled features (fp32, CPU) and labels of a whole dataloader (all ranks)
    through ``model.extract_feat``: ``feature`` ``'avg'`` and/or ``'cls'``
    (:func:`pool_features`) from one pass, under autocast in ``amp`` (a dtype;
    None: fp32), from encoder block ``layer`` (default: the output), with a
    progress bar unless ``progress=False``. Returns ``feats`` (N, D) (a dict
    by name for several) and ``labels`` (N,)."""
    names = [feature] if isinstance(feature, str) else list(feature)
    was_training = model.training
    model.eval()
    backbone = getattr(model, 'backbone', None)
    extra = getattr(
        backbone, 'num_extra_tokens',
        1 if getattr(backbone, 'cls_token', None) is not None else 0)
    results = []
    bar = ProgressBar(len(dataloader.dataset)) if progress else None
    device = model_device(model)
    for batch in dataloader:
        data = model.data_preprocessor(batch, False)
        with torch.autocast(
                device, enabled=bool(amp), dtype=amp
                or torch.bfloat16), block_output(model, layer) as seen:
            out = model.extract_feat(data['inputs'])
            if seen:
                out = seen[-1]
            feats = torch.stack([pool_features(out, extra, f) for f in names],
                                1)  # (B, F, D)
        results += [(f, int(s.gt_label.reshape(-1)[0]))
                    for f, s in zip(feats.float().cpu(), data['data_samples'])]
        if bar is not None:
            bar.update(len(feats) * get_world_size())
    if bar is not None:
        bar.file.write('\n')
    model.train(was_training)
    if get_world_size() > 1:
        results = collect_results(results, len(dataloader.dataset))
    feats = torch.stack([f for f, _ in results])  # (N, F, D)
    labels = torch.tensor([label for _, label in results])
    by_name = {f: feats[:, i] for i, f in enumerate(names)}
    return dict(
        feats=by_name[feature] if isinstance(feature, str) else by_name,
        labels=labels)


#: what the kNN hook and knn_eval say when the bank is the evaluated set
SAME_SET = ('the memory bank is the evaluated set, so kNN measures nothing. '
            'Fix: held-out images in val_dataloader.')


def bank_and_evaluated(model, loaders: dict, log, **kwargs) -> tuple:
    """:func:`extract_features` (``kwargs``) of the labelled bank
    (``loaders['train']``) and of the evaluated images (``'val'``), each
    announced by ``log``; and the warnings: :data:`SAME_SET` where the two
    are the same images (the same labels and features, in order)."""
    out = []
    for split, what in (('train', 'bank'), ('val', 'evaluated')):
        log(f'kNN: the features of the {len(loaders[split].dataset)} {what} '
            'images')
        out.append(extract_features(model, loaders[split], **kwargs))
    (a, b), labels = [o['feats'] for o in out], [o['labels'] for o in out]
    a, b = (a, b) if isinstance(a, dict) else ({0: a}, {0: b})
    same = torch.equal(*labels) and all(torch.equal(a[f], b[f]) for f in a)
    return out[0], out[1], [SAME_SET] if same else []
