#include "collops/context.h"

#include "collops/backend.h"

namespace collops {

std::shared_ptr<Communicator> CommunicatorPool::Get(const CommParam& param) {
  if (param.comm != nullptr) {
    if (param.comm->Size() != param.rankSize || param.comm->Rank() != param.rank) {
      Fail(ERROR_INVALID_PARAM, "the caller's communicator is rank ", param.comm->Rank(), " of ",
           param.comm->Size(), " but the params say rank ", param.rank, " of rankSize ",
           param.rankSize);
    }
    // Aliasing constructor with no owner: the caller owns the communicator, we never free it.
    return std::shared_ptr<Communicator>(std::shared_ptr<Communicator>(), param.comm);
  }
  const Key key{ResolveBackend(param), param.commDomain, param.rankSize, param.rank,
                static_cast<int>(param.commMode)};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = communicators_.find(key);
    if (it != communicators_.end() && !it->second->Broken()) return it->second;
  }
  // Created outside the lock: creation waits for the other ranks, which may be threads that
  // need this same pool meanwhile.
  std::shared_ptr<Communicator> comm = CreateCommunicator(param);
  if (comm->Size() != param.rankSize || comm->Rank() != param.rank) {
    Fail(ERROR_INTERNAL_ERROR, "backend ", comm->BackendName(), " made rank ", comm->Rank(), " of ",
         comm->Size(), " for rank ", param.rank, " of ", param.rankSize);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  communicators_[key] = comm;
  return comm;
}

std::shared_ptr<Communicator> CommunicatorPool::Find(const CommParam& param) {
  if (param.comm != nullptr) return Get(param);
  const Key key{ResolveBackend(param), param.commDomain, param.rankSize, param.rank,
                static_cast<int>(param.commMode)};
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = communicators_.find(key);
  return (it != communicators_.end() && !it->second->Broken()) ? it->second : nullptr;
}

size_t CommunicatorPool::Release(const std::optional<std::string>& commDomain) {
  // Destroyed after the lock is let go: a communicator's teardown may take a while, and other
  // threads (ranks of thread mode) may need the pool meanwhile.
  std::vector<std::shared_ptr<Communicator>> released;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = communicators_.begin(); it != communicators_.end();) {
    if (commDomain.has_value() && std::get<1>(it->first) != *commDomain) {
      ++it;
      continue;
    }
    released.push_back(std::move(it->second));
    it = communicators_.erase(it);
  }
  return released.size();
}

uint8_t* Context::Workspace(uint64_t bytes) {
  if (workspace_.size() < bytes) workspace_.resize(bytes);
  return workspace_.data();
}

Status CreateContext(Context** context) {
  if (context == nullptr) {
    SetLastErrorMessage("CreateContext: the output pointer is null");
    return ERROR_INVALID_CONTEXT_ADDR;
  }
  return Guarded([&] { *context = new Context; });
}

Status DestroyContext(Context* context) {
  delete context;
  return NO_ERROR;
}

Context& DefaultContext() {
  // Leaked on purpose: communicators may be in use by other threads while statics are destroyed.
  static Context* context = new Context;
  return *context;
}

}  // namespace collops
