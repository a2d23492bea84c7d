// Parameters of the speculative commits, shared by every family (the cursor layout and a snapshot are family
// independent). POD structs, C compatible; new fields go at the end (part of the C ABI; the *_params_size
// functions check them).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"

#ifdef __cplusplus
extern "C" {
#endif

// ReplaySSM commit: history += accepted[b] in every replica of every head of the row's slot. Rejected drafts
// need no work: their records are overwritten by the next verify.
//
// Out-of-range counts are CLAMPED, never trusted: a = min(max(accepted[b], 0), window), and the new history is
// at most buffer_len - window, so that the next verify's T records always fit in the ring (a verify followed by
// a commit of 1..T never reaches that bound; a corrupted count or a commit without verify gives wrong outputs
// for that row but never indexes outside its ring).
typedef struct rssm_spec_commit_params {
  int32_t batch;        // rows
  int32_t nheads;       // heads of the cursor (Mamba-2: H; GDN: HV)
  int32_t num_slots;    // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;  // slot index of padding rows (normally -1): skipped
  int32_t window;       // T of the verify this commit follows, 1..64
  int32_t buffer_len;   // L, window..64
  int32_t* cursor;           // [num_slots, nheads, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN: history
  const int32_t* accepted;   // [batch] device int32: tokens accepted in each row (1..window)
  const int32_t* slot_idx;   // [batch] or NULL (row b uses slot b)
} rssm_spec_commit_params;

// Snapshot-path commit: state[slot] := snapshots[slot, a - 1] with a = accepted[b] clamped to 1..window.
typedef struct rssm_snapshot_commit_params {
  int32_t batch;
  int32_t num_slots;
  int32_t pad_slot_id;
  int32_t window;            // T: snapshots per slot
  int64_t state_bytes;       // bytes of one slot's state (a multiple of 16)
  void* state;               // [num_slots, state_bytes]. WRITTEN: the slots of non-padding rows
  const void* snapshots;     // [num_slots, window, state_bytes]
  const int32_t* accepted;   // [batch] device int32
  const int32_t* slot_idx;   // [batch] or NULL
} rssm_snapshot_commit_params;

#ifdef __cplusplus
}
#endif
