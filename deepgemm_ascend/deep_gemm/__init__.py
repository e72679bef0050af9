"""DeepGEMM and DeepGEMM-Ascend on CPU and Ascend: FP8/FP4/BF16 GEMMs, grouped GEMMs, MQA logits, Mega MoE"""

__version__ = "0.1.0"
