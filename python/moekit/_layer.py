"""The MoE layer: ``MoE`` (weights + config + a prepared kernel), ``fused_experts`` (the functional
form inference engines call), ``load_layer`` (a checkpoint's layer) and ``oracle``."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, List, NamedTuple, Optional, Tuple

from . import _C
from ._arrays import framework_of

DEFAULT_MAX_TOKENS = 4096
_mt = None  # moekit.torch, imported on the first torch call


def _torch_module():
    global _mt
    if _mt is None:
        from . import torch as mt

        _mt = mt
    return _mt
_FP4 = ("nvfp4", "mxfp4")


class Explanation(NamedTuple):
    """The oracle's answer: the selected backend and every candidate with why it was refused."""

    selected: str
    candidates: List[Tuple[str, bool, str]]
    table: str
    problem: str = ""

    def __str__(self) -> str:
        head = f"{self.problem}\n" if self.problem else ""
        return head + self.table


def _explanation(d: dict) -> Explanation:
    return Explanation(d["selected"], [tuple(c) for c in d["candidates"]], d["table"], d.get("problem", ""))


def _scheme_base(scheme: str) -> str:
    return scheme.split("/")[0]


def _dims_from_w2(w2: Any, scheme: str, transposed: bool):
    shape = tuple(w2.shape)
    if len(shape) != 3:
        raise ValueError(f"w2 shape: expected a 3-D array (E, H, I) (packed fp4: (E, H, I/2)), got {shape}")
    e, a, b = shape
    if transposed:
        return e, b, a  # (E, I, H)
    return e, a, (2 * b if _scheme_base(scheme) in _FP4 else b)


def _activation_dtype(x: Any) -> str:
    name = str(x.dtype)
    if "bfloat16" in name or name.endswith("uint16"):
        return "bfloat16"
    if name.endswith("float32"):
        return "float32"
    raise ValueError(f"x dtype: expected bfloat16 (numpy: uint16 bfloat16 bits) or float32, got {name}")


class _WorkspacePool:
    """One workspace per device shared by the layers prepared on it (calls on one stream run one
    layer at a time); a layer that needs more gets a new, larger buffer that later layers share.
    Buffers stay alive as long as a layer prepared with them."""

    def __init__(self):
        self._current = {}
        self._lock = threading.Lock()

    def get(self, device: str, nbytes: int):
        with self._lock:
            cur = self._current.get(device)
            if cur is not None and cur[1] >= nbytes:
                return cur[0]
            buf = _C.empty([max(nbytes, 1)], "u8", device)
            self._current[device] = (buf, nbytes)
            return buf


_WORKSPACES = _WorkspacePool()
_LAYERS: "weakref.WeakValueDictionary[int, MoE]" = weakref.WeakValueDictionary()
_next_handle = [0]


class MoE:
    """One MoE layer.

    Weights (moekit's convention, also vLLM's): ``w13`` = [gate; up] stacked along rows,
    (E, 2I, H) (E, I, H for non-gated activations); ``w2`` (E, H, I). Schemes (``scheme=``) and the
    arrays each takes, as checkpoints store them:

    - ``bf16``: w13/w2 bfloat16 (float32/float16 are rounded to bfloat16; numpy: uint16 bits or
      float32).
    - ``fp8_block``: float8_e4m3fn (or uint8) values + ``w13_scale``/``w2_scale`` float32 DECODE
      scales per 128x128 tile, (E, ceil(2I/128), ceil(H/128)) (DeepSeek-V3's weight_scale_inv).
    - ``fp8_tensor``: e4m3 values + float32 DECODE scales (E,).
    - ``nvfp4``: uint8 values (E, 2I, H/2) (two e2m1 per byte, low nibble first), ``w13_scale``
      float8_e4m3fn (or uint8) (E, 2I, H/16), ``w13_global_scale`` float32 (E,) ENCODE scales
      (what ``moekit.quantize`` returns; ModelOpt's weight_scale_2 is the reciprocal).
    - ``mxfp4``: uint8 values (E, 2I, H/2) (gpt-oss ``*_blocks`` reshaped), e8m0 scales as uint8
      (E, 2I, H/32).

    ``w13_layout``: ``gate_up`` (default), ``up_gate`` or ``interleaved`` (gpt-oss: gate rows even,
    up rows odd). ``transposed=True``: bf16 weights stored (E, H, 2I) / (E, I, H) (gpt-oss and
    ``transformers``' fused experts of gpt-oss). ``quantize="nvfp4"|"mxfp4"|"fp8_block"|...``
    quantizes bf16 weights with ``moekit.quantize`` first. Biases (gpt-oss): ``w13_bias`` (E, 2I),
    ``w2_bias`` (E, H). ``a13_scale``/``a2_scale``: static activation scales (NVFP4: ENCODE).

    Routing (``routing=``): default | renormalize | renormalize_naive (Mixtral, Qwen3) | topk |
    sigmoid | sigmoid_renorm | deepseek_v3 (+ ``num_expert_groups``, ``topk_group``,
    ``routed_scaling_factor``, ``correction_bias``) | llama4 | minimax2. Activation: silu |
    gelu_erf | gelu_tanh | swiglu_oai (``swiglu_alpha``, ``swiglu_limit``) | relu2.
    ``activation_quant``: auto (bf16 activations for bf16/nvfp4/mxfp4 weights, fp8_1x128 for
    fp8_block, fp8_tensor for fp8_tensor) or a scheme such as ``fp8_token`` (W4A8 with mxfp4).

    Call ``moe(x, router_logits)`` or ``moe(x, topk_ids, topk_weights)``; x is (M, H) bfloat16 (or
    float32 on the CPU). The first call prepares the layer for x's device and dtype unless
    ``prepare()`` was called. Not differentiable.
    """

    def __init__(
        self,
        w13: Any = None,
        w2: Any = None,
        *,
        top_k: int = 0,
        routing: str = "renormalize",
        activation: str = "silu",
        scheme: str = "bf16",
        w13_scale: Any = None,
        w2_scale: Any = None,
        w13_global_scale: Any = None,
        w2_global_scale: Any = None,
        w13_bias: Any = None,
        w2_bias: Any = None,
        a13_scale: Any = None,
        a2_scale: Any = None,
        correction_bias: Any = None,
        num_expert_groups: int = 1,
        topk_group: int = 1,
        routed_scaling_factor: float = 1.0,
        swiglu_alpha: float = 1.702,
        swiglu_limit: float = 7.0,
        w13_layout: str = "gate_up",
        transposed: bool = False,
        quantize: Optional[str] = None,
        activation_quant: str = "auto",
        backend: str = "auto",
        max_tokens: int = DEFAULT_MAX_TOKENS,
        share_workspace: bool = True,
        _layer: Any = None,
    ):
        self.backend_request = backend
        self.max_tokens = max_tokens
        self.share_workspace = share_workspace
        self._workspace = None
        self._dtype = None  # the prepared activation dtype (None: not prepared)
        self._on_cuda = False
        self._lock = threading.Lock()
        if _layer is not None:
            self._layer = _layer
        else:
            if w13 is None or w2 is None:
                raise TypeError("MoE: w13 and w2 are required")
            if not isinstance(top_k, int) or top_k < 1:
                raise ValueError(f"top_k: expected an int >= 1, got {top_k!r}")
            e, h, i = _dims_from_w2(w2, scheme, transposed)
            config = dict(
                num_experts=e, hidden_size=h, intermediate_size=i, top_k=top_k, routing=routing,
                num_expert_groups=num_expert_groups, topk_group=topk_group,
                routed_scaling_factor=float(routed_scaling_factor), activation=activation,
                swiglu_alpha=float(swiglu_alpha), swiglu_limit=float(swiglu_limit), scheme=scheme,
                quantize=quantize or "", activation_quant=activation_quant, w13_layout=w13_layout,
                transposed=bool(transposed),
            )
            given = dict(
                w13=w13, w2=w2, w13_scale=w13_scale, w2_scale=w2_scale,
                w13_global_scale=w13_global_scale, w2_global_scale=w2_global_scale,
                w13_bias=w13_bias, w2_bias=w2_bias, a13_scale=a13_scale, a2_scale=a2_scale,
                correction_bias=correction_bias,
            )
            arrays = {}
            for name, a in given.items():
                if a is None:
                    continue
                fw = framework_of(a, name)
                fw.synchronize(a)  # weights are copied on the host: finish pending writes first
                arrays[name] = fw.export(a)
            self._layer = _C.Layer(config, arrays)
        _next_handle[0] += 1
        self.handle = _next_handle[0]
        _LAYERS[self.handle] = self
        cfg = self._layer.config
        self.num_experts = cfg["num_experts"]
        self.hidden_size = cfg["hidden_size"]
        self.intermediate_size = cfg["intermediate_size"]
        self.top_k = cfg["top_k"]

    # -- preparation ---------------------------------------------------------------------------

    @property
    def config(self) -> dict:
        """The layer (E, H, I, top-k, routing, activation, scheme, ...) as a dict."""
        return self._layer.config

    @property
    def prepared(self) -> bool:
        return self._layer.prepared

    @property
    def backend(self) -> str:
        """The backend the layer was prepared for ('' before prepare)."""
        return self._layer.backend

    @property
    def device(self) -> str:
        return self._layer.device if self._layer.prepared else ""

    def prepare(self, device: str = "cuda", dtype: str = "bfloat16", max_tokens: Optional[int] = None,
                backend: Optional[str] = None, stream: int = 0) -> "MoE":
        """Selects the backend (the oracle; ``backend=`` or MOEKIT_BACKEND overrides) and
        converts the weights into its layout on ``device`` ('cpu' or 'cuda' / 'cuda:0'), for
        activations of ``dtype`` ('bfloat16', or 'float32' on the CPU) and up to ``max_tokens``
        tokens per chunk (longer inputs run in chunks). Synchronous; call before CUDA-graph
        capture."""
        max_tokens = self.max_tokens if max_tokens is None else max_tokens
        backend = backend or self.backend_request
        device = "cuda:0" if device == "cuda" else device
        with self._lock:
            ws = None
            if self.share_workspace and device != "cpu":
                nbytes = self._layer.workspace_bytes(device, dtype, max_tokens, backend)
                ws = _WORKSPACES.get(device, nbytes)
            self._layer.prepare(device, dtype, max_tokens, backend, ws, stream)
            self._workspace = ws
            self._dtype = self._layer.dtype
            self._on_cuda = self._layer.device != "cpu"
        return self

    def explain(self, tokens: Optional[int] = None, device: Optional[str] = None,
                dtype: Optional[str] = None, backend: Optional[str] = None) -> Explanation:
        """The oracle's table for this layer: every candidate backend, accepted or why not.
        Defaults: the prepared device/dtype/max_tokens, else cuda when available, bfloat16, 1
        token."""
        if device is None:
            device = self._layer.device if self._layer.prepared else (
                "cuda:0" if _C.info()["device_sm"] else "cpu")
        dtype = dtype or (self._layer.dtype if self._layer.prepared else "bfloat16")
        tokens = tokens or (self._layer.max_tokens if self._layer.prepared else 1)
        d = self._layer.explain(device, dtype, tokens, backend or self.backend_request)
        d["problem"] = ""
        return _explanation(d)

    def weights(self) -> dict:
        """Host (numpy) copies of the layer's tensors in moekit's conventions: w13, w13_scale,
        w13_global_scale, w2, ..., biases, activation scales, correction_bias, and the router
        (router_weight, router_bias) for layers loaded from a checkpoint."""
        import numpy

        return {k: numpy.from_dlpack(v) for k, v in self._layer.weight_arrays().items()}

    # -- calls ---------------------------------------------------------------------------------

    def _ensure_prepared(self, fw, x) -> None:
        if not self._layer.prepared:
            self.prepare(fw.device(x), _activation_dtype(x), stream=fw.stream(x))

    def __call__(self, x: Any, *args: Any, router_logits: Any = None, topk_ids: Any = None,
                 topk_weights: Any = None) -> Any:
        """``moe(x, router_logits)`` or ``moe(x, topk_ids, topk_weights)`` -> (M, H), x's dtype."""
        if len(args) == 1:
            router_logits = args[0]
        elif len(args) == 2:
            topk_ids, topk_weights = args
        elif args:
            raise TypeError("MoE(x, router_logits) or MoE(x, topk_ids, topk_weights)")
        if router_logits is not None:
            return self.forward(x, router_logits)
        if topk_ids is None or topk_weights is None:
            raise TypeError("MoE: pass router_logits, or topk_ids and topk_weights")
        return self.forward_routed(x, topk_ids, topk_weights)

    def forward(self, x: Any, router_logits: Any) -> Any:
        """Routes router_logits (M, E) float32/bfloat16 with the layer's method, then the
        experts."""
        fw = framework_of(x)
        if fw.name == "torch" and _torch_module().is_compiling():
            return _mt.moe_op(x, router_logits, self.handle)
        return self._forward_impl(fw, x, router_logits)

    def _forward_impl(self, fw, x: Any, router_logits: Any) -> Any:
        if self._dtype is None:
            self._ensure_prepared(fw, x)
        out = fw.empty_out(x, self.hidden_size, self._dtype)
        lfw = framework_of(router_logits, "router_logits")
        self._layer.apply_logits(fw.export(x), lfw.export(router_logits), fw.export(out), fw.stream(x))
        if fw.synchronous_cuda and self._on_cuda:
            _C.synchronize()
        return fw.wrap(out, x)

    def forward_routed(self, x: Any, topk_ids: Any, topk_weights: Any) -> Any:
        """Experts on precomputed routing: topk_ids (M, k) int32/int64 in [0, E), topk_weights
        (M, k) float32 (bfloat16/float16 are widened)."""
        fw = framework_of(x)
        if fw.name == "torch" and _torch_module().is_compiling():
            return _mt.moe_routed_op(x, topk_ids, topk_weights, self.handle)
        return self._forward_routed_impl(fw, x, topk_ids, topk_weights)

    def _forward_routed_impl(self, fw, x: Any, topk_ids: Any, topk_weights: Any) -> Any:
        if self._dtype is None:
            self._ensure_prepared(fw, x)
        ifw = framework_of(topk_ids, "topk_ids")
        wfw = framework_of(topk_weights, "topk_weights")
        ids = ifw.to_int32(topk_ids)
        wts = wfw.to_float32(topk_weights)
        out = fw.empty_out(x, self.hidden_size, self._dtype)
        self._layer.apply(fw.export(x), ifw.export(ids), wfw.export(wts), fw.export(out), fw.stream(x))
        if fw.synchronous_cuda and self._on_cuda:
            _C.synchronize()
        return fw.wrap(out, x)

    def __repr__(self) -> str:
        state = f"backend={self.backend!r} device={self.device!r}" if self.prepared else "not prepared"
        return f"moekit.MoE({self.config['layer']}, scheme={self.config['scheme']}, {state})"


def layer_by_handle(handle: int) -> MoE:
    layer = _LAYERS.get(handle)
    if layer is None:
        raise ValueError(f"moekit layer handle {handle}: expected a live moekit.MoE, got none (collected?)")
    return layer


# -- fused_experts -----------------------------------------------------------------------------

_FUSED_CACHE: dict = {}
_FUSED_LOCK = threading.Lock()


def _key_part(a: Any):
    if a is None:
        return None
    ptr = getattr(a, "data_ptr", None)
    if callable(ptr):
        return (id(a), ptr(), tuple(a.shape))
    iface = getattr(a, "__array_interface__", None)
    if iface is not None:
        return (id(a), iface["data"][0], tuple(a.shape))
    return (id(a), tuple(a.shape))


def fused_experts(
    hidden_states: Any,
    w1: Any,
    w2: Any,
    topk_weights: Any,
    topk_ids: Any,
    *,
    scheme: str = "bf16",
    activation: str = "silu",
    w1_scale: Any = None,
    w2_scale: Any = None,
    w1_global_scale: Any = None,
    w2_global_scale: Any = None,
    w1_bias: Any = None,
    w2_bias: Any = None,
    a1_scale: Any = None,
    a2_scale: Any = None,
    apply_router_weight_on_input: bool = False,
    activation_quant: str = "auto",
    swiglu_alpha: float = 1.702,
    swiglu_limit: float = 7.0,
    backend: str = "auto",
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Any:
    """The experts of an MoE layer on precomputed routing, called as vLLM's ``fused_experts``:
    ``fused_experts(x, w1, w2, topk_weights, topk_ids, ...)`` with w1 = w13 (E, 2I, H) [gate; up]
    and w2 (E, H, I) in ``scheme`` (see ``MoE``), returns (M, H) in x's dtype.

    The first call with given weight arrays prepares them (a copy into the backend's layout);
    later calls with the same arrays (same objects, data pointers and shapes) reuse that, so
    modify weights in place only followed by ``moekit.clear_cache()``. Call once before a CUDA
    graph capture.
    """
    fw = framework_of(hidden_states)
    if fw.name == "torch":
        from . import torch as _mt

        if _mt.is_compiling():
            return _mt.fused_experts_op(
                hidden_states, w1, w2, topk_weights, topk_ids, scheme=scheme, activation=activation,
                w1_scale=w1_scale, w2_scale=w2_scale, w1_global_scale=w1_global_scale,
                w2_global_scale=w2_global_scale, w1_bias=w1_bias, w2_bias=w2_bias,
                a1_scale=a1_scale, a2_scale=a2_scale,
                apply_router_weight_on_input=apply_router_weight_on_input,
                activation_quant=activation_quant, swiglu_alpha=swiglu_alpha,
                swiglu_limit=swiglu_limit, backend=backend)
    shape = tuple(topk_ids.shape)
    if len(shape) != 2:
        raise ValueError(f"topk_ids shape: expected (M, top_k), got {shape}")
    top_k = shape[1]
    routing = "llama4" if apply_router_weight_on_input else "renormalize"
    key = (
        _key_part(w1), _key_part(w2), _key_part(w1_scale), _key_part(w2_scale),
        _key_part(w1_global_scale), _key_part(w2_global_scale), _key_part(w1_bias),
        _key_part(w2_bias), _key_part(a1_scale), _key_part(a2_scale), scheme, activation,
        activation_quant, top_k, routing, float(swiglu_alpha), float(swiglu_limit), backend,
        fw.device(hidden_states), _activation_dtype(hidden_states),
    )
    with _FUSED_LOCK:
        entry = _FUSED_CACHE.get(key)
        layer = entry[0] if entry is not None and entry[1]() is w1 else None
    if layer is None:
        if top_k < 1:
            raise ValueError(f"topk_ids shape: expected (M, top_k) with top_k >= 1, got {shape}")
        layer = MoE(
            w1, w2, top_k=top_k, routing=routing, activation=activation, scheme=scheme,
            w13_scale=w1_scale, w2_scale=w2_scale, w13_global_scale=w1_global_scale,
            w2_global_scale=w2_global_scale, w13_bias=w1_bias, w2_bias=w2_bias,
            a13_scale=a1_scale, a2_scale=a2_scale, swiglu_alpha=swiglu_alpha,
            swiglu_limit=swiglu_limit, activation_quant=activation_quant, backend=backend,
            max_tokens=max_tokens,
        )
        layer.prepare(fw.device(hidden_states), _activation_dtype(hidden_states),
                      stream=fw.stream(hidden_states))
        try:
            ref = weakref.ref(w1, lambda _r, k=key: _FUSED_CACHE.pop(k, None))
        except TypeError:  # not weak-referenceable: cache by identity only while alive
            ref = (lambda obj: (lambda: obj))(w1)
        with _FUSED_LOCK:
            _FUSED_CACHE[key] = (layer, ref)
    return layer.forward_routed(hidden_states, topk_ids, topk_weights)


def clear_cache() -> None:
    """Forgets the layers ``fused_experts`` prepared (after modifying weights in place)."""
    with _FUSED_LOCK:
        _FUSED_CACHE.clear()


# -- checkpoints and the oracle ------------------------------------------------------------------


def load_layer(checkpoint_dir: str, layer: int, *, input_scales: str = "max", backend: str = "auto",
               max_tokens: int = DEFAULT_MAX_TOKENS) -> MoE:
    """Layer ``layer`` of a Hugging Face checkpoint directory (config.json + safetensors), through
    moekit's C++ loaders: bf16 (per-expert tensors, or the fused 3-D experts transformers writes),
    ModelOpt / compressed-tensors NVFP4, gpt-oss MXFP4 and bf16, DeepSeek-V3 FP8 block.
    input_scales: how differing calibrated NVFP4 input scales are merged (max | equal | ignore).
    The router is in ``moe.weights()['router_weight']`` (and ``router_bias``)."""
    return MoE(_layer=_C.load_layer(os.fspath(checkpoint_dir), int(layer), input_scales),
               backend=backend, max_tokens=max_tokens)


def checkpoint_info(checkpoint_dir: str) -> dict:
    """model_type, num_hidden_layers, format, the MoE layer shape and the MoE layer indices."""
    return _C.checkpoint_info(os.fspath(checkpoint_dir))


def oracle(num_experts: int, hidden_size: int, intermediate_size: int, top_k: int, *,
           scheme: str = "bf16", routing: str = "renormalize", activation: str = "silu",
           activation_quant: str = "auto", tokens: int = 1, device: str = "auto",
           backend: str = "", dtype: str = "bfloat16", num_expert_groups: int = 1,
           topk_group: int = 1, routed_scaling_factor: float = 1.0) -> Explanation:
    """Which backend runs a layer of this shape and scheme on ``device`` ('auto' = this machine,
    or 'cpu' / 'sm90' / 'sm100' ...), and why every other candidate was refused. ``backend``
    names an override to check (an unsupported one raises moekit.Error saying why)."""
    config = dict(
        num_experts=num_experts, hidden_size=hidden_size, intermediate_size=intermediate_size,
        top_k=top_k, routing=routing, activation=activation, scheme=scheme,
        activation_quant=activation_quant, num_expert_groups=num_expert_groups,
        topk_group=topk_group, routed_scaling_factor=float(routed_scaling_factor),
    )
    return _explanation(_C.oracle(config, int(tokens), device, backend, dtype))
