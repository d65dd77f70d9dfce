"""optimum-uag: Universal Assisted Generation (speculative decoding with any draft) for Gaudi and CPU/CUDA."""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    # A range, never a pin: on a Gaudi image torch is Habana's own build and must stay as it is. (On a CPU machine
    # without torch, pip would take the newest CUDA build: the README's commands pass constraints/cpu.txt.)
    "torch>=2.4",
    # The CPU/CUDA path runs on transformers 4.55 (what optimum-habana 1.21.2 pins) through the newest 5.x.
    "transformers>=4.55,<6",
    "huggingface_hub",
    "accelerate",
    "safetensors",
    "tokenizers",
    "tqdm",
    "numpy",
    # --dataset_name (as optimum-habana's run_generation.py): Hub datasets, local JSON/CSV/text, saved datasets
    "datasets",
    # --gguf_file (transformers' GGUF loading)
    "gguf",
]

# optimum-habana caps transformers at 4.55 (and so huggingface_hub below 1.0): only Gaudi users take it on.
GAUDI = [
    "optimum-habana==1.21.2",
    "transformers>=4.55,<4.56",
    # Without these caps pip backtracks through huggingface_hub / datasets releases for ~10 minutes.
    "huggingface_hub<1.0",
    "datasets<5.1",  # 5.1+ needs huggingface_hub>=1.0, which transformers 4.55 refuses
]
EXTRAS = {
    "gaudi": GAUDI,
    "deepspeed": ["deepspeed==0.19.8"],
    "quant": ["neural-compressor-pt==3.10"],
    "plot": ["matplotlib"],
}
# The Gaudi-stack suite exercises every path: optimum-habana's models under the HPU emulator, multi-card
# (DeepSpeed), quantized models (INC), tuning plots (matplotlib).
EXTRAS["test"] = ["pytest", "scipy", *GAUDI, *EXTRAS["deepspeed"], *EXTRAS["quant"], *EXTRAS["plot"]]
# The CPU/CUDA path on the newest transformers (CI's second venv): no optimum-habana, no DeepSpeed/INC.
EXTRAS["test-cpu"] = ["pytest", "scipy", "matplotlib"]
EXTRAS["all"] = sorted({dep for key, deps in EXTRAS.items() if key != "test-cpu" for dep in deps})

setup(
    name="optimum-uag",
    version="0.1.0",
    description="Universal Assisted Generation: speculative decoding with any draft model, on Gaudi and CPU/CUDA",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["optimum_uag", "optimum_uag.*"]),
    package_data={"optimum_uag": ["models/*.json", "models/*/*.json", "models/*/*.safetensors", "models/*/*.model", "models/*/*.txt", "models/*/*.jinja", "runners/kernels/*.c"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["optimum-uag=optimum_uag.cli:main"]},
    license="Apache-2.0",
)
