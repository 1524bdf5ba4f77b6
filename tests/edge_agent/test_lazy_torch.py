"""An agent loads torch for its first task, not before: diagnosis needs ONNX Runtime only.

Run in a fresh interpreter, since this test process has torch loaded already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from edge_agent.batching import select_device
from edge_agent.devices import device_name, gpu_device_files
from tests.edge_agent.task_frames import fit_task, frame, initial_weights

ROOT = Path(__file__).resolve().parents[2]

FRESH_AGENT = """
import json, sys
from pathlib import Path
import numpy as np
import edge_agent.service
from edge_agent.devices import device_name
from edge_agent.task_runner import TaskRunner
from signal_pipeline.federation import ClientData, Dataset

seen = {"after_import": "torch" in sys.modules}
seen["auto_without_gpu_files"] = device_name("auto", dev=Path(sys.argv[2]))
rng = np.random.default_rng(1)
def windows(n):
    x = rng.standard_normal((n, 1, 256)).astype(np.float32)
    return Dataset(x, rng.integers(0, 4, n).astype(np.int64))
runner = TaskRunner("m07", ClientData("m07", 0, windows(24), windows(8), windows(10)), "cpu",
                    max_payload_bytes=8 << 20)
for name in ("for_another_agent", "fit"):
    task, body = runner.parse((Path(sys.argv[1]) / name).read_bytes())
    seen[name] = [runner.run(task, body).kind, "torch" in sys.modules]
print(json.dumps(seen))
"""


def test_torch_loads_with_the_first_task_the_agent_takes_on(tmp_path: Path) -> None:
    # Prepare: a task for another agent (refused from its header) and a fit task
    weights = {"cluster-0": initial_weights(0)}
    (tmp_path / "for_another_agent").write_bytes(frame(fit_task(agent_id="m08"), weights))
    (tmp_path / "fit").write_bytes(frame(fit_task(), weights))
    no_gpu = tmp_path / "dev"
    no_gpu.mkdir()

    # Execute
    result = subprocess.run(
        [sys.executable, "-c", FRESH_AGENT, str(tmp_path), str(no_gpu)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    # Assert
    assert json.loads(result.stdout) == {
        "after_import": False,
        "auto_without_gpu_files": "cpu",
        "for_another_agent": ["task_failed", False],
        "fit": ["fit_update", True],
    }


def test_a_gpu_device_file_or_loaded_torch_leaves_the_answer_to_torch(tmp_path: Path) -> None:
    # Prepare: a /dev with an NVIDIA device file, one without any (torch is loaded here)
    with_gpu, without = tmp_path / "gpu", tmp_path / "none"
    with_gpu.mkdir()
    without.mkdir()
    (with_gpu / "nvidia0").touch()
    (with_gpu / "null").touch()

    # Execute / Assert
    assert gpu_device_files(with_gpu) == [with_gpu / "nvidia0"]
    assert gpu_device_files(without) == []
    expected = str(select_device("auto"))
    assert device_name("auto", dev=with_gpu) == expected
    assert device_name("auto", dev=without) == expected
    assert device_name("cpu", dev=with_gpu) == "cpu"
