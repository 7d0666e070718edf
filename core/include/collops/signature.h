// Cross-rank agreement: before moving data, every rank shares a small description of the call it
// is about to make, and every rank checks all of them, so ranks that disagree all fail with the
// same ERROR_RANK_MISMATCH message instead of hanging or corrupting memory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collops/communicator.h"
#include "collops/status.h"
#include "collops/tensor.h"

namespace collops {

struct CallSignature {
  std::string opName;                 ///< must be equal on every rank
  DataType dtype = ACL_DT_UNDEFINED;  ///< must be equal on every rank
  int root = -1;                      ///< must be equal on every rank; -1 = the op has no root
  int64_t count = -1;                 ///< element count every rank must agree on; -1 = unchecked
  /// Digest of values every rank must pass equal (quantised AllReduce: its scale and offset);
  /// 0 = unchecked. `valuesField` names them in the mismatch message (at most 23 characters).
  uint64_t valuesDigest = 0;
  std::string valuesField;
  std::vector<int64_t> sendCounts;  ///< elements this rank sends to rank j; empty = unchecked
  std::vector<int64_t> recvCounts;  ///< elements this rank expects from rank j
  /// Nonzero when this rank failed its own checks for this call (the Status it failed with): it
  /// still takes part in the exchange so its peers fail at once instead of waiting for it.
  int32_t failedStatus = 0;
  std::string sendField = "sendCounts";  ///< param names used in the mismatch message
  std::string recvField = "recvCounts";
};

/// "<op>/<reduction>": the opName of a reducing call's signature. Built without a stream: every
/// Execute builds one, and a stream would cost a large part of a small AllReduce's own work.
std::string ReducingOpName(const char* op, ReduceOp reduction);

/// Exchanges `mine` with every rank of `comm` now (one AllGatherBytes) and throws
/// Error(ERROR_RANK_MISMATCH) when any two ranks disagree; the message names both ranks and both
/// values and is identical on every rank. When some rank's record carries failedStatus, every
/// rank throws ERROR_RANK_MISMATCH naming the lowest such rank and its Status.
void VerifyAgreement(Communicator& comm, const CallSignature& mine);

/// VerifyAgreement that keeps what it gathered: rank r's record at r * AgreementRecordBytes(R).
/// For a backend that needs every rank's counts right after the check (hierarchical AllToAllV):
/// it reads them with RecordedCount instead of exchanging them a second time.
std::vector<uint8_t> ExchangeAgreement(Communicator& comm, const CallSignature& mine);
/// ExchangeAgreement among `rankSize` ranks through `gather(in, out, bytes)`, an AllGatherBytes
/// of the caller's (lccl thread mode names its wait after the call being checked).
std::vector<uint8_t> ExchangeAgreement(
    int rankSize, const CallSignature& mine,
    const std::function<void(const void* in, void* out, size_t bytes)>& gather);

/// For a rank whose own checks failed: tells the peers (Communicator::Agree with failedStatus,
/// which exchanges at once) so they fail fast, and swallows what the exchange reports; the caller
/// then rethrows its own error.
void ShareLocalFailure(Communicator& comm, const std::string& opName, Status status);

// The wire form, for backends that carry the record inside their own synchronisation instead of
// an AllGatherBytes (Communicator::Agree).

/// Bytes of one rank's record in a group of `rankSize`: a fixed header and 2 * rankSize counts.
size_t AgreementRecordBytes(int rankSize);
/// Writes the record of `mine` (AgreementRecordBytes(rankSize) bytes) to `record`.
void EncodeAgreement(const CallSignature& mine, int rankSize, uint8_t* record);
/// The check VerifyAgreement runs on the gathered records: rank r's record starts at
/// `records + r * stride`. Throws Error(ERROR_RANK_MISMATCH) as VerifyAgreement does; every rank
/// that checks the same records reports the same first disagreement.
void CheckAgreementRecords(const uint8_t* records, size_t stride, int rankSize,
                           const CallSignature& mine);
/// Entry j of the sendCounts (`recv` false) or recvCounts (`recv` true) that `record` carries.
int64_t RecordedCount(const uint8_t* record, int rankSize, bool recv, int j);

}  // namespace collops
