"""A ~50M-parameter Llama 3 flavor for bench/titan.py, registered through
TorchTitan's documented `--experimental.custom-import bench.titan_flavors`
(run from a directory where `bench` is importable, or with it on PYTHONPATH):
the debug model's vocabulary (2048) with dim 576, 12 layers, 9 heads of 64."""
from torchtitan.models.llama3 import llama3_args
from torchtitan.models.llama3.model.args import TransformerModelArgs

llama3_args["bench50m"] = TransformerModelArgs(dim=576, n_layers=12, n_heads=9, vocab_size=2048, rope_theta=500000)
