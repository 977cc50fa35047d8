"""app.cpu_threads: torch's thread count capped at a container's CPU quota (fake cgroup trees)."""
import pytest
import torch

from app.cpu_threads import cpu_quota, set_threads


def tree(tmp_path, files: dict[str, str], own: str = "/"):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"0::{own}\n")
    return tmp_path, proc


@pytest.mark.parametrize("files, own, expected", [
    ({"cpu.max": "200000 100000\n"}, "/", 2),               # cgroup v2, Docker --cpus 2
    ({"cpu.max": "250000 100000\n"}, "/", 2),               # 2.5 CPUs: rounded down
    ({"cpu.max": "50000 100000\n"}, "/", 1),                # half a CPU: still one thread
    ({"cpu.max": "max 100000\n"}, "/", None),               # no quota
    ({"cpu.max": "max 100000\n", "app/cpu.max": "400000 100000\n"}, "/app", 4),  # the process's own cgroup
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, "/", 3),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, "/", None),
    ({"cpu.max": "garbage\n"}, "/", None),                  # unreadable: as if none
    ({}, "/", None),                                        # no cgroup files at all
])
def test_the_quota_is_read_from_either_cgroup_version(tmp_path, files, own, expected):
    root, proc = tree(tmp_path, files, own)
    assert cpu_quota(root, proc) == expected


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_a_request_wins_and_a_quota_only_lowers_torchs_count(restore_threads):
    assert set_threads(1) == 1 == torch.get_num_threads()
    torch.set_num_threads(2)
    assert set_threads(None, quota=1) == 1                   # quota below torch's count: capped
    torch.set_num_threads(1)
    assert set_threads(None, quota=4) == 1                   # a quota never raises the count
    torch.set_num_threads(2)
    assert set_threads(2, quota=1) == 2                      # --threads / SPECLAB_THREADS are obeyed
