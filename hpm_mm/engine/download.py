"""Checkpoints at http(s) addresses: downloaded, reused only on proof,
loaded through the one loader.

The copy is named by the whole address (two runs' ``epoch_3.pth`` are two
copies) and kept beside the strong ETag the server gave for it. Each use
asks the server again (a HEAD request): the copy is reused only when the
answer carries a strong ETag equal to the recorded one; anything else (a
weak ETag, none, an error status) downloads it again, with a line saying
why. No Last-Modified or size heuristics: a re-published file (``cp -p``,
``rsync -a``) can keep both. A server that cannot be reached: the copy is
used, with a warning naming its age. A download that is no checkpoint
never replaces a good copy. docs/reliability.md.
"""
import hashlib
import json
import logging
import os
import os.path as osp
import time
import urllib.error
import urllib.request
from contextlib import suppress
from typing import Optional
from urllib.parse import urlparse

import torch
from mmengine.logging import print_log

from hpm_mm.errors import HPMError
from .safe_load import checkpoint_problem, load_file, load_from_local


class DownloadError(HPMError, OSError):
    """A checkpoint that could not be downloaded (an OSError, as mmengine's
    http loader raised)."""


class _KeepHead(urllib.request.HTTPRedirectHandler):
    """A HEAD redirected stays a HEAD (urllib's turns it into a GET, which
    starts sending the whole file)."""

    def redirect_request(self, req, *args):
        new = super().redirect_request(req, *args)
        if new is not None:
            new.method = req.get_method()
        return new


def download_checkpoint(url: str, model_dir: Optional[str] = None) -> str:
    """The local copy of the checkpoint at ``url`` (in ``model_dir``, default
    torch hub's ``checkpoints/``), fetched by each node's first process
    (``LOCAL_RANK`` 0); nothing is unpickled. A failed download or one that
    is no checkpoint is one line (:class:`DownloadError`); a good copy is
    never replaced by it."""
    from mmengine.dist import get_world_size
    model_dir = model_dir or osp.join(torch.hub.get_dir(), 'checkpoints')
    name = osp.basename(urlparse(url).path) or 'checkpoint.pth'
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = osp.join(model_dir, f'{key}-{name}')
    record = f'{path}.json'

    def fetch():
        good = checkpoint_problem(path) is None
        try:
            with urllib.request.build_opener(_KeepHead).open(
                    urllib.request.Request(url, method='HEAD'),
                    timeout=10) as r:
                etag = r.headers.get('etag')
        except urllib.error.HTTPError:  # answered (405, ...), but no proof
            etag = None
        except OSError as e:  # unreachable (URLError, a timeout, ...)
            if good:
                age = (time.time() - os.stat(path).st_mtime) / 86400
                return print_log(
                    f'{url}: the server cannot be reached ({e}); using the '
                    f'copy {path}, downloaded {age:.1f} days ago, unchecked',
                    'current', logging.WARNING)
            etag = None
        strong = etag if etag and not etag.startswith('W/') else None
        if good:
            with suppress(OSError, ValueError, AttributeError), \
                    open(record) as f:  # (no record, or a garbled one)
                if strong and json.load(f).get('etag') == strong:
                    return
            print_log(
                f'{url}: its ETag ({etag}) is no strong one equal to the '
                'recorded one, so the copy is not proven current; downloading'
                f' it again over {path}', 'current')
        os.makedirs(model_dir, exist_ok=True)
        part = f'{path}.{os.getpid()}.part'
        kept = f'; the earlier copy {path} stays untouched' if good else ''
        problem = 'interrupted'
        try:
            torch.hub.download_url_to_file(url, part, progress=False)
            problem = checkpoint_problem(part)
            problem = problem and f'not a checkpoint: {problem}'
        except Exception as e:
            problem = f'{type(e).__name__}: {e}'
        finally:
            if problem is not None and osp.exists(part):
                os.remove(part)
        if problem is not None:
            raise DownloadError(
                f'cannot download the checkpoint {url} ({problem}){kept}. '
                'Fix: check the address, or download it and pass its path.')
        os.replace(part, path)  # then the record: never a new ETag on an
        with open(record, 'w') as f:  # old copy
            json.dump(dict(etag=strong), f)

    if os.environ.get('LOCAL_RANK', '0') == '0':
        fetch()
    if get_world_size() > 1:
        torch.distributed.barrier()
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
