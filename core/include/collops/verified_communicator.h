// VerifiedCommunicator: a Communicator that runs the cross-rank agreement check (signature.h)
// before every collective and then delegates to the communicator it wraps. Operations do their
// own check (they know the op's field names); callers that drive a communicator directly, such as
// the torch.distributed backend, wrap it in this so ranks whose calls disagree get
// ERROR_RANK_MISMATCH instead of a hang, a lost peer or a silently wrong result.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "collops/communicator.h"
#include "collops/reduce.h"

namespace collops {

class VerifiedCommunicator final : public Communicator {
 public:
  /// `label` prefixes the messages ("torch.distributed collops"); `inner` must not be null.
  VerifiedCommunicator(std::shared_ptr<Communicator> inner, std::string label);

  std::string BackendName() const override { return inner_->BackendName(); }
  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  bool Broken() const override { return inner_->Broken(); }
  void* AllocateShared(size_t bytes) override { return inner_->AllocateShared(bytes); }
  bool FreeShared(void* p) override { return inner_->FreeShared(p); }
  void Progress() override { inner_->Progress(); }
  void SetIdleHook(std::function<void()> hook) override { inner_->SetIdleHook(std::move(hook)); }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override;
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override;
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override;
  /// AllGatherV agreed on under `purpose` rather than "AllGatherV": a collective built from a
  /// gather (the torch backend's bitwise all-reduce) names what it is, so ranks calling another
  /// collective, or a plain gather of the same size, get ERROR_RANK_MISMATCH.
  void AllGatherVAs(const std::string& purpose, const void* in, size_t sendCount, void* out,
                    const int64_t* recvCounts, const int64_t* rdispls, DataType dtype);
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override;
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override;
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override;
  /// Point to point is checked pairwise by the wrapped communicator itself.
  void Send(const void* buf, size_t count, DataType dtype, int peer) override;
  void Recv(void* buf, size_t count, DataType dtype, int peer) override;
  void Exchange(const std::vector<PointToPoint>& ops) override;
  void Barrier() override;

 private:
  // The signature names of every call ("<label> AllReduce/sum"), built once with the
  // communicator: a call copies its name instead of building it.
  static constexpr size_t kReduceOps = 4;  // ReduceOp's values, 0..3
  struct Names {
    std::string allGatherBytes, allGatherV, allToAllV, broadcast, barrier;
    std::array<std::string, kReduceOps> allReduce, reduceScatterV;
  };

  std::string Name(const char* primitive) const;
  // AllGatherV agreed on as `name`.
  void Gather(std::string name, const void* in, size_t sendCount, void* out,
              const int64_t* recvCounts, const int64_t* rdispls, DataType dtype);
  /// Sets `*name` to names[op], or to the name built for this call when `op` is outside
  /// ReduceOp's values. Assigned, not returned: a string that already holds a buffer large enough
  /// (a signature reused from call to call) keeps it.
  void Reducing(const std::array<std::string, kReduceOps>& names, const char* primitive,
                ReduceOp op, std::string* name) const;

  std::shared_ptr<Communicator> inner_;
  std::string label_;
  Names names_;
};

}  // namespace collops
