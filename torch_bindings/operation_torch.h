// torch.classes.OperationTorch.OperationTorch (operation_torch.cpp) as other code of the binding
// reaches it: the object a ScriptObject holds, and the methods Python calls on every step, for
// the Python methods that skip torch's custom-class call (operation_torch_methods.cpp).
#pragma once

#include <ATen/Tensor.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace collops {

class OperationTorch;

/// The OperationTorch that `object` holds; null when `object` is of another class.
OperationTorch* HeldOperationTorch(const c10::ivalue::Object& object);

/// OperationTorch.execute and execute_out, with their errors raised as torch errors.
std::vector<at::Tensor> ExecuteOperationTorch(OperationTorch& op,
                                              const std::vector<at::Tensor>& ins);
void ExecuteOutOperationTorch(OperationTorch& op, const std::vector<at::Tensor>& ins,
                              const std::vector<at::Tensor>& outs);
/// OperationTorch.set_varaintpack_param: the result JSON.
std::string SetVaraintPackParamOfOperationTorch(OperationTorch& op, const std::string& json);

}  // namespace collops
