"""Checks shared by the read-copy tests of both families (CPU: test_read_copy.py; decode kernels:
test_read_copy_kernels.py for Mamba-2, test_gdn_read_copy_kernels.py for GDN; verify kernels:
test_*_verify_read_copy_kernels.py): what a replay step may write in a pool with a read copy, and how far its
outputs may move from those of the same step reading the fp32 checkpoint."""

import torch

# Unit roundoff u of each read format: the largest relative rounding error of a stored state value against the
# scale it is stored at. fp16 (10 mantissa bits) 2^-11 and bf16 (7 bits) 2^-8 of the value itself; fp8 e4m3
# (3 bits, behind an fp32 scale per state row) 2^-4 of the value; nvfp4 (e2m1 codes 0, 0.5 .. 6 behind an e4m3
# scale per block of 16 values) ~2^-2 of the block's largest value (half the step from 4 to 6, a sixth of it,
# plus the e4m3 scale's own rounding).
READ_COPY_UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp8": 2.0 ** -4, "nvfp4": 2.0 ** -2}
# Unit roundoff of the activation dtype y is stored in.
ACT_UNIT = {torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def read_copy_tol(fmt, act_dtype=torch.float32):
    """Bound of the norm-relative difference between the outputs of steps reading the copy and reading the
    checkpoint. y is a sum of products with the state, so its norm-relative error is about the rms relative error
    of the state values read, u / sqrt(3) for round-to-nearest errors spread evenly over +-u: measured 0.4-0.56 u
    for every format on the CPU references of both families (decode and verify); the bound is u. Outputs stored in
    a 16-bit activation dtype round on each side: plus two of its unit roundoffs."""
    return READ_COPY_UNIT[fmt] + 2 * ACT_UNIT[act_dtype]

from trtllm_replayssm.quant import quantize_state


def buffer_bytes(t):
    """A buffer's bytes: comparisons of bits, also where a value is a NaN (e.g. a stale fp16 fill of 0x7E7E)."""
    return t.contiguous().view(torch.uint8)


def sync_copies(dst, src):
    """dst's read-copy buffers := src's (the reference pool then reads what the kernel wrote)."""
    for name in dst.buffers:
        if name.startswith("read_"):
            dst.buffers[name].copy_(src.buffers[name])


def check_slots_after_step(pool, before, slots, L, check_flushed, where, flushes=None):
    """After one replay step over `slots` (-1: padding) from `before` (a clone taken just before it): unused slots
    untouched in every buffer; slots that did not flush keep checkpoint and copy bit for bit; for every flushed
    slot s, check_flushed(s) (the family's check of the new copy). flushes(h): whether a slot with history h before
    the step rewrites its checkpoint (default: a decode step, h >= L-1; a verify of T tokens: h > 0 and
    h + 2T > L)."""
    live = slots >= 0
    used = set(slots[live].tolist())
    hist_before = before.history()
    for s in range(pool.num_slots):
        if s not in used:
            for name, t in pool.buffers.items():
                assert torch.equal(buffer_bytes(t[s]), buffer_bytes(before.buffers[name][s])), \
                    f"{where}: unused slot {s} {name}"
        elif not (flushes(int(hist_before[s])) if flushes else int(hist_before[s]) >= L - 1):
            for name in pool.buffers:
                if name == "checkpoint" or name.startswith("read_"):
                    assert torch.equal(buffer_bytes(pool.buffers[name][s]), buffer_bytes(before.buffers[name][s])), \
                        f"{where}: {name} of non-flush slot {s} changed"
        else:
            check_flushed(s)


def with_quantised_copies(pool):
    """The pool, its read copies holding the quantised checkpoints (as reset_slot leaves them)."""
    for s in range(pool.num_slots):
        pool.write_read_copy(s, pool.checkpoint[s])
    return pool


def spread_histories(pool, T):
    """Histories spread evenly over 0 .. L-T by slot (both ends included: windows from the checkpoint to the ring's
    last one, the upper ones folding at once), origins random."""
    n, L, dev = pool.num_slots, pool.buffer_len, pool.cursor.device
    pool.set_cursor(slice(None), torch.linspace(0, L - T, n, device=dev).round().to(torch.int32),
                    torch.randint(0, L, (n,), device=dev, dtype=torch.int32))


def check_copy_matches_quantiser(pool, s, fmt, where):
    """The copy of slot s equals quantize_state of its stored fp32 checkpoint, bit for bit."""
    for name, part in quantize_state(pool.checkpoint[s].float(), fmt).items():
        assert torch.equal(buffer_bytes(pool.buffers[name][s]), buffer_bytes(part)), f"{where}: {name} of slot {s}"


def verify_folds(T, L):
    """Whether a verify of T tokens folds a row with history h into its checkpoint: h > 0 and h + 2T > L."""
    return lambda h: h > 0 and h + 2 * T > L
