"""A reference DeepSeek MoE layer and DSA attention layer built on the four libraries"""

__version__ = "0.1.0"
