"""Engine backends: how each `BuildRequest.backend` is checked, built and measured.

`base.EngineBackend` is what the build needs from a backend; `onnxruntime.py` and `tensorrt.py`
are the two there are; `registry.py` maps a request's backend name to one of them.
"""
