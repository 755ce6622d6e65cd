"""Checkpoints at http(s) addresses: downloaded once, reused only while the
server proves them unchanged, loaded through the one loader.

The copy is named by the whole address (two runs' ``epoch_3.pth`` are two
copies) and kept beside what the server said of it (ETag, Last-Modified,
size) and when it was downloaded. Each use asks the server again (a HEAD
request); the copy is reused only on a strong ETag equal to the one
recorded, or, without one, a Last-Modified strictly older than the download
and the same size; else the file is downloaded again, with a line saying
why. Without the network the copy is used, with a warning. A download that
is no checkpoint never replaces a good copy. docs/reliability.md.
"""
import email.utils
import hashlib
import json
import logging
import os
import os.path as osp
from typing import Optional
from urllib.parse import urlparse

import torch
from mmengine.logging import print_log

from hpm_mm.errors import HPMError
from .safe_load import checkpoint_problem, load_file, load_from_local


class DownloadError(HPMError, OSError):
    """A checkpoint that could not be downloaded (an OSError, as mmengine's
    http loader raised)."""


def _validators(url: str) -> Optional[dict]:
    """What the server says of ``url`` now (a HEAD request: ``etag``,
    ``last-modified``, ``content-length``, ``date``), or None when it cannot
    be asked (no network, a server without HEAD, a file URL)."""
    import urllib.request
    if not url.startswith(('http://', 'https://')):
        return None
    keys = ('etag', 'last-modified', 'content-length', 'date')
    try:
        with urllib.request.urlopen(
                urllib.request.Request(url, method='HEAD'), timeout=10) as r:
            return {k: r.headers[k] for k in keys if r.headers.get(k)}
    except Exception:
        return None


def _seconds(http_date: Optional[str]) -> Optional[float]:
    try:
        return email.utils.parsedate_to_datetime(http_date).timestamp()
    except (TypeError, ValueError):
        return None


def changed(then: dict, now: dict) -> Optional[str]:
    """Why the server does not prove the copy recorded as ``then`` current
    (``now``: what it says now), or None when it does: a strong ETag equal
    to the recorded one; without one, a Last-Modified strictly older than
    the download (its 1-s resolution: a file re-published in that second
    has the same) and the same size."""
    etag = now.get('etag')
    if etag and not etag.startswith('W/'):
        return None if etag == then.get('etag') else 'its ETag changed'
    modified = _seconds(now.get('last-modified'))
    fetched = _seconds(then.get('downloaded'))
    if modified is None or fetched is None:
        return ('the server sends neither a strong ETag nor a Last-Modified, '
                'so it cannot prove the copy unchanged')
    if modified >= fetched:
        return 'its Last-Modified is not older than the copy'
    if now.get('content-length') != then.get('content-length'):
        return 'its size changed'
    return None


def download_checkpoint(url: str, model_dir: Optional[str] = None) -> str:
    """The local copy of the checkpoint at ``url`` (in ``model_dir``, default
    torch hub's ``checkpoints/``), local rank 0 first; nothing is unpickled.
    A failed download or one that is no checkpoint is one line
    (:class:`DownloadError`); a good copy is never replaced by it."""
    from mmengine.dist import get_dist_info
    model_dir = model_dir or osp.join(torch.hub.get_dir(), 'checkpoints')
    name = osp.basename(urlparse(url).path) or 'checkpoint.pth'
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = osp.join(model_dir, f'{key}-{name}')
    record = f'{path}.json'

    def fetch():
        now = _validators(url)
        good = osp.isfile(path) and checkpoint_problem(path) is None
        if good:
            try:
                with open(record) as f:
                    then = json.load(f)
            except (OSError, ValueError):
                then = {}
            if now is None and url.startswith(('http://', 'https://')):
                print_log(
                    f'{url}: the server cannot be asked whether it changed; '
                    f"using the copy {path} (downloaded "
                    f"{then.get('downloaded', 'earlier')})", 'current',
                    logging.WARNING)
            why = changed(then, now) if now is not None else None
            if why is None:
                return
            print_log(f'{url}: {why}; downloading it again over {path}',
                      'current')
        os.makedirs(model_dir, exist_ok=True)
        part = f'{path}.{os.getpid()}.part'
        when = (now or {}).get('date') or email.utils.formatdate(usegmt=True)
        kept = f'; the earlier copy {path} stays untouched' if good else ''
        try:
            torch.hub.download_url_to_file(url, part, progress=False)
            problem = checkpoint_problem(part)
        except Exception as e:
            problem = f'{type(e).__name__}: {e}'
            raise DownloadError(
                f'cannot download the checkpoint {url} ({problem}){kept}. '
                'Fix: check the address and the network, or download it and '
                'pass its path.') from None
        finally:
            if osp.exists(part) and problem is not None:
                os.remove(part)
        if problem is not None:
            raise DownloadError(
                f'the download of {url} is not a checkpoint ({problem}): '
                'nothing of it was kept' + kept + '. Fix: check the address '
                '(an error page?), or download it and pass its path.')
        os.replace(part, path)
        with open(record, 'w') as f:
            json.dump(dict(now or {}, downloaded=when), f)

    rank, world_size = get_dist_info()
    if rank == 0:
        fetch()
    if world_size > 1:
        torch.distributed.barrier()
        if rank != 0:
            fetch()
    return path


def load_from_http(filename: str, map_location=None, model_dir=None, **_):
    """mmengine's http(s) loader (``load_from=URL``, ``init_cfg``
    Pretrained, ``torchvision://``, ``mmcls://``; mmengine's passes
    ``weights_only=False``): the copy of :func:`download_checkpoint`
    through the one loader."""
    return load_file(download_checkpoint(filename, model_dir), map_location)


def load_from_openmmlab(filename: str, map_location=None):
    """mmengine's ``open-mmlab://`` loader (a model-zoo name: a URL or a
    file under mmengine's home), through the one loader."""
    from mmengine.runner.checkpoint import (_get_mmengine_home,
                                            get_deprecated_model_names,
                                            get_external_models)
    name = filename.split('://', 1)[1]
    name = get_deprecated_model_names().get(name, name)
    url = get_external_models()[name]
    if url.startswith(('http://', 'https://')):
        return load_from_http(url, map_location)
    return load_from_local(osp.join(_get_mmengine_home(), url), map_location)
