"""``engram_gate``: the autograd function over engram_gate_fwd / engram_gate_bwd."""
import torch

from ...engram import engram_gate_bwd, engram_gate_fwd, fused_weight, grad_w_reduce

__all__ = ["engram_gate", "EngramGateFn"]


class EngramGateFn(torch.autograd.Function):
    """``out = x + sigmoid(signed_sqrt(<RMSNorm(x) wh, RMSNorm(k) we> / sqrt(H))) v`` over any
    leading dims (x, k ``[*, hc, H]``, v ``[*, H]``). A weight carrying ``.main_grad`` (FP32)
    accumulates its gradient there and gets None."""

    @staticmethod
    def forward(ctx, hidden_states, k, v, weight_hidden, weight_embed, clamp_value, eps):
        shape = hidden_states.shape
        hc, h = shape[-2:]
        x = hidden_states.reshape(-1, hc, h)
        kk = k.reshape(-1, hc, h)
        vv = v.reshape(-1, h)
        wf = fused_weight(weight_hidden, weight_embed)
        out, dot, gate, rx, rk = engram_gate_fwd(x, kk, vv, wf, eps, clamp_value)
        ctx.save_for_backward(x, kk, vv, weight_hidden, weight_embed, wf, dot, gate, rx, rk)
        ctx.clamp_value = clamp_value
        ctx.shape = shape
        return out.view(shape)

    @staticmethod
    def backward(ctx, grad_output):
        x, kk, vv, wh, we, wf, dot, gate, rx, rk = ctx.saved_tensors
        shape = ctx.shape
        hc, h = shape[-2:]
        gx, gk, gv, partial = engram_gate_bwd(grad_output.reshape(-1, hc, h).contiguous(), x, kk, vv, wf, dot, gate,
                                              rx, rk, ctx.clamp_value)
        main_wh, main_we = getattr(wh, "main_grad", None), getattr(we, "main_grad", None)
        gwh = main_wh if main_wh is not None else torch.zeros_like(wh, dtype=torch.float32)
        gwe = main_we if main_we is not None else torch.zeros_like(we, dtype=torch.float32)
        grad_w_reduce(partial, wh, we, gwh, gwe)
        return (gx.view(shape), gk.view(shape), gv.view(*shape[:-2], h), None if main_wh is not None else gwh,
                None if main_we is not None else gwe, None, None)


engram_gate = EngramGateFn.apply
