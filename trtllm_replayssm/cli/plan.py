"""`trtllm-replayssm plan`: per-request memory and the most concurrent requests per decoding mode."""

from __future__ import annotations

from dataclasses import replace

from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import MAX_BUFFER_LEN, SPEC_MAX_WINDOW, SPEC_MIN_WINDOW, ReplayConfig
from trtllm_replayssm.planner import MODES, PlanSettings, max_requests, replay_spec_ratio_bound, request_bytes

MAX_GB = 1e6


def register(sub):
    p = sub.add_parser("plan", help="per-request memory and max concurrent requests for each decoding mode")
    cli.add_model(p)
    p.add_argument("--context", type=cli.int_range(1, cli.MAX_CONTEXT), default=8192,
                   help="context length per request in tokens (default %(default)s)")
    p.add_argument("--gpu-mem-gb", type=cli.float_range(0, MAX_GB, lo_open=True), default=141.0,
                   help="GPU memory budget (GB, 1e9 bytes; default %(default)s)")
    p.add_argument("--weight-gb", type=cli.float_range(0, MAX_GB), default=0.0,
                   help="memory taken by weights and workspace (GB; default %(default)s)")
    p.add_argument("--T", type=cli.int_range(SPEC_MIN_WINDOW, SPEC_MAX_WINDOW), default=4,
                   help=f"tokens per speculative step, 1 + drafts ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW}, "
                        f"default %(default)s)")
    cli.add_replay(p)
    p.add_argument("--spec-buffer-len", type=cli.int_range(2 * SPEC_MIN_WINDOW, MAX_BUFFER_LEN), default=None,
                   help=f"speculative ring length, at least 2T and at most {MAX_BUFFER_LEN} "
                        f"(default --buffer-len + --T)")
    p.set_defaults(func=main)


def main(args) -> int:
    model = cli.load_model(args.config)
    s = PlanSettings(context_len=args.context, T=args.T, buffer_len=args.buffer_len,
                     spec_buffer_len=args.spec_buffer_len, state_dtype=args.state_dtype, act_dtype=args.act_dtype)
    with cli.usage_errors():
        spec_len = s.ring_len("replay_spec")  # at least 2T
        if spec_len > MAX_BUFFER_LEN:
            raise cli.UsageError(f"the speculative ring of --buffer-len + --T = {spec_len} records exceeds "
                                 f"{MAX_BUFFER_LEN}: give --spec-buffer-len")
        ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype).validate()
        if args.weight_gb >= args.gpu_mem_gb:
            raise cli.UsageError(f"--weight-gb {args.weight_gb:g} leaves nothing of --gpu-mem-gb {args.gpu_mem_gb:g}")
    gpu, weights = args.gpu_mem_gb * 1e9, args.weight_gb * 1e9
    counts = {k: len(model.of_kind(k)) for k in ("mamba2", "gdn", "attention")}
    print(f"{model.model_type}: {counts['mamba2']} Mamba-2, {counts['gdn']} GDN, {counts['attention']} attention "
          f"layers; context {s.context_len}, T={s.T}, L={s.buffer_len}, spec L={s.ring_len('replay_spec')}, "
          f"state {s.state_dtype}, activations {s.act_dtype}; {args.gpu_mem_gb:g} GB GPU, {args.weight_gb:g} GB weights")
    print(f"{'mode':<18} {'SSM MiB':>9} {'conv MiB':>9} {'KV MiB':>9} {'total MiB':>10} {'max requests':>13}")
    base = None
    for mode in MODES:
        b = request_bytes(model, mode, s)
        n = max_requests(model, mode, s, gpu, weights)
        if mode == "conventional_spec":
            base = n
        ratio = f"  ({n / base:.2f}x conventional spec)" if base and mode == "replay_spec" else ""
        print(f"{mode:<18} {b['ssm'] / 2**20:9.1f} {b['conv'] / 2**20:9.2f} {b['kv'] / 2**20:9.1f} "
              f"{b['total'] / 2**20:10.1f} {n:13d}{ratio}")
    # The speculative ring's length trades requests for flushes (a row flushes when h + 2T > L): from the
    # smallest ring, 2T (every step with committed history flushes), to the default L + T.
    step = max(1, s.T // 2)
    rings = list(range(2 * s.T, max(2 * s.T, min(s.buffer_len + s.T, MAX_BUFFER_LEN)) + 1, step))
    cells = []
    for L in rings:
        n = max_requests(model, "replay_spec", replace(s, spec_buffer_len=L), gpu, weights)
        cells.append(f"L={L}: {n} ({n / base:.2f}x)" if base else f"L={L}: {n}")
    print("replay_spec requests by speculative ring length: " + ", ".join(cells))
    print(f"bound on the replay_spec / conventional_spec ratio whatever the ring costs (checkpoints, conv and KV "
          f"kept): {replay_spec_ratio_bound(model, s):.2f}x")
    return 0
