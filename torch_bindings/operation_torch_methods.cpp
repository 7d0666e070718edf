// OperationTorch's execute, execute_out and set_varaintpack_param called from Python without
// torch's custom-class call.
//
// torch calls a custom class's method from Python through ScriptObject.__getattr__: a method
// object made on every call, the arguments converted to IValues against the method's schema,
// the method run from an interpreter stack, the result converted back. For a small tensor that
// costs more than the collective itself. InstallOperationTorchMethods puts three descriptors,
// execute, execute_out and set_varaintpack_param (which a MoE layer calls before every
// AllToAllVV2), on torch.ScriptObject:
// - for an OperationTorch object each gives a builtin method that runs the same C++ method as
//   torch's call and returns what it returns: the execute methods take the tensors of lists and
//   run without the GIL (as torch's call does); set_varaintpack_param takes a str and keeps the
//   GIL (it never waits);
// - for an object of any other class it raises AttributeError, and Python falls back to
//   ScriptObject.__getattr__ exactly as without it;
// - called on the class (torch.ScriptObject.execute(op, inputs)) it calls the method of its first
//   argument.
// A call the builtin method does not take as it is goes to torch's own method, so it behaves and
// fails as it always did: keywords, another number of arguments, anything but a list (a str for
// set_varaintpack_param), an item that is not exactly a torch.Tensor (a subclass may dispatch
// through __torch_function__), and every call while torch.jit.trace records one.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/api/object.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <exception>
#include <string>
#include <vector>

#include "operation_torch.h"
#include "operation_torch_methods.h"

namespace collops {
namespace {

namespace py = pybind11;

// The OperationTorch that `self` holds; null when self is not a ScriptObject of that class.
OperationTorch* OperationTorchOf(PyObject* self) {
  // torch's registration of ScriptObject (torch::jit::Object), looked up once: an object of
  // exactly that type gives its value without pybind11's search by type on every call.
  static const py::detail::type_info* const kScriptObject =
      py::detail::get_type_info(typeid(torch::jit::Object));
  const torch::jit::Object* object = nullptr;
  if (kScriptObject != nullptr && Py_TYPE(self) == kScriptObject->type) {
    auto* instance = reinterpret_cast<py::detail::instance*>(self);
    object = static_cast<const torch::jit::Object*>(
        instance->get_value_and_holder(kScriptObject).value_ptr());
  } else {  // a subclass (ScriptModule), or no ScriptObject at all
    py::detail::make_caster<torch::jit::Object> caster;
    if (!caster.load(self, /*convert=*/false)) return nullptr;
    object = &py::detail::cast_op<const torch::jit::Object&>(caster);
  }
  return object != nullptr ? HeldOperationTorch(*object->_ivalue()) : nullptr;
}

// The tensors of `list`: false unless it is a list of exact torch.Tensor objects.
bool TensorsOf(PyObject* list, std::vector<at::Tensor>& tensors) {
  if (!PyList_CheckExact(list)) return false;
  const Py_ssize_t n = PyList_GET_SIZE(list);
  tensors.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (!THPVariable_CheckExact(item)) return false;
    tensors.push_back(THPVariable_Unpack(item));
  }
  return true;
}

// torch's own method `name` of `self`, called with the arguments as they came.
PyObject* CallTorchMethod(PyObject* self, const char* name, PyObject* const* args, size_t nargsf,
                          PyObject* kwnames) {
  // ScriptObject.__getattr__ is not one of these descriptors: torch's method object.
  PyObject* method = PyObject_CallMethod(self, "__getattr__", "s", name);
  if (method == nullptr) return nullptr;
  PyObject* result = PyObject_Vectorcall(method, args, nargsf, kwnames);
  Py_DECREF(method);
  return result;
}

// The OperationTorch of a call the builtin method may run itself: `arity` positional arguments,
// no keywords, no trace being recorded; null for any other call.
OperationTorch* TakenBy(PyObject* self, Py_ssize_t nargs, PyObject* kwnames, Py_ssize_t arity) {
  if (nargs != arity || kwnames != nullptr || torch::jit::tracer::isTracing()) return nullptr;
  return OperationTorchOf(self);
}

// Whether a call of `self` with these arguments is one the builtin method runs itself; fills
// `op` and the tensors of the first `lists` arguments when it is.
bool TakesCall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
               Py_ssize_t lists, OperationTorch*& op, std::vector<at::Tensor>* tensors) {
  op = TakenBy(self, nargs, kwnames, lists);
  if (op == nullptr) return false;
  for (Py_ssize_t i = 0; i < lists; ++i) {
    if (!TensorsOf(args[i], tensors[i])) return false;
  }
  return true;
}

PyObject* Execute(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  OperationTorch* op = nullptr;
  std::vector<at::Tensor> ins;
  if (!TakesCall(self, args, nargs, kwnames, 1, op, &ins)) {
    return CallTorchMethod(self, "execute", args, static_cast<size_t>(nargsf), kwnames);
  }
  std::vector<at::Tensor> outs;
  {
    py::gil_scoped_release noGil;
    outs = ExecuteOperationTorch(*op, ins);
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(outs.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < outs.size(); ++i) {
    PyObject* tensor = THPVariable_Wrap(std::move(outs[i]));
    if (tensor == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), tensor);
  }
  return list;
  END_HANDLE_TH_ERRORS
}

PyObject* ExecuteOut(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  OperationTorch* op = nullptr;
  std::vector<at::Tensor> lists[2];
  if (!TakesCall(self, args, nargs, kwnames, 2, op, lists)) {
    return CallTorchMethod(self, "execute_out", args, static_cast<size_t>(nargsf), kwnames);
  }
  {
    py::gil_scoped_release noGil;
    ExecuteOutOperationTorch(*op, lists[0], lists[1]);
  }
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// set_varaintpack_param(json): with the GIL held, as it never waits for anything.
PyObject* SetVaraintPackParam(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                              PyObject* kwnames) {
  HANDLE_TH_ERRORS
  OperationTorch* op = TakenBy(self, PyVectorcall_NARGS(nargsf), kwnames, 1);
  Py_ssize_t size = 0;
  const char* text = op != nullptr && PyUnicode_CheckExact(args[0])
                         ? PyUnicode_AsUTF8AndSize(args[0], &size)
                         : nullptr;
  if (text == nullptr) {
    PyErr_Clear();  // a str UTF-8 cannot hold: torch's method says what it says of one
    return CallTorchMethod(self, "set_varaintpack_param", args, static_cast<size_t>(nargsf),
                           kwnames);
  }
  const std::string result =
      SetVaraintPackParamOfOperationTorch(*op, std::string(text, static_cast<size_t>(size)));
  return PyUnicode_FromStringAndSize(result.data(), static_cast<Py_ssize_t>(result.size()));
  END_HANDLE_TH_ERRORS
}

// The functions' PyMethodDef, for the builtin methods the descriptors bind.
PyMethodDef kExecute = {"execute", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(Execute)),
                        METH_FASTCALL | METH_KEYWORDS, "OperationTorch.execute(inputs) -> outputs"};
PyMethodDef kExecuteOut = {
    "execute_out", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(ExecuteOut)),
    METH_FASTCALL | METH_KEYWORDS, "OperationTorch.execute_out(inputs, outputs)"};
PyMethodDef kSetVaraintPackParam = {
    "set_varaintpack_param",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(SetVaraintPackParam)),
    METH_FASTCALL | METH_KEYWORDS, "OperationTorch.set_varaintpack_param(json) -> result json"};

// A descriptor on torch.ScriptObject: a builtin method bound to an OperationTorch object,
// AttributeError (so ScriptObject.__getattr__ answers) for any other object.
struct MethodDescriptor {
  PyObject_HEAD PyMethodDef* def;
};

PyObject* DescriptorGet(PyObject* descriptor, PyObject* object, PyObject* /*type*/) {
  auto* self = reinterpret_cast<MethodDescriptor*>(descriptor);
  if (object == nullptr || object == Py_None) {
    Py_INCREF(descriptor);
    return descriptor;
  }
  OperationTorch* op = nullptr;
  try {
    op = OperationTorchOf(object);
  } catch (const std::exception&) {  // no C++ exception may leave a CPython slot
    op = nullptr;
  }
  if (op == nullptr) {
    PyErr_SetString(PyExc_AttributeError, self->def->ml_name);
    return nullptr;
  }
  return PyCFunction_NewEx(self->def, object, nullptr);
}

// A data descriptor, so that tools which read attributes of objects without running Python
// (torch.compile's tracing) resolve it through the object's attribute lookup, as Python does,
// rather than take the descriptor itself for the attribute. Assignments never come here:
// ScriptObject.__setattr__ handles every one.
int DescriptorSet(PyObject* descriptor, PyObject* /*object*/, PyObject* /*value*/) {
  PyErr_Format(PyExc_AttributeError, "%s is read-only",
               reinterpret_cast<MethodDescriptor*>(descriptor)->def->ml_name);
  return -1;
}

// descriptor(object, *args): the method of `object` called with args, as a function on a class
// is called (torch.ScriptObject.execute(op, inputs), and what tools that look attributes up on
// the type, such as torch.compile, do). Any object but an OperationTorch gets torch's method.
PyObject* DescriptorCall(PyObject* descriptor, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<MethodDescriptor*>(descriptor);
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n < 1) {
    PyErr_Format(PyExc_TypeError, "%s() needs the object it is a method of", self->def->ml_name);
    return nullptr;
  }
  const py::object bound = py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(self->def, PyTuple_GET_ITEM(args, 0), nullptr));
  if (!bound) return nullptr;
  const py::object rest = py::reinterpret_steal<py::object>(PyTuple_GetSlice(args, 1, n));
  if (!rest) return nullptr;
  return PyObject_Call(bound.ptr(), rest.ptr(), kwargs);
}

void DescriptorDealloc(PyObject* descriptor) {
  PyTypeObject* type = Py_TYPE(descriptor);
  PyObject_Free(descriptor);
  Py_DECREF(type);  // a heap type's instances hold a reference to it
}

// The descriptors' type, made once.
PyTypeObject* MethodDescriptorType() {
  static PyType_Slot slots[] = {
      {Py_tp_descr_get, reinterpret_cast<void*>(DescriptorGet)},
      {Py_tp_descr_set, reinterpret_cast<void*>(DescriptorSet)},
      {Py_tp_call, reinterpret_cast<void*>(DescriptorCall)},
      {Py_tp_dealloc, reinterpret_cast<void*>(DescriptorDealloc)},
      {Py_tp_doc, const_cast<char*>("A method of OperationTorch objects (collops).")},
      {0, nullptr}};
  static PyType_Spec spec = {"collops._c10d.OperationTorchMethod",
                             static_cast<int>(sizeof(MethodDescriptor)), 0, Py_TPFLAGS_DEFAULT,
                             slots};
  static PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  return reinterpret_cast<PyTypeObject*>(type);
}

}  // namespace

void InstallOperationTorchMethods() {
  PyTypeObject* type = MethodDescriptorType();
  const py::object scriptObject = py::module_::import("torch").attr("ScriptObject");
  for (PyMethodDef* def : {&kExecute, &kExecuteOut, &kSetVaraintPackParam}) {
    auto* descriptor = PyObject_New(MethodDescriptor, type);
    if (descriptor == nullptr) throw py::error_already_set();
    descriptor->def = def;
    const py::object owned =
        py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(descriptor));
    if (PyObject_SetAttrString(scriptObject.ptr(), def->ml_name, owned.ptr()) < 0) {
      throw py::error_already_set();
    }
  }
}

}  // namespace collops
