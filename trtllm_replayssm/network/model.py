"""HybridLM: the one network definition of a Nemotron-H or Qwen3.5 model, with explicit state I/O.

    net = load_network("nemotron_h_tiny", device="cuda", mode="replay", replay=ReplayConfig(buffer_len=16))
    state = net.new_state(num_slots=64, max_seq_len=4096)
    logits = net.prefill(state, input_ids, lengths, slot_idx)   # [b, S] right-padded prompts -> [b, vocab]
    logits = net.decode(state, next_ids, positions, slot_idx)   # [b] -> [b, vocab]; CUDA-graph capturable
    net.release(state, finished_slots)

Speculative decoding: a state made with `spec_tokens=T` serves `verify` (T tokens per row: the last accepted one
and T-1 drafts -> [b, T, vocab]) and `commit` (each row's accepted count) instead of `decode`.

The PyTorch runtime (trtllm_replayssm/runtime/) runs it; the engine builder (trtllm_replayssm/builder/) exports
the same layers with the state tensors as engine inputs and aliased outputs. Weights come from a loaded
transformers model (a model directory's safetensors, or seeded random weights for a bundled config or a
directory without weights); nothing is downloaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

from trtllm_replayssm.config import CONV1D_KERNEL_SIZES, SPEC_MAX_WINDOW, SPEC_MIN_WINDOW, ReplayConfig, parse_dtype
from trtllm_replayssm.model_config import DEFAULT_CONFIG, analyze, load_config

from .layers import Attention, FeedForward, GdnMixer, Mamba2Mixer, StepContext
from .state import StateSet
from .state_ops import IN_PLACE

MODES = ("replay", "conventional")


class NetworkError(ValueError):
    """A model or setting the network cannot serve; the message names the layer, field and value."""


class Block(nn.Module):
    """Pre-norm residual block: h + mixer(norm(h)), then (Qwen) h + ffn(post_norm(h))."""

    def __init__(self, norm, mixer, post_norm=None, ffn=None):
        super().__init__()
        self.norm, self.mixer, self.post_norm, self.ffn = norm, mixer, post_norm, ffn

    def forward(self, phase: str, h, ctx: StepContext):
        h = h + getattr(self.mixer, phase)(self.norm(h), ctx)
        if self.ffn is not None:
            h = h + getattr(self.ffn, phase)(self.post_norm(h), ctx)
        return h


class HybridLM(nn.Module):
    """Embedding, blocks, final norm and LM head of a loaded transformers model (module docstring)."""

    def __init__(self, hf, *, mode: str = "replay", replay: ReplayConfig | None = None, name: str = "model",
                 model_dir: Path | None = None):
        super().__init__()
        if mode not in MODES:
            raise NetworkError(f"mode={mode!r} is not supported (supported: {', '.join(MODES)})")
        cfg = hf.config
        self.name, self.mode, self.model_dir, self.model_type = name, mode, model_dir, cfg.model_type
        self.dtype = next(hf.parameters()).dtype
        self.replay = replay or ReplayConfig(act_dtype=self.dtype)
        if self.replay.act_dtype != self.dtype:
            raise NetworkError(f"act_dtype={self.replay.act_dtype} differs from the model's dtype {self.dtype}")
        self.replay.validate()
        text = hf.model
        self.vocab_size = cfg.vocab_size
        eos = getattr(cfg, "eos_token_id", None)
        self.eos_token_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (eos,))
        self.eos_token_id = self.eos_token_ids[0] if self.eos_token_ids else None
        self.lm_head = hf.lm_head
        if cfg.model_type == "nemotron_h":
            self.embed, self.final_norm, self.rotary, apply_rope = text.embeddings, text.norm_f, None, None
            self.blocks = nn.ModuleList(self._nemotron_block(b, i, mode) for i, b in enumerate(text.layers))
        else:
            self.embed, self.final_norm, self.rotary = text.embed_tokens, text.norm, text.rotary_emb
            apply_rope = sys.modules[type(text).__module__].apply_rotary_pos_emb
            self.blocks = nn.ModuleList(self._qwen_block(b, i, mode, apply_rope) for i, b in enumerate(text.layers))

    @staticmethod
    def _nemotron_block(block, i, mode):
        kind = type(block.mixer).__name__
        if kind == "NemotronHMamba2Mixer":
            mixer = Mamba2Mixer(block.mixer, i, mode)
        elif kind == "NemotronHAttention":
            mixer = Attention(block.mixer, i)
        else:
            mixer = FeedForward(block.mixer)
        return Block(block.norm, mixer)

    @staticmethod
    def _qwen_block(layer, i, mode, apply_rope):
        if hasattr(layer, "linear_attn"):
            mixer = GdnMixer(layer.linear_attn, i, mode)
        else:
            mixer = Attention(layer.self_attn, i, apply_rope)
        return Block(layer.input_layernorm, mixer, layer.post_attention_layernorm, FeedForward(layer.mlp))

    # ---- state ----
    def new_state(self, num_slots: int, max_seq_len: int, spec_tokens: int = 0) -> StateSet:
        """Zeroed state for `num_slots` requests of at most `max_seq_len` tokens, on the network's device;
        spec_tokens = T > 0: for speculative decoding (verify / commit) with windows of T tokens."""
        if num_slots < 1 or max_seq_len < 1:
            raise NetworkError(f"num_slots={num_slots} and max_seq_len={max_seq_len} must be >= 1")
        if spec_tokens and not SPEC_MIN_WINDOW <= spec_tokens <= SPEC_MAX_WINDOW:
            raise NetworkError(f"spec_tokens={spec_tokens} is out of range ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW}, "
                               "or 0 for no speculative decoding)")
        if self.mode == "replay" and self.replay.buffer_len < 2 * spec_tokens:
            raise NetworkError(f"buffer_len={self.replay.buffer_len} is too short for spec_tokens={spec_tokens}: "
                               f"the ring must hold 2T records (buffer_len >= {2 * spec_tokens})")
        device = self.lm_head.weight.device
        cfg = self.replay if self.mode == "replay" else ReplayConfig(
            buffer_len=1, state_dtype=self.replay.state_dtype, act_dtype=self.replay.act_dtype)
        state = StateSet(num_slots, max_seq_len, spec_tokens)
        for block in self.blocks:
            m = block.mixer
            if isinstance(m, (Mamba2Mixer, GdnMixer)):
                m.allocate(state, cfg, device)
            elif isinstance(m, Attention):
                m.allocate(state, self.dtype, device)
        return state

    def release(self, state: StateSet, slots) -> None:
        state.release(slots)

    # ---- phases ----
    def _rope(self, h, positions):
        """(cos, sin) at positions [b, S]: the text rotary takes a (3, b, S) grid of positions (temporal, height,
        width: equal for text), which transformers 5.17 requires and later versions accept."""
        if self.rotary is None:
            return None
        return self.rotary(h, positions[None].expand(3, *positions.shape))

    def _logits(self, h):
        return self.lm_head(self.final_norm(h)).float()

    @torch.no_grad()
    def prefill(self, state: StateSet, input_ids, lengths, slot_idx, ops=IN_PLACE):
        """Context phase: input_ids [b, S] int64 right-padded prompts, lengths [b] int32 in 1..S, slot_idx [b]
        int32 (-1: padding row). Every live row's slot starts fresh; afterwards it holds the prompt's SSM state
        as checkpoint (empty ring), conv state and KV entries 0..len-1. Returns [b, vocab] fp32: the logits of
        each row's last prompt token."""
        b, S = input_ids.shape
        if S > state.max_seq_len:
            raise NetworkError(f"prompt of {S} tokens exceeds max_seq_len={state.max_seq_len}")
        h = self.embed(input_ids)
        positions = torch.arange(S, device=h.device)[None].expand(b, S)
        ctx = StepContext(state, slot_idx, state.rows(slot_idx), lengths=lengths, rope=self._rope(h, positions),
                          ops=ops)
        for block in self.blocks:
            h = block("prefill", h, ctx)
        last = (lengths.long() - 1).clamp(min=0)
        return self._logits(h[torch.arange(b, device=h.device), last])

    @torch.no_grad()
    def decode(self, state: StateSet, input_ids, positions, slot_idx, ops=IN_PLACE):
        """Generation phase, one token per row: input_ids [b] int64, positions [b] int (the token's index in its
        sequence), slot_idx [b] int32 (-1: padding row). Returns [b, vocab] fp32. No host synchronisation and
        no data-dependent shapes: capturable in a CUDA graph with static inputs."""
        h = self.embed(input_ids)
        positions = positions.long()
        ctx = StepContext(state, slot_idx, state.rows(slot_idx), positions=positions,
                          rope=self._rope(h[:, None], positions[:, None]), ops=ops)
        for block in self.blocks:
            h = block("decode", h, ctx)
        return self._logits(h)

    @torch.no_grad()
    def verify(self, state: StateSet, input_ids, positions, slot_idx, ops=IN_PLACE):
        """Speculative verify (a state made with spec_tokens=T): input_ids [b, T] int64 (the last accepted token,
        then T-1 drafts) at positions [b] .. [b]+T-1; slot_idx [b] int32. Returns [b, T, vocab] fp32: logits[:, s]
        follow tokens 0..s of the window. Nothing is committed: call `commit` with the accepted counts."""
        b, T = input_ids.shape
        if T != state.spec_tokens:
            raise NetworkError(f"verify of {T} tokens on a state made for spec_tokens={state.spec_tokens}")
        h = self.embed(input_ids)
        positions = positions.long()
        at = positions[:, None] + torch.arange(T, device=h.device)[None]
        ctx = StepContext(state, slot_idx, state.rows(slot_idx), positions=positions, rope=self._rope(h, at), ops=ops)
        for block in self.blocks:
            h = block("verify", h, ctx)
        return self._logits(h)

    @torch.no_grad()
    def commit(self, state: StateSet, accepted, slot_idx, ops=IN_PLACE) -> None:
        """Keeps each row's first accepted[b] tokens (1..T, int32 [b]) of the last verified window; the rest
        is rolled back. The row's next window starts at position + accepted.

        ops: state_ops.IN_PLACE (the state's tensors written in place) or state_ops.FUNCTIONAL (every phase: the
        state's entries rebound to new tensors, one plugin node per SSM / conv1d step; what the export traces)."""
        ctx = StepContext(state, slot_idx, state.rows(slot_idx), accepted=accepted, ops=ops)
        for block in self.blocks:
            block.mixer.commit(ctx)


# ---- loading ----
def _refuse_unsupported(cfg: dict) -> None:
    """Checks what the plan (model_config.analyze) does not: fields the network's layers rely on."""
    text = cfg.get("text_config", cfg)
    try:
        plan = analyze(cfg)
    except ValueError as e:
        raise NetworkError(str(e)) from None
    if plan.model_type == "qwen3_next":
        raise NetworkError("model_type=qwen3_next is not supported by the network definition yet "
                           "(supported: nemotron_h, qwen3_5, qwen3_5_moe)")
    for layer in plan.layers:
        if layer.conv_kernel and layer.conv_kernel not in CONV1D_KERNEL_SIZES:
            raise NetworkError(f"layer {layer.index} ({layer.kind}): conv_kernel={layer.conv_kernel} is not supported "
                               f"(supported: {CONV1D_KERNEL_SIZES})")
    act = text.get("mamba_hidden_act", "silu")
    if plan.of_kind("mamba2") and act != "silu":
        raise NetworkError(f"mamba_hidden_act={act!r} is not supported (the conv1d ops apply SiLU)")
    limit = text.get("time_step_limit")
    if plan.of_kind("mamba2") and limit is not None:
        lo, hi = (float(v) for v in limit)
        if lo > 0 or hi != float("inf"):
            raise NetworkError(f"time_step_limit={[lo, hi]} is not supported (the ops do not clamp dt)")


def _decode_floats(value):
    """A config with transformers' JSON encoding of non-finite floats ({"__float__": "Infinity"}, as
    save_pretrained writes them) decoded to floats."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return value


def _hf_classes(cfg: dict):
    import transformers

    mt = cfg["model_type"]
    if mt == "nemotron_h":
        return transformers.NemotronHConfig, transformers.NemotronHForCausalLM
    if mt in ("qwen3_5", "qwen3_5_text"):
        return transformers.Qwen3_5TextConfig, transformers.Qwen3_5ForCausalLM
    if mt in ("qwen3_5_moe", "qwen3_5_moe_text"):
        return transformers.Qwen3_5MoeTextConfig, transformers.Qwen3_5MoeForCausalLM
    raise NetworkError(f"model_type={mt!r} is not supported (supported: nemotron_h, qwen3_5, qwen3_5_moe)")


# Checkpoint name prefixes and the module names they load into: multimodal Qwen3.5 checkpoints keep the text
# model under model.language_model; Nemotron-H checkpoints name it backbone.
_WEIGHT_PREFIXES = (("model.language_model.", "model."), ("backbone.", "model."))


def _load_weights(hf, model_dir: Path) -> None:
    """The directory's safetensors into `hf` (names of text-only or multimodal checkpoints); every parameter
    must be found, except an LM head tied to the embedding."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        for k, v in load_file(str(f)).items():
            for saved, ours in _WEIGHT_PREFIXES:
                if k.startswith(saved):
                    k = ours + k[len(saved):]
                    break
            state[k] = v
    missing, _ = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and hf.config.tie_word_embeddings)]
    if missing:
        raise NetworkError(f"{model_dir}: the safetensors lack {len(missing)} weights, e.g. {missing[0]}")
    if hf.config.tie_word_embeddings:
        hf.tie_weights()


def load_network(model=None, *, device="cpu", mode: str = "replay", replay: ReplayConfig | None = None,
                 dtype=None, seed: int = 0) -> HybridLM:
    """The network of `model`: None (the bundled default), a bundled config name, or a directory / config.json
    (safetensors beside it are loaded; without them, seeded random weights). dtype: the activations' and
    weights' dtype (default fp32 on CPU, the config's dtype on CUDA). replay: ring length and state / read
    precisions (its act_dtype is set to dtype). Refuses an unsupported model before building anything."""
    if mode not in MODES:
        raise NetworkError(f"mode={mode!r} is not supported (supported: {', '.join(MODES)})")
    try:
        cfg = load_config(model)
    except (FileNotFoundError, json.JSONDecodeError) as e:
        raise NetworkError(str(e)) from None
    cfg = _decode_floats(cfg)
    _refuse_unsupported(cfg)
    device = torch.device(device)
    text = dict(cfg.get("text_config", cfg))
    if dtype is None:
        dtype = torch.float32 if device.type == "cpu" else parse_dtype(
            {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(text.get("torch_dtype"), "bf16"))
    dtype = parse_dtype(dtype)
    config_cls, model_cls = _hf_classes(text if "text_config" in cfg else cfg)
    fields = {k: v for k, v in text.items() if not k.startswith("_") and k not in ("architectures", "model_type")}
    hf_cfg = config_cls(**fields)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = model_cls(hf_cfg).eval()
    path = Path(model) if model is not None and Path(str(model)).exists() else None
    model_dir = (path if path.is_dir() else path.parent) if path is not None else None
    if model_dir is not None and any(model_dir.glob("*.safetensors")):
        _load_weights(hf, model_dir)
    hf = hf.to(dtype=dtype)
    rcfg = replay or ReplayConfig()
    rcfg = ReplayConfig(rcfg.buffer_len, rcfg.state_dtype, dtype, rcfg.read_format, rcfg.latency_route_bytes)
    name = model_dir.name if model_dir is not None else (model or DEFAULT_CONFIG)
    return HybridLM(hf, mode=mode, replay=rcfg, name=str(name), model_dir=model_dir).to(device).eval()
