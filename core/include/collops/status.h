// Status codes and error reporting shared by every layer of collops.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace collops {

/// Result of every public call. Numbering follows ATB's ErrorType so ATB callers can compare codes
/// directly; collops' own additions start at 100.
enum Status : int32_t {
  NO_ERROR = 0,
  ERROR_INVALID_PARAM = 1,
  ERROR_INTERNAL_ERROR = 3,
  ERROR_INVALID_IN_TENSOR_NUM = 5,
  ERROR_INVALID_TENSOR_DTYPE = 6,
  ERROR_INVALID_TENSOR_FORMAT = 7,
  ERROR_INVALID_TENSOR_DIM = 8,
  ERROR_INVALID_TENSOR_SIZE = 9,
  ERROR_INVALID_TENSOR_INI_MATCH = 13,
  ERROR_INVALID_TENSOR_ADDR = 14,
  ERROR_INVALID_TENSOR_NUM = 15,
  ERROR_INVALID_TENSOR_DIM_NUM = 16,
  ERROR_INVALID_CONTEXT_ADDR = 19,
  ERROR_INVALID_WORKSPACE_SIZE = 22,
  ERROR_INVALID_WORKSPACE_ADDR = 23,
  ERROR_COMM_FAIL = 25,  ///< ATB's ERROR_HCCL_FAIL
  ERROR_OUT_OF_HOST_MEMORY = 27,
  ERROR_COMM_EMPTY = 28,
  ERROR_TIMEOUT = 100,              ///< a peer did not arrive within COLLOPS_TIMEOUT seconds
  ERROR_PEER_LOST = 101,            ///< a peer process died or left the communicator
  ERROR_RANK_MISMATCH = 102,        ///< ranks disagree on op, dtype, root or counts
  ERROR_BACKEND_UNAVAILABLE = 103,  ///< backend not built, not reachable, or lacks the primitive
};

/// "ERROR_INVALID_PARAM" for ERROR_INVALID_PARAM; "UNKNOWN_STATUS" for values outside the enum.
const char* StatusName(int32_t status);

/// The message of the last failing call made by this thread: what failed, where, and which field
/// or rank. Cleared to "" by every public call that succeeds.
const std::string& LastErrorMessage();
void SetLastErrorMessage(std::string message);
/// SetLastErrorMessage(""), without making and checking a string: every successful call does it.
void ClearLastErrorMessage();

/// `text` as valid UTF-8: every byte that does not belong to a well-formed UTF-8 sequence
/// (overlong forms, surrogates and code points past U+10FFFF included) written as \xNN. Every
/// message collops stores passes through it (Error, SetLastErrorMessage), so one that quotes a
/// file's or a user's bytes never breaks a JSON or Python string built from it.
std::string ValidUtf8(std::string text);

/// The one exception type used inside collops. Public entry points catch it and turn it into a
/// Status plus LastErrorMessage(); internal code throws it instead of threading Status through
/// every frame.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(ValidUtf8(message)), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

namespace detail {

// Appends `piece` as `std::ostream << piece` would write it. Text, characters and integers are
// appended directly: Concat builds names on every call of some hot paths (OperationTorch's slot
// names), where constructing an ostringstream costs more than the collective it names.
template <class T>
void AppendStreamed(std::string& out, const T& piece) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> ||
                std::is_same_v<U, unsigned char>) {
    out.push_back(static_cast<char>(piece));  // a character, as ostream writes char types
  } else if constexpr (std::is_array_v<T> &&
                       std::is_same_v<std::remove_cv_t<std::remove_extent_t<T>>, char>) {
    out.append(piece);  // a string literal or char buffer, up to its NUL as ostream writes it
  } else if constexpr (std::is_same_v<U, const char*> || std::is_same_v<U, char*>) {
    if (piece != nullptr) out.append(piece);  // ostream writes nothing for a null pointer
  } else if constexpr (std::is_convertible_v<const T&, std::string_view> && !std::is_pointer_v<U>) {
    out.append(std::string_view(piece));  // std::string, std::string_view
  } else if constexpr (std::is_integral_v<U> && !std::is_same_v<U, bool>) {
    out.append(std::to_string(piece));
  } else {
    std::ostringstream stream;  // floats, bool, pointers, enums, torch types: ostream's format
    stream << piece;
    out.append(stream.str());
  }
}

}  // namespace detail

/// Builds a message from streamable pieces, each as `std::ostream <<` writes it:
/// Concat("rank ", 3, " of ", 4).
template <class... Args>
std::string Concat(Args&&... args) {
  std::string out;
  (detail::AppendStreamed(out, args), ...);
  return out;
}

/// Text another process wrote into a fixed field of `capacity` bytes, for a message: its bytes up
/// to the first NUL (all `capacity` of them when it has none, never one past them), printable
/// ASCII as is and every other byte as \xNN.
std::string PeerText(const char* data, size_t capacity);

/// Throws Error(status, Concat(args...)).
template <class... Args>
[[noreturn]] void Fail(Status status, Args&&... args) {
  throw Error(status, Concat(std::forward<Args>(args)...));
}

/// Runs body(), returning NO_ERROR or the Status of the Error (or ERROR_INTERNAL_ERROR for any
/// other exception) and recording the message for LastErrorMessage().
template <class Body>
Status Guarded(Body&& body) {
  try {
    body();
    ClearLastErrorMessage();
    return NO_ERROR;
  } catch (const Error& e) {
    SetLastErrorMessage(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    SetLastErrorMessage("out of host memory");
    return ERROR_OUT_OF_HOST_MEMORY;
  } catch (const std::exception& e) {
    SetLastErrorMessage(Concat("internal error: ", e.what()));
    return ERROR_INTERNAL_ERROR;
  }
}

}  // namespace collops
