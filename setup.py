"""optimum-uag: Universal Assisted Generation (speculative decoding with any draft) for Gaudi and CPU/CUDA."""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    # torch 2.13.0: a CPU wheel lies on local disk; any other release pulls a multi-GB CUDA build.
    "torch==2.13.0",
    "transformers>=4.55,<4.56",
    "optimum-habana==1.21.2",
    # Without this cap pip backtracks through huggingface_hub releases for ~10 minutes.
    "huggingface_hub<1.0",
    "accelerate",
    "safetensors",
    "tokenizers",
    "tqdm",
    "numpy",
    # --dataset_name (as optimum-habana's run_generation.py): Hub datasets, local JSON/CSV/text, saved datasets
    "datasets<5.1",  # 5.1+ needs huggingface_hub>=1.0, which transformers 4.55 refuses
    # --gguf_file (transformers' GGUF loading)
    "gguf",
]

EXTRAS = {
    "deepspeed": ["deepspeed==0.19.8"],
    "quant": ["neural-compressor-pt==3.10"],
    "plot": ["matplotlib"],
}
# The tests exercise every path: multi-card (DeepSpeed), quantized models (INC), tuning plots (matplotlib).
EXTRAS["test"] = ["pytest", "scipy", *EXTRAS["deepspeed"], *EXTRAS["quant"], *EXTRAS["plot"]]
EXTRAS["all"] = sorted({dep for deps in EXTRAS.values() for dep in deps})

setup(
    name="optimum-uag",
    version="0.1.0",
    description="Universal Assisted Generation: speculative decoding with any draft model, on Gaudi and CPU/CUDA",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["optimum_uag", "optimum_uag.*"]),
    package_data={"optimum_uag": ["models/*.json", "models/*/*.json", "models/*/*.safetensors", "models/*/*.model", "models/*/*.txt", "models/*/*.jinja"]},
    include_package_data=True,
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["optimum-uag=optimum_uag.cli:main"]},
    license="Apache-2.0",
)
