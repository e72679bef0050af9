"""FlashMLA: sparse MLA attention over FP8/FP4 paged KV caches"""

__version__ = "0.1.0"
