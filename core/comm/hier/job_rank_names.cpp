#include "core/comm/hier/job_rank_names.h"

#include <numeric>
#include <utility>

#include "collops/status.h"
#include "core/comm/shm/rank_list.h"

namespace collops {
namespace hier {
namespace {

class JobRankNames final : public Communicator {
 public:
  JobRankNames(std::shared_ptr<Communicator> inner, std::string note)
      : inner_(std::move(inner)), note_(std::move(note)) {}

  std::string BackendName() const override { return inner_->BackendName(); }
  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  bool Broken() const override { return inner_->Broken(); }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override {
    AppendingNote([&] { inner_->AllGatherBytes(in, out, bytes); });
  }
  void AllReduce(const void* in, void* out, size_t count, DataType dtype, ReduceOp op) override {
    AppendingNote([&] { inner_->AllReduce(in, out, count, dtype, op); });
  }
  void AllGatherV(const void* in, size_t sendCount, void* out, const int64_t* recvCounts,
                  const int64_t* rdispls, DataType dtype) override {
    AppendingNote([&] { inner_->AllGatherV(in, sendCount, out, recvCounts, rdispls, dtype); });
  }
  void ReduceScatterV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                      size_t recvCount, DataType dtype, ReduceOp op) override {
    AppendingNote(
        [&] { inner_->ReduceScatterV(in, sendCounts, sdispls, out, recvCount, dtype, op); });
  }
  void AllToAllV(const void* in, const int64_t* sendCounts, const int64_t* sdispls, void* out,
                 const int64_t* recvCounts, const int64_t* rdispls, DataType dtype) override {
    AppendingNote(
        [&] { inner_->AllToAllV(in, sendCounts, sdispls, out, recvCounts, rdispls, dtype); });
  }
  void Broadcast(void* buf, size_t count, DataType dtype, int root) override {
    AppendingNote([&] { inner_->Broadcast(buf, count, dtype, root); });
  }
  void Send(const void* buf, size_t count, DataType dtype, int peer) override {
    AppendingNote([&] { inner_->Send(buf, count, dtype, peer); });
  }
  void Recv(void* buf, size_t count, DataType dtype, int peer) override {
    AppendingNote([&] { inner_->Recv(buf, count, dtype, peer); });
  }
  void Exchange(const std::vector<PointToPoint>& ops) override {
    AppendingNote([&] { inner_->Exchange(ops); });
  }
  void Barrier() override {
    AppendingNote([&] { inner_->Barrier(); });
  }
  void Agree(const CallSignature& mine) override {
    AppendingNote([&] { inner_->Agree(mine); });
  }
  std::shared_ptr<Communicator> Split(int color, int key) override {
    return inner_->Split(color, key);
  }
  void* AllocateShared(size_t bytes) override { return inner_->AllocateShared(bytes); }
  bool FreeShared(void* p) override { return inner_->FreeShared(p); }
  void Progress() override { inner_->Progress(); }
  void SetIdleHook(std::function<void()> hook) override { inner_->SetIdleHook(std::move(hook)); }
  void Abort(Status status, const std::string& why) override { inner_->Abort(status, why); }
  void SetFailureHook(std::function<void(Status, const std::string&)> hook) override {
    inner_->SetFailureHook(std::move(hook));
  }

 private:
  template <class Body>
  void AppendingNote(Body&& body) {
    try {
      body();
    } catch (const Error& e) {
      throw Error(e.status(), Concat(e.what(), note_));
    }
  }

  std::shared_ptr<Communicator> inner_;
  std::string note_;
};

}  // namespace

std::shared_ptr<Communicator> WithJobRankNames(std::shared_ptr<Communicator> inner,
                                               const std::string& scope,
                                               const std::vector<int>& jobRanks) {
  std::vector<int> local(jobRanks.size());
  std::iota(local.begin(), local.end(), 0);
  const std::string ranks =
      shm::ListRanks(local, [&](int i) { return Concat(i, " = ", jobRanks[i]); });
  return std::make_shared<JobRankNames>(
      std::move(inner),
      Concat(" [rank numbers above are within ", scope, "; in the job: ", ranks, "]"));
}

}  // namespace hier
}  // namespace collops
