"""benchmarks/gpu_session.sh, the prepared GPU call, runs every step on a CPU (DEVICE=cpu) with
gradio and plotly unimportable, as on the GPU machine, so it cannot rot between the sessions
that are lent a GPU."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_session_script_runs_its_steps_without_gradio_or_plotly(tmp_path):
    shim = tmp_path / "shim"
    for name in ("gradio", "plotly"):
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text('raise ImportError("not on the GPU machine")\n')
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "OUT": str(out), "PYTHONPATH": str(shim),
           "LIMIT_X": "5", "KNEE_QS": "1,2",  # a CPU under load is slower, not wrong; c needs q = 1 only
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # python3: this one
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = (out / "status.txt").read_text().split()
    assert steps == ["exact", "rc=0", "exact_fast", "rc=0", "knee_smollm2_shape", "rc=0",
                     "knee_smollm2_draft", "rc=0"]
    assert done.stdout.count("greedy outputs identical: yes") >= 2
    c = (out / "c.txt").read_text().splitlines()
    assert [line.split(" = ")[0] for line in c] == ["c (eager)", "c (fast)"]
    assert all(0 < float(line.rsplit(" = ", 1)[1]) < 10 for line in c)
