"""How many CPU threads torch runs on: what the user asked for, else torch's own count capped
at the container's CPU quota.

torch counts the cores it can see. In a container limited by a CPU *quota* (Docker `--cpus`, a
Kubernetes CPU limit, a hosted Space's vCPUs: cgroup bandwidth control) every core of the host
stays visible, to `os.cpu_count()` and to the affinity mask alike, so torch starts more threads
than the quota can run; the kernel then throttles the whole group each period and the threads,
which meet at a barrier after every operation, wait on the throttled ones. Projects that hit it
report several-fold slowdowns (e.g. ollama/ollama#17916, vllm-project/vllm#34462). The quota is
read from cgroup v2 `cpu.max` ("200000 100000": 2 CPUs; "max": none) or cgroup v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none), rounded down (one thread more than the
quota is enough to be throttled), at least 1.
"""
from __future__ import annotations

import math
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_v2_dir(root: Path, proc_cgroup: Path) -> Path:
    """This process's cgroup v2 directory ("0::/some/path" in /proc/self/cgroup), or the root."""
    for line in (_read(proc_cgroup) or "").splitlines():
        if line.startswith("0::"):
            own = root / line[3:].lstrip("/")
            if (own / "cpu.max").is_file():
                return own
    return root


def cpu_quota(root: Path = CGROUP, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """Whole CPUs this process may use under a cgroup quota, or None where no quota is set (or
    none can be read: bare metal, macOS, Windows)."""
    v2 = _read(_own_v2_dir(root, proc_cgroup) / "cpu.max")
    try:
        if v2:
            quota, period = v2.split()[:2]
            return None if quota == "max" else max(1, math.floor(int(quota) / int(period)))
        quota, period = _read(root / "cpu" / "cpu.cfs_quota_us"), _read(root / "cpu" / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0:
            return max(1, math.floor(int(quota) / int(period)))
    except ValueError:  # a malformed file: behave as if there were none
        return None
    return None


def set_threads(requested: int | None = None, quota: int | None = None) -> int:
    """Set torch's CPU threads and return the count: `requested` when given (--threads,
    SPECLAB_THREADS), else torch's own count, lowered to the CPU quota (cpu_quota(), or the
    `quota` given) where one is set below it."""
    import torch
    if requested:
        torch.set_num_threads(max(1, requested))
    else:
        quota = cpu_quota() if quota is None else quota
        if quota and quota < torch.get_num_threads():
            torch.set_num_threads(quota)
    return torch.get_num_threads()
