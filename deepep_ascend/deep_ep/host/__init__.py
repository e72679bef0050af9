"""The host engine (``engine.py``) and the C++ host kernels it launches (``*.cpp``, compiled by deepjit)."""
