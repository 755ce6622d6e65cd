"""Where bf16 autocast changes HPM's step, part by part, each part fed the
same fp32 inputs from a trained checkpoint (forward only).

    python .dev_scripts/precision_numerics.py CHECKPOINT [--config C] \
        [--images 1024] [--out docs/results/precision/numerics.json]

Reported: the teacher's scores (Spearman with fp32's per image, the share
of the K hardest picked alike, ties), and the student on fp32's mask
(``loss_rec``, ``loss_pred``, ``rank_acc``) in fp32 and in bf16."""
import argparse
import json
import os
import os.path as osp
import statistics
import time

import torch

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = 'configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py'


def spearman(a, b):
    """Per-row Spearman correlation of (B, N) scores."""
    ra = a.argsort(1).argsort(1).float()
    rb = b.argsort(1).argsort(1).float()
    ra, rb = ra - ra.mean(1, keepdim=True), rb - rb.mean(1, keepdim=True)
    return (ra * rb).sum(1) / (ra.norm(dim=1) * rb.norm(dim=1))


def tie_share(s):
    """Share of patches whose score equals another of the same image."""
    v = s.sort(1).values
    same = v[:, 1:] == v[:, :-1]
    tied = torch.zeros_like(v, dtype=torch.bool)
    tied[:, 1:] |= same
    tied[:, :-1] |= same
    return tied.float().mean().item()


def autocast(dtype):
    return torch.autocast(
        'cpu', enabled=dtype is not None, dtype=dtype or torch.bfloat16)


@torch.no_grad()
def measure(model, batches, k):
    out = {
        name: []
        for name in ('spearman', 'topk_same', 'ties_fp32', 'ties_bf16')
    }
    student = {
        p: dict(loss_rec=[], loss_pred=[], rank_acc=[])
        for p in ('fp32', 'bf16')
    }
    seconds = dict(fp32=0., bf16=0.)
    for inputs in batches:
        scores = {}
        for name, dtype in (('fp32', None), ('bf16', torch.bfloat16)):
            start = time.perf_counter()
            with autocast(dtype):
                s = model.teacher(inputs).scores
            seconds[name] += time.perf_counter() - start
            scores[name] = s
        # the scores as the pass returns them (fp32 tensors of bf16 values)
        out['spearman'] += spearman(scores['fp32'], scores['bf16']).tolist()
        top32 = scores['fp32'].topk(k, 1).indices
        top16 = scores['bf16'].topk(k, 1).indices
        same = (top32.unsqueeze(2) == top16.unsqueeze(1)).any(2).float()
        out['topk_same'] += same.mean(1).tolist()
        out['ties_fp32'].append(tie_share(scores['fp32']))
        out['ties_bf16'].append(tie_share(scores['bf16']))
        torch.manual_seed(0)
        mask = model.choose_mask(scores['fp32'], inputs)
        N = mask.shape[1]
        visible = N - model.mask_generator.num_masked(N)
        for name, dtype in (('fp32', None), ('bf16', torch.bfloat16)):
            start = time.perf_counter()
            with autocast(dtype):
                latent, ids = model.backbone(inputs, mask, visible)
                pred, pred_scores = model.neck(latent, ids)
                losses = model.head.loss(pred, pred_scores, inputs, mask)
            seconds[name] += time.perf_counter() - start
            for key in student[name]:
                student[name][key].append(float(losses[key]))
    mean = {k: statistics.mean(v) for k, v in out.items()}
    mean['spearman_min'] = min(out['spearman'])
    return dict(
        teacher=mean,
        student={
            p: {
                k: statistics.mean(v)
                for k, v in d.items()
            }
            for p, d in student.items()
        },
        seconds={
            k: round(v, 2)
            for k, v in seconds.items()
        })


def main(argv=None):
    from machine import record
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from hpm_mm.apis import load_config, load_model
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('checkpoint')
    parser.add_argument('--config', default=CONFIG)
    parser.add_argument('--images', type=int, default=1024)
    parser.add_argument(
        '--out',
        default=osp.join(ROOT, 'docs', 'results', 'precision',
                         'numerics.json'))
    args = parser.parse_args(argv)
    cfg = load_config(osp.join(ROOT, args.config))
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model = load_model(cfg, args.checkpoint, whole=True)
    model.eval()
    model.set_progress(1.0, epoch=1, max_epochs=1)
    hook = next(h for h in cfg.custom_hooks if h['type'] == 'KNNEvalHook')
    loader = dict(
        hook['train_dataloader'], num_workers=0, persistent_workers=False)
    loader['sampler'] = dict(type='DefaultSampler', shuffle=False)
    batches = []
    for batch in Runner.build_dataloader(loader, seed=0):
        batches.append(model.data_preprocessor(batch, False)['inputs'])
        if sum(len(b) for b in batches) >= args.images:
            break
    N = model.backbone.num_patches
    k = model.mask_generator.num_hard(N, 1.0)
    r = measure(model, batches, k)
    r.update(
        checkpoint=osp.relpath(osp.abspath(args.checkpoint), ROOT),
        config=args.config,
        images=sum(len(b) for b in batches),
        num_patches=N,
        k_hard=k,
        machine=record(),
        command='python .dev_scripts/precision_numerics.py ' +
        ' '.join(argv if argv is not None else os.sys.argv[1:]),
        date=time.strftime('%Y-%m-%d %H:%M'))
    os.makedirs(osp.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(r, f, indent=1)
    print(json.dumps(r, indent=1))


if __name__ == '__main__':
    main()
