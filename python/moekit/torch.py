"""PyTorch integration (imported on demand; torch is not a dependency of moekit).

- torch.library custom ops ``moekit::moe``, ``moekit::moe_routed``, ``moekit::fused_experts`` and
  ``moekit::quantize`` with CPU and CUDA kernels and fake (meta) implementations, so that
  ``torch.compile(..., fullgraph=True)`` traces through moekit calls without a graph break. In
  eager mode moekit calls the extension directly (no dispatcher overhead); under torch.compile
  the public functions (``MoE.forward``, ``moekit.quantize``, ``moekit.fused_experts``) emit the
  ops instead.
- ``MoEBlock``: an ``nn.Module`` around a ``moekit.MoE`` and its router weight, and
  ``from_hf_block`` / ``replace_moe_blocks`` to swap the sparse MoE blocks of a Hugging Face
  model (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss) for moekit.

CUDA graphs: moekit's CUDA calls neither allocate nor synchronize, and outputs come from torch's
caching allocator, so ``torch.cuda.graph`` captures a prepared layer (prepare / warm up first).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from . import _arrays, _layer, _quant

_FRAMEWORK: Optional[_arrays.TorchFramework] = None


def framework() -> _arrays.TorchFramework:
    global _FRAMEWORK
    if _FRAMEWORK is None:
        _FRAMEWORK = _arrays.TorchFramework()
    return _FRAMEWORK


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
if _is_compiling is None:  # torch < 2.3
    import torch._dynamo

    _is_compiling = torch._dynamo.is_compiling


def is_compiling() -> bool:
    """True while torch.compile / export traces (moekit then emits its torch.library ops)."""
    return _is_compiling()


_DEVICES = ("cpu", "cuda")


# -- the MoE layer ops ---------------------------------------------------------------------------


@torch.library.custom_op("moekit::moe", mutates_args=(), device_types=_DEVICES)
def _moe_op(x: torch.Tensor, router_logits: torch.Tensor, handle: int) -> torch.Tensor:
    layer = _layer.layer_by_handle(handle)
    # Compiled graphs may hand views with other strides: moekit takes row-major arrays.
    return layer._forward_impl(framework(), x.contiguous(), router_logits.contiguous())


@_moe_op.register_fake
def _(x, router_logits, handle):
    return x.new_empty((x.shape[0], x.shape[1]))


@torch.library.custom_op("moekit::moe_routed", mutates_args=(), device_types=_DEVICES)
def _moe_routed_op(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                   handle: int) -> torch.Tensor:
    layer = _layer.layer_by_handle(handle)
    return layer._forward_routed_impl(framework(), x.contiguous(), topk_ids.contiguous(),
                                      topk_weights.contiguous())


@_moe_routed_op.register_fake
def _(x, topk_ids, topk_weights, handle):
    return x.new_empty((x.shape[0], x.shape[1]))


def moe_op(x: torch.Tensor, router_logits: torch.Tensor, handle: int) -> torch.Tensor:
    return torch.ops.moekit.moe(x, router_logits, handle)


def moe_routed_op(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  handle: int) -> torch.Tensor:
    return torch.ops.moekit.moe_routed(x, topk_ids, topk_weights, handle)


# -- fused_experts -------------------------------------------------------------------------------


@torch.library.custom_op("moekit::fused_experts", mutates_args=(), device_types=_DEVICES)
def _fused_experts_op(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: Optional[torch.Tensor],
    w2_scale: Optional[torch.Tensor],
    w1_global_scale: Optional[torch.Tensor],
    w2_global_scale: Optional[torch.Tensor],
    w1_bias: Optional[torch.Tensor],
    w2_bias: Optional[torch.Tensor],
    a1_scale: Optional[torch.Tensor],
    a2_scale: Optional[torch.Tensor],
    scheme: str,
    activation: str,
    apply_router_weight_on_input: bool,
    activation_quant: str,
    swiglu_alpha: float,
    swiglu_limit: float,
    backend: str,
) -> torch.Tensor:
    return _layer.fused_experts(
        x.contiguous(), w1, w2, topk_weights.contiguous(), topk_ids.contiguous(), scheme=scheme, activation=activation,
        w1_scale=w1_scale, w2_scale=w2_scale, w1_global_scale=w1_global_scale,
        w2_global_scale=w2_global_scale, w1_bias=w1_bias, w2_bias=w2_bias, a1_scale=a1_scale,
        a2_scale=a2_scale, apply_router_weight_on_input=apply_router_weight_on_input,
        activation_quant=activation_quant, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit,
        backend=backend)


@_fused_experts_op.register_fake
def _(x, w1, w2, topk_weights, topk_ids, *args):
    return x.new_empty((x.shape[0], x.shape[1]))


def fused_experts_op(x, w1, w2, topk_weights, topk_ids, *, scheme, activation, w1_scale, w2_scale,
                     w1_global_scale, w2_global_scale, w1_bias, w2_bias, a1_scale, a2_scale,
                     apply_router_weight_on_input, activation_quant, swiglu_alpha, swiglu_limit,
                     backend):
    return torch.ops.moekit.fused_experts(
        x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, w1_global_scale, w2_global_scale,
        w1_bias, w2_bias, a1_scale, a2_scale, scheme, activation, apply_router_weight_on_input,
        activation_quant, float(swiglu_alpha), float(swiglu_limit), backend)


# -- quantize ------------------------------------------------------------------------------------


@torch.library.custom_op("moekit::quantize", mutates_args=(), device_types=_DEVICES)
def _quantize_op(x: torch.Tensor, scheme: str, layout: str, rule: str,
                 global_scale: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = _quant._quantize_impl(framework(), x.contiguous(), scheme, layout, "auto", global_scale, rule)
    empty = x.new_empty((0,), dtype=torch.float32)
    return (q.values, empty if q.scales is None else q.scales,
            empty if q.global_scale is None else q.global_scale)


@_quantize_op.register_fake
def _(x, scheme, layout, rule, global_scale):
    fw = framework()
    layout = layout or None
    rule = rule or None
    s = _quant.quant_shapes(tuple(x.shape), scheme, layout, rule)
    outs = []
    for spec in s:
        if spec is None:
            outs.append(x.new_empty((0,), dtype=torch.float32))
        else:
            outs.append(x.new_empty(spec.shape, dtype=fw.torch_dtype(spec.dtype)))
    return tuple(outs)


def quantize_op(x, scheme, layout, global_scale, rule) -> _quant.Quantized:
    scheme, layout, rule = _quant._split(scheme, layout, rule)
    if isinstance(global_scale, (int, float)):
        global_scale = torch.full((x.shape[0] if x.dim() == 3 else 1,), float(global_scale),
                                  dtype=torch.float32, device=x.device)
    v, s, g = torch.ops.moekit.quantize(x, scheme, layout, rule, global_scale)  # resolved names
    spec = _quant.quant_shapes(tuple(x.shape), scheme, layout, rule)
    return _quant.Quantized(v, None if spec.scales is None else s,
                            None if spec.global_scale is None else g, scheme, layout, rule)


# -- nn.Module -----------------------------------------------------------------------------------


class MoEBlock(nn.Module):
    """A sparse MoE block on moekit: hidden_states (..., H) -> (..., H).

    router_weight (E, H) (+ router_bias (E,)) computes the router logits in torch
    (``F.linear``, in the input's dtype, as the Hugging Face blocks do); moekit routes them with
    the layer's routing method and runs the experts. ``forward(hidden_states, router_logits)``
    takes precomputed logits instead. ``shared_expert`` (+ ``shared_expert_gate``): an optional
    dense MLP added to the output (Qwen2-MoE style: ``sigmoid(gate(x)) * shared_expert(x)``).
    ``returns``: what forward returns: "hidden" (transformers 5), "hidden_logits" (hidden and
    router logits, transformers 4.x blocks), "hidden_scores" (gpt-oss: hidden and None).
    """

    def __init__(self, moe: _layer.MoE, router_weight: Optional[torch.Tensor] = None,
                 router_bias: Optional[torch.Tensor] = None, *,
                 shared_expert: Optional[nn.Module] = None,
                 shared_expert_gate: Optional[nn.Module] = None, returns: str = "hidden"):
        super().__init__()
        if returns not in ("hidden", "hidden_logits", "hidden_scores"):
            raise ValueError(f"returns: expected hidden | hidden_logits | hidden_scores, got {returns!r}")
        self.moe = moe
        self.handle = moe.handle
        self.hidden_size = moe.hidden_size
        self.returns = returns
        if router_weight is not None:
            self.register_buffer("router_weight", router_weight.detach(), persistent=False)
        else:
            self.router_weight = None
        if router_bias is not None:
            self.register_buffer("router_bias", router_bias.detach(), persistent=False)
        else:
            self.router_bias = None
        self.shared_expert = shared_expert
        self.shared_expert_gate = shared_expert_gate

    def forward(self, hidden_states: torch.Tensor, router_logits: Optional[torch.Tensor] = None):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        if router_logits is None:
            if self.router_weight is None:
                raise ValueError("router_logits: expected a tensor (this MoEBlock has no router_weight)")
            router_logits = F.linear(x, self.router_weight, self.router_bias)
        if is_compiling():
            y = torch.ops.moekit.moe(x, router_logits, self.handle)
        else:
            y = self.moe._forward_impl(framework(), x, router_logits)
        if self.shared_expert is not None:
            s = self.shared_expert(x)
            if self.shared_expert_gate is not None:
                s = torch.sigmoid(self.shared_expert_gate(x)) * s
            y = y + s
        y = y.reshape(shape)
        if self.returns == "hidden_logits":
            return y, router_logits
        if self.returns == "hidden_scores":
            return y, None
        return y

    def extra_repr(self) -> str:
        return repr(self.moe)


def _routing_of(block: nn.Module, model_type: str) -> str:
    gate = getattr(block, "gate", None) or getattr(block, "router", None)
    if model_type == "gpt_oss":
        return "renormalize"
    if model_type == "mixtral":
        return "renormalize_naive"
    norm = getattr(gate, "norm_topk_prob", getattr(block, "norm_topk_prob", None))
    if norm is None:
        return "renormalize_naive"
    return "renormalize_naive" if norm else "default"


def _model_type(block: nn.Module) -> str:
    name = type(block).__name__.lower()
    for t in ("gptoss", "mixtral", "qwen3", "qwen2"):
        if name.startswith(t):
            return {"gptoss": "gpt_oss", "mixtral": "mixtral", "qwen3": "qwen3_moe", "qwen2": "qwen2_moe"}[t]
    return ""


def _moe_from_weights(w13, w2, scheme, **kw) -> _layer.MoE:
    """bf16 weights as they are, or quantized with moekit.quantize (per expert: the batched
    [E, rows, K] input gives one NVFP4 global scale per expert)."""
    if scheme == "bf16":
        return _layer.MoE(w13, w2, **kw)
    q13, q2 = _quant.quantize(w13, scheme), _quant.quantize(w2, scheme)
    return _layer.MoE(q13.values, q2.values, scheme=scheme, w13_scale=q13.scales,
                      w2_scale=q2.scales, w13_global_scale=q13.global_scale,
                      w2_global_scale=q2.global_scale, **kw)


def from_hf_block(block: nn.Module, *, top_k: Optional[int] = None, scheme: str = "bf16",
                  backend: str = "auto", max_tokens: int = _layer.DEFAULT_MAX_TOKENS,
                  activation_quant: str = "auto", activation: str = "silu",
                  model_type: Optional[str] = None) -> MoEBlock:
    """A ``MoEBlock`` with the weights of a Hugging Face sparse MoE block (transformers 5 fused
    experts ``experts.gate_up_proj`` / ``experts.down_proj``, or the per-expert ModuleList of
    transformers 4.x), quantized to ``scheme`` (bf16 keeps them; nvfp4 / mxfp4 / fp8_block use
    ``moekit.quantize``). Prepared on the weights' device."""
    model_type = model_type or _model_type(block)
    experts = block.experts
    gate = getattr(block, "gate", None)
    if gate is None:
        gate = getattr(block, "router", None)
    if gate is None or not hasattr(gate, "weight"):
        raise ValueError(f"block: expected a router at .gate or .router with a weight, got {type(block).__name__}")
    top_k = top_k or getattr(gate, "top_k", None) or getattr(block, "top_k", None)
    if not top_k:
        raise ValueError("top_k: expected the number of experts per token (not found on the block)")
    kw = dict(top_k=int(top_k), routing=_routing_of(block, model_type), backend=backend,
              max_tokens=max_tokens, activation_quant=activation_quant)
    returns = "hidden"
    b13 = b2 = None
    with torch.no_grad():
        if isinstance(experts, nn.ModuleList):  # transformers 4.x: one module per expert
            names = ("w1", "w3", "w2") if hasattr(experts[0], "w1") else ("gate_proj", "up_proj", "down_proj")
            w13 = torch.stack([torch.cat([getattr(e, names[0]).weight, getattr(e, names[1]).weight]) for e in experts])
            w2 = torch.stack([getattr(e, names[2]).weight for e in experts])
            returns = "hidden_logits"
        elif model_type == "gpt_oss":
            # [E, H, 2I] with gate/up columns interleaved -> [E, 2I, H] = [gate; up]
            gu = experts.gate_up_proj.detach().transpose(1, 2)
            w13 = torch.cat([gu[:, 0::2], gu[:, 1::2]], dim=1).contiguous()
            w2 = experts.down_proj.detach().transpose(1, 2).contiguous()
            bgu = experts.gate_up_proj_bias.detach()
            b13 = torch.cat([bgu[:, 0::2], bgu[:, 1::2]], dim=1).contiguous()
            b2 = experts.down_proj_bias.detach()
            kw.update(activation="swiglu_oai", swiglu_alpha=float(getattr(experts, "alpha", 1.702)),
                      swiglu_limit=float(getattr(experts, "limit", 7.0)))
            returns = "hidden_scores"
        else:  # transformers 5 fused experts: gate_up_proj [E, 2I, H], down_proj [E, H, I]
            w13, w2 = experts.gate_up_proj.detach(), experts.down_proj.detach()
        kw.setdefault("activation", activation)
        moe = _moe_from_weights(w13.contiguous(), w2.contiguous(), scheme, w13_bias=b13, w2_bias=b2, **kw)
    device = experts.gate_up_proj.device if hasattr(experts, "gate_up_proj") else gate.weight.device
    moe.prepare("cpu" if device.type == "cpu" else f"cuda:{device.index or 0}", "bfloat16"
                if device.type == "cuda" or gate.weight.dtype == torch.bfloat16 else "float32")
    return MoEBlock(moe, gate.weight, getattr(gate, "bias", None),
                    shared_expert=getattr(block, "shared_expert", None),
                    shared_expert_gate=getattr(block, "shared_expert_gate", None), returns=returns)


def replace_moe_blocks(model: nn.Module, *, scheme: str = "bf16", backend: str = "auto",
                       max_tokens: int = _layer.DEFAULT_MAX_TOKENS,
                       activation_quant: str = "auto") -> List[str]:
    """Replaces every sparse MoE block of a Hugging Face model (modules named ``*SparseMoeBlock``,
    and gpt-oss ``GptOssMLP``) by a ``MoEBlock``; returns the names of the replaced modules."""
    config = getattr(model, "config", None)
    text_config = getattr(config, "get_text_config", lambda: config)() if config is not None else None
    act = getattr(text_config, "hidden_act", "silu") or "silu"
    activation = {"silu": "silu", "swish": "silu", "gelu": "gelu_erf",
                  "gelu_pytorch_tanh": "gelu_tanh"}.get(act, act)
    top_k = getattr(text_config, "num_experts_per_tok", None)
    replaced = []
    for name, module in list(model.named_modules()):
        cls = type(module).__name__
        if not (cls.endswith("SparseMoeBlock") or cls == "GptOssMLP"):
            continue
        new = from_hf_block(module, top_k=top_k, scheme=scheme, backend=backend,
                            max_tokens=max_tokens, activation_quant=activation_quant,
                            activation=activation)
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], new)
        replaced.append(name)
    return replaced
