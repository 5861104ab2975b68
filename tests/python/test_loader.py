"""The loader's errors: what a user sees when oink's native extension cannot load."""

import torch

import oink


def test_cuda_build_on_cpu_only_torch_names_the_build_to_install(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    error = OSError("libtorch_cuda.so: cannot open shared object file: No such file or directory")
    message = oink._load_failure(error)
    assert "needs a CUDA build of torch" in message
    assert "+cpu" in message and "CPU-only" in message
    assert "libtorch_cuda.so: cannot open" in message  # the loader's own words are kept


def test_other_load_failures_say_which_torch_oink_needs(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    message = oink._load_failure(OSError("_C.so: undefined symbol: aoti_torch_foo"))
    assert "undefined symbol: aoti_torch_foo" in message
    assert "torch >= 2.10" in message and torch.__version__ in message
