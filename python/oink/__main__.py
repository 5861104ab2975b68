"""`python -m oink`: what this build of oink holds and what it can run on here."""

import torch

import oink


def main() -> None:
    targets = oink.cuda_targets()
    print(f"oink {oink.__version__} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    print(f"CUDA kernels: {', '.join(targets) if targets else 'none (a CPU-only build)'}")
    if not torch.cuda.is_available():
        print("GPU: none visible to torch; the ops run their CPU kernels")
        return
    for index in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        runs = "served" if oink.cuda_available(index) else "NOT served by this build"
        print(f"GPU {index}: {name} (sm_{major}{minor}): {runs}")


if __name__ == "__main__":
    main()
