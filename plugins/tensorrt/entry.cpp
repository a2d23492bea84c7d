// The plugin library's creators: getCreators, as IPluginRegistry::loadLibrary and `trtexec --dynamicPlugins` expect
// it (setLoggerFinder and the registration on load: host.cpp). The library does not link libnvinfer.
#include "commit_plugins.h"
#include "conv1d_plugin.h"
#include "gdn_decode_plugin.h"
#include "gdn_verify_plugin.h"
#include "mamba2_decode_plugin.h"
#include "mamba2_verify_plugin.h"
#include "prefill_plugins.h"

#define RSSM_TRT_EXPORT extern "C" __attribute__((visibility("default")))

RSSM_TRT_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators) {
  using namespace replayssm::trt;
  on_get_creators();
  static Mamba2DecodeCreator mamba2_decode;
  static GdnDecodeCreator gdn_decode;
  static Mamba2VerifyCreator mamba2_verify;
  static GdnVerifyCreator gdn_verify;
  static SpecCommitCreator spec_commit;
  static SnapshotCommitCreator snapshot_commit;
  static Conv1dCreator conv1d;
  static Mamba2PrefillCreator mamba2_prefill;
  static GdnPrefillCreator gdn_prefill;
  static Conv1dPrefillCreator conv1d_prefill;
  static nvinfer1::IPluginCreatorInterface* const creators[] = {
      &mamba2_decode, &gdn_decode, &mamba2_verify,  &gdn_verify,  &spec_commit,
      &snapshot_commit, &conv1d, &mamba2_prefill, &gdn_prefill, &conv1d_prefill};
  nbCreators = static_cast<int32_t>(sizeof(creators) / sizeof(creators[0]));
  return creators;
}
