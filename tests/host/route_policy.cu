// Prints the replay step's route choice (heads per output-only block, 0: the combined kernel) for one launch, from
// the library's own host policy (mamba2/decode.cuh and gdn/decode.cuh output_only_heads). Host code only: built
// and run by tests/test_route_policy.py on machines with nvcc, GPU or not.
// gdn_tail / mamba2_tail print the rows of the tail launch instead (output_only_tail; 0 without the route).
// Usage: route_policy mamba2|mamba2_nvfp4|mamba2_tail|gdn|gdn_tail BATCH NHEADS ROWS_PER_HEAD MOST_HEADS_PER_BLOCK SMS
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "replayssm/gdn/decode.cuh"
#include "replayssm/mamba2/decode.cuh"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s mamba2|mamba2_nvfp4|mamba2_tail|gdn|gdn_tail batch nheads rows_per_head most sms\n", argv[0]);
    return 2;
  }
  const char* family = argv[1];
  const int batch = std::atoi(argv[2]), nheads = std::atoi(argv[3]), rows = std::atoi(argv[4]);
  const int most = std::atoi(argv[5]), sms = std::atoi(argv[6]);
  int heads = -1;
  if (!std::strcmp(family, "gdn") || !std::strcmp(family, "gdn_tail")) {
    rssm_gdn_decode_params p{};
    p.batch = batch;
    p.num_v_heads = nheads;
    p.head_v_dim = rows;
    heads = replayssm::gdn::output_only_heads(p, most, sms);
    if (!std::strcmp(family, "gdn_tail")) heads = heads > 0 ? replayssm::gdn::output_only_tail(p, heads, sms) : 0;
  } else {
    rssm_mamba2_decode_params p{};
    p.batch = batch;
    p.nheads = nheads;
    p.head_dim = rows;
    namespace oo = replayssm::mamba2::output_only;
    const bool tail = !std::strcmp(family, "mamba2_tail");
    heads = !std::strcmp(family, "mamba2") || tail ? replayssm::mamba2::output_only_heads<oo::Fp32Read>(p, most, sms)
            : !std::strcmp(family, "mamba2_nvfp4") ? replayssm::mamba2::output_only_heads<oo::Nvfp4Mma>(p, most, sms)
                                                   : -1;
    if (tail) heads = heads > 0 ? replayssm::mamba2::output_only_tail<oo::Fp32Read>(p, heads, sms) : 0;
  }
  if (heads < 0) {
    std::fprintf(stderr, "unknown family %s\n", family);
    return 2;
  }
  std::printf("%d\n", heads);
  return 0;
}
