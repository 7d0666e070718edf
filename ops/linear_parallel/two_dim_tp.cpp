#include "ops/linear_parallel/two_dim_tp.h"

#include <algorithm>
#include <vector>

#include "collops/reduce.h"

namespace collops {

void ValidateTwoDimTPInfo(const std::string& op, const LinearParallelTwoDimTPInfo& info,
                          int rankSize) {
  if (info.agDim < 1 || info.rsDim < 1) {
    Fail(ERROR_INVALID_PARAM, op, ": type = 4 (AG_LINEAR_RS) needs twoDimTPInfo.agDim >= 1 and ",
         "twoDimTPInfo.rsDim >= 1, got agDim = ", info.agDim, ", rsDim = ", info.rsDim);
  }
  if (static_cast<int64_t>(info.agDim) * info.rsDim != rankSize) {
    Fail(ERROR_INVALID_PARAM, op, ": type = 4 (AG_LINEAR_RS) needs twoDimTPInfo.agDim * ",
         "twoDimTPInfo.rsDim = rankSize, got ", info.agDim, " * ", info.rsDim,
         " != rankSize = ", rankSize);
  }
  if (info.innerDimIsAg != 0 && info.innerDimIsAg != 1) {
    Fail(ERROR_INVALID_PARAM, op, ": twoDimTPInfo.innerDimIsAg = ", info.innerDimIsAg,
         " is not 0 (consecutive ranks reduce-scatter) or 1 (consecutive ranks all-gather)");
  }
}

namespace {

/// Runs `work`; an error it throws goes to `abandon` first.
template <class Work>
void Local(const std::function<void(const Error&)>& abandon, Work&& work) {
  try {
    work();
  } catch (const Error& e) {
    abandon(e);
    throw;
  }
}

}  // namespace

void RunAgLinearRs(const TwoDimGrid& grid, Communicator& comm, const AgLinearRsCall& call,
                   const std::function<void(const void*, int64_t, void*)>& multiply,
                   const std::function<void(int64_t)>& finish,
                   const std::function<void(const Error&)>& abandon) {
  const int rankSize = comm.Size();
  const int me = comm.Rank();
  const int agIdx = grid.AgIndex(me), rsIdx = grid.RsIndex(me);
  const int64_t gatheredRows = grid.agDim * call.rows;
  const int64_t blockRows = gatheredRows / grid.rsDim;
  std::vector<int64_t> sendCounts(rankSize, 0), sdispls(rankSize, 0);
  std::vector<int64_t> recvCounts(rankSize, 0), rdispls(rankSize, 0);

  // AllGather within the group of ranks RankAt(a, rsIdx): x of member a lands at block a.
  const void* gathered = call.x;
  if (grid.agDim > 1) {
    const int64_t count = call.rows * call.k;
    for (int a = 0; a < grid.agDim; ++a) {
      const int peer = grid.RankAt(a, rsIdx);
      sendCounts[peer] = count;  // the whole x, from its start, to every member
      recvCounts[peer] = count;
      rdispls[peer] = a * count;
    }
    comm.AllToAllV(call.x, sendCounts.data(), sdispls.data(), call.gathered, recvCounts.data(),
                   rdispls.data(), call.dtype);
    gathered = call.gathered;
  }
  Local(abandon, [&] { multiply(gathered, gatheredRows, call.product); });

  // ReduceScatter within the group of ranks RankAt(agIdx, s): block s of every member's product
  // goes to member s, which sums the rsDim blocks it receives into y.
  if (grid.rsDim > 1) {
    const int64_t count = blockRows * call.n;
    const size_t blockBytes = static_cast<size_t>(count) * DataTypeSize(call.productDtype);
    std::fill(sendCounts.begin(), sendCounts.end(), 0);
    std::fill(recvCounts.begin(), recvCounts.end(), 0);
    for (int s = 0; s < grid.rsDim; ++s) {
      const int peer = grid.RankAt(agIdx, s);
      sendCounts[peer] = count;
      sdispls[peer] = s * count;
      recvCounts[peer] = count;
      rdispls[peer] = s * count;
    }
    comm.AllToAllV(call.product, sendCounts.data(), sdispls.data(), call.received,
                   recvCounts.data(), rdispls.data(), call.productDtype);
    Local(abandon, [&] {
      if (count == 0) return;
      std::vector<const void*> blocks(grid.rsDim);
      for (int s = 0; s < grid.rsDim; ++s)
        blocks[s] = static_cast<const uint8_t*>(call.received) + s * blockBytes;
      ReduceArrays(call.productDtype, ReduceOp::kSum, blocks.data(), blocks.size(), call.y,
                   static_cast<size_t>(count));
    });
  }
  Local(abandon, [&] { finish(blockRows); });
}

}  // namespace collops
