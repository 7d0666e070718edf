// Communicator backends register a factory by name; operations ask for one through the pool.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collops/comm_params.h"
#include "collops/communicator.h"

namespace collops {

/// Creates this rank's communicator for `param` (rendezvous with the other ranks included).
/// Throws Error (ERROR_TIMEOUT naming missing ranks, ERROR_INVALID_PARAM, ...).
using CommunicatorFactory = std::function<std::shared_ptr<Communicator>(const CommParam&)>;

/// Makes `backend` ("lccl", "mpi", "c10d") available in `mode`. Called from static initialisers
/// of the backend's translation unit, or by the torch binding at import.
bool RegisterCommunicatorBackend(const std::string& backend, CommMode mode,
                                 CommunicatorFactory factory);

/// The concrete backend `param.backend` means here: "hccl" is auto (lccl on one host).
std::string ResolveBackend(const CommParam& param);

/// Creates a communicator through the registered factory. Throws ERROR_BACKEND_UNAVAILABLE
/// naming the backend and mode when none is registered.
std::shared_ptr<Communicator> CreateCommunicator(const CommParam& param);

/// "lccl/thread", ... for every registered backend and mode.
std::vector<std::string> ListCommunicatorBackends();

/// The longest timeout (about 31 years): larger values and infinity count as this, so that a
/// deadline stays representable in the clocks' int64 nanoseconds.
constexpr double kMaxCommTimeoutSeconds = 1e9;

/// COLLOPS_TIMEOUT in seconds (default 300, at most kMaxCommTimeoutSeconds): how long any wait
/// for a peer may last. Read on every call; a value that is not a number of seconds of at least
/// 0.001 (collops/environment.h) throws Error(ERROR_INVALID_PARAM) naming the knob.
double CommTimeoutSeconds();

/// The bound on a communicator's waits: `chosenSeconds` when the caller set one (> 0:
/// CommParam::timeoutSeconds, which the torch backend takes from init_process_group's timeout),
/// else CommTimeoutSeconds(); at most kMaxCommTimeoutSeconds. `*source`, when given, names where it
/// came from, for messages.
double CommTimeoutSeconds(double chosenSeconds, const char** source = nullptr);

}  // namespace collops
