// The Python methods of OperationTorch that skip torch's custom-class call
// (operation_torch_methods.cpp).
#pragma once

namespace collops {

/// Puts the descriptors execute, execute_out and set_varaintpack_param on torch.ScriptObject: for
/// an OperationTorch object they give methods that run those methods without torch's custom-class
/// call; for any other object, ScriptObject.__getattr__ answers as before. Needs the GIL;
/// calling it again replaces them.
void InstallOperationTorchMethods();

}  // namespace collops
