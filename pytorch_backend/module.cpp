// `import mimatrix_torch`: the process group's Python class, and the backend "mimatrix"
// registered with torch.distributed, so that init_process_group("mimatrix") makes one.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/python.h>

#include "process_group.hpp"

namespace py = pybind11;
using mimatrix::torch_backend::process_group;

PYBIND11_MODULE(mimatrix_torch, m) {
  m.doc() = "mimatrix as a torch.distributed backend: init_process_group(\"mimatrix\")";
  py::module_::import("torch.distributed");  // c10d's ProcessGroup and Store, the bases named below
  py::class_<process_group, c10d::ProcessGroup, c10::intrusive_ptr<process_group>>(m, "ProcessGroupMimatrix")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<process_group>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return c10::make_intrusive<process_group>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
  py::module_::import("torch.distributed").attr("Backend").attr("register_backend")("mimatrix",
                                                                                    m.attr("create_process_group"));
}
