"""Checkpoints at http(s) addresses: downloaded once, revalidated.

The copy is named by the whole address (two runs' ``epoch_3.pth`` are two
copies) and kept beside what the server said of it (ETag, Last-Modified,
size). Each use asks the server again: a changed file is downloaded again;
without the network the copy is used, with a log line.
"""
import hashlib
import json
import os
import os.path as osp
from typing import Optional
from urllib.parse import urlparse

import torch

from hpm_mm.errors import HPMError

VALIDATORS = ('etag', 'last-modified', 'content-length')


def _validators(url: str) -> Optional[dict]:
    """What the server says of ``url`` now (a HEAD request), or None when
    it cannot be asked (no network, a server without HEAD, a file URL)."""
    import urllib.request
    if not url.startswith(('http://', 'https://')):
        return None
    try:
        with urllib.request.urlopen(
                urllib.request.Request(url, method='HEAD'), timeout=10) as r:
            return {k: r.headers[k] for k in VALIDATORS if r.headers.get(k)}
    except Exception:
        return None


def download_checkpoint(url: str, model_dir: Optional[str] = None) -> str:
    """The local copy of the checkpoint at ``url`` (in ``model_dir``, default
    torch hub's ``checkpoints/``), local rank 0 first; nothing is unpickled.
    A failed download or one that is no checkpoint is one HPMError line."""
    from mmengine.dist import get_dist_info
    from mmengine.logging import print_log

    from .safe_load import checkpoint_problem
    model_dir = model_dir or osp.join(torch.hub.get_dir(), 'checkpoints')
    name = osp.basename(urlparse(url).path) or 'checkpoint.pth'
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = osp.join(model_dir, f'{key}-{name}')
    record = f'{path}.json'

    def fetch():
        now = _validators(url)
        if osp.isfile(path) and checkpoint_problem(path) is None:
            try:
                with open(record) as f:
                    then = json.load(f)
            except (OSError, ValueError):
                then = {}
            if now is None:
                if url.startswith(('http://', 'https://')):
                    print_log(
                        f'{url}: the server cannot be asked whether '
                        f'it changed; using the copy {path}',
                        logger='current')
                return
            if all(then.get(k) == v for k, v in now.items()):
                return
            print_log(
                f'{url} changed since {path} was downloaded: '
                'downloading it again',
                logger='current')
        os.makedirs(model_dir, exist_ok=True)
        part = f'{path}.{os.getpid()}.part'
        try:
            torch.hub.download_url_to_file(url, part, progress=False)
        except Exception as e:
            if osp.exists(part):
                os.remove(part)
            raise HPMError(
                f'cannot download the checkpoint {url} ({type(e).__name__}: '
                f'{e}). Fix: check the address and the network, or download '
                'it yourself and pass its path.') from None
        problem = checkpoint_problem(part)
        if problem is not None:
            os.remove(part)
            raise HPMError(
                f'the download of {url} is not a checkpoint ({problem}); the '
                f'file ({path}) was removed. Fix: check the address (an '
                'error page or a moved file gives this), or download it '
                'yourself and pass its path.')
        os.replace(part, path)
        with open(record, 'w') as f:
            json.dump(now or {}, f)

    rank, world_size = get_dist_info()
    if rank == 0:
        fetch()
    if world_size > 1:
        torch.distributed.barrier()
        if rank != 0:
            fetch()
    return path
