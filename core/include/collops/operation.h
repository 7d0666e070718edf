// The Operation interface, as ATB's atb::Operation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collops/status.h"
#include "collops/tensor.h"

namespace collops {

class Context;

/// One configured collective. Lifecycle: create (params parsed and validated, no communication)
/// -> InferShape (pure) -> Setup (host counts read and checked, communicator acquired, workspace
/// sized for what that communicator runs) -> Execute (cross-rank agreement check, local copy, then
/// peers). Execute on CPU is synchronous. An Operation object is used by one thread at a time, and
/// so are all the ops that share a communicator (same commDomain and Context): see ExclusiveUse in
/// communicator.h.
class Operation {
 public:
  virtual ~Operation() = default;
  /// The registered name, e.g. "AllToAllVV2Operation".
  virtual std::string GetName() const = 0;
  virtual uint32_t GetInputNum() const = 0;
  virtual uint32_t GetOutputNum() const = 0;
  /// Output descriptions for these inputs; touches no data and no communicator.
  virtual Status InferShape(const std::vector<TensorDesc>& inTensorDescs,
                            std::vector<TensorDesc>& outTensorDescs) const = 0;
  /// Checks the tensors (counts, dims, dtypes, sizes, host counts), acquires the communicator and
  /// sizes the workspace (for what that communicator runs itself). `context` may be null: the
  /// process' default context is used.
  virtual Status Setup(const VariantPack& variantPack, uint64_t& workspaceSize,
                       Context* context) = 0;
  /// Runs the collective on tensors shaped as in the last Setup, with a workspace of at least the
  /// size Setup returned.
  virtual Status Execute(const VariantPack& variantPack, uint8_t* workspace, uint64_t workspaceSize,
                         Context* context) = 0;
};

}  // namespace collops
