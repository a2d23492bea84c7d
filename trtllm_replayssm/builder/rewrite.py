"""The ReplaySSM rewrite of a loaded transformers model (Nemotron-H, Qwen3.5 dense / MoE, Qwen3-Next).

Each SSM mixer keeps its own code for everything around the recurrence (projections, conv1d and its state,
gating, norms): only its single-token state update is redirected to ReplaySSM over a state pool (one pool per
layer, one slot per request). The redirection is a lookup, not a copy of the model's code: the modeling module's
single-token function (``mamba2_selective_state_update`` for Mamba-2, ``torch_recurrent_gated_delta_rule`` for
GDN) is replaced by a dispatcher that serves the mixer currently running under a rewrite and calls the original
function for every other caller. Prefill keeps the model's chunked path; ``load_prefill`` then hands each
request's final SSM state to its slot as the checkpoint with an empty ring. ``undo`` restores the model.

    rw = rewrite(model, ReplayConfig(buffer_len=16), num_slots=8)
    ... prefill with the model's cache, rw.load_prefill(cache, slots) ...
    ... decode steps: model(next_tokens, past_key_values=cache, ...) ...
    rw.release(slots); rw.undo()
"""

from __future__ import annotations

import contextvars
import sys
from dataclasses import dataclass, field

import torch

from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

# Mixer classes by model family, and the module-level single-token functions their forward calls by name.
_MIXERS = {
    "NemotronHMamba2Mixer": ("mamba2", ("mamba2_selective_state_update",)),
    "Qwen3_5GatedDeltaNet": ("gdn", ("torch_recurrent_gated_delta_rule",)),
    "Qwen3_5MoeGatedDeltaNet": ("gdn", ("torch_recurrent_gated_delta_rule",)),
    "Qwen3NextGatedDeltaNet": ("gdn", ("torch_recurrent_gated_delta_rule",)),
}

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("replayssm_active_layer", default=None)


class RewriteError(ValueError):
    """The model cannot be rewritten (unknown mixer, unsupported shape); the message names the field."""


@dataclass
class ReplayLayer:
    """One rewritten SSM layer: its mixer, family, pool and the rewrite it belongs to."""

    index: int
    kind: str  # "mamba2" or "gdn"
    mixer: torch.nn.Module
    pool: Mamba2StatePool | GdnStatePool
    owner: "ReplayRewrite" = field(repr=False, default=None)


def _mamba2_shape(m) -> Mamba2LayerShape:
    return Mamba2LayerShape(m.num_heads, m.head_dim, m.ssm_state_size, m.n_groups)


def _gdn_shape(m) -> GdnLayerShape:
    return GdnLayerShape(m.num_k_heads, m.num_v_heads, m.head_k_dim, m.head_v_dim)


class ReplayRewrite:
    """A model whose SSM mixers decode with ReplaySSM; create with `rewrite`."""

    def __init__(self, model: torch.nn.Module, cfg: ReplayConfig, num_slots: int, device=None):
        self.model, self.cfg, self.num_slots = model, cfg, num_slots
        device = device or next(model.parameters()).device
        self.layers: dict[int, ReplayLayer] = {}
        self.slot_idx: torch.Tensor | None = None  # [batch] int32: pool slot of each batch row of a decode step
        self._patched: dict[tuple[str, str], object] = {}  # (module name, function name) -> original
        for module in model.modules():
            spec = _MIXERS.get(type(module).__name__)
            if spec is None:
                continue
            kind, names = spec
            try:
                shape = _mamba2_shape(module) if kind == "mamba2" else _gdn_shape(module)
                shape.validate()
            except (AttributeError, ValueError) as e:
                raise RewriteError(f"layer {module.layer_idx} ({type(module).__name__}): {e}") from e
            pool_cls = Mamba2StatePool if kind == "mamba2" else GdnStatePool
            layer = ReplayLayer(module.layer_idx, kind, module, pool_cls(shape, num_slots, cfg, device=device), self)
            self.layers[module.layer_idx] = layer
            self._patch(sys.modules[type(module).__module__], names, kind)
            module.forward = self._wrap_forward(module.forward, layer)
        if not self.layers:
            raise RewriteError(f"{type(model).__name__} has no SSM mixer this rewrite knows "
                               f"(known: {', '.join(sorted(_MIXERS))})")

    # ---- the redirection ----
    def _patch(self, modeling, names, kind):
        for name in names:
            key = (modeling.__name__, name)
            if key in self._patched:
                return
            original = getattr(modeling, name, None)
            if original is None:
                continue
            self._patched[key] = original
            setattr(modeling, name, _dispatcher(original, kind))
            return
        raise RewriteError(f"{modeling.__name__} has none of {names}: this transformers version is not supported")

    @staticmethod
    def _wrap_forward(forward, layer):
        def replay_forward(*args, **kwargs):
            token = _ACTIVE.set(layer)
            try:
                return forward(*args, **kwargs)
            finally:
                _ACTIVE.reset(token)

        replay_forward.__wrapped__ = forward
        return replay_forward

    # ---- requests ----
    def load_prefill(self, cache, slots, rows=None) -> None:
        """Starts requests: for every SSM layer, the model cache's recurrent state of batch row rows[i] becomes
        the checkpoint of slot slots[i] with an empty ring. `slot_idx` is set to `slots` for the decode steps."""
        rows = list(range(len(slots))) if rows is None else list(rows)
        for idx, layer in self.layers.items():
            state = _recurrent_state(cache, idx)
            for r, s in zip(rows, slots):
                st = state[r]
                if layer.kind == "gdn":
                    st = st.transpose(-1, -2)  # the model keeps [HV, K, V]; the pool [HV, V, K]
                layer.pool.reset_slot(int(s), st.to(layer.pool.checkpoint.dtype))
        self.bind(slots)

    def bind(self, slots) -> None:
        """The pool slot of each batch row for the next decode steps (-1: padding row)."""
        device = next(iter(self.layers.values())).pool.checkpoint.device
        self.slot_idx = torch.as_tensor(list(slots), dtype=torch.int32, device=device)

    def release(self, slots) -> None:
        """Ends requests: their slots are zeroed (checkpoint, ring, cursor) and free for reuse."""
        for layer in self.layers.values():
            for s in slots:
                layer.pool.reset_slot(int(s))

    def undo(self) -> None:
        """Restores the model: the original single-token functions and mixer forwards."""
        for (modname, name), original in self._patched.items():
            setattr(sys.modules[modname], name, original)
        self._patched.clear()
        for layer in self.layers.values():
            if "forward" in layer.mixer.__dict__:
                del layer.mixer.forward
        self.layers.clear()


def _recurrent_state(cache, idx):
    """Layer idx's SSM state in a transformers cache: `get_recurrent_state` from transformers 5.2x on, the
    layer's `recurrent_states[0]` before (5.17 has only the latter)."""
    if hasattr(cache, "get_recurrent_state"):
        return cache.get_recurrent_state(idx, state_idx=0)
    try:
        return cache.layers[idx].recurrent_states[0]
    except (AttributeError, IndexError, KeyError) as e:
        raise RewriteError(f"cannot read the recurrent state of layer {idx} from a {type(cache).__name__}: "
                           "this transformers version is not supported") from e


def _dispatcher(original, kind):
    """Replacement of a modeling module's single-token function: ReplaySSM for a mixer running under a
    rewrite, the original function for anything else."""
    step = _mamba2_step if kind == "mamba2" else _gdn_step

    def dispatch(*args, **kwargs):
        layer = _ACTIVE.get()
        if layer is None or layer.owner.slot_idx is None:
            return original(*args, **kwargs)
        return step(layer, *args, **kwargs)

    dispatch.__wrapped__ = original
    return dispatch


def _mamba2_step(layer, state, hidden_states, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                 **kwargs):
    """The Mamba-2 mixer's single-token call (head-dim-tied A, D, dt, dt_bias as transformers passes them) on
    the layer's pool. `state` (the model cache's copy) is left untouched: the pool holds the state."""
    act = layer.pool.cfg.act_dtype
    x = hidden_states.to(act).contiguous()
    y = replay_decode(layer.pool, x, dt[..., 0].to(act).contiguous(), B.to(act).contiguous(),
                      C.to(act).contiguous(), A[:, 0, 0].float().contiguous(),
                      D=None if D is None else D[:, 0].float().contiguous(),
                      z=None if z is None else z.to(act).contiguous(),
                      dt_bias=None if dt_bias is None else dt_bias[:, 0].float().contiguous(),
                      dt_softplus=dt_softplus, slot_idx=layer.owner.slot_idx)
    return y.to(hidden_states.dtype)


def _gdn_step(layer, query, key, value, g, beta, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, **kwargs):
    """The GDN mixer's single-token call ([batch, 1, heads, dim] inputs) on the layer's pool; returns the
    model's (output, state) pair with its cache state unchanged (the pool holds the state)."""
    act = layer.pool.cfg.act_dtype
    H = layer.pool.shape.num_k_heads
    if query.shape[2] != H:
        # Some transformers versions (5.17) repeat q and k to the value heads (repeat_interleave) before the
        # call; the pool keeps one key per key head, so take the first copy of each.
        ratio = query.shape[2] // H
        query, key = query[:, :, ::ratio], key[:, :, ::ratio]
    y = gdn_replay_decode(layer.pool, query[:, 0].to(act).contiguous(), key[:, 0].to(act).contiguous(),
                          value[:, 0].to(act).contiguous(), g=g[:, 0].float().contiguous(),
                          beta=beta[:, 0].float().contiguous(), use_qk_l2norm=use_qk_l2norm_in_kernel,
                          slot_idx=layer.owner.slot_idx)
    return y[:, None].to(value.dtype), (initial_state if output_final_state else None)


def rewrite(model: torch.nn.Module, cfg: ReplayConfig | None = None, num_slots: int = 8, device=None) -> ReplayRewrite:
    """Rewrites `model`'s SSM mixers to ReplaySSM decode over per-layer pools of `num_slots` request slots.
    Default configuration: the default buffer length, fp32 checkpoint, activations in the model's dtype."""
    if cfg is None:
        cfg = ReplayConfig(act_dtype=next(model.parameters()).dtype)
    return ReplayRewrite(model, cfg, num_slots, device)
