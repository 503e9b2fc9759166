"""Write one Triton model repository entry (I/O module).

Layout, under `repository/`::

    <model_name>/config.pbtxt      from tailpilot.manifests.triton_model_config (protobuf text format)
    <model_name>/1/model.onnx      onnxruntime backend (and the python variant's model)
    <model_name>/1/model.plan      tensorrt backend
    <model_name>/1/model.py        python variant: triton_python_model.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tailpilot.manifests.triton_model_config import BACKEND_FILES, ModelConfig, to_pbtxt

#: Version directory; engines are immutable, so there is only ever version 1.
MODEL_VERSION = "1"

_PYTHON_MODEL = Path(__file__).with_name("triton_python_model.py")


def write_repository_entry(*, repository: Path, config: ModelConfig, engine_file: Path) -> Path:
    """Create `repository/<name>/` with config.pbtxt and the engine file; return the model directory.

    Args:
        repository: Model repository root.
        config: The model's configuration (its backend decides the file names).
        engine_file: Optimized ONNX model or TensorRT plan; moved into the version directory.
    """
    model_dir = repository / str(config.name)
    version_dir = model_dir / MODEL_VERSION
    version_dir.mkdir(parents=True, exist_ok=True)
    backend = str(config.backend)
    if backend == "python":
        shutil.move(engine_file, version_dir / "model.onnx")
        shutil.copyfile(_PYTHON_MODEL, version_dir / BACKEND_FILES["python"][1])
    else:
        shutil.move(engine_file, version_dir / BACKEND_FILES[backend][1])
    (model_dir / "config.pbtxt").write_text(to_pbtxt(config))
    return model_dir
