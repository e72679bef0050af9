from ..reference.swiglu import swiglu_backward, swiglu_forward

__all__ = ["swiglu_forward", "swiglu_backward"]
