// libFuzzer harness: collops_json_demo's input files (examples/cpp/json_demo_file.h), read as the
// demo reads them.
//
// Input: a demo file's text, parsed as the demo parses it. Every rank's part of a file of up to 8
// ranks is read (its param and its input tensors, filled from "data") and rendered, and its op is
// created; a file of one rank is run whole, as the demo runs it (a thread-mode communicator of one
// rank needs no peers), in a Context of its own. A refusal is any std::exception (the demo prints
// it and exits non-zero); a crash, a sanitizer report, a leak or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "collops/collops.h"
#include "json_demo_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json spec;
  try {
    spec = collops_demo::ParseDemoText(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception&) {
    return 0;
  }
  const int rankSize = static_cast<int>(spec["ranks"].size());
  if (rankSize > 8) return 0;
  for (int rank = 0; rank < rankSize; ++rank) {
    try {
      const collops_demo::DemoRank mine = collops_demo::ReadDemoRank(spec, rank, rankSize);
      for (const collops_demo::OwnedTensor& t : mine.inputs) collops_demo::Render(t);
      collops::MakeOperation(mine.opName, mine.param);
    } catch (const std::exception&) {
    }
  }
  if (rankSize == 1) {
    collops::Context* context = nullptr;
    if (collops::CreateContext(&context) != collops::NO_ERROR) return 0;
    try {
      collops_demo::RunDemoRank(spec, 0, 1, context);
    } catch (const std::exception&) {
    }
    collops::DestroyContext(context);
  }
  return 0;
}
