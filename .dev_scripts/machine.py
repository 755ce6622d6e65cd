"""This machine, as every timing in docs/speed.md names it.

    python .dev_scripts/machine.py

CPU class (AVX2 / AVX512-BF16 / AMX / CUDA), torch threads and the fp32
GFLOP/s of a 2048-square matmul (best of 3 after a warm-up): machines of
one CPU class differ ~2x, so a timing is comparable only beside this.
"""
import platform
import time

import torch


def cpu_class() -> str:
    """What torch reports of the CPU's vector units: ``'AMX'``,
    ``'AVX512-BF16'``, ``'AVX512'``, ``'AVX2'`` or torch's capability
    string (e.g. ``'DEFAULT'`` on an Arm CPU)."""
    for name, cls in (('_is_amx_tile_supported', 'AMX'),
                      ('_is_avx512_bf16_supported', 'AVX512-BF16')):
        try:
            if getattr(torch.cpu, name)():
                return cls
        except Exception:  # a private probe that changed or is missing
            pass
    return torch.backends.cpu.get_cpu_capability() or '?'


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def record() -> dict:
    """What every wall time of a study is recorded beside."""
    return dict(
        cpu_class=cpu_class(),
        threads=torch.get_num_threads(),
        torch=torch.__version__)


def gemm_gflops(n: int = 2048, repeats: int = 3) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    seconds = float('inf')
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        seconds = min(seconds, time.perf_counter() - start)
    return round(2 * n**3 / seconds / 1e9, 1)


if __name__ == '__main__':
    import argparse
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f'cpu_class {cpu_class()}, threads {torch.get_num_threads()}, '
          f'fp32_gemm_gflops {gemm_gflops()}, torch {torch.__version__}')
