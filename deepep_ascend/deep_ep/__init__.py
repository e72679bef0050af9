"""DeepEP and DeepEP-Ascend: expert-parallel dispatch and combine"""

__version__ = "0.1.0"
